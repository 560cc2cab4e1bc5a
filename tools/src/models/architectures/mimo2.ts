// Xiaomi MiMo-V2 (`mimo2`, llama.cpp src/models/mimo2.cpp, converted by conversion/mimo.py): GQA
// with a per-block KV head count (sliding-window blocks have their own), keys of `headDim` and
// values of `headDimV`, partial NeoX RoPE, `sliding_window_pattern` (1 = windowed) with attention
// sinks on the windowed blocks, `attention.value_scale`, leading dense blocks (no router) and
// sigmoid-routed experts with a selection bias. As the converter: no rope.freq_base_swa (llama.cpp
// then rotates the windowed blocks with base 10000).
import { checkHeads, denseFfn, embeddings, linear, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export type Mimo2Config = ModelConfig & {
  headDim: number;
  headDimV: number;
  ropeDims: number;
  /** Per block: 1 sliding window, 0 full attention. */
  swaPattern: number[];
  window: number;
  nKvHeadsSwa: number;
  valueScale: number;
  /** Leading blocks with a dense FFN of `ff`. */
  nDense: number;
};

const kvHeads = (c: Mimo2Config, i: number) => (c.swaPattern[i] ? c.nKvHeadsSwa : c.nKvHeads);

export const mimo2: ArchDefinition = {
  name: 'mimo2',
  ggufArch: 'mimo2',
  normalize(c: ModelConfig): ModelConfig {
    const m = c as Mimo2Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    checkExperts(c, true);
    if (!m.swaPattern || m.swaPattern.length !== c.nLayers) throw new Error('mimo2: swaPattern needs one entry per block (use a preset)');
    if (!(m.headDimV > 0) || !(m.window > 0) || !(m.nKvHeadsSwa > 0) || c.nHeads % m.nKvHeadsSwa !== 0) throw new Error('mimo2: headDimV, window and nKvHeadsSwa (dividing nHeads) must be positive');
    if (m.ropeDims % 2 !== 0 || m.ropeDims > m.headDim) throw new Error('mimo2: ropeDims must be even and at most headDim');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as Mimo2Config;
    const a = 'mimo2';
    const drop = new Set([`${a}.attention.head_count_kv`, `${a}.attention.value_length`, `${a}.rope.dimension_count`]);
    return [
      ...baseMetadata(a, c).filter(([k]) => !drop.has(k)),
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.UINT32, m.swaPattern.map((_, i) => kvHeads(m, i)))],
      [`${a}.attention.value_length`, kv.u32(m.headDimV)],
      [`${a}.rope.dimension_count`, kv.u32(m.ropeDims)],
      [`${a}.attention.sliding_window`, kv.u32(m.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.INT32, m.swaPattern)],
      [`${a}.attention.value_scale`, kv.f32(m.valueScale)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const m = c as Mimo2Config;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      const hkv = kvHeads(m, i);
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        linear(`${p}.attn_q.weight`, c.dim, c.nHeads * m.headDim, 'attn_q', i),
        linear(`${p}.attn_k.weight`, c.dim, hkv * m.headDim, 'attn_k', i),
        linear(`${p}.attn_v.weight`, c.dim, hkv * m.headDimV, 'attn_v', i),
        linear(`${p}.attn_output.weight`, c.nHeads * m.headDimV, c.dim, 'attn_output', i, residualGain(c)),
      );
      if (m.swaPattern[i]) t.push({ name: `${p}.attn_sinks.weight`, shape: [c.nHeads], init: { kind: 'normal', std: 1 }, role: 'bias', layer: i });
      if (i < m.nDense) t.push(...denseFfn(c, i));
      else t.push(...moeFfn(c, i, c.expertFf), { name: `${p}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i });
    }
    return t;
  },
};
