// A reranker's classification head (llama.cpp's LLAMA_POOLING_TYPE_RANK): files with
// `<arch>.pooling_type` 4 and `cls.output.weight` score a (query, document) prompt from one
// pooled hidden row (the final normalized hidden state, what the LM head reads): the last token's
// for qwen3/qwen3vl (Qwen3-Reranker), else the first's; optionally `cls.weight` (+ bias) and tanh
// first (BERT-style heads), then `cls.output` (+ bias), then for qwen3 a softmax over the labels.
// llama-server's /rerank takes the first value as the relevance score.
import type { NativeGgufFile } from '@kailstream/core-native';

import { EngineError, toEngineError } from '../errors';
import { native } from '../native';
import type { HParams } from './hparams';

export interface RankHead {
  /** Pool the last token's row (qwen3), else the first's. */
  last: boolean;
  softmax: boolean;
  /** `<arch>.classifier.output_labels`, else label_0.. */
  labels: string[];
  /** Scores (one per label) from a pooled hidden row. */
  apply(hidden: Float32Array): Float32Array;
}

const RANK = 4;

/** The file's rank head, or null when it has none (or its pooling is not rank). */
export function readRankHead(file: NativeGgufFile, hp: HParams): RankHead | null {
  if (hp.poolingType !== RANK) return null;
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  // A weight as ggml multiplies it (its own type; the native matmul converts the input row as
  // ggml-cpu's mul_mat does, so a quantized head scores as llama.cpp's), or a bias as floats.
  const matrix = (name: string, rows: number, cols: number): ((x: Float32Array) => Float32Array) | null => {
    const t = byName.get(name);
    if (!t) return null;
    if (t.dims[0] !== cols || t.dims.reduce((a, b) => a * b, 1) !== rows * cols)
      throw new EngineError('KAIL_E_BAD_MODEL', `${name} has shape [${t.dims.join(', ')}], a rank head needs [${cols}, ${rows}]`);
    const w = Uint8Array.from(file.tensorData(name));
    return (x) => {
      try {
        return native().matmul(t.type, w, rows, cols, x, 1);
      } catch (e) {
        throw toEngineError(e);
      }
    };
  };
  const bias = (name: string, n: number): Float32Array | null => {
    const t = byName.get(name);
    if (!t) return null;
    if (t.dims.reduce((a, b) => a * b, 1) !== n) throw new EngineError('KAIL_E_BAD_MODEL', `${name} has ${t.dims.join('x')} values, expected ${n}`);
    try {
      return native().dequantize(t.type, file.tensorData(name), n);
    } catch (e) {
      throw toEngineError(e);
    }
  };
  const d = hp.nEmbd;
  const outT = byName.get('cls.output.weight');
  if (!outT) return null;
  const nOut = outT.dims[1] ?? 1;
  if (byName.has('cls.output_norm.weight') || byName.has('cls.norm.weight'))
    throw new EngineError('KAIL_E_UNSUPPORTED', 'this reranker has a normed classification head, which kail does not implement');
  const dense = matrix('cls.weight', d, d);
  const denseB = dense ? bias('cls.bias', d) : null;
  const out = matrix('cls.output.weight', nOut, d)!;
  const outB = bias('cls.output.bias', nOut);
  const qwen3 = hp.arch === 'qwen3' || hp.arch === 'qwen3vl';
  const lv = hp.meta.kv[`${hp.arch}.classifier.output_labels`];
  const labels = Array.isArray(lv) && lv.length === nOut && lv.every((x) => typeof x === 'string') ? (lv as string[]) : Array.from({ length: nOut }, (_, i) => `label_${i}`);
  return {
    last: qwen3,
    softmax: qwen3,
    labels,
    apply(h: Float32Array): Float32Array {
      if (h.length !== d) throw new EngineError('KAIL_E_INTERNAL', `rank head: a hidden row of ${h.length} values, expected ${d}`);
      let x = h;
      if (dense) {
        x = dense(x);
        for (let j = 0; j < d; j++) x[j] = Math.tanh(x[j] + (denseB ? denseB[j] : 0));
      }
      const z = out(x);
      if (outB) for (let j = 0; j < nOut; j++) z[j] += outB[j];
      if (this.softmax) {
        const mx = Math.max(...z);
        let sum = 0;
        for (let j = 0; j < nOut; j++) sum += z[j] = Math.exp(z[j] - mx);
        for (let j = 0; j < nOut; j++) z[j] /= sum;
      }
      return z;
    },
  };
}
