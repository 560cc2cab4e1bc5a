import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { ProgramBuilder, ropeParams } from '../program-builder';
import { moeBlockFfn, outputHead, readMlaDims, readMoeRouting, tensorLookup, type MlaDims } from './deepseek2';
import { SWIGLU_LIMIT_EPS } from './llama-moe';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** Hyper-connection sizes of a hy_v4 file: hc streams, the coefficients' epsilon and the post magnitude. */
interface HyperConnections {
  hc: number;
  eps: number;
  magnitude: number;
}

/** The lightning indexer of a hy_v4 file (absent on the all-full_attention checkpoints). */
interface HyDsa {
  nHead: number;
  headDim: number;
  topK: number;
  /** Per block: its own indexer, or the last indexing block's selection (attention.indexer.types). */
  full: boolean[];
}

/**
 * hy_v4's keys as llama.cpp's loader (src/models/hy-v4.cpp load_arch_hparams) reads them, its
 * refusals as EngineErrors: the MLA sizes (key/value_length_mla required, so the file is MLA), the
 * hyper-connection count/epsilon/magnitude and expert_shared_count required; the indexer's keys
 * optional, and with a top_k its head count and key length must hold the rotary dimensions and
 * block 0 must index (attention.indexer.types; nothing precedes it to share).
 */
function readHyV4(hp: HParams, nCtxSeq: number | undefined): { dims: MlaDims; hcs: HyperConnections; dsa?: HyDsa; indexed: boolean[]; nDense: number; limits: number[] } {
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  for (const k of ['attention.q_lora_rank', 'attention.kv_lora_rank', 'attention.key_length_mla', 'attention.value_length_mla', 'expert_shared_count', 'hyper_connection.count', 'hyper_connection.epsilon', 'hyper_connection.magnitude'])
    if (!md.has(k)) bad(`the file lacks ${hp.arch}.${k}, which llama.cpp's loader requires`);
  const dims = readMlaDims(hp);
  if (dims.qLora < 1) bad('attention.q_lora_rank must be positive (every block projects its queries through the q LoRA)');
  const hcs: HyperConnections = {
    hc: md.int('hyper_connection.count', undefined, 1, 64),
    eps: md.num('hyper_connection.epsilon'),
    magnitude: md.num('hyper_connection.magnitude'),
  };
  if (!Number.isFinite(hcs.eps) || !Number.isFinite(hcs.magnitude)) bad(`hyper_connection.epsilon ${hcs.eps} and magnitude ${hcs.magnitude} must be finite`);
  const nDense = md.int('leading_dense_block_count', 0, 0, MAX_LAYERS);
  // Routed experts' SwiGLU clamp (ggml_swiglu_clamp); the shared and dense FFNs are not clamped.
  const limits = md.perLayerNum('swiglu_clamp_exp', hp.nLayer, 0);
  const topK = md.int('attention.indexer.top_k', 0, 0, 1 << 24);
  const none = new Array<boolean>(hp.nLayer).fill(false);
  if (topK === 0) return { dims, hcs, indexed: none, nDense, limits };
  const nHead = md.int('attention.indexer.head_count', 0, 0, MAX_DIM);
  const headDim = md.int('attention.indexer.key_length', 0, 0, MAX_DIM);
  if (nHead === 0 || headDim <= dims.qkRope)
    bad(`bad indexer head count / key length (attention.indexer.head_count ${nHead}, key_length ${headDim}: the key must be longer than the ${dims.qkRope} rotary dimensions)`);
  // (Optional in the loader, but without it no block indexes and block 0 is refused.)
  const full = md.has('attention.indexer.types') ? md.perLayer('attention.indexer.types', hp.nLayer, undefined, 0, 1).map((x) => x !== 0) : none;
  if (!full[0]) bad('block 0 must own an indexer (attention.indexer.types), nothing precedes it to share');
  // With a context no longer than top_k every position is selected: the indexer is left out.
  if (nCtxSeq !== undefined && nCtxSeq <= topK) return { dims, hcs, indexed: full, nDense, limits };
  return { dims, hcs, dsa: { nHead, headDim, topK, full }, indexed: full, nDense, limits };
}

