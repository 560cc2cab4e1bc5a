import { EngineError } from '../errors';
import type { TokenLogprob } from './sampler';
import { isFloat32Array, selectTop } from './select-top';

// Local aliases: global lookups are slow under jest's vm context.
const { exp, log, log1p } = Math;
const INF = Infinity;

export interface TokenLogprobs {
  token: number;
  /** Natural log of the chosen token's probability; -Infinity for a -Infinity or NaN logit. */
  logprob: number;
  /** The k most likely tokens, most likely first, equal ones by ascending id. */
  top: TokenLogprob[];
}

/**
 * The model's log-probabilities for one position: the log-softmax of the raw logits (no penalties,
 * truncation or temperature), as the OpenAI API reports `logprobs` and `top_logprobs`. Computed in
 * float64 so that near-certain tokens do not round to 0. NaN logits count as -Infinity.
 *
 * @param token the token that was chosen, an id in [0, logits.length)
 * @param k how many alternatives to return in `top`, an integer ≥ 0 (at most the vocabulary)
 */
export function logprobs(logits: Float32Array, token: number, k = 0): TokenLogprobs {
  const n = logits.length;
  if (!isFloat32Array(logits) || n === 0) throw invalid('logits must be a non-empty Float32Array');
  if (!Number.isInteger(token) || token < 0 || token >= n) throw invalid(`token must be an id in [0, ${n}), got ${token}`);
  if (!Number.isInteger(k) || k < 0) throw invalid(`k must be an integer ≥ 0, got ${k}`);

  let max = -INF;
  for (let i = 0; i < n; i++) if (logits[i] > max) max = logits[i];
  if (max === -INF || max === INF) {
    throw new EngineError('KAIL_E_INTERNAL', `cannot compute logprobs: the largest logit is ${max}`);
  }
  // The maxima add exactly 1 each; summing the rest apart and taking log1p keeps -1e-18 from rounding to 0.
  let atMax = 0;
  let rest = 0;
  for (let i = 0; i < n; i++) {
    const x = logits[i];
    if (x === max) atMax++;
    else if (x > -INF) rest += exp(x - max);
  }
  // log Z - max, kept apart from max so that it survives next to a large max.
  const logZOverMax = log(atMax) + log1p(rest / atMax);
  const lp = (x: number) => (x > -INF ? x - max - logZOverMax : -INF);

  const ids = new Int32Array(Math.min(k, n));
  const vals = new Float32Array(ids.length);
  const m = selectTop(logits, n, ids.length, ids, vals);
  const top: TokenLogprob[] = [];
  for (let i = 0; i < m; i++) top.push({ token: ids[i], logprob: lp(vals[i]) });
  return { token, logprob: lp(logits[token]), top };
}

function invalid(message: string): EngineError {
  return new EngineError('KAIL_E_INVALID_ARG', message);
}
