// How benches end: a Markdown table on stdout (progress and details go to stderr).
export function printTable(title: string, headers: readonly string[], rows: readonly string[], notes: readonly string[] = []): void {
  process.stdout.write(
    [title, '', `| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows, '', ...notes, ...(notes.length > 0 ? [''] : [])].join('\n'),
  );
}

/** Runs a bench's main; a failure prints its stack and exits 1. */
export function runBench(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  });
}
