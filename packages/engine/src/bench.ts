import type { NativeExpertStreamStats } from '@kailstream/core-native';

import { EngineError } from './errors';
import { isExpertTensor, openGgufMetadata, type EngineModel } from './model/model';
import { summarizeStream } from './model/stream-summary';

export interface BenchOptions {
  /** Prompt tokens (pp). Default 512. 0: generation alone, after one untimed token (llama-bench's tg test). */
  promptTokens?: number;
  /** Generated tokens (tg). Default 128. */
  genTokens?: number;
  /**
   * What each decode step feeds: 'greedy' (the argmax of the last logits) or 'random' (a fresh
   * random token id, so MoE routing varies like real text instead of looping). Default 'greedy'.
   */
  feed?: 'greedy' | 'random';
  /** Repetitions; the median is reported. Default 1. */
  reps?: number;
  seed?: number;
  /**
   * Context depth (llama-bench's -d): this many random tokens fill the cache first, untimed, so
   * pp and tg are measured with attention over them (long-context speed). Default 0.
   */
  depth?: number;
}

export interface BenchResult {
  prompt_tokens: number;
  gen_tokens: number;
  prompt_tps: number;
  gen_tps: number;
  prompt_ms: number;
  gen_ms: number;
  /** Standard deviation of the reps' tokens/s (llama-bench's stddev_ts); 0 for one rep. */
  prompt_tps_stddev: number;
  gen_tps_stddev: number;
  /** Prompt and generation as one test (llama-bench's -pg): their tokens over their time, median of the reps, and its spread. */
  pg_tps: number;
  pg_tps_stddev: number;
  /** Tokens in the cache before the prompt (BenchOptions.depth). */
  depth: number;
  feed: 'greedy' | 'random';
  reps: number;
  threads: number;
  arch: string;
  model: string;
  /** Expert streaming over the generation phases of all reps; null on the in-memory path. */
  stream: BenchStreamResult | null;
}

export interface BenchStreamResult {
  ram_bytes: number;
  cache_bytes: number;
  direct_io: boolean;
  io_threads: number;
  policy: string;
  /** Distinct experts asked for per layer and step that were cached and ready. */
  hit_rate: number;
  /** Of the same accesses, the share whose read a prefetch had issued but not finished (counted as misses in hit_rate). */
  inflight_rate: number;
  bytes_read_per_token: number;
  stall_s: number;
  read_s: number;
  prefetch_precision: number;
  prefetch_recall: number;
  peak_cache_bytes: number;
  /** The VRAM tier's device ('' without one), its capacity, and the bytes per token it copied back into RAM. */
  vram_device: string;
  vram_capacity_bytes: number;
  vram_bytes_per_token: number;
  vram_s: number;
}

function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s;
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Sample standard deviation of the rates `tokens` per each of `ms` (0 below two samples). */
function rateStddev(tokens: number, ms: number[]): number {
  if (ms.length < 2 || !tokens) return 0;
  const rates = ms.map((m) => tokens / (m / 1000));
  const mean = rates.reduce((a, b) => a + b, 0) / rates.length;
  return Math.sqrt(rates.reduce((a, r) => a + (r - mean) ** 2, 0) / (rates.length - 1));
}

