import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { perLayerInputs, sharedKvAttention } from './gemma4';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;
/** A float32 constant as llama.cpp computes it in C (sqrtf, 1.0f / x). */
const f32 = Math.fround;
/** llama.cpp's f_sparsity_std_mul (normal_dist.icdf(0.95)) for its first 10 blocks, when the file has no activation_sparsity_scale. */
const STD_MUL_095 = 1.6448533535003662;
/**
 * HF's floor under the mean square of a stream AltUp rescales (Gemma3nTextModel: sqrt(max(mean(x^2),
 * 1e-5))). llama.cpp divides by the plain norm, 0 / 0 on an all-zero stream; with any other stream
 * the two agree.
 */
const MAG_EPS = 1e-5;

/**
 * Google Gemma 3n (`gemma3n`, llama.cpp src/models/gemma3n.cpp): E2B/E4B text decoder.
 *
 * The embedding times sqrt(n_embd) is AltUp stream 0 of `altup.num_inputs` n streams; streams 1..n-1
 * are altup_proj's slices of it rescaled to its magnitude. Per block: predict (router modalities
 * tanh(altup_router (rms_norm(active) altup_router_norm / n_embd)), the streams mixed by
 * altup_predict_coef's n x n coefficients, plus themselves); the active stream
 * (`altup.active_idx`) through RMSNorm, LAuReL (laurel_r laurel_l x, post norm, plus x) beside
 * Gemma 3's attention (per-head q/k norms, values RMS-normed, NeoX RoPE, scale 1, sliding windows
 * by `attention.sliding_window_pattern`, period 5 when absent, their base `rope.freq_base_swa`;
 * the last `attention.shared_kv_layers` blocks attend over the cache of the last storing block of
 * their kind), post norm, plus the active stream; (that + LAuReL) / sqrt(2); a GeGLU FFN whose
 * gate is sparsified by gaussian top-k (relu(g - mean - s std)) on blocks with a positive
 * `activation_sparsity_scale` s, post norm, residual; correct (each stream plus the innovation
 * times altup_correct_coef's coefficient + 1); then streams 1..n-1 get
 * post_norm(proj(gelu(inp_gate (active altup_correct_scale)) * the block's per-layer input)).
 * A control vector's row is added to every stream after each block (llama.cpp's build_cvec on the
 * stacked streams). The end: streams 1..n-1 through altup_unembd_proj rescaled to the active stream's magnitude,
 * averaged with stream 0, output norm, the head (tied unless output.weight), logits tanh
 * soft-capped by `final_logit_softcapping` (30 when absent).
 * (llama.cpp hard-codes 4 streams, active 0, 256 per-layer inputs, the KV sharing from block 20
 * and sparsity on blocks 0-9; kail reads them from the file.)
 */
