// `intake/client`'s types as a TypeScript project of its own sees them: package.json's exports
// name declaration files built from the sources (dist/src/client/*.d.ts). They named the sources
// themselves, whose imports end in `.ts`, and an ordinary project (NodeNext, without
// allowImportingTsExtensions, which only a project that emits nothing may set) failed to compile
// with 19 errors, skipLibCheck or not (found by a review). This repository resolves them to the
// sources through the `intake-source` condition (tsconfig.json's customConditions).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './helpers/server.ts';

test('a NodeNext project of its own compiles against intake/client, and its types are enforced', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'intake-consumer-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const modules = join(dir, 'node_modules');
  mkdirSync(join(modules, '@sinclair'), { recursive: true });
  mkdirSync(join(modules, '@types'), { recursive: true });
  symlinkSync(ROOT, join(modules, 'intake'));
  symlinkSync(join(ROOT, 'node_modules/@sinclair/typebox'), join(modules, '@sinclair/typebox'));
  symlinkSync(join(ROOT, 'node_modules/@types/node'), join(modules, '@types/node'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, skipLibCheck: true, noEmit: true, types: ['node'] }, include: ['main.ts', 'readme-example.ts'] }),
  );
  // The README's client example, as written: it used names it never defined, and did not
  // compile (found by a review, 2026-11-29).
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = readme.indexOf('### The client: `intake/client`');
  const start = readme.indexOf('```ts\n', section) + '```ts\n'.length;
  assert.ok(section !== -1 && start > section, 'the README has its client example');
  writeFileSync(join(dir, 'readme-example.ts'), `${readme.slice(start, readme.indexOf('```', start))}\nexport {};\n`);
  writeFileSync(
    join(dir, 'main.ts'),
    [
      "import { createClient, IntakeRequestError, type IntakeClient } from 'intake/client';",
      "const c: IntakeClient = createClient({ url: 'http://127.0.0.1:1', serviceKey: 'k' });",
      "const done: Promise<{ success: true }> = c.upsertProduct({ id: 'p', name: 'n', price: 1 });",
      'void done;',
      '// @ts-expect-error: a product without its id',
      "void c.upsertProduct({ name: 'n' });",
      "void c.identify({ did: 'd', timestamp: 1, clientCustomerId: 'c' });",
      "void c.identify({ did: 'd', timestamp: 1, info: [] });",
      '// @ts-expect-error: an identify without clientCustomerId or info (the server answers 422 object.missing)',
      "void c.identify({ did: 'd', timestamp: 1 });",
      'void IntakeRequestError;',
      'await c.close();',
      '',
    ].join('\n'),
  );
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8', stdio: 'pipe' });
  } catch (error) {
    const { stdout, stderr } = error as { stdout: string; stderr: string };
    assert.fail(`the project did not compile:\n${stdout}${stderr}`);
  }
});
