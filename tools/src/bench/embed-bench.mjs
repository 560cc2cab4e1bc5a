#!/usr/bin/env node
// Embedding throughput of an encoder (or any) model: N inputs of L tokens ([CLS] + random ids +
// [SEP]), kail's batch engine (one input at a time, then all in flight over --seqs slots) against
// llama.cpp's embedding context (node-llama-cpp, one input at a time, as its getEmbeddingFor does;
// flash attention off). Prints input tokens/s for each and the median and largest NMSE between the two.
// Needs the engine built (npx nx run engine:build).
//   node tools/src/bench/embed-bench.mjs --model M.gguf [--inputs 32] [--len 128] [--seqs 8] [--threads 2]
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = 'true';
import { createRequire } from 'node:module';
import os from 'node:os';

const require = createRequire(import.meta.url);
const { EngineModel, BatchEngine } = require('../../../packages/engine/dist/index.js');
const { benchArgs } = require('../../dist/bench/args.js');
const v = benchArgs('embed-bench', {
    model: { type: 'string' },
    inputs: { type: 'string', default: '32' },
    len: { type: 'string', default: '128' },
    seqs: { type: 'string', default: '8' },
    threads: { type: 'string', default: '2' },
});
if (!v.model) {
  console.error('embed-bench: --model M.gguf is required (--help lists the flags)');
  process.exit(2);
}
const nIn = Number(v.inputs), len = Number(v.len), seqs = Number(v.seqs), threads = Number(v.threads);

const model = EngineModel.load(v.model, { threads, nSeqMax: seqs, nCtx: Math.max(len, 16) });
const voc = model.tokenizer.vocab;
let s = 7;
const rnd = () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648;
const first = voc.special.bos ?? 0, last = voc.special.sep ?? voc.special.eos ?? 0;
const inputs = Array.from({ length: nIn }, () => [first, ...Array.from({ length: len - 2 }, () => 1000 + Math.floor(rnd() * (model.nVocab - 1000))), last]);
const engine = new BatchEngine(model, { reusePrefix: false });
const embed = async (prompt, i) => {
  let out;
  for await (const c of engine.generate({ id: `b${i}`, prompt, maxTokens: 0, embed: model.defaultPooling })) if (c.embedding) out = c.embedding;
  return out;
};
await embed(inputs[0], -1); // warm-up
let t = performance.now();
const ours = [];
for (const [i, p] of inputs.entries()) ours.push(await embed(p, i));
const kailOne = performance.now() - t;
t = performance.now();
await Promise.all(inputs.map((p, i) => embed(p, i + nIn)));
const kailAll = performance.now() - t;
await engine.close();
model.close();

const { getLlama, LlamaLogLevel, LlamaEmbeddingContext } = await import('node-llama-cpp');
const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
const lm = await llama.loadModel({ modelPath: v.model, gpuLayers: 0 });
const lctx = await lm.createContext({ contextSize: Math.max(len, 16) * 2, batchSize: Math.max(len, 16) * 2, threads: { ideal: threads, min: threads }, flashAttention: false, _embeddings: true });
const ctx = new LlamaEmbeddingContext({ _llamaContext: lctx });
await ctx.getEmbeddingFor(inputs[0]);
t = performance.now();
const errs = [];
for (const [i, p] of inputs.entries()) {
  const ref = (await ctx.getEmbeddingFor(p)).vector;
  let num = 0, den = 0;
  for (let j = 0; j < ref.length; j++) {
    num += (ref[j] - ours[i][j]) ** 2;
    den += ref[j] ** 2;
  }
  errs.push(num / den);
}
const llamaOne = performance.now() - t;
await ctx.dispose();
await lm.dispose();

const tps = (ms) => ((nIn * len) / (ms / 1000)).toFixed(0);
console.log(`${v.model}: ${nIn} inputs x ${len} tokens, ${threads} threads, ${os.cpus()[0].model}`);
console.log(`kail      one at a time        ${tps(kailOne).padStart(7)} tokens/s  (${(kailOne / nIn).toFixed(1)} ms per input)`);
console.log(`kail      ${String(seqs).padStart(2)} slots in flight    ${tps(kailAll).padStart(7)} tokens/s`);
console.log(`llama.cpp one at a time        ${tps(llamaOne).padStart(7)} tokens/s  (${(llamaOne / nIn).toFixed(1)} ms per input)`);
errs.sort((a, b) => a - b);
console.log(`NMSE kail vs llama.cpp: median ${errs[errs.length >> 1].toExponential(2)}, largest ${errs[errs.length - 1].toExponential(2)}`);
