// llama.cpp's whole sampler chain, stage by stage, for the samplers the fast chain in sampler.ts
// does not have: DRY, top-n-sigma, locally typical, XTC, dynamic temperature, min_keep and
// Mirostat 1 and 2. The order is common/sampling.cpp's default (logit bias, penalties, DRY,
// top-n-sigma, top-k, typical, top-p, min-p, XTC, temperature, dist; with Mirostat: logit bias,
// temperature, Mirostat), and each stage is a port of src/llama-sampler.cpp in float32 where it
// works in float, keeping the candidates in the order it keeps them (that order decides which
// token a draw lands on), so a seed picks the same tokens as llama.cpp.
//
// Where it differs: candidates with equal logits sort by id (std::sort leaves them unordered);
// top-k never keeps a -Infinity token; the typical sampler's entropy skips probability-0 tokens
// (llama.cpp's sum turns NaN there); +Infinity logits share the mass as in the fast chain.
import { EngineError } from '../errors';
import { applyDry, dryActive, indexBreakers, type BreakerIndex } from './dry';
import { applyPenalties, penaltiesActive } from './penalties';
import { Mt19937, foldSeed } from './rng';
import type { ResolvedSamplerParams, SampleResult, Sampler, TokenLogprob } from './sampler';
import { defaultOrder } from './stages';
import { floatBits, radixKeys, radixSortByKey, selectTop, sortIdsByValue } from './select-top';

const { exp, log, log2, abs, pow, sqrt, trunc, fround: f32 } = Math;
const INF = Infinity;
const FLT_MAX = 3.4028234663852886e38;
/** Mirostat 1 estimates the Zipf exponent from this many of the most likely tokens (llama.cpp's m). */
const MIROSTAT_M = 100;
/** Adaptive-p's transform (llama-sampler.cpp): a peak at the target, quadratic near it, linear in the tails. */
const ADAPTIVE_PEAK = 5;
const ADAPTIVE_SHARPNESS = 10;
const ADAPTIVE_INV_WIDTH = f32(1 / f32(0.3));

/** Whether these parameters need this chain (some sampler the fast chain lacks is on). */
export function needsFullChain(p: ResolvedSamplerParams): boolean {
  return p.typicalP < 1 || p.topNSigma > 0 || xtcActive(p) || dryActive(p) || p.dynatempRange > 0 || p.minKeep > 0 || p.mirostat !== 0 || !defaultOrder(p.samplers);
}

function xtcActive(p: ResolvedSamplerParams): boolean {
  return p.xtcProbability > 0 && p.xtcThreshold <= 0.5;
}

function noToken(): EngineError {
  return new EngineError('KAIL_E_INTERNAL', 'cannot sample: every logit is -Infinity or NaN');
}

/** exp(x - max) in float32; NaN and -Infinity give 0, and +Infinity tokens share the mass. */
function expRel(x: number, max: number): number {
  if (max === INF) return x === INF ? 1 : 0;
  return x > -INF ? f32(exp(f32(x - max))) : 0;
}

/** C's (int) of a float on x86: truncation, and INT_MIN for NaN and values out of range. */
function toInt32(x: number): number {
  return Number.isNaN(x) || x >= 2 ** 31 || x <= -(2 ** 31) - 1 ? -(2 ** 31) : trunc(x);
}

export class FullChainSampler implements Sampler {
  readonly params: Readonly<ResolvedSamplerParams>;
  /** XTC, Mirostat and adaptive-p draw or learn as they go, so no dense distribution stands for them. */
  readonly stateful: boolean;
  private readonly seed32: number;
  private readonly rng: Mt19937;
  private readonly xtcRng: Mt19937;
  private readonly breakers: BreakerIndex;
  private readonly biasIds: Int32Array;
  private readonly biasVals: Float32Array;
  private readonly penalize: boolean;
  private mu: number;