export function buildGemma3n(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const nL = hp.nLayer;
  const d = hp.nEmbd;
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  const N = md.int('altup.num_inputs', 4, 2, 64);
  const act = md.int('altup.active_idx', 0, 0, N - 1);
  const nEpl = md.int('embedding_length_per_layer_input', 256, 1, MAX_DIM);
  const swa = slidingWindowLayers(hp, 5);
  const window = md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const baseSwa = md.num('rope.freq_base_swa', 10000);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const shared = md.int('attention.shared_kv_layers', 0, 0, nL - 1);
  const kvFrom = nL - shared;
  // llama.cpp's reuse callback: a shared block reads block kvFrom - 2 if it slides, kvFrom - 1 if not.
  if (shared > 0 && (kvFrom < 2 || !swa[kvFrom - 2] || swa[kvFrom - 1]))
    bad(`attention.shared_kv_layers ${shared} leaves blocks ${kvFrom - 2} and ${kvFrom - 1} to share from, which must be a sliding-window and a full-attention block`);
  const softcap = md.num('final_logit_softcapping', 30);
  if (!(softcap >= 0) || !Number.isFinite(softcap)) bad(`final_logit_softcapping ${softcap} is not a non-negative number`);
  const rawSparsity = md.kv[`${hp.arch}.activation_sparsity_scale`];
  let sparsity: number[];
  if (rawSparsity === undefined) sparsity = Array.from({ length: nL }, (_, il) => (il < 10 ? STD_MUL_095 : 0));
  else if (typeof rawSparsity === 'object' && rawSparsity !== null && 'length' in rawSparsity) {
    sparsity = Array.from(rawSparsity as ArrayLike<unknown>, Number);
    if (sparsity.length !== nL) bad(`activation_sparsity_scale has ${sparsity.length} entries for ${nL} layers`);
    if (sparsity.some((v) => !Number.isFinite(v) || v < 0)) bad('activation_sparsity_scale entries must be non-negative numbers');
  } else sparsity = bad('activation_sparsity_scale must be an array with one value per block');
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const ropeSwa = { ...rope, freq_base: baseSwa, freq_scale: 1 };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  p.op('scale', x, { a: x, params: { scale: f32(Math.sqrt(d)) } });
  const pleDims = tensors.get(need('per_layer_token_embd.weight'))!.dims;
  if (pleDims[0] !== nEpl * nL) bad(`per_layer_token_embd.weight [${pleDims.join(', ')}] is not embedding_length_per_layer_input ${nEpl} x ${nL} blocks wide`);
  const ple = perLayerInputs(p, hp, need, x, nEpl);

  const xs = p.buf('altup', N * d);
  const rest = p.buf('altup_rest', (N - 1) * d);
  const grouped = (n: number): Record<string, number> => (n > 1 ? { groups: n } : {});
  // Stream 0: the embedding; streams 1..N-1: altup_proj's slices of it, rescaled to its magnitude.
  const added = p.buf('altup_added', (N - 1) * d);
  for (let j = 0; j < N - 1; j++) p.op('copy', rest, { a: x, params: { n: d, out_off: j * d } });
  p.op('matmul', added, { a: rest, weights: { weight: need('altup_proj.weight') }, params: { n_in: d, ...grouped(N - 1) } });
  p.op('altup', added, { a: added, b: x, params: { mode: 2, n: N - 1, dim: d, eps: MAG_EPS } });
  p.op('copy', xs, { a: x, params: { n: d } });
  p.op('copy', xs, { a: added, params: { n: (N - 1) * d, out_off: d } });

  const pred = p.buf('altup_pred', N * d);
  const active = p.buf('altup_active', d);
  const ri = p.buf('altup_router_in', d);
  const mod = p.buf('altup_modalities', N);
  const pc = p.buf('altup_predict_coef', N * N);
  const cc = p.buf('altup_correct_coef', N);
  const lo = p.buf('laurel_out', d);
  const al = p.buf('attn_laurel', d);
  const ffnOut = p.buf('ffn_out', d);
  const fp = p.buf('first_prediction', d);
  const g = p.buf('ple_gate', nEpl);
  const norm = (il: number, buf: number, name: string, a = buf) => p.op('rms_norm', buf, { a, weights: { weight: need(t(il, name)) }, params: { eps: hp.rmsEps } });
  const modalities = (il: number, src: number) => {
    norm(il, ri, 'altup_router_norm.weight', src);
    p.op('scale', ri, { a: ri, params: { scale: f32(1 / d) } });
    p.op('matmul', mod, { a: ri, weights: { weight: need(t(il, 'altup_router.weight')) } });
    // tanh (soft-capping at 1 is tanh(a / 1) * 1).
    p.op('softcap', mod, { a: mod, params: { cap: 1 } });
  };
  const kvOf: number[] = [];
  for (let il = 0; il < nL; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H % Hkv !== 0) bad(`layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
    // AltUp predict.
    p.op('copy', active, { a: xs, params: { a_off: act * d, n: d } });
    modalities(il, active);
    p.op('matmul', pc, { a: mod, weights: { weight: need(t(il, 'altup_predict_coef.weight')) } });
    p.op('altup', pred, { a: xs, b: pc, params: { mode: 0, n: N, dim: d, act } });
    p.op('copy', active, { a: pred, params: { a_off: act * d, n: d } });
    norm(il, h, 'attn_norm.weight', active);
    // LAuReL.
    const lw = need(t(il, 'laurel_l.weight'));
    const rank = tensors.get(lw)!.dims[1];
    const lm = p.buf(`laurel_mid${rank}`, rank);
    p.op('matmul', lm, { a: h, weights: { weight: lw } });
    p.op('matmul', lo, { a: lm, weights: { weight: need(t(il, 'laurel_r.weight')) } });
    norm(il, lo, 'laurel_post_norm.weight');
    p.op('add', lo, { a: lo, b: h });
    // Attention.
    const rp = swa[il] ? ropeSwa : rope;
    const q = p.buf(`q${H * hd}`, H * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    p.op('matmul', q, { a: h, weights: { weight: need(t(il, 'attn_q.weight')) } });
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('rope', q, { a: q, params: { ...rp, n_head: H } });
    let k = -1;
    let v = -1;
    if (il < kvFrom) {
      const kvW = Hkv * hd;
      k = p.buf(`k${kvW}`, kvW);
      v = p.buf(`v${kvW}`, kvW);
      p.op('matmul', k, { a: h, weights: { weight: need(t(il, 'attn_k.weight')) } });
      p.op('matmul', v, { a: h, weights: { weight: need(t(il, 'attn_v.weight')) } });
    }
    sharedKvAttention(p, hp, il, { q, k, v, attn, attnOut, H, Hkv, hd, kvFrom, kvOf, window: swa[il] ? window : 0, rope: { params: rp }, need, bad });
    norm(il, attnOut, 'post_attention_norm.weight');
    p.op('add', attnOut, { a: attnOut, b: active });
    p.op('add', al, { a: attnOut, b: lo });
    p.op('scale', al, { a: al, params: { scale: f32(1 / f32(Math.sqrt(2))) } });
    // The FFN: GeGLU, the gate sparsified on the first blocks.
    norm(il, h, 'ffn_norm.weight', al);
    const wg = need(t(il, 'ffn_gate.weight'));
    const nff = tensors.get(wg)!.dims[1];
    const gate = p.buf(`ffn_gate${nff}`, nff);
    const up = p.buf(`ffn_up${nff}`, nff);
    p.op('matmul', up, { a: h, weights: { weight: need(t(il, 'ffn_up.weight')) } });
    p.op('matmul', gate, { a: h, weights: { weight: wg } });
    if (sparsity[il] > 0) p.op('gaussian_topk', gate, { a: gate, params: { std_mul: f32(sparsity[il]) } });
    p.op('gelu', gate, { a: gate });
    p.op('mul', up, { a: up, b: gate });
    p.op('matmul', ffnOut, { a: up, weights: { weight: need(t(il, 'ffn_down.weight')) } });
    norm(il, ffnOut, 'post_ffw_norm.weight');
    p.op('add', ffnOut, { a: ffnOut, b: al });
    // AltUp correct.
    modalities(il, ffnOut);
    p.op('matmul', cc, { a: mod, weights: { weight: need(t(il, 'altup_correct_coef.weight')) } });
    p.op('altup', xs, { a: pred, b: ffnOut, c: cc, params: { mode: 1, n: N, dim: d, act } });
    // The per-layer input, added to streams 1..N-1.
    p.op('mul', fp, { a: xs, weights: { weight: need(t(il, 'altup_correct_scale.weight')) }, params: { a_off: act * d, n: d } });
    p.op('matmul', g, { a: fp, weights: { weight: need(t(il, 'inp_gate.weight')) } });
    p.op('gelu', g, { a: g });
    p.op('mul', g, { a: g, b: ple, params: { b_off: il * nEpl, n: nEpl } });
    p.op('matmul', fp, { a: g, weights: { weight: need(t(il, 'proj.weight')) } });
    norm(il, fp, 'post_norm.weight');
    for (let j = 1; j < N; j++) p.op('add', xs, { a: xs, b: fp, params: { a_off: j * d, out_off: j * d, n: d } });
    // llama.cpp's build_cvec on the stacked streams: a control vector's row for this layer added to each.
    for (let j = 0; j < N; j++) {
      p.op('copy', fp, { a: xs, params: { a_off: j * d, n: d } });
      p.op('cvec', fp, { a: fp, params: { layer: il } });
      p.op('copy', xs, { a: fp, params: { out_off: j * d, n: d } });
    }
  }
  // Streams 1..N-1 unembedded and rescaled to the active stream's magnitude, averaged with stream 0.
  p.op('matmul', rest, { a: xs, weights: { weight: need('altup_unembd_proj.weight') }, params: { a_off: d, n_in: d, n_out: (N - 1) * d, ...grouped(N - 1) } });
  p.op('altup', rest, { a: rest, b: xs, params: { mode: 2, n: N - 1, dim: d, b_off: act * d, eps: MAG_EPS } });
  const merged = p.buf('altup_merged', d);
  p.op('copy', merged, { a: xs, params: { n: d } });
  for (let j = 0; j < N - 1; j++) p.op('add', merged, { a: merged, b: rest, params: { b_off: j * d, n: d } });
  p.op('scale', merged, { a: merged, params: { scale: f32(1 / N) } });
  return outputHead(p, hp, tensors, merged, undefined, { softcap });
}
