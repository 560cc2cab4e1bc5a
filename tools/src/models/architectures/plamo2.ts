// Preferred Networks PLaMo 2 (`plamo2`: plamo-2-1b / 2b / 8b; llama.cpp src/models/plamo2.cpp,
// converted by conversion/plamo.py Plamo2Model). A hybrid: block i is a Mamba block when
// `attention.head_count_kv[i]` is 0 (the converter's mamba_step 2: every even block), an attention
// block otherwise; every block is pre-norm (attn_norm), mixer, post_attention_norm, residual, then
// ffn_norm, a SwiGLU FFN of one fused ffn_up (gate half first), post_ffw_norm, residual.
//
// What the converter writes (and this writer copies):
// - `attention.head_count` and `attention.head_count_kv` as per-block INT32 arrays (0 for Mamba
//   blocks); key_length = value_length = hidden_size_per_head; no rope.dimension_count (the graph
//   rotates the whole head, NeoX); ssm.state_size, ssm.conv_kernel, ssm.time_step_rank (the SSM
//   heads), ssm.inner_size (heads x hidden_size_per_head) and ssm.group_count 0 (llama.cpp asserts 0:
//   B and C are shared by all heads).
// - Bare names where the HF name already ends in `.weight` (gguf-py's map_tensor_name matches the
//   whole name, so no suffix is appended): post_attention_norm, post_ffw_norm, ssm_dt_norm,
//   ssm_b_norm, ssm_c_norm, as llama.cpp's loader looks them up; ssm_a (-exp(A_log)) and ssm_d are
//   1-D {heads}; ssm_conv1d.weight is squeezed to {taps, d_inner} and has no bias.
// - The Mamba mixer: ssm_in gives per head [z (head_dim) | x (head_dim)] (interleaved by head);
//   x through the causal convolution + SiLU; ssm_x gives B | C (d_state each) | dt (max(64,
//   n_embd / 16)), each RMS-normed with its weight; dt = ssm_dt dt + ssm_dt.bias (one per head);
//   the selective scan with A and D per head; times SiLU(z); ssm_out.
// - The attention: one attn_qkv (no bias), per-head q/k RMS norms with a weight row per head
//   ({head_dim, heads}), NeoX RoPE, scale 1/sqrt(head_dim), attn_output.
// - The vocabulary is the preset's vocabKind; tiny-plamo2 takes 'plamo2' (tokenizer.ggml.model
//   "plamo2", as _set_vocab_plamo writes it: models/vocab.ts buildPlamo2Vocab).
import { checkHeads, embeddings, f32Tensor, headDim, linear, linearInit, norm, NORM_INIT, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { sizeMetadata } from './common';

export interface Plamo2Ssm {
  /** mamba_d_conv. */
  convKernel: number;
  /** mamba_d_state. */
  stateSize: number;
  /** mamba_num_heads (ssm.time_step_rank); each of hidden_size_per_head channels. */
  nHeads: number;
}

/** mambaStep: HF's mamba_step (2: blocks 0, 2, 4, ... are Mamba); dtDim: overrides max(64, dim / 16) (malformed files only). */
export type Plamo2Config = ModelConfig & { ssm: Plamo2Ssm; mambaStep?: number };

/** HF modeling_plamo's is_mamba, as the converter evaluates it. */
export function isPlamo2Mamba(c: Plamo2Config, i: number): boolean {
  const step = c.mambaStep ?? 2;
  if (c.nLayers <= Math.floor(step / 2)) return i !== c.nLayers - 1;
  return i % step !== Math.floor(step / 2);
}

/** The dt projection's width: llama.cpp's max(64, n_embd / 16). */
export const plamo2DtDim = (c: ModelConfig): number => Math.max(64, Math.trunc(c.dim / 16));

const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });

