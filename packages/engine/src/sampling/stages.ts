/** A stage of the sampler chain, by llama.cpp's canonical name (common/sampling.cpp). */
export type SamplerStage = 'penalties' | 'dry' | 'top_n_sigma' | 'top_k' | 'typ_p' | 'top_p' | 'min_p' | 'xtc' | 'temperature' | 'adaptive_p';

/** common/common.h's default order. */
export const DEFAULT_SAMPLERS: readonly SamplerStage[] = ['penalties', 'dry', 'top_n_sigma', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'];

/** Whether `stages` is the default order. */
export function defaultOrder(stages: readonly SamplerStage[]): boolean {
  return stages.length === DEFAULT_SAMPLERS.length && stages.every((s, i) => s === DEFAULT_SAMPLERS[i]);
}
