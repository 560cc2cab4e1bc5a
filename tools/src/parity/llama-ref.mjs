#!/usr/bin/env node
// Reference runs through llama.cpp (the node-llama-cpp devDependency, CPU prebuilt, never built
// or downloaded): raw logits for every position, llama.cpp's tokenizer, greedy generation.
//
//   node tools/src/parity/llama-ref.mjs logits --model M.gguf --tokens 1,2,3 --out /tmp/ref
//       -> /tmp/ref.f32 (n_tokens x n_vocab float32 LE, row per position) + /tmp/ref.json
//   node tools/src/parity/llama-ref.mjs tokenize --model M.gguf --text "Hello" [--special] [--bos]
//   node tools/src/parity/llama-ref.mjs detokenize --model M.gguf --tokens 1,2,3 [--special]
//   node tools/src/parity/llama-ref.mjs generate --model M.gguf --text "Hi" --max-tokens 16
//       [--grammar-file G.gbnf [--ban 5,9]]: the greedy choice among the tokens llama.cpp's
//       grammar allows (less the banned ones), ending at end of generation
//   node tools/src/parity/llama-ref.mjs generate --model M.gguf --jobs gen.json
//       gen.json: [{"tokens": [1, 2], "max-tokens": 16, "grammar-file": "G.gbnf", "ban": [5, 9],
//       "stop-at-eog": false}, ...]: the same generations, one after another on one loaded model
//       (each from a cleared context), as {"results": [{"prompt", "tokens", "eog", "text"}, ...]}
//   node tools/src/parity/llama-ref.mjs embed --model M.gguf --tokens 1,2,3 | --tokens-file inputs.json
//       llama.cpp's pooled embedding (not normalized) of the tokens, {"embedding": [...]}, or of
//       each token sequence in inputs.json, {"embeddings": [[...], ...]}; --lora A.gguf (repeatable) applies adapters
//   node tools/src/parity/llama-ref.mjs rank --model RERANKER.gguf --tokens-file inputs.json
//       inputs.json: [[1, 2, 3], ...]: llama.cpp's reranking score of each token sequence (a
//       ranking context: pooling rank, the file's classification head; node-llama-cpp's sigmoid
//       where llama.cpp does not normalize itself), as {"scores": [...]}
//   node tools/src/parity/llama-ref.mjs batch --jobs jobs.json
//       jobs.json: [{"model": "a.gguf", "tokens": [1, 2] | "text": "...", "out": "/tmp/a",
//       "generate": 8, "lora": [{"path": "a.lora.gguf", "scale": 1}]}, ...]; one process for many logits runs (loading llama.cpp takes seconds on a
//       busy machine); "generate" adds that many greedy tokens to the sidecar ("generated");
//       "shift": {"at": 40, "keep": 4, "discard": 16}: evaluate tokens[0, at), shift the context
//       as llama-server does (seq_rm of [keep, keep + discard), the rest moved down), then write
//       the logits of tokens[at, n) only; "kv" (K and V) and "flash-attention" set a job's own
//       cache type and flash attention (as the options below); consecutive jobs on one file share
//       its load, and with the same settings its context
//   node tools/src/parity/llama-ref.mjs passes --model M.gguf --out PREFIX
//       one loaded model, many passes (a diffusion loop's steps): each stdin line a JSON array of
//       tokens, evaluated from a cleared sequence (one non-causal pass for a diffusion model), its
//       logits written to PREFIX-<n>.f32 and {"logits": path, "nTokens", "nVocab"} printed as a line;
//       "ready" is printed once the model is loaded; EOF ends it
//   node tools/src/parity/llama-ref.mjs serve
//       many commands in one process (node-llama-cpp's start, which tests its binding in a child
//       process, takes over a second): each stdin line {"id": N, "args": ["logits", "--model", ...]}
//       runs that command line (any of the above but passes and serve) and prints one line
//       {"id": N, "ok": true, "stdout": "what the command printed"} or {"id": N, "ok": false,
//       "error": "..."}; EOF ends it
//
// Common options: --threads N (default 2), --kv f32|f16|bf16|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1 (default f32:
// the exact reference; f16 is llama.cpp's default; the quantized ones need flash attention; K's
// and V's type, as -ctk/-ctv both), --kv-v TYPE (V's type apart, as -ctv), --flash-attention off|on|auto (default off), --ctx N, --batch N,
// --verbose (llama.cpp logs). Output is JSON on stdout; errors go to stderr with exit code 1.
//
// The functions are exported too, for scripts that import this module.
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = 'true';

