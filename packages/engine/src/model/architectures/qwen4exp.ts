import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_HEADS, MAX_LAYERS, type HParams } from '../hparams';
import { ProgramBuilder, ropeParams } from '../program-builder';
import { tensorLookup } from './deepseek2';
import { gatedSharedExpert, softmaxExperts } from './llama-family';
import { gatedQueryKeys, linearAttention, readLinearAttention, recurrentLayers } from './qwen35';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** What a qwen4exp file declares beyond Qwen3.5's delta net: hyper-connections and the QSA indexer. */
interface Qwen4ExpKeys {
  hc: number;
  lowRank: number;
  idxHeads: number;
  idxDim: number;
  topK: number;
  /** Per block: the indexer's block size (attention.compress_ratios; 0: dense attention). */
  ratios: number[];
  ple?: PleKeys;
}

/** The PLE n-gram embedding of a qwen4exp file (one block). */
interface PleKeys {
  layer: number;
  ngram: number;
  perGram: number;
  kernel: number;
  eos: number;
  image: number;
  headDim: number;
  /** The ngram multipliers' 32-bit halves. */
  mult: { lo: number; hi: number }[];
  offsets: number[];
  vocab: number[];
}

/** A UINT64 (or any integer) array's entries as bigints, refused unless it has at least `n`. */
function u64s(hp: HParams, key: string, n: number): bigint[] {
  const k = `${hp.arch}.${key}`;
  const v = hp.meta.kv[k];
  if (v === undefined) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks metadata '${k}'`);
  if (typeof v !== 'object' || v === null || !('length' in v) || typeof v === 'string') throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' must be an array of integers`);
  const arr = Array.from(v as ArrayLike<unknown>, (x) => (typeof x === 'bigint' ? x : typeof x === 'number' && Number.isInteger(x) && x >= 0 ? BigInt(x) : -1n));
  if (arr.length < n) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' has ${arr.length} entries, but at least ${n} are required`);
  const bad = arr.findIndex((x) => x < 0n || x >= 1n << 64n);
  if (bad >= 0) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' entry ${bad} is not an unsigned 64-bit integer`);
  return arr;
}

/** The PLE keys as llama.cpp's loader reads them (one layer, a linear-attention one; ranges within int32). */
function readPle(hp: HParams, recurrent: boolean[]): PleKeys | undefined {
  const md = hp.meta;
  const k = `${hp.arch}.ple.layers`;
  const v = md.kv[k];
  if (v === undefined) return undefined;
  const layers = typeof v === 'object' && v !== null && 'length' in v && typeof v !== 'string' ? Array.from(v as ArrayLike<unknown>, (x) => Number(x)) : [Number(v)];
  if (layers.length === 0) return undefined;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (layers.length !== 1) bad(`ple.layers lists ${layers.length} layers, but only one PLE layer is supported (llama.cpp holds one set of hash constants)`);
  const layer = layers[0];
  if (!Number.isInteger(layer) || layer < 0 || layer >= hp.nLayer) bad(`PLE layer ${String(layer)} is out of range`);
  if (!recurrent[layer]) bad(`PLE layer ${layer} is not a linear attention layer (its convolution history is a row of the recurrent cache)`);
  const ngram = md.int('ple.ngram_size', undefined, 0, 1 << 20);
  const perGram = md.int('ple.heads_per_ngram', undefined, 0, 1 << 20);
  const kernel = md.int('ple.conv_kernel', undefined, 0, 4096);
  const eos = md.int('ple.eos_token_id', undefined, 0, 0xffffffff);
  const image = md.int('ple.image_token_id', 0, 0, 0xffffffff) || eos;
  const headDim = md.int('embedding_length_per_layer_input', undefined, 0, MAX_DIM);
  if (kernel === 0) bad('ple.conv_kernel must be greater than zero, got 0');
  if (headDim === 0) bad('embedding_length_per_layer_input must be greater than zero, got 0');
  if (ngram < 2 || ngram > 8) bad(`PLE n-gram size ${ngram} is out of range`);
  const nh = (ngram - 1) * perGram;
  if (nh === 0 || nh > 64) bad(`PLE head count ${nh} is out of range`);
  if (kernel < 2) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: a PLE convolution of ${kernel} tap (ple.conv_kernel) is not supported`);
  if (headDim * nh !== hp.nEmbd) bad(`the PLE embedding (${nh} heads of ${headDim}) is not n_embd ${hp.nEmbd} wide, which ple_key and ple_value read`);
  const mults = u64s(hp, 'ple.layer_multipliers', ngram);
  const offs = u64s(hp, 'ple.head_offsets', nh);
  const vocs = u64s(hp, 'ple.head_vocab_sizes', nh);
  const I32 = 0x7fffffffn;
  for (let h = 0; h < nh; h++)
    if (vocs[h] === 0n || offs[h] > I32 || vocs[h] > I32 || offs[h] + vocs[h] > I32) bad(`PLE head ${h} range does not fit the int32 row index`);
  if (eos >= 1 << 24 || image >= 1 << 24) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: PLE EOS / image token ids at or past 2^24 are not supported`);
  return {
    layer, ngram, perGram, kernel, eos, image, headDim,
    mult: mults.slice(0, ngram).map((m) => ({ lo: Number(m & 0xffffffffn), hi: Number(m >> 32n) })),
    offsets: offs.slice(0, nh).map(Number),
    vocab: vocs.slice(0, nh).map(Number),
  };
}

