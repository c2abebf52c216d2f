// The README's error list and configuration table are kept in step with the code's tables.
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ERRORS } from '../src/http/errors.ts';
import { SETTINGS } from '../src/config/settings.ts';
import { ROOT } from './helpers/server.ts';

const readme = readFileSync(`${ROOT}README.md`, 'utf8');

/** Rows of the first Markdown table after `heading`, as arrays of trimmed cells. */
function tableAfter(heading: string): string[][] {
  const start = readme.indexOf(`\n${heading}\n`);
  assert.notEqual(start, -1, `README has "${heading}"`);
  const lines = readme.slice(start).split('\n');
  const first = lines.findIndex((l) => l.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(line.split('|').slice(1, -1).map((c) => c.trim()));
  }
  return rows;
}

const unquote = (cell: string) => cell.replace(/`/g, '');

test('README "Errors" lists exactly the error table (type and status)', () => {
  const documented = tableAfter('## Errors').map(([type, status]) => `${unquote(type!)} ${status}`);
  const actual = Object.values(ERRORS).map((e) => `${e.type} ${e.status}`);
  assert.deepEqual(documented.sort(), actual.sort());
});

test('README "Configuration" lists every setting with its variable, flag and default', () => {
  const documented = tableAfter('## Configuration').map(([env, flag, def]) => [unquote(env!), unquote(flag!), unquote(def!)]);
  const actual = SETTINGS.map((s) => [s.env, s.flag, s.defaultLabel ?? (s.defaultValue === '' ? '(none)' : String(s.defaultValue))]);
  assert.deepEqual(documented, actual);
});
