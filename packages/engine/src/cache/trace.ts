import fs from 'node:fs';

import { EngineError, fsErrorText } from '../errors';

/**
 * A routing trace ready for the expert-cache simulator: one record per (token, layer), ordered
 * by token, then layer. Tokens are numbered 0..tokens-1 across problems in decoding order:
 * `token_idx` restarts at 0 for every `problem_id`, so records are ordered by problem first.
 */
export interface RoutingTrace {
  /** Records (token, layer pairs). */
  records: number;
  /** Distinct (problem, token) pairs. */
  tokens: number;
  problems: number;
  /** Highest layer id + 1. */
  layers: number;
  /** Distinct layer ids (a DeepSeek trace's MoE layers may start past 0: its dense first layers have no router). */
  layerIds: number[];
  /** Highest expert id + 1. */
  experts: number;
  /** Experts per record: the most any record has; shorter records are padded with -1. */
  k: number;
  layer: Int32Array;
  /** Global token number of each record. */
  token: Int32Array;
  /** records x k expert ids in the router's order, -1 for padding. */
  expertIds: Int32Array;
  /** records x k gating probabilities, or empty when the trace has none. */
  probs: Float32Array;
}

interface RawRecord {
  line: number;
  problem: number | string;
  tokenIdx: number;
  layer: number;
  experts: number[];
  probs: number[] | null;
}

const MAX_ID = 2 ** 31 - 1;

/** Where traces keep the router's weights: the fixture's name first, then other writers' names. */
const PROB_KEYS = ['gating_probs', 'probs', 'routing_weights', 'weights', 'scores'] as const;

function isIndex(v: unknown, max = MAX_ID): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max;
}

/**
 * Gating weights as probabilities in [0, 1]: weights that sum above 1 (DeepSeek-V3's, scaled by
 * `routed_scaling_factor`) are divided by their sum; rounding just above 1 is clamped.
 */
function normalizedWeights(w: number[]): number[] {
  const sum = w.reduce((a, b) => a + b, 0);
  if (sum > 1 + 1e-3) return w.map((x) => x / sum);
  return w.map((x) => Math.min(1, x));
}

/**
 * Parses JSON lines like shared/fixtures/routing/*.jsonl: one object per token and layer with
 * `layer`, `token_idx` and `experts` (expert ids, router order), optionally `gating_probs` (same
 * length, non-negative; normalised as `normalizedWeights` says; all records or none; also read
 * under the names in PROB_KEYS) and `problem_id` (number or string). A trace whose records carry
 * no `problem_id` is read in file order as prompts one after another: a (token_idx, layer) pair
 * that comes again starts the next problem, so concatenated traces whose token_idx restarts need
 * no ids. Other keys are ignored. Throws EngineError KAIL_E_INVALID_ARG naming the source and
 * line of the first malformed record.
 */
