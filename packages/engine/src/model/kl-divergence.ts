// KL divergence between a model and a base model, as llama.cpp's `llama-perplexity
// --kl-divergence` computes it (tools/perplexity/perplexity.cpp), to measure what a quantization
// costs: a first run of the base model (`--kl-divergence-base FILE`) saves the tokens and, for
// every scored position, the log-probabilities of the whole vocabulary in llama.cpp's file format;
// a second run of the quantized model on the same chunks compares its distributions with them:
// KL divergence, the change in the probability of the right token (Δp), how often both models
// put the same token on top, and both perplexities.
//
// The file (llama.cpp's, so either program reads the other's):
//   "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk * n_ctx] (the text's
//   tokens, before a chunk's first is replaced by BOS), then per chunk and per scored position
//   (n_ctx - 1 - n_ctx/2 of them) nv = 2*((n_vocab+1)/2) + 4 u16 words: two f32 (scale,
//   min_log_prob) and the log-probabilities as u16 steps of `scale` above min_log_prob
//   (0 at or below it; the range is at most 16 nats under the top), padded to an even count.
//
// Float arithmetic follows llama.cpp's (f32 where it uses float, f64 where double) so that the
// same logits give the same statistics.
import fs from 'node:fs';

import { EngineError, fsErrorText } from '../errors';
import { chunkLogits, chunksLogits, chunksPerPass, NllAccumulator } from './perplexity';
import type { EngineModel } from './model';

const MAGIC = '_logits_';
const f32 = Math.fround;

/** u16 words per scored position in the file. */
export function logProbWords(nVocab: number): number {
  return 2 * Math.floor((nVocab + 1) / 2) + 4;
}

