#!/usr/bin/env node
// Sums jest JSON results and CTest logs into one closing line: "tests: N passed, N failed, N skipped".
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const dir = process.argv[2] ?? '.test-results';
let passed = 0, failed = 0, skipped = 0;
const rows = [];
// The closing lines are often all a CI log keeps: name each failure there with its first lines.
const failures = [];
const plain = (t) => String(t).replace(/\u001b\[[0-9;]*m/g, '');
const head = (t, n) => plain(t).split('\n').map((l) => l.trimEnd()).filter(Boolean).slice(0, n).map((l) => `      ${l}`).join('\n');
for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
  const p = path.join(dir, f);
  if (f.startsWith('jest-') && f.endsWith('.json')) {
    const r = JSON.parse(fs.readFileSync(p, 'utf8'));
    passed += r.numPassedTests; failed += r.numFailedTests + (r.numRuntimeErrorTestSuites ?? 0); skipped += r.numPendingTests + (r.numTodoTests ?? 0);
    for (const suite of r.testResults ?? []) {
      const file = path.relative(process.cwd(), suite.name ?? suite.testFilePath ?? '?');
      const bad = (suite.assertionResults ?? []).filter((a) => a.status === 'failed');
      for (const a of bad) failures.push(`  ${file} > ${a.fullName}\n${head((a.failureMessages ?? []).join('\n'), 4)}`);
      if (bad.length === 0 && suite.status === 'failed') failures.push(`  ${file} (suite failed)\n${head(suite.message ?? suite.failureMessage ?? '', 4)}`);
    }
    rows.push(`${f.slice(5, -5).padEnd(14)} jest   ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests} skipped`);
  } else if (f.startsWith('ctest') && f.endsWith('.log')) {
    const text = fs.readFileSync(p, 'utf8');
    const m = text.match(/(\d+)% tests passed, (\d+) tests failed out of (\d+)/);
    if (!m) { failed++; rows.push(`${f.padEnd(14)} ctest  did not finish`); continue; }
    for (const line of text.split('\n')) if (/^\s*\d+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)/.test(line)) failures.push(`  ${f}: ${line.trim()}`);
    const total = Number(m[3]), nfail = Number(m[2]);
    const nskip = (text.match(/\*\*\*Skipped/g) ?? []).length;
    passed += total - nfail - nskip; failed += nfail; skipped += nskip;
    rows.push(`${f.slice(0, -4).padEnd(14)} ctest  ${total - nfail - nskip} passed, ${nfail} failed, ${nskip} skipped`);
  }
}
console.log('\n' + rows.join('\n'));
if (failures.length) {
  console.log(`\nfailed (${failures.length}):\n` + failures.slice(0, 12).join('\n'));
  if (failures.length > 12) console.log(`  … and ${failures.length - 12} more (.test-results/)`);
}
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
