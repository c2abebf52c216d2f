// CPU time a process has used, all its threads, from /proc/<pid>/stat (utime + stime). The
// benches divide a run's CPU time by the requests answered: on 2 cores shared with the load
// generator that says more about the server than a throughput ratio does.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const CLOCK_TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces) start with field 3, the state.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[14 - 3]);
  const stime = Number(fields[15 - 3]);
  return (utime + stime) / CLOCK_TICKS_PER_SECOND;
}

/** The same, split into user and kernel (system) time, in seconds. */
export function cpuSplitSeconds(pid: number): { user: number; sys: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(fields[14 - 3]) / CLOCK_TICKS_PER_SECOND, sys: Number(fields[15 - 3]) / CLOCK_TICKS_PER_SECOND };
}

/** CPU seconds (user + kernel) of one thread `tid` of process `pid` (the main thread: tid = pid). */
export function threadCpuSeconds(pid: number, tid: number): number {
  const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[14 - 3]) + Number(fields[15 - 3])) / CLOCK_TICKS_PER_SECOND;
}