/** llama-bench style: prompt processing of N random tokens, then M single-token decode steps. */
export async function benchmark(model: EngineModel, opts: BenchOptions = {}): Promise<BenchResult> {
  const pp = opts.promptTokens ?? 512;
  // (An embedding model generates nothing: prompt processing only.)
  const tg = model.encoder ? 0 : (opts.genTokens ?? 128);
  const feed = opts.feed ?? 'greedy';
  const reps = Math.max(1, opts.reps ?? 1);
  const depth = opts.depth ?? 0;
  if (!Number.isInteger(depth) || depth < 0) throw new EngineError('KAIL_E_INVALID_ARG', `bench: the depth must be a non-negative integer, got ${depth}`);
  if (!Number.isInteger(pp) || pp < 0 || !Number.isInteger(tg) || tg < 0 || pp + tg === 0)
    throw new EngineError('KAIL_E_INVALID_ARG', `bench: prompt and generated tokens must be non-negative integers, not both 0; got ${pp} and ${tg}`);
  if (depth + Math.max(1, pp) + tg > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `bench: depth ${depth} + ${pp} prompt + ${tg} generated tokens do not fit the model's context of ${model.nCtx}`);
  const rand = xorshift(opts.seed ?? 42);
  const nv = model.nVocab;
  const ppMs: number[] = [];
  const tgMs: number[] = [];
  const gen: { before: NativeExpertStreamStats; after: NativeExpertStreamStats }[] = [];
  for (let r = 0; r < reps; r++) {
    model.truncate(0, 0);
    if (depth) await model.evaluate(0, Array.from({ length: depth }, () => rand() % nv), 'last');
    // (Without a prompt, one untimed token gives the first step its logits.)
    const prompt = Array.from({ length: Math.max(1, pp) }, () => rand() % nv);
    const t0 = performance.now();
    let logits = await model.evaluate(0, prompt, 'last');
    ppMs.push(pp ? performance.now() - t0 : 0);
    let ms = 0;
    const before = model.runtime.stats().stream;
    for (let i = 0; i < tg; i++) {
      let next = 0;
      if (feed === 'random') next = rand() % nv;
      else for (let j = 1; j < nv; j++) if (logits[j] > logits[next]) next = j;
      const t = performance.now();
      logits = await model.evaluate(0, [next], 'last');
      ms += performance.now() - t;
    }
    tgMs.push(ms);
    const after = model.runtime.stats().stream;
    if (before && after) gen.push({ before, after });
  }
  const pms = median(ppMs);
  const gms = median(tgMs);
  return {
    prompt_tokens: pp,
    gen_tokens: tg,
    prompt_tps: pp ? pp / (pms / 1000) : 0,
    gen_tps: tg ? tg / (gms / 1000) : 0,
    prompt_ms: pms,
    gen_ms: gms,
    prompt_tps_stddev: rateStddev(pp, ppMs),
    gen_tps_stddev: rateStddev(tg, tgMs),
    pg_tps: (pp + tg) / (median(ppMs.map((m, r) => m + tgMs[r])) / 1000),
    pg_tps_stddev: rateStddev(pp + tg, ppMs.map((m, r) => m + tgMs[r])),
    depth,
    feed,
    reps,
    threads: model.runtime.nThreads,
    arch: model.hparams.arch,
    model: model.path,
    stream: gen.length && model.plan ? benchStream(gen, tg * reps, model.plan.ramBytes) : null,
  };
}

function benchStream(gen: { before: NativeExpertStreamStats; after: NativeExpertStreamStats }[], tokens: number, ramBytes: number): BenchStreamResult {
  const parts = gen.map((g) => summarizeStream(g.after, g.before));
  const sum = (f: (p: (typeof parts)[number]) => number) => parts.reduce((a, p) => a + f(p), 0);
  const accesses = sum((p) => p.accesses);
  const last = gen[gen.length - 1].after;
  const predicted = gen.reduce((a, g) => a + g.after.layers.reduce((b, l, i) => b + l.predicted - g.before.layers[i].predicted, 0), 0);
  const correct = gen.reduce((a, g) => a + g.after.layers.reduce((b, l, i) => b + l.predictedCorrect - g.before.layers[i].predictedCorrect, 0), 0);
  const actual = gen.reduce((a, g) => a + g.after.layers.reduce((b, l, i) => b + l.predictedActual - g.before.layers[i].predictedActual, 0), 0);
  return {
    ram_bytes: ramBytes,
    cache_bytes: last.capacityBytes,
    direct_io: last.directIo,
    io_threads: last.ioThreads,
    policy: last.policy,
    hit_rate: accesses ? sum((p) => p.hits) / accesses : 0,
    inflight_rate: accesses ? sum((p) => p.missesInflight) / accesses : 0,
    bytes_read_per_token: tokens ? sum((p) => p.bytesRead) / tokens : 0,
    stall_s: sum((p) => p.stallSeconds),
    read_s: sum((p) => p.readSeconds),
    prefetch_precision: predicted ? correct / predicted : 0,
    prefetch_recall: actual ? correct / actual : 0,
    peak_cache_bytes: last.peakBytes,
    vram_device: last.vram.device,
    vram_capacity_bytes: last.vram.capacityBytes,
    vram_bytes_per_token: tokens ? sum((p) => p.vramBytes) / tokens : 0,
    vram_s: sum((p) => p.vramSeconds),
  };
}