  private nVocab = 0;
  /** The working logits, by token id. */
  private w = new Float32Array(0);
  /** Probabilities, by token id, as the last softmax left them (llama.cpp's token_data.p). */
  private p = new Float32Array(0);
  private scratch = new Float32Array(0);
  /** The candidates, in llama.cpp's order; `size` of them. */
  private ids = new Int32Array(0);
  private tmp = new Int32Array(0);
  private pos = new Float32Array(0);
  private size = 0;
  private sorted = false;

  constructor(params: ResolvedSamplerParams) {
    this.params = Object.freeze({ ...params });
    this.adaptive = params.mirostat === 0 && params.samplers.includes('adaptive_p');
    this.stateful = xtcActive(params) || params.mirostat !== 0 || this.adaptive;
    this.adaptiveDecay = f32(Math.min(Math.max(params.adaptiveDecay, 0), 0.99));
    this.seed32 = foldSeed(params.seed);
    this.rng = new Mt19937(this.seed32);
    this.xtcRng = new Mt19937(this.seed32);
    this.breakers = indexBreakers(params.dryBreakers);
    const bias = Object.entries(params.logitBias).map(([k, v]) => [Number(k), v] as const).sort((a, b) => a[0] - b[0]);
    this.biasIds = Int32Array.from(bias, (e) => e[0]);
    this.biasVals = Float32Array.from(bias, (e) => e[1]);
    // As in llama.cpp, Mirostat replaces the chain: only the logit bias and temperature stay.
    this.penalize = params.mirostat === 0 && penaltiesActive(params);
    this.mu = f32(2 * f32(params.mirostatTau));
    this.resetAdaptive();
  }

  reset(): void {
    this.rng.seed(this.seed32);
    this.xtcRng.seed(this.seed32);
    this.mu = f32(2 * f32(this.params.mirostatTau));
    this.resetAdaptive();
  }

  sample(logits: Float32Array, history: ArrayLike<number> = []): SampleResult {
    this.load(logits, history);
    if (this.params.mirostat !== 0) return this.mirostat();
    this.truncate(history);
    return this.adaptive ? this.adaptiveP() : this.dist();
  }

  accept(token: number): void {
    // Adaptive-p's average moves by the original probability of the token it drew, when taken.
    if (this.pending && this.pending.token === token) {
      this.weightedSum = f32(this.pending.p + f32(this.adaptiveDecay * this.weightedSum));
      this.totalWeight = f32(1 + f32(this.adaptiveDecay * this.totalWeight));
    }
    this.pending = null;
  }

  private readonly adaptive: boolean;
  private readonly adaptiveDecay: number;
  /** Adaptive-p's running sums: the drawn tokens' original probabilities and the weights, decayed. */
  private weightedSum = 0;
  private totalWeight = 0;
  /** The last adaptive-p draw, until accepted. */
  private pending: { token: number; p: number } | null = null;
  /** Adaptive-p: the candidates' probabilities before its transform, in candidate order. */
  private original = new Float32Array(0);

  private resetAdaptive(): void {
    const target = f32(this.params.adaptiveTarget);
    this.weightedSum = f32(target / f32(1 - this.adaptiveDecay));
    this.totalWeight = f32(1 / f32(1 - this.adaptiveDecay));
    this.pending = null;
  }

