// What llama.cpp does with a pooled embedding once it has it (common/common.cpp), shared by the
// API's llama-server routes (as @kailstream/engine/embedding: no engine loaded for it) and `kail embed`.

/** llama.cpp's common_embd_normalize: -1 none, 0 max-abs scaled to the int16 range, 2 Euclidean, else the p-norm (1 taxicab). */
export function embdNormalize(v: ArrayLike<number>, norm: number): Float32Array {
  let sum = 0;
  if (norm === -1) sum = 1;
  else if (norm === 0) {
    for (let i = 0; i < v.length; i++) sum = Math.max(sum, Math.abs(v[i]));
    sum /= 32760;
  } else if (norm === 2) {
    for (let i = 0; i < v.length; i++) sum += v[i] * v[i];
    sum = Math.sqrt(sum);
  } else {
    for (let i = 0; i < v.length; i++) sum += Math.abs(v[i]) ** norm;
    sum = sum ** (1 / norm);
  }
  const k = sum > 0 ? 1 / sum : 0;
  return Float32Array.from(v, (x) => x * k);
}

/** llama.cpp's common_embd_similarity_cos: 1 for two zero vectors, 0 when only one is zero. */
export function embdCosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  if (aa === 0 || bb === 0) return aa === 0 && bb === 0 ? 1 : 0;
  return ab / (Math.sqrt(aa) * Math.sqrt(bb));
}
