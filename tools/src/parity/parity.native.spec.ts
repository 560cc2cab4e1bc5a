// kail's logits against llama.cpp's (node-llama-cpp 3.22.1 in a child process) on models the
// project writes itself: F32/F16/BF16 files certify the semantics of every architecture, quantized
// dense files certify the kernels, quantized MoE files must stay within llama.cpp's own spread.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel, NllAccumulator, perplexity, perplexityChunks, perplexityStrided } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { TRAINING_CORPUS } from '../models/corpus';
import { getPreset, presetRoutes } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaEmbedding, llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, nmseBesideOutliers, tokenIds, top1Agreement } from './metrics';

const ARCHS = ['tiny-llama', 'tiny-mixtral', 'tiny-qwen2moe', 'tiny-qwen3moe'];
const DENSE_QUANTS: FileTypeName[] = [
  'Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'Q4_K_M', 'IQ4_XS', 'IQ4_NL',
  'IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ3_XXS', 'IQ3_S', 'IQ1_S', 'IQ1_M', 'MXFP4',
  // Ternary (Q8_K activations; every tiny-llama row is a multiple of their 256-value block), NVFP4,
  // Q1_0 and Q2_0 (Q8_0 activations).
  'TQ1_0', 'TQ2_0', 'NVFP4', 'Q1_0', 'Q2_0',
];
const MOE_QUANTS: FileTypeName[] = ['Q8_0', 'Q4_K_M', 'IQ2_XXS', 'IQ1_M', 'MXFP4'];

let dir: string;
const table: string[] = [];
const record = (row: string) => table.push(row);
const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);

/** Deterministic pseudo-random token ids (not a greedy loop, so routing varies). */

async function kailLogits(model: string, tokens: number[], kv: 'f32' | 'f16' = 'f32'): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType: kv, threads: 2, nCtx: tokens.length + 8 });
  try {
    return await m.evaluate(0, tokens, 'all', 64);
  } finally {
    m.close();
  }
}

/** A reference batch started now and awaited later (no unhandled rejection meanwhile). */
function early<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

const FLOAT_TYPES: [FileTypeName, number][] = [['F32', 1e-6], ['F16', 1e-5], ['BF16', 1e-5]];
const floatJobs: { preset: string; type: FileTypeName; bound: number; tokens: number[] }[] = [];
const denseTokens = tokenIds(256, getPreset('tiny-llama').config.vocabSize, 3);
const MOES = ['tiny-mixtral', 'tiny-qwen3moe'];
const moeCases = MOES.flatMap((p) => MOE_QUANTS.map((t) => [p, t] as const));
const moeTokens: Record<string, number[]> = Object.fromEntries(MOES.map((p) => [p, tokenIds(128, getPreset(p).config.vocabSize, 5)]));
let floatRefs: Promise<LlamaLogits[]>;
let denseRefs: Promise<LlamaLogits[]>;
let moeExact: Promise<LlamaLogits[]>;
let moeRuntime: Promise<LlamaLogits[]>;