  /**
   * llama.cpp's adaptive-p in place of the final draw: the candidates' probabilities move each
   * logit to a peak at a target probability (the configured one, moved against the average of the
   * drawn tokens' probabilities), and the draw is std::discrete_distribution's over the result.
   */
  private adaptiveP(): SampleResult {
    this.softmax(false);
    const { w, p, ids, size } = this;
    if (this.params.adaptiveTarget < 0) {
      const idx = this.discrete();
      return this.result(idx, this.candidateProbs(), 0);
    }
    if (this.original.length < size) this.original = new Float32Array(p.length);
    const original = this.original;
    for (let i = 0; i < size; i++) original[i] = p[ids[i]];
    const target = Math.min(Math.max(f32(this.params.adaptiveTarget), 0), 1);
    const adapted = Math.min(Math.max(this.totalWeight === 0 ? target : f32(f32(2 * target) - f32(this.weightedSum / this.totalWeight)), 0), 1);
    for (let i = 0; i < size; i++) {
      const id = ids[i];
      if (w[id] === -INF) continue;
      const d = abs(f32(f32(p[id] - adapted) * ADAPTIVE_INV_WIDTH));
      w[id] = f32(ADAPTIVE_PEAK - f32(f32(f32(ADAPTIVE_SHARPNESS * d) * d) / f32(1 + d)));
    }
    // (The candidates keep their `sorted` mark, as llama.cpp's do: a sorted row's softmax then
    // takes the first candidate's new logit as its maximum, which changes the rounding only.)
    this.softmax(false);
    const idx = this.discrete();
    this.pending = { token: ids[idx], p: original[idx] };
    return this.result(idx, this.candidateProbs(), 0);
  }

  /** The candidates' probabilities in candidate order (for `result`). */
  private candidateProbs(): Float32Array {
    const probs = this.pos;
    for (let i = 0; i < this.size; i++) probs[i] = this.p[this.ids[i]];
    return probs;
  }

  probabilities(logits: Float32Array, history: ArrayLike<number> = [], out = new Float32Array(logits.length)): Float32Array {
    if (this.stateful) throw new EngineError('KAIL_E_UNSUPPORTED', 'XTC, Mirostat and adaptive-p sampling have no fixed distribution to compare drafts against');
    if (out.length !== logits.length) throw new EngineError('KAIL_E_INVALID_ARG', `out must have ${logits.length} entries, got ${out.length}`);
    this.load(logits, history);
    this.truncate(history);
    out.fill(0);
    const { w, ids, size } = this;
    if (size === 0) throw noToken();
    let max = -INF;
    for (let i = 0; i < size; i++) if (w[ids[i]] > max) max = w[ids[i]];
    if (max === -INF) throw noToken();
    let sum = 0;
    for (let i = 0; i < size; i++) {
      const q = expRel(w[ids[i]], max);
      out[ids[i]] = q;
      sum += q;
    }
    for (let i = 0; i < out.length; i++) out[i] /= sum;
    return out;
  }

  /** The row after the logit bias and penalties, into `w`; every token a candidate, in id order. */
  private load(logits: Float32Array, history: ArrayLike<number>): void {
    const n = logits.length;
    if (n === 0) throw new EngineError('KAIL_E_INVALID_ARG', 'logits must not be empty');
    if (n !== this.nVocab) {
      this.nVocab = n;
      this.w = new Float32Array(n);
      this.p = new Float32Array(n);
      this.scratch = new Float32Array(n);
      this.ids = new Int32Array(n);
      this.tmp = new Int32Array(n);
      this.pos = new Float32Array(n);
    }
    let row = logits;
    if (this.biasIds.length > 0) {
      row = this.scratch;
      row.set(logits);
      for (let i = 0; i < this.biasIds.length; i++) {
        const t = this.biasIds[i];
        if (t < n) row[t] = f32(row[t] + this.biasVals[i]);
      }
    }
    const w = this.w;
    w.set(row);
    for (let i = 0; i < n; i++) {
      if (Number.isNaN(w[i])) w[i] = -INF;
      this.ids[i] = i;
    }
    this.size = n;
    this.sorted = false;
  }

