import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { ProgramBuilder, qkvProjections, ropeFactorTensor, ropeParams, withBias } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * DeciLM / Llama-3.1-Nemotron-51B and -Ultra-253B (`deci`, llama.cpp src/models/deci.cpp): Llama
 * blocks of their own shape, from the per-block arrays attention.head_count, head_count_kv and
 * feed_forward_length:
 *
 * - head_count 0: no attention (the block's FFN reads the stream itself);
 * - head_count > 0 and head_count_kv 0: attention replaced by a linear map, attn_output of the
 *   normed stream (no bias: llama.cpp's graph adds none there), added to the stream;
 * - otherwise GQA with its own KV heads (q/k/v and attn_output biases when the file has them), RoPE
 *   over adjacent pairs with rope_freqs (or LongRoPE's tables when rope.scaling.type is longrope),
 *   the attention scaled by 1/sqrt(head);
 * - feed_forward_length 0: no FFN; otherwise a SwiGLU FFN of that width, biases when present.
 *
 * llama.cpp skips a block without FFN entirely (its graph `continue`s before the stream takes the
 * attention's output, so the attention of Nemotron-Ultra's FFN-free blocks is lost). kail keeps
 * it, as the model (HF DeciLM's decoder layer) adds it; tools/src/parity checks such a block by
 * equivalence with an FFN whose ffn_down is zero.
 */
export function buildDeci(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const lookup = tensorLookup(hp, tensors);
  const { need, maybe } = lookup;
  const hd = hp.headDimK;
  const attends = hp.nHead.some((h, il) => h > 0 && hp.nHeadKv[il] > 0);
  // llama.cpp's graph asserts one head size for K, V and the rotation.
  if (attends && (hp.headDimV !== hd || hp.ropeDims !== hd))
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd}, value_length ${hp.headDimV} and rope.dimension_count ${hp.ropeDims} must be equal`);
  const factors = ropeFactorTensor(hp, tensors, nCtxSeq, 'typed');
  const rw = factors ? { weights: { freq_factors: factors } } : {};
  const rope = { ...ropeParams(hp, false), head_dim: hd };
  // (deci's loader does not read attention.scale: its graph's f_attention_scale is always 0.)
  const scale = 1 / Math.sqrt(hd);
  const d = hp.nEmbd;
  const p = new ProgramBuilder();
  const x = p.buf('x', d);
  const h = p.buf('h', d);
  const attnOut = p.buf('attn_out', d);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  for (let il = 0; il < hp.nLayer; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H > 0 && Hkv === 0) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      const wo = need(t(il, 'attn_output.weight'));
      const [wIn, wOut] = tensors.get(wo)!.dims;
      if (wIn !== d || wOut !== d) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il}'s linear attention '${wo}' is [${wIn}, ${wOut}], not [${d}, ${d}]`);
      p.op('matmul', attnOut, { a: h, weights: { weight: wo } });
      p.op('add', x, { a: x, b: attnOut });
    } else if (H > 0) {
      const { q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, lookup, hd, hd);
      p.op('rope', q, { a: q, ...rw, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, ...rw, params: { ...rope, n_head: Hkv } });
      const layer = p.kvLayer(Hkv * hd, Hkv * hd);
      p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale } });
      p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
      p.op('add', x, { a: x, b: attnOut });
    }
    const ff = hp.nFf[il];
    if (ff > 0) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
      const g = p.buf(`ffn_gate${ff}`, ff);
      const u = p.buf(`ffn_up${ff}`, ff);
      const ffnOut = p.buf('ffn_out', d);
      const w = (name: string) => withBias(need(t(il, `${name}.weight`)), maybe(t(il, `${name}.bias`)));
      p.op('matmul', g, { a: h, weights: w('ffn_gate') });
      p.op('matmul', u, { a: h, weights: w('ffn_up') });
      p.op('swiglu', g, { a: g, b: u });
      p.op('matmul', ffnOut, { a: g, weights: w('ffn_down') });
      p.op('add', x, { a: x, b: ffnOut });
    }
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