export const plamo2: ArchDefinition = {
  name: 'plamo2',
  ggufArch: 'plamo2',
  normalize(c: ModelConfig): ModelConfig {
    const x = c as Plamo2Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    if (c.nExperts > 0) throw new Error('plamo2: no experts');
    const s = x.ssm;
    if (!s || ![s.convKernel, s.stateSize, s.nHeads].every((v) => Number.isInteger(v) && v > 0) || s.convKernel < 2) {
      throw new Error('plamo2: ssm needs positive integer convKernel (>= 2), stateSize and nHeads (use a preset)');
    }
    // llama.cpp (node-llama-cpp 3.22.1) aborts when the hybrid memory's KV or recurrent part has no layer.
    const kinds = Array.from({ length: c.nLayers }, (_, i) => isPlamo2Mamba(x, i));
    if (!kinds.includes(true) || !kinds.includes(false)) throw new Error(`plamo2: ${c.nLayers} blocks with mamba_step ${x.mambaStep ?? 2} leave no ${kinds.includes(true) ? 'attention' : 'Mamba'} block; llama.cpp needs both kinds`);
    return { ...c, headDim: headDim(c) } as Plamo2Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const x = c as Plamo2Config;
    const a = 'plamo2';
    const hd = headDim(c);
    const perBlock = (n: number) => kv.arr(GgufType.INT32, Array.from({ length: c.nLayers }, (_, i) => (isPlamo2Mamba(x, i) ? 0 : n)));
    return [
      ...sizeMetadata(a, c).filter(([k]) => !k.endsWith('.head_count') && !k.endsWith('.head_count_kv')),
      [`${a}.attention.head_count_kv`, perBlock(c.nKvHeads)],
      [`${a}.attention.head_count`, perBlock(c.nHeads)],
      [`${a}.attention.key_length`, kv.u32(hd)],
      [`${a}.attention.value_length`, kv.u32(hd)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.ssm.state_size`, kv.u32(x.ssm.stateSize)],
      [`${a}.ssm.conv_kernel`, kv.u32(x.ssm.convKernel)],
      [`${a}.ssm.time_step_rank`, kv.u32(x.ssm.nHeads)],
      [`${a}.ssm.inner_size`, kv.u32(x.ssm.nHeads * hd)],
      [`${a}.ssm.group_count`, kv.u32(0)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const x = c as Plamo2Config;
    const hd = headDim(c);
    const inner = x.ssm.nHeads * hd;
    const dtDim = plamo2DtDim(c);
    const ds = x.ssm.stateSize;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      const f32 = (name: string, shape: number[], init: WeightInit): TensorSpec => f32Tensor(`${p}.${name}`, shape, init, i);
      t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
      if (isPlamo2Mamba(x, i)) {
        t.push(
          linear(`${p}.ssm_in.weight`, c.dim, 2 * inner, 'attn_q', i),
          f32('ssm_conv1d.weight', [x.ssm.convKernel, inner], { kind: 'normal', std: 0.5 }),
          linear(`${p}.ssm_x.weight`, inner, dtDim + 2 * ds, 'attn_q', i),
          { name: `${p}.ssm_dt.weight`, shape: [dtDim, x.ssm.nHeads], init: linearInit(dtDim, 0.5), role: 'attn_q', layer: i },
          f32('ssm_dt.bias', [x.ssm.nHeads], { kind: 'normal', mean: -3, std: 0.5 }),
          // -exp(A_log) as the converter stores it: A in [1, 8].
          f32('ssm_a', [x.ssm.nHeads], { kind: 'normal', mean: -4.5, std: 1 }),
          f32('ssm_d', [x.ssm.nHeads], NORM_INIT),
          linear(`${p}.ssm_out.weight`, inner, c.dim, 'attn_q', i),
          norm(`${p}.ssm_dt_norm`, dtDim, i),
          norm(`${p}.ssm_b_norm`, ds, i),
          norm(`${p}.ssm_c_norm`, ds, i),
        );
      } else {
        const [nQ, nKv] = [hd * c.nHeads, hd * c.nKvHeads];
        // llama-quant types attn_qkv as attn_v.
        t.push(
          linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i),
          f32('attn_q_norm.weight', [hd, c.nHeads], NORM_INIT),
          f32('attn_k_norm.weight', [hd, c.nKvHeads], NORM_INIT),
          linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i),
        );
      }
      // The converter adds 1/5 and 1/5^1.5 to the post norms' HF weights (PLaMo's scaled residuals).
      t.push(
        { ...norm(`${p}.post_attention_norm`, c.dim, i), init: gainInit(2 * residualGain(c)) },
        norm(`${p}.ffn_norm.weight`, c.dim, i),
        linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i),
        linear(`${p}.ffn_up.weight`, c.dim, 2 * c.ff, 'ffn_up', i),
        { ...norm(`${p}.post_ffw_norm`, c.dim, i), init: gainInit(2 * residualGain(c)) },
      );
    }
    return t;
  },
};
