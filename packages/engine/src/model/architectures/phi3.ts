import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { qkvProjections, ropeFactorTensor, ropeParams, trunkStart, withBias } from '../program-builder';
import { hiddenOutput, moeBlockFfn, readMoeRouting, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Phi-3 / Phi-3.5 / Phi-4 (`phi3`) and Phi-3.5-MoE (`phimoe`), one graph as llama.cpp's
 * src/models/phi3.cpp builds both: RMSNorm → GQA attention (a fused attn_qkv or separate q/k/v)
 * with NeoX RoPE → residual → RMSNorm → FFN → residual; output norm and head.
 *
 * - RoPE takes LongRoPE's factor tables, rope_factors_long when the context per sequence is longer
 *   than rope.scaling.original_context_length and rope_factors_short otherwise (the 128k files;
 *   4k files have neither), and rope.scaling.attn_factor scales the rotated values.
 * - phi3's FFN is one ffn_up of twice feed_forward_length: SiLU of its first half times its second.
 * - phimoe routes to experts (softmax, top-k renormalized; the loader reads no scale). Its norms,
 *   attention output and head carry biases, added after the RMS norm as llama.cpp does (the HF
 *   model has LayerNorms there: kail follows llama.cpp, which converts them unchanged).
 * - attention.sliding_window is read but not applied: llama.cpp turns Phi's SWA off.
 */
export function buildPhi3(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const moe = hp.arch === 'phimoe';
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd} and value_length ${hp.headDimV} must match`);
  const routing = moe ? readMoeRouting(hp, 1, { gating: 1, normW: true, wScale: 0 }) : undefined;
  const factors = ropeFactorTensor(hp, tensors, nCtxSeq, 'longrope');
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const rw = factors ? { freq_factors: factors } : undefined;
  const bias = (name: string) => (moe ? need(name) : undefined);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd, { normBias: moe });
    p.op('rope', q, { a: q, weights: rw, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, weights: rw, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), bias(t(il, 'attn_output.bias'))) });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: withBias(need(t(il, 'ffn_norm.weight')), bias(t(il, 'ffn_norm.bias'))), params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (routing) moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'none', shared: 'none' });
    else {
      // ffn_up [n_embd, 2 ff]: llama.cpp's LLM_FFN_SWIGLU on one tensor splits it in halves.
      const up = need(t(il, 'ffn_up.weight'));
      const ff2 = tensors.get(up)!.dims[1];
      if (ff2 % 2 !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: '${up}' has ${ff2} outputs; the fused gate and up need an even number`);
      const ff = ff2 / 2;
      const u = p.buf(`ffn_up${ff2}`, ff2);
      const g = p.buf(`ffn_gate${ff}`, ff);
      p.op('matmul', u, { a: h, weights: { weight: up } });
      p.op('swiglu', g, { a: u, b: u, params: { a_off: 0, b_off: ff, n: ff } });
      p.op('matmul', ffnOut, { a: g, weights: { weight: need(t(il, 'ffn_down.weight')) } });
    }
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  const hid = hiddenOutput(p, hp, need, x, moe ? need('output_norm.bias') : undefined);
  const head = moe ? need('output.weight') : (maybe('output.weight') ?? need('token_embd.weight'));
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: hid, weights: withBias(head, bias('output.bias')) });
  return p.build(logits);
}
