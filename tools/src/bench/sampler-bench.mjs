#!/usr/bin/env node
// Milliseconds per token of the sampler chains (packages/engine/src/sampling) over a large
// vocabulary of synthetic logits, history of 2,000 tokens: the fast chain and each sampler the
// full chain (llama.cpp's stage by stage) adds. Needs the engine built (npx nx run engine:build).
//   node tools/src/bench/sampler-bench.mjs [--vocab 151936] [--steps 40]
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { createSampler } = require('../../../packages/engine/dist/sampling/sampler.js');
const { benchArgs } = require('../../dist/bench/args.js');
const values = benchArgs('sampler-bench', { vocab: { type: 'string', default: '151936' }, steps: { type: 'string', default: '40' } });
const n = Number(values.vocab);
const steps = Number(values.steps);

let s = 1;
const rnd = () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648;
const rows = Array.from({ length: 8 }, () => Float32Array.from({ length: n }, () => (rnd() + rnd() + rnd() - 1.5) * 6));
const history = Array.from({ length: 2000 }, () => Math.floor(rnd() * 1000));
const cases = {
  'default (top-k 40, top-p, min-p)': { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 },
  'top-p alone (whole vocabulary)': { temperature: 0.8, topP: 0.95 },
  'DRY + defaults': { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, dryMultiplier: 0.8, dryPenaltyLastN: -1, dryBreakers: [[5], [7]] },
  'XTC + defaults': { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, xtcProbability: 0.5 },
  'dynamic temperature + top-k 40': { temperature: 0.8, dynatempRange: 0.5, topK: 40 },
  'typical + top-k 40': { temperature: 0.8, topK: 40, typicalP: 0.9 },
  'typical (whole vocabulary)': { temperature: 0.8, typicalP: 0.9 },
  'top-n-sigma (whole vocabulary)': { temperature: 0.8, topNSigma: 1 },
  'Mirostat 2 (whole vocabulary)': { temperature: 0.8, mirostat: 2 },
};
console.log(`vocabulary ${n}, ${steps} tokens each, node ${process.version}`);
for (const [name, p] of Object.entries(cases)) {
  const smp = createSampler({ ...p, seed: 1 });
  for (let i = 0; i < 5; i++) smp.sample(rows[i % 8], history);
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) smp.sample(rows[i % 8], history);
  console.log(`${name.padEnd(36)} ${((performance.now() - t0) / steps).toFixed(2)} ms/token`);
}
