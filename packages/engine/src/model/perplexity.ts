// Perplexity of a text, computed as llama.cpp's `llama-perplexity` computes it (its default mode,
// tools/perplexity/perplexity.cpp), so the two give comparable numbers for one model file: the
// tokens (BOS added when the vocabulary asks for it) are cut into chunks of n_ctx; each chunk is
// evaluated from an empty cache with its first token replaced by BOS (when the vocabulary adds
// one); only the second half is scored: the logits at positions n_ctx/2 .. n_ctx-2 predict the
// tokens after them. PPL = exp(mean negative log-likelihood); the ± is the standard error of that
// mean, times PPL.
import fs from 'node:fs';

import { EngineError } from '../errors';
import { logprobs } from '../sampling/logprobs';
import { BaseLogitsWriter } from './kl-divergence';
import type { EngineModel } from './model';

export interface PerplexityOptions {
  /** Tokens per chunk (llama-perplexity's -c). */
  nCtx: number;
  /** Score at most this many chunks (default: all whole chunks). */
  maxChunks?: number;
  /** Tokens per forward pass. Default: the model's. */
  nBatch?: number;
  /** Sequence slot to use, one chunk at a time. Default: chunks share passes, one sequence each, as many as the batch holds (chunksPerPass). */
  seq?: number;
  /**
   * Write the base model's log-probabilities at every scored position to this file, for a later
   * KL divergence of another model against them (llama-perplexity's --kl-divergence-base; its
   * format: model/kl-divergence.ts).
   */
  saveLogits?: string;
  /** Called after each chunk with the running estimate (llama-perplexity's `[i]ppl,` line). */
  onChunk?: (chunk: number, nChunks: number, ppl: number) => void;
}

export interface PerplexityResult {
  ppl: number;
  /** Standard error of PPL (llama-perplexity's "+/-"); NaN with fewer than two scored tokens. */
  pplError: number;
  /** Mean negative log-likelihood per scored token (nats). */
  meanNll: number;
  chunks: number;
  nCtx: number;
  tokensScored: number;
  /** Tokens evaluated (chunks x n_ctx) per second of forward passes. */
  tokensPerSecond: number;
  seconds: number;
}

/** Running sums of the negative log-likelihoods of scored tokens. */
export class NllAccumulator {
  nll = 0;
  nll2 = 0;
  count = 0;

  /** Scores `targets[i]` with logits row i (rows of `nVocab` floats): -log softmax (sampling/logprobs, in float64). */
  addRows(logits: Float32Array, nVocab: number, targets: ArrayLike<number>): void {
    for (let i = 0; i < targets.length; i++) {
      const v = -logprobs(logits.subarray(i * nVocab, (i + 1) * nVocab), targets[i]).logprob;
      this.nll += v;
      this.nll2 += v * v;
      this.count++;
    }
  }

  get ppl(): number {
    return Math.exp(this.nll / this.count);
  }

  /** Standard error of PPL: sqrt(var(nll) / (count - 1)) x PPL, as llama-perplexity prints it. */
  get pplError(): number {
    if (this.count < 2) return NaN;
    const mean = this.nll / this.count;
    const v = this.nll2 / this.count - mean * mean;
    return v > 0 ? Math.sqrt(v / (this.count - 1)) * this.ppl : 0;
  }
}

/** The chunks llama-perplexity evaluates: n_ctx tokens each, the first replaced by `bos` when given. */
export function perplexityChunks(tokens: readonly number[], nCtx: number, bos: number | null, maxChunks = Infinity): number[][] {
  if (!Number.isInteger(nCtx) || nCtx < 4) throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: the chunk size must be an integer of at least 4 tokens, got ${nCtx}`);
  const n = Math.min(Math.floor(tokens.length / nCtx), maxChunks);
  if (tokens.length < 2 * nCtx)
    throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: the text tokenizes to ${tokens.length} tokens; a chunk size of ${nCtx} needs at least ${2 * nCtx} (two chunks), as llama-perplexity asks`);
  return Array.from({ length: n }, (_, i) => {
    const c = tokens.slice(i * nCtx, (i + 1) * nCtx);
    if (bos !== null) c[0] = bos;
    return c;
  });
}