  /** Every stage between the logit bias and the draw, in the params' order. */
  private truncate(history: ArrayLike<number>): void {
    const pr = this.params;
    for (const stage of pr.samplers) {
      switch (stage) {
        case 'penalties':
          // (On the whole row by id: tokens a stage before cut are out of the candidates anyway.)
          if (this.penalize) {
            const out = applyPenalties(this.w, history, pr, this.scratch);
            if (out !== this.w) this.w.set(out);
          }
          break;
        case 'dry':
          applyDry(this.w, history, pr, this.breakers);
          break;
        case 'top_n_sigma':
          if (pr.topNSigma > 0) this.topNSigma(f32(pr.topNSigma));
          break;
        case 'top_k':
          if (pr.topK > 0) this.topK(pr.topK);
          break;
        case 'typ_p':
          if (pr.typicalP < 1) this.typical(f32(pr.typicalP), pr.minKeep);
          break;
        case 'top_p':
          if (pr.topP < 1) this.topP(f32(pr.topP), pr.minKeep);
          break;
        case 'min_p':
          if (pr.minP > 0) this.minP(f32(pr.minP), pr.minKeep);
          break;
        case 'xtc':
          if (xtcActive(pr)) this.xtc(f32(pr.xtcProbability), f32(pr.xtcThreshold), pr.minKeep);
          break;
        case 'temperature':
          if (pr.dynatempRange > 0) this.dynatemp(f32(pr.temperature), f32(pr.dynatempRange), f32(pr.dynatempExponent));
          else this.temp(f32(pr.temperature));
          break;
      }
    }
  }

  /** Sorts the candidates best-first (probabilities stay with their ids). */
  private sortAll(): void {
    sortIdsByValue(this.ids.subarray(0, this.size), this.w);
    this.sorted = true;
  }

  /** llama_sampler_softmax_impl: probabilities of the candidates, normalised in float32. */
  private softmax(doSort: boolean): void {
    if (this.size === 0) throw noToken();
    if (doSort && !this.sorted) this.sortAll();
    const { w, p, ids, size } = this;
    let max = w[ids[0]];
    if (!this.sorted) for (let i = 1; i < size; i++) if (w[ids[i]] > max) max = w[ids[i]];
    if (max === -INF) throw noToken();
    let sum = 0;
    for (let i = 0; i < size; i++) {
      const q = expRel(w[ids[i]], max);
      p[ids[i]] = q;
      sum = f32(sum + q);
    }
    for (let i = 0; i < size; i++) p[ids[i]] = f32(p[ids[i]] / sum);
  }

  private topNSigma(nSigma: number): void {
    const { w, ids, size } = this;
    if (size <= 1) return;
    let max = w[ids[0]];
    let sum = 0;
    let valid = 0;
    for (let i = 0; i < size; i++) {
      const x = w[ids[i]];
      if (x !== -INF) {
        if (x > max) max = x;
        sum = f32(sum + x);
        valid++;
      }
    }
    const mean = valid > 0 ? f32(sum / valid) : 0;
    let acc = 0;
    for (let i = 0; i < size; i++) {
      const x = w[ids[i]];
      if (x !== -INF) acc = f32(acc + f32(x - mean) ** 2);
    }
    const std = valid > 0 ? f32(sqrt(f32(acc / f32(valid)))) : 0;
    const floor = f32(max - f32(nSigma * std));
    for (let i = 0; i < size; i++) if (w[ids[i]] < floor) w[ids[i]] = -INF;
  }

  private topK(k: number): void {
    k = Math.min(k, this.size);
    if (!this.sorted) {
      if (this.size === this.nVocab) {
        // Still the whole vocabulary in id order: select rather than sort.
        k = selectTop(this.w, this.nVocab, k, this.ids, this.pos);
      } else {
        this.sortAll();
      }
    }
    this.size = k;
    this.sorted = true;
  }

  /** Locally typical sampling: keeps the tokens whose surprise is nearest the entropy, up to mass p. */
  private typical(tp: number, minKeep: number): void {
    this.softmax(true);
    const { p, ids, size } = this;
    let entropy = 0;
    for (let i = 0; i < size; i++) {
      const q = p[ids[i]];
      if (q > 0) entropy = f32(entropy + f32(-q * f32(log(q))));
    }
    // Ascending |surprise - entropy|, ties by position: positions sorted (stably) by the float's
    // bits (non-negative, so monotonic as unsigned integers).
    const keys = radixKeys(size);
    const bits = floatBits(this.pos);
    const order = this.tmp;
    for (let i = 0; i < size; i++) {
      this.pos[i] = abs(f32(-f32(log(p[ids[i]])) - entropy));
      keys[i] = bits[i];
      order[i] = i;
    }
    radixSortByKey(order.subarray(0, size), keys);
    let last = size;
    let cum = 0;
    for (let i = 0; i < size; i++) {
      cum = f32(cum + p[ids[order[i]]]);
      if (cum > tp && (minKeep === 0 || i >= minKeep - 1)) {
        last = i + 1;
        break;
      }
    }
    // (In place: order is tmp, and each entry is read before it is written.)
    const tmp = this.tmp;
    for (let i = 0; i < last; i++) tmp[i] = ids[order[i]];
    ids.set(tmp.subarray(0, last));
    this.size = last;
    this.sorted = false;
  }

