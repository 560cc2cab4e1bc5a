import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { ropeParams, trunkStart } from '../program-builder';
import { layerNormEps } from './bert';
import { outputHead, tensorLookup } from './deepseek2';
import { softmaxExperts } from './llama-family';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Databricks DBRX (`dbrx`, llama.cpp src/models/dbrx.cpp; DBRX 132B, 16 experts top-4).
 *
 * Per block: LayerNorm without bias (`attention.layer_norm_epsilon`) → one fused `attn_qkv`
 * product, clamped to ±`attention.clamp_kqv` (llama.cpp's build_qkv), split into Q|K|V → NeoX
 * RoPE over the whole head → attention scaled by 1/sqrt(head size) → output projection →
 * residual. The residual's LayerNorm `attn_output_norm` feeds the routed SwiGLU experts (softmax,
 * top-k renormalized, unscaled: its loader reads no gating, renormalization or scale keys) →
 * residual. LayerNorm `output_norm`, then the head.
 */
export function buildDbrx(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) bad('expert_count and expert_used_count are required (every block routes)');
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) bad(`rope.dimension_count ${hp.ropeDims} must equal the head size ${hd}`);
  const eps = layerNormEps(hp);
  // (Required by llama.cpp's loader; 0 or less clamps nothing.)
  const clamp = hp.meta.num('attention.clamp_kqv');
  const rope = { ...ropeParams(hp, true), head_dim: hd };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const norm = (out: number, a: number, w: string) => p.op('layer_norm', out, { a, weights: { weight: need(w) }, params: { eps } });
  for (let il = 0; il < hp.nLayer; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H % Hkv !== 0) bad(`layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
    const [wq, wk] = [H * hd, Hkv * hd];
    const qkv = p.buf(`qkv${wq + 2 * wk}`, wq + 2 * wk);
    const q = p.buf(`q${wq}`, wq);
    const k = p.buf(`k${wk}`, wk);
    const v = p.buf(`v${wk}`, wk);
    const attn = p.buf(`attn${wq}`, wq);
    norm(h, x, t(il, 'attn_norm.weight'));
    p.op('matmul', qkv, { a: h, weights: { weight: need(t(il, 'attn_qkv.weight')) } });
    if (clamp > 0) p.op('clamp', qkv, { a: qkv, params: { limit: clamp } });
    p.op('copy', q, { a: qkv, params: { a_off: 0, n: wq } });
    p.op('copy', k, { a: qkv, params: { a_off: wq, n: wk } });
    p.op('copy', v, { a: qkv, params: { a_off: wq + wk, n: wk } });
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(wk, wk);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: attnOut, b: x });

    norm(h, x, t(il, 'attn_output_norm.weight'));
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    softmaxExperts(p, hp, il, need, h, ffnOut, true, 0);
    p.op('add', x, { a: ffnOut, b: x });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { untied: true, layerNorm: eps });
}