import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const FA = { off: false, on: true, auto: 'auto' };
const KV = { f32: 'F32', f16: 'F16', bf16: 'BF16', q8_0: 'Q8_0', q4_0: 'Q4_0', q4_1: 'Q4_1', iq4_nl: 'IQ4_NL', q5_0: 'Q5_0', q5_1: 'Q5_1' };

let llamaPromise;

/** The CPU llama.cpp backend; loaded once per process. */
export async function getCpuLlama({ threads = 2, verbose = false } = {}) {
  if (!llamaPromise) {
    const { getLlama } = await import('node-llama-cpp');
    llamaPromise = getLlama({
      gpu: false,
      build: 'never',
      usePrebuiltBinaries: true,
      progressLogs: false,
      maxThreads: threads,
      logLevel: verbose ? 'debug' : 'error',
    });
  }
  return llamaPromise;
}

/**
 * Opens a model and one context sequence.
 * @param {string} modelPath
 * @param {{threads?: number, kv?: keyof typeof KV, kvV?: keyof typeof KV, lora?: {path: string, scale?: number}[], flashAttention?: 'off'|'on'|'auto', ctx?: number, batch?: number, verbose?: boolean}} [opts]
 */
export async function openModel(modelPath, opts = {}) {
  const model = await loadModelFile(modelPath, opts);
  let handle;
  try {
    handle = await openContext(model, opts);
  } catch (e) {
    await model.dispose();
    throw e;
  }
  return {
    ...handle,
    async dispose() {
      await handle.dispose();
      await model.dispose();
    },
  };
}

/** The model of `modelPath`, loaded (no context). */
async function loadModelFile(modelPath, opts = {}) {
  const llama = await getCpuLlama({ threads: opts.threads ?? 2, verbose: opts.verbose });
  return llama.loadModel({ modelPath: path.resolve(modelPath), gpuLayers: 0 });
}

/** One context sequence on a loaded model, with `opts`' settings; dispose() ends the context only. */
async function openContext(model, opts = {}) {
  const threads = opts.threads ?? 2;
  const kv = opts.kv ?? 'f32';
  const kvV = opts.kvV ?? kv;
  const fa = opts.flashAttention ?? 'off';
  if (!Object.hasOwn(KV, kv)) throw new Error(`--kv must be ${Object.keys(KV).join(', ')}, got ${kv}`);
  if (!Object.hasOwn(KV, kvV)) throw new Error(`--kv-v must be ${Object.keys(KV).join(', ')}, got ${kvV}`);
  if (!(fa in FA)) throw new Error(`--flash-attention must be off, on or auto, got ${fa}`);
  const llama = await getCpuLlama({ threads, verbose: opts.verbose });
  const contextSize = opts.ctx ?? 512;
  const context = await model.createContext({
    contextSize,
    batchSize: opts.batch ?? Math.min(512, contextSize),
    sequences: 1,
    threads: { ideal: threads, min: threads },
    flashAttention: FA[fa],
    experimentalKvCacheKeyType: KV[kv],
    experimentalKvCacheValueType: KV[kvV],
    ...(opts.swaFull ? { swaFullCache: true } : {}),
    ...(opts.lora?.length ? { lora: { adapters: opts.lora.map((l) => ({ filePath: path.resolve(l.path), scale: l.scale ?? 1 })) } } : {}),
  });
  const sequence = context.getSequence();
  const settings = { threads, kv, kvV, flashAttention: fa, ctx: context.contextSize, batch: context.batchSize, swaFull: !!opts.swaFull };
  return {
    llama,
    model,
    context,
    sequence,
    settings,
    async dispose() {
      await context.dispose();
    },
  };
}

function vocabSize(model) {
  return model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
}

/**
 * Evaluates `tokens` from an empty sequence and returns the raw logits of every position
 * (row i predicts the token after tokens[i]).
 * @returns {Promise<{nTokens: number, nVocab: number, logits: Float32Array}>}
 */
