import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { softmaxExperts } from './llama-family';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * xAI Grok-1 and Grok-2 (`grok`, llama.cpp src/models/grok.cpp).
 *
 * The embedding times `embedding_scale`. Per block: RMSNorm → GQA with NeoX RoPE over the whole
 * head (YaRN from the file's rope.scaling keys) → scores soft-capped as cap * tanh(score *
 * attention.output_scale / cap) with `attn_logit_softcapping` as the cap and no other scaling →
 * output projection → `attn_output_norm` → residual. RMSNorm → routed GeGLU experts (softmax,
 * top-k renormalized, unscaled: its loader reads no gating, renormalization or scale keys;
 * gelu(up) alone when the file has no gate experts) and, when the file has a
 * dense FFN (Grok-2), a dense GeGLU beside them, the two summed and scaled by sqrt(2)/2 → the
 * post-FFN norm (`layer_output_norm`, else `post_ffw_norm`) → residual. Output norm, head (tied to
 * the embedding without output.weight), logits times `logit_scale`, then soft-capped by
 * `final_logit_softcapping` when the file sets it. Keys the file lacks take llama.cpp's defaults
 * for old Grok-1 files (embedding scale 78.38, logit scale 0.577, attention output scale 0.0884,
 * caps 30 and none).
 */
export function buildGrok(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) bad('expert_count and expert_used_count are required (the architecture routes every block)');
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) bad(`rope.dimension_count ${hp.ropeDims} must equal the head size ${hd}`);
  const num = (key: string, def: number, positive: boolean) => {
    const v = md.num(key, def);
    if (!Number.isFinite(v) || (positive ? !(v > 0) : v < 0)) bad(`${key} ${v} is not a ${positive ? 'positive' : 'non-negative'} number`);
    return v;
  };
  const embScale = num('embedding_scale', 78.38367176906169, false);
  const logitScale = num('logit_scale', 0.5773502691896257, false);
  const attnScale = num('attention.output_scale', 0.08838834764831845, false);
  const attnCap = num('attn_logit_softcapping', 30, true);
  const finalCap = num('final_logit_softcapping', 0, false);
  const rope = { ...ropeParams(hp, true), head_dim: hd };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  // (llama.cpp scales the input embeddings only when the key's value is not 0.)
  if (embScale !== 0) p.op('scale', x, { a: x, params: { scale: embScale } });
  const res = p.buf('attn_res', hp.nEmbd);
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1, softcap: attnCap, softcap_scale: attnScale } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')), ...(maybe(t(il, 'attn_output.bias')) ? { bias: t(il, 'attn_output.bias') } : {}) } });
    p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: need(t(il, 'attn_output_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', res, { a: attnOut, b: x });

    p.op('rms_norm', h, { a: res, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    // GeGLU (ggml_geglu_split), or GELU over up without gate experts.
    softmaxExperts(p, hp, il, need, h, ffnOut, true, 0, maybe(t(il, 'ffn_gate_exps.weight')) ? 4 : 2);
    if (maybe(t(il, 'ffn_up.weight'))) {
      const dense = p.buf('dense_out', hp.nEmbd);
      denseGatedFfn(p, tensors, il, { need, maybe }, h, dense, 'geglu');
      p.op('add', ffnOut, { a: dense, b: ffnOut });
      p.op('scale', ffnOut, { a: ffnOut, params: { scale: Math.SQRT2 / 2 } });
    }
    const post = maybe(t(il, 'layer_output_norm.weight')) ?? need(t(il, 'post_ffw_norm.weight'));
    p.op('rms_norm', ffnOut, { a: ffnOut, weights: { weight: post }, params: { eps: hp.rmsEps } });
    p.op('add', x, { a: ffnOut, b: res });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { scale: logitScale, softcap: finalCap });
}
