import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { ProgramBuilder } from '../program-builder';
import { mtpBlock, tensorLookup, trunkLayers } from './deepseek2';
import { hcStreams } from './hy-v4';
import { SWIGLU_LIMIT_EPS } from './llama-moe';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** The two compressed-attention kinds llama.cpp's loader takes: CSA (with the indexer) and HCA. */
const CSA = 4;
const HCA = 128;

interface Dsv4Keys {
  nTrunk: number;
  head: number;
  rope: number;
  window: number;
  oGroups: number;
  oLora: number;
  ratios: number[];
  compressBase: number;
  idx: { nHead: number; headDim: number; topK: number };
  hc: { n: number; iters: number; eps: number };
  hashLayers: number;
  normW: boolean;
  wScale: number;
  limitExp: number[];
  limitShexp: number[];
}

/**
 * deepseek4's keys as llama.cpp's loader (src/models/deepseek4.cpp load_arch_hparams) reads them,
 * its refusals as EngineErrors: the q LoRA rank, sliding window, expert sizes and routing
 * (expert_gating_func 4, sqrt-softplus, is the only one it runs), the SwiGLU clamps (the shared
 * experts' default to the routed ones'), the indexer, output groups and LoRA rank, the compress
 * ratios (one per block, MTP blocks included, each 0, 4 or 128) and RoPE base, the
 * hyper-connections (4 streams: its graph asserts it) and the hash-routed block count.
 */
function readDeepseek4(hp: HParams): Dsv4Keys {
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  for (const k of ['attention.q_lora_rank', 'attention.sliding_window', 'expert_shared_count', 'expert_weights_scale', 'expert_weights_norm', 'swiglu_clamp_exp', 'attention.indexer.head_count', 'attention.indexer.key_length', 'attention.indexer.top_k', 'attention.output_group_count', 'attention.output_lora_rank', 'attention.compress_rope_freq_base', 'attention.compress_ratios', 'hyper_connection.count', 'hyper_connection.sinkhorn_iterations', 'hyper_connection.epsilon', 'hash_layer_count', 'expert_gating_func'])
    if (!md.has(k)) bad(`the file lacks ${hp.arch}.${k}, which llama.cpp's loader requires`);
  if (md.int('expert_gating_func', undefined, 0, 1 << 16) !== 4) bad(`expert_gating_func ${md.num('expert_gating_func')} is not 4 (sqrtsoftplus), the only routing llama.cpp's loader takes`);
  const nTrunk = trunkLayers(hp);
  const head = hp.headDimK;
  const rope = hp.ropeDims;
  if (hp.headDimV !== head) bad(`value_length ${hp.headDimV} differs from key_length ${head}: one row is both key and value`);
  if (!(rope >= 2 && rope % 2 === 0 && rope <= head)) bad(`rope.dimension_count ${rope} must be even and within the head of ${head}`);
  const raw = md.kv[`${hp.arch}.attention.compress_ratios`];
  const ratios = typeof raw === 'object' && raw !== null && 'length' in (raw as object) ? Array.from(raw as ArrayLike<unknown>, (x) => Number(x)) : [];
  if (ratios.length < hp.nLayer) bad(`attention.compress_ratios has ${ratios.length} entries, fewer than block_count ${hp.nLayer}`);
  ratios.slice(0, nTrunk).forEach((r, i) => {
    if (r !== 0 && r !== CSA && r !== HCA) bad(`block ${i}'s compress ratio ${r} is not 0, 4 or 128 (the only ones llama.cpp's loader takes)`);
  });
  const idx = {
    nHead: md.int('attention.indexer.head_count', undefined, 1, MAX_DIM),
    headDim: md.int('attention.indexer.key_length', undefined, 1, MAX_DIM),
    topK: md.int('attention.indexer.top_k', undefined, 1, 1 << 24),
  };
  if (ratios.slice(0, nTrunk).includes(CSA) && (idx.headDim < 64 || (idx.headDim & (idx.headDim - 1)) !== 0 || idx.headDim < rope))
    bad(`attention.indexer.key_length ${idx.headDim} must be a power of two of at least 64 that holds the ${rope} rotary dimensions`);
  const hc = { n: md.int('hyper_connection.count', undefined, 1, 64), iters: md.int('hyper_connection.sinkhorn_iterations', undefined, 1, 1000), eps: md.num('hyper_connection.epsilon') };
  if (hc.n !== 4) bad(`hyper_connection.count ${hc.n}: llama.cpp's graph runs 4 streams only`);
  if (!(Number.isFinite(hc.eps) && hc.eps >= 0)) bad(`hyper_connection.epsilon ${hc.eps} must be a finite non-negative number`);
  const oGroups = md.int('attention.output_group_count', undefined, 1, MAX_DIM);
  const oLora = md.int('attention.output_lora_rank', undefined, 1, MAX_DIM);
  const limitExp = md.perLayerNum('swiglu_clamp_exp', hp.nLayer, undefined);
  const limitShexp = md.has('swiglu_clamp_shexp') ? md.perLayerNum('swiglu_clamp_shexp', hp.nLayer, undefined) : limitExp;
  return {
    nTrunk,
    head,
    rope,
    window: md.int('attention.sliding_window', undefined, 1, 1 << 30),
    oGroups,
    oLora,
    ratios,
    compressBase: md.num('attention.compress_rope_freq_base'),
    idx,
    hc,
    hashLayers: md.int('hash_layer_count', undefined, 0, MAX_LAYERS),
    normW: md.bool('expert_weights_norm', false),
    wScale: md.num('expert_weights_scale'),
    limitExp,
    limitShexp,
  };
}

