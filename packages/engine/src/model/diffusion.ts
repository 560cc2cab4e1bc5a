// Text generation for diffusion language models (llada, llada-moe, rnd1, dream): the canvas is the
// prompt followed by mask tokens, and every step runs one non-causal pass over the whole canvas and
// unmasks some of the masked positions, chosen by a confidence measure, until none is left. The
// semantics follow llama.cpp's examples/diffusion/diffusion.cpp (algorithms, transfer schedules,
// shift_logits, the sampling chain, seeded draws) and, where that file departs from the reference
// implementations it ports (Dream's and LLaDA's generate()), the reference; each such place says so.
import { EngineError } from '../errors';
import { Mt19937 } from '../sampling/rng';
import type { StopMatcher } from '../sampling/stop';
import type { TokenPrefixDecoder, Tokenizer } from '../tokenizer/tokenizer';
import type { EngineModel } from './model';

/** llama.cpp's diffusion algorithms, in its numbering (--diffusion-algorithm 0..4). */
export const DIFFUSION_ALGORITHMS = ['origin', 'entropy', 'margin', 'random', 'confidence'] as const;
export type DiffusionAlgorithm = (typeof DIFFUSION_ALGORITHMS)[number];

/** How many masked positions each step unmasks. */
export type DiffusionSchedule =
  /** Dream's: step s of n keeps a share (1 - s'/t) of the masks, t = 1 - s/n (1 - eps); the last step unmasks all. */
  | { kind: 'timestep'; eps: number }
  /** LLaDA's: the generated part in blocks of blockLength, unmasked left to right, steps split evenly between them. */
  | { kind: 'block'; blockLength: number };

export interface DiffusionParams {
  /** Forward passes in all (llama.cpp's --diffusion-steps; default 128). */
  steps: number;
  /** Default 'confidence' (llama.cpp's default, 4). */
  algorithm: DiffusionAlgorithm;
  schedule: DiffusionSchedule;
  /** 0: the most likely token (greedy); above, sampled at that temperature. */
  temperature: number;
  /** Keep the k most likely tokens (0: all). */
  topK: number;
  /** Nucleus: the smallest set of tokens whose probability reaches p (1: all). */
  topP: number;
  /** 0: unmask the most confident positions; above, draw positions by softmax(confidence / algTemp) without replacement (Dream's alg_temp). */
  algTemp: number;
  /** Gumbel noise on the logits when temperature > 0 (LLaDA's add_gumbel_noise). */
  gumbelNoise: boolean;
  /** Classifier-free guidance: logits = uncond + (cfg + 1)(cond - uncond), uncond the canvas with its prompt masked (0: off). */
  cfgScale: number;
  seed: number;
  /** The token of position i is read from logits row i - 1 (Dream, RND1) instead of row i (LLaDA). */
  shiftLogits: boolean;
  maskTokenId: number;
}

export const DIFFUSION_DEFAULTS = { steps: 128, algorithm: 'confidence', temperature: 0, topK: 0, topP: 1, algTemp: 0, gumbelNoise: false, cfgScale: 0, seed: 0 } as const;

/** What a step callback sees, before the step's pass: return false to stop (the canvas keeps its masks). */
export interface DiffusionStep {
  /** 0-based over all blocks. */
  step: number;
  total: number;
  canvas: Int32Array;
  /** Masked positions left in the generated part. */
  masked: number;
}

/** What a pass callback sees, after the pass's positions were unmasked. */
export interface DiffusionPass {
  /** 1-based: the passes run so far. */
  pass: number;
  canvas: Int32Array;
  /**
   * Generated positions from the first on with no mask left: final, as an unmasked position is
   * never masked again (the canvas's settled start; a stopped or 'origin' run may leave masks after it).
   */
  settled: number;
}

export interface DiffusionResult {
  /** Prompt then generated part (masks left where a stopped run did not reach). */
  canvas: Int32Array;
  /** The generated part alone. */
  generated: Int32Array;
  /** Forward passes run (cfg counts a step as one). */
  steps: number;
  /** Stopped by the callback or the signal before every mask was filled. */
  stopped: boolean;
}

/** Every position's logits (canvas.length x nVocab, row-major) of one pass over the canvas. */
export type CanvasLogits = (canvas: Int32Array) => Promise<Float32Array>;

function bad(msg: string): never {
  throw new EngineError('KAIL_E_INVALID_ARG', msg);
}

