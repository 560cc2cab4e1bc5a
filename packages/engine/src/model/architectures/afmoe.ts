import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { GATING_SIGMOID, moeBlockFfn, outputHead, readMoeRouting, tensorLookup } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';
import { leadingDense } from './llama-moe';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Arcee Trinity (`afmoe`, llama.cpp src/models/afmoe.cpp): the embedding times sqrt(n_embd);
 * per block RMSNorm → GQA attention with per-head q/k norms, NeoX RoPE except on every 4th block
 * (llama.cpp's n_no_rope_layer_step, which this loader never reads), a sliding window on the
 * blocks load_swa_pattern picks (every 4th full) when attention.sliding_window is set, the output
 * gated elementwise by sigmoid(attn_gate · input) before attn_output → post-attention norm →
 * residual; RMSNorm → dense SwiGLU for the leading blocks, else sigmoid-routed experts (the
 * file's norm and scale, a required selection bias) plus shared experts → post-FFN norm →
 * residual.
 */
export function buildAfmoe(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd} and value_length ${hp.headDimV} must match`);
  const window = hp.meta.int('attention.sliding_window', 0, 0, 1 << 30);
  const swa = window > 0 ? slidingWindowLayers(hp, 4) : hp.nHead.map(() => false);
  const baseSwa = hp.meta.num('rope.freq_base_swa', hp.ropeFreqBase);
  if (!(baseSwa > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.freq_base_swa ${baseSwa} is not positive`);
  const routing = readMoeRouting(hp, GATING_SIGMOID);
  const shared = hp.meta.int('expert_shared_count', 0, 0, MAX_DIM) > 0 ? 'required' : 'none';
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  p.op('scale', x, { a: x, params: { scale: Math.fround(Math.sqrt(hp.nEmbd)) } });
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const gate = p.buf(`attn_gate${H * hd}`, H * hd);
    p.op('matmul', gate, { a: h, weights: { weight: need(t(il, 'attn_gate.weight')) } });
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    if ((il + 1) % 4 !== 0) {
      const r = swa[il] ? { ...rope, freq_base: baseSwa } : rope;
      p.op('rope', q, { a: q, params: { ...r, n_head: H } });
      p.op('rope', k, { a: k, params: { ...r, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    const w: Record<string, number> = swa[il] ? { window } : {};
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...w } });
    p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { per_element: 1 } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (il < leadingDense(hp)) denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    else moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'required', shared });
    p.op('rms_norm', ffnOut, { a: ffnOut, weights: { weight: need(t(il, 'post_ffw_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
