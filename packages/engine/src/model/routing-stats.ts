// How spread a model's routing is: feed random token ids one at a time and read which experts each
// MoE layer chose (from the runtime's activation counters). A trained, load-balanced model uses
// nearly every expert and consecutive tokens share few; random-weight benchmark files must too, or
// any expert cache looks better than it is.
import type { EngineModel } from './model';

export interface RoutingStats {
  tokens: number;
  nExpert: number;
  nExpertUsed: number;
  /** Per MoE layer: distinct experts used over all tokens / nExpert. */
  usedShare: number[];
  /** Per MoE layer: experts shared by consecutive tokens, on average. */
  consecutiveShared: number[];
  minUsedShare: number;
  maxConsecutiveShared: number;
  meanConsecutiveShared: number;
}

/** Feeds `tokens` random ids (seeded) to sequence `seq` from its current end; leaves them in its cache. */
export async function routingStats(model: EngineModel, tokens = 64, seed = 1, seq = 0): Promise<RoutingStats> {
  const nE = model.program.nExpert;
  const nL = model.program.nMoeLayers;
  let s = seed >>> 0 || 1;
  const rnd = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
  let prev = Float64Array.from(model.runtime.stats().expertCounts);
  const used = Array.from({ length: nL }, () => new Set<number>());
  const shared = new Array<number>(nL).fill(0);
  let last: number[][] | null = null;
  for (let t = 0; t < tokens; t++) {
    await model.evaluate(seq, [Math.floor(rnd() * model.nVocab)], 'last');
    const c = model.runtime.stats().expertCounts;
    const now: number[][] = [];
    for (let l = 0; l < nL; l++) {
      const chosen: number[] = [];
      for (let e = 0; e < nE; e++) if (c[l * nE + e] > prev[l * nE + e]) chosen.push(e);
      chosen.forEach((e) => used[l].add(e));
      if (last) shared[l] += chosen.filter((e) => last![l].includes(e)).length;
      now.push(chosen);
    }
    last = now;
    prev = Float64Array.from(c);
  }
  const usedShare = used.map((u) => u.size / nE);
  const consecutiveShared = shared.map((x) => (tokens > 1 ? x / (tokens - 1) : 0));
  return {
    tokens,
    nExpert: nE,
    nExpertUsed: model.hparams.nExpertUsed,
    usedShare,
    consecutiveShared,
    minUsedShare: Math.min(...usedShare),
    maxConsecutiveShared: Math.max(...consecutiveShared),
    meanConsecutiveShared: consecutiveShared.reduce((a, b) => a + b, 0) / Math.max(1, nL),
  };
}
