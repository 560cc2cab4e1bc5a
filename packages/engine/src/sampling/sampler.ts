import { EngineError } from '../errors';
import { FullChainSampler, needsFullChain } from './full-chain';
import { DEFAULT_SAMPLERS, type SamplerStage } from './stages';
import { applyPenalties, penaltiesActive } from './penalties';
import { Mt19937, foldSeed, randomSeed } from './rng';
import { SORT_KEY_ID_LIMIT, floatBits, idOfSortKey, isFloat32Array, selectTop, sortIdsByValue, sortKey } from './select-top';

// Module-level aliases: under jest's vm context every global lookup (Math, Infinity) goes through an
// interceptor and the hot loops ran ~7x slower; plain Node is unaffected either way.
const { exp, log, fround: f32 } = Math;
const INF = Infinity;

/** Mass bins for wide nuclei: 1/64 nat each, covering 64 nats below the top logit. */
const BINS = 4096;
const BINS_PER_NAT = 64;

/**
 * How to pick the next token. Applied in llama.cpp's default chain order: logit bias, penalties,
 * DRY, top-n-sigma, top-k, typical, top-p, min-p, XTC, temperature, then one draw from the softmax
 * of what is left (Mirostat, when on, replaces everything but the logit bias and temperature). As
 * there, top-p and min-p see the distribution before temperature (temperature only reshapes the
 * kept candidates).
 */
