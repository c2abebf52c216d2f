// test/batch.test.ts again with edge threads (HTTP_THREADS=2): every server it starts inherits the
// setting. Set before the import, which is dynamic so that it runs after (README, Development).
process.env.HTTP_THREADS = '2';
await import('../batch.test.ts');
