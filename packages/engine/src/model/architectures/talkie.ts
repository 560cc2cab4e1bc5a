import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Talkie (`talkie`, llama.cpp src/models/talkie.cpp; lewtun/talkie-1930-13b): every RMS norm
 * unweighted (eps layer_norm_rms_epsilon). The embedding is normed; that normed embedding is also
 * the skip each block adds times its `layer_output_scale` {1}. Per block: RMSNorm → q/k/v (split
 * or one fused attn_qkv) → NeoX RoPE on q and k → q RMS-normed per head times its head gain
 * attn_q_norm {1, n_head}, k RMS-normed per head (no gain) → attention (scale 1/sqrt(head_dim)) →
 * attn_output → residual; RMSNorm → SwiGLU → residual; + skip × out_scale. The head: unweighted
 * RMSNorm, output.weight (required), times logit_scale (required). Per-tensor `.scale` {1} tensors
 * (llama.cpp's generic pass: attn_q/k/v/qkv/output, ffn_gate/up/down; converted files carry
 * attn_output.scale and ffn_down.scale) multiply their products.
 */
export function buildTalkie(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.dimension_count ${hp.ropeDims} must equal the head dimension ${hd}`);
  const scale = hp.meta.num('logit_scale');
  if (!Number.isFinite(scale)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: logit_scale ${scale} is not a finite number`);
  const eps = hp.rmsEps;
  const d = hp.nEmbd;
  const one = (name: string): string | undefined => {
    const s = maybe(name);
    if (!s) return undefined;
    const info = tensors.get(s)!;
    if (info.dims.reduce((a, b) => a * b, 1) !== 1) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${name} is [${info.dims.join(', ')}], not one value`);
    return s;
  };
  const scaled = (buf: number, name: string) => {
    const s = one(name);
    if (s) p.op('mul', buf, { a: buf, weights: { weight: s } });
  };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  p.op('rms_norm', x, { a: x, params: { eps } });
  const skip = p.buf('embd_skip', d);
  p.op('copy', skip, { a: x });
  const hn = p.buf('attn_in', d);
  const skipOut = p.buf('skip_out', d);
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  for (let il = 0; il < hp.nLayer; il++) {
    p.op('rms_norm', hn, { a: x, params: { eps } });
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x: hn, h }, { need, maybe }, hd, hd, { noNorm: true });
    if (maybe(t(il, 'attn_qkv.weight'))) for (const b of [q, k, v]) scaled(b, t(il, 'attn_qkv.scale'));
    else {
      scaled(q, t(il, 'attn_q.scale'));
      scaled(k, t(il, 'attn_k.scale'));
      scaled(v, t(il, 'attn_v.scale'));
    }
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    // (After RoPE, as the reference: the q head gain {1, n_head} multiplies each normed head.)
    const gain = need(t(il, 'attn_q_norm.weight'));
    const gd = tensors.get(gain)!.dims;
    if (gd[0] !== 1 || gd[1] !== H || gd.slice(2).some((n) => n !== 1))
      throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${gain} is [${gd.join(', ')}], expected [1, ${H}] (one q gain per head)`);
    p.op('head_rms_norm', q, { a: q, weights: { weight: gain }, params: { eps, head_dim: hd, n_head: H, head_gain: 1 } });
    p.op('head_rms_norm', k, { a: k, params: { eps, head_dim: hd, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    scaled(attnOut, t(il, 'attn_output.scale'));
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, params: { eps } });
    const ff = tensors.get(need(t(il, 'ffn_up.weight')))!.dims[1];
    const g = p.buf(`ffn_gate${ff}`, ff);
    const u = p.buf(`ffn_up${ff}`, ff);
    const ffnOut = p.buf('ffn_out', d);
    p.op('matmul', g, { a: h, weights: { weight: need(t(il, 'ffn_gate.weight')) } });
    scaled(g, t(il, 'ffn_gate.scale'));
    p.op('matmul', u, { a: h, weights: { weight: need(t(il, 'ffn_up.weight')) } });
    scaled(u, t(il, 'ffn_up.scale'));
    p.op('swiglu', g, { a: g, b: u });
    p.op('matmul', ffnOut, { a: g, weights: { weight: need(t(il, 'ffn_down.weight')) } });
    scaled(ffnOut, t(il, 'ffn_down.scale'));
    p.op('add', x, { a: x, b: ffnOut });
    const os = one(t(il, 'layer_output_scale.weight'));
    if (!os) need(t(il, 'layer_output_scale.weight'));
    p.op('mul', skipOut, { a: skip, weights: { weight: os! } });
    p.op('add', x, { a: x, b: skipOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  const hid = p.buf('h_norm', d);
  p.op('rms_norm', hid, { a: x, params: { eps } });
  p.hidden(hid);
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: hid });
  const head = need('output.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  p.op('scale', logits, { a: logits, params: { scale } });
  return p.build(logits);
}
