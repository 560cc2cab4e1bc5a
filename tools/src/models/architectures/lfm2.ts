// Liquid AI LFM2 (`lfm2`, dense) and LFM2-MoE (`lfm2moe`; llama.cpp src/models/lfm2.cpp,
// lfm2moe.cpp, converted by conversion/lfm2.py): blocks are gated short convolutions
// (shortconv.in_proj to b|c|x, a depthwise causal convolution of shortconv.l_cache taps kept F32,
// shortconv.out_proj) or GQA with per-head q/k norms, as `attention.head_count_kv` says per block
// (0: convolution, as the converter writes it). Every block has attn_norm and ffn_norm; the FFN is
// SwiGLU, or for lfm2moe from leading_dense_block_count on sigmoid-routed experts with a selection
// bias (exp_probs_b.bias) and expert_gating_func written as the converter writes it. The final
// norm is named `token_embd_norm` (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2).
import { attention, checkHeads, denseFfn, embeddings, linear, moeFfn, norm, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export type Lfm2Config = ModelConfig & {
  /** Per block: true for a GQA block, false for a short convolution. */
  attnBlocks: boolean[];
  /** shortconv.l_cache: the convolution's taps. */
  convTaps: number;
  /** lfm2moe: leading blocks with a dense FFN. */
  nDense?: number;
};

function lfm2Arch(name: 'lfm2' | 'lfm2moe'): ArchDefinition {
  const moe = name === 'lfm2moe';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      const l = c as Lfm2Config;
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', ...(moe ? (['expertFf'] as const) : [])]);
      checkHeads(c);
      checkExperts(c, moe);
      if (!Array.isArray(l.attnBlocks) || l.attnBlocks.length === 0) throw new Error(`${name}: attnBlocks needs an entry per block (use a preset)`);
      if (!Number.isInteger(l.convTaps) || l.convTaps < 2) throw new Error(`${name}: convTaps must be an integer of at least 2`);
      // --layers N: the preset's pattern, cut or repeated to N blocks.
      return { ...c, attnBlocks: Array.from({ length: c.nLayers }, (_, i) => l.attnBlocks[i % l.attnBlocks.length]) } as Lfm2Config;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const l = c as Lfm2Config;
      const a = name;
      const m: [string, GgufValue][] = [
        ...baseMetadata(a, c).filter(([k]) => k !== `${a}.attention.head_count_kv`),
        [`${a}.attention.head_count_kv`, kv.arr(GgufType.UINT32, l.attnBlocks.map((x) => (x ? c.nKvHeads : 0)))],
        [`${a}.shortconv.l_cache`, kv.u32(l.convTaps)],
      ];
      if (moe)
        m.push(
          [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
          [`${a}.leading_dense_block_count`, kv.u32(l.nDense ?? 0)],
          // gguf's ExpertGatingFuncType.SIGMOID.
          [`${a}.expert_gating_func`, kv.u32(2)],
        );
      return m;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const l = c as Lfm2Config;
      const t = embeddings(c).map((s) => (s.name === 'output_norm.weight' ? { ...s, name: 'token_embd_norm.weight' } : s));
      for (let i = 0; i < c.nLayers; i++) {
        const p = `blk.${i}`;
        if (l.attnBlocks[i]) t.push(...attention(c, i, { qkNorm: true }));
        else
          t.push(
            norm(`${p}.attn_norm.weight`, c.dim, i),
            linear(`${p}.shortconv.in_proj.weight`, c.dim, 3 * c.dim, 'attn_q', i),
            // [taps, channels], F32 in every file (llama-quant skips 'conv' 2-D kernels of this shape).
            { name: `${p}.shortconv.conv.weight`, shape: [l.convTaps, c.dim], init: { kind: 'normal', std: 0.5 }, role: 'bias', layer: i },
            linear(`${p}.shortconv.out_proj.weight`, c.dim, c.dim, 'attn_output', i),
          );
        if (!moe || i < (l.nDense ?? 0)) t.push(...denseFfn(c, i));
        else t.push(...moeFfn(c, i, c.expertFf), { name: `${p}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i });
      }
      return t;
    },
  };
}

export const lfm2 = lfm2Arch('lfm2');
export const lfm2moe = lfm2Arch('lfm2moe');