export interface SamplerParams {
  /** Divides the kept logits before the draw; in [0, 100]. 0 = greedy (argmax, ties to the lowest id). Default 1. */
  temperature?: number;
  /** Keeps the k most likely tokens; an integer ≥ 0. 0 = off. Default 0. */
  topK?: number;
  /** Keeps the smallest most-likely set whose probability reaches p; in (0, 1]. 1 = off. Default 1. */
  topP?: number;
  /** Keeps tokens at least minP times as likely as the most likely one; in [0, 1]. 0 = off. Default 0. */
  minP?: number;
  /**
   * Divides positive (multiplies negative) logits of tokens seen in the penalty window; a number
   * in (0, 100]. 1 = off, above 1 discourages repeats. Default 1.
   */
  repetitionPenalty?: number;
  /** Subtracted once from the logit of every token seen in the window; in [-2, 2]. 0 = off. Default 0. */
  presencePenalty?: number;
  /** Subtracted per occurrence in the window; in [-2, 2]. 0 = off. Default 0. */
  frequencyPenalty?: number;
  /** How many of the last history tokens the penalties look at; an integer ≥ -1. -1 = all, 0 = penalties off. Default 64. */
  penaltyLastN?: number;
  /**
   * Makes draws reproducible: any safe integer. Seeds in [0, 2^32) give the same draws as
   * llama.cpp's dist sampler with that seed. Default: a random seed (see `Sampler.params.seed`).
   */
  seed?: number;
  /** How many of the most likely candidates of the sampling distribution to report in `top`; an integer in [0, 1000]. 0 = none. Default 0. */
  nProbs?: number;
  /**
   * Added to the logits of the given token ids before anything else (OpenAI's `logit_bias`,
   * llama.cpp's logit-bias sampler); -Infinity bans a token. Keys are token ids (integers ≥ 0; ids
   * outside the row's vocabulary are ignored, as the penalties ignore them), values numbers, not
   * NaN and not +Infinity. Default none.
   */
  logitBias?: Readonly<Record<number, number>>;
  // The samplers below are off by default; any of them on runs llama.cpp's whole chain
  // (full-chain.ts) instead of the fast one.
  /** Locally typical sampling (llama.cpp's typ_p); in [0, 1]. 1 = off. Default 1. */
  typicalP?: number;
  /** Keeps tokens whose logit is within n standard deviations of the best; a finite number, ≤ 0 = off. Default -1. */
  topNSigma?: number;
  /** XTC: the chance, per token, of dropping the likely tokens above xtcThreshold but the least likely of them; in [0, 1]. 0 = off. Default 0. */
  xtcProbability?: number;
  /** XTC's probability threshold; in [0, 1], above 0.5 = off. Default 0.1. */
  xtcThreshold?: number;
  /** The fewest candidates top-p, min-p, typical and XTC leave; an integer ≥ 0. Default 0. */
  minKeep?: number;
  /** Dynamic temperature: the temperature moves within temperature ± range with the candidates' entropy; in [0, 100]. 0 = off. Default 0. */
  dynatempRange?: number;
  /** How entropy maps to the dynamic temperature (a power); in [0, 100]. Default 1. */
  dynatempExponent?: number;
  /** DRY: the penalty for extending a repeat, multiplier · base^(length - allowed); in [0, 100]. 0 = off. Default 0. */
  dryMultiplier?: number;
  /** DRY's base; in [1, 100]. Default 1.75. */
  dryBase?: number;
  /** DRY: repeats up to this many tokens go unpenalised; an integer ≥ 0. Default 2. */
  dryAllowedLength?: number;
  /** DRY: how many of the last history tokens it searches; an integer ≥ -1. -1 = all, 0 = off. Default 64. */
  dryPenaltyLastN?: number;
  /**
   * DRY's sequence breakers as token sequences, head token first (`dryBreakerSequences` makes
   * them from strings with the model's tokenizer); at most 4096 of up to 21 token ids. Default none.
   */
  dryBreakers?: readonly (readonly number[])[];
  /** Mirostat: 0 = off, 1 or 2 (its version). It replaces the chain: only the logit bias and temperature apply with it. Default 0. */
  mirostat?: number;
  /** Mirostat's target surprise in bits; in [0, 100]. Default 5. */
  mirostatTau?: number;
  /** Mirostat's learning rate; in [0, 10]. Default 0.1. */
  mirostatEta?: number;
  /**
   * The order of the chain's stages after the logit bias (llama.cpp's `samplers`); a stage left
   * out is not applied, one named twice runs twice. `adaptive_p` anywhere in it makes the final
   * draw adaptive-p's instead of the plain one (as common/sampling.cpp puts it last). Default
   * DEFAULT_SAMPLERS; any other order runs the full chain.
   */
  samplers?: readonly SamplerStage[];
  /**
   * Adaptive-p (llama.cpp's `adaptive_target`, with `adaptive_p` among the samplers): draws tokens
   * whose probability is near this target, moved against the recent draws' average; in [-1, 1],
   * negative = a plain draw. Default -1.
   */
  adaptiveTarget?: number;
  /** Adaptive-p's average decay per token (history about 1 / (1 - decay) tokens); in [0, 1), above 0.99 taken as 0.99. Default 0.9. */
  adaptiveDecay?: number;
}

const STAGES: ReadonlySet<string> = new Set<string>([...DEFAULT_SAMPLERS, 'adaptive_p']);

export type ResolvedSamplerParams = Required<SamplerParams>;
export { DEFAULT_SAMPLERS, type SamplerStage } from './stages';

export interface TokenLogprob {
  token: number;
  logprob: number;
}

export interface SampleResult {
  token: number;
  /**
   * Natural log of the chosen token's probability in the distribution it was drawn from (after
   * penalties, truncation and temperature; 0 when greedy). For the model's own log-probabilities,
   * as the OpenAI API reports them, use `logprobs()`.
   */
  logprob: number;
  /** The `nProbs` most likely candidates of that same distribution, most likely first; only when nProbs > 0. */
  top?: TokenLogprob[];
}