export function parseRoutingTrace(text: string, source = 'trace'): RoutingTrace {
  const raws: RawRecord[] = [];
  const lines = text.split('\n');
  function fail(line: number, msg: string): never {
    throw new EngineError('KAIL_E_INVALID_ARG', `${source}:${line}: ${msg}`);
  }
  let withProbs: number | null = null;
  let withoutProbs: number | null = null;
  let withProblem = false;
  for (let i = 0; i < lines.length; i++) {
    const s = lines[i].trim();
    if (s === '') continue;
    const line = i + 1;
    let o: unknown;
    try {
      o = JSON.parse(s);
    } catch (e) {
      fail(line, `not valid JSON (${(e as Error).message})`);
    }
    if (typeof o !== 'object' || o === null || Array.isArray(o)) fail(line, 'expected a JSON object per line');
    const r = o as Record<string, unknown>;
    // (A key left out is named as missing, not shown as 'undefined'.)
    const shown = (v: unknown) => (v === undefined ? 'nothing (the key is missing)' : JSON.stringify(v));
    if (!isIndex(r.layer, 4095)) fail(line, `"layer" must be an integer in 0..4095, got ${shown(r.layer)}`);
    if (!isIndex(r.token_idx)) fail(line, `"token_idx" must be a non-negative integer, got ${shown(r.token_idx)}`);
    if (r.problem_id !== undefined && r.problem_id !== null) withProblem = true;
    const problem = r.problem_id ?? 0;
    if (!(typeof problem === 'string' || (typeof problem === 'number' && Number.isFinite(problem))))
      fail(line, `"problem_id" must be a number or a string, got ${JSON.stringify(r.problem_id)}`);
    const experts = r.experts;
    if (!Array.isArray(experts) || experts.length === 0 || experts.length > 1024)
      fail(line, `"experts" must be a non-empty array of expert ids, got ${shown(experts)}`);
    const ex = experts as unknown[];
    for (const e of ex) if (!isIndex(e, 65535)) fail(line, `"experts" must hold integers in 0..65535, got ${JSON.stringify(e)}`);
    if (new Set(ex).size !== ex.length) fail(line, `"experts" names an expert twice: ${JSON.stringify(ex)}`);
    let probs: number[] | null = null;
    const probKey = PROB_KEYS.find((name) => r[name] !== undefined && r[name] !== null);
    if (probKey) {
      const gp = r[probKey];
      if (!Array.isArray(gp) || gp.length !== ex.length)
        fail(line, `"${probKey}" must be an array as long as "experts" (${ex.length}), got ${JSON.stringify(gp)}`);
      for (const p of gp as unknown[])
        if (typeof p !== 'number' || !Number.isFinite(p) || p < 0) fail(line, `"${probKey}" must hold non-negative numbers, got ${JSON.stringify(p)}`);
      probs = normalizedWeights(gp as number[]);
      withProbs ??= line;
    } else {
      withoutProbs ??= line;
    }
    raws.push({ line, problem: problem as number | string, tokenIdx: r.token_idx as number, layer: r.layer as number, experts: ex as number[], probs });
  }
  if (raws.length === 0) throw new EngineError('KAIL_E_INVALID_ARG', `${source}: no records`);
  if (withProbs !== null && withoutProbs !== null)
    fail(Math.max(withProbs, withoutProbs), `"gating_probs" ${withoutProbs > withProbs ? 'missing' : 'present'} here but ${withoutProbs > withProbs ? 'present' : 'missing'} on line ${Math.min(withProbs, withoutProbs)}: give it on every record or none`);

  if (!withProblem) {
    // Prompts one after another: a pair seen again in this problem begins the next one.
    let problem = 0;
    let seen = new Set<number>();
    for (const r of raws) {
      const pair = r.tokenIdx * 4096 + r.layer;
      if (seen.has(pair)) {
        problem++;
        seen = new Set();
      }
      seen.add(pair);
      r.problem = problem;
    }
  }
  // Problems in numeric order when every id is a number, else in order of first appearance.
  const problemOrder = new Map<number | string, number>();
  for (const r of raws) if (!problemOrder.has(r.problem)) problemOrder.set(r.problem, problemOrder.size);
  if (raws.every((r) => typeof r.problem === 'number')) {
    const ids = [...problemOrder.keys()] as number[];
    ids.sort((a, b) => a - b).forEach((id, i) => problemOrder.set(id, i));
  }
  const order = raws.map((_, i) => i);
  const key = (r: RawRecord) => [problemOrder.get(r.problem)!, r.tokenIdx, r.layer];
  order.sort((a, b) => {
    const ka = key(raws[a]), kb = key(raws[b]);
    return ka[0] - kb[0] || ka[1] - kb[1] || ka[2] - kb[2] || a - b;
  });

  const n = order.length;
  let k = 1;
  for (const r of raws) k = Math.max(k, r.experts.length);
  const layer = new Int32Array(n);
  const token = new Int32Array(n);
  const expertIds = new Int32Array(n * k).fill(-1);
  const probs = withProbs !== null ? new Float32Array(n * k) : new Float32Array(0);
  let tokens = 0, layers = 0, nExperts = 0;
  for (let i = 0; i < n; i++) {
    const r = raws[order[i]];
    if (i > 0) {
      const p = raws[order[i - 1]];
      const sameToken = p.problem === r.problem && p.tokenIdx === r.tokenIdx;
      if (sameToken && p.layer === r.layer)
        fail(Math.max(p.line, r.line), `repeats problem ${JSON.stringify(r.problem)} token ${r.tokenIdx} layer ${r.layer} of line ${Math.min(p.line, r.line)}`);
      if (!sameToken) tokens++;
    }
    layer[i] = r.layer;
    token[i] = tokens;
    layers = Math.max(layers, r.layer + 1);
    for (let j = 0; j < r.experts.length; j++) {
      expertIds[i * k + j] = r.experts[j];
      nExperts = Math.max(nExperts, r.experts[j] + 1);
      if (r.probs) probs[i * k + j] = r.probs[j];
    }
  }
  const layerIds = [...new Set(layer)].sort((a, b) => a - b);
  return { records: n, tokens: tokens + 1, problems: problemOrder.size, layers, layerIds, experts: nExperts, k, layer, token, expertIds, probs };
}

/** Reads and parses a JSONL routing trace; KAIL_E_IO when the file cannot be read. */
export function readRoutingTrace(path: string): RoutingTrace {
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    throw new EngineError('KAIL_E_IO', `cannot read routing trace ${path}: ${fsErrorText(e)}`);
  }
  return parseRoutingTrace(text, path);
}
