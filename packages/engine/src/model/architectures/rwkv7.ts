import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { denseGatedFfn, trunkStart, withBias } from '../program-builder';
import { hiddenOutput, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** RWKV-7's decay scale: w = exp(-0.606531 sigmoid(w0 + w2 tanh(w1 x))) (llama.cpp's rwkv7-base.cpp). */
const RWKV7_DECAY = 0.606531;
/** The group norm's epsilon after the WKV (llama.cpp's 64e-5). */
const RWKV7_GROUP_NORM_EPS = 64e-5;

/**
 * RWKV-7 "Goose" (`rwkv7`; llama.cpp src/models/rwkv7-base.cpp and rwkv7.cpp): the embedding through
 * LN0 (token_embd_norm), then per block a time mix (LayerNorm, token shift, six lerps of the fused
 * lerp weight, r/k/v and the LoRA decay w, in-context learning rate a, gate g and, from block 1,
 * the value residual mix with block 0's v; the WKV-7 recurrence on r|w|k|v|-kk|kk*a, a group norm
 * per head, the r.k bonus, the gate, time_mix_output) and a channel mix (LayerNorm, token shift,
 * one lerp, relu^2 FFN); a LayerNorm with bias and the head. State per sequence: the two token
 * shifts (n_embd each) and the WKV state (n_head x head_size^2) of each block.
 *
 * ARWKV-7 (`arwkv7`; arwkv7.cpp, RWKV-7 time mixes distilled into Qwen2.5): no LN0; RMS norms
 * without bias; the time mix's gate (g1/g2, the sixth lerp) and group norm (time_mix_ln) only where
 * the file has them; one token shift (token_shift_count 1) and a SwiGLU FFN after ffn_norm.
 */
/**
 * What RWKV-6 and RWKV-7 builders share: the WKV head size and count, the block norm's epsilon
 * (LayerNorm: layer_norm_epsilon; RMS: layer_norm_rms_epsilon), the token_shift_count check, the
 * per-channel vector check, the block norms, x_prev - x, and the trunk with the token-shift buffers.
 */
function rwkvStart(hp: HParams, tensors: Map<string, GgufTensorInfo>, rms: boolean, nShift: number) {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  const C = hp.nEmbd;
  const D = md.int('wkv.head_size', undefined, 1, MAX_DIM);
  if (C % D !== 0) throw bad(`wkv.head_size ${D} does not divide embedding_length ${C}`);
  const H = C / D;
  const shifts = md.int('token_shift_count', 2, 0, 16);
  if (shifts !== nShift) throw bad(`token_shift_count ${shifts} is not ${nShift} (${nShift === 1 ? 'the time mix\'s shift' : 'one shift for the time mix, one for the channel mix'})`);
  const epsKey = rms ? 'attention.layer_norm_rms_epsilon' : 'attention.layer_norm_epsilon';
  const eps = rms ? hp.rmsEps : md.num(epsKey, 1e-5);
  if (!(eps >= 0 && eps < 1)) throw bad(`${epsKey} ${eps} is not in [0, 1)`);
  // A per-channel vector (n lerp rows of n_embd for the fused lerp): [n_embd, 1, ..., n] as the
  // converter writes it; llama.cpp refuses other shapes, and the slices read would be wrong.
  const vec = (name: string, n = 1): string => {
    const d = tensors.get(need(name))!.dims;
    const want = [C, ...Array(Math.max(0, d.length - 2)).fill(1), ...(d.length > 1 ? [n] : [])];
    if (d[0] !== C || d.reduce((a, b) => a * b, 1) !== n * C || d.some((v, i) => v !== want[i]))
      throw bad(`tensor '${name}' is [${d.join(', ')}], expected ${n > 1 ? `[${C}, 1, 1, ${n}]` : `${C} values`}`);
    return name;
  };
  const { p, x, h } = trunkStart(hp, need('token_embd.weight'));
  const lnW = (name: string) => withBias(need(`${name}.weight`), need(`${name}.bias`));
  // The block norms: LayerNorms with bias, or RMS norms.
  const blockNorm = (out: number, name: string) =>
    rms ? p.op('rms_norm', out, { a: x, weights: { weight: need(`${name}.weight`) }, params: { eps } }) : p.op('layer_norm', out, { a: x, weights: lnW(name), params: { eps } });
  const xprev = p.buf('rwkv_xprev', C);
  const neg = p.buf('rwkv_neg', C);
  const sx = p.buf('rwkv_sx', C);
  // x_prev - x as x_prev + (-x): the same float.
  const diff = (out: number, prev: number, cur: number) => {
    p.op('scale', neg, { a: cur, params: { scale: -1 } });
    p.op('add', out, { a: prev, b: neg });
  };
  // The token shift of the block norm's output h into sx = x_prev - h.
  const shift = () => {
    p.op('token_shift', xprev, { a: h, params: { layer: p.rsLayer(C) } });
    diff(sx, xprev, h);
  };
  // ARWKV-7's and QRWKV6's block end: ffn_norm (RMS) and a SwiGLU FFN (through `tmp`) added to x.
  const swigluFfn = (il: number, tmp: number) => {
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps } });
    denseGatedFfn(p, tensors, il, { need, maybe }, h, tmp);
    p.op('add', x, { a: tmp, b: x });
    p.op('cvec', x, { a: x, params: { layer: il } });
  };
  return { need, maybe, md, bad, C, D, H, eps, vec, p, x, h, lnW, blockNorm, xprev, sx, diff, shift, swigluFfn };
}