export interface Sampler {
  /** The validated parameters, defaults filled in; `seed` is the one in use, also when drawn at random. */
  readonly params: Readonly<ResolvedSamplerParams>;
  /**
   * Picks the next token from one row of logits (not modified). `history` holds the tokens so far
   * (prompt and generated, oldest first), which the penalties look at; ids outside the vocabulary
   * are ignored. NaN logits count as -Infinity. Throws when no token has a finite logit.
   */
  sample(logits: Float32Array, history?: ArrayLike<number>): SampleResult;
  /**
   * Whether draws change the sampler beyond its random stream (XTC's own draws, Mirostat's
   * running target): then `probabilities` has no answer and speculative decoding cannot verify
   * drafts against it.
   */
  readonly stateful: boolean;
  /**
   * The distribution `sample` would draw from for this row, dense over the vocabulary: penalties,
   * truncation and temperature applied, normalized, 0 outside the kept candidates; a one-hot row
   * at the argmax when greedy. Consumes no randomness. Speculative decoding compares the target's
   * and the draft's rows of it, so both see the same transforms.
   */
  probabilities(logits: Float32Array, history?: ArrayLike<number>, out?: Float32Array): Float32Array;
  /** Restarts the random stream from the seed, so the same calls give the same tokens again. */
  reset(): void;
  /**
   * The token the sequence took (after any constrained redraw): adaptive-p learns from it, as
   * llama.cpp's accept does. Samplers that learn nothing leave it out.
   */
  accept?(token: number): void;
}

/** Whether these (resolved) parameters always pick the best token: temperature 0 without a dynamic range. */
export function isGreedy(p: Readonly<ResolvedSamplerParams>): boolean {
  return p.temperature === 0 && p.dynatempRange === 0 && p.mirostat === 0 && p.samplers.includes('temperature');
}

/** Validates `params` and returns a sampler with its own random stream. */
export function createSampler(params: SamplerParams = {}): Sampler {
  const r = resolveParams(params);
  return needsFullChain(r) ? new FullChainSampler(r) : new ChainSampler(r);
}


