import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { ProgramBuilder, ropeParams, yarnAttnFactor } from '../program-builder';
import { mlaBlock, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers, type MlaBlockContext, type MoeBlockOptions } from './deepseek2';
import { readKimiLinear, type KimiLinearDims } from './kimi-linear';
import { SWIGLU_LIMIT_EPS } from './llama-moe';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * A KDA block of Ling 3 on the normed input `h` into `out`, as llama.cpp's bailingmoe3 graph: q, k
 * and v (attn_q/k/v) each through its own causal depthwise convolution (ssm_conv1d_q/k/v, a
 * recurrent state each) and SiLU; the gated delta rule with a gate per key channel and the "safe
 * gate": g = lower_bound * sigmoid((ssm_f_a h + ssm_dt.bias) * ssm_a), ssm_a = exp(A_log) per head
 * (a decay between exp(lower_bound) and 1), beta = sigmoid(ssm_beta h), q and k L2-normalized in
 * the op; each head's output RMS-normed by ssm_norm and times sigmoid(ssm_g_a h), then attn_output.
 * (Kimi-Linear's gate and output gate go through a low-rank pair, f_a/f_b and g_a/g_b; Ling 3 has
 * one full-width projection for each.)
 */
function kdaBlock(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, dims: KimiLinearDims, lowerBound: number, il: number, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const { H, S, dConv } = dims;
  const d = H * S;
  const raw = p.buf(`kda_in${d}`, d);
  const conv = p.buf(`kda_conv${d}`, d);
  const qkv = p.buf(`kda_qkv${3 * d}`, 3 * d);
  ['q', 'k', 'v'].forEach((x, i) => {
    p.op('matmul', raw, { a: h, weights: { weight: need(t(il, `attn_${x}.weight`)) } });
    p.op('ssm_conv', conv, { a: raw, weights: { weight: need(t(il, `ssm_conv1d_${x}.weight`)) }, params: { layer: p.rsLayer((dConv - 1) * d), d_conv: dConv, silu: 1 } });
    p.op('copy', qkv, { a: conv, params: { n: d, out_off: i * d } });
  });
  const alpha = p.buf(`kda_alpha${d}`, d);
  const beta = p.buf(`kda_beta${H}`, H);
  const core = p.buf(`kda_core${d}`, d);
  p.op('matmul', alpha, { a: h, weights: { weight: need(t(il, 'ssm_f_a.weight')) } });
  p.op('matmul', beta, { a: h, weights: { weight: need(t(il, 'ssm_beta.weight')) } });
  p.op('gated_delta_net', core, {
    a: qkv,
    b: alpha,
    c: beta,
    weights: { dt_bias: need(t(il, 'ssm_dt.bias')), a: need(t(il, 'ssm_a')) },
    params: { layer: p.rsLayer(H * S * S), n_k_heads: H, n_v_heads: H, head_dim: S, eps: hp.rmsEps, kda: 1, lower_bound: lowerBound },
  });
  p.op('head_rms_norm', core, { a: core, weights: { weight: need(t(il, 'ssm_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: S, n_head: H } });
  const gate = p.buf(`kda_gate${d}`, d);
  p.op('matmul', gate, { a: h, weights: { weight: need(t(il, 'ssm_g_a.weight')) } });
  p.op('sigmoid_mul', core, { a: core, b: gate, params: { per_element: 1 } });
  p.op('matmul', out, { a: core, weights: { weight: need(t(il, 'attn_output.weight')) } });
}

/**
 * inclusionAI's Ling 3 (`bailingmoe3`, BailingMoeV3: Ling-3.0 7.9B-A1.3B and 124B-A5.1B; llama.cpp
 * src/models/bailingmoe3.cpp): KDA blocks where attention.head_count_kv is 0 (kdaBlock: the
 * lower-bounded "safe" gate kda.gate_lower_bound, one output-gate projection), MLA blocks elsewhere
 * (head_count_kv 1: the latent cache) with RoPE on the shared key part (adjacent pairs), an optional
 * q LoRA, attention scaled by 1 / sqrt(key_length_mla) and a sigmoid gate per head (attn_gate of
 * the normed input) before attn_output. Each block then ffn_norm and a dense SwiGLU FFN (the first
 * leading_dense_block_count blocks) or routed experts (expert_gating_func, a required selection
 * bias exp_probs_b, expert_weights_norm and expert_weights_scale as the file says) plus a shared
 * expert of expert_shared_feed_forward_length (by default expert_feed_forward_length x
 * max(1, expert_shared_count)). Per-block limits swiglu_clamp_exp (experts) and swiglu_clamp_shexp
 * (the shared expert, and a dense block's FFN, as llama.cpp's build_ffn applies them) make the
 * SwiGLU min(silu(gate), L) * clamp(up, -L, L). The head is tied to token_embd without
 * output.weight. The multi-token-prediction block the converter appends (nextn_predict_layers) is
 * left out, as llama.cpp's main graph leaves it.
 */
export function buildBailingMoe3(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (why: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  };
  const n = trunkLayers(hp);
  // As llama.cpp's loader: the MLA sizes (key_length_mla, value_length_mla and kv_lora_rank
  // required, q_lora_rank optional), ssm.conv_kernel and kda.head_dim required.
  for (const k of ['attention.key_length_mla', 'attention.value_length_mla', 'attention.kv_lora_rank'])
    if (!md.has(k)) bad(`the file lacks metadata '${hp.arch}.${k}', which llama.cpp's bailingmoe3 loader requires`);
  const dims = readKimiLinear(hp);
  const qLora = md.int('attention.q_lora_rank', 0, 0, MAX_DIM);
  // The safe gate: kda.safe_gate true by default and asserted, a negative lower bound required.
  if (!md.bool('kda.safe_gate', true)) bad('kda.safe_gate is false; llama.cpp runs only the safe (lower-bounded) KDA gate');
  if (!md.has('kda.gate_lower_bound')) bad(`the file lacks metadata '${hp.arch}.kda.gate_lower_bound', which llama.cpp's bailingmoe3 loader requires`);
  const lowerBound = Math.fround(md.num('kda.gate_lower_bound'));
  if (!(lowerBound < 0) || !Number.isFinite(lowerBound)) bad(`kda.gate_lower_bound ${lowerBound} must be a finite negative number`);
  const nFfExp = md.perLayer('expert_feed_forward_length', hp.nLayer, undefined, 0, MAX_DIM)[0];
  const nShared = md.int('expert_shared_count', undefined, 0, 1 << 16);
  const nFfShexp = md.int('expert_shared_feed_forward_length', 0, 0, MAX_DIM) || nFfExp * Math.max(1, nShared);
  const nDense = md.int('leading_dense_block_count', undefined, 0, MAX_LAYERS);
  // (expert_gating_func is required: llama.cpp's loader reads it without a default.)
  const routing = readMoeRouting(hp, 0);
  // Per block; 0 (or any limit up to llama.cpp's 1e-6) is none.
  const limitExp = md.perLayerNum('swiglu_clamp_exp', hp.nLayer, 0);
  const limitSh = md.perLayerNum('swiglu_clamp_shexp', hp.nLayer, 0);

  // Tensor shapes llama.cpp's loader checks where kail would otherwise size a buffer from the file.
  const dimsOf = (name: string) => {
    const d = tensors.get(need(name))!.dims.slice();
    while (d.length > 2 && d[d.length - 1] === 1) d.pop();
    return d;
  };
  const expectDims = (name: string, want: number[]) => {
    const got = dimsOf(name);
    if (got.length !== want.length || got.some((x, i) => x !== want[i])) bad(`tensor '${name}' is [${got.join(', ')}], expected [${want.join(', ')}]`);
  };
  const E = hp.nEmbd;
  for (let il = 0; il < n; il++) {
    if (hp.nHeadKv[il] > 1) bad(`block ${il} has attention.head_count_kv ${hp.nHeadKv[il]}: MLA blocks cache one latent row (1), KDA blocks none (0)`);
    if (hp.nHeadKv[il] === 1) {
      if (qLora > 0) {
        if (tensors.has(t(il, 'attn_q.weight'))) bad(`block ${il} has attn_q beside attention.q_lora_rank ${qLora}, whose queries come from attn_q_a / attn_q_b`);
        expectDims(t(il, 'attn_q_a.weight'), [E, qLora]);
        need(t(il, 'attn_q_a_norm.weight'));
      } else {
        need(t(il, 'attn_q.weight'));
      }
      need(t(il, 'attn_gate.weight'));
    }
    if (il < nDense) {
      expectDims(t(il, 'ffn_up.weight'), [E, hp.nFf[0]]);
    } else {
      expectDims(t(il, 'ffn_up_exps.weight'), [E, nFfExp, hp.nExpert]);
      for (const x of ['gate', 'up']) expectDims(t(il, `ffn_${x}_shexp.weight`), [E, nFfShexp]);
      expectDims(t(il, 'ffn_down_shexp.weight'), [nFfShexp, E]);
    }
  }

  const moeOptionsAt = (il: number): MoeBlockOptions => ({
    probsBias: 'required',
    shared: 'required',
    ...(limitExp[il] > SWIGLU_LIMIT_EPS ? { moeParams: { act: 6, limit: limitExp[il] } } : {}),
    ...(limitSh[il] > SWIGLU_LIMIT_EPS ? { ffnLimit: limitSh[il] } : {}),
  });
  // The rope of llama.cpp's context: YaRN's attention factor without DeepSeek's log multiplier
  // (this loader does not read it), and no mscale in the attention scale.
  const rope = ropeParams(hp, false, { n_dims: dims.qkRope, attn_factor: yarnAttnFactor(hp, 0) });
  const c: MlaBlockContext = {
    hp,
    tensors,
    dims: { qLora, kvLora: dims.kvLora, qkNope: dims.kHead - dims.qkRope, qkRope: dims.qkRope, vHead: dims.vHead },
    routing,
    nDense,
    kqScale: Math.fround(1 / Math.sqrt(dims.kHead)),
    rope,
    naive: false,
    headGate: true,
    moeOptionsAt,
  };
  const p = new ProgramBuilder();
  const x = p.buf('x', E);
  const h = p.buf('h', E);
  const attnOut = p.buf('attn_out', E);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  for (let il = 0; il < n; il++) {
    if (hp.nHeadKv[il] !== 0) {
      mlaBlock(p, c, il, x);
      continue;
    }
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    kdaBlock(p, hp, tensors, dims, lowerBound, il, h, attnOut);
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', E);
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, il < nDense, moeOptionsAt(il));
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