/**
 * The hyper-connection streams of hy_v4 and deepseek4: buffers x (hc streams of n_embd), embd, h,
 * hc_tmp, hc_flat, hc_pre; the token embedding (o.embd: another table's) copied into every stream
 * (o.streams false: left for the caller, deepseek4's MTP block). gates(fn, scale, base,
 * mix): mix = fn(rms_norm(x)), the pre coefficients hc_pre from mix with scale / base (`hc_gates`);
 * reduce(): h = sum_i pre_i * stream_i (ggml_mul, then ggml_add in stream order).
 */
export function hcStreams(p: ProgramBuilder, hp: HParams, need: (name: string) => string, hc: number, eps: number, o: { embd?: string; streams?: boolean } = {}) {
  const d = hp.nEmbd;
  const W = hc * d;
  const x = p.buf('x', W);
  const e = p.buf('embd', d);
  const h = p.buf('h', d);
  const tmp = p.buf('hc_tmp', d);
  const flat = p.buf('hc_flat', W);
  const gPre = p.buf('hc_pre', W);
  p.op('embed', e, { weights: { weight: o.embd ?? need('token_embd.weight') } });
  if (o.streams !== false) for (let i = 0; i < hc; i++) p.op('copy', x, { a: e, params: { n: d, out_off: i * d } });
  const gates = (fn: string, scale: string, base: string, mix: number) => {
    p.op('rms_norm', flat, { a: x, params: { eps: hp.rmsEps } });
    p.op('matmul', mix, { a: flat, weights: { weight: need(fn) } });
    p.op('hc_gates', gPre, { a: mix, weights: { scale: need(scale), base: need(base) }, params: { n: hc, eps, repeat: d } });
  };
  const reduce = () => {
    p.op('mul', h, { a: x, b: gPre, params: { n: d } });
    for (let i = 1; i < hc; i++) {
      p.op('mul', tmp, { a: x, b: gPre, params: { n: d, a_off: i * d, b_off: i * d } });
      p.op('add', h, { a: h, b: tmp });
    }
  };
  return { x, e, h, tmp, gates, reduce };
}

/**
 * Tencent Hunyuan v4 (`hy_v4`, llama.cpp src/models/hy-v4.cpp).
 *
 * Hyper-connections: the residual is hc streams (one hc x n_embd row per token, each stream the
 * token's embedding at the start). Before each block's attention and its FFN, the streams are
 * RMS-normed as one row (no weight) and projected by hc_{attn,ffn}_fn to 2 hc mixes; the first hc
 * give pre_i = sigmoid(mix_i * scale[0] + base_i) + eps, the others post_i = magnitude *
 * sigmoid(mix_i * scale[1] + base_i) + eps (the `hc_gates` op, each coefficient repeated n_embd
 * times); the sublayer's input is sum_i pre_i * stream_i, and its output y goes back as stream_i +=
 * post_i * y (elementwise `mul` and `add` over n_embd slices, in llama.cpp's order). At the end,
 * output_hc_fn / base / scale collapse the streams the same way (pre only) before the output norm.
 *
 * A block: attn_norm, absorbed MLA with q LoRA (RoPE on adjacent pairs), a sink logit per head
 * (attn_sinks, in the `mla_attention` softmax), the attention output times sigmoid(attn_gate of
 * the normed input) per value, attn_output; ffn_norm, then a dense SwiGLU FFN on the leading dense
 * blocks, else routed experts (the file's gating, selection bias when present, renormalization and
 * scale; SwiGLU clamped by swiglu_clamp_exp as ggml_swiglu_clamp, the `moe` op's act 7) plus
 * ungated shared experts. With attention.indexer.top_k, DSA: blocks flagged by
 * attention.indexer.types compute a lightning indexer (queries from the q LoRA latent, one
 * LayerNormed key per token, both rotated on their last rotary dimensions, no Hadamard rotation,
 * as llama.cpp skips it) and restrict their attention to its top-k positions; the other blocks
 * reuse the last indexing block's selection. No control vectors (llama.cpp's graph applies none).
 *
 * Expert streaming's next-layer guess (the next router on this `moe` op's input) stays on: every
 * router reads an n_embd-wide normed mix of the streams (not the hc x n_embd residual), the same
 * kind of input as in the other architectures; a guess only orders reads, never changes results.
 */
