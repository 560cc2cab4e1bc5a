#!/usr/bin/env node
// llama.cpp (node-llama-cpp 3.22.1, CPU build) timed the way `kail bench` times kail: prompt
// processing of N random tokens, then M single-token decode steps feeding the greedy token or a
// random one. Prints one JSON line. Run as a script file (node-llama-cpp is ESM):
//   node tools/src/bench/llama-bench.mjs --model F --pp 512 --tg 128 --threads 2 [--feed random] [--reps 3]
// --parallel 1,4,16 (with --feed random) times what `kail bench --parallel` times: for each count N,
// a context of N sequences, their random prompts (pp each) evaluated together, then tg passes that
// each give every sequence one random token (node-llama-cpp puts the N evaluations of a step into
// one llama_decode batch); one JSON line per N.
// --depth D (llama-bench's -d, `kail bench -d`): D random tokens fill the sequence first, untimed,
// so the prompt and the decode steps are timed at that depth. --flash-attn on|off|auto sets the
// context's flash attention (node-llama-cpp's default: auto).
import { createRequire } from 'node:module';

process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= 'true';
const { getLlama } = await import('node-llama-cpp');

const { benchArgs } = createRequire(import.meta.url)('../../dist/bench/args.js');
const values = benchArgs('llama-bench', {
    model: { type: 'string' },
    pp: { type: 'string', default: '512' },
    tg: { type: 'string', default: '128' },
    threads: { type: 'string', default: '2' },
    feed: { type: 'string', default: 'greedy' },
    reps: { type: 'string', default: '1' },
    seed: { type: 'string', default: '42' },
    'no-mmap': { type: 'boolean', default: false },
    parallel: { type: 'string' },
    depth: { type: 'string', default: '0' },
    'flash-attn': { type: 'string', default: 'auto' },
});
const fail = (m) => {
  console.error(`llama-bench: ${m} (--help lists the flags)`);
  process.exit(2);
};
if (!values.model) fail('--model is required');
if (values.feed !== 'greedy' && values.feed !== 'random') fail(`--feed must be greedy or random, got '${values.feed}'`);
const pp = Number(values.pp), tg = Number(values.tg), reps = Number(values.reps), depth = Number(values.depth);
if (!Number.isInteger(depth) || depth < 0) fail(`--depth must be an integer >= 0, got '${values.depth}'`);
const fa = { on: true, off: false, auto: 'auto' }[values['flash-attn']];
if (fa === undefined) fail(`--flash-attn must be on, off or auto, got '${values['flash-attn']}'`);
if (depth && values.parallel) fail('--depth is not taken with --parallel');
if (!pp && values.feed === 'greedy') fail('--pp 0 needs --feed random (the greedy feed starts from the prompt\'s logits)');
let s = Number(values.seed) >>> 0 || 1;
const rand = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s; };

const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
const model = await llama.loadModel({ modelPath: values.model, useMmap: !values['no-mmap'] });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
if (values.parallel) {
  if (values.feed !== 'random') throw new Error('--parallel needs --feed random');
  const counts = values.parallel.split(',').map(Number);
  if (counts.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--parallel: counts must be integers >= 1, got '${values.parallel}'`);
  const nTok = Number(model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 0) || 1000;
  let one = 0;
  for (const n of counts) {
    const ctx = await model.createContext({ sequences: n, contextSize: pp + tg + 16, batchSize: Math.max(512, n), threads: Number(values.threads) });
    const seqs = Array.from({ length: n }, () => ctx.getSequence());
    // Warm-up, untimed: one prompt's pass.
    await seqs[0].evaluateWithoutGeneratingNewTokens(Array.from({ length: pp }, () => rand() % nTok));
    const ppMs = [], passMs = [];
    for (let r = 0; r < reps; r++) {
      for (const q of seqs) await q.clearHistory();
      const t0 = performance.now();
      await Promise.all(seqs.map((q) => q.evaluateWithoutGeneratingNewTokens(Array.from({ length: pp }, () => rand() % nTok))));
      const t1 = performance.now();
      ppMs.push(t1 - t0);
      for (let i = 0; i < tg; i++) await Promise.all(seqs.map((q) => q.evaluateWithoutGeneratingNewTokens([rand() % nTok])));
      passMs.push((performance.now() - t1) / tg);
    }
    const pass = median(passMs);
    const genTps = n / (pass / 1000);
    if (n === 1) one = genTps;
    process.stdout.write(JSON.stringify({ engine: 'llama.cpp', sequences: n, prompt_tokens: pp, gen_tokens: tg, prompt_tps: (n * pp) / (median(ppMs) / 1000), gen_tps: genTps, pass_ms: pass, speedup: one ? genTps / one : null, feed: values.feed, reps, threads: Number(values.threads) }) + '\n');
    await ctx.dispose();
  }
  await model.dispose();
  process.exit(0);
}
const ctx = await model.createContext({ contextSize: depth + pp + tg + 16, batchSize: Math.max(1, Math.min(512, pp || 512)), threads: Number(values.threads), flashAttention: fa });
const seq = ctx.getSequence();
const nTokens = Number(model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 0) || 1000;
const ppMs = [], tgMs = [];
for (let r = 0; r < reps; r++) {
  await seq.clearHistory();
  // The depth, untimed: later evaluations continue this sequence's history.
  if (depth) await seq.evaluateWithoutGeneratingNewTokens(Array.from({ length: depth }, () => rand() % nTokens));
  const prompt = Array.from({ length: pp }, () => rand() % nTokens);
  if (values.feed === 'random') {
    // Random feed (as `kail bench --feed random`): the prompt, then tg single-token passes each
    // feeding a fresh random id. evaluateWithoutGeneratingNewTokens runs the pass without reading
    // logits back into JS, so a step costs what the model costs.
    const t0 = performance.now();
    if (pp) await seq.evaluateWithoutGeneratingNewTokens(prompt);
    const t1 = performance.now();
    ppMs.push(t1 - t0);
    for (let i = 0; i < tg; i++) await seq.evaluateWithoutGeneratingNewTokens([rand() % nTokens]);
    tgMs.push(performance.now() - t1);
    continue;
  }
  // The generator evaluates the prompt, samples, yields, then evaluates each yielded token: the
  // first yield marks the end of prompt processing, the next tg yields are tg decode steps.
  let t = performance.now();
  let n = 0;
  let tFirst = 0;
  for await (const _tok of seq.evaluate(prompt, { temperature: 0 })) {
    if (n === 0) {
      tFirst = performance.now();
      ppMs.push(tFirst - t);
    }
    if (n === tg) break;
    n++;
  }
  tgMs.push(performance.now() - tFirst);
}
const pms = median(ppMs), gms = median(tgMs);
process.stdout.write(JSON.stringify({ engine: 'llama.cpp', depth, flash_attn: values['flash-attn'], prompt_tokens: pp, gen_tokens: tg, prompt_tps: pp / (pms / 1000), gen_tps: tg / (gms / 1000), prompt_ms: pms, gen_ms: gms, feed: values.feed, reps, threads: Number(values.threads) }) + '\n');
await ctx.dispose();
await model.dispose();