export interface ParallelBenchOptions {
  /** Sequence counts to run, one row each (llama-batched-bench's -npl). Default [1, 4, 16]. */
  parallel?: number[];
  /** Prompt tokens per sequence. Default 32. */
  promptTokens?: number;
  /** Decode passes: each gives every sequence one token. Default 32. */
  genTokens?: number;
  feed?: 'greedy' | 'random';
  /** Repetitions per row; the median pass time is reported. Default 1. */
  reps?: number;
  seed?: number;
}

export interface ParallelBenchRow {
  sequences: number;
  /** All sequences' prompts, prefilled together in passes of up to nBatch tokens. */
  prompt_tps: number;
  /** Aggregate decode rate: sequences x decode passes / their time. */
  gen_tps: number;
  /** Median of the reps' mean decode pass time. */
  pass_ms: number;
  /** gen_tps over the one-sequence row's (null without that row). */
  speedup: number | null;
  /** Distinct experts a decode pass ran per MoE layer, averaged (0 for a dense model). */
  experts_per_layer: number;
  /**
   * Weight bytes a decode pass reads per generated token: the non-expert weights a pass reads
   * whatever its size (all but the token embedding's unused rows) plus the distinct experts it
   * ran, over the sequences. What sharing a pass saves; compute costs what it costs on top.
   */
  weight_bytes_per_token: number;
  /** Expert bytes read from storage per generated token when experts stream; null in RAM. */
  stream_bytes_read_per_token: number | null;
  /** Sequence 0's generated tokens in the last rep (its prompt is the same in every row). */
  seq0_tokens: number[];
}

export interface ParallelBenchResult {
  model: string;
  arch: string;
  threads: number;
  feed: 'greedy' | 'random';
  prompt_tokens: number;
  gen_tokens: number;
  reps: number;
  rows: ParallelBenchRow[];
}

/**
 * llama-batched-bench style: for each sequence count N, N random prompts prefilled together, then
 * decode passes that each feed every sequence one token (its greedy choice or a random id), as
 * continuous batching runs them. Sequence s's prompt depends on s and the seed only, so sequence
 * 0 decodes the same tokens alone or among others (greedy feed; the kernels are batch-invariant).
 */