export async function computeLogits(handle, tokens) {
  const { sequence, model } = handle;
  const nVocab = vocabSize(model);
  if (!Number.isInteger(nVocab) || nVocab <= 0) throw new Error('cannot determine the vocabulary size');
  for (const t of tokens) {
    if (!Number.isInteger(t) || t < 0 || t >= nVocab) throw new Error(`token ${t} out of range [0, ${nVocab})`);
  }
  await sequence.clearHistory();
  const input = tokens.map((t) => [t, { generateNext: { logits: true } }]);
  const results = await sequence.controlledEvaluate(input);
  const logits = new Float32Array(tokens.length * nVocab);
  for (let i = 0; i < tokens.length; i++) {
    const m = results[i]?.next?.logits;
    if (!m) throw new Error(`no logits for position ${i}`);
    if (m.size !== nVocab) throw new Error(`position ${i}: ${m.size} logits, expected ${nVocab}`);
    const row = logits.subarray(i * nVocab, (i + 1) * nVocab);
    for (const [tok, val] of m) row[tok] = val;
  }
  return { nTokens: tokens.length, nVocab, logits };
}

/**
 * A context shift, as llama-server's --context-shift makes it: evaluates tokens[0, at), drops
 * cache positions [keep, keep + discard) and moves the later ones down (node-llama-cpp's
 * eraseContextTokenRanges: llama_memory_seq_rm, then seq_add with -discard; the keys are turned at
 * the next decode), then returns the logits of tokens[at, n).
 */
export async function computeLogitsShifted(handle, tokens, { at, keep, discard }) {
  const { sequence, model } = handle;
  const nVocab = vocabSize(model);
  if (!(Number.isInteger(at) && Number.isInteger(keep) && Number.isInteger(discard)) || keep < 1 || discard < 1 || keep + discard > at || at >= tokens.length)
    throw new Error(`shift needs 1 <= keep, 1 <= discard, keep + discard <= at < ${tokens.length}; got at ${at}, keep ${keep}, discard ${discard}`);
  await sequence.clearHistory();
  await sequence.controlledEvaluate(tokens.slice(0, at));
  await sequence.eraseContextTokenRanges([{ start: keep, end: keep + discard }]);
  if (sequence.nextTokenIndex !== at - discard) throw new Error(`the shift left ${sequence.nextTokenIndex} positions, expected ${at - discard}`);
  const rest = tokens.slice(at);
  const results = await sequence.controlledEvaluate(rest.map((t) => [t, { generateNext: { logits: true } }]));
  const logits = new Float32Array(rest.length * nVocab);
  for (let i = 0; i < rest.length; i++) {
    const m = results[i]?.next?.logits;
    if (!m || m.size !== nVocab) throw new Error(`no logits for position ${at + i}`);
    const row = logits.subarray(i * nVocab, (i + 1) * nVocab);
    for (const [tok, val] of m) row[tok] = val;
  }
  return { nTokens: rest.length, nVocab, logits };
}

/** llama.cpp's tokenizer. `bos`: prepend BOS when the model asks for it (tokenizer.ggml.add_bos_token). */
export function tokenize(handle, text, { special = false, bos = false } = {}) {
  const { model } = handle;
  const ids = Array.from(model.tokenize(text, special));
  if (bos && model.tokens.shouldPrependBosToken && model.tokens.bos != null) ids.unshift(model.tokens.bos);
  return ids;
}

export function detokenize(handle, tokens, { special = false } = {}) {
  return handle.model.detokenize(tokens, special);
}

/**
 * Greedy generation (argmax of the raw logits each step, no penalties) after `prompt` tokens.
 * Stops after `maxTokens`, or at an end-of-generation token when `stopAtEog`.
 */
export async function generateGreedy(handle, prompt, { maxTokens = 16, stopAtEog = false } = {}) {
  const { sequence, model } = handle;
  if (prompt.length === 0) throw new Error('generation needs at least one prompt token');
  await sequence.clearHistory();
  const out = [];
  let feed = prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { token: true } }] : t));
  while (out.length < maxTokens) {
    const res = await sequence.controlledEvaluate(feed);
    const next = res[feed.length - 1]?.next?.token;
    if (next == null) throw new Error('llama.cpp returned no token');
    out.push(next);
    if (stopAtEog && model.isEogToken(next)) break;
    feed = [[next, { generateNext: { token: true } }]];
  }
  return out;
}

/**
 * Greedy generation under a GBNF grammar (llama.cpp's grammar sampler through node-llama-cpp):
 * up to `maxTokens` tokens, the end-of-generation token included when the grammar lets it come.
 */