  private topP(tp: number, minKeep: number): void {
    this.softmax(false);
    if (!this.sorted) this.sortAll();
    const { p, ids, size } = this;
    let cum = 0;
    let last = size;
    for (let i = 0; i < size; i++) {
      cum = f32(cum + p[ids[i]]);
      if (cum >= tp && i + 1 >= minKeep) {
        last = i + 1;
        break;
      }
    }
    this.size = last;
  }

  private minP(mp: number, minKeep: number): void {
    const { w, ids } = this;
    if (this.size === 0) return;
    const logP = f32(log(mp));
    if (!this.sorted) {
      let max = -FLT_MAX;
      for (let i = 0; i < this.size; i++) if (w[ids[i]] > max) max = w[ids[i]];
      const floor = f32(max + logP);
      let m = 0;
      for (let i = 0; i < this.size; i++) if (w[ids[i]] >= floor) this.tmp[m++] = ids[i];
      if (m > 0 && m >= minKeep) {
        ids.set(this.tmp.subarray(0, m));
        this.size = m;
        return;
      }
      this.sortAll();
    }
    const floor = f32(w[ids[0]] + logP);
    let i = 1;
    for (; i < this.size; i++) if (w[ids[i]] < floor && i >= minKeep) break;
    this.size = i;
  }

  /** Exclude Top Choices: with probability `prob`, drops every token above `threshold` but the least likely of them. */
  private xtc(prob: number, threshold: number, minKeep: number): void {
    if (this.size < 2) return;
    if (this.xtcRng.nextFloat() > prob) return;
    this.softmax(true);
    const { p, ids, size } = this;
    let posLast = 0;
    for (let i = 0; i < size; i++) {
      if (p[ids[i]] >= threshold) posLast = i;
      else break;
    }
    if (size - posLast >= minKeep && posLast > 0) {
      ids.copyWithin(0, posLast, size);
      this.size = size - posLast;
    }
  }

  /** llama_sampler_temp_impl: divides the logits; at 0 or below keeps only the first best (the rest -Infinity). */
  private temp(t: number): void {
    const { w, ids, size } = this;
    if (size === 0) return;
    if (t <= 0) {
      let maxI = 0;
      let maxL = w[ids[0]];
      for (let i = 1; i < size; i++) {
        if (w[ids[i]] > maxL) {
          w[ids[maxI]] = -INF;
          maxI = i;
          maxL = w[ids[i]];
        } else {
          w[ids[i]] = -INF;
        }
      }
      return;
    }
    for (let i = 0; i < size; i++) w[ids[i]] = f32(w[ids[i]] / t);
  }

  /** Dynamic temperature: temp ± range, from the candidates' entropy relative to its maximum. */
  private dynatemp(t: number, delta: number, exponent: number): void {
    const minTemp = Math.max(0, f32(t - delta));
    const maxTemp = f32(t + delta);
    if (this.size <= 1) return;
    const maxEntropy = f32(-f32(log(f32(1 / this.size))));
    this.softmax(true);
    const { p, ids, size } = this;
    let entropy = 0;
    for (let i = 0; i < size; i++) {
      const q = p[ids[i]];
      if (q > 0) entropy = f32(entropy - f32(q * f32(log(q))));
    }
    const normalized = f32(entropy / maxEntropy);
    this.temp(f32(minTemp + f32(f32(maxTemp - minTemp) * f32(pow(normalized, exponent)))));
  }