export async function benchmarkParallel(model: EngineModel, opts: ParallelBenchOptions = {}): Promise<ParallelBenchResult> {
  const parallel = opts.parallel ?? [1, 4, 16];
  const pp = opts.promptTokens ?? 32;
  const tg = opts.genTokens ?? 32;
  const feed = opts.feed ?? 'greedy';
  const reps = Math.max(1, opts.reps ?? 1);
  const seed = opts.seed ?? 42;
  if (!parallel.length || parallel.some((n) => !Number.isInteger(n) || n < 1))
    throw new EngineError('KAIL_E_INVALID_ARG', `parallel: sequence counts must be integers >= 1, got [${parallel.join(', ')}]`);
  const most = Math.max(...parallel);
  if (most > model.nSeqMax) throw new EngineError('KAIL_E_INVALID_ARG', `parallel: ${most} sequences, but the model was loaded for ${model.nSeqMax}`);
  if (pp < 1 || pp + tg > model.nCtx) throw new EngineError('KAIL_E_INVALID_ARG', `parallel: ${pp} prompt + ${tg} generated tokens do not fit the context of ${model.nCtx} per sequence`);
  const nv = model.nVocab;
  const nE = model.program.nExpert;
  const nL = model.program.nMoeLayers;
  const dense = denseBytesPerPass(model);
  // Warm-up, untimed (as llama-bench's): one pass of random tokens touches the weights (most
  // experts too) so the first row does not pay for page faults the others do not.
  const warm = xorshift(seed + 1);
  model.truncate(0, 0);
  await model.evaluate(0, Array.from({ length: Math.min(model.nBatch, model.nCtx) }, () => warm() % nv), 'last');
  const rows: ParallelBenchRow[] = [];
  for (const n of parallel) {
    const ppMs: number[] = [];
    const passMs: number[] = [];
    let experts = 0;
    let passes = 0;
    let streamBytes = 0;
    let seq0: number[] = [];
    for (let r = 0; r < reps; r++) {
      for (let s = 0; s < n; s++) model.truncate(s, 0);
      const prompts = Array.from({ length: n }, (_, s) => {
        const rand = xorshift(seed + 7919 * s);
        return Array.from({ length: pp }, () => rand() % nv);
      });
      const rand = xorshift(seed ^ 0x5bd1e995);
      // Prefill: every sequence's prompt, sequence-major, nBatch tokens per pass.
      const flat = prompts.flatMap((p, s) => p.map((tok, i) => ({ tok, s, i })));
      let logits: Float32Array = new Float32Array(n * nv);
      const t0 = performance.now();
      for (let b = 0; b < flat.length; b += model.nBatch) {
        const part = flat.slice(b, b + model.nBatch);
        const out = await model.forwardBatch({
          tokens: Int32Array.from(part, (x) => x.tok),
          pos: Int32Array.from(part, (x) => x.i),
          seq: Int32Array.from(part, (x) => x.s),
          output: Uint8Array.from(part, (x) => (x.i === pp - 1 ? 1 : 0)),
        });
        let k = 0;
        for (const x of part) {
          if (x.i !== pp - 1) continue;
          logits.set(out.subarray(k * nv, (k + 1) * nv), x.s * nv);
          k++;
        }
      }
      ppMs.push(performance.now() - t0);
      seq0 = [];
      let ms = 0;
      const before = model.runtime.stats().stream;
      for (let step = 0; step < tg; step++) {
        const next = Int32Array.from({ length: n }, (_, s) => (feed === 'random' ? rand() % nv : argmax(logits, s * nv, nv)));
        seq0.push(next[0]);
        const counts = nL ? Float64Array.from(model.runtime.stats().expertCounts) : null;
        const t = performance.now();
        logits = await model.forwardBatch({ tokens: next, pos: new Int32Array(n).fill(pp + step), seq: Int32Array.from({ length: n }, (_, s) => s), output: new Uint8Array(n).fill(1) });
        ms += performance.now() - t;
        passes++;
        if (counts) {
          const c = model.runtime.stats().expertCounts;
          for (let i = 0; i < nL * nE; i++) if (c[i] > counts[i]) experts++;
        }
      }
      passMs.push(tg ? ms / tg : 0);
      const after = model.runtime.stats().stream;
      if (before && after) streamBytes += summarizeStream(after, before).bytesRead;
    }
    const pass = median(passMs);
    const perLayer = nL && passes ? experts / passes / nL : 0;
    const row: ParallelBenchRow = {
      sequences: n,
      prompt_tps: (n * pp) / (median(ppMs) / 1000),
      gen_tps: pass ? n / (pass / 1000) : 0,
      pass_ms: pass,
      speedup: null,
      experts_per_layer: perLayer,
      weight_bytes_per_token: (dense + perLayer * nL * model.summary.bytesPerExpert) / n,
      stream_bytes_read_per_token: model.plan && passes ? streamBytes / (passes * n) : null,
      seq0_tokens: seq0,
    };
    rows.push(row);
  }
  const one = rows.find((r) => r.sequences === 1);
  if (one?.gen_tps) for (const r of rows) r.speedup = r.gen_tps / one.gen_tps;
  return { model: model.path, arch: model.hparams.arch, threads: model.runtime.nThreads, feed, prompt_tokens: pp, gen_tokens: tg, reps, rows };
}

function argmax(v: Float32Array, off: number, n: number): number {
  let best = 0;
  for (let j = 1; j < n; j++) if (v[off + j] > v[off + best]) best = j;
  return best;
}

/**
 * Non-expert weight bytes every pass reads whatever its tokens: each tensor an op other than the
 * embedding lookup names (the embedding counts when the output head is tied to it), experts aside.
 */
function denseBytesPerPass(model: EngineModel): number {
  const names = new Set(model.program.ops.filter((op) => op.op !== 'embed').flatMap((op) => Object.values(op.weights ?? {})));
  const file = openGgufMetadata(model.path);
  try {
    return file.tensors.filter((t) => names.has(t.name) && !isExpertTensor(t.name)).reduce((a, t) => a + t.nbytes, 0);
  } finally {
    file.close();
  }
}