/**
 * One chunk as llama-perplexity evaluates it: from an empty cache, the first half only filling it;
 * returns the logits of the second half (rows for positions n/2 .. n-1).
 */
export async function chunkLogits(model: EngineModel, seq: number, chunk: readonly number[], nBatch?: number): Promise<Float32Array> {
  const first = Math.floor(chunk.length / 2);
  model.truncate(seq, 0);
  await model.evaluate(seq, chunk.slice(0, first), 'last', nBatch);
  return model.evaluate(seq, chunk.slice(first), 'all', nBatch);
}

/**
 * Several chunks in one forward pass, one sequence each (llama-perplexity's n_seq = n_batch /
 * n_ctx): fewer, larger passes, so a MoE model's experts are read once for all of them (what
 * matters when they stream). Every chunk has the same length; sequences 0..n-1 are used and
 * cleared. Returns each chunk's second-half logits (with `allRows`, every row's), the same bits
 * as chunkLogits gives.
 */
export async function chunksLogits(model: EngineModel, chunks: readonly (readonly number[])[], allRows = false): Promise<Float32Array[]> {
  if (chunks.length === 1 && !allRows) return [await chunkLogits(model, 0, chunks[0])];
  const n = chunks[0].length;
  // (allRows: every row's logits, from position 0, as llama-imatrix asks for them.)
  const first = allRows ? 0 : Math.floor(n / 2);
  const total = n * chunks.length;
  if (chunks.length > model.nSeqMax || total > model.nBatch)
    throw new EngineError('KAIL_E_INVALID_ARG', `${chunks.length} chunks of ${n} tokens in one pass need ${chunks.length} sequences and a batch of ${total}; the model has ${model.nSeqMax} and ${model.nBatch}`);
  for (let s = 0; s < chunks.length; s++) model.truncate(s, 0);
  const batch = { tokens: new Int32Array(total), pos: new Int32Array(total), seq: new Int32Array(total), output: new Uint8Array(total) };
  chunks.forEach((c, s) => {
    if (c.length !== n) throw new EngineError('KAIL_E_INTERNAL', 'chunks of different lengths in one pass');
    for (let j = 0; j < n; j++) {
      const at = s * n + j;
      batch.tokens[at] = c[j];
      batch.pos[at] = j;
      batch.seq[at] = s;
      batch.output[at] = j >= first ? 1 : 0;
    }
  });
  const logits = await model.forwardBatch(batch);
  const rows = (n - first) * model.nVocab;
  const out = chunks.map((_, s) => logits.subarray(s * rows, (s + 1) * rows));
  for (let s = 0; s < chunks.length; s++) model.truncate(s, 0);
  return out;
}

/** How many chunks of nCtx one pass takes: what the batch holds, at most the model's sequences. */
export function chunksPerPass(model: EngineModel, nCtx: number, nBatch = model.nBatch): number {
  return Math.max(1, Math.min(model.nSeqMax, Math.floor(Math.min(nBatch, model.nBatch) / nCtx)));
}