// Every file is written here, and each group's llama.cpp references start (in a child process) as
// soon as its files exist, so llama.cpp computes while the next group is written.
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-'));
  for (const preset of ARCHS) {
    const cfg = getPreset(preset).config;
    for (const [type, bound] of FLOAT_TYPES) {
      writeModel({ config: cfg, fileType: type, seed: 7, out: file(preset, type) });
      floatJobs.push({ preset, type, bound, tokens: tokenIds(64, cfg.vocabSize, 11) });
    }
  }
  floatRefs = early(llamaLogitsBatch(floatJobs.map((j) => ({ model: file(j.preset, j.type), tokens: j.tokens })), { kv: 'f32', flashAttention: 'off', timeoutMs: 240_000 }));
  const cfg = getPreset('tiny-llama').config;
  for (const t of DENSE_QUANTS) writeModel({ config: cfg, fileType: t, seed: 7, out: file('tiny-llama', t) });
  denseRefs = early(llamaLogitsBatch(DENSE_QUANTS.map((t) => ({ model: file('tiny-llama', t), tokens: denseTokens })), { kv: 'f32', flashAttention: 'off', timeoutMs: 240_000 }));
  for (const [p, t] of moeCases) writeModel({ config: getPreset(p).config, fileType: t, seed: 7, out: file(p, t) });
  const jobs = moeCases.map(([p, t]) => ({ model: file(p, t), tokens: moeTokens[p] }));
  moeExact = early(llamaLogitsBatch(jobs, { kv: 'f32', flashAttention: 'off', timeoutMs: 240_000 }));
  moeRuntime = early(llamaLogitsBatch(jobs, { kv: 'f16', flashAttention: 'auto', timeoutMs: 240_000 }));
}, 240_000);
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  // The measured numbers, for the record (jest prints them after the run).
  process.stdout.write(`\nparity with llama.cpp (measured):\n${table.join('\n')}\n`);
});

describe('float files certify the semantics of every architecture', () => {
  let refs: LlamaLogits[];
  const jobs = floatJobs;
  beforeAll(async () => {
    refs = await floatRefs;
  }, 300_000);

  it.each(ARCHS.flatMap((a) => FLOAT_TYPES.map(([t]) => [a, t] as const)))('%s %s', async (preset, type) => {
    const i = jobs.findIndex((j) => j.preset === preset && j.type === type);
    const ours = await kailLogits(file(preset, type), jobs[i].tokens);
    const all = nmse(ours, refs[i].logits);
    // F32 must agree on every position; F16/BF16 round weights, so one position of 64 may be left
    // out where a near-tie between two experts flipped (nmseBesideOutliers), and only lead changes
    // beyond a 0.1 margin count (random test models have near-ties).
    const { nmse: e, outliers } = nmseBesideOutliers(ours, refs[i].logits, refs[i].nVocab, jobs[i].bound, type === 'F32' || !presetRoutes(preset) ? 0 : 1);
    const { agree, total } = top1Agreement(ours, refs[i].logits, refs[i].nVocab, type === 'F32' ? 0 : 0.1);
    const flipped = outliers.map((o) => ` (position ${o.position} ${o.nmse.toExponential(1)} left out: ${e.toExponential(2)} without it)`).join('');
    record(`${preset.padEnd(14)} ${type.padEnd(7)} NMSE ${all.toExponential(2)}${flipped}  top-1 ${agree}/${total}  (bound ${jobs[i].bound})`);
    expect(e).toBeLessThanOrEqual(jobs[i].bound);
    expect(agree).toBe(total);
  });
});

describe('quantized dense files certify the kernels', () => {
  let refs: LlamaLogits[];
  const tokens = denseTokens;
  beforeAll(async () => {
    refs = await denseRefs;
  }, 300_000);

  it.each(DENSE_QUANTS)('tiny-llama %s: NMSE ≤ 1e-3, top-1 ≥ 99% (0.1 margin)', async (type) => {
    const i = DENSE_QUANTS.indexOf(type);
    const ours = await kailLogits(file('tiny-llama', type), tokens);
    const e = nmse(ours, refs[i].logits);
    const { agree, total } = top1Agreement(ours, refs[i].logits, refs[i].nVocab, 0.1);
    const strict = top1Agreement(ours, refs[i].logits, refs[i].nVocab).agree;
    record(`tiny-llama     ${type.padEnd(7)} NMSE ${e.toExponential(2)}  top-1 ${agree}/${total} (strict ${strict})  (bound 1e-3, 99%)`);
    expect(total).toBe(256);
    expect(e).toBeLessThanOrEqual(1e-3);
    expect(agree / total).toBeGreaterThanOrEqual(0.99);
  });
});