export function buildHyV4(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: { nCtxSeq?: number } = {}): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const { dims, hcs, dsa, indexed, nDense, limits } = readHyV4(hp, opt.nCtxSeq);
  const { kvLora: L, qkNope, qkRope: R, vHead, qLora } = dims;
  const d = hp.nEmbd;
  const { hc } = hcs;
  const W = hc * d;
  const routing = readMoeRouting(hp, 0);
  const kqScale = Math.fround(1 / Math.fround(Math.sqrt(qkNope + R)));
  const rope = ropeParams(hp, false, { n_dims: R });
  const nL = hp.nLayer;

  const p = new ProgramBuilder();
  const { x, h, tmp, gates, reduce } = hcStreams(p, hp, need, hc, hcs.eps);
  const gPost = p.buf('hc_post', W);
  const attnOut = p.buf('attn_out', d);
  const ffnOut = p.buf('ffn_out', d);

  // The streams' pre (and post) coefficients from fn / scale / base, then their pre mix into h.
  const hcPre = (fn: string, scale: string, base: string, post: boolean) => {
    const nMix = post ? 2 * hc : hc;
    const mix = p.buf(`hc_mix${nMix}`, nMix);
    gates(fn, scale, base, mix);
    if (post) p.op('hc_gates', gPost, { a: mix, weights: { scale: need(scale), base: need(base) }, params: { n: hc, a_off: hc, scale_index: 1, base_off: hc, magnitude: hcs.magnitude, eps: hcs.eps, repeat: d } });
    reduce();
  };
  // stream_i += post_i * y.
  const hcPost = (y: number) => {
    for (let i = 0; i < hc; i++) {
      p.op('mul', tmp, { a: y, b: gPost, params: { n: d, b_off: i * d } });
      p.op('add', x, { a: x, b: tmp, params: { n: d, a_off: i * d, out_off: i * d } });
    }
  };

  const H0 = hp.nHead[0];
  const kva = p.buf(`kv_cmpr_pe${L + R}`, L + R);
  const lat = p.buf(`kv_cmpr${L}`, L);
  const qa = p.buf(`q_a${qLora}`, qLora);
  const sel = dsa ? p.buf(`dsa_sel${dsa.topK}`, dsa.topK) : undefined;
  for (let il = 0; il < nL; il++) {
    const H = hp.nHead[il];
    if (H !== H0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has ${H} heads, block 0 ${H0}: the loader reads one head count`);
    const q = p.buf(`q${H}x${qkNope + R}`, H * (qkNope + R));
    const attn = p.buf(`attn${H}x${vHead}`, H * vHead);
    hcPre(t(il, 'hc_attn_fn.weight'), t(il, 'hc_attn_scale.weight'), t(il, 'hc_attn_base.weight'), true);
    p.op('rms_norm', h, { a: h, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('matmul', qa, { a: h, weights: { weight: need(t(il, 'attn_q_a.weight')) } });
    p.op('rms_norm', qa, { a: qa, weights: { weight: need(t(il, 'attn_q_a_norm.weight')) }, params: { eps: hp.rmsEps } });
    if (dsa && dsa.full[il]) hyIndexer(p, hp, tensors, il, dsa, rope, R, qa, h, sel!);
    // (Left out for a context within top_k, but its tensors are still required, as the loader requires them.)
    else if (indexed[il]) for (const n of ['indexer.attn_q_b.weight', 'indexer.attn_k.weight', 'indexer.k_norm.weight', 'indexer.k_norm.bias', 'indexer.proj.weight']) need(t(il, n));
    p.op('matmul', q, { a: qa, weights: { weight: need(t(il, 'attn_q_b.weight')) } });
    p.op('matmul', kva, { a: h, weights: { weight: need(t(il, 'attn_kv_a_mqa.weight')) } });
    p.op('copy', lat, { a: kva, params: { n: L } });
    p.op('rms_norm', lat, { a: lat, weights: { weight: need(t(il, 'attn_kv_a_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('copy', kva, { a: lat, params: { n: L } });
    p.op('rope', kva, { a: kva, params: { ...rope, head_dim: L + R, n_head: 1, rot_off: L } });
    p.op('rope', q, { a: q, params: { ...rope, head_dim: qkNope + R, n_head: H, rot_off: qkNope } });
    const layer = p.kvLayer(L + R, 0);
    p.op('mla_attention', attn, {
      a: q,
      b: kva,
      ...(sel !== undefined ? { c: sel } : {}),
      weights: { k_b: need(t(il, 'attn_k_b.weight')), v_b: need(t(il, 'attn_v_b.weight')), sinks: need(t(il, 'attn_sinks.weight')) },
      params: { layer, n_head: H, kv_lora: L, qk_nope: qkNope, qk_rope: R, v_head: vHead, scale: kqScale, ...(sel !== undefined ? { top_k: dsa!.topK } : {}) },
    });
    // Gated MLA: each value of the attention output times sigmoid(attn_gate . normed input).
    const gate = p.buf(`attn_gate${H * vHead}`, H * vHead);
    p.op('matmul', gate, { a: h, weights: { weight: need(t(il, 'attn_gate.weight')) } });
    p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { per_element: 1 } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    hcPost(attnOut);

    hcPre(t(il, 'hc_ffn_fn.weight'), t(il, 'hc_ffn_scale.weight'), t(il, 'hc_ffn_base.weight'), true);
    p.op('rms_norm', h, { a: h, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const dense = il < nDense;
    if (!dense && (hp.nExpert <= 0 || hp.nExpertUsed <= 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: n_expert and n_expert_used must be > 0 (expert_count ${hp.nExpert}, expert_used_count ${hp.nExpertUsed})`);
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, dense, {
      probsBias: 'optional',
      shared: 'required',
      ...(limits[il] > SWIGLU_LIMIT_EPS ? { moeParams: { act: 7, limit: limits[il] } } : {}),
    });
    hcPost(ffnOut);
  }

  // The head: the streams collapsed by output_hc_fn / scale / base (pre coefficients only).
  hcPre('output_hc_fn.weight', 'output_hc_scale.weight', 'output_hc_base.weight', false);
  return outputHead(p, hp, tensors, h, 'output_norm.weight', { untied: true });
}

