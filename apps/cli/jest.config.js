// Two workers even on a 2-core machine, as the engine and tools suites: these tests mostly wait on
// the kail processes they start (node start-up, model writing, servers coming up), so a second
// worker shortens the run (measured on the 2-vCPU CI-like VM, clean model cache: 245 s -> 153 s).
// Every test starts processes, whose start-up alone takes seconds on a loaded machine: 60 s per
// test unless one says otherwise, not jest's 5 s.
const os = require('node:os');
module.exports = require('../../jest.preset.js')(__dirname, {
  maxWorkers: Math.max(2, os.availableParallelism() - 1),
  testTimeout: 60_000,
});
