import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { GATING_SIGMOID, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers } from './deepseek2';
import { requiredSlidingWindowPattern } from './gpt-oss';
import { SWIGLU_LIMIT_EPS } from './llama-moe';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * StepFun Step 3.5 (`step35`, llama.cpp src/models/step35.cpp; Step-3.5-Flash, 196B-A11B).
 *
 * Sliding-window blocks (`attention.sliding_window_pattern`, one flag per block; window
 * `attention.sliding_window`) and full blocks, each with its own head counts (per-block
 * `head_count` / `head_count_kv`) and one head size. RMSNorm → Q/K/V → optional per-head q/k RMS
 * norms → NeoX RoPE: sliding blocks rotate `rope.dimension_count_swa` dimensions (all of
 * `rope.dimension_count` by default) with base `rope.freq_base_swa` (10000 when absent) and scale
 * 1; full blocks rotate half of `rope.dimension_count` with the file's base and scale and the
 * `rope_freqs` factors when the file has them → attention scaled by 1/sqrt(head size) → each
 * head's output times sigmoid(attn_gate · normed input) when the block has `attn_gate` → output
 * projection → residual. RMSNorm → a dense SwiGLU FFN on blocks without a router, else routed
 * SwiGLU experts (sigmoid by default, optional selection bias exp_probs_b, renormalization, scale
 * and expert groups from the file, as llama.cpp reads them) plus a shared SwiGLU expert → residual. Per-block limits
 * `swiglu_clamp_exp` (experts) and `swiglu_clamp_shexp` (the dense and shared FFNs) make the
 * SwiGLU min(silu(gate), L) * clamp(up, -L, L). The multi-token-prediction blocks a file may append
 * (`nextn_predict_layers`) are left out, as llama.cpp's main graph leaves them.
 */
export function buildStep35(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  // (llama.cpp's loader requires the pattern as an array and the window.)
  const swa = requiredSlidingWindowPattern(hp);
  const window = md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const hdK = hp.headDimK;
  const hdV = hp.headDimV;
  // The graph reshapes every block's projections with the one key and value size.
  for (const [key, want] of [['attention.key_length_swa', hdK], ['attention.value_length_swa', hdV]] as const) {
    const v = md.int(key, want, 1, MAX_DIM);
    if (v !== want) bad(`${key} ${v} differs from the full blocks' ${want}: every block has one head size here`);
  }
  const rotFull = Math.floor(hp.ropeDims / 2);
  if (rotFull % 2 !== 0) bad(`rope.dimension_count ${hp.ropeDims}: full-attention blocks rotate half of it, ${rotFull}, which must be even`);
  const rotSwa = md.int('rope.dimension_count_swa', hp.ropeDims, 0, hdK);
  if (rotSwa % 2 !== 0) bad(`rope.dimension_count_swa ${rotSwa} is not an even number of dimensions`);
  const baseSwa = md.num('rope.freq_base_swa', 10000);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const nL = trunkLayers(hp);
  const limitExp = md.perLayerNum('swiglu_clamp_exp', hp.nLayer, 0, 0);
  const limitSh = md.perLayerNum('swiglu_clamp_shexp', hp.nLayer, 0, 0);
  const routing = readMoeRouting(hp, GATING_SIGMOID);
  const freqs = maybe('rope_freqs.weight');
  const ropeFull = { ...ropeParams(hp, true, { n_dims: rotFull }), head_dim: hdK };
  const ropeSwa = { ...ropeParams(hp, true, { n_dims: rotSwa }), head_dim: hdK, freq_base: baseSwa, freq_scale: 1 };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < nL; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hdK, hdV);
    const qn = maybe(t(il, 'attn_q_norm.weight'));
    const kn = maybe(t(il, 'attn_k_norm.weight'));
    if (qn) p.op('head_rms_norm', q, { a: q, weights: { weight: qn }, params: { eps: hp.rmsEps, head_dim: hdK, n_head: H } });
    if (kn) p.op('head_rms_norm', k, { a: k, weights: { weight: kn }, params: { eps: hp.rmsEps, head_dim: hdK, n_head: Hkv } });
    const rope = swa[il] ? ropeSwa : ropeFull;
    const rw = !swa[il] && freqs ? { freq_factors: freqs } : undefined;
    p.op('rope', q, { a: q, weights: rw, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, weights: rw, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hdK, Hkv * hdV);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hdK, head_dim_v: hdV, scale: 1 / Math.sqrt(hdK), ...(swa[il] ? { window } : {}) },
    });
    const gateW = maybe(t(il, 'attn_gate.weight'));
    if (gateW) {
      const gate = p.buf(`attn_gate${H}`, H);
      p.op('matmul', gate, { a: h, weights: { weight: gateW } });
      p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { group: hdV } });
    }
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    const dense = !tensors.has(t(il, 'ffn_gate_inp.weight'));
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, dense, {
      probsBias: 'optional',
      shared: 'required',
      ...(limitExp[il] > SWIGLU_LIMIT_EPS ? { moeParams: { act: 6, limit: limitExp[il] } } : {}),
      ...(limitSh[il] > SWIGLU_LIMIT_EPS ? { ffnLimit: limitSh[il] } : {}),
    });
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { untied: true });
}
