// Two workers even on a 2-core machine: these suites spend much of their time in model writing,
// process start-up and I/O, so a second worker shortens the run (measured on the 2-vCPU CI-like VM,
// clean model cache: engine 291 s -> 209 s, tools 495 s -> 430 s). The API suite, which
// times servers, keeps jest's default of one worker there (the CLI suite runs two as well).
const os = require('node:os');
module.exports = require('../../jest.preset.js')(__dirname, {
  maxWorkers: Math.max(2, os.availableParallelism() - 1),
});
