/** Normalized MSE Σ(a−b)² / Σb² over all positions (b is the reference). */
export function nmse(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length mismatch ${a.length} vs ${b.length}`);
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    const d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return num / den;
}

function argmax(x: Float32Array, off: number, n: number): number {
  let best = 0;
  for (let i = 1; i < n; i++) if (x[off + i] > x[off + best]) best = i;
  return best;
}

/**
 * Top-1 agreement per position. With `margin`, a position disagrees only when the reference's top
 * token leads ours by more than `margin` in the reference's own logits (random test models have
 * near-ties that any rounding can flip).
 */
export function top1Agreement(ours: Float32Array, ref: Float32Array, nVocab: number, margin = 0): { agree: number; total: number } {
  const total = ref.length / nVocab;
  let agree = 0;
  for (let p = 0; p < total; p++) {
    const off = p * nVocab;
    const a = argmax(ours, off, nVocab);
    const b = argmax(ref, off, nVocab);
    if (a === b || ref[off + b] - ref[off + a] <= margin) agree++;
  }
  return { agree, total };
}

/**
 * Deterministic pseudo-random token ids in [lo, nVocab) (xorshift32 from `seed`): the parity
 * specs' inputs, the same for kail and llama.cpp.
 */
export function tokenIds(n: number, nVocab: number, seed: number, lo = 0): number[] {
  let s = seed >>> 0 || 1;
  return Array.from({ length: n }, () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return lo + (s % (nVocab - lo));
  });
}