/**
 * qwen4exp's keys as llama.cpp's loader (src/models/qwen4exp.cpp load_arch_hparams) reads them, its
 * refusals as EngineErrors: hyper_connection.count above 1 and low_rank, the indexer's head count,
 * key length and top_k required and positive, attention.compress_ratios optional (one per block),
 * the PLE keys when ple.layers is present. A QSA block's indexer must hold the rotary dimensions
 * (llama.cpp ropes its queries and pooled keys over rope.dimension_count).
 */
function readQwen4Exp(hp: HParams, recurrent: boolean[]): Qwen4ExpKeys {
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  for (const k of ['hyper_connection.count', 'hyper_connection.low_rank', 'attention.indexer.head_count', 'attention.indexer.key_length', 'attention.indexer.top_k'])
    if (!md.has(k)) bad(`the file lacks ${hp.arch}.${k}, which llama.cpp's loader requires`);
  const hc = md.int('hyper_connection.count', undefined, 0, 64);
  if (hc <= 1) bad(`hyper_connection.count must be greater than one, got ${hc}`);
  const lowRank = md.int('hyper_connection.low_rank', undefined, 1, MAX_DIM);
  const idxHeads = md.int('attention.indexer.head_count', undefined, 1, MAX_HEADS);
  const idxDim = md.int('attention.indexer.key_length', undefined, 1, MAX_DIM);
  const topK = md.int('attention.indexer.top_k', undefined, 1, 1 << 30);
  const ratios = md.perLayer('attention.compress_ratios', hp.nLayer, 0, 0, 64);
  const ple = readPle(hp, recurrent);
  if (ratios.some((r, il) => r > 0 && !recurrent[il]) && (hp.ropeDims > idxDim || hp.ropeDims % 2 !== 0))
    bad(`the QSA indexer's key length ${idxDim} does not hold the ${hp.ropeDims} rotary dimensions (rope.dimension_count) its queries and block keys are rotated over`);
  if (topK + 64 > 1 << 24) bad(`attention.indexer.top_k ${topK} is too large (the kept positions are exact in F32 below 2^24)`);
  return { hc, lowRank, idxHeads, idxDim, topK, ratios, ...(ple ? { ple } : {}) };
}