/** ggml's nearest_int (round half to even, as the float magic-number trick does). */
function nearestInt(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The largest logit and its first index, f32. */
function maxOf(row: Float32Array): { max: number; at: number } {
  let max = row[0];
  let at = 0;
  for (let i = 1; i < row.length; i++) {
    if (row[i] > max) {
      max = row[i];
      at = i;
    }
  }
  return { max, at };
}

/** log(sum(exp(l - max))) as llama.cpp sums it: expf of f32 differences into a double, logged to f32. */
function logSumExp(row: Float32Array, max: number): number {
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += f32(Math.exp(f32(row[i] - max)));
  return f32(Math.log(sum));
}

/**
 * One position's log-probabilities in the file's form (llama.cpp's log_softmax with uint16
 * log_prob) into `out` (logProbWords(row.length) words); returns the negative log-likelihood of `tok`.
 */
export function encodeLogProbs(row: Float32Array, tok: number, out: Uint16Array): number {
  const n = row.length;
  let max = row[0];
  let min = row[0];
  for (let i = 1; i < n; i++) {
    if (row[i] > max) max = row[i];
    if (row[i] < min) min = row[i];
  }
  min = Math.max(min, f32(max - 16));
  const lse = logSumExp(row, max);
  const minLogProb = f32(f32(min - max) - lse);
  const scale = f32(f32(max - min) / 65535);
  const head = new Float32Array(out.buffer, out.byteOffset, 2);
  head[0] = scale;
  head[1] = minLogProb;
  out.fill(0, 4);
  if (scale) {
    const inv = f32(1 / scale);
    for (let i = 0; i < n; i++) out[4 + i] = row[i] > min ? nearestInt(f32(inv * f32(row[i] - min))) : 0;
  }
  return f32(f32(max + lse) - row[tok]);
}

/** The log-probability a file row holds for token i (scale x step + min_log_prob, f32). */
export function decodeLogProb(words: Uint16Array, i: number): number {
  const head = new Float32Array(words.buffer, words.byteOffset, 2);
  return f32(f32(head[0] * words[4 + i]) + head[1]);
}

/** Running sums of llama.cpp's kl_divergence_result, and each position's KLD and Δp. */
export class KldAccumulator {
  sumNll = 0;
  sumNll2 = 0;
  sumNllBase = 0;
  sumNllBase2 = 0;
  sumNllNllBase = 0;
  sumKld = 0;
  sumKld2 = 0;
  sumPDiff = 0;
  sumPDiff2 = 0;
  sumPDiff4 = 0;
  maxPDiff = 0;
  nSameTop = 0;
  count = 0;
  readonly kld: number[] = [];
  readonly pDiff: number[] = [];

  /** One scored position: the model's logits `row`, the base's file row `base`, the right token `tok`. */
  add(row: Float32Array, base: Uint16Array, tok: number): void {
    const n = row.length;
    const { max, at: imax } = maxOf(row);
    const lse = logSumExp(row, max);
    const head = new Float32Array(base.buffer, base.byteOffset, 2);
    const scale = head[0];
    const minLogProb = head[1];
    const nll = f32(f32(max + lse) - row[tok]);
    this.sumNll += nll;
    this.sumNll2 += f32(nll * nll);
    const nllBase = -f32(f32(scale * base[4 + tok]) + minLogProb);
    this.sumNllBase += nllBase;
    this.sumNllBase2 += f32(nllBase * nllBase);
    this.sumNllNllBase += f32(nll * nllBase);
    const top = f32(max + lse);
    let sum = 0;
    let imaxBase = -1;
    let pMaxBase = 0;
    for (let i = 0; i < n; i++) {
      const pLogBase = f32(f32(scale * base[4 + i]) + minLogProb);
      if (i === 0 || pLogBase > pMaxBase) {
        pMaxBase = pLogBase;
        imaxBase = i;
      }
      if (pLogBase > -16) sum += f32(f32(Math.exp(pLogBase)) * f32(f32(pLogBase - row[i]) + top));
    }
    this.sumKld += sum;
    this.sumKld2 += sum * sum;
    this.count++;
    if (imax === imaxBase) this.nSameTop++;
    const pDiff = f32(f32(Math.exp(-nll)) - f32(Math.exp(-nllBase)));
    this.sumPDiff += pDiff;
    const pDiff2 = f32(pDiff * pDiff);
    this.sumPDiff2 += pDiff2;
    this.sumPDiff4 += pDiff2 * pDiff2;
    this.maxPDiff = Math.max(this.maxPDiff, Math.abs(pDiff));
    this.kld.push(f32(sum));
    this.pDiff.push(pDiff);
  }
}

/** A value and its uncertainty (llama.cpp's "±"). */
export interface Estimate {
  value: number;
  error: number;
}

/** llama.cpp's mean_and_uncertainty: no uncertainty from 10 values or fewer. */
function meanAndUncertainty(sum: number, sum2: number, count: number): Estimate {
  if (count < 1) return { value: 0, error: 0 };
  const f = sum / count;
  const df = sum2 / count - f * f;
  return { value: f, error: df > 0 && count > 10 ? Math.sqrt(df / (count - 1)) : 0 };
}

function covariance(a: number, b: number, ab: number, count: number): number {
  if (count < 10) return 0;
  return (ab / count - (a / count) * (b / count)) / (count - 1);
}

/** llama.cpp's percentile of sorted f32 values (linear between neighbours, in f32). */
function percentile(sorted: Float32Array, fraction: number): number {
  if (fraction <= 0) return sorted[0];
  if (fraction >= 1) return sorted[sorted.length - 1];
  let p = f32(f32(fraction) * (sorted.length - 1));
  const ip = Math.floor(p);
  p = f32(p - ip);
  return f32(f32(f32(1 - p) * sorted[ip]) + f32(p * sorted[Math.min(ip + 1, sorted.length - 1)]));
}

function median(sorted: Float32Array): number {
  const n = sorted.length;
  return n % 2 === 0 ? f32(0.5 * f32(sorted[n / 2] + sorted[n / 2 - 1])) : sorted[Math.floor(n / 2)];
}

/** The summary llama-perplexity prints at each chunk: the running values. */
export interface KldRunning {
  ppl: Estimate;
  /** ln(PPL(Q)/PPL(base)). */
  lnPplRatio: Estimate;
  kld: Estimate;
  /** RMS of Δp (a fraction). */
  rmsDp: Estimate;
  /** Share of positions where both models put the same token on top. */
  sameTop: Estimate;
}

export interface KldStats extends KldRunning {
  positions: number;
  pplBase: Estimate;
  /** Correlation of ln PPL(Q) and ln PPL(base) over positions. */
  lnPplCorrelation: number;
  pplRatio: Estimate;
  pplDiff: Estimate;
  /** KLD: maximum, the llama.cpp percentiles (99.9 .. 0.1), median, minimum. */
  kldPercentiles: Record<string, number>;
  /** Mean Δp (model minus base probability of the right token), and its percentiles. */
  dp: Estimate;
  dpPercentiles: Record<string, number>;
}

/** The log-perplexities of both models (mean NLL and its uncertainty) and their covariance. */
function logPpls(a: KldAccumulator): { lnPpl: Estimate; lnBase: Estimate; cov: number } {
  return {
    lnPpl: meanAndUncertainty(a.sumNll, a.sumNll2, a.count),
    lnBase: meanAndUncertainty(a.sumNllBase, a.sumNllBase2, a.count),
    cov: covariance(a.sumNll, a.sumNllBase, a.sumNllNllBase, a.count),
  };
}

export function kldRunning(a: KldAccumulator): KldRunning {
  const { lnPpl, lnBase, cov } = logPpls(a);
  const mse = meanAndUncertainty(a.sumPDiff2, a.sumPDiff4, a.count);
  const rms = Math.sqrt(mse.value);
  const top = a.nSameTop / a.count;
  return {
    ppl: { value: Math.exp(lnPpl.value), error: Math.exp(lnPpl.value) * lnPpl.error },
    lnPplRatio: { value: lnPpl.value - lnBase.value, error: Math.sqrt(lnPpl.error * lnPpl.error + lnBase.error * lnBase.error - 2 * cov) },
    kld: meanAndUncertainty(a.sumKld, a.sumKld2, a.count),
    rmsDp: { value: rms, error: (0.5 / rms) * mse.error },
    sameTop: { value: top, error: Math.sqrt((top * (1 - top)) / (a.count - 1)) },
  };
}

const KLD_POINTS: [string, number][] = [['99.9%', 0.999], ['99.0%', 0.99], ['95.0%', 0.95], ['90.0%', 0.9], ['10.0%', 0.1], ['5.0%', 0.05], ['1.0%', 0.01], ['0.1%', 0.001]];
const DP_POINTS: [string, number][] = [['99.9%', 0.999], ['99.0%', 0.99], ['95.0%', 0.95], ['90.0%', 0.9], ['75.0%', 0.75], ['25.0%', 0.25], ['10.0%', 0.1], ['5.0%', 0.05], ['1.0%', 0.01], ['0.1%', 0.001]];

/** The final statistics llama-perplexity prints (it prints them from 100 positions on). */
export function kldStats(a: KldAccumulator): KldStats {
  if (a.count < 1) throw new EngineError('KAIL_E_INVALID_ARG', 'KL divergence: no positions were scored');
  const run = kldRunning(a);
  const { lnPpl, lnBase, cov } = logPpls(a);
  const ppl = run.ppl.value;
  const pplErr = run.ppl.error;
  const base = Math.exp(lnBase.value);
  const baseErr = base * lnBase.error;
  const ratio = Math.exp(run.lnPplRatio.value);
  const kld = Float32Array.from(a.kld).sort();
  const dp = Float32Array.from(a.pDiff).sort();
  const kldPercentiles: Record<string, number> = { max: kld[kld.length - 1] };
  for (const [k, f] of KLD_POINTS.slice(0, 4)) kldPercentiles[k] = percentile(kld, f);
  kldPercentiles.median = median(kld);
  for (const [k, f] of KLD_POINTS.slice(4)) kldPercentiles[k] = percentile(kld, f);
  kldPercentiles.min = kld[0];
  const dpPercentiles: Record<string, number> = { max: dp[dp.length - 1] };
  for (const [k, f] of DP_POINTS.slice(0, 5)) dpPercentiles[k] = percentile(dp, f);
  dpPercentiles.median = median(dp);
  for (const [k, f] of DP_POINTS.slice(5)) dpPercentiles[k] = percentile(dp, f);
  dpPercentiles.min = dp[0];
  return {
    ...run,
    positions: a.count,
    pplBase: { value: base, error: baseErr },
    lnPplCorrelation: cov / (lnPpl.error * lnBase.error),
    pplRatio: { value: ratio, error: ratio * run.lnPplRatio.error },
    pplDiff: { value: ppl - base, error: Math.sqrt(pplErr * pplErr + baseErr * baseErr - 2 * ppl * base * cov) },
    kldPercentiles,
    dp: meanAndUncertainty(a.sumPDiff, a.sumPDiff2, a.count),
    dpPercentiles,
  };
}

const fx = (v: number, w: number, d: number) => v.toFixed(d).padStart(w);

/** One chunk's line, as llama-perplexity prints it under its header. */
export function kldChunkLine(chunk: number, r: KldRunning): string {
  return (
    `${String(chunk).padStart(4)}    ${fx(r.ppl.value, 9, 4)} ± ${fx(r.ppl.error, 9, 4)}    ${fx(r.lnPplRatio.value, 10, 5)} ± ${fx(r.lnPplRatio.error, 10, 5)}` +
    `    ${fx(r.kld.value, 10, 5)} ± ${fx(r.kld.error, 10, 5)}    ${fx(100 * r.rmsDp.value, 6, 3)} ± ${fx(100 * r.rmsDp.error, 6, 3)} %    ${fx(100 * r.sameTop.value, 6, 3)} ± ${fx(100 * r.sameTop.error, 6, 3)} %`
  );
}

export const KLD_CHUNK_HEADER = 'chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p';

/** The final statistics in llama-perplexity's words and layout. */
export function kldStatsLines(s: KldStats): string[] {
  const e = (x: Estimate, w = 10, d = 6) => `${fx(x.value, w, d)} ± ${fx(x.error, w, d)}`;
  const pct = (v: number) => `${fx(100 * v, 6, 3)}%`;
  const label = (k: string) => (k === 'max' ? 'Maximum' : k === 'min' ? 'Minimum' : k === 'median' ? 'Median ' : k.padStart(5).padEnd(7));
  return [
    '====== Perplexity statistics ======',
    `Mean PPL(Q)                   : ${e(s.ppl)}`,
    `Mean PPL(base)                : ${e(s.pplBase)}`,
    `Cor(ln(PPL(Q)), ln(PPL(base))): ${fx(100 * s.lnPplCorrelation, 6, 2)}%`,
    `Mean ln(PPL(Q)/PPL(base))     : ${e(s.lnPplRatio)}`,
    `Mean PPL(Q)/PPL(base)         : ${e(s.pplRatio)}`,
    `Mean PPL(Q)-PPL(base)         : ${e(s.pplDiff)}`,
    '',
    '====== KL divergence statistics ======',
    `Mean    KLD: ${e(s.kld)}`,
    ...Object.entries(s.kldPercentiles).map(([k, v]) => `${label(k)} KLD: ${fx(v, 10, 6)}`),
    '',
    '====== Token probability statistics ======',
    `Mean    Δp: ${fx(100 * s.dp.value, 6, 3)} ± ${fx(100 * s.dp.error, 5, 3)} %`,
    ...Object.entries(s.dpPercentiles).map(([k, v]) => `${label(k)} Δp: ${pct(v)}`),
    `RMS Δp    : ${fx(100 * s.rmsDp.value, 6, 3)} ± ${fx(100 * s.rmsDp.error, 5, 3)} %`,
    `Same top p: ${fx(100 * s.sameTop.value, 6, 3)} ± ${fx(100 * s.sameTop.error, 5, 3)} %`,
  ];
}

// --- the file ---

/** A base-logits file's header (the rows stay on disk; readBaseChunk reads one chunk's). */
export interface BaseLogitsFile {
  path: string;
  nCtx: number;
  nVocab: number;
  nChunk: number;
  /** n_chunk x n_ctx tokens, as the text tokenized. */
  tokens: Int32Array;
  /** Where chunk 0's rows start. */
  dataOffset: number;
  /** Bytes of one chunk's rows. */
  chunkBytes: number;
}

/** Scored positions per chunk: n_ctx/2 .. n_ctx-2 predict the tokens after them. */
export const scoredPerChunk = (nCtx: number) => nCtx - 1 - Math.floor(nCtx / 2);

/** Reads and checks a base-logits file's header and size. */
export function openBaseLogits(path: string): BaseLogitsFile {
  let fd: number;
  try {
    fd = fs.openSync(path, 'r');
  } catch (e) {
    throw new EngineError('KAIL_E_INVALID_ARG', `${path}: cannot open the base logits: ${fsErrorText(e)}`);
  }
  try {
    if (fs.fstatSync(fd).isDirectory()) throw new EngineError('KAIL_E_INVALID_ARG', `${path}: cannot open the base logits: ${fsErrorText({ code: 'EISDIR' })}`);
    const size = fs.fstatSync(fd).size;
    const head = Buffer.alloc(20);
    if (fs.readSync(fd, head, 0, 20, 0) < 20 || head.toString('latin1', 0, 8) !== MAGIC)
      throw new EngineError('KAIL_E_INVALID_ARG', `${path} does not look like a file of base log-probabilities (llama-perplexity's --kl-divergence-base file starts with '${MAGIC}')`);
    const nCtx = head.readUInt32LE(8);
    const nVocab = head.readInt32LE(12);
    const nChunk = head.readInt32LE(16);
    if (nCtx < 4 || nCtx > 1 << 20 || nVocab < 1 || nVocab > 1 << 24 || nChunk < 1)
      throw new EngineError('KAIL_E_INVALID_ARG', `${path}: impossible header (n_ctx ${nCtx}, n_vocab ${nVocab}, n_chunk ${nChunk})`);
    const chunkBytes = scoredPerChunk(nCtx) * logProbWords(nVocab) * 2;
    const dataOffset = 20 + 4 * nCtx * nChunk;
    const want = dataOffset + nChunk * chunkBytes;
    if (size !== want)
      throw new EngineError('KAIL_E_INVALID_ARG', `${path} is ${size} bytes; ${nChunk} chunks of ${nCtx} tokens over a vocabulary of ${nVocab} make ${want} (${size < want ? 'cut short' : 'extra bytes'})`);
    const tokens = new Int32Array(nCtx * nChunk);
    fs.readSync(fd, new Uint8Array(tokens.buffer), 0, tokens.byteLength, 20);
    return { path, nCtx, nVocab, nChunk, tokens, dataOffset, chunkBytes };
  } finally {
    fs.closeSync(fd);
  }
}

/** One chunk's rows (scoredPerChunk x logProbWords words). */
export function readBaseChunk(f: BaseLogitsFile, fd: number, chunk: number): Uint16Array {
  const out = new Uint16Array(f.chunkBytes / 2);
  const bytes = new Uint8Array(out.buffer);
  for (let off = 0; off < bytes.length; ) {
    const n = fs.readSync(fd, bytes, off, bytes.length - off, f.dataOffset + chunk * f.chunkBytes + off);
    if (n <= 0) throw new EngineError('KAIL_E_INVALID_ARG', `${f.path}: ends inside chunk ${chunk + 1}`);
    off += n;
  }
  return out;
}

/** Writes a base-logits file chunk by chunk (perplexity's saveLogits). */
export class BaseLogitsWriter {
  private readonly fd: number;
  private readonly words: number;
  private chunks = 0;

  constructor(
    readonly path: string,
    readonly nCtx: number,
    readonly nVocab: number,
    readonly nChunk: number,
    tokens: ArrayLike<number>,
  ) {
    if (tokens.length < nCtx * nChunk) throw new EngineError('KAIL_E_INTERNAL', `base logits: ${tokens.length} tokens for ${nChunk} chunks of ${nCtx}`);
    this.words = logProbWords(nVocab);
    this.fd = fs.openSync(path, 'w');
    const head = Buffer.alloc(20);
    head.write(MAGIC, 0, 'latin1');
    head.writeUInt32LE(nCtx, 8);
    head.writeInt32LE(nVocab, 12);
    head.writeInt32LE(nChunk, 16);
    fs.writeSync(this.fd, head);
    fs.writeSync(this.fd, new Uint8Array(Int32Array.from(Array.prototype.slice.call(tokens, 0, nCtx * nChunk) as number[]).buffer));
  }

  /** A chunk's scored rows (logits from position n_ctx/2 on; rows past the targets ignored) and the tokens they predict. */
  addChunk(logits: Float32Array, targets: ArrayLike<number>): void {
    const n = targets.length;
    if (n !== scoredPerChunk(this.nCtx) || logits.length < n * this.nVocab) throw new EngineError('KAIL_E_INTERNAL', `base logits: ${n} rows for a chunk of ${this.nCtx}`);
    const out = new Uint16Array(n * this.words);
    for (let i = 0; i < n; i++) encodeLogProbs(logits.subarray(i * this.nVocab, (i + 1) * this.nVocab), targets[i], out.subarray(i * this.words, (i + 1) * this.words));
    fs.writeSync(this.fd, new Uint8Array(out.buffer));
    this.chunks++;
  }

  close(): void {
    fs.closeSync(this.fd);
  }

  get complete(): boolean {
    return this.chunks === this.nChunk;
  }
}

// --- the run ---

export interface KlDivergenceOptions {
  /** Compare at most this many of the file's chunks (llama-perplexity compares them all). */
  maxChunks?: number;
  nBatch?: number;
  /** Sequence slot to use, one chunk at a time. Default: chunks share passes (chunksPerPass). */
  seq?: number;
  /** After each chunk: its number, the count, and the running values (llama-perplexity's line). */
  onChunk?: (chunk: number, nChunks: number, running: KldRunning) => void;
}

export interface KlDivergenceResult {
  base: string;
  chunks: number;
  nCtx: number;
  stats: KldStats;
  /** The model's own perplexity over the same positions, in float64 (as `kail perplexity` gives it). */
  ppl: number;
  seconds: number;
}

/**
 * The KL divergence of `model` from the base whose log-probabilities the file `base` holds (a path, or its header from openBaseLogits): the file's
 * chunks evaluated as llama-perplexity evaluates them (from an empty cache, the first token
 * replaced by BOS when the vocabulary adds one, the second half scored).
 */
export async function klDivergence(model: EngineModel, base: string | BaseLogitsFile, opts: KlDivergenceOptions = {}): Promise<KlDivergenceResult> {
  // (A header already read, as the CLI reads it for the chunk size, is not read again.)
  const f = typeof base === 'string' ? openBaseLogits(base) : base;
  const basePath = f.path;
  if (f.nVocab !== model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `${basePath}: the base model's vocabulary has ${f.nVocab} tokens, this model's ${model.nVocab}: they must be the same vocabulary`);
  if (f.nCtx > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `${basePath} was computed with chunks of ${f.nCtx} tokens; this model's context is ${model.nCtx}: load it with --ctx ${f.nCtx} or more`);
  for (const t of f.tokens) if (t < 0 || t >= model.nVocab) throw new EngineError('KAIL_E_INVALID_ARG', `${basePath}: token ${t} is outside the vocabulary of ${model.nVocab}`);
  const v = model.tokenizer.vocab;
  const nChunk = Math.min(f.nChunk, opts.maxChunks ?? Infinity);
  const bos = v.addBos ? v.special.bos : null;
  const chunks = Array.from({ length: nChunk }, (_, i) => {
    const c = Array.from(f.tokens.subarray(i * f.nCtx, (i + 1) * f.nCtx));
    if (bos !== null) c[0] = bos;
    return c;
  });
  const seq = opts.seq ?? 0;
  const first = Math.floor(f.nCtx / 2);
  const words = logProbWords(f.nVocab);
  const acc = new KldAccumulator();
  const own = new NllAccumulator();
  const fd = fs.openSync(basePath, 'r');
  let ms = 0;
  try {
    const perPass = opts.seq === undefined ? chunksPerPass(model, f.nCtx, opts.nBatch) : 1;
    for (let c0 = 0; c0 < chunks.length; c0 += perPass) {
      const group = chunks.slice(c0, c0 + perPass);
      const t0 = performance.now();
      const all = perPass > 1 ? await chunksLogits(model, group) : [await chunkLogits(model, seq, group[0], opts.nBatch)];
      ms += performance.now() - t0;
      group.forEach((toks, g) => {
        const c = c0 + g;
        const logits = all[g];
        const base = readBaseChunk(f, fd, c);
        const targets = toks.slice(first + 1);
        for (let i = 0; i < targets.length; i++) acc.add(logits.subarray(i * f.nVocab, (i + 1) * f.nVocab), base.subarray(i * words, (i + 1) * words), targets[i]);
        own.addRows(logits, f.nVocab, targets);
        opts.onChunk?.(c + 1, chunks.length, kldRunning(acc));
      });
    }
  } finally {
    fs.closeSync(fd);
    model.truncate(seq, 0);
  }
  return { base: basePath, chunks: chunks.length, nCtx: f.nCtx, stats: kldStats(acc), ppl: own.ppl, seconds: ms / 1000 };
}
