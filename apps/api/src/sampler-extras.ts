// llama.cpp's further samplers, under llama-server's field names, for every route that generates
// (OpenAI chat/completions, llama-server /completion and /infill, Ollama options): DRY, XTC,
// top-n-sigma, locally typical, dynamic temperature, min_keep, Mirostat, adaptive-p. Fields left out take
// llama-server's defaults; a request that sets none of them sends no extras (all off).
import { z } from 'zod';

import { common, engine } from '@kailstream/proto';

const DEFAULT_ORDER = ['penalties', 'dry', 'top_n_sigma', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'] as const;

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
  adaptive_target: -1,
  adaptive_decay: 0.9,
} as const;

const num = (lo: number, hi: number) => z.number().min(lo).max(hi).optional().nullable();

/** llama.cpp's sampler names (common_sampler_types_from_names: canonical, kebab-case, no dash, nucleus/temp/typ) and chars. */
const STAGE_OF: Record<string, string> = {};
for (const c of ['dry', 'top_k', 'top_p', 'top_n_sigma', 'typ_p', 'min_p', 'temperature', 'xtc', 'penalties', 'adaptive_p']) {
  STAGE_OF[c] = c;
  STAGE_OF[c.replace(/_/g, '-')] = c;
  STAGE_OF[c.replace(/_/g, '')] = c;
}
Object.assign(STAGE_OF, { nucleus: 'top_p', temp: 'temperature', typ: 'typ_p' });
const STAGE_CHARS: Record<string, string> = { d: 'dry', k: 'top_k', y: 'typ_p', p: 'top_p', s: 'top_n_sigma', m: 'min_p', t: 'temperature', x: 'xtc', e: 'penalties', a: 'adaptive_p' };
const UNSUPPORTED_STAGES: Record<string, string> = { infill: 'infill', i: 'infill' };

/** The chain's order: a list of sampler names or a string of llama.cpp's sampler chars. */
const samplers = z
  .union([z.array(z.string()).max(64), z.string().max(64)])
  .transform((v, ctx) => {
    const items = Array.isArray(v) ? v.map((x) => x.toLowerCase()) : [...v];
    const out: string[] = [];
    for (const it of items) {
      const stage = Array.isArray(v) ? STAGE_OF[it] : STAGE_CHARS[it];
      if (stage) out.push(stage);
      else {
        const un = UNSUPPORTED_STAGES[it];
        ctx.addIssue({ code: 'custom', message: un ? `the ${un} sampler is not supported` : `unknown sampler ${JSON.stringify(it)} (${Array.isArray(v) ? 'names: ' + Object.keys(STAGE_OF).filter((k) => !k.includes('-')).join(', ') : 'chars: ' + Object.keys(STAGE_CHARS).join('')})` });
        return z.NEVER;
      }
    }
    return out;
  })
  .optional()
  .nullable();

/** The request fields (zod), to spread into a route's body schema. */
export const samplerExtraFields = {
  /** Locally typical sampling; 1 (or more) = off. */
  typical_p: z.number().min(0).transform((v) => Math.min(v, 1)).optional().nullable(),
  /** Keep tokens within n standard deviations of the best logit; ≤ 0 = off. */
  top_n_sigma: z.number().min(-1e9).max(1e9).optional().nullable(),
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
  /** Adaptive-p (with `adaptive_p` among the samplers): tokens near this probability; negative = a plain draw; above 1 taken as 1. */
  adaptive_target: z.number().min(-1e9).transform((v) => Math.max(-1, Math.min(v, 1))).optional().nullable(),
  /** Adaptive-p's decay; above 0.99 taken as 0.99. */
  adaptive_decay: z.number().min(0).transform((v) => Math.min(v, 0.99)).optional().nullable(),
  /** The order of the chain (llama-server's `samplers`): names, or a string of sampler chars such as "edkypmxt". */
  samplers,
};

/**
 * llama-server's lists of LoRA scales (a request's `lora`, POST /lora-adapters' body, the console's
 * form), and the per-request field. A request's `lora`: [{id, scale}], the named adapters at their scale and the rest
 * at 0 (ids are indices into the model's adapters, GET /lora-adapters); empty or absent: the scales
 * the model was loaded with. An id the model lacks is a 400 from the engine.
 */
export const loraScales = z.array(z.object({ id: z.number().int().min(0).max(1_000_000), scale: z.number().min(-1e6).max(1e6) }).strict()).max(256);
export const loraField = loraScales.optional().nullable();

/**
 * llama-server's slot and context-shift fields, on /completion and the OpenAI routes alike: id_slot
 * (run in that slot; -1 any), n_keep (prompt tokens a context shift keeps; -1 all) and n_discard
 * (tokens it drops; 0 half the rest), the shift happening when the server runs with --context-shift.
 */
export const slotFields = {
  id_slot: z.number().int().min(-1).max(1 << 16).optional().nullable(),
  n_keep: z.number().int().min(-1).max(Number.MAX_SAFE_INTEGER).optional().nullable(),
  n_discard: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional().nullable(),
};
export type SlotFields = { [K in keyof typeof slotFields]?: z.infer<(typeof slotFields)[K]> };

/** The engine request's fields for them. */
export function slotRequest(b: SlotFields): { nKeep: number; nDiscard: number; idSlot: number; hasIdSlot: boolean } {
  return { nKeep: b.n_keep ?? 0, nDiscard: b.n_discard ?? 0, idSlot: Math.max(0, b.id_slot ?? -1), hasIdSlot: (b.id_slot ?? -1) >= 0 };
}

/**
 * A diffusion language model's loop (kail run's --diffusion-* flags), on /completion and the OpenAI
 * routes alike; absent: kail run's defaults (128 steps, confidence, the schedule by the file). Other
 * models ignore them.
 */
export const diffusionFields = {
  diffusion_steps: z.number().int().min(1).max(1_000_000).optional().nullable(),
  diffusion_algorithm: z.union([z.enum(['origin', 'entropy', 'margin', 'random', 'confidence']), z.number().int().min(0).max(4)]).optional().nullable(),
  diffusion_block_length: z.number().int().min(1).max(1_000_000).optional().nullable(),
  diffusion_eps: z.number().min(0).lt(1).optional().nullable(),
};
export type DiffusionFields = { [K in keyof typeof diffusionFields]?: z.infer<(typeof diffusionFields)[K]> };

/** The engine request's diffusion options for them (undefined when none is set). */
export function diffusionRequest(b: DiffusionFields): engine.DiffusionOptions | undefined {
  if (b.diffusion_steps == null && b.diffusion_algorithm == null && b.diffusion_block_length == null && b.diffusion_eps == null) return undefined;
  return { steps: b.diffusion_steps ?? 0, algorithm: b.diffusion_algorithm == null ? '' : String(b.diffusion_algorithm), blockLength: b.diffusion_block_length ?? 0, eps: b.diffusion_eps ?? 0, hasEps: b.diffusion_eps != null };
}

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
    samplers: b.samplers ?? [],
    adaptiveTarget: v('adaptive_target'),
    adaptiveDecay: v('adaptive_decay'),
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
  if (!x) return { ...DEFAULTS, dry_sequence_breakers: [...DEFAULTS.dry_sequence_breakers], samplers: [...DEFAULT_ORDER] };
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
    adaptive_target: x.adaptiveTarget,
    adaptive_decay: x.adaptiveDecay,
    samplers: x.samplers.length ? x.samplers : [...DEFAULT_ORDER],
  };
}
