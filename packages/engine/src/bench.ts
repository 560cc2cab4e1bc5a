import type { NativeExpertStreamStats } from '@kailstream/core-native';

import type { EngineModel } from './model/model';
import { summarizeStream } from './model/stream-summary';

export interface BenchOptions {
  /** Prompt tokens (pp). Default 512. */
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
}

export interface BenchResult {
  prompt_tokens: number;
  gen_tokens: number;
  prompt_tps: number;
  gen_tps: number;
  prompt_ms: number;
  gen_ms: number;
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
  bytes_read_per_token: number;
  stall_s: number;
  read_s: number;
  prefetch_precision: number;
  prefetch_recall: number;
  peak_cache_bytes: number;
}

function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s;
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** llama-bench style: prompt processing of N random tokens, then M single-token decode steps. */
export async function benchmark(model: EngineModel, opts: BenchOptions = {}): Promise<BenchResult> {
  const pp = opts.promptTokens ?? 512;
  const tg = opts.genTokens ?? 128;
  const feed = opts.feed ?? 'greedy';
  const reps = Math.max(1, opts.reps ?? 1);
  const rand = xorshift(opts.seed ?? 42);
  const nv = model.nVocab;
  const ppMs: number[] = [];
  const tgMs: number[] = [];
  const gen: { before: NativeExpertStreamStats; after: NativeExpertStreamStats }[] = [];
  for (let r = 0; r < reps; r++) {
    model.truncate(0, 0);
    const prompt = Array.from({ length: Math.max(1, pp) }, () => rand() % nv);
    const t0 = performance.now();
    let logits = await model.evaluate(0, prompt, 'last');
    ppMs.push(performance.now() - t0);
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
    prompt_tps: pp / (pms / 1000),
    gen_tps: tg ? tg / (gms / 1000) : 0,
    prompt_ms: pms,
    gen_ms: gms,
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
    bytes_read_per_token: tokens ? sum((p) => p.bytesRead) / tokens : 0,
    stall_s: sum((p) => p.stallSeconds),
    read_s: sum((p) => p.readSeconds),
    prefetch_precision: predicted ? correct / predicted : 0,
    prefetch_recall: actual ? correct / actual : 0,
    peak_cache_bytes: last.peakBytes,
  };
}
