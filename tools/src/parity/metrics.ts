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

/** Each position's Σ(a−b)² and Σb²: rows of `nVocab` logits, b the reference. */
function positionSums(a: Float32Array, b: Float32Array, nVocab: number): { num: number; den: number }[] {
  if (a.length !== b.length) throw new Error(`length mismatch ${a.length} vs ${b.length}`);
  const out: { num: number; den: number }[] = [];
  for (let off = 0; off < b.length; off += nVocab) {
    let num = 0;
    let den = 0;
    for (let i = off; i < off + nVocab; i++) {
      const d = a[i] - b[i];
      num += d * d;
      den += b[i] * b[i];
    }
    out.push({ num, den });
  }
  return out;
}

/** NMSE of each position: rows of `nVocab` logits, b the reference. */
export function perPositionNmse(a: Float32Array, b: Float32Array, nVocab: number): number[] {
  return positionSums(a, b, nVocab).map((s) => s.num / s.den);
}

/** Median of perPositionNmse. */
export function medianNmse(a: Float32Array, b: Float32Array, nVocab: number): number {
  const per = perPositionNmse(a, b, nVocab).sort((x, y) => x - y);
  return per[per.length >> 1];
}

/**
 * NMSE over every position but at most `maxOutliers` whose own NMSE exceeds `bound`, and those
 * positions. Routed models have near-ties between experts that a different summation order can
 * flip (an F16 product summed eight lanes wide on AVX2 against sixteen on AVX-512): one position's
 * logits then move by orders of magnitude more than rounding moves the others. A fault of the
 * engine moves every position, or more than a few.
 */
export function nmseBesideOutliers(a: Float32Array, b: Float32Array, nVocab: number, bound: number, maxOutliers: number): { nmse: number; outliers: { position: number; nmse: number }[] } {
  const sums = positionSums(a, b, nVocab);
  const outliers = sums
    .map((s, position) => ({ position, nmse: s.num / s.den }))
    .filter((o) => o.nmse > bound)
    .sort((x, y) => y.nmse - x.nmse)
    .slice(0, maxOutliers);
  const skip = new Set(outliers.map((o) => o.position));
  const kept = sums.filter((_, p) => !skip.has(p));
  const den = kept.reduce((t, s) => t + s.den, 0);
  return { nmse: den > 0 ? kept.reduce((t, s) => t + s.num, 0) / den : 0, outliers };
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
