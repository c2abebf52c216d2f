// CPU time a process has used (user + system, all its threads), from /proc: a steadier figure
// than throughput on a small shared machine, where scheduling noise moves req/s by ±15%.
import { readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100;

export function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the ") ".
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}
