import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { ProgramBuilder, ropeParams, withBias } from '../program-builder';
import { tensorLookup } from './deepseek2';

/** BERT-style encoders (llama.cpp's src/models/bert.cpp): what differs between the members. */
export interface BertOptions {
  /**
   * Learned absolute positions (`position_embd.weight`, BERT); NeoX RoPE (nomic-bert); or ALiBi
   * with a maximum bias of 8, fixed by the loader (jina-bert-v2; no position input at all).
   */
  positions: 'learned' | 'rope' | 'alibi';
  /**
   * FFN: up -> GELU -> down (BERT), SwiGLU over gate and up (nomic-bert), or jina-bert-v2's: with
   * ffn_gate GELU(gate) x up; else an ffn_up of twice ffn_down's inputs, GELU of its first half
   * times its second (GEGLU); else up -> GELU -> down. ffn_up's bias optional, ffn_down's required.
   */
  ffn: 'gelu' | 'swiglu' | 'jina';
}

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** The layer-norm epsilon of an encoder file (`{arch}.attention.layer_norm_epsilon`, required as in llama.cpp). */
export function layerNormEps(hp: HParams): number {
  const eps = hp.meta.num('attention.layer_norm_epsilon');
  if (!(eps >= 0 && eps < 1)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.layer_norm_epsilon ${eps} is not in [0, 1)`);
  return eps;
}

/**
 * An encoder-only embedding model: token (+ type 0) (+ learned position) embeddings, layer norm,
 * then per layer non-causal attention -> residual -> layer norm -> FFN -> residual -> layer norm
 * (post-norm). No output head: the program's hidden rows are the last layer's output, pooled by
 * the engine (mean or CLS, the file's pooling_type); its "logits" are those rows gathered, which
 * nothing samples (an embedding model generates no text).
 */
export function buildBert(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: BertOptions): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const eps = layerNormEps(hp);
  const d = hp.nEmbd;
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key and value heads differ (${hd} / ${hp.headDimV})`);
  const p = new ProgramBuilder();
  const x = p.buf('x', d);
  const attnOut = p.buf('attn_out', d);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  const types = maybe('token_types.weight');
  if (types) p.op('embed', x, { weights: { weight: types }, params: { index: 2, accumulate: true } });
  if (opt.positions === 'learned') p.op('embed', x, { weights: { weight: need('position_embd.weight') }, params: { index: 1, accumulate: true } });
  const norm = (out: number, a: number, name: string) =>
    p.op('layer_norm', out, { a, weights: withBias(need(`${name}.weight`), need(`${name}.bias`)), params: { eps } });
  norm(x, x, 'token_embd_norm');
  const rp = ropeParams(hp, true);
  // nomic-bert-moe: every moe_every_n_layers-th layer (index 1 mod n) routes to experts.
  const moeEvery = hp.meta.int('moe_every_n_layers', 0, 0, 1 << 16);
  // Non-causal whatever `{arch}.attention.causal` says: llama.cpp runs a model without a KV cache
  // through its encode(), which always attends both ways.

  for (let il = 0; il < hp.nLayer; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H % Hkv !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
    const q = p.buf(`q${H * hd}`, H * hd);
    const k = p.buf(`k${Hkv * hd}`, Hkv * hd);
    const v = p.buf(`v${Hkv * hd}`, Hkv * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    const fused = maybe(t(il, 'attn_qkv.weight'));
    if (fused) {
      // One projection into [q | k | v], then each part copied out.
      const qkv = p.buf(`qkv${(H + 2 * Hkv) * hd}`, (H + 2 * Hkv) * hd);
      p.op('matmul', qkv, { a: x, weights: withBias(fused, maybe(t(il, 'attn_qkv.bias'))) });
      p.op('copy', q, { a: qkv, params: { a_off: 0, n: H * hd } });
      p.op('copy', k, { a: qkv, params: { a_off: H * hd, n: Hkv * hd } });
      p.op('copy', v, { a: qkv, params: { a_off: (H + Hkv) * hd, n: Hkv * hd } });
    } else {
      for (const [buf, w] of [[q, 'attn_q'], [k, 'attn_k'], [v, 'attn_v']] as const)
        p.op('matmul', buf, { a: x, weights: withBias(need(t(il, `${w}.weight`)), maybe(t(il, `${w}.bias`))) });
    }
    // jina-bert-v2: optional LayerNorms (weight, optional bias) over the whole q and k projections.
    if (opt.positions === 'alibi')
      for (const [buf, name] of [[q, 'attn_q_norm'], [k, 'attn_k_norm']] as const) {
        const w = maybe(t(il, `${name}.weight`));
        if (w) p.op('layer_norm', buf, { a: buf, weights: withBias(w, maybe(t(il, `${name}.bias`))), params: { eps } });
      }
    if (opt.positions === 'rope') {
      p.op('rope', q, { a: q, params: { ...rp, head_dim: hd, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rp, head_dim: hd, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    const alibi: Record<string, number> = opt.positions === 'alibi' ? { alibi: 8 } : {};
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), causal: false, ...alibi } });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), opt.ffn === 'jina' ? need(t(il, 'attn_output.bias')) : maybe(t(il, 'attn_output.bias'))) });
    // jina-bert-v2's optional attn_norm_2: the layer's input added again, then that LayerNorm.
    const norm2 = opt.ffn === 'jina' ? maybe(t(il, 'attn_norm_2.weight')) : undefined;
    if (norm2) {
      p.op('add', attnOut, { a: attnOut, b: x });
      norm(attnOut, attnOut, t(il, 'attn_output_norm'));
      p.op('add', x, { a: attnOut, b: x });
      p.op('layer_norm', x, { a: x, weights: withBias(norm2, maybe(t(il, 'attn_norm_2.bias'))), params: { eps } });
    } else {
      p.op('add', x, { a: attnOut, b: x });
      norm(x, x, t(il, 'attn_output_norm'));
    }

    const ffnOut = p.buf('ffn_out', d);
    if (moeEvery > 0 && il % moeEvery === 1) {
      // nomic-bert-moe's routed layers: softmax over the experts, top-k, unnormalized and unscaled
      // weights (llama.cpp reads no expert_weights_scale for it);
      // each expert up -> GELU -> down (no gate).
      if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il} has routed experts but expert_count/expert_used_count are missing`);
      p.op('moe', ffnOut, {
        a: x,
        weights: { gate_inp: need(t(il, 'ffn_gate_inp.weight')), up_exps: need(t(il, 'ffn_up_exps.weight')), down_exps: need(t(il, 'ffn_down_exps.weight')) },
        params: { n_expert: hp.nExpert, n_expert_used: hp.nExpertUsed, gating: 0, norm_w: false, act: 2, moe_layer: p.moeLayer(hp.nExpert) },
      });
      p.op('add', x, { a: ffnOut, b: x });
      norm(x, x, t(il, 'layer_output_norm'));
      continue;
    }
    if (opt.ffn === 'jina') {
      jinaFfn(p, tensors, il, { need, maybe }, x, ffnOut);
      p.op('add', x, { a: ffnOut, b: x });
      norm(x, x, t(il, 'layer_output_norm'));
      continue;
    }
    const ff = tensors.get(need(t(il, 'ffn_up.weight')))!.dims[1];
    const u = p.buf(`ffn_up${ff}`, ff);
    p.op('matmul', u, { a: x, weights: withBias(need(t(il, 'ffn_up.weight')), maybe(t(il, 'ffn_up.bias'))) });
    if (opt.ffn === 'gelu') {
      p.op('gelu', u, { a: u });
      p.op('matmul', ffnOut, { a: u, weights: withBias(need(t(il, 'ffn_down.weight')), maybe(t(il, 'ffn_down.bias'))) });
    } else {
      const g = p.buf(`ffn_gate${ff}`, ff);
      p.op('matmul', g, { a: x, weights: { weight: need(t(il, 'ffn_gate.weight')) } });
      p.op('swiglu', g, { a: g, b: u });
      p.op('matmul', ffnOut, { a: g, weights: withBias(need(t(il, 'ffn_down.weight')), maybe(t(il, 'ffn_down.bias'))) });
    }
    p.op('add', x, { a: ffnOut, b: x });
    norm(x, x, t(il, 'layer_output_norm'));
  }
  p.hidden(x);
  const out = p.buf('h_out', d, true);
  p.op('gather_out', out, { a: x });
  return p.build(out);
}

/** jina-bert-v2's FFN of x into out (llama.cpp's bert.cpp: GELU-gated, GEGLU over a fused up, or plain GELU). */
function jinaFfn(p: ProgramBuilder, tensors: Map<string, GgufTensorInfo>, il: number, lk: { need: (n: string) => string; maybe: (n: string) => string | undefined }, x: number, out: number): void {
  const up = lk.need(t(il, 'ffn_up.weight'));
  const down = lk.need(t(il, 'ffn_down.weight'));
  const ffUp = tensors.get(up)!.dims[1];
  const ff = tensors.get(down)!.dims[0];
  const gate = lk.maybe(t(il, 'ffn_gate.weight'));
  if (ffUp !== ff && (gate || ffUp !== 2 * ff))
    throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ffn_up gives ${ffUp} values for ffn_down's ${ff} inputs (${gate ? 'with ffn_gate they must match' : 'they must match, or twice them for GEGLU'})`);
  const u = p.buf(`ffn_up${ffUp}`, ffUp);
  p.op('matmul', u, { a: x, weights: withBias(up, lk.maybe(t(il, 'ffn_up.bias'))) });
  const g = p.buf(`ffn_gate${ff}`, ff);
  if (gate) {
    p.op('matmul', g, { a: x, weights: { weight: gate } });
    p.op('gelu', g, { a: g });
    p.op('mul', g, { a: g, b: u });
  } else if (ffUp === 2 * ff) {
    const u2 = p.buf(`ffn_up2_${ff}`, ff);
    p.op('copy', g, { a: u, params: { a_off: 0, n: ff } });
    p.op('copy', u2, { a: u, params: { a_off: ff, n: ff } });
    p.op('gelu', g, { a: g });
    p.op('mul', g, { a: g, b: u2 });
  } else {
    p.op('gelu', g, { a: u });
  }
  p.op('matmul', out, { a: g, weights: withBias(down, lk.need(t(il, 'ffn_down.bias'))) });
}