/** Perplexity of `tokens` (the text's tokens, with BOS where the vocabulary adds it) under `model`. */
export async function perplexity(model: EngineModel, tokens: readonly number[], opts: PerplexityOptions): Promise<PerplexityResult> {
  const { nCtx } = opts;
  if (nCtx > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: chunks of ${nCtx} tokens do not fit the model's context of ${model.nCtx}`);
  const v = model.tokenizer.vocab;
  const chunks = perplexityChunks(tokens, nCtx, v.addBos ? v.special.bos : null, opts.maxChunks);
  const seq = opts.seq ?? 0;
  const first = Math.floor(nCtx / 2);
  const acc = new NllAccumulator();
  const writer = opts.saveLogits ? new BaseLogitsWriter(opts.saveLogits, nCtx, model.nVocab, chunks.length, tokens) : null;
  let ms = 0;
  try {
    // (Several chunks per pass when the batch holds them and the model has the sequences.)
    const perPass = opts.seq === undefined ? chunksPerPass(model, nCtx, opts.nBatch) : 1;
    for (let i = 0; i < chunks.length; i += perPass) {
      const group = chunks.slice(i, i + perPass);
      const t0 = performance.now();
      const all = perPass > 1 ? await chunksLogits(model, group) : [await chunkLogits(model, seq, group[0], opts.nBatch)];
      ms += performance.now() - t0;
      group.forEach((c, g) => {
        acc.addRows(all[g], model.nVocab, c.slice(first + 1));
        writer?.addChunk(all[g], c.slice(first + 1));
        opts.onChunk?.(i + g + 1, chunks.length, acc.ppl);
      });
    }
  } finally {
    writer?.close();
    // (A file cut short by an error is removed: a later --kl-divergence must not read it.)
    if (writer && !writer.complete) fs.rmSync(writer.path, { force: true });
  }
  model.truncate(seq, 0);
  return {
    ppl: acc.ppl,
    pplError: acc.pplError,
    meanNll: acc.nll / acc.count,
    chunks: chunks.length,
    nCtx,
    tokensScored: acc.count,
    tokensPerSecond: (chunks.length * nCtx) / (ms / 1000),
    seconds: ms / 1000,
  };
}

export interface StridedPerplexityOptions {
  /** Tokens per chunk: llama-perplexity's context, -c plus stride/2 (its -c is multiplied by -b/-c when that exceeds 1). */
  chunkLen: number;
  /** Chunks start this many tokens apart; each scores its last `stride` tokens (llama-perplexity's --ppl-stride). */
  stride: number;
  maxChunks?: number;
  nBatch?: number;
  /** After each chunk: its index, its start in the text and the running estimate. */
  onChunk?: (chunk: number, nChunks: number, start: number, ppl: number) => void;
}

/**
 * llama-perplexity's strided perplexity (--ppl-stride S, its perplexity_v2): chunks of chunkLen
 * tokens starting every S tokens, each from an empty cache, its last S tokens scored, so every
 * scored token sees at least chunkLen - S tokens before it. Unlike the default mode no token is
 * replaced by BOS (llama-perplexity swaps one in only after the pass, which changes nothing): the
 * text's own BOS, when the vocabulary adds one, starts the first chunk only.
 */
export async function perplexityStrided(model: EngineModel, tokens: readonly number[], opts: StridedPerplexityOptions): Promise<PerplexityResult> {
  const { chunkLen, stride } = opts;
  if (!(Number.isInteger(stride) && stride > 0)) throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: the stride must be a positive integer, got ${stride}`);
  if (!(Number.isInteger(chunkLen) && chunkLen > stride))
    throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: a stride of ${stride} scores more tokens than a chunk of ${chunkLen} holds; use a smaller --ppl-stride or a larger -c`);
  if (chunkLen > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: chunks of ${chunkLen} tokens do not fit the model's context of ${model.nCtx}`);
  if (tokens.length < 2 * chunkLen)
    throw new EngineError('KAIL_E_INVALID_ARG', `perplexity: the text tokenizes to ${tokens.length} tokens; strided chunks of ${chunkLen} need at least ${2 * chunkLen}, as llama-perplexity asks`);
  const nChunks = Math.min(Math.floor((tokens.length - chunkLen + stride - 1) / stride), opts.maxChunks ?? Infinity);
  const acc = new NllAccumulator();
  let ms = 0;
  for (let i = 0; i < nChunks; i++) {
    const start = i * stride;
    const chunk = tokens.slice(start, start + chunkLen);
    model.truncate(0, 0);
    const t0 = performance.now();
    // (Only the rows that score: positions chunkLen - stride - 1 .. chunkLen - 2.)
    const from = chunkLen - stride - 1;
    if (from > 0) await model.evaluate(0, chunk.slice(0, from), 'last', opts.nBatch);
    const logits = await model.evaluate(0, chunk.slice(from, chunkLen - 1), 'all', opts.nBatch);
    ms += performance.now() - t0;
    acc.addRows(logits, model.nVocab, chunk.slice(from + 1));
    opts.onChunk?.(i + 1, nChunks, start, acc.ppl);
  }
  model.truncate(0, 0);
  return { ppl: acc.ppl, pplError: acc.pplError, meanNll: acc.nll / acc.count, chunks: nChunks, nCtx: chunkLen, tokensScored: acc.count, tokensPerSecond: (nChunks * (chunkLen - 1)) / (ms / 1000), seconds: ms / 1000 };
}