  /** llama_sampler_dist: softmax of the candidates in their order, one uniform draw over the running mass. */
  private dist(): SampleResult {
    const { w, ids } = this;
    const m = this.size;
    if (m === 0) throw noToken();
    let max = w[ids[0]];
    if (!this.sorted) for (let i = 1; i < m; i++) if (w[ids[i]] > max) max = w[ids[i]];
    if (max === -INF) throw noToken();
    const probs = this.pos;
    let sum = 0;
    for (let i = 0; i < m; i++) {
      probs[i] = expRel(w[ids[i]], max);
      sum += probs[i];
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
    if (chosen < 0) for (let i = m - 1; i >= 0 && chosen < 0; i--) if (probs[i] > 0) chosen = i;
    return this.result(chosen, probs, log(sum));
  }

  /** The chosen position's token and log-probability, and the `nProbs` most likely candidates. */
  private result(chosen: number, probs: Float32Array, logSum: number): SampleResult {
    const r: SampleResult = { token: this.ids[chosen], logprob: log(probs[chosen]) - logSum };
    const nProbs = this.params.nProbs;
    if (nProbs > 0) {
      const k = Math.min(nProbs, this.size);
      const topPos = new Int32Array(k);
      const topVals = new Float32Array(k);
      const got = selectTop(probs.subarray(0, this.size), this.size, k, topPos, topVals);
      const top: TokenLogprob[] = [];
      for (let i = 0; i < got; i++) top.push({ token: this.ids[topPos[i]], logprob: log(topVals[i]) - logSum });
      r.top = top;
    }
    return r;
  }

  /** Mirostat 1 (top-k from the estimated Zipf exponent) or 2 (a surprise cut-off), then the draw and mu's update. */
  private mirostat(): SampleResult {
    const pr = this.params;
    const tau = f32(pr.mirostatTau);
    const eta = f32(pr.mirostatEta);
    this.temp(f32(pr.temperature));
    this.softmax(true);
    const { p, ids } = this;
    if (pr.mirostat === 1) {
      let sumTB = 0;
      let sumTT = 0;
      for (let i = 0; i < MIROSTAT_M - 1 && i < this.size - 1; i++) {
        const t = f32(log(f32((i + 2) / (i + 1))));
        const b = f32(log(f32(p[ids[i]] / p[ids[i + 1]])));
        sumTB = f32(sumTB + f32(t * b));
        sumTT = f32(sumTT + f32(t * t));
      }
      const sHat = f32(sumTB / sumTT);
      const eps = f32(sHat - 1);
      const k = f32(pow(f32(f32(eps * f32(pow(2, this.mu))) / f32(1 - f32(pow(this.nVocab, -eps)))), f32(1 / sHat)));
      this.size = Math.min(Math.max(toInt32(k), 1), this.size);
    } else {
      let cut = 0;
      while (cut < this.size && !(f32(-f32(log2(p[ids[cut]]))) > this.mu)) cut++;
      this.size = Math.max(cut, 1);
    }
    this.softmax(true);
    const idx = this.discrete();
    const surprise = f32(-f32(log2(p[ids[idx]])));
    this.mu = f32(this.mu - f32(eta * f32(surprise - tau)));
    const probs = this.pos;
    for (let i = 0; i < this.size; i++) probs[i] = p[ids[i]];
    return this.result(idx, probs, 0);
  }

  /** std::discrete_distribution over the candidates' probabilities (libstdc++: no draw for one candidate). */
  private discrete(): number {
    const { p, ids, size } = this;
    if (size < 2) return 0;
    let sum = 0;
    for (let i = 0; i < size; i++) sum += p[ids[i]];
    const u = this.rng.nextDouble();
    let cum = 0;
    for (let i = 0; i < size - 1; i++) {
      cum += p[ids[i]] / sum;
      if (cum >= u) return i;
    }
    return size - 1;
  }
}
