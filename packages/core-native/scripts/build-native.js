#!/usr/bin/env node
// Builds the Node addon with cmake-js (the Nx target `core-native:build-native` runs this).
// Node's headers come from the running Node installation when it ships them (Debian's nodejs and
// the official tarballs do), so the build needs no network; otherwise cmake-js downloads them.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkgDir = path.resolve(__dirname, '..');
const args = process.argv.slice(2);
const debug = args.includes('--debug');
const env = { ...process.env };

const nodePrefix = path.resolve(path.dirname(process.execPath), '..');
if (!env.npm_config_nodedir && fs.existsSync(path.join(nodePrefix, 'include/node/node_api.h'))) {
  env.npm_config_nodedir = nodePrefix;
}

const napiDir = path.dirname(require.resolve('node-addon-api/package.json', { paths: [pkgDir] }));
const cmakeJs = require.resolve('cmake-js/bin/cmake-js', { paths: [pkgDir] });
const parallel = String(Math.max(1, require('node:os').availableParallelism?.() ?? 2));
const cmd = [
  cmakeJs, 'build', '-d', pkgDir, '-O', path.join(pkgDir, 'build/addon'), '-p', parallel,
  `--CDNODE_ADDON_API_DIR=${napiDir}`,
  ...(debug ? ['--debug'] : []),
  ...args.filter((a) => a.startsWith('--CD')),
];
if (process.env.KAIL_CUDA === '0' || process.env.KAIL_CUDA === 'OFF') cmd.push('--CDKAIL_CUDA=OFF');
const r = spawnSync(process.execPath, cmd, { stdio: 'inherit', env });
if (r.status !== 0) {
  console.error(`core-native: addon build failed (cmake-js exit ${r.status}). ` +
    'Needs cmake >= 3.18, a C++17 compiler and Node headers (install Debian packages cmake g++ nodejs-dev, ' +
    'or set npm_config_nodedir to a Node source/headers directory).');
  process.exit(r.status ?? 1);
}
