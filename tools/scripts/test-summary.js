#!/usr/bin/env node
// Sums jest JSON results and CTest logs into one closing line: "tests: N passed, N failed, N skipped".
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const dir = process.argv[2] ?? '.test-results';
let passed = 0, failed = 0, skipped = 0;
const rows = [];
for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
  const p = path.join(dir, f);
  if (f.startsWith('jest-') && f.endsWith('.json')) {
    const r = JSON.parse(fs.readFileSync(p, 'utf8'));
    passed += r.numPassedTests; failed += r.numFailedTests + (r.numRuntimeErrorTestSuites ?? 0); skipped += r.numPendingTests + (r.numTodoTests ?? 0);
    rows.push(`${f.slice(5, -5).padEnd(14)} jest   ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests} skipped`);
  } else if (f.startsWith('ctest') && f.endsWith('.log')) {
    const text = fs.readFileSync(p, 'utf8');
    const m = text.match(/(\d+)% tests passed, (\d+) tests failed out of (\d+)/);
    if (!m) { failed++; rows.push(`${f.padEnd(14)} ctest  did not finish`); continue; }
    const total = Number(m[3]), nfail = Number(m[2]);
    const nskip = (text.match(/\*\*\*Skipped/g) ?? []).length;
    passed += total - nfail - nskip; failed += nfail; skipped += nskip;
    rows.push(`${f.slice(0, -4).padEnd(14)} ctest  ${total - nfail - nskip} passed, ${nfail} failed, ${nskip} skipped`);
  }
}
console.log('\n' + rows.join('\n'));
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
