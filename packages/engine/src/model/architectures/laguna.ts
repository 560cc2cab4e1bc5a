import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { GATING_SIGMOID, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Poolside Laguna (`laguna`, llama.cpp src/models/laguna.cpp; Laguna-XS.2 30B-A3B, S.2, M.1).
 *
 * Blocks with their own query head counts (per-block `head_count`; one KV head count and head
 * size). RMSNorm → Q/K/V → per-head q/k RMS norms → NeoX RoPE: full blocks rotate
 * `rope.dimension_count` dimensions with the file's base and scaling (YaRN included); with
 * `attention.sliding_window` set, the blocks load_swa_pattern picks (every 4th from block 0 full
 * by default) attend through that window and rotate `rope.dimension_count_swa` dimensions with
 * `rope.freq_base_swa` and no scaling → attention scaled by 1/sqrt(head size) → times
 * softplus(attn_gate · normed input), one gate per head or per value (the width of
 * `attn_gate.weight` says which) → output projection → residual. RMSNorm → a dense SwiGLU FFN on
 * the `leading_dense_block_count` first blocks, else routed SwiGLU experts (sigmoid unless
 * `expert_gating_func` says otherwise, a required selection bias, renormalization and scale from
 * the file) plus a shared SwiGLU expert → residual. The head is tied when the file has no
 * output.weight.
 */
export function buildLaguna(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const hdK = hp.headDimK;
  const hdV = hp.headDimV;
  const nDense = md.int('leading_dense_block_count', undefined, 0, MAX_LAYERS);
  const window = md.int('attention.sliding_window', 0, 0, 1 << 30);
  const swa = window > 0 ? slidingWindowLayers(hp, 4, true) : hp.nHead.map(() => false);
  const rotSwa = md.int('rope.dimension_count_swa', hp.ropeDims, 0, hdK);
  if (rotSwa % 2 !== 0) bad(`rope.dimension_count_swa ${rotSwa} is not an even number of dimensions`);
  const baseSwa = md.num('rope.freq_base_swa', hp.ropeFreqBase);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const routing = readMoeRouting(hp, GATING_SIGMOID);
  const ropeFull = { ...ropeParams(hp, true), head_dim: hdK };
  // (Plain RoPE: llama.cpp zeroes YaRN's parameters on these blocks.)
  const ropeSwa = {
    ...ropeParams(hp, true, { n_dims: rotSwa, attn_factor: 1 }),
    head_dim: hdK,
    freq_base: baseSwa,
    freq_scale: 1,
    ext_factor: 0,
    beta_fast: 0,
    beta_slow: 0,
    n_ctx_orig: hp.nCtxTrain,
  };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < trunkLayers(hp); il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hdK, hdV);
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hdK, n_head: H } });
    p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hdK, n_head: Hkv } });
    const rope = swa[il] ? ropeSwa : ropeFull;
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hdK, Hkv * hdV);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hdK, head_dim_v: hdV, scale: 1 / Math.sqrt(hdK), ...(swa[il] ? { window } : {}) },
    });
    const gateW = need(t(il, 'attn_gate.weight'));
    const gates = tensors.get(gateW)!.dims[1];
    if (gates !== H && gates !== H * hdV) bad(`layer ${il}: attn_gate.weight has ${gates} outputs; expected ${H} (one per head) or ${H * hdV} (one per value)`);
    const gate = p.buf(`attn_gate${gates}`, gates);
    p.op('matmul', gate, { a: h, weights: { weight: gateW } });
    p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { softplus: 1, ...(gates === H ? { group: hdV } : { per_element: 1 }) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, il < nDense, { probsBias: 'required', shared: 'required' });
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