/**
 * Block il's lightning indexer as llama.cpp's hy_v4 graph builds it: per head a query from the q
 * LoRA latent `qa`, one key from `h` (LayerNorm with bias, epsilon the RMS norms'), both rotated on
 * their last rotary dimensions (the nope part first), per-head weights from `h` scaled by
 * 1/sqrt(heads x head size); the `dsa_index` op caches the keys and writes each token's top-k
 * positions into `sel`. (llama.cpp leaves out the reference's Hadamard rotation: orthogonal, it
 * does not change q.k.)
 */
function hyIndexer(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, dsa: HyDsa, rope: Record<string, number | boolean>, R: number, qa: number, h: number, sel: number): void {
  const { need } = tensorLookup(hp, tensors);
  const { nHead: nh, headDim: hd, topK } = dsa;
  const iq = p.buf(`dsa_q${nh * hd}`, nh * hd);
  const ik = p.buf(`dsa_k${hd}`, hd);
  const iw = p.buf(`dsa_w${nh}`, nh);
  p.op('matmul', iq, { a: qa, weights: { weight: need(t(il, 'indexer.attn_q_b.weight')) } });
  p.op('rope', iq, { a: iq, params: { ...rope, head_dim: hd, n_head: nh, rot_off: hd - R } });
  p.op('matmul', ik, { a: h, weights: { weight: need(t(il, 'indexer.attn_k.weight')) } });
  p.op('layer_norm', ik, { a: ik, weights: { weight: need(t(il, 'indexer.k_norm.weight')), bias: need(t(il, 'indexer.k_norm.bias')) }, params: { eps: hp.rmsEps } });
  p.op('rope', ik, { a: ik, params: { ...rope, head_dim: hd, n_head: 1, rot_off: hd - R } });
  p.op('matmul', iw, { a: h, weights: { weight: need(t(il, 'indexer.proj.weight')) } });
  p.op('scale', iw, { a: iw, params: { scale: Math.fround(1 / Math.fround(Math.sqrt(hd * nh))) } });
  const layer = p.kvLayer(hd, 0);
  p.op('dsa_index', sel, { a: iq, b: ik, c: iw, params: { layer, n_head: nh, head_dim: hd, top_k: topK } });
}