/** Checks the parameters against a prompt and generated length; returns the block count and steps per block. */
export function diffusionPlan(nPrompt: number, nGen: number, nVocab: number, p: DiffusionParams): { blocks: number; stepsPerBlock: number } {
  if (!(nPrompt >= 1)) bad('the prompt is empty: a diffusion model needs at least one prompt token');
  if (!Number.isInteger(nGen) || nGen < 1) bad(`the generated length must be a positive integer, got ${nGen}`);
  if (!Number.isInteger(p.steps) || p.steps < 1) bad(`diffusion steps must be a positive integer, got ${p.steps}`);
  if (!DIFFUSION_ALGORITHMS.includes(p.algorithm)) bad(`unknown diffusion algorithm '${p.algorithm}' (${DIFFUSION_ALGORITHMS.join(', ')})`);
  if (!(p.temperature >= 0 && Number.isFinite(p.temperature))) bad(`temperature must be finite and >= 0, got ${p.temperature}`);
  if (!Number.isInteger(p.topK) || p.topK < 0) bad(`top-k must be a non-negative integer, got ${p.topK}`);
  if (!(p.topP > 0 && p.topP <= 1)) bad(`top-p must be in (0, 1], got ${p.topP}`);
  if (!(p.algTemp >= 0 && Number.isFinite(p.algTemp))) bad(`the algorithm temperature must be finite and >= 0, got ${p.algTemp}`);
  if (!(p.cfgScale >= 0 && Number.isFinite(p.cfgScale))) bad(`the cfg scale must be finite and >= 0, got ${p.cfgScale}`);
  if (!Number.isInteger(p.maskTokenId) || p.maskTokenId < 0 || p.maskTokenId >= nVocab) bad(`mask token id ${p.maskTokenId} is outside the vocabulary (0..${nVocab - 1})`);
  if (p.schedule.kind === 'timestep') {
    if (!(p.schedule.eps >= 0 && p.schedule.eps < 1)) bad(`diffusion eps must be in [0, 1), got ${p.schedule.eps}`);
    return { blocks: 1, stepsPerBlock: p.steps };
  }
  const bl = p.schedule.blockLength;
  if (!Number.isInteger(bl) || bl < 1) bad(`the diffusion block length must be a positive integer, got ${bl}`);
  // (llama.cpp counts blocks over the whole canvas, prompt included, from the prompt's end, so its
  // trailing blocks fall past the canvas and their steps do nothing; LLaDA counts them over the
  // generated part, as here. A last block may be shorter.)
  const blocks = Math.ceil(nGen / bl);
  if (p.steps % blocks !== 0) bad(`diffusion steps (${p.steps}) must be a multiple of the block count (${blocks}: ${nGen} generated tokens in blocks of ${bl})`);
  return { blocks, stepsPerBlock: p.steps / blocks };
}

/** Masks to unmask at `step` of `total` (the block schedule's counts in `perStep`). */
export function transferCount(step: number, total: number, remaining: number, schedule: DiffusionSchedule, perStep: number[]): number {
  if (schedule.kind === 'block') return step < perStep.length ? perStep[step] : Math.floor(remaining / (total - step));
  const f = Math.fround;
  const eps = f(schedule.eps);
  const t = f(1 - f(f(step / total) * f(1 - eps)));
  const s = f(1 - f(f((step + 1) / total) * f(1 - eps)));
  const p = step < total - 1 ? f(1 - f(s / t)) : 1;
  return Math.floor(f(remaining * p));
}

/** LLaDA's get_num_transfer_tokens: `masked` spread over `steps`, the first ones one more. */
export function blockTransferCounts(masked: number, steps: number): number[] {
  const base = Math.floor(masked / steps);
  const rem = masked % steps;
  return Array.from({ length: steps }, (_, i) => base + (i < rem ? 1 : 0));
}

/** One position's candidates after top-k, top-p and temperature: ids and probabilities, most likely first. */
interface Candidates {
  ids: Int32Array;
  probs: Float64Array;
}

function candidates(row: Float32Array | Float64Array, p: DiffusionParams): Candidates {
  const n = row.length;
  let ids = Int32Array.from({ length: n }, (_, i) => i);
  // Most likely first; ties by the lower id.
  ids.sort((a, b) => row[b] - row[a] || a - b);
  if (p.topK > 0 && p.topK < n) ids = ids.slice(0, p.topK);
  const softmax = (scale: number) => {
    const mx = row[ids[0]];
    const pr = new Float64Array(ids.length);
    let sum = 0;
    for (let i = 0; i < ids.length; i++) sum += pr[i] = Math.exp((row[ids[i]] - mx) * scale);
    for (let i = 0; i < ids.length; i++) pr[i] /= sum;
    return pr;
  };
  if (p.topP < 1) {
    const pr = softmax(1);
    let cum = 0;
    let keep = ids.length;
    for (let i = 0; i < ids.length; i++) {
      cum += pr[i];
      if (cum >= p.topP) {
        keep = i + 1;
        break;
      }
    }
    ids = ids.slice(0, keep);
  }
  return { ids, probs: softmax(p.temperature > 0 ? 1 / p.temperature : 1) };
}