/**
 * DeepSeek-V4 (`deepseek4`, llama.cpp src/models/deepseek4.cpp).
 *
 * Hyper-connections: 4 residual streams (each the token's embedding at first). Before each
 * sublayer the streams are RMS-normed as one row (no weight) and projected by hc_{attn,ffn}_fn to
 * (2 + 4) x 4 mixes: pre_i = sigmoid(mix_i scale[0] + base_i) + eps (`hc_gates`) weighs the
 * streams into the sublayer's input; after it (`dsv4_hc_post`) stream dst becomes y post_dst +
 * sum_src stream_src comb[dst, src], post = 2 sigmoid(mix scale[1] + base), comb the Sinkhorn
 * normalization (sinkhorn_iterations) of the last 16 mixes. The head collapses the streams with
 * output_hc_* (pre only) before the output norm.
 *
 * Attention: q = per-head RMS norm (no weight) of attn_q_b(rms_norm(attn_q_a(h))), one shared
 * row kv = attn_kv_a_norm(attn_kv(h)) that is both key and value, both rotated on their last
 * rope.dimension_count dims (compressing blocks: compress_rope_freq_base with the file's YaRN;
 * others: rope.freq_base, unscaled); per head softmax (with a sink logit) over the last
 * sliding_window rows and the compressed rows the block sees, then the output rotated back
 * (ggml_rope_ext_back) and projected by the grouped LoRA attn_output_a (output_group_count
 * groups of heads) and attn_output_b. Compressed rows (`dsv4_compress`): at each block of the
 * ratio's positions, a per-dimension softmax (scores attn_compressor_gate(h) plus a position bias)
 * over attn_compressor_kv(h) rows, RMS-normed and rotated at the block's first position. HCA
 * blocks (ratio 128) see every completed block; CSA blocks (ratio 4, overlapping: each entry also
 * folds the previous block's first halves) see the top_k entries of a lightning indexer whose
 * keys come from a compressor of their own (`dsa_index` with ratio 4; queries from the q LoRA
 * latent rotated by the compress RoPE, both Hadamard-rotated as llama.cpp does).
 *
 * FFN: routed experts by sqrt(softplus) of the router logits (+ exp_probs_b for selection), or
 * on the first hash_layer_count blocks the token's experts from ffn_gate_tid2eid; renormalized
 * and scaled; SwiGLU clamped as ggml_swiglu_clamp (swiglu_clamp_exp, and swiglu_clamp_shexp for
 * the shared experts).
 *
 * The program's hidden rows are the head's normed input (llama.cpp's result_norm: what embeddings
 * read), or with `nextnHidden` the final hc x n_embd streams, flattened (llama.cpp's h_nextn: what
 * the MTP block, buildDeepseek4Mtp, reads); the logits are the same either way.
 */
export function buildDeepseek4(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: { nextnHidden?: boolean } = {}): ModelProgram {
  return dsv4Program(hp, tensors, opt.nextnHidden ? 'nextn' : 'trunk');
}

