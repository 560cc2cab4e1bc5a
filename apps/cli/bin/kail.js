#!/usr/bin/env node
'use strict';
const path = require('node:path');
const fs = require('node:fs');

const main = path.join(__dirname, '../dist/main.js');
if (!fs.existsSync(main)) {
  process.stderr.write(
    `kail: the CLI is not built (${main} is missing).\n` +
      'Run the set-up first: `bash tools/setup.sh` (or `npx nx run cli:build`).\n',
  );
  process.exit(1);
}
require(main);