/** Draws an index by probabilities `pr` (summing to 1 over `live`) with one uniform double. */
function draw(pr: Float64Array, u: number, live?: Uint8Array): number {
  let total = 0;
  for (let i = 0; i < pr.length; i++) if (!live || live[i]) total += pr[i];
  let acc = 0;
  let last = -1;
  for (let i = 0; i < pr.length; i++) {
    if (live && !live[i]) continue;
    last = i;
    acc += pr[i];
    if (u * total < acc) return i;
  }
  return last;
}

/**
 * A position's confidence under `algorithm` (higher: unmasked first). 'entropy' is the negative
 * entropy sum(p log p) as Dream ranks it (llama.cpp returns the entropy itself, which ranks the
 * least certain positions first); 'margin' the two most likely tokens' difference (llama.cpp takes
 * its first two candidates unsorted).
 */
function confidence(c: Candidates, chosen: number, algorithm: DiffusionAlgorithm, rng: Mt19937): number {
  switch (algorithm) {
    case 'entropy': {
      let s = 0;
      for (const q of c.probs) s += q * Math.log(q + 1e-10);
      return s;
    }
    case 'margin':
      return c.probs.length > 1 ? c.probs[0] - c.probs[1] : c.probs[0];
    case 'random':
      return rng.nextFloat();
    default:
      return c.probs[chosen];
  }
}

/**
 * Runs the diffusion loop: `prompt` then `nGen` masks, `params.steps` passes of `logitsOf` over the
 * whole canvas. A pass cannot reuse the prompt's rows from the one before: with full non-causal
 * attention every row, the prompt's included, attends to the masked positions that changed, so
 * every step recomputes the whole canvas (there is no KV cache to keep, as in llama.cpp, whose
 * diffusion models have no memory).
 *
 * Draws: one mt19937 of the seed for Gumbel noise, 'random' confidences and 'origin's choices, one
 * for the tokens sampled at temperature > 0 (llama.cpp's dist sampler), one for alg_temp's choice of
 * positions. At temperature 0 the token is the most likely one (Dream's and LLaDA's argmax; llama.cpp's
 * chain still draws from the distribution at temperature 1 there), so deterministic settings
 * (temperature 0, alg_temp 0, any algorithm but 'random' and 'origin') are a fixed function of the logits.
 */