function resolveParams(p: SamplerParams): ResolvedSamplerParams {
  if (p === null || typeof p !== 'object') throw invalid(`sampler params must be an object, got ${show(p)}`);
  const r: ResolvedSamplerParams = {
    temperature: p.temperature ?? 1,
    topK: p.topK ?? 0,
    topP: p.topP ?? 1,
    minP: p.minP ?? 0,
    repetitionPenalty: p.repetitionPenalty ?? 1,
    presencePenalty: p.presencePenalty ?? 0,
    frequencyPenalty: p.frequencyPenalty ?? 0,
    penaltyLastN: p.penaltyLastN ?? 64,
    seed: p.seed ?? randomSeed(),
    nProbs: p.nProbs ?? 0,
    logitBias: p.logitBias ?? {},
    typicalP: p.typicalP ?? 1,
    topNSigma: p.topNSigma ?? -1,
    xtcProbability: p.xtcProbability ?? 0,
    xtcThreshold: p.xtcThreshold ?? 0.1,
    minKeep: p.minKeep ?? 0,
    dynatempRange: p.dynatempRange ?? 0,
    dynatempExponent: p.dynatempExponent ?? 1,
    dryMultiplier: p.dryMultiplier ?? 0,
    dryBase: p.dryBase ?? 1.75,
    dryAllowedLength: p.dryAllowedLength ?? 2,
    dryPenaltyLastN: p.dryPenaltyLastN ?? 64,
    dryBreakers: p.dryBreakers ?? [],
    mirostat: p.mirostat ?? 0,
    mirostatTau: p.mirostatTau ?? 5,
    mirostatEta: p.mirostatEta ?? 0.1,
    samplers: p.samplers ?? DEFAULT_SAMPLERS,
    adaptiveTarget: p.adaptiveTarget ?? -1,
    adaptiveDecay: p.adaptiveDecay ?? 0.9,
  };
  checkRange('temperature', r.temperature, 0, 100, false, '0 = greedy');
  checkInt('topK', r.topK, 0, 2 ** 31 - 1, '0 = off');
  checkRange('topP', r.topP, 0, 1, true, '1 = off');
  checkRange('minP', r.minP, 0, 1, false, '0 = off');
  checkRange('repetitionPenalty', r.repetitionPenalty, 0, 100, true, '1 = off');
  checkRange('presencePenalty', r.presencePenalty, -2, 2, false, '0 = off');
  checkRange('frequencyPenalty', r.frequencyPenalty, -2, 2, false, '0 = off');
  checkInt('penaltyLastN', r.penaltyLastN, -1, 2 ** 31 - 1, '-1 = whole history, 0 = off');
  checkInt('seed', r.seed, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, 'any safe integer');
  checkInt('nProbs', r.nProbs, 0, 1000, '0 = none');
  checkLogitBias(r.logitBias);
  checkRange('typicalP', r.typicalP, 0, 1, false, '1 = off');
  if (typeof r.topNSigma !== 'number' || !Number.isFinite(r.topNSigma)) throw invalid(`topNSigma must be a finite number (≤ 0 = off), got ${show(r.topNSigma)}`);
  checkRange('xtcProbability', r.xtcProbability, 0, 1, false, '0 = off');
  checkRange('xtcThreshold', r.xtcThreshold, 0, 1, false, 'above 0.5 = off');
  checkInt('minKeep', r.minKeep, 0, 2 ** 31 - 1, '0 = no minimum');
  checkRange('dynatempRange', r.dynatempRange, 0, 100, false, '0 = off');
  checkRange('dynatempExponent', r.dynatempExponent, 0, 100, false, '1 = linear');
  checkRange('dryMultiplier', r.dryMultiplier, 0, 100, false, '0 = off');
  checkRange('dryBase', r.dryBase, 1, 100, false, 'the penalty grows by this factor per token');
  checkInt('dryAllowedLength', r.dryAllowedLength, 0, 2 ** 31 - 1, 'repeats this long go unpenalised');
  checkInt('dryPenaltyLastN', r.dryPenaltyLastN, -1, 2 ** 31 - 1, '-1 = whole history, 0 = off');
  checkBreakers(r.dryBreakers);
  if (r.mirostat !== 0 && r.mirostat !== 1 && r.mirostat !== 2) throw invalid(`mirostat must be 0 (off), 1 or 2, got ${show(r.mirostat)}`);
  checkRange('mirostatTau', r.mirostatTau, 0, 100, false, 'target surprise in bits');
  checkRange('mirostatEta', r.mirostatEta, 0, 10, false, 'learning rate');
  if (!Array.isArray(r.samplers) || r.samplers.length > 64 || r.samplers.some((x) => !STAGES.has(x)))
    throw invalid(`samplers must be a list of at most 64 of ${[...STAGES].join(', ')}, got ${JSON.stringify(r.samplers)}`);
  checkRange('adaptiveTarget', r.adaptiveTarget, -1, 1, false, 'negative = off');
  checkRange('adaptiveDecay', r.adaptiveDecay, 0, 1, false, 'about 1 / (1 - decay) tokens of history');
  return r;
}

function checkLogitBias(bias: unknown): void {
  if (bias === null || typeof bias !== 'object' || Array.isArray(bias)) throw invalid(`logitBias must be an object of token id -> bias, got ${show(bias)}`);
  for (const [k, v] of Object.entries(bias)) {
    if (!/^(0|[1-9][0-9]*)$/.test(k) || Number(k) > 2 ** 31 - 1) throw invalid(`logitBias keys must be token ids (integers ≥ 0), got ${JSON.stringify(k)}`);
    if (typeof v !== 'number' || Number.isNaN(v) || v === INF) throw invalid(`logitBias[${k}] must be a number (-Infinity bans the token), got ${show(v)}`);
  }
}

function checkBreakers(b: unknown): void {
  const ok =
    Array.isArray(b) &&
    b.length <= 4096 &&
    b.every((s) => Array.isArray(s) && s.length >= 1 && s.length <= 21 && s.every((t) => Number.isInteger(t) && t >= 0 && t <= 2 ** 31 - 1));
  if (!ok) throw invalid('dryBreakers must be at most 4096 token sequences of 1 to 21 token ids (head first)');
}

function checkRange(name: string, v: unknown, lo: number, hi: number, loOpen: boolean, hint: string): void {
  const ok = typeof v === 'number' && (loOpen ? v > lo : v >= lo) && v <= hi;
  if (!ok) throw invalid(`${name} must be a number in ${loOpen ? '(' : '['}${lo}, ${hi}] (${hint}), got ${show(v)}`);
}

