// AI21 Jamba (`jamba`: Jamba-v0.1, Jamba 1.5 / 1.7 Mini and Large; llama.cpp src/models/jamba.cpp,
// converted by conversion/jamba.py JambaModel): a block is a Mamba-1 mixer or GQA attention
// without positions, as the per-block array `attention.head_count_kv` says (0: Mamba, the
// converter's attn_layer_offset / attn_layer_period), and every block has attn_norm (its input
// norm), ffn_norm and either softmax-routed SwiGLU experts, top-k without renormalization (the
// blocks from expert_layer_offset every expert_layer_period; llama.cpp tells them by the router,
// ffn_gate_inp) or a dense SwiGLU FFN. Both take the single `feed_forward_length` (llama.cpp's
// loader reads n_ff of block 0 for every block, dense or experts; the converter writes HF's
// intermediate_size). The converter writes no rope keys, no expert_gating_func (softmax is fixed in
// the graph) and no expert_weights_* keys.
//
// The Mamba-1 mixer (src/models/mamba-base.cpp build_mamba_layer): ssm_in projects to x then z
// (d_inner each; llama.cpp asserts d_inner = 2 x n_embd, HF mamba_expand 2); x goes through a
// depthwise causal convolution of conv_kernel taps with a bias (required by the jamba loader) and
// SiLU; ssm_x projects it to dt (time_step_rank: the dt projection's rank here, not a head count),
// B and C (state_size each), which Jamba RMS-norms (ssm_dt_norm, ssm_b_norm, ssm_c_norm: the graph
// norms whenever the three tensors are loaded, and the jamba loader requires them); ssm_dt maps dt
// back to d_inner with a bias, and the selective scan runs one channel per head with the decay
// exp(softplus(dt) * ssm_a) over each channel's state_size states (ssm_a = -exp(A_log), stored
// {d_state, d_inner}), plus the skip ssm_d {d_inner}; the result is gated by SiLU(z) and projected
// back by ssm_out.
import { attention, checkHeads, denseFfn, embeddings, f32Tensor, linear, linearInit, moeFfn, norm, NORM_INIT, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/** The Mamba-1 mixer's shape: the ssm.* keys (HF mamba_d_conv, mamba_d_state, mamba_dt_rank); d_inner is 2 x dim. */
export interface Mamba1Shape {
  /** ssm.conv_kernel: the causal convolution's taps. */
  convKernel: number;
  /** ssm.state_size: d_state of each channel. */
  stateSize: number;
  /** ssm.time_step_rank: the rank of the dt projection (HF default ceil(dim / 16)). */
  dtRank: number;
}

/**
 * Which blocks are attention and which have experts, as HF's Jamba config: attention at
 * attnOffset, attnOffset + attnPeriod, ...; experts at expertOffset, expertOffset + expertPeriod, ...
 * (the real models: attention every 8th block from 4, experts every 2nd from 1).
 */
export interface JambaLayout {
  attnPeriod: number;
  attnOffset: number;
  expertPeriod: number;
  expertOffset: number;
}

export type JambaConfig = ModelConfig & { ssm: Mamba1Shape; layout: JambaLayout };

/** d_inner: llama.cpp's jamba loader (and build_mamba_layer's x / z split) takes only an expansion of 2. */
export const mamba1Inner = (c: ModelConfig): number => 2 * c.dim;

const every = (i: number, offset: number, period: number) => i >= offset && (i - offset) % period === 0;
export const isJambaAttention = (c: JambaConfig, i: number): boolean => every(i, c.layout.attnOffset, c.layout.attnPeriod);
/** With no experts (nExperts 0) every block is dense. */
export const isJambaExperts = (c: JambaConfig, i: number): boolean => c.nExperts > 0 && every(i, c.layout.expertOffset, c.layout.expertPeriod);

export function checkMamba1(arch: string, s: Mamba1Shape | undefined): Mamba1Shape {
  if (!s || ![s.convKernel, s.stateSize, s.dtRank].every((v) => Number.isInteger(v) && v > 0)) {
    throw new Error(`${arch}: ssm needs positive integer convKernel, stateSize and dtRank (use a preset)`);
  }
  if (s.convKernel < 2) throw new Error(`${arch}: ssm.convKernel must be at least 2`);
  return s;
}

/** The ssm.* keys, as conversion/jamba.py writes them (after head_count_kv). */
export function mamba1Metadata(arch: string, c: ModelConfig, s: Mamba1Shape): [string, GgufValue][] {
  return [
    [`${arch}.ssm.conv_kernel`, kv.u32(s.convKernel)],
    [`${arch}.ssm.inner_size`, kv.u32(mamba1Inner(c))],
    [`${arch}.ssm.state_size`, kv.u32(s.stateSize)],
    [`${arch}.ssm.time_step_rank`, kv.u32(s.dtRank)],
  ];
}

/**
 * Block `i`'s Mamba-1 mixer tensors (its attn_norm is the caller's), in llama.cpp's load order.
 * ssm_in, ssm_x, ssm_dt.weight and ssm_out have no llama-quant category (the default rule, as
 * attn_q here; ssm_dt's rows of dt_rank take the fallbacks, F16 below 32); the convolution
 * (llama-quant skips `ssm_conv1d`), ssm_a (not named `*weight`) and the 1-D biases, norms and
 * ssm_d stay F32 in every file.
 *
 * Init, Mamba's own where it keeps the scan stable: the convolution's taps of std 1/sqrt(taps)
 * keep unit-scale channels; dt, B and C are RMS-normed (gains around 1), so ssm_x only needs a
 * plain projection; ssm_dt (std 0.5/sqrt(rank) over the unit-scale normed dt, Mamba's uniform of
 * rank^-0.5 has std 0.58/sqrt(rank)) plus a bias around softplus⁻¹(0.01) = -4.6 (std 1, so
 * within [-8, -1.1]: Mamba draws dt log-uniformly in [0.001, 0.1]) gives steps of about 0.001 to
 * 0.1; ssm_a is S4D-real's A = 1..d_state in every channel (rows -1..-d_state, per-step decays
 * exp(dt * a) well inside (0, 1)); ssm_d around 1 as Mamba's ones.
 */
export function mamba1Mixer(c: ModelConfig, i: number, s: Mamba1Shape, norms = true): TensorSpec[] {
  const p = `blk.${i}`;
  const inner = mamba1Inner(c);
  const f32 = (name: string, shape: number[], init: WeightInit): TensorSpec => f32Tensor(`${p}.${name}`, shape, init, i);
  // (norms false: Mamba's and Falcon-Mamba's mixers, which have no ssm_dt_norm / ssm_b_norm / ssm_c_norm.)
  const t: TensorSpec[] = [
    linear(`${p}.ssm_in.weight`, c.dim, 2 * inner, 'attn_q', i),
    f32('ssm_conv1d.weight', [s.convKernel, inner], { kind: 'normal', std: 1 / Math.sqrt(s.convKernel) }),
    f32('ssm_conv1d.bias', [inner], { kind: 'normal', std: 0.1 }),
    linear(`${p}.ssm_x.weight`, inner, s.dtRank + 2 * s.stateSize, 'attn_q', i),
    norm(`${p}.ssm_dt_norm.weight`, s.dtRank, i),
    { name: `${p}.ssm_dt.weight`, shape: [s.dtRank, inner], init: linearInit(s.dtRank, 0.5), role: 'attn_q', layer: i },
    f32('ssm_dt.bias', [inner], { kind: 'normal', mean: -4.6, std: 1 }),
    norm(`${p}.ssm_b_norm.weight`, s.stateSize, i),
    norm(`${p}.ssm_c_norm.weight`, s.stateSize, i),
    f32('ssm_a', [s.stateSize, inner], { kind: 'ramp', start: -1, step: -1 }),
    f32('ssm_d', [inner], NORM_INIT),
    linear(`${p}.ssm_out.weight`, inner, c.dim, 'attn_q', i, residualGain(c)),
  ];
  return norms ? t : t.filter((x) => !/\.ssm_(dt|b|c)_norm\.weight$/.test(x.name));
}

export const jamba: ArchDefinition = {
  name: 'jamba',
  ggufArch: 'jamba',
  normalize(c: ModelConfig): ModelConfig {
    const j = c as JambaConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkExperts(c, false);
    // The loader builds attn_q / attn_output over n_embd: heads of dim / heads only.
    if (c.headDim !== undefined && c.headDim !== c.dim / c.nHeads) throw new Error(`jamba: head size must be dim / heads (${c.dim / c.nHeads}), got ${c.headDim}`);
    // One n_ff for the dense FFNs and the experts (llama.cpp reads feed_forward_length once).
    if (c.nExperts > 0 && c.expertFf > 0 && c.expertFf !== c.ff) throw new Error(`jamba: experts and dense FFNs share feed_forward_length; expertFf ${c.expertFf} must equal ff ${c.ff}`);
    if (c.sharedFf > 0) throw new Error('jamba: no shared expert (sharedFf must be 0)');
    checkMamba1('jamba', j.ssm);
    const l = j.layout;
    if (!l || ![l.attnPeriod, l.expertPeriod].every((v) => Number.isInteger(v) && v > 0) || ![l.attnOffset, l.expertOffset].every((v) => Number.isInteger(v) && v >= 0)) {
      throw new Error('jamba: layout needs positive integer attnPeriod / expertPeriod and non-negative attnOffset / expertOffset (use a preset)');
    }
    // llama.cpp (node-llama-cpp 3.22.1) aborts (GGML_ASSERT(buffer) in ggml-backend.cpp) when the
    // hybrid memory's KV or recurrent part has no layer: keep at least one block of each kind.
    const attn = Array.from({ length: c.nLayers }, (_, i) => isJambaAttention(j, i));
    if (!attn.includes(true) || !attn.includes(false)) {
      throw new Error(`jamba: ${c.nLayers} blocks with attention from ${l.attnOffset} every ${l.attnPeriod} leave no ${attn.includes(true) ? 'Mamba' : 'attention'} block; llama.cpp needs both kinds`);
    }
    return { ...c, expertFf: c.nExperts > 0 ? c.ff : 0 } as JambaConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const j = c as JambaConfig;
    const a = 'jamba';
    return [
      // No positions: the converter writes no rope keys.
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.attention.head_count_kv` && !k.startsWith(`${a}.rope.`)),
      // Per block, as the converter (gguf-py add_array of Python ints): INT32, 0 for a Mamba block.
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, Array.from({ length: c.nLayers }, (_, i) => (isJambaAttention(j, i) ? c.nKvHeads : 0)))],
      ...mamba1Metadata(a, c, j.ssm),
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const j = c as JambaConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      // attention() starts with the block's attn_norm; a Mamba block adds it itself.
      if (isJambaAttention(j, i)) t.push(...attention(c, i));
      else t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...mamba1Mixer(c, i, j.ssm));
      t.push(...(isJambaExperts(j, i) ? moeFfn(c, i, c.ff) : denseFfn(c, i)));
    }
    return t;
  },
};