/**
 * DeepSeek-V4's MTP block (the first of nextn_predict_layers, block index n_layer) as a draft
 * model of its own, as llama.cpp's deepseek4 graph_mtp computes it: row t takes token x_t and the
 * target's final streams of the position before (batch.embd, hc x n_embd: the trunk's h_nextn,
 * buildDeepseek4 with nextnHidden; zeros for position 0). Each stream becomes eh_proj
 * [enorm(embed(x_t)); hnorm(stream)] (the normed embedding repeated over the streams), then one
 * block with hyper-connections as the trunk's window-only blocks run it (raw attention over the
 * block's own cache of the last sliding_window rows, with sinks; sqrt-softplus experts + the shared
 * expert); the head collapses its streams with output_hc_* and norms them with
 * nextn.shared_head_norm (else output_norm) before nextn.shared_head_head (else output). Its hidden
 * rows are its own final streams (the next chained step's input). Refused as llama.cpp's graph
 * asserts: more than one MTP block, a compressing or hash-routed MTP block; and (where llama.cpp
 * gives NaNs from the first row on) an RMS epsilon of 0.
 */
export function buildDeepseek4Mtp(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  return dsv4Program(hp, tensors, 'mtp');
}

function dsv4Program(hp: HParams, tensors: Map<string, GgufTensorInfo>, mode: 'trunk' | 'nextn' | 'mtp'): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const k = readDeepseek4(hp);
  const blocks = mode === 'mtp' ? [dsv4MtpBlock(hp, tensors, k)] : Array.from({ length: k.nTrunk }, (_, il) => il);
  const { head: D, rope: R, hc: hcs, idx } = k;
  const d = hp.nEmbd;
  const hc = hcs.n;
  const W = hc * d;
  const nMix = (2 + hc) * hc;
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_count and expert_used_count must be > 0`);
  const f32 = Math.fround;
  const kqScale = f32(1 / f32(Math.sqrt(D)));
  // The compressing blocks' RoPE (compress base, the file's YaRN with a pure rotation's magnitude)
  // and the others' (rope.freq_base, unscaled).
  const ext = hp.ropeYarn.extFactor;
  const fs = hp.ropeFreqScale;
  const ropeComp = {
    neox: false, freq_base: k.compressBase, freq_scale: fs, ext_factor: ext,
    attn_factor: ext === 0 ? 1 : f32(1 / f32(1 + f32(0.1 * Math.log(1 / fs)))),
    beta_fast: hp.ropeYarn.betaFast, beta_slow: hp.ropeYarn.betaSlow, n_ctx_orig: hp.ropeYarn.nCtxOrig,
  };
  const ropePlain = { neox: false, freq_base: hp.ropeFreqBase, freq_scale: 1, ext_factor: 0, attn_factor: 1, beta_fast: 0, beta_slow: 0, n_ctx_orig: 0 };

  const p = new ProgramBuilder();
  const mtpIl = mode === 'mtp' ? blocks[0] : -1;
  const { x, e, h, tmp, gates, reduce } = hcStreams(p, hp, need, hc, hcs.eps, mode === 'mtp' ? { embd: maybe(t(mtpIl, 'nextn.embed_tokens.weight')), streams: false } : {});
  const mix = p.buf(`hc_mix${nMix}`, nMix);
  const mixHead = p.buf(`hc_mix${hc}`, hc);

  // h = sum_i pre_i * stream_i from the streams' norm projected by fn.
  const hcPre = (fn: string, scale: string, base: string, into: number) => {
    gates(fn, scale, base, into);
    reduce();
  };
  // The shapes llama.cpp's loader pins that no op's own checks do (trailing 1s aside).
  const shaped = (name: string, dims: number[]): string => {
    const got = [...tensors.get(need(name))!.dims];
    while (got.length > dims.length && got[got.length - 1] === 1) got.pop();
    if (got.length !== dims.length || got.some((v, i) => v !== dims[i])) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: tensor '${name}' is [${got.join(', ')}], expected [${dims.join(', ')}]`);
    return name;
  };
  shaped('output_hc_base.weight', [hc]);
  shaped('output_hc_scale.weight', [1]);
  for (const il of blocks)
    for (const s of ['attn', 'ffn']) {
      shaped(t(il, `hc_${s}_base.weight`), [nMix]);
      shaped(t(il, `hc_${s}_scale.weight`), [3]);
    }
  const nVocab = tensors.get(need('token_embd.weight'))!.dims[1];
  for (const il of blocks) if (il < k.hashLayers) shaped(t(il, 'ffn_gate_tid2eid.weight'), [hp.nExpertUsed, nVocab]);
  if (mode === 'mtp') {
    // The MTP input: each stream eh_proj [enorm(embed(x_t)); hnorm(the target's stream)].
    const il = mtpIl;
    for (const n of ['nextn.enorm.weight', 'nextn.hnorm.weight']) shaped(t(il, n), [d]);
    shaped(t(il, 'nextn.eh_proj.weight'), [2 * d, d]);
    const hin = p.buf(`mtp_h_in${W}`, W);
    const hs = p.buf('mtp_h_stream', d);
    const cat = p.buf('mtp_concat', 2 * d);
    p.op('input', hin);
    p.op('rms_norm', e, { a: e, weights: { weight: need(t(il, 'nextn.enorm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('copy', cat, { a: e, params: { n: d } });
    for (let i = 0; i < hc; i++) {
      p.op('copy', hs, { a: hin, params: { n: d, a_off: i * d } });
      p.op('rms_norm', hs, { a: hs, weights: { weight: need(t(il, 'nextn.hnorm.weight')) }, params: { eps: hp.rmsEps } });
      p.op('copy', cat, { a: hs, params: { n: d, out_off: d } });
      p.op('matmul', tmp, { a: cat, weights: { weight: need(t(il, 'nextn.eh_proj.weight')) } });
      p.op('copy', x, { a: tmp, params: { n: d, out_off: i * d } });
    }
  }
  const hcPost = (y: number, scale: string, base: string) =>
    p.op('dsv4_hc_post', x, { a: y, b: x, c: mix, weights: { scale: need(scale), base: need(base) }, params: { n: hc, eps: hcs.eps, iters: hcs.iters } });

  const H0 = hp.nHead[0];
  if (H0 % k.oGroups !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${H0} heads do not split into ${k.oGroups} output groups`);
  const qLoraW = tensors.get(need(t(blocks[0], 'attn_q_a.weight')))!.dims[1];
  const qr = p.buf(`q_a${qLoraW}`, qLoraW);
  const q = p.buf(`q${H0}x${D}`, H0 * D);
  const kv = p.buf(`kv${D}`, D);
  const attn = p.buf(`attn${H0}x${D}`, H0 * D);
  const oa = p.buf(`o_a${k.oGroups * k.oLora}`, k.oGroups * k.oLora);
  const attnOut = p.buf('attn_out', d);
  const ffnOut = p.buf('ffn_out', d);
  const comp = p.buf(`comp${D}`, D);
  for (const il of blocks) {
    if (hp.nHead[il] !== H0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has ${hp.nHead[il]} heads, block 0 ${H0}: the loader reads one head count`);
    const ratio = k.ratios[il];
    const ropeL = ratio !== 0 ? ropeComp : ropePlain;
    hcPre(t(il, 'hc_attn_fn.weight'), t(il, 'hc_attn_scale.weight'), t(il, 'hc_attn_base.weight'), mix);
    p.op('rms_norm', h, { a: h, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('matmul', qr, { a: h, weights: { weight: need(t(il, 'attn_q_a.weight')) } });
    p.op('rms_norm', qr, { a: qr, weights: { weight: need(t(il, 'attn_q_a_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('matmul', q, { a: qr, weights: { weight: need(t(il, 'attn_q_b.weight')) } });
    p.op('head_rms_norm', q, { a: q, params: { eps: hp.rmsEps, head_dim: D, n_head: H0 } });
    p.op('rope', q, { a: q, params: { ...ropeL, n_dims: R, head_dim: D, n_head: H0, rot_off: D - R } });
    p.op('matmul', kv, { a: h, weights: { weight: need(t(il, 'attn_kv.weight')) } });
    p.op('rms_norm', kv, { a: kv, weights: { weight: need(t(il, 'attn_kv_a_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('rope', kv, { a: kv, params: { ...ropeL, n_dims: R, head_dim: D, n_head: 1, rot_off: D - R } });
    let compLayer: number | undefined;
    let sel: number | undefined;
    if (ratio !== 0) {
      const overlap = ratio === CSA;
      const cw = (overlap ? 2 : 1) * D;
      const ckv = p.buf(`comp_kv${cw}`, cw);
      const cs = p.buf(`comp_score${cw}`, cw);
      p.op('matmul', ckv, { a: h, weights: { weight: need(t(il, 'attn_compressor_kv.weight')) } });
      p.op('matmul', cs, { a: h, weights: { weight: need(t(il, 'attn_compressor_gate.weight')) } });
      compLayer = p.kvLayer(D, 0);
      p.op('dsv4_compress', comp, {
        a: ckv, b: cs,
        weights: { ape: need(t(il, 'attn_compressor_ape.weight')), norm: need(t(il, 'attn_compressor_norm.weight')) },
        params: { ...ropeComp, layer: p.kvLayer(2 * cw, 0), out_layer: compLayer, ratio, overlap: overlap ? 1 : 0, head_dim: D, eps: hp.rmsEps, n_dims: R, n_head: 1, rot_off: D - R },
      });
      if (ratio === CSA) sel = dsv4Indexer(p, hp, tensors, il, k, ropeComp, qr, h);
    }
    p.op('dsv4_attention', attn, {
      a: q, b: kv, ...(sel !== undefined ? { c: sel } : {}),
      weights: { sinks: need(t(il, 'attn_sinks.weight')) },
      params: { layer: p.kvLayer(D, 0), n_head: H0, head_dim: D, window: k.window, scale: kqScale, ...(compLayer !== undefined ? { ratio, comp_layer: compLayer } : {}), ...(sel !== undefined ? { top_k: idx.topK } : {}) },
    });
    p.op('rope', attn, { a: attn, params: { ...ropeL, n_dims: R, head_dim: D, n_head: H0, rot_off: D - R, inverse: 1 } });
    p.op('matmul', oa, { a: attn, weights: { weight: need(t(il, 'attn_output_a.weight')) }, params: { groups: k.oGroups } });
    p.op('matmul', attnOut, { a: oa, weights: { weight: need(t(il, 'attn_output_b.weight')) } });
    hcPost(attnOut, t(il, 'hc_attn_scale.weight'), t(il, 'hc_attn_base.weight'));

    hcPre(t(il, 'hc_ffn_fn.weight'), t(il, 'hc_ffn_scale.weight'), t(il, 'hc_ffn_base.weight'), mix);
    p.op('rms_norm', h, { a: h, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const hash = il < k.hashLayers;
    const limE = k.limitExp[il];
    p.op('moe', ffnOut, {
      a: h,
      weights: {
        gate_inp: need(t(il, 'ffn_gate_inp.weight')),
        ...(hash ? { tid2eid: need(t(il, 'ffn_gate_tid2eid.weight')) } : { exp_probs_b: need(t(il, 'exp_probs_b.bias')) }),
        gate_exps: need(t(il, 'ffn_gate_exps.weight')),
        up_exps: need(t(il, 'ffn_up_exps.weight')),
        down_exps: need(t(il, 'ffn_down_exps.weight')),
      },
      params: {
        n_expert: hp.nExpert, n_expert_used: hp.nExpertUsed, gating: 4, norm_w: k.normW, w_scale: k.wScale, moe_layer: p.moeLayer(hp.nExpert),
        ...(limE > SWIGLU_LIMIT_EPS ? { act: 7, limit: limE } : {}),
      },
    });
    const ff = tensors.get(need(t(il, 'ffn_up_shexp.weight')))!.dims[1];
    const g = p.buf(`ffn_gate${ff}`, ff);
    const u = p.buf(`ffn_up${ff}`, ff);
    const so = p.buf('sh_out', d);
    const limS = k.limitShexp[il];
    p.op('matmul', g, { a: h, weights: { weight: need(t(il, 'ffn_gate_shexp.weight')) } });
    p.op('matmul', u, { a: h, weights: { weight: need(t(il, 'ffn_up_shexp.weight')) } });
    p.op('swiglu', g, { a: g, b: u, ...(limS > SWIGLU_LIMIT_EPS ? { params: { limit: limS, clamp_gate: 1 } } : {}) });
    p.op('matmul', so, { a: g, weights: { weight: need(t(il, 'ffn_down_shexp.weight')) } });
    p.op('add', ffnOut, { a: ffnOut, b: so });
    hcPost(ffnOut, t(il, 'hc_ffn_scale.weight'), t(il, 'hc_ffn_base.weight'));
  }

  // The head: the streams collapsed by output_hc_fn / scale / base (pre coefficients only), the
  // output norm (the MTP block's shared_head_norm) and head (its shared_head_head), untied.
  hcPre('output_hc_fn.weight', 'output_hc_scale.weight', 'output_hc_base.weight', mixHead);
  const hid = p.buf('h_norm', d);
  const normW = (mode === 'mtp' ? maybe(t(mtpIl, 'nextn.shared_head_norm.weight')) : undefined) ?? need('output_norm.weight');
  p.op('rms_norm', hid, { a: h, weights: { weight: normW }, params: { eps: hp.rmsEps } });
  p.hidden(mode === 'trunk' ? hid : x);
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: hid });
  const head = (mode === 'mtp' ? maybe(t(mtpIl, 'nextn.shared_head_head.weight')) : undefined) ?? need('output.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}

/** The MTP block's index, refused as llama.cpp's deepseek4 graph_mtp refuses it (its GGML_ASSERTs abort). */
function dsv4MtpBlock(hp: HParams, tensors: Map<string, GgufTensorInfo>, k: Dsv4Keys): number {
  const il = mtpBlock(hp, tensors);
  if (il < 0) throw new EngineError('KAIL_E_INVALID_ARG', `${hp.arch}: the file carries no multi-token-prediction block (nextn_predict_layers and blk.N.nextn.* tensors)`);
  const n = hp.meta.int('nextn_predict_layers', 0, 0, MAX_LAYERS);
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (n !== 1) bad(`nextn_predict_layers ${n}: llama.cpp's deepseek4 MTP graph runs a single MTP block`);
  if (k.ratios[il] !== 0) bad(`the MTP block (block ${il}) has compress ratio ${k.ratios[il]}: llama.cpp's deepseek4 MTP graph runs window attention only (ratio 0)`);
  // (A zero epsilon would norm the first row's zero hidden state to 0/0, and every later row attends to it.)
  if (!(hp.rmsEps > 0)) bad(`layer_norm_rms_epsilon ${hp.rmsEps}: the MTP block norms the zero hidden state of position 0, which needs an epsilon > 0`);
  if (il < k.hashLayers) bad(`the MTP block (block ${il}) is hash-routed (hash_layer_count ${k.hashLayers}): llama.cpp's deepseek4 MTP graph does not run hash-routed MTP blocks`);
  return il;
}

/**
 * A CSA block's lightning indexer: queries from the q LoRA latent (indexer.attn_q_b, rotated by
 * the compress RoPE at the token's position), keys from the indexer's own compressor (ratio 4,
 * overlapping), both Hadamard-rotated; per-head weights indexer.proj(h) / sqrt(heads x head size).
 * `dsa_index` (ratio 4: only block ends are candidates) writes the top_k positions into the
 * returned buffer.
 */
function dsv4Indexer(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, k: Dsv4Keys, rope: Record<string, number | boolean>, qr: number, h: number): number {
  const { need } = tensorLookup(hp, tensors);
  const { nHead: nh, headDim: hd, topK } = k.idx;
  const R = k.rope;
  const sel = p.buf(`dsa_sel${topK}`, topK);
  const iq = p.buf(`dsa_q${nh * hd}`, nh * hd);
  const iw = p.buf(`dsa_w${nh}`, nh);
  const ikv = p.buf(`idx_kv${2 * hd}`, 2 * hd);
  const isc = p.buf(`idx_score${2 * hd}`, 2 * hd);
  const ik = p.buf(`dsa_k${hd}`, hd);
  p.op('matmul', iq, { a: qr, weights: { weight: need(t(il, 'indexer.attn_q_b.weight')) } });
  p.op('rope', iq, { a: iq, params: { ...rope, n_dims: R, head_dim: hd, n_head: nh, rot_off: hd - R } });
  p.op('hadamard', iq, { a: iq, params: { n: hd } });
  p.op('matmul', iw, { a: h, weights: { weight: need(t(il, 'indexer.proj.weight')) } });
  p.op('scale', iw, { a: iw, params: { scale: Math.fround(1 / Math.fround(Math.sqrt(hd * nh))) } });
  p.op('matmul', ikv, { a: h, weights: { weight: need(t(il, 'indexer_compressor_kv.weight')) } });
  p.op('matmul', isc, { a: h, weights: { weight: need(t(il, 'indexer_compressor_gate.weight')) } });
  p.op('dsv4_compress', ik, {
    a: ikv, b: isc,
    weights: { ape: need(t(il, 'indexer_compressor_ape.weight')), norm: need(t(il, 'indexer_compressor_norm.weight')) },
    params: { ...rope, layer: p.kvLayer(4 * hd, 0), ratio: CSA, overlap: 1, head_dim: hd, eps: hp.rmsEps, n_dims: R, n_head: 1, rot_off: hd - R },
  });
  p.op('hadamard', ik, { a: ik, params: { n: hd } });
  p.op('dsa_index', sel, { a: iq, b: ik, c: iw, params: { layer: p.kvLayer(hd, 0), n_head: nh, head_dim: hd, top_k: topK, ratio: CSA } });
  return sel;
}