function checkInt(name: string, v: unknown, lo: number, hi: number, hint: string): void {
  const ok = typeof v === 'number' && Number.isInteger(v) && v >= lo && v <= hi;
  const range = lo === Number.MIN_SAFE_INTEGER ? '' : hi === 2 ** 31 - 1 ? ` ≥ ${lo}` : ` in [${lo}, ${hi}]`;
  if (!ok) throw invalid(`${name} must be an integer${range} (${hint}), got ${show(v)}`);
}

function show(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

function invalid(message: string): EngineError {
  return new EngineError('KAIL_E_INVALID_ARG', message);
}

function noToken(): EngineError {
  return new EngineError('KAIL_E_INTERNAL', 'cannot sample: every logit is -Infinity or NaN');
}

/**
 * exp(x - max) as llama.cpp computes it in float32, with the edge cases made total: NaN and
 * -Infinity give 0, and when the maximum is +Infinity the +Infinity tokens share the mass.
 */
function expRel(x: number, max: number): number {
  if (max === INF) return x === INF ? 1 : 0;
  return x > -INF ? f32(exp(f32(x - max))) : 0;
}

/**
 * The sampler chain. Arithmetic on logits and probabilities is rounded to float32 where llama.cpp
 * works in float, and sums are taken in the same order, so a seed picks the same tokens as there.
 *
 * The surviving candidates live in `ids`/`vals` (`count` of them, sorted best-first or in id
 * order); `whole` means no stage has cut the vocabulary yet, so nothing was copied.
 */
class ChainSampler implements Sampler {
  readonly params: Readonly<ResolvedSamplerParams>;
  readonly stateful = false;
  private readonly rng: Mt19937;
  private readonly seed32: number;
  private readonly temp: number;
  private readonly topP: number;
  private readonly logMinP: number;
  private readonly penalize: boolean;
  /** The logit bias as parallel arrays, in id order. */
  private readonly biasIds: Int32Array;
  private readonly biasVals: Float32Array;

  private nVocab = 0;
  private penalized = new Float32Array(0);
  private biased = new Float32Array(0);
  private probs = new Float32Array(0);
  private ids = new Int32Array(0);
  private vals = new Float32Array(0);
  private readonly binMass = new Float64Array(BINS);
  private readonly binFill = new Int32Array(BINS);
  private binOf = new Uint16Array(0);
  private keys = new Float64Array(0);
  private count = 0;
  private sorted = false;
  private whole = true;

  constructor(params: ResolvedSamplerParams) {
    this.params = Object.freeze({ ...params });
    this.seed32 = foldSeed(params.seed);
    this.rng = new Mt19937(this.seed32);
    this.temp = f32(params.temperature);
    this.topP = f32(params.topP);
    this.logMinP = f32(log(params.minP));
    this.penalize = penaltiesActive(params);
    const bias = Object.entries(params.logitBias).map(([k, v]) => [Number(k), v] as const).sort((a, b) => a[0] - b[0]);
    this.biasIds = Int32Array.from(bias, (e) => e[0]);
    this.biasVals = Float32Array.from(bias, (e) => e[1]);
  }

  reset(): void {
    this.rng.seed(this.seed32);
  }

  sample(logits: Float32Array, history: ArrayLike<number> = []): SampleResult {
    if (!isFloat32Array(logits)) throw invalid('logits must be a Float32Array');
    const n = logits.length;
    if (n === 0) throw invalid('logits must not be empty');
    this.ensureCapacity(n);
    const src = this.transform(logits, history);

    if (this.temp === 0) return this.greedy(src);

    this.truncate(src, n);
    return this.draw(src);
  }

  probabilities(logits: Float32Array, history: ArrayLike<number> = [], out = new Float32Array(logits.length)): Float32Array {
    if (!isFloat32Array(logits)) throw invalid('logits must be a Float32Array');
    const n = logits.length;
    if (n === 0) throw invalid('logits must not be empty');
    if (out.length !== n) throw invalid(`out must have ${n} entries, got ${out.length}`);
    this.ensureCapacity(n);
    const src = this.transform(logits, history);
    out.fill(0);
    if (this.temp === 0) {
      out[this.greedy(src).token] = 1;
      return out;
    }
    this.truncate(src, n);
    const m = this.count;
    if (m === 0) throw noToken();
    const vals = this.whole ? src : this.vals;
    const temp = this.temp;
    let max = this.sorted ? vals[0] : maxOf(vals, m);
    if (max === -INF) throw noToken();
    if (temp !== 1) max = f32(max / temp);
    let sum = 0;
    for (let i = 0; i < m; i++) {
      const p = expRel(temp === 1 ? vals[i] : f32(vals[i] / temp), max);
      out[this.whole ? i : this.ids[i]] = p;
      sum += p;
    }
    for (let i = 0; i < n; i++) out[i] /= sum;
    return out;
  }

  /** The row after the logit bias and the penalties (`logits` itself when neither changes anything). */
  /** Top-k, then top-p, then min-p (unless top-p's pass applied it) over src's n logits: the candidates draw and probabilities read. */
  private truncate(src: Float32Array, n: number): void {
    const { topK, minP } = this.params;
    this.whole = true;
    this.sorted = false;
    this.count = n;
    if (topK > 0) this.keepTopK(src, Math.min(topK, n));
    let minPDone = false;
    if (this.topP < 1) minPDone = this.keepTopP(src);
    if (minP > 0 && !minPDone) this.keepMinP(src);
  }

  private transform(logits: Float32Array, history: ArrayLike<number>): Float32Array {
    let row = logits;
    if (this.biasIds.length > 0) {
      const n = logits.length;
      row = this.biased;
      row.set(logits);
      for (let i = 0; i < this.biasIds.length; i++) {
        const t = this.biasIds[i];
        if (t < n) row[t] = f32(row[t] + this.biasVals[i]);
      }
    }
    return this.penalize ? applyPenalties(row, history, this.params, this.penalized) : row;
  }

  private ensureCapacity(n: number): void {
    if (n === this.nVocab) return;
    this.nVocab = n;
    this.penalized = new Float32Array(n);
    this.biased = new Float32Array(this.biasIds.length > 0 ? n : 0);
    this.probs = new Float32Array(n);
    this.ids = new Int32Array(n);
    this.vals = new Float32Array(n);
  }

  private greedy(src: Float32Array): SampleResult {
    let best = -1;
    let bestVal = -INF;
    for (let i = 0; i < src.length; i++) {
      if (src[i] > bestVal) {
        bestVal = src[i];
        best = i;
      }
    }
    if (best < 0) throw noToken();
    const result: SampleResult = { token: best, logprob: 0 };
    if (this.params.nProbs > 0) result.top = [{ token: best, logprob: 0 }];
    return result;
  }

  private keepTopK(src: Float32Array, k: number): void {
    this.count = selectTop(src, src.length, k, this.ids, this.vals);
    this.whole = false;
    this.sorted = true;
  }

  /**
   * Cuts the (sorted) candidates to the shortest prefix whose probability reaches topP. Returns
   * true when it applied min-p as well: over the whole vocabulary, both keep a best-first prefix,
   * so the result is the shorter of the two, and min-p's threshold bounds what needs sorting.
   */
  private keepTopP(src: Float32Array): boolean {
    const probs = this.probs;
    const topP = this.topP;
    if (!this.whole) {
      const m = this.count;
      const vals = this.vals;
      const max = vals[0];
      let sum = 0;
      for (let i = 0; i < m; i++) {
        probs[i] = expRel(vals[i], max);
        sum = f32(sum + probs[i]);
      }
      let cum = 0;
      for (let i = 0; i < m; i++) {
        cum = f32(cum + f32(probs[i] / sum));
        if (cum >= topP) {
          this.count = i + 1;
          break;
        }
      }
      return false;
    }

    // Softmax over the whole vocabulary, kept by id in `probs`.
    const n = src.length;
    const max = maxOf(src);
    if (max === -INF) throw noToken();
    let sum = 0;
    for (let i = 0; i < n; i++) {
      probs[i] = expRel(src[i], max);
      sum = f32(sum + probs[i]);
    }
    const minPToo = this.params.minP > 0;
    if (minPToo) {
      this.filterAtLeast(src, f32(max + this.logMinP));
      this.sortCandidates(src);
      this.cutAtMass(probs, sum);
    } else {
      // Most nuclei are a few hundred tokens: select that many; bin the mass only when it falls short.
      this.count = selectTop(src, n, Math.min(256, n), this.ids, this.vals);
      if (!this.cutAtMass(probs, sum) && this.count === 256) {
        this.nucleusCandidates(src, probs, sum, max);
        if (!this.cutAtMass(probs, sum)) this.count = selectTop(src, n, n, this.ids, this.vals);
      }
    }
    this.whole = false;
    this.sorted = true;
    return minPToo;
  }

  /**
   * Candidates for a wide nucleus without sorting the vocabulary: bins the tokens by distance below
   * the top logit, finds the bin where the running mass reaches topP and keeps every token down to
   * one bin past it (slack for float32 rounding). Bins are monotone in the logit, so that is a
   * best-first prefix containing the nucleus; a bucket sort (scatter by bin, then order each small
   * bin) leaves it sorted.
   */
  private nucleusCandidates(src: Float32Array, probs: Float32Array, sum: number, max: number): void {
    const n = src.length;
    if (n > SORT_KEY_ID_LIMIT) {
      this.count = selectTop(src, n, n, this.ids, this.vals);
      return;
    }
    // Allocated on first use: most samplers never see a nucleus this wide.
    if (this.keys.length !== n) {
      this.binOf = new Uint16Array(n);
      this.keys = new Float64Array(n);
    }
    const mass = this.binMass;
    const fill = this.binFill;
    const binOf = this.binOf;
    mass.fill(0);
    fill.fill(0);
    const last = BINS - 1;
    for (let i = 0; i < n; i++) {
      const x = src[i];
      // NaN and -Infinity go past the last bin, out of every cut.
      let b = BINS;
      if (x > -INF) {
        const d = (max - x) * BINS_PER_NAT;
        b = d < last ? d | 0 : last;
        mass[b] += probs[i];
        fill[b]++;
      }
      binOf[i] = b;
    }
    let cut = last;
    let cum = 0;
    for (let b = 0; b < last; b++) {
      cum += mass[b] / sum;
      if (cum >= this.topP) {
        cut = b + 1;
        break;
      }
    }
    let m = 0;
    for (let b = 0; b <= cut; b++) {
      const c = fill[b];
      fill[b] = m;
      m += c;
    }
    // Scatter sort keys by bin, then sort each bin's keys: bins are small, the whole is sorted.
    const keys = this.keys;
    const bits = floatBits(src);
    for (let i = 0; i < n; i++) {
      const b = binOf[i];
      if (b <= cut) keys[fill[b]++] = sortKey(src, bits, i);
    }
    // fill[b] is now the end of bin b.
    for (let b = 0, start = 0; b <= cut; start = fill[b++]) {
      if (fill[b] - start > 1) keys.subarray(start, fill[b]).sort();
    }
    const ids = this.ids;
    const vals = this.vals;
    for (let i = 0; i < m; i++) {
      const id = idOfSortKey(keys[i]);
      ids[i] = id;
      vals[i] = src[id];
    }
    this.count = m;
  }

  /** Sorts the candidate ids best-first and fills in their logits. */
  private sortCandidates(src: Float32Array): void {
    const ids = this.ids.subarray(0, this.count);
    sortIdsByValue(ids, src);
    for (let i = 0; i < ids.length; i++) this.vals[i] = src[ids[i]];
  }

  /** Shortens the sorted candidates to where their mass reaches topP; false when it never does. */
  private cutAtMass(probs: Float32Array, sum: number): boolean {
    const ids = this.ids;
    let cum = 0;
    for (let i = 0; i < this.count; i++) {
      cum = f32(cum + f32(probs[ids[i]] / sum));
      if (cum >= this.topP) {
        this.count = i + 1;
        return true;
      }
    }
    return false;
  }

  private keepMinP(src: Float32Array): void {
    if (this.whole) {
      const max = maxOf(src);
      if (max === -INF) throw noToken();
      // Kept in id order, as llama.cpp's unsorted path leaves them.
      this.filterAtLeast(src, f32(max + this.logMinP));
      this.whole = false;
      this.sorted = false;
      return;
    }
    if (this.count === 0) return;
    const vals = this.vals;
    const threshold = f32(vals[0] + this.logMinP);
    let i = 1;
    while (i < this.count && vals[i] >= threshold) i++;
    this.count = i;
  }

  /** Candidates := tokens whose logit is ≥ threshold, in id order. */
  private filterAtLeast(src: Float32Array, threshold: number): void {
    const ids = this.ids;
    const vals = this.vals;
    let m = 0;
    for (let i = 0; i < src.length; i++) {
      if (src[i] >= threshold) {
        ids[m] = i;
        vals[m++] = src[i];
      }
    }
    this.count = m;
  }

  /** Temperature, softmax and one uniform draw, as llama.cpp's temp + dist samplers. */
  private draw(src: Float32Array): SampleResult {
    const whole = this.whole;
    const m = this.count;
    if (m === 0) throw noToken();
    // Candidate logits before temperature; tempering is fused into the exp pass, so the caller's
    // array is never written. Dividing by temp > 0 and rounding keep the order, so the max maps over.
    const vals = whole ? src : this.vals;
    const temp = this.temp;
    let max = this.sorted ? vals[0] : maxOf(vals, m);
    if (max === -INF) throw noToken();
    const probs = this.probs;
    let sum = 0;
    if (temp === 1) {
      for (let i = 0; i < m; i++) {
        const p = expRel(vals[i], max);
        probs[i] = p;
        sum += p;
      }
    } else {
      max = f32(max / temp);
      for (let i = 0; i < m; i++) {
        const p = expRel(f32(vals[i] / temp), max);
        probs[i] = p;
        sum += p;
      }
    }
    const target = sum * this.rng.nextDouble();
    let chosen = -1;
    let run = 0;
    for (let i = 0; i < m; i++) {
      run += probs[i];
      // `probs[i] > 0`: a draw of exactly 0 must not pick a leading impossible token.
      if (run >= target && probs[i] > 0) {
        chosen = i;
        break;
      }
    }
    if (chosen < 0) chosen = lastPositive(probs, m);

    const logSum = log(sum);
    const idOf = (i: number) => (whole ? i : this.ids[i]);
    const result: SampleResult = { token: idOf(chosen), logprob: log(probs[chosen]) - logSum };
    const nProbs = this.params.nProbs;
    if (nProbs > 0) {
      const top: TokenLogprob[] = [];
      if (this.sorted) {
        for (let i = 0; i < Math.min(nProbs, m); i++) top.push({ token: idOf(i), logprob: log(probs[i]) - logSum });
      } else {
        const topIds = new Int32Array(nProbs);
        const topVals = new Float32Array(nProbs);
        const k = selectTop(vals, m, nProbs, topIds, topVals);
        for (let i = 0; i < k; i++) top.push({ token: idOf(topIds[i]), logprob: log(probs[topIds[i]]) - logSum });
      }
      result.top = top;
    }
    return result;
  }
}

function maxOf(a: Float32Array, n = a.length): number {
  let max = -INF;
  for (let i = 0; i < n; i++) if (a[i] > max) max = a[i];
  return max;
}

function lastPositive(probs: Float32Array, m: number): number {
  for (let i = m - 1; i >= 0; i--) if (probs[i] > 0) return i;
  return m - 1;
}