export async function diffusionGenerate(
  prompt: readonly number[],
  nGen: number,
  nVocab: number,
  logitsOf: CanvasLogits,
  params: DiffusionParams,
  opts: { onStep?: (s: DiffusionStep) => boolean | void; onPass?: (p: DiffusionPass) => void; signal?: AbortSignal } = {},
): Promise<DiffusionResult> {
  const { blocks, stepsPerBlock } = diffusionPlan(prompt.length, nGen, nVocab, params);
  const nIn = prompt.length;
  const len = nIn + nGen;
  const mask = params.maskTokenId;
  const canvas = new Int32Array(len).fill(mask);
  canvas.set(prompt);
  const rng = new Mt19937(params.seed >>> 0);
  const dist = new Mt19937(params.seed >>> 0);
  const algDist = new Mt19937(params.seed >>> 0);
  let passes = 0;
  let stopped = false;
  const maskedLeft = () => {
    let n = 0;
    for (let i = nIn; i < len; i++) if (canvas[i] === mask) n++;
    return n;
  };
  let settled = 0;
  const passDone = () => {
    while (nIn + settled < len && canvas[nIn + settled] !== mask) settled++;
    opts.onPass?.({ pass: passes, canvas, settled });
  };

  outer: for (let b = 0; b < blocks; b++) {
    const block = params.schedule.kind === 'block';
    const start = block ? nIn + b * (params.schedule as { blockLength: number }).blockLength : nIn;
    const end = block ? Math.min(start + (params.schedule as { blockLength: number }).blockLength, len) : len;
    let perStep: number[] = [];
    if (block) {
      let n = 0;
      for (let i = start; i < end; i++) if (canvas[i] === mask) n++;
      perStep = blockTransferCounts(n, stepsPerBlock);
    }
    for (let step = 0; step < stepsPerBlock; step++) {
      const global = b * stepsPerBlock + step;
      if (opts.signal?.aborted || opts.onStep?.({ step: global, total: params.steps, canvas, masked: maskedLeft() }) === false) {
        stopped = true;
        break outer;
      }
      const positions: number[] = [];
      for (let i = start; i < end; i++) if (canvas[i] === mask) positions.push(i);
      if (positions.length === 0) break;
      let logits = await logitsOf(canvas);
      if (logits.length !== len * nVocab) throw new EngineError('KAIL_E_INTERNAL', `a diffusion pass gave ${logits.length} logits, not ${len} x ${nVocab}`);
      if (params.cfgScale > 0) {
        const un = canvas.slice();
        un.fill(mask, 0, nIn);
        const uncond = await logitsOf(un);
        const mixed = new Float32Array(logits.length);
        for (let i = 0; i < mixed.length; i++) mixed[i] = uncond[i] + (params.cfgScale + 1) * (logits[i] - uncond[i]);
        logits = mixed;
      }
      passes++;
      const rowOf = (pos: number): Float32Array | Float64Array => {
        const r = params.shiftLogits ? Math.max(0, pos - 1) : pos;
        const row = logits.subarray(r * nVocab, (r + 1) * nVocab);
        if (!(params.gumbelNoise && params.temperature > 0)) return row;
        // LLaDA's add_gumbel_noise: exp(logit) / (-log u)^temperature, on each row read (llama.cpp
        // noises only the first row of the pass).
        const out = new Float64Array(nVocab);
        for (let i = 0; i < nVocab; i++) out[i] = Math.exp(row[i]) / Math.pow(-Math.log(Math.max(rng.nextDouble(), 1e-20)), params.temperature);
        return out;
      };
      const choose = (c: Candidates) => (params.temperature > 0 ? draw(c.probs, dist.nextDouble()) : 0);
      const count = transferCount(step, stepsPerBlock, positions.length, params.schedule, perStep);

      if (params.algorithm === 'origin') {
        const pTransfer = count / positions.length;
        for (const pos of positions) {
          if (rng.nextFloat() < pTransfer) {
            const c = candidates(rowOf(pos), params);
            canvas[pos] = c.ids[choose(c)];
          }
        }
        passDone();
        continue;
      }
      const sampled = new Int32Array(positions.length);
      const conf = new Float64Array(positions.length);
      for (let i = 0; i < positions.length; i++) {
        const c = candidates(rowOf(positions[i]), params);
        const k = choose(c);
        sampled[i] = c.ids[k];
        conf[i] = confidence(c, k, params.algorithm, rng);
      }
      const n = Math.min(count, positions.length);
      if (n <= 0) {
        passDone();
        continue;
      }
      if (params.algTemp === 0) {
        // Most confident first; ties by position.
        const order = Array.from({ length: positions.length }, (_, i) => i).sort((a, b) => conf[b] - conf[a] || a - b);
        for (let i = 0; i < n; i++) canvas[positions[order[i]]] = sampled[order[i]];
      } else {
        // softmax(confidence / alg_temp), drawn without replacement (Dream's multinomial; llama.cpp's
        // loop may draw a position twice).
        const mx = Math.max(...conf);
        const pr = Float64Array.from(conf, (c) => Math.exp((c - mx) / params.algTemp));
        const live = new Uint8Array(positions.length).fill(1);
        for (let i = 0; i < n; i++) {
          const j = draw(pr, algDist.nextDouble(), live);
          live[j] = 0;
          canvas[positions[j]] = sampled[j];
        }
      }
      passDone();
    }
  }
  if (!stopped && opts.signal?.aborted) stopped = true;
  return { canvas, generated: canvas.slice(nIn), steps: passes, stopped: stopped && maskedLeft() > 0 };
}

