// A failed fsync, for real: an LD_PRELOAD shim (compiled here from C) makes the next fsync or
// fdatasync of the process return EIO once a flag file appears, then removes the flag. Null
// where no C compiler is installed (the caller skips its test).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SHIM = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
static int failNow(void) {
  const char *flag = getenv("INTAKE_TEST_EIO_FLAG");
  return flag != NULL && unlink(flag) == 0;
}
int fsync(int fd) {
  static int (*real)(int) = NULL;
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  if (failNow()) { errno = EIO; return -1; }
  return real(fd);
}
int fdatasync(int fd) {
  static int (*real)(int) = NULL;
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  if (failNow()) { errno = EIO; return -1; }
  return real(fd);
}
`;

export interface EioShim {
  /** The environment a server needs: LD_PRELOAD and INTAKE_TEST_EIO_FLAG. */
  env: Record<string, string>;
  /** Create it and the process's next fsync fails (EIO); the shim removes it then. */
  flag: string;
}

/** The shim, or the reason it could not be built. */
export function buildEioShim(): EioShim | { skip: string } {
  const dir = mkdtempSync(join(tmpdir(), 'intake-eio-'));
  writeFileSync(join(dir, 'shim.c'), SHIM);
  const built = spawnSync('cc', ['-shared', '-fPIC', '-O1', '-o', join(dir, 'shim.so'), join(dir, 'shim.c'), '-ldl'], { encoding: 'utf8' });
  if (built.error !== undefined || built.status !== 0) return { skip: `no C compiler here: ${built.error?.message ?? built.stderr}` };
  const flag = join(dir, 'fail-next-sync');
  return { env: { LD_PRELOAD: join(dir, 'shim.so'), INTAKE_TEST_EIO_FLAG: flag }, flag };
}