export async function generateGrammar(handle, prompt, grammarText, { maxTokens = 16, ban = [] } = {}) {
  const { llama, sequence, model } = handle;
  const { LlamaGrammarEvaluationState, TokenBias } = await import('node-llama-cpp');
  const grammar = await llama.createGrammar({ grammar: grammarText });
  const grammarEvaluationState = new LlamaGrammarEvaluationState({ model, grammar });
  const tokenBias = new TokenBias(model.tokenizer);
  for (const t of ban) tokenBias.set(t, 'never');
  await sequence.clearHistory();
  const out = [];
  for await (const t of sequence.evaluate(prompt, { temperature: 0, grammarEvaluationState, tokenBias, yieldEogToken: true })) {
    out.push(t);
    if (out.length >= maxTokens || model.isEogToken(t)) break;
  }
  return out;
}

function parseTokenList(s) {
  const trimmed = s.trim();
  const arr = trimmed.startsWith('[') ? JSON.parse(trimmed) : trimmed.split(/[\s,]+/).filter(Boolean).map(Number);
  if (!Array.isArray(arr) || arr.some((t) => !Number.isInteger(t))) throw new Error(`bad token list: ${s.slice(0, 80)}`);
  return arr;
}

function logitsMeta(handle, modelPath, tokens, nTokens, nVocab, seconds) {
  return {
    n_tokens: nTokens,
    n_vocab: nVocab,
    dtype: 'float32',
    layout: 'row-major [n_tokens][n_vocab], little-endian',
    model: path.resolve(modelPath),
    tokens,
    settings: handle.settings,
    llama_cpp: handle.llama.llamaCppRelease,
    seconds,
  };
}

/** Writes OUT.f32 (raw logits) and OUT.json (sidecar); returns the sidecar. */
export function writeLogits(out, meta, logits) {
  fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
  fs.writeFileSync(`${out}.f32`, new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
  fs.writeFileSync(`${out}.json`, JSON.stringify(meta, null, 2) + '\n');
  return meta;
}

async function runBatch(jobsFile, opts) {
  const jobs = JSON.parse(fs.readFileSync(jobsFile, 'utf8'));
  if (!Array.isArray(jobs)) throw new Error('--jobs must hold a JSON array');
  const results = [];
  // Consecutive jobs on the same file (and adapters) share one loaded model, and those with the
  // same settings too ("kv" and "flash-attention" of a job override the batch's) one context: each
  // computation starts from a cleared sequence (computeLogits, computeLogitsShifted and
  // generateGreedy clear it first), as a fresh context would. Loading a model and building its
  // context cost more than a short evaluation.
  let model;
  let modelKey;
  let handle;
  let handleKey;
  const closeContext = async () => {
    const h = handle;
    handle = handleKey = undefined;
    await h?.dispose();
  };
  const closeModel = async () => {
    await closeContext();
    const m = model;
    model = modelKey = undefined;
    await m?.dispose();
  };
  try {
    for (const job of jobs) {
      if (!job.model || !job.out) throw new Error('each job needs "model" and "out"');
      const jobOpts = {
        ...opts,
        ...(job.lora ? { lora: job.lora } : {}),
        ...(job.kv !== undefined ? { kv: job.kv, kvV: job.kv } : {}),
        ...(job['flash-attention'] !== undefined ? { flashAttention: job['flash-attention'] } : {}),
      };
      const mKey = JSON.stringify([path.resolve(job.model), job.lora ?? null]);
      const cKey = JSON.stringify([jobOpts.kv, jobOpts.kvV, jobOpts.flashAttention]);
      if (mKey !== modelKey) {
        await closeModel();
        model = await loadModelFile(job.model, jobOpts);
        modelKey = mKey;
      }
      if (cKey !== handleKey) {
        await closeContext();
        handle = await openContext(model, jobOpts);
        handleKey = cKey;
      }
      results.push(await runBatchJob(handle, job));
    }
  } finally {
    await closeModel();
  }
  return results;
}

/** One job of runBatch on its opened model: the logits (and any greedy tokens) written to job.out. */
async function runBatchJob(handle, job) {
  const tokens = job.tokens ?? tokenize(handle, String(job.text ?? ''), { special: !!job.special, bos: job.bos ?? true });
  if (tokens.length === 0) throw new Error(`job for ${job.model} has no tokens`);
  const t0 = performance.now();
  const { nTokens, nVocab, logits } = job.shift ? await computeLogitsShifted(handle, tokens, job.shift) : await computeLogits(handle, tokens);
  const meta = logitsMeta(handle, job.model, tokens, nTokens, nVocab, (performance.now() - t0) / 1000);
  if (job.shift) meta.shift = job.shift;
  if (job.text !== undefined) {
    meta.text = job.text;
    meta.detokenized = detokenize(handle, tokens);
  }
  if (job.generate) meta.generated = await generateGreedy(handle, tokens, { maxTokens: job.generate });
  writeLogits(job.out, meta, logits);
  return { ...meta, logits: `${job.out}.f32`, meta: `${job.out}.json` };
}

/** The serve command: one command line per stdin line, its output (or error) as one JSON line on stdout. */
async function serve() {
  const { createInterface } = await import('node:readline');
  const log = console.log;
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (!line.trim()) continue;
    let id = null;
    const out = [];
    try {
      const req = JSON.parse(line);
      id = req.id ?? null;
      if (!Array.isArray(req.args) || !req.args.every((a) => typeof a === 'string')) throw new Error('a request needs "args": an array of strings');
      if (req.args[0] === 'serve' || req.args[0] === 'passes') throw new Error(`${req.args[0]} cannot run inside serve`);
      console.log = (...a) => void out.push(a.join(' '));
      try {
        await main(req.args);
      } finally {
        console.log = log;
      }
      process.stdout.write(JSON.stringify({ id, ok: true, stdout: out.join('\n') }) + '\n');
    } catch (e) {
      process.stdout.write(JSON.stringify({ id, ok: false, error: String(e?.message ?? e) }) + '\n');
    }
  }
}

