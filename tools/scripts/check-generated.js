#!/usr/bin/env node
// Regenerates the ts-proto code into a temporary directory and fails if it differs from the
// committed packages/proto/src/gen (run by CI through `nx run proto:check-generated`).
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '../..');
const committed = path.join(root, 'packages/proto/src/gen');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-proto-'));
const template = fs.readFileSync(path.join(root, 'proto/buf.gen.yaml'), 'utf8');
const tmpTemplate = path.join(tmp, 'buf.gen.yaml');
fs.writeFileSync(
  tmpTemplate,
  template
    .replace('../node_modules/.bin/protoc-gen-ts_proto', path.join(root, 'node_modules/.bin/protoc-gen-ts_proto'))
    .replace('../packages/proto/src/gen', path.join(tmp, 'gen')),
);
const buf = path.join(root, 'node_modules/.bin/buf');
const r = spawnSync(buf, ['generate', '--template', tmpTemplate], { cwd: path.join(root, 'proto'), stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);

function list(dir, base = dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? list(p, base) : [path.relative(base, p)];
  });
}
const a = new Set(list(committed));
const b = new Set(list(path.join(tmp, 'gen')));
const problems = [];
for (const f of a) if (!b.has(f)) problems.push(`stale (no longer generated): ${f}`);
for (const f of b) {
  if (!a.has(f)) problems.push(`missing (not committed): ${f}`);
  else if (fs.readFileSync(path.join(committed, f), 'utf8') !== fs.readFileSync(path.join(tmp, 'gen', f), 'utf8'))
    problems.push(`differs: ${f}`);
}
fs.rmSync(tmp, { recursive: true, force: true });
if (problems.length) {
  console.error('Generated gRPC code is out of date with proto/:\n  ' + problems.join('\n  ') +
    '\nRun: npx nx run proto:generate, then commit packages/proto/src/gen.');
  process.exit(1);
}
console.log(`proto: generated code matches proto/ (${b.size} files)`);