/** A diffusion model's loop settings from its file: the mask token (required) and shift_logits (default true, as llama.cpp). */
export function diffusionModelSettings(model: EngineModel): { maskTokenId: number; shiftLogits: boolean } {
  if (!model.diffusion) throw new EngineError('KAIL_E_INVALID_ARG', `${model.path}: not a diffusion model (${model.hparams.arch}); diffusion generation runs llada, llada-moe, rnd1 and dream files`);
  const kv = model.hparams.meta.kv;
  const raw = kv['tokenizer.ggml.mask_token_id'];
  const maskTokenId = typeof raw === 'bigint' ? Number(raw) : raw;
  if (typeof maskTokenId !== 'number' || !Number.isInteger(maskTokenId) || maskTokenId < 0 || maskTokenId >= model.nVocab)
    throw new EngineError('KAIL_E_BAD_MODEL', `${model.path}: a diffusion model needs tokenizer.ggml.mask_token_id (the token its canvas is masked with) in 0..${model.nVocab - 1}; the file has ${raw === undefined ? 'none' : String(raw)}`);
  const shift = kv['diffusion.shift_logits'];
  if (shift !== undefined && typeof shift !== 'boolean') throw new EngineError('KAIL_E_BAD_MODEL', `${model.path}: diffusion.shift_logits must be a boolean, got ${String(shift)}`);
  return { maskTokenId, shiftLogits: shift ?? true };
}

/** The canvas passes of `model` (sequence `seq` cleared before each: one non-causal pass from position 0). */
export function modelCanvasLogits(model: EngineModel, seq = 0): CanvasLogits {
  return async (canvas) => {
    model.truncate(seq, 0);
    try {
      return await model.evaluate(seq, Array.from(canvas), 'all');
    } finally {
      model.truncate(seq, 0);
    }
  };
}

/**
 * Generates `nGen` tokens after `prompt` with a loaded diffusion model: the file's mask token and
 * shift_logits, unless `params` gives them.
 */
export async function diffusionGenerateWith(
  model: EngineModel,
  prompt: readonly number[],
  nGen: number,
  params: Partial<DiffusionParams> & { schedule: DiffusionSchedule },
  opts: { onStep?: (s: DiffusionStep) => boolean | void; onPass?: (p: DiffusionPass) => void; signal?: AbortSignal; seq?: number } = {},
): Promise<DiffusionResult> {
  const file = diffusionModelSettings(model);
  const len = prompt.length + nGen;
  if (len > model.nCtx) throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `the canvas (${prompt.length} prompt + ${nGen} generated tokens) does not fit the context of ${model.nCtx}`);
  if (len > model.nBatch) throw new EngineError('KAIL_E_INVALID_ARG', `the canvas (${len} tokens) is larger than one pass of this model (${model.nBatch} tokens; load it with a larger batch)`);
  const full: DiffusionParams = { ...DIFFUSION_DEFAULTS, ...file, ...params };
  return diffusionGenerate(prompt, nGen, model.nVocab, modelCanvasLogits(model, opts.seq ?? 0), full, opts);
}

/** What a diffusion run's text stream gives out: text, and the generated tokens it adds. */
export interface DiffusionPiece {
  text: string;
  tokens: number[];
}

/**
 * A diffusion run's text as its canvas settles (kail run's output, a server's stream): after each
 * pass the generated part's start with no mask left is final (an unmasked position is never
 * masked again), and the text it adds goes through the stop strings, what could begin one held
 * back; at the end, the rest (the masks a stopped run left are not text). Together the pieces are
 * `detokenize` of the generated tokens, byte for byte (Tokenizer.createPrefixDecoder), ended by the
 * first stop string. Once one has cut the text, the loop can stop: all before the cut is settled,
 * so no later pass changes it. Flushing the stop matcher's held text is the caller's (a server
 * does it when the request finishes).
 */
export class DiffusionTextStream {
  private readonly decoder: TokenPrefixDecoder;
  private settled = 0;
  private sent = 0;
  private cutBy: { stop: string; settled: number } | undefined;

  constructor(
    tokenizer: Tokenizer,
    private readonly nPrompt: number,
    private readonly maskTokenId: number,
    private readonly stops: StopMatcher,
  ) {
    this.decoder = tokenizer.createPrefixDecoder();
  }

  /** The stop string that cut the text and the settled tokens then (its tokens and the stop's). */
  get cut(): { stop: string; settled: number } | undefined {
    return this.cutBy;
  }

  /** After a pass: what its settled start adds; undefined when nothing is new, or after the cut. */
  pass(p: DiffusionPass): DiffusionPiece | undefined {
    if (this.cutBy || p.settled <= this.settled) return undefined;
    this.settled = p.settled;
    return this.piece(Array.from(p.canvas.subarray(this.nPrompt, this.nPrompt + p.settled)), false);
  }

  /** The run's end, from its generated part: the rest (undefined after the cut). */
  end(generated: ArrayLike<number>): DiffusionPiece | undefined {
    if (this.cutBy) return undefined;
    return this.piece(Array.from(generated).filter((t) => t !== this.maskTokenId), true);
  }

