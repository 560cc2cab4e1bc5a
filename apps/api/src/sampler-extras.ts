// llama.cpp's further samplers, under llama-server's field names, for every route that generates
// (OpenAI chat/completions, llama-server /completion and /infill, Ollama options): DRY, XTC,
// top-n-sigma, locally typical, dynamic temperature, min_keep, Mirostat. Fields left out take
// llama-server's defaults; a request that sets none of them sends no extras (all off).
import { z } from 'zod';

import { common } from '@kailstream/proto';

const DEFAULTS = {
  typical_p: 1,
  top_n_sigma: -1,
  xtc_probability: 0,
  xtc_threshold: 0.1,
  min_keep: 0,
  dynatemp_range: 0,
  dynatemp_exponent: 1,
  dry_multiplier: 0,
  dry_base: 1.75,
  dry_allowed_length: 2,
  dry_penalty_last_n: 64,
  dry_sequence_breakers: ['\n', ':', '"', '*'],
  mirostat: 0,
  mirostat_tau: 5,
  mirostat_eta: 0.1,
} as const;

const num = (lo: number, hi: number) => z.number().min(lo).max(hi).optional().nullable();

/** The request fields (zod), to spread into a route's body schema. */
export const samplerExtraFields = {
  /** Locally typical sampling; 1 (or more) = off. */
  typical_p: z.number().min(0).transform((v) => Math.min(v, 1)).optional().nullable(),
  /** Keep tokens within n standard deviations of the best logit; ≤ 0 = off. */
  top_n_sigma: z.number().finite().optional().nullable(),
  xtc_probability: num(0, 1),
  /** Above 0.5 turns XTC off. */
  xtc_threshold: num(0, 1),
  min_keep: z.number().int().min(0).max(2_147_483_647).optional().nullable(),
  dynatemp_range: num(0, 100),
  dynatemp_exponent: num(0, 100),
  dry_multiplier: num(0, 100),
  /** Below 1 takes the default 1.75, as llama-server does. */
  dry_base: z.number().max(100).optional().nullable(),
  dry_allowed_length: z.number().int().min(0).max(2_147_483_647).optional().nullable(),
  /** -1 = the whole context, 0 = off. */
  dry_penalty_last_n: z.number().int().min(-1).max(2_147_483_647).optional().nullable(),
  dry_sequence_breakers: z
    .array(z.string().min(1, 'DRY sequence breakers must not be empty strings'))
    .min(1, 'dry_sequence_breakers must be a non-empty array of strings')
    .max(64)
    .optional()
    .nullable(),
  /** 0 = off, 1 = Mirostat, 2 = Mirostat 2.0 (it replaces top-k/top-p/min-p and the penalties). */
  mirostat: z.number().int().min(0).max(2).optional().nullable(),
  mirostat_tau: num(0, 100),
  mirostat_eta: num(0, 10),
};

export type SamplerExtraFields = { [K in keyof typeof samplerExtraFields]?: z.infer<(typeof samplerExtraFields)[K]> };

/** The engine's extras for a request's fields, or undefined when it sets none. */
export function samplerExtras(b: SamplerExtraFields | null | undefined): common.SamplerExtras | undefined {
  if (!b || !(Object.keys(samplerExtraFields) as (keyof SamplerExtraFields)[]).some((k) => b[k] != null)) return undefined;
  const v = <K extends keyof typeof DEFAULTS>(k: K) => (b[k] ?? DEFAULTS[k]) as (typeof DEFAULTS)[K] extends readonly string[] ? string[] : number;
  const dryBase = v('dry_base');
  return common.SamplerExtras.fromPartial({
    typicalP: v('typical_p'),
    topNSigma: v('top_n_sigma'),
    xtcProbability: v('xtc_probability'),
    xtcThreshold: v('xtc_threshold'),
    minKeep: v('min_keep'),
    dynatempRange: v('dynatemp_range'),
    dynatempExponent: v('dynatemp_exponent'),
    dryMultiplier: v('dry_multiplier'),
    dryBase: dryBase < 1 ? DEFAULTS.dry_base : dryBase,
    dryAllowedLength: v('dry_allowed_length'),
    dryPenaltyLastN: v('dry_penalty_last_n'),
    drySequenceBreakers: [...v('dry_sequence_breakers')],
    mirostat: v('mirostat'),
    mirostatTau: v('mirostat_tau'),
    mirostatEta: v('mirostat_eta'),
  });
}

/** llama-server's `repeat_last_n`: -1 = the whole context, 0 = penalties off, absent = 64. */
export const repeatLastN = z.number().int().min(-1).max(2_147_483_647).optional().nullable();

/**
 * The penalty fields for a request's repeat_last_n (the proto's 0 means the default 64, so "off"
 * becomes neutral penalties instead).
 */
export function penaltyWindow(lastN: number | null | undefined, penalties: { repetitionPenalty: number; presencePenalty: number; frequencyPenalty: number }) {
  if (lastN === 0) return { repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 64 };
  return { ...penalties, penaltyLastN: lastN ?? 64 };
}

/** The extras as llama-server reports them (generation_settings, /slots params), defaults filled in. */
export function samplerExtrasJson(x: common.SamplerExtras | undefined) {
  if (!x) return { ...DEFAULTS, dry_sequence_breakers: [...DEFAULTS.dry_sequence_breakers] };
  return {
    typical_p: x.typicalP,
    top_n_sigma: x.topNSigma,
    xtc_probability: x.xtcProbability,
    xtc_threshold: x.xtcThreshold,
    min_keep: x.minKeep,
    dynatemp_range: x.dynatempRange,
    dynatemp_exponent: x.dynatempExponent,
    dry_multiplier: x.dryMultiplier,
    dry_base: x.dryBase,
    dry_allowed_length: x.dryAllowedLength,
    dry_penalty_last_n: x.dryPenaltyLastN,
    dry_sequence_breakers: x.drySequenceBreakers,
    mirostat: x.mirostat,
    mirostat_tau: x.mirostatTau,
    mirostat_eta: x.mirostatEta,
  };
}
