// The Mamba2 mixer that llama.cpp's Mamba2 hybrids share (nemotron_h, nemotron_h_moe and
// granitehybrid: src/models/mamba-base.cpp build_mamba2_layer, loaded by src/models/nemotron-h.cpp
// and granite-hybrid.cpp; converted by conversion/mamba.py Mamba2Model, conversion/granite.py
// GraniteHybridModel and conversion/nemotron.py NemotronHModel). ssm_in projects to z (the gate,
// d_inner), xBC (x of d_inner, then B and C of n_group x d_state each) and dt (one per head);
// xBC goes through a depthwise causal convolution of conv_kernel taps with a bias and SiLU; the
// scan runs per head with the decay exp(softplus(dt + ssm_dt.bias) * ssm_a), ssm_a = -exp(A_log)
// stored as {1, n_head}, plus the skip ssm_d {1, n_head}; the result is gated by SiLU(z), RMS-normed
// per group (ssm_norm {d_inner / n_group, n_group}) and projected back by ssm_out.
import { f32Tensor, linear, NORM_INIT, residualGain } from '../arch';
import type { ModelConfig, TensorSpec, WeightInit } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';

/** The mixer's shape: the ssm.* keys (HF mamba_* / ssm_* fields). */
export interface Mamba2Shape {
  /** ssm.conv_kernel: the causal convolution's taps (conv_kernel). */
  convKernel: number;
  /** ssm.state_size: d_state of each group (ssm_state_size). */
  stateSize: number;
  /** ssm.group_count: groups sharing B and C (n_groups). */
  nGroup: number;
  /** ssm.time_step_rank: the SSM heads (mamba_num_heads; llama.cpp reads the head count from this key). */
  nHeads: number;
  /** mamba_head_dim: ssm.inner_size (d_inner) is nHeads x headDim. */
  headDim: number;
}

export const mamba2Inner = (s: Mamba2Shape): number => s.nHeads * s.headDim;

/** Channels through the convolution: x, B and C. */
const convChannels = (s: Mamba2Shape): number => mamba2Inner(s) + 2 * s.nGroup * s.stateSize;

export function checkMamba2(arch: string, s: Mamba2Shape | undefined): Mamba2Shape {
  if (!s || ![s.convKernel, s.stateSize, s.nGroup, s.nHeads, s.headDim].every((v) => Number.isInteger(v) && v > 0)) {
    throw new Error(`${arch}: ssm needs positive convKernel, stateSize, nGroup, nHeads and headDim (use a preset)`);
  }
  if (s.convKernel < 2) throw new Error(`${arch}: ssm.convKernel must be at least 2`);
  // build_mamba2_layer asserts d_inner % n_group == 0 (the norm groups); heads split d_inner evenly by construction.
  if (mamba2Inner(s) % s.nGroup !== 0) throw new Error(`${arch}: ssm inner size ${mamba2Inner(s)} not divisible by ${s.nGroup} groups`);
  return s;
}

/** The ssm.* keys, as the converters write them. */
export function mamba2Metadata(arch: string, s: Mamba2Shape): [string, GgufValue][] {
  return [
    [`${arch}.ssm.conv_kernel`, kv.u32(s.convKernel)],
    [`${arch}.ssm.state_size`, kv.u32(s.stateSize)],
    [`${arch}.ssm.group_count`, kv.u32(s.nGroup)],
    [`${arch}.ssm.inner_size`, kv.u32(mamba2Inner(s))],
    [`${arch}.ssm.time_step_rank`, kv.u32(s.nHeads)],
  ];
}

/**
 * Block `i`'s mixer tensors (its attn_norm is the caller's), in llama.cpp's load order. ssm_in and
 * ssm_out have no llama-quant category (the default rule, as attn_q here); the convolution
 * (llama-quant skips `ssm_conv1d`), ssm_a and ssm_d (not named `*weight`) and the grouped norm
 * (`_norm.weight`) stay F32 in every file though 2-D.
 */
export function mamba2Mixer(c: ModelConfig, i: number, s: Mamba2Shape): TensorSpec[] {
  const p = `blk.${i}`;
  const inner = mamba2Inner(s);
  const f32 = (name: string, shape: number[], init: WeightInit): TensorSpec => f32Tensor(`${p}.${name}`, shape, init, i);
  return [
    linear(`${p}.ssm_in.weight`, c.dim, 2 * inner + 2 * s.nGroup * s.stateSize + s.nHeads, 'attn_q', i),
    // [taps, channels]: rows of convKernel taps; std 0.5 over 4 taps keeps unit-scale channels.
    f32('ssm_conv1d.weight', [s.convKernel, convChannels(s)], { kind: 'normal', std: 0.5 }),
    f32('ssm_conv1d.bias', [convChannels(s)], { kind: 'normal', std: 0.1 }),
    // dt = softplus(N(0, 1) + bias): steps of about 0.01 to 0.3 (Mamba2 initializes dt in [0.001, 0.1]),
    // so with the decays below a head remembers a few to some tens of tokens.
    f32('ssm_dt.bias', [s.nHeads], { kind: 'normal', mean: -3, std: 0.5 }),
    // -exp(A_log), as the converter stores it: the generator's normal is bounded at 3.46 std, so
    // all in [-8, -1] (A in [1, 8], per-step decays exp(dt * a) well inside (0, 1)).
    f32('ssm_a', [1, s.nHeads], { kind: 'normal', mean: -4.5, std: 1 }),
    f32('ssm_d', [1, s.nHeads], NORM_INIT),
    f32('ssm_norm.weight', [inner / s.nGroup, s.nGroup], NORM_INIT),
    linear(`${p}.ssm_out.weight`, inner, c.dim, 'attn_q', i, residualGain(c)),
  ];
}
