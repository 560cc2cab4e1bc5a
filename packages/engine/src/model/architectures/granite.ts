import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeFactorTensor, ropeParams, trunkStart, withBias } from '../program-builder';
import { hiddenOutput, moeBlockFfn, readMoeRouting, tensorLookup } from './deepseek2';
import { mamba2Mixer, readMamba2Dims } from './mamba2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** A positive finite scale from the file, or `def` when the key is absent. */
function scaleKey(hp: HParams, key: string, def: number | undefined): number {
  const v = hp.meta.num(key, def);
  if (!Number.isFinite(v) || v < 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${key} ${v} is not a non-negative finite number`);
  return v;
}

/**
 * IBM Granite 3.x (`granite`, dense) and Granite MoE (`granitemoe`, with or without a shared
 * expert), llama.cpp's src/models/granite.cpp: the Llama graph with Granite's multipliers: the
 * token embedding times `embedding_scale`, attention scaled by `attention.scale`, each block's
 * attention and FFN outputs times `residual_scale` before their residual adds, and the logits
 * divided by `logit_scale`. Routed blocks: softmax top-k renormalized, plus an ungated shared
 * expert when `expert_shared_feed_forward_length` is set. Dense Granite rotates only when
 * `rope.scaling.finetuned` is not false (llama.cpp's switch for it).
 *
 * Granite 4.0-H (`granitehybrid`, src/models/granite-hybrid.cpp) is the same with Mamba-2 mixers in
 * the blocks without KV heads, and rotates only when `rope.scaling.finetuned` is not false (its
 * converter writes false for the hybrids, which then use no positional encoding).
 */
export function buildGranite(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const logitScale = scaleKey(hp, 'logit_scale', undefined);
  if (logitScale === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: logit_scale must not be 0`);
  const residualScale = scaleKey(hp, 'residual_scale', 0);
  const embeddingScale = scaleKey(hp, 'embedding_scale', 0);
  if (hp.meta.has('deepstack_mapping')) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: Granite Vision's deepstack_mapping is not supported`);
  const useRope = hp.arch === 'granitemoe' || hp.meta.bool('rope.scaling.finetuned', true);
  const mamba = hp.arch === 'granitehybrid' ? readMamba2Dims(hp) : undefined;
  const hd = hp.headDimK;
  if (hp.headDimV !== hd || hp.ropeDims !== hd)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd}, value_length ${hp.headDimV} and rope.dimension_count ${hp.ropeDims} must match`);
  // Softmax, renormalized; its loader reads no expert_weights_scale.
  const routing = readMoeRouting(hp, 1, { gating: 1, normW: true, wScale: 0 });
  const shared = hp.meta.int('expert_shared_feed_forward_length', 0, 0, MAX_DIM) > 0 ? 'required' : 'none';
  const ropeFreqs = ropeFactorTensor(hp, tensors, nCtxSeq, 'typed');
  const rope = { ...ropeParams(hp, false), head_dim: hd };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  if (embeddingScale !== 0) p.op('scale', x, { a: x, params: { scale: embeddingScale } });
  const residual = (buf: number) => {
    if (residualScale !== 0) p.op('scale', buf, { a: buf, params: { scale: residualScale } });
    p.op('add', x, { a: x, b: buf });
  };
  const ffn = (il: number) => {
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'none', shared });
    else denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    residual(ffnOut);
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  };
  for (let il = 0; il < hp.nLayer; il++) {
    if (mamba && hp.nHeadKv[il] === 0) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      mamba2Mixer(p, hp, tensors, il, mamba, h, attnOut);
      residual(attnOut);
      ffn(il);
      continue;
    }
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    if (useRope) {
      const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
      p.op('rope', q, { a: q, weights: rw, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, weights: rw, params: { ...rope, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: hp.attentionScale || 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
    residual(attnOut);
    ffn(il);
  }
  const ho = hiddenOutput(p, hp, need, x);
  const head = maybe('output.weight') ?? need('token_embd.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  // ggml_scale(logits, 1.0f / f_logit_scale): the reciprocal in float.
  p.op('scale', logits, { a: logits, params: { scale: Math.fround(1 / Math.fround(logitScale)) } });
  return p.build(logits);
}