async function main(argv) {
  const [command, ...rest] = argv;
  if (command === 'serve') return serve();
  const { values: v } = parseArgs({
    args: rest,
    options: {
      model: { type: 'string' },
      tokens: { type: 'string' },
      'tokens-file': { type: 'string' },
      text: { type: 'string' },
      out: { type: 'string' },
      threads: { type: 'string' },
      kv: { type: 'string' },
      'kv-v': { type: 'string' },
      'swa-full': { type: 'boolean' },
      'flash-attention': { type: 'string' },
      ctx: { type: 'string' },
      batch: { type: 'string' },
      'max-tokens': { type: 'string' },
      'stop-at-eog': { type: 'boolean' },
      'grammar-file': { type: 'string' },
      ban: { type: 'string' },
      special: { type: 'boolean' },
      bos: { type: 'boolean' },
      verbose: { type: 'boolean' },
      jobs: { type: 'string' },
      lora: { type: 'string', multiple: true },
    },
    strict: true,
  });
  const int = (name, dflt) => {
    if (v[name] === undefined) return dflt;
    const n = Number(v[name]);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} expects a positive integer`);
    return n;
  };
  if (command === 'batch') {
    if (!v.jobs) throw new Error('batch needs --jobs FILE');
    const results = await runBatch(v.jobs, {
      threads: int('threads', 2),
      kv: v.kv ?? 'f32',
      kvV: v['kv-v'],
      swaFull: v['swa-full'],
      flashAttention: v['flash-attention'] ?? 'off',
      ctx: int('ctx', 512),
      batch: int('batch', undefined),
      verbose: v.verbose,
    });
    console.log(JSON.stringify(results.map((r) => ({ ...r, tokens: undefined }))));
    return;
  }
  // A ranking or embedding context as node-llama-cpp's createRankingContext / createEmbeddingContext
  // make it, but with the exact reference's settings (an F32 cache, flash attention off) unless
  // --kv/--flash-attention say otherwise; and the token sequences it runs (--tokens-file
  // INPUTS.json: [[1, 2, 3], ...], or --tokens where one is allowed).
  async function pooledContext(ranking) {
    const inputs = v['tokens-file'] ? JSON.parse(fs.readFileSync(v['tokens-file'], 'utf8')) : [parseTokenList(v.tokens)];
    if (!Array.isArray(inputs) || !inputs.every((t) => Array.isArray(t) && t.every(Number.isInteger))) throw new Error('--tokens-file must hold an array of token id arrays');
    const threads = int('threads', 2);
    const llama = await getCpuLlama({ threads, verbose: v.verbose });
    const model = await llama.loadModel({ modelPath: path.resolve(v.model), gpuLayers: 0 });
    const kvType = KV[v.kv ?? 'f32'];
    if (!kvType) throw new Error(`--kv must be ${Object.keys(KV).join(', ')}`);
    const llamaContext = await model.createContext({
      contextSize: int('ctx', 512),
      // (An encoder takes a sequence in one pass: the batch holds the context.)
      ...(ranking ? {} : { batchSize: int('batch', int('ctx', 512)) }),
      threads: { ideal: threads, min: threads },
      flashAttention: FA[v['flash-attention'] ?? 'off'],
      experimentalKvCacheKeyType: kvType,
      experimentalKvCacheValueType: kvType,
      _embeddings: true,
      ...(ranking ? { _ranking: true } : {}),
      // (--lora FILE, repeatable: adapters at scale 1.)
      ...(v.lora?.length ? { lora: { adapters: v.lora.map((f) => ({ filePath: path.resolve(f), scale: 1 })) } } : {}),
    });
    return { inputs, model, llamaContext };
  }
  if (command === 'rank') {
    if (!v.model || !v['tokens-file']) throw new Error('rank needs --model FILE --tokens-file INPUTS.json');
    const { inputs, model, llamaContext } = await pooledContext(true);
    const { LlamaRankingContext } = await import('node-llama-cpp');
    const ctx = new LlamaRankingContext({ _llamaContext: llamaContext, _template: undefined });
    try {
      // (The token sequences as they are: the prompt's form is the caller's, as llama-server makes it.)
      const scores = [];
      for (const t of inputs) scores.push(await ctx._evaluateRankingForInput(t));
      console.log(JSON.stringify({ scores, normalized: ctx._currentArchRankingAlreadyNormalized }));
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
    return;
  }
  if (command === 'embed') {
    // llama.cpp's embedding of the tokens (node-llama-cpp's embedding context: the model's pooling,
    // the last token's for a file without one), raw (not normalized). node-llama-cpp prepends the
    // vocabulary's beginning token and appends its end token (WordPiece's [SEP]) where missing.
    if (!v.model || (v.tokens === undefined) === (v['tokens-file'] === undefined)) throw new Error('embed needs --model FILE and --tokens IDS or --tokens-file INPUTS.json');
    const { inputs, model, llamaContext } = await pooledContext(false);
    const { LlamaEmbeddingContext } = await import('node-llama-cpp');
    const ctx = new LlamaEmbeddingContext({ _llamaContext: llamaContext });
    try {
      const embeddings = [];
      for (const t of inputs) embeddings.push(Array.from((await ctx.getEmbeddingFor(t)).vector));
      console.log(JSON.stringify(v['tokens-file'] ? { embeddings } : { embedding: embeddings[0] }));
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
    return;
  }
  if (command === 'passes') {
    if (!v.model || !v.out) throw new Error('passes needs --model FILE and --out PREFIX');
    const handle = await openModel(v.model, { threads: int('threads', 2), kv: v.kv, kvV: v['kv-v'], flashAttention: v['flash-attention'], ctx: int('ctx', 512), batch: v.batch ? int('batch', 512) : undefined, verbose: v.verbose });
    try {
      const { createInterface } = await import('node:readline');
      console.log('ready');
      let n = 0;
      for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
        if (!line.trim()) continue;
        const tokens = JSON.parse(line);
        const { nTokens, nVocab, logits } = await computeLogits(handle, tokens);
        const out = `${v.out}-${n++}.f32`;
        fs.writeFileSync(out, new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
        console.log(JSON.stringify({ logits: out, nTokens, nVocab }));
      }
    } finally {
      await handle.dispose();
    }
    return;
  }
  if (!['logits', 'tokenize', 'detokenize', 'generate'].includes(command) || !v.model) {
    throw new Error('usage: llama-ref.mjs logits|tokenize|detokenize|generate|embed|batch --model FILE [options] (see the header of this file)');
  }
  let tokens;
  if (v.tokens !== undefined) tokens = parseTokenList(v.tokens);
  else if (v['tokens-file'] !== undefined) tokens = parseTokenList(fs.readFileSync(v['tokens-file'], 'utf8'));
  // generate --jobs: many generations on one loaded model (see the header).
  let jobs;
  if (command === 'generate' && v.jobs !== undefined) {
    jobs = JSON.parse(fs.readFileSync(v.jobs, 'utf8'));
    if (!Array.isArray(jobs) || jobs.length === 0) throw new Error('--jobs must hold a non-empty JSON array');
    jobs = jobs.map((j, i) => {
      const n = j['max-tokens'] ?? 16;
      if (!Array.isArray(j.tokens) || j.tokens.length === 0 || !j.tokens.every(Number.isInteger)) throw new Error(`job ${i}: "tokens" must be a non-empty array of token ids`);
      if (!Number.isInteger(n) || n <= 0) throw new Error(`job ${i}: "max-tokens" must be a positive integer`);
      if (j.ban !== undefined && !(Array.isArray(j.ban) && j.ban.every(Number.isInteger))) throw new Error(`job ${i}: "ban" must be an array of token ids`);
      return { tokens: j.tokens, maxTokens: n, grammarFile: j['grammar-file'], ban: j.ban ?? [], stopAtEog: !!j['stop-at-eog'] };
    });
  }
  const wantTokens = command === 'logits' || (command === 'generate' && !jobs) || command === 'detokenize';
  const maxTokens = int('max-tokens', 16);
  const promptLen = jobs ? Math.max(...jobs.map((j) => j.tokens.length + j.maxTokens)) : tokens?.length ?? 0;
  const handle = await openModel(v.model, {
    threads: int('threads', 2),
    kv: v.kv ?? 'f32',
    flashAttention: v['flash-attention'] ?? 'off',
    ctx: int('ctx', Math.max(512, Math.ceil((promptLen + (command === 'generate' && !jobs ? maxTokens : 0) + 256) / 256) * 256)),
    batch: int('batch', undefined),
    verbose: v.verbose,
  });
  try {
    if (tokens === undefined && v.text !== undefined && command !== 'detokenize') {
      tokens = tokenize(handle, v.text, { special: v.special, bos: command !== 'tokenize' || v.bos });
    }
    if (command === 'tokenize') {
      if (v.text === undefined) throw new Error('tokenize needs --text');
      console.log(JSON.stringify({ tokens: tokenize(handle, v.text, { special: v.special, bos: v.bos }) }));
      return;
    }
    if (wantTokens && (!tokens || tokens.length === 0)) throw new Error(`${command} needs --tokens, --tokens-file or --text`);
    if (command === 'detokenize') {
      console.log(JSON.stringify({ text: detokenize(handle, tokens, { special: v.special }) }));
      return;
    }
    if (command === 'generate') {
      const generate = async (prompt, { maxTokens: n, grammarFile, ban, stopAtEog }) => {
        const t0 = performance.now();
        const out = grammarFile
          ? await generateGrammar(handle, prompt, fs.readFileSync(grammarFile, 'utf8'), { maxTokens: n, ban })
          : await generateGreedy(handle, prompt, { maxTokens: n, stopAtEog });
        return {
          prompt,
          tokens: out,
          eog: out.length > 0 && handle.model.isEogToken(out[out.length - 1]),
          text: detokenize(handle, out, { special: true }),
          seconds: (performance.now() - t0) / 1000,
        };
      };
      if (jobs) {
        const results = [];
        for (const j of jobs) results.push(await generate(j.tokens, j));
        console.log(JSON.stringify({ results, settings: handle.settings }));
        return;
      }
      const r = await generate(tokens, { maxTokens, grammarFile: v['grammar-file'], ban: v.ban ? parseTokenList(v.ban) : [], stopAtEog: v['stop-at-eog'] });
      console.log(JSON.stringify({ ...r, settings: handle.settings }));
      return;
    }
    const t0 = performance.now();
    const { nTokens, nVocab, logits } = await computeLogits(handle, tokens);
    const meta = logitsMeta(handle, v.model, tokens, nTokens, nVocab, (performance.now() - t0) / 1000);
    if (v.out) {
      writeLogits(v.out, meta, logits);
      console.log(JSON.stringify({ ...meta, tokens: undefined, logits: `${v.out}.f32`, meta: `${v.out}.json` }));
    } else {
      const rows = [];
      for (let i = 0; i < nTokens; i++) rows.push(Array.from(logits.subarray(i * nVocab, (i + 1) * nVocab)));
      console.log(JSON.stringify({ ...meta, logits: rows }));
    }
  } finally {
    await handle.dispose();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    () => process.exit(0),
    (e) => {
      console.error(`llama-ref: ${e?.message ?? e}`);
      process.exit(1);
    },
  );
}