  private piece(tokens: number[], whole: boolean): DiffusionPiece {
    const step = this.stops.push(this.decoder.push(tokens, whole));
    if (step.done && step.reason === 'stop') this.cutBy = { stop: step.stop, settled: tokens.length };
    const fresh = tokens.slice(this.sent);
    this.sent = tokens.length;
    return { text: step.text, tokens: fresh };
  }
}

/** A request's diffusion settings as a server or CLI takes them (absent: kail run's defaults). */
export interface DiffusionOptions {
  /** Default 128. */
  steps?: number;
  /** A name or llama.cpp's number 0..4 (default 'confidence'). */
  algorithm?: string | number;
  /** The block schedule (LLaDA's). Not with eps. */
  blockLength?: number;
  /** The timestep schedule (Dream's). Not with blockLength. */
  eps?: number;
  /**
   * The generated length is an upper bound (a server's default canvas): with the block schedule it
   * is cut to the most blocks the steps divide (the steps must be a multiple of the block count).
   */
  fit?: boolean;
}

/** An algorithm by name or llama.cpp's number (--diffusion-algorithm 0..4). */
export function diffusionAlgorithmOf(v: string | number): DiffusionAlgorithm {
  const s = String(v);
  const i = /^\d+$/.test(s) ? Number(s) : DIFFUSION_ALGORITHMS.indexOf(s as DiffusionAlgorithm);
  if (!(i >= 0 && i < DIFFUSION_ALGORITHMS.length)) bad(`unknown diffusion algorithm '${s}': 0-4 or ${DIFFUSION_ALGORITHMS.join(', ')}`);
  return DIFFUSION_ALGORITHMS[i];
}

/**
 * The schedule: one of eps and block length (llama.cpp asserts exactly one); neither: by the file,
 * as kail run (blocks of 32 for a file without shifted logits, LLaDA's; else eps 0.001).
 */
export function diffusionScheduleOf(o: Pick<DiffusionOptions, 'blockLength' | 'eps'>, shiftLogits: boolean): DiffusionSchedule {
  if (o.eps !== undefined && o.blockLength !== undefined) bad('give one of the diffusion eps (timestep schedule) and the diffusion block length (block schedule), not both');
  if (o.blockLength !== undefined) return { kind: 'block', blockLength: o.blockLength };
  if (o.eps !== undefined) return { kind: 'timestep', eps: o.eps };
  return shiftLogits ? { kind: 'timestep', eps: 0.001 } : { kind: 'block', blockLength: 32 };
}

/**
 * A request's full loop parameters for `model` (its mask token and shift_logits) with the sampling
 * given, checked against the prompt and generated lengths (KAIL_E_INVALID_ARG naming what is wrong;
 * KAIL_E_CONTEXT_OVERFLOW for a canvas past the context).
 */
export function resolveDiffusionParams(
  model: EngineModel,
  nPrompt: number,
  nGen: number,
  o: DiffusionOptions,
  sampling: { temperature: number; topK: number; topP: number; seed: number },
): { params: DiffusionParams; nGen: number } {
  const file = diffusionModelSettings(model);
  const p: DiffusionParams = {
    ...DIFFUSION_DEFAULTS,
    ...file,
    steps: o.steps ?? DIFFUSION_DEFAULTS.steps,
    algorithm: diffusionAlgorithmOf(o.algorithm ?? DIFFUSION_DEFAULTS.algorithm),
    schedule: diffusionScheduleOf(o, file.shiftLogits),
    temperature: sampling.temperature,
    topK: sampling.topK,
    topP: sampling.topP,
    seed: sampling.seed,
  };
  if (o.fit && p.schedule.kind === 'block' && Number.isInteger(nGen) && nGen > 0 && Number.isInteger(p.steps) && p.steps > 0) {
    const bl = p.schedule.blockLength;
    let blocks = Math.ceil(nGen / bl);
    while (blocks > 1 && p.steps % blocks !== 0) blocks--;
    nGen = Math.min(nGen, blocks * bl);
  }
  const len = nPrompt + nGen;
  if (len > model.nCtx) throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `the canvas (${nPrompt} prompt + ${nGen} generated tokens) does not fit the context of ${model.nCtx}`);
  if (len > model.nBatch) bad(`the canvas (${len} tokens) is larger than one pass of this model (${model.nBatch} tokens; load it with a larger batch)`);
  diffusionPlan(nPrompt, nGen, model.nVocab, p);
  return { params: p, nGen };
}