/**
 * Qwen3.8-Flash-Next (`qwen4exp`, llama.cpp src/models/qwen4exp.cpp).
 *
 * Hyper-connections in place of every norm: the residual is hc streams of n_embd (each the token's
 * embedding at the start). Before each mixer and each FFN a module mixes them: the streams are
 * RMS-normed one by one with a gamma per stream (hc_*_norm [n_embd, hc]), a low-rank gate
 * g = up(silu(down(xn) / hc)) gives the block's input mean_c(xn_c * sigmoid(g_c)), and the inject
 * weights w = 2 sigmoid(inject(xn) / hc) (the `hc_gates` op without weights) scatter the block's
 * output y back as stream_c += w_c * y. The head collapses the streams the same way (output_hc_*,
 * no inject) and that mix is the output norm.
 *
 * Blocks: Qwen3.5's gated delta net (the linear-attention blocks per attention.recurrent_layers or
 * full_attention_interval) with a sigmoid output gate instead of SiLU, or Qwen3.5's gated full
 * attention (q|gate per head, q/k norms, interleaved M-RoPE: for text the same position in every
 * section, so NeoX RoPE), then softmax top-k experts renormalized plus a sigmoid-gated shared expert.
 * QSA (the indexer on full-attention blocks with a compress ratio; see gatedAttention) keeps each
 * token's top_k positions in whole blocks of the ratio plus its incomplete tail block; blocks
 * without a ratio attend densely, their indexer tensors still required, as the loader requires them. PLE (one linear-attention block, ple.layers): the `ple_ngram` op hashes each token
 * with the n_gram - 1 before it in its sequence (its recurrent state) into per-head rows of
 * per_layer_token_embd, and pleBlock mixes them into the streams before that block's module.
 */
