import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeFactorTensor, ropeParams, trunkStart, withBias, type ProgramBuilder, type RopeFactorSource } from '../program-builder';
import { hiddenOutput } from './deepseek2';

/** What differs between the members of the Llama family of decoder graphs. */
export interface LlamaFamilyOptions {
  /** NeoX-style RoPE (rotate halves) instead of adjacent pairs. */
  neox: boolean;
  /** Per-head RMS norm on Q and K before RoPE (Qwen3, OLMoE). */
  qkNorm: boolean;
  /** Renormalize the top-k expert weights to sum to 1. */
  normExpertWeights: boolean;
  /** Shared expert with a sigmoid gate (Qwen2-MoE). */
  sharedExpertGate: boolean;
  /** Where the RoPE factors come from (default rope_freqs when present), and the context they may depend on. */
  ropeFactors?: RopeFactorSource;
  nCtxSeq?: number;
}

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * The Llama family: token embedding, per layer RMSNorm → GQA attention with RoPE → residual →
 * RMSNorm → SwiGLU FFN or routed experts (softmax → top-k) → residual; output norm and head
 * (tied to the embedding when output.weight is absent). Covers llama (dense and Mixtral-style
 * MoE), qwen2, qwen2moe, qwen3, qwen3moe and olmoe.
 */
export function buildLlamaFamily(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: LlamaFamilyOptions): ModelProgram {
  const need = (name: string): string => {
    if (!tensors.has(name)) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks tensor '${name}', which the ${hp.arch} architecture requires`);
    return name;
  };
  const maybe = (name: string): string | undefined => (tensors.has(name) ? name : undefined);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const d = hp.nEmbd;
  const rp = ropeParams(hp, opt.neox);
  const ropeFreqs = ropeFactorTensor(hp, tensors, opt.nCtxSeq ?? 0, opt.ropeFactors ?? 'freqs');

  for (let il = 0; il < hp.nLayer; il++) {
    const { H: nHead, Hkv: nHeadKv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hp.headDimK, hp.headDimV);
    const qw = nHead * hp.headDimK;
    const kw = nHeadKv * hp.headDimK;
    const vw = nHeadKv * hp.headDimV;
    if (opt.qkNorm) {
      const qn = need(t(il, 'attn_q_norm.weight'));
      const kn = need(t(il, 'attn_k_norm.weight'));
      // OLMoE normalizes the whole projection; Qwen3 each head.
      const qnDims = tensors.get(qn)!.dims[0];
      if (qnDims === qw) {
        p.op('rms_norm', q, { a: q, weights: { weight: qn }, params: { eps: hp.rmsEps } });
        p.op('rms_norm', k, { a: k, weights: { weight: kn }, params: { eps: hp.rmsEps } });
      } else {
        p.op('head_rms_norm', q, { a: q, weights: { weight: qn }, params: { eps: hp.rmsEps, head_dim: hp.headDimK, n_head: nHead } });
        p.op('head_rms_norm', k, { a: k, weights: { weight: kn }, params: { eps: hp.rmsEps, head_dim: hp.headDimK, n_head: nHeadKv } });
      }
    }
    const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
    p.op('rope', q, { a: q, weights: rw, params: { ...rp, head_dim: hp.headDimK, n_head: nHead } });
    p.op('rope', k, { a: k, weights: rw, params: { ...rp, head_dim: hp.headDimK, n_head: nHeadKv } });
    const layer = p.kvLayer(kw, vw);
    const scale = hp.attentionScale || 1 / Math.sqrt(hp.headDimK);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: nHead, n_head_kv: nHeadKv, head_dim: hp.headDimK, head_dim_v: hp.headDimV, scale } });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
    p.op('add', x, { a: x, b: attnOut });

    // FFN
    const ffnNorm = maybe(t(il, 'ffn_norm.weight')) ?? need(t(il, 'post_attention_norm.weight'));
    p.op('rms_norm', h, { a: x, weights: { weight: ffnNorm }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', d);
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) {
      softmaxExperts(p, hp, il, need, h, ffnOut, opt.normExpertWeights, hp.expertWeightsScale);
      if (opt.sharedExpertGate) gatedSharedExpert(p, tensors, il, need, h, ffnOut);
    } else denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  const ho = hiddenOutput(p, hp, need, x);
  const head = maybe('output.weight') ?? need('token_embd.weight');
  const nVocab = tensors.get(head)!.dims[1];
  const logits = p.buf('logits', nVocab, true);
  // qwen2 files may carry an output bias.
  p.op('matmul', logits, { a: ho, weights: withBias(head, maybe('output.bias')) });
  return p.build(logits);
}

/**
 * Qwen's shared expert (Qwen2-MoE, Qwen3-Next, Qwen3.5): a SwiGLU FFN of `h` times
 * sigmoid(ffn_gate_inp_shexp . h), added to `out`.
 */
export function gatedSharedExpert(p: ProgramBuilder, tensors: Map<string, GgufTensorInfo>, il: number, need: (name: string) => string, h: number, out: number): void {
  const ffS = tensors.get(need(t(il, 'ffn_up_shexp.weight')))!.dims[1];
  const sg = p.buf(`sh_gate${ffS}`, ffS);
  const su = p.buf(`sh_up${ffS}`, ffS);
  const so = p.buf('sh_out', p.width(out));
  const sgate = p.buf('sh_gate_logit', 1);
  p.op('matmul', sg, { a: h, weights: { weight: need(t(il, 'ffn_gate_shexp.weight')) } });
  p.op('matmul', su, { a: h, weights: { weight: need(t(il, 'ffn_up_shexp.weight')) } });
  p.op('swiglu', sg, { a: sg, b: su });
  p.op('matmul', so, { a: sg, weights: { weight: need(t(il, 'ffn_down_shexp.weight')) } });
  p.op('matmul', sgate, { a: h, weights: { weight: need(t(il, 'ffn_gate_inp_shexp.weight')) } });
  p.op('sigmoid_mul', so, { a: so, b: sgate });
  p.op('add', out, { a: out, b: so });
}

/**
 * Routed experts chosen by softmax over the router's logits (top-k, renormalized with `normW`, times
 * `wScale` when not 0 or 1), SwiGLU unless `act` says otherwise (the moe op's act; 2 and 3 have no
 * gate experts).
 */
export function softmaxExperts(p: ProgramBuilder, hp: HParams, il: number, need: (name: string) => string, h: number, out: number, normW: boolean, wScale: number, act = 0): void {
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il} has a router but expert_count/expert_used_count are missing`);
  const gated = act !== 2 && act !== 3;
  p.op('moe', out, {
    a: h,
    weights: {
      gate_inp: need(t(il, 'ffn_gate_inp.weight')),
      ...(gated ? { gate_exps: need(t(il, 'ffn_gate_exps.weight')) } : {}),
      up_exps: need(t(il, 'ffn_up_exps.weight')),
      down_exps: need(t(il, 'ffn_down_exps.weight')),
    },
    params: { n_expert: hp.nExpert, n_expert_used: hp.nExpertUsed, gating: 0, norm_w: normW, w_scale: wScale, moe_layer: p.moeLayer(hp.nExpert), ...(act ? { act } : {}) },
  });
}