describe('quantized MoE files stay within llama.cpp’s own spread', () => {
  const cases = moeCases;
  const toks = moeTokens;
  let exact: LlamaLogits[];
  let runtime: LlamaLogits[];
  beforeAll(async () => {
    exact = await moeExact;
    runtime = await moeRuntime;
  }, 300_000);

  it.each(cases)('%s %s', async (p, t) => {
    const i = cases.findIndex(([a, b]) => a === p && b === t);
    const ours = await kailLogits(file(p, t), toks[p]);
    const ourDistance = nmse(ours, exact[i].logits);
    const llamaSpread = nmse(runtime[i].logits, exact[i].logits);
    record(`${p.padEnd(14)} ${t.padEnd(7)} kail↔llama.cpp exact ${ourDistance.toExponential(2)}  llama.cpp default↔exact ${llamaSpread.toExponential(2)}`);
    // kail's distance to llama.cpp's exact mode may not exceed llama.cpp's own default-vs-exact
    // distance by more than a factor covering measurement noise.
    expect(ourDistance).toBeLessThanOrEqual(Math.max(llamaSpread * 2, 1e-6));
  });
});

describe("kail perplexity equals llama.cpp's logits scored the llama-perplexity way", () => {
  // Float: the same numbers up to float rounding; quantized MoE: within the kernels' spread.
  const CASES: [string, FileTypeName, number][] = [['tiny-llama', 'F32', 1e-5], ['tiny-qwen3moe', 'Q4_K_M', 1e-2]];
  it.each(CASES)('%s %s', async (preset, type, bound) => {
    const f = file(preset, type);
    if (!fs.existsSync(f)) writeModel({ config: getPreset(preset).config, fileType: type, seed: 7, out: f });
    const nCtx = 64;
    const m = EngineModel.load(f, { kvType: 'f32', threads: 2, nCtx });
    let ours;
    let chunks: number[][];
    try {
      const tokens = m.tokenizer.tokenize(TRAINING_CORPUS, { addSpecial: true });
      ours = await perplexity(m, tokens, { nCtx, maxChunks: 3, nBatch: 16 });
      chunks = perplexityChunks(tokens, nCtx, m.tokenizer.vocab.addBos ? m.tokenizer.vocab.special.bos : null, 3);
    } finally {
      m.close();
    }
    expect(ours.chunks).toBe(3);
    expect(ours.tokensScored).toBe(3 * (nCtx - nCtx / 2 - 1));
    // llama.cpp evaluates each chunk whole; its logits at n_ctx/2 .. n_ctx-2 score the next tokens.
    const refs = await llamaLogitsBatch(chunks.map((c) => ({ model: f, tokens: c })), { kv: 'f32', flashAttention: 'off', timeoutMs: 240_000 });
    const acc = new NllAccumulator();
    refs.forEach((r, i) => acc.addRows(r.logits.subarray((nCtx / 2) * r.nVocab, (nCtx - 1) * r.nVocab), r.nVocab, chunks[i].slice(nCtx / 2 + 1)));
    const rel = Math.abs(ours.ppl / acc.ppl - 1);
    // llama.cpp's own spread: its default configuration (F16 KV, flash attention) against exact.
    const dflt = await llamaLogitsBatch(chunks.map((c) => ({ model: f, tokens: c })), { kv: 'f16', flashAttention: 'auto', timeoutMs: 240_000 });
    const accD = new NllAccumulator();
    dflt.forEach((r, i) => accD.addRows(r.logits.subarray((nCtx / 2) * r.nVocab, (nCtx - 1) * r.nVocab), r.nVocab, chunks[i].slice(nCtx / 2 + 1)));
    record(`perplexity ${preset.padEnd(14)} ${type.padEnd(7)} kail ${ours.ppl.toFixed(4)} +/- ${ours.pplError.toFixed(4)}  llama.cpp logits ${acc.ppl.toFixed(4)}  relative ${rel.toExponential(2)}  (llama.cpp default vs exact ${Math.abs(accD.ppl / acc.ppl - 1).toExponential(2)})`);
    expect(rel).toBeLessThan(bound);
  }, 120_000);

  it("strided (--ppl-stride): chunks every S tokens, each from an empty cache with no BOS swapped in, their last S tokens scored", async () => {
    const f = file('tiny-llama', 'F32');
    if (!fs.existsSync(f)) writeModel({ config: getPreset('tiny-llama').config, fileType: 'F32', seed: 7, out: f });
    const stride = 16;
    const chunkLen = 48 + stride / 2;
    const m = EngineModel.load(f, { kvType: 'f32', threads: 2, nCtx: chunkLen });
    let ours;
    let tokens: number[];
    try {
      tokens = m.tokenizer.tokenize(TRAINING_CORPUS, { addSpecial: true });
      ours = await perplexityStrided(m, tokens, { chunkLen, stride, maxChunks: 4, nBatch: 16 });
    } finally {
      m.close();
    }
    expect(ours.chunks).toBe(4);
    expect(ours.tokensScored).toBe(4 * stride);
    const chunks = [0, 1, 2, 3].map((i) => tokens.slice(i * stride, i * stride + chunkLen));
    const refs = await llamaLogitsBatch(chunks.map((c) => ({ model: f, tokens: c })), { kv: 'f32', flashAttention: 'off', timeoutMs: 240_000 });
    const acc = new NllAccumulator();
    refs.forEach((r, i) => acc.addRows(r.logits.subarray((chunkLen - stride - 1) * r.nVocab, (chunkLen - 1) * r.nVocab), r.nVocab, chunks[i].slice(chunkLen - stride)));
    const rel = Math.abs(ours.ppl / acc.ppl - 1);
    record(`perplexity --ppl-stride ${stride} tiny-llama F32 kail ${ours.ppl.toFixed(4)}  llama.cpp logits ${acc.ppl.toFixed(4)}  relative ${rel.toExponential(2)}`);
    expect(rel).toBeLessThan(1e-5);
  }, 120_000);
});