export function buildQwen4Exp(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  if (hp.nLayer > MAX_LAYERS) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: too many blocks`);
  const dims = readLinearAttention(hp);
  const recurrent = recurrentLayers(hp, hp.nLayer);
  const keys = readQwen4Exp(hp, recurrent);
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_count and expert_used_count must be > 0 (every block is routed)`);
  const d = hp.nEmbd;
  const { hc } = keys;
  const W = hc * d;
  const inv = Math.fround(1 / hc);

  const p = new ProgramBuilder();
  const x = p.buf('x', W);
  const e = p.buf('embd', d);
  const h = p.buf('h', d);
  const xn = p.buf('hc_xn', W);
  const lo = p.buf(`hc_lo${keys.lowRank}`, keys.lowRank);
  const gate = p.buf('hc_gate', W);
  const inj = p.buf(`hc_inj${hc}`, hc);
  const w = p.buf('hc_w', W);
  const tmp = p.buf('hc_tmp', d);
  const mixOut = p.buf('mix_out', d);
  p.op('embed', e, { weights: { weight: need('token_embd.weight') } });
  for (let c = 0; c < hc; c++) p.op('copy', x, { a: e, params: { n: d, out_off: c * d } });
  const ple = keys.ple;
  const pleEmb = ple ? p.buf('ple_emb', d) : -1;
  if (ple) {
    const params: Record<string, number> = { layer: p.rsLayer(ple.ngram - 1), n_gram: ple.ngram, per_gram: ple.perGram, eos: ple.eos, image_token: ple.image };
    ple.mult.forEach((m, j) => Object.assign(params, { [`mult_lo_${j}`]: m.lo, [`mult_hi_${j}`]: m.hi }));
    ple.offsets.forEach((o, h) => Object.assign(params, { [`off_${h}`]: o, [`voc_${h}`]: ple.vocab[h] }));
    p.op('ple_ngram', pleEmb, { weights: { weight: need('per_layer_token_embd.weight') }, params });
  }

  // h = mean_c(xn_c * sigmoid(g_c)) of the grouped-normed streams; with `inject`, w = 2 sigmoid(inject(xn) / hc) per stream, n_embd times.
  const hcMix = (prefix: string, inject: boolean) => {
    p.op('head_rms_norm', xn, { a: x, weights: { weight: need(`${prefix}_norm.weight`) }, params: { eps: hp.rmsEps, head_dim: d, n_head: hc } });
    p.op('matmul', lo, { a: xn, weights: { weight: need(`${prefix}_down.weight`) } });
    p.op('scale', lo, { a: lo, params: { scale: inv } });
    p.op('sigmoid_mul', lo, { a: lo, b: lo, params: { per_element: 1 } });
    p.op('matmul', gate, { a: lo, weights: { weight: need(`${prefix}_up.weight`) } });
    p.op('sigmoid_mul', gate, { a: xn, b: gate, params: { per_element: 1 } });
    p.op('copy', h, { a: gate, params: { n: d } });
    for (let c = 1; c < hc; c++) p.op('add', h, { a: h, b: gate, params: { n: d, b_off: c * d } });
    p.op('scale', h, { a: h, params: { scale: inv } });
    if (!inject) return;
    p.op('matmul', inj, { a: xn, weights: { weight: need(`${prefix}_inject.weight`) } });
    p.op('hc_gates', w, { a: inj, params: { n: hc, gate_scale: inv, magnitude: 2, eps: 0, repeat: d } });
  };
  // stream_c += w_c * y.
  const hcCombine = (y: number) => {
    for (let c = 0; c < hc; c++) {
      p.op('mul', tmp, { a: y, b: w, params: { n: d, b_off: c * d } });
      p.op('add', x, { a: x, b: tmp, params: { n: d, a_off: c * d, out_off: c * d } });
    }
  };

  for (let il = 0; il < hp.nLayer; il++) {
    if (ple && ple.layer === il) pleBlock(p, hp, tensors, il, ple, { x, emb: pleEmb, hc });
    hcMix(t(il, 'hc_attn'), true);
    if (recurrent[il]) linearAttention(p, hp, tensors, il, dims, h, mixOut, false, true);
    else gatedAttention(p, hp, tensors, il, h, mixOut, keys);
    hcCombine(mixOut);
    hcMix(t(il, 'hc_ffn'), true);
    softmaxExperts(p, hp, il, need, h, mixOut, true, 0);
    gatedSharedExpert(p, tensors, il, need, h, mixOut);
    hcCombine(mixOut);
  }

  // The head: the final mix is the output norm.
  hcMix('output_hc', false);
  p.hidden(h);
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: h });
  const head = maybe('output.weight') ?? need('token_embd.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}

/**
 * PLE on block il (llama.cpp's qwen4exp build_ple) over the streams `x` (hc x n_embd): key =
 * ple_key emb and the streams (query) grouped-RMS-normed (ple_norm_key, ple_norm_query), per stream
 * gate = sigmoid(sgn(s) sqrt(max(|s|, 1e-6))) of s = key . query / sqrt(n_embd) (the `ple_gate`
 * op), gated = ple_value emb times each stream's gate, then a depthwise causal convolution of the
 * grouped-normed gated streams (ple_norm_conv; ple_conv1d's taps ngram positions apart, the
 * history in a recurrent layer: `ssm_conv` with a dilation) through SiLU; x += gated + conv.
 */
function pleBlock(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, ple: PleKeys, io: { x: number; emb: number; hc: number }): void {
  const { need } = tensorLookup(hp, tensors);
  const d = hp.nEmbd;
  const W = io.hc * d;
  const key = p.buf('ple_key', W);
  const query = p.buf('ple_query', W);
  const value = p.buf('ple_value', d);
  const gate = p.buf('ple_gate', W);
  const gated = p.buf('ple_gated', W);
  const normed = p.buf('ple_normed', W);
  const conv = p.buf('ple_conv', W);
  const norm = (out: number, a: number, w: string) => p.op('head_rms_norm', out, { a, weights: { weight: need(t(il, w)) }, params: { eps: hp.rmsEps, head_dim: d, n_head: io.hc } });
  p.op('matmul', key, { a: io.emb, weights: { weight: need(t(il, 'ple_key.weight')) } });
  p.op('matmul', value, { a: io.emb, weights: { weight: need(t(il, 'ple_value.weight')) } });
  norm(key, key, 'ple_norm_key.weight');
  norm(query, io.x, 'ple_norm_query.weight');
  p.op('ple_gate', gate, { a: key, b: query, params: { n: d, n_group: io.hc, scale: Math.fround(1 / Math.fround(Math.sqrt(d))), repeat: d } });
  for (let c = 0; c < io.hc; c++) p.op('mul', gated, { a: value, b: gate, params: { n: d, b_off: c * d, out_off: c * d } });
  norm(normed, gated, 'ple_norm_conv.weight');
  p.op('ssm_conv', conv, { a: normed, weights: { weight: need(t(il, 'ple_conv1d.weight')) }, params: { layer: p.rsLayer((ple.kernel - 1) * ple.ngram * W), d_conv: ple.kernel, dilation: ple.ngram, silu: 1 } });
  p.op('add', conv, { a: gated, b: conv });
  p.op('add', io.x, { a: io.x, b: conv });
}

/**
 * A full-attention block (llama.cpp's qwen4exp build_layer_attn) on the mix `h` into `out`:
 * attn_q gives each head's query then its gate; per-head q/k RMS norms, NeoX RoPE on
 * rope.dimension_count of each head, GQA over the KV cache, times sigmoid(gate), attn_output. The
 * indexer's tensors are required (llama.cpp's loader requires them). With a compress ratio r the
 * block is QSA (build_qsa_top_k, build_attn_qsa): the indexer's queries (indexer.q_proj, per-head
 * RMS norm, the attention's RoPE) and raw keys (indexer.k_proj, cached unnormed and unrotated) go
 * to the `qsa_index` op, which pools each whole block of r cached keys (mean, indexer.k_norm, RoPE
 * at the block start; once, kept in a KV layer of its own, a row per block), scores it sum_h relu(q_h . key) and keeps ggml_top_k's top_k + r - 1
 * positions (the tail block always); the attention sees those positions only (its selection of
 * blocks of 1, one copy per KV head after the queries).
 */
function gatedAttention(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, h: number, out: number, keys: Qwen4ExpKeys): void {
  const { need } = tensorLookup(hp, tensors);
  for (const n of ['indexer.q_proj.weight', 'indexer.k_proj.weight', 'indexer.q_norm.weight', 'indexer.k_norm.weight']) need(t(il, n));
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key length ${hd} and value length ${hp.headDimV} differ`);
  const H = hp.nHead[il];
  const Hkv = hp.nHeadKv[il];
  if (Hkv < 1 || H % Hkv !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
  const qg = p.buf(`qg${2 * H * hd}`, 2 * H * hd);
  const ratio = keys.ratios[il];
  const W = keys.topK + ratio - 1;
  // QSA: the selection (W positions per KV head) rides after the queries.
  const q = ratio > 0 ? p.buf(`qsa_q${H * hd}_${Hkv}x${W}`, H * hd + Hkv * W) : p.buf(`q${H * hd}`, H * hd);
  const g = p.buf(`gate${H * hd}`, H * hd);
  const k = p.buf(`k${Hkv * hd}`, Hkv * hd);
  const v = p.buf(`v${Hkv * hd}`, Hkv * hd);
  const attn = p.buf(`attn${H * hd}`, H * hd);
  p.op('matmul', qg, { a: h, weights: { weight: need(t(il, 'attn_q.weight')) } });
  p.op('matmul', k, { a: h, weights: { weight: need(t(il, 'attn_k.weight')) } });
  p.op('matmul', v, { a: h, weights: { weight: need(t(il, 'attn_v.weight')) } });
  const { layer, scale } = gatedQueryKeys(p, hp, il, need, { qg, q, gate: g, k }, H, Hkv, hd);
  const sel: Record<string, number> = {};
  if (ratio > 0) {
    const { idxHeads: nI, idxDim: dI } = keys;
    const iq = p.buf(`qsa_iq${nI * dI}`, nI * dI);
    const ik = p.buf(`qsa_ik${dI}`, dI);
    p.op('matmul', iq, { a: h, weights: { weight: need(t(il, 'indexer.q_proj.weight')) } });
    p.op('head_rms_norm', iq, { a: iq, weights: { weight: need(t(il, 'indexer.q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: dI, n_head: nI } });
    p.op('rope', iq, { a: iq, params: { ...ropeParams(hp, true), head_dim: dI, n_head: nI } });
    p.op('matmul', ik, { a: h, weights: { weight: need(t(il, 'indexer.k_proj.weight')) } });
    p.op('qsa_index', q, {
      a: iq,
      b: ik,
      weights: { weight: need(t(il, 'indexer.k_norm.weight')) },
      params: { ...ropeParams(hp, true), layer: p.kvLayer(dI, 0), block_layer: p.kvLayer(dI, 0), n_head: nI, head_dim: dI, top_k: keys.topK, ratio, eps: hp.rmsEps, out_off: H * hd, repeat: Hkv },
    });
    Object.assign(sel, { sel_off: H * hd, top_k: W, block: 1 });
  }
  p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale, ...sel } });
  p.op('sigmoid_mul', attn, { a: attn, b: g, params: { per_element: 1 } });
  p.op('matmul', out, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
}
