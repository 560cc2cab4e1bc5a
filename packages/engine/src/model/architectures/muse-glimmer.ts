import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Muse Glimmer (`muse-glimmer`, llama.cpp src/models/muse-glimmer.cpp), afmoe's dense sibling: the
 * embedding RMS-normalized without a weight; per block RMSNorm → GQA attention with per-head q/k RMS
 * norms, RoPE over adjacent pairs on the sliding blocks only (NoPE on the full ones; window
 * attention.sliding_window, required, on the blocks load_swa_pattern(4) picks, rotating at
 * rope.freq_base_swa, default the file's base), the output gated elementwise by
 * sigmoid(attn_gate · input) before attn_output → post_attention_norm (eps 1e-8) → residual;
 * RMSNorm → SwiGLU → post_ffw_norm (eps 1e-8) → residual; output_norm, output.weight (required),
 * the logits times logit_scale (required), then tanh soft-capped by final_logit_softcapping
 * (absent: 30, llama.cpp's default; 0: none).
 */
export function buildMuseGlimmer(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd} and value_length ${hp.headDimV} must match`);
  const window = hp.meta.int('attention.sliding_window', undefined, 0, 1 << 30);
  const swa = slidingWindowLayers(hp, 4);
  const baseSwa = hp.meta.num('rope.freq_base_swa', hp.ropeFreqBase);
  if (!(baseSwa > 0 && Number.isFinite(baseSwa))) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.freq_base_swa ${baseSwa} is not a positive number`);
  const scale = hp.meta.num('logit_scale');
  if (!Number.isFinite(scale)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: logit_scale ${scale} is not a finite number`);
  // (Absent: llama.cpp's hparams default of 30; its converter always writes the key.)
  const softcap = hp.meta.num('final_logit_softcapping', 30);
  if (!(softcap >= 0 && Number.isFinite(softcap))) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: final_logit_softcapping ${softcap} is not a non-negative number`);
  const rope = { ...ropeParams(hp, false), head_dim: hd };
  const POST_EPS = 1e-8;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  p.op('head_rms_norm', x, { a: x, params: { eps: hp.rmsEps, head_dim: hp.nEmbd, n_head: 1 } });
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const gate = p.buf(`attn_gate${H * hd}`, H * hd);
    p.op('matmul', gate, { a: h, weights: { weight: need(t(il, 'attn_gate.weight')) } });
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    if (swa[il]) {
      p.op('rope', q, { a: q, params: { ...rope, freq_base: baseSwa, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rope, freq_base: baseSwa, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    const w: Record<string, number> = swa[il] && window > 0 ? { window } : {};
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...w } });
    p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { per_element: 1 } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: POST_EPS } });
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    denseGatedFfn(p, tensors, il, { need, maybe: () => undefined }, h, ffnOut);
    p.op('rms_norm', ffnOut, { a: ffnOut, weights: { weight: need(t(il, 'post_ffw_norm.weight')) }, params: { eps: POST_EPS } });
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, 'output_norm.weight', { untied: true, scale, softcap });
}
