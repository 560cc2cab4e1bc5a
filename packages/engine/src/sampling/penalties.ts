const f32 = Math.fround; // local alias: global lookups are slow under jest's vm context

export interface PenaltyParams {
  repetitionPenalty: number;
  presencePenalty: number;
  frequencyPenalty: number;
  /** -1 = the whole history, 0 = off. */
  penaltyLastN: number;
}

/** Whether these settings change any logit at all. */
export function penaltiesActive(p: PenaltyParams): boolean {
  return p.penaltyLastN !== 0 && (p.repetitionPenalty !== 1 || p.presencePenalty !== 0 || p.frequencyPenalty !== 0);
}

/**
 * llama.cpp's penalties sampler: for each token seen c times in the last `penaltyLastN` entries of
 * `history`, divides its logit by the repetition penalty (multiplies it, when ≤ 0: dividing a
 * negative logit would make the token more likely), then subtracts c · frequency + presence.
 * Float32 arithmetic in llama.cpp's order. Writes into `scratch` (same length as `logits`) and
 * returns it, or returns `logits` untouched when no token in the window is in the vocabulary.
 */
export function applyPenalties(
  logits: Float32Array,
  history: ArrayLike<number>,
  p: PenaltyParams,
  scratch: Float32Array,
): Float32Array {
  const n = logits.length;
  const start = p.penaltyLastN < 0 ? 0 : Math.max(0, history.length - p.penaltyLastN);
  const counts = new Map<number, number>();
  for (let i = start; i < history.length; i++) {
    const t = history[i];
    if (Number.isInteger(t) && t >= 0 && t < n) counts.set(t, (counts.get(t) ?? 0) + 1);
  }
  if (counts.size === 0) return logits;

  scratch.set(logits);
  const repeat = f32(p.repetitionPenalty);
  const freq = f32(p.frequencyPenalty);
  const present = f32(p.presencePenalty);
  for (const [t, c] of counts) {
    const l = scratch[t];
    const scaled = l <= 0 ? f32(l * repeat) : f32(l / repeat);
    scratch[t] = f32(scaled - f32(f32(c * freq) + present));
  }
  return scratch;
}
