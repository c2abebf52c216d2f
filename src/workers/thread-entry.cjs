// Starts a worker thread on one of our modules (workerData.entry, a file URL). CommonJS on
// purpose: under tsx (development, tests) a worker's own ESM entry does not get tsx's hooks but
// require() does, and tsx compiles the TypeScript module for it (piscina loads mapping-task.ts
// the same way). Compiled JavaScript is ESM, which require() refuses: import() loads it then.
'use strict';
const { workerData } = require('node:worker_threads');
const { fileURLToPath } = require('node:url');

const entry = workerData.entry;
try {
  require(fileURLToPath(entry));
} catch (error) {
  if (error === null || typeof error !== 'object' || error.code !== 'ERR_REQUIRE_ESM') throw error;
  import(entry).catch((failure) => {
    // Rethrown outside the promise so the worker ends with it and the main thread hears.
    setImmediate(() => {
      throw failure;
    });
  });
}
