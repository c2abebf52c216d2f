// test/request-ids-rate-limits.test.ts again with edge threads (HTTP_THREADS=2): every server it starts inherits the
// setting. Set before the import, which is dynamic so that it runs after (README, Development).
process.env.HTTP_THREADS = '2';
await import('../request-ids-rate-limits.test.ts');