export function buildRwkv7(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const arwkv = hp.arch === 'arwkv7';
  // llama.cpp asserts two token shifts for rwkv7 (the time mix's and the channel mix's), one for arwkv7.
  const { need, maybe, md, bad, C, D, H, eps, vec, p, x, h, lnW, blockNorm, xprev, sx, diff, swigluFfn } = rwkvStart(hp, tensors, arwkv, arwkv ? 1 : 2);
  // The LoRA ranks size the tensors llama.cpp creates; the tensors' own shapes are checked by the loader.
  for (const k of ['attention.decay_lora_rank', 'attention.iclr_lora_rank', 'attention.value_residual_mix_lora_rank']) md.int(k, undefined, 1, MAX_DIM);

  // Block 0's v0/v1/v2 are the converter's dummies (never read), but llama.cpp's loader requires them.
  for (const n of ['v0', 'v1', 'v2']) need(t(0, `time_mix_${n}.weight`));
  if (!arwkv) p.op('layer_norm', x, { a: x, weights: lnW('token_embd_norm'), params: { eps } });

  const xxx = p.buf(`rwkv_lerp${6 * C}`, 6 * C);
  const r = p.buf('rwkv_r', C);
  const w = p.buf('rwkv_w', C);
  const k = p.buf('rwkv_k', C);
  const v = p.buf('rwkv_v', C);
  const vFirst = p.buf('rwkv_v_first', C);
  const a = p.buf('rwkv_a', C);
  const g = p.buf('rwkv_g', C);
  const kk = p.buf('rwkv_kk', C);
  const ka = p.buf('rwkv_ka', C);
  const tmp = p.buf('rwkv_tmp', C);
  const wkvIn = p.buf(`rwkv_wkv_in${6 * C}`, 6 * C);
  const o = p.buf('rwkv_o', C);
  const attnOut = p.buf('attn_out', C);
  const lora = (il: number, n: string, input: number, inOff: number) => {
    const w1 = need(t(il, `time_mix_${n}1.weight`));
    const rank = tensors.get(w1)!.dims[1];
    const lo = p.buf(`rwkv_lora_${n}${rank}`, rank);
    p.op('matmul', lo, { a: input, weights: { weight: w1 }, params: { a_off: inOff, n_in: C } });
    return lo;
  };
  for (let il = 0; il < hp.nLayer; il++) {
    // Time mix.
    blockNorm(h, t(il, 'attn_norm'));
    p.op('token_shift', xprev, { a: h, params: { layer: p.rsLayer(C) } });
    diff(sx, xprev, h);
    // rwkv7: the gate and six lerps always; arwkv7: the gate where g1 and g2 are (llama.cpp's
    // has_gating), five lerps or six (the sixth the gate's).
    const gated = !arwkv || (tensors.has(t(il, 'time_mix_g1.weight')) && tensors.has(t(il, 'time_mix_g2.weight')));
    const lerpName = t(il, 'time_mix_lerp_fused.weight');
    const nLerp = arwkv && tensors.get(need(lerpName))!.dims.at(-1) === 5 ? 5 : 6;
    if (gated && nLerp < 6) throw bad(`block ${il} has a gate (time_mix_g1, time_mix_g2) but five lerps (${lerpName}), none for it`);
    const lerp = vec(lerpName, nLerp);
    for (let i = 0; i < nLerp; i++) {
      p.op('mul', xxx, { a: sx, weights: { weight: lerp }, params: { w_off: i * C, out_off: i * C, n: C } });
      p.op('add', xxx, { a: xxx, b: h, params: { a_off: i * C, out_off: i * C, n: C } });
    }
    p.op('matmul', r, { a: xxx, weights: { weight: need(t(il, 'time_mix_receptance.weight')) }, params: { a_off: 0, n_in: C } });
    // w = exp(-0.606531 sigmoid(w0 + w2 tanh(w1 xw))).
    const lw = lora(il, 'w', xxx, C);
    p.op('softcap', lw, { a: lw, params: { cap: 1 } });
    p.op('matmul', w, { a: lw, weights: { weight: need(t(il, 'time_mix_w2.weight')), bias: vec(t(il, 'time_mix_w0.weight')) } });
    p.op('sigmoid', w, { a: w, params: { decay: RWKV7_DECAY } });
    p.op('matmul', k, { a: xxx, weights: { weight: need(t(il, 'time_mix_key.weight')) }, params: { a_off: 2 * C, n_in: C } });
    p.op('matmul', v, { a: xxx, weights: { weight: need(t(il, 'time_mix_value.weight')) }, params: { a_off: 3 * C, n_in: C } });
    if (il === 0) p.op('copy', vFirst, { a: v });
    else {
      // v += (v_first - v) sigmoid(v0 + v2 v1 xv).
      const lv = lora(il, 'v', xxx, 3 * C);
      p.op('matmul', tmp, { a: lv, weights: { weight: need(t(il, 'time_mix_v2.weight')), bias: vec(t(il, 'time_mix_v0.weight')) } });
      diff(ka, vFirst, v);
      p.op('sigmoid_mul', ka, { a: ka, b: tmp, params: { per_element: 1 } });
      p.op('add', v, { a: v, b: ka });
    }
    if (gated) {
      const lg = lora(il, 'g', xxx, 5 * C);
      p.op('sigmoid', lg, { a: lg });
      p.op('matmul', g, { a: lg, weights: { weight: need(t(il, 'time_mix_g2.weight')) } });
    }
    const la = lora(il, 'a', xxx, 4 * C);
    p.op('matmul', a, { a: la, weights: { weight: need(t(il, 'time_mix_a2.weight')), bias: vec(t(il, 'time_mix_a0.weight')) } });
    p.op('sigmoid', a, { a });
    // kk = l2_norm(k k_k) per head; k += a (k k_a) - k k_a.
    p.op('mul', kk, { a: k, weights: { weight: vec(t(il, 'time_mix_k_k.weight')) } });
    p.op('head_rms_norm', kk, { a: kk, params: { l2: 1, eps: 1e-12, head_dim: D, n_head: H } });
    p.op('mul', ka, { a: k, weights: { weight: vec(t(il, 'time_mix_k_a.weight')) } });
    p.op('mul', tmp, { a, b: ka });
    diff(tmp, tmp, ka);
    p.op('add', k, { a: k, b: tmp });
    // The WKV input r|w|k|v|-kk|kk*a.
    [r, w, k, v].forEach((src, i) => p.op('copy', wkvIn, { a: src, params: { out_off: i * C, n: C } }));
    p.op('scale', wkvIn, { a: kk, params: { scale: -1, out_off: 4 * C, n: C } });
    p.op('mul', wkvIn, { a: kk, b: a, params: { out_off: 5 * C, n: C } });
    p.op('rwkv_wkv7', o, { a: wkvIn, params: { layer: p.rsLayer(H * D * D), n_head: H, head_dim: D } });
    // The group norm (rwkv7 requires it; arwkv7 where the file has weight and bias).
    if (!arwkv || (maybe(t(il, 'time_mix_ln.weight')) && maybe(t(il, 'time_mix_ln.bias'))))
      p.op('head_rms_norm', o, { a: o, weights: withBias(vec(t(il, 'time_mix_ln.weight')), vec(t(il, 'time_mix_ln.bias'))), params: { layer_norm: 1, eps: RWKV7_GROUP_NORM_EPS, head_dim: D, n_head: H } });
    // + v sum_head(k r r_k).
    p.op('mul', tmp, { a: k, b: r });
    p.op('mul', tmp, { a: tmp, weights: { weight: vec(t(il, 'time_mix_r_k.weight')) } });
    p.op('head_sum_mul', ka, { a: tmp, b: v, params: { head_dim: D, n_head: H } });
    p.op('add', o, { a: o, b: ka });
    if (gated) p.op('mul', o, { a: o, b: g });
    p.op('matmul', attnOut, { a: o, weights: { weight: need(t(il, 'time_mix_output.weight')) } });
    p.op('add', x, { a: attnOut, b: x });
    if (arwkv) {
      swigluFfn(il, attnOut);
      continue;
    }
    // Channel mix.
    blockNorm(h, t(il, 'attn_norm_2'));
    p.op('token_shift', xprev, { a: h, params: { layer: p.rsLayer(C) } });
    diff(sx, xprev, h);
    p.op('mul', sx, { a: sx, weights: { weight: vec(t(il, 'channel_mix_lerp_k.weight')) } });
    p.op('add', sx, { a: sx, b: h });
    const ck = need(t(il, 'channel_mix_key.weight'));
    const kf = p.buf(`rwkv_ffn${tensors.get(ck)!.dims[1]}`, tensors.get(ck)!.dims[1]);
    p.op('matmul', kf, { a: sx, weights: { weight: ck } });
    p.op('relu_sqr', kf, { a: kf });
    p.op('matmul', attnOut, { a: kf, weights: { weight: need(t(il, 'channel_mix_value.weight')) } });
    p.op('add', x, { a: attnOut, b: x });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  const ho = arwkv ? hiddenOutput(p, hp, need, x) : hiddenOutput(p, hp, need, x, need('output_norm.bias'), 'output_norm.weight', eps);
  const head = need('output.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}

/**
 * RWKV-6 "Finch" (`rwkv6`; llama.cpp src/models/rwkv6-base.cpp and rwkv6.cpp): the embedding through
 * LN0, then per block a time mix (LayerNorm, token shift; the data-dependent lerp: x + sx lerp_x
 * through the time_mix_w1 LoRA (tanh, five slices of time_mix_extra_dim) and time_mix_w2's five
 * slices, plus the fused lerp, give x + sx m_i for w, k, v, r, g; r/k/v; the decay LoRA
 * w = exp(-exp(decay + w2 tanh(w1 xw))); the WKV-6 recurrence with time_first u; a group norm per
 * head; SiLU(g) gate; time_mix_output) and a channel mix (LayerNorm, token shift, lerps k and r,
 * sigmoid(receptance xr) * value(relu(key xk)^2)); every rescale_every_n_layers blocks the residual
 * is halved; a LayerNorm with bias and the head. State per sequence: two token shifts (n_embd each)
 * and the WKV state (n_head x head_size^2) of each block.
 *
 * RWKV-6-Qwen2 (`rwkv6qwen2`; rwkv6qwen2.cpp, QRWKV6: RWKV-6 time mixes in Qwen2.5): no LN0; RMS
 * norms; one token shift; k and v of head_count_kv heads (each shared by n_head / head_count_kv WKV
 * heads, as ggml_repeat lays them out), optional r/k/v biases; without time_first the WKV is
 * ggml_gated_linear_attn (k (1 - w), scale head_size^-0.5, no group norm, a sigmoid gate); a SwiGLU
 * FFN after ffn_norm; no rescaling.
 */
export function buildRwkv6(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const qwen2 = hp.arch === 'rwkv6qwen2';
  const { need, maybe, md, bad, C, D, H, eps, vec, p, x, h, lnW, blockNorm, sx, shift, swigluFfn } = rwkvStart(hp, tensors, qwen2, qwen2 ? 1 : 2);
  const extra = md.int('time_mix_extra_dim', undefined, 1, MAX_DIM);
  const decayExtra = md.int('time_decay_extra_dim', undefined, 1, MAX_DIM);
  // (rwkv6qwen2's graph reads no rescale_every_n_layers.)
  const rescale = qwen2 ? 0 : md.int('rescale_every_n_layers', 0, 0, 1 << 30);
  // Shapes the vec() check does not cover (the matmuls' own checks see only the products' widths).
  const shaped = (name: string, want: number[]) => {
    const d = tensors.get(need(name))!.dims;
    if (d.length < want.length || d.some((v, i) => v !== (want[i] ?? 1))) throw bad(`tensor '${name}' is [${d.join(', ')}], expected [${want.join(', ')}]`);
    return name;
  };
  if (!qwen2) p.op('layer_norm', x, { a: x, weights: lnW('token_embd_norm'), params: { eps } });

  const xx = p.buf('rwkv_xx', C);
  const lo = p.buf(`rwkv_lora_mix${5 * extra}`, 5 * extra);
  const xxx = p.buf(`rwkv_lerp${5 * C}`, 5 * C);
  const ld = p.buf(`rwkv_lora_decay${decayExtra}`, decayExtra);
  const wkvIn = p.buf(`rwkv_wkv_in${4 * C}`, 4 * C);
  const g = p.buf('rwkv_g', C);
  const o = p.buf('rwkv_o', C);
  const attnOut = p.buf('attn_out', C);
  const cr = p.buf('rwkv_cr', C);
  const wk = p.buf('rwkv_wk', C);
  for (let il = 0; il < hp.nLayer; il++) {
    // rwkv6qwen2: k and v of head_count_kv heads (0: n_head), each repeated for n_head / head_count_kv WKV heads.
    const hkv = qwen2 && hp.nHeadKv[il] !== 0 ? hp.nHeadKv[il] : H;
    if (H % hkv !== 0) throw bad(`head_count_kv ${hkv} does not divide the ${H} WKV heads (embedding_length / wkv.head_size)`);
    const kvw = hkv * D;
    // Without time_first (rwkv6qwen2's files) the WKV is gated linear attention.
    const gla = qwen2 && !tensors.has(t(il, 'time_mix_first.weight'));
    if (qwen2 && !gla) throw bad(`block ${il} has time_mix_first, whose WKV-6 needs the group norm rwkv6qwen2 files lack (llama.cpp's graph would read a missing time_mix_ln)`);
    // Time mix: xxx_i = x + sx (lerp_fused_i + w2_i tanh(w1 (x + sx lerp_x))_i), i = w, k, v, r, g.
    blockNorm(h, t(il, 'attn_norm'));
    shift();
    p.op('mul', xx, { a: sx, weights: { weight: vec(t(il, 'time_mix_lerp_x.weight')) } });
    p.op('add', xx, { a: xx, b: h });
    p.op('matmul', lo, { a: xx, weights: { weight: shaped(t(il, 'time_mix_w1.weight'), [C, 5 * extra]) } });
    p.op('softcap', lo, { a: lo, params: { cap: 1 } });
    p.op('matmul', xxx, { a: lo, weights: { weight: shaped(t(il, 'time_mix_w2.weight'), [extra, C, 5]), bias: vec(t(il, 'time_mix_lerp_fused.weight'), 5) }, params: { groups: 5 } });
    for (let i = 0; i < 5; i++) {
      p.op('mul', xxx, { a: xxx, b: sx, params: { a_off: i * C, out_off: i * C, n: C } });
      p.op('add', xxx, { a: xxx, b: h, params: { a_off: i * C, out_off: i * C, n: C } });
    }
    // The WKV input r|k|v|w.
    // (The optional biases are rwkv6qwen2's; llama.cpp's rwkv6 loader does not create them.)
    const bias = (n: string) => (qwen2 ? maybe(t(il, `time_mix_${n}.bias`)) : undefined);
    p.op('matmul', wkvIn, { a: xxx, weights: withBias(need(t(il, 'time_mix_receptance.weight')), bias('receptance')), params: { a_off: 3 * C, n_in: C, out_off: 0, n_out: C } });
    if (hkv === H) {
      p.op('matmul', wkvIn, { a: xxx, weights: withBias(need(t(il, 'time_mix_key.weight')), bias('key')), params: { a_off: C, n_in: C, out_off: C, n_out: C } });
      p.op('matmul', wkvIn, { a: xxx, weights: withBias(need(t(il, 'time_mix_value.weight')), bias('value')), params: { a_off: 2 * C, n_in: C, out_off: 2 * C, n_out: C } });
    } else {
      const kv = p.buf(`rwkv_kv${2 * kvw}`, 2 * kvw);
      p.op('matmul', kv, { a: xxx, weights: withBias(need(t(il, 'time_mix_key.weight')), bias('key')), params: { a_off: C, n_in: C, out_off: 0, n_out: kvw } });
      p.op('matmul', kv, { a: xxx, weights: withBias(need(t(il, 'time_mix_value.weight')), bias('value')), params: { a_off: 2 * C, n_in: C, out_off: kvw, n_out: kvw } });
      // k and v head g serve WKV heads g G .. g G + G - 1: strided copies, one per head of a group
      // (over the groups) or one per group (over its heads, a_stride 0), whichever is fewer.
      const G = H / hkv;
      for (const sec of [0, 1]) {
        if (G <= hkv) for (let r = 0; r < G; r++) p.op('copy', wkvIn, { a: kv, params: { n: D, blocks: hkv, a_off: sec * kvw, a_stride: D, out_off: (1 + sec) * C + r * D, out_stride: G * D } });
        else for (let g = 0; g < hkv; g++) p.op('copy', wkvIn, { a: kv, params: { n: D, blocks: G, a_off: sec * kvw + g * D, a_stride: 0, out_off: (1 + sec) * C + g * G * D, out_stride: D } });
      }
    }
    p.op('matmul', g, { a: xxx, weights: { weight: need(t(il, 'time_mix_gate.weight')) }, params: { a_off: 4 * C, n_in: C } });
    p.op('matmul', ld, { a: xxx, weights: { weight: shaped(t(il, 'time_mix_decay_w1.weight'), [C, decayExtra]) }, params: { a_off: 0, n_in: C } });
    p.op('softcap', ld, { a: ld, params: { cap: 1 } });
    p.op('matmul', wkvIn, { a: ld, weights: { weight: shaped(t(il, 'time_mix_decay_w2.weight'), [decayExtra, C]), bias: vec(t(il, 'time_mix_decay.weight')) }, params: { out_off: 3 * C, n_out: C } });
    p.op('sigmoid', wkvIn, { a: wkvIn, params: { exp_decay: 1, a_off: 3 * C, out_off: 3 * C, n: C } });
    if (gla) {
      // k = k - k w; the gated linear attention scaled by head_size^-0.5 (float, as pow(head_size, -0.5f)).
      p.op('mul', wk, { a: wkvIn, b: wkvIn, params: { a_off: C, b_off: 3 * C, n: C } });
      p.op('scale', wk, { a: wk, params: { scale: -1 } });
      p.op('add', wkvIn, { a: wkvIn, b: wk, params: { a_off: C, out_off: C, n: C } });
      p.op('rwkv_wkv6', o, { a: wkvIn, params: { layer: p.rsLayer(H * D * D), n_head: H, head_dim: D, gla_scale: Math.fround(D ** -0.5) } });
      // o * sigmoid(g).
      p.op('sigmoid_mul', o, { a: o, b: g, params: { per_element: 1 } });
    } else {
      p.op('rwkv_wkv6', o, { a: wkvIn, weights: { u: shaped(t(il, 'time_mix_first.weight'), [D, H]) }, params: { layer: p.rsLayer(H * D * D), n_head: H, head_dim: D } });
      p.op('head_rms_norm', o, { a: o, weights: withBias(vec(t(il, 'time_mix_ln.weight')), vec(t(il, 'time_mix_ln.bias'))), params: { layer_norm: 1, eps: RWKV7_GROUP_NORM_EPS, head_dim: D, n_head: H } });
      // o * silu(g) as silu(g) * o.
      p.op('swiglu', o, { a: g, b: o });
    }
    p.op('matmul', attnOut, { a: o, weights: { weight: need(t(il, 'time_mix_output.weight')) } });
    p.op('add', x, { a: attnOut, b: x });
    if (qwen2) {
      swigluFfn(il, attnOut);
      continue;
    }
    // Channel mix: sigmoid(receptance (x + sx lerp_r)) * value(relu(key (x + sx lerp_k))^2).
    blockNorm(h, t(il, 'attn_norm_2'));
    shift();
    p.op('mul', xx, { a: sx, weights: { weight: vec(t(il, 'channel_mix_lerp_k.weight')) } });
    p.op('add', xx, { a: xx, b: h });
    p.op('mul', sx, { a: sx, weights: { weight: vec(t(il, 'channel_mix_lerp_r.weight')) } });
    p.op('add', sx, { a: sx, b: h });
    p.op('matmul', cr, { a: sx, weights: { weight: need(t(il, 'channel_mix_receptance.weight')) } });
    const ck = need(t(il, 'channel_mix_key.weight'));
    const kf = p.buf(`rwkv_ffn${tensors.get(ck)!.dims[1]}`, tensors.get(ck)!.dims[1]);
    p.op('matmul', kf, { a: xx, weights: { weight: ck } });
    p.op('relu_sqr', kf, { a: kf });
    p.op('matmul', attnOut, { a: kf, weights: { weight: need(t(il, 'channel_mix_value.weight')) } });
    p.op('sigmoid_mul', attnOut, { a: attnOut, b: cr, params: { per_element: 1 } });
    p.op('add', x, { a: attnOut, b: x });
    if (rescale !== 0 && (il + 1) % rescale === 0) p.op('scale', x, { a: x, params: { scale: 0.5 } });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  // (rwkv6qwen2: an RMS norm, its bias optional.)
  const ho = qwen2 ? hiddenOutput(p, hp, need, x, maybe('output_norm.bias')) : hiddenOutput(p, hp, need, x, need('output_norm.bias'), 'output_norm.weight', eps);
  const head = need('output.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}