describe("embeddings (/v1/embeddings) equal llama.cpp's embedding context", () => {
  // The normalized final hidden state of the last token (llama.cpp's pooling for a file without a
  // pooling type), compared as unit vectors; llama.cpp's embedding context keeps an F16 KV cache.
  const PRESETS = ['tiny-llama', 'tiny-qwen3moe', 'tiny-deepseek2-lite', 'tiny-glm4moe'];
  it.each(PRESETS)('%s F32', async (preset) => {
    const f = file(preset, 'emb-F32');
    writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 7, out: f });
    let tokens = tokenIds(24, getPreset(preset).config.vocabSize, 13);
    const m = EngineModel.load(f, { kvType: 'f32', threads: 2, nCtx: 64 });
    let ours: Float32Array;
    try {
      // node-llama-cpp puts BOS first where the vocabulary adds one: so do we, for the same tokens.
      const v = m.tokenizer.vocab;
      if (v.addBos && v.special.bos !== null) tokens = [v.special.bos, ...tokens];
      const w = m.hiddenWidth;
      ours = (await m.evaluateWithHidden(0, tokens, 'last')).hidden.slice((tokens.length - 1) * w);
    } finally {
      m.close();
    }
    const ref = await llamaEmbedding(f, tokens);
    expect(ref).toHaveLength(ours.length);
    const unit = (v: ArrayLike<number>) => {
      const n = Math.hypot(...Array.from(v));
      return Array.from(v, (x) => x / n);
    };
    const a = unit(ours), b = unit(ref);
    const cos = a.reduce((acc, x, i) => acc + x * b[i], 0);
    const maxDiff = Math.max(...a.map((x, i) => Math.abs(x - b[i])));
    record(`embedding ${preset.padEnd(20)} cosine ${cos.toFixed(8)}  max |diff| of unit vectors ${maxDiff.toExponential(2)}`);
    expect(cos).toBeGreaterThan(0.99999);
    expect(maxDiff).toBeLessThan(1e-3);
  }, 60_000);
});
