// NDJSON to stdout in ~64 KiB writes, waiting for 'drain' so a slow reader (a pipe to gzip, a
// network copy) bounds memory instead of buffering the whole export.
const CHUNK_BYTES = 64 * 1024;

export class NdjsonWriter {
  private buffer: string[] = [];
  private bytes = 0;

  constructor(private readonly out: NodeJS.WritableStream = process.stdout) {}

  async write(value: unknown): Promise<void> {
    const line = JSON.stringify(value) + '\n';
    this.buffer.push(line);
    this.bytes += line.length;
    if (this.bytes >= CHUNK_BYTES) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.buffer.length === 0) return;
    const chunk = this.buffer.join('');
    this.buffer = [];
    this.bytes = 0;
    if (!this.out.write(chunk)) await new Promise<void>((resolve) => this.out.once('drain', () => resolve()));
  }
}
