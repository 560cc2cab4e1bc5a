// Lets a plain `node` child process run this workspace's TypeScript sources, as jest does: .ts
// files compiled on require by SWC (no type checks), workspace packages resolved to their sources
// when node runs with --conditions=@kailstream/source. Used by the semantic fuzz harness, whose
// workers must be separate processes (a crash or a hang must not take the harness with it).
'use strict';
const fs = require('node:fs');
const swc = require('@swc/core');

require.extensions['.ts'] = function compileTs(module, filename) {
  const out = swc.transformSync(fs.readFileSync(filename, 'utf8'), {
    filename,
    jsc: { parser: { syntax: 'typescript', decorators: false }, target: 'es2022' },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  });
  module._compile(out.code, filename);
};
