import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_EXPERTS, MAX_LAYERS, type HParams } from '../hparams';
import { ProgramBuilder, qkvProjections, ropeParams, withBias, yarnAttnFactor } from '../program-builder';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** llama.cpp's `expert_gating_func` values. */
export const GATING_SOFTMAX = 1;
export const GATING_SIGMOID = 2;

export interface Deepseek2Options {
  /**
   * Run MLA in its naive form (decompress every cached latent into per-head K/V) instead of the
   * absorbed one. For tests that check the two agree; default false.
   */
  naiveMla?: boolean;
  /**
   * The context of one sequence. deepseek32 with a context no longer than the indexer's top-k
   * selects every position for every query: the indexer is left out (dense MLA, the same logits).
   */
  nCtxSeq?: number;
}

/** Tensor lookup that names the architecture in its errors. */
export function tensorLookup(hp: HParams, tensors: Map<string, GgufTensorInfo>) {
  const need = (name: string): string => {
    if (!tensors.has(name)) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks tensor '${name}', which the ${hp.arch} architecture requires`);
    return name;
  };
  const maybe = (name: string): string | undefined => (tensors.has(name) ? name : undefined);
  return { need, maybe };
}

/**
 * Blocks of the main model: block_count includes the multi-token-prediction (NextN) blocks that
 * GLM-4.5 and some deepseek2 files append, which llama.cpp leaves out of the decoder graph.
 */
export function trunkLayers(hp: HParams): number {
  const n = hp.nLayer - hp.meta.int('nextn_predict_layers', 0, 0, MAX_LAYERS);
  if (n < 1) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: nextn_predict_layers leaves no decoder blocks`);
  return n;
}

/** Metadata llama.cpp reads for these architectures that changes the graph in ways kail does not run yet. */
export function refuseUnsupported(hp: HParams): void {
  if (hp.meta.num('attention.temperature_scale', 0) !== 0) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: attention temperature scaling (attention.temperature_scale) is not supported`);
}

/** Routing options of llama.cpp's build_moe_ffn as this file's metadata gives them. */
export interface MoeRouting {
  gating: number;
  normW: boolean;
  wScale: number;
  nGroup: number;
  nGroupUsed: number;
}

/**
 * Routing as llama.cpp builds it for this file. `defaultGating` (llama.cpp's enum: 1 softmax,
 * 2 sigmoid; 0 none) applies when the file has no expert_gating_func; with 0 a file without it is
 * refused (llama.cpp aborts at graph build). `fixed` holds what an architecture's loader hard-codes
 * instead of reading from the file (the keys are then ignored, as llama.cpp ignores them).
 */
export function readMoeRouting(hp: HParams, defaultGating: number, fixed: { gating?: number; normW?: boolean; wScale?: number } = {}): MoeRouting {
  const md = hp.meta;
  const g = fixed.gating ?? (md.int('expert_gating_func', 0, 0, 1 << 16) || defaultGating);
  if (g === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: the file has no expert_gating_func (1 softmax, 2 sigmoid), which this architecture needs`);
  if (g !== GATING_SOFTMAX && g !== GATING_SIGMOID) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: expert_gating_func ${g} is not supported (1 softmax, 2 sigmoid)`);
  const r: MoeRouting = {
    gating: g === GATING_SIGMOID ? 1 : 0,
    normW: fixed.normW ?? md.bool('expert_weights_norm', false),
    wScale: fixed.wScale ?? md.num('expert_weights_scale', 0),
    nGroup: md.int('expert_group_count', 0, 0, MAX_EXPERTS),
    nGroupUsed: md.int('expert_group_used_count', 0, 0, MAX_EXPERTS),
  };
  // Group-limited routing splits the experts into n_group equal groups and keeps n_group_used.
  if (r.nGroup > 1 && (hp.nExpert % r.nGroup !== 0 || r.nGroup > hp.nExpert))
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_group_count ${r.nGroup} does not divide expert_count ${hp.nExpert} into equal groups`);
  if (r.nGroup > 1 && r.nGroupUsed > r.nGroup)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_group_used_count ${r.nGroupUsed} is larger than expert_group_count ${r.nGroup}`);
  return r;
}

/** Which of a routed block's optional parts an architecture's loader reads. */
export interface MoeBlockOptions {
  /** The selection bias exp_probs_b: read when present (default), required, or ignored. */
  probsBias?: 'optional' | 'required' | 'none';
  /** Its tensor name within the block (default exp_probs_b.bias; hy_v3 files have no suffix). */
  probsBiasName?: string;
  /** Ungated shared experts ffn_*_shexp: used when present (default), required, or none. */
  shared?: 'optional' | 'required' | 'none';
  /** Extra `moe` op parameters (Llama 4's w_before, a gate-less activation). */
  moeParams?: Record<string, number>;
  /** Experts with up and down only (the `act` in moeParams says which activation). */
  gateless?: boolean;
  /** The buffer the router reads when it is not the experts' input (a latent MoE's full-width input). */
  routerInput?: number;
  /**
   * A limit on the dense and shared-expert SwiGLU (Step 3.5's swiglu_clamp_shexp: min(silu(gate),
   * L) * clamp(up, -L, L)); 0 or absent: none.
   */
  ffnLimit?: number;
}

/**
 * The FFN half of a DeepSeek/GLM block on `h` into `out`: a dense SwiGLU FFN for the leading dense
 * blocks, else routed experts (optional selection bias `exp_probs_b`) plus ungated shared experts.
 */
export function moeBlockFfn(
  p: ProgramBuilder,
  hp: HParams,
  tensors: Map<string, GgufTensorInfo>,
  il: number,
  h: number,
  out: number,
  routing: MoeRouting,
  dense: boolean,
  opt: MoeBlockOptions = {},
): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const d = hp.nEmbd;
  const swiglu = (prefix: string, suffix: string, into: number) => {
    const ff = tensors.get(need(t(il, `${prefix}_up${suffix}.weight`)))!.dims[1];
    const g = p.buf(`ffn_gate${ff}`, ff);
    const u = p.buf(`ffn_up${ff}`, ff);
    p.op('matmul', g, { a: h, weights: { weight: need(t(il, `${prefix}_gate${suffix}.weight`)) } });
    p.op('matmul', u, { a: h, weights: { weight: need(t(il, `${prefix}_up${suffix}.weight`)) } });
    p.op('swiglu', g, { a: g, b: u, ...(opt.ffnLimit ? { params: { limit: opt.ffnLimit } } : {}) });
    p.op('matmul', into, { a: g, weights: { weight: need(t(il, `${prefix}_down${suffix}.weight`)) } });
  };
  if (dense) {
    swiglu('ffn', '', out);
    return;
  }
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il} has a router but expert_count/expert_used_count are missing`);
  const probsBias = opt.probsBias ?? 'optional';
  const biasName = t(il, opt.probsBiasName ?? 'exp_probs_b.bias');
  const bias = probsBias === 'required' ? need(biasName) : probsBias === 'optional' ? maybe(biasName) : undefined;
  // Gate and up experts fused in one tensor (llama.cpp's create_tensor_gate_up_exps) when the file has no separate gate.
  const gateUp = opt.gateless || tensors.has(t(il, 'ffn_gate_exps.weight')) ? undefined : maybe(t(il, 'ffn_gate_up_exps.weight'));
  p.op('moe', out, {
    a: h,
    ...(opt.routerInput !== undefined ? { b: opt.routerInput } : {}),
    weights: {
      gate_inp: need(t(il, 'ffn_gate_inp.weight')),
      ...(bias ? { exp_probs_b: bias } : {}),
      ...(gateUp ? { gate_exps: gateUp, up_exps: gateUp } : { ...(opt.gateless ? {} : { gate_exps: need(t(il, 'ffn_gate_exps.weight')) }), up_exps: need(t(il, 'ffn_up_exps.weight')) }),
      down_exps: need(t(il, 'ffn_down_exps.weight')),
    },
    params: {
      n_expert: hp.nExpert,
      n_expert_used: hp.nExpertUsed,
      gating: routing.gating,
      norm_w: routing.normW,
      w_scale: routing.wScale,
      n_group: routing.nGroup,
      n_group_used: routing.nGroupUsed,
      moe_layer: p.moeLayer(hp.nExpert),
      ...(gateUp ? { fused_gate_up: 1 } : {}),
      ...opt.moeParams,
    },
  });
  const shared = opt.shared ?? 'optional';
  if (shared === 'required' || (shared === 'optional' && tensors.has(t(il, 'ffn_up_shexp.weight')))) {
    const so = p.buf('sh_out', d);
    swiglu('ffn', '_shexp', so);
    p.op('add', out, { a: out, b: so });
  }
}

/**
 * The normalized final hidden state of every position (output_norm of the residual: what the head
 * reads, llama.cpp's result_norm) as the program's `hidden`: embeddings pool it, and a
 * multi-token-prediction block reads it (llama.cpp's h_nextn). Returns the kept rows of it, which
 * the head reads: the norm is row by row, so they are the same bits as norming the kept rows.
 */
export function hiddenOutput(p: ProgramBuilder, hp: HParams, need: (name: string) => string, x: number, normBias?: string, normName = 'output_norm.weight', layerNormEps?: number): number {
  const hid = p.buf('h_norm', hp.nEmbd);
  const weights = withBias(need(normName), normBias);
  if (layerNormEps !== undefined) p.op('layer_norm', hid, { a: x, weights, params: { eps: layerNormEps } });
  else p.op('rms_norm', hid, { a: x, weights, params: { eps: hp.rmsEps } });
  p.hidden(hid);
  const ho = p.buf('h_out', hp.nEmbd, true);
  p.op('gather_out', ho, { a: hid });
  return ho;
}

/**
 * Output norm (RMS, or with `layerNorm` its epsilon a LayerNorm) and head (tied to the embedding
 * when output.weight is absent, or always with `tied`; `untied`: output.weight required) over the
 * kept rows, and the hidden output; the logits times `scale` when given (Grok's logit_scale), then
 * tanh soft-capped by `softcap` when it is positive (Gemma, Grok-2).
 */
export function outputHead(
  p: ProgramBuilder,
  hp: HParams,
  tensors: Map<string, GgufTensorInfo>,
  x: number,
  normName = 'output_norm.weight',
  opts: { tied?: boolean; untied?: boolean; softcap?: number; scale?: number; layerNorm?: number } = {},
): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const ho = hiddenOutput(p, hp, need, x, undefined, normName, opts.layerNorm);
  const head = opts.untied ? need('output.weight') : ((opts.tied ? undefined : maybe('output.weight')) ?? need('token_embd.weight'));
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  if (opts.scale !== undefined) p.op('scale', logits, { a: logits, params: { scale: opts.scale } });
  if (opts.softcap && opts.softcap > 0) p.op('softcap', logits, { a: logits, params: { cap: opts.softcap } });
  return p.build(logits);
}

/** MLA dimensions of a deepseek2 file (llama.cpp load_hparams). */
export interface MlaDims {
  qLora: number;
  kvLora: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
}

export function readMlaDims(hp: HParams): MlaDims {
  const md = hp.meta;
  // Files with the split attn_k_b/attn_v_b layout carry the per-head sizes in *_mla keys (their
  // key_length/value_length then describe the latent cache).
  const mla = md.has('attention.key_length_mla') && md.has('attention.value_length_mla');
  const qkHead = mla ? md.int('attention.key_length_mla', undefined, 1, MAX_DIM) : hp.headDimK;
  const vHead = mla ? md.int('attention.value_length_mla', undefined, 1, MAX_DIM) : hp.headDimV;
  const qkRope = hp.ropeDims;
  const dims = { qLora: md.int('attention.q_lora_rank', 0, 0, MAX_DIM), kvLora: md.int('attention.kv_lora_rank', undefined, 1, MAX_DIM), qkNope: qkHead - qkRope, qkRope, vHead };
  if (dims.qkNope < 1 || dims.qkRope < 2 || dims.qkRope % 2 !== 0 || dims.kvLora < 1 || dims.vHead < 1)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: inconsistent MLA sizes (key ${qkHead}, rope ${qkRope}, kv_lora ${dims.kvLora}, value ${vHead})`);
  return dims;
}

/**
 * The YaRN scales DeepSeek uses: cos/sin unscaled (the rope's own magnitude factor is cancelled)
 * and the whole correction mscale² in the attention scale, mscale = 1 + 0.1·mscale_all_dim·ln(factor)
 * (the file stores 0.1·mscale_all_dim as rope.scaling.yarn_log_multiplier). As llama.cpp's
 * llama_context + deepseek2 graph compute them.
 */
export function deepseekYarn(hp: HParams, headK: number, readLogMul = true): { ropeAttnFactor: number; kqScale: number } {
  // (glm-dsa's loader does not read the multiplier: 0 there.)
  const logMul = readLogMul ? hp.meta.num('rope.scaling.yarn_log_multiplier', 0) / 0.1 : 0; // mscale_all_dim
  // Without YaRN llama.cpp's attn_factor is rope.scaling.attn_factor alone, and the graph still
  // pre-scales kq_scale with it (and with 1/freq_scale when linear scaling is on).
  const a = yarnAttnFactor(hp, logMul);
  const f32 = Math.fround;
  const org = f32(a * f32(1 + 0.1 * Math.log(1 / hp.ropeFreqScale)));
  const mscale = f32(org * f32(1 + 0.1 * logMul * Math.log(1 / hp.ropeFreqScale)));
  return { ropeAttnFactor: a, kqScale: f32((mscale * mscale) / Math.sqrt(headK)) };
}

/**
 * GLM-4.7-Flash converted as deepseek2 before the converter wrote expert_gating_func: llama.cpp
 * recognizes it by 47 or 48 decoder blocks and a 154880-token vocabulary and routes with sigmoid.
 */
function isGlm47Lite(hp: HParams): boolean {
  const n = trunkLayers(hp);
  const vocab = hp.meta.has('vocab_size') ? hp.meta.num('vocab_size') : ((hp.meta.kv['tokenizer.ggml.tokens'] as unknown[] | undefined)?.length ?? 0);
  return (n === 47 || n === 48) && vocab === 154880;
}

/** What one MLA block needs besides the builder: sizes, scales and RoPE parameters of the file. */
export interface MlaBlockContext {
  hp: HParams;
  tensors: Map<string, GgufTensorInfo>;
  dims: MlaDims;
  routing: MoeRouting;
  nDense: number;
  kqScale: number;
  rope: Record<string, number | boolean>;
  naive: boolean;
  /** The lightning indexer (DSA) of deepseek32, glm-dsa and dots3note files. */
  dsa?: DsaParams;
  /**
   * Blocks of their own MLA geometry (dots3note's sliding and full blocks): per block its sizes,
   * scale, RoPE, sliding window (0: none) and whether its indexer runs; absent: the context's own
   * for every block, the indexer (when the file has one) on each.
   */
  blockShape?: (il: number) => MlaBlockShape;
  /** dots3note: attn_k_norm, an RMS norm of the shared RoPE key before its rotation. */
  kRopeNorm?: boolean;
  /** dots3note (as step35): a sigmoid gate per head, attn_gate of the normed input, on the attention output. */
  headGate?: boolean;
  /** What the routed blocks' loader requires (default: selection bias and shared experts used when present). */
  moeOptions?: MoeBlockOptions;
  /** Per block, where they differ (bailingmoe3's per-block SwiGLU limits); else moeOptions. */
  moeOptionsAt?: (il: number) => MoeBlockOptions;
  /** RoPE frequency factors of the query and key rotations (MiniCPM3's LongRoPE table). */
  ropeFactors?: string;
  /** MiniCPM3: the attention and FFN outputs times this before their residual adds. */
  residualScale?: number;
  /** PLM: the dense FFN is ungated, ffn_up -> squared ReLU -> ffn_down. */
  relu2Ffn?: boolean;
}

/** One block's MLA geometry where blocks differ (see MlaBlockContext.blockShape). */
export interface MlaBlockShape {
  dims: MlaDims;
  kqScale: number;
  rope: Record<string, number | boolean>;
  window: number;
  indexed: boolean;
}

export interface DsaParams {
  nHead: number;
  headDim: number;
  topK: number;
  /** NeoX RoPE on the indexer's rotary dims (deepseek32), or adjacent pairs (glm-dsa). */
  neox: boolean;
  /** The indexer key's LayerNorm epsilon: 1e-6 in deepseek32; glm-dsa's loader leaves it 0. */
  eps: number;
  /** Per block: its own indexer (full), or the selection of the last full block before it (shared). */
  full: boolean[];
}

/**
 * GLM-5.2's indexer layout, llama.cpp's default for glm-dsa files of a 1M-token training context
 * without attention.indexer.types: blocks 0 and 1 and every fourth from 2 compute their own
 * selection (78 listed; blocks past them share).
 */
const glm52Full = (il: number) => il < 78 && (il < 2 || (il - 2) % 4 === 0);

/**
 * The sparse attention (DSA) keys of a deepseek32 or glm-dsa file, refused where llama.cpp's
 * graph could not run them: the indexer's Hadamard rotation needs a power-of-two head of at least
 * 64 that holds the rotary dimensions, the indexer reads the q LoRA latent, and a shared block
 * needs a full one before it.
 */
function readDsa(hp: HParams, dims: MlaDims, nCtxSeq: number | undefined): DsaParams | undefined {
  if (hp.arch !== 'deepseek32' && hp.arch !== 'glm-dsa') return undefined;
  const md = hp.meta;
  const n = trunkLayers(hp);
  let full = Array.from({ length: n }, () => true);
  if (hp.arch === 'glm-dsa') {
    // GLM-5 and 5.1 (training context under 1M) have an indexer in every block.
    if (md.has('attention.indexer.types')) full = md.perLayer('attention.indexer.types', n, undefined, 0, 1).map((x) => x !== 0);
    else if (hp.nCtxTrain >= 1048576) full = full.map((_, il) => glm52Full(il));
    if (!full[0]) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block 0 shares the indexer selection of a block before it (attention.indexer.types), and there is none`);
  }
  const dsa: DsaParams = {
    nHead: md.int('attention.indexer.head_count', undefined, 1, MAX_DIM),
    headDim: md.int('attention.indexer.key_length', undefined, 1, MAX_DIM),
    topK: md.int('attention.indexer.top_k', undefined, 1, 1 << 24),
    neox: hp.arch === 'deepseek32',
    eps: hp.arch === 'deepseek32' ? 1e-6 : 0,
    full,
  };
  if (dsa.headDim < 64 || (dsa.headDim & (dsa.headDim - 1)) !== 0 || dsa.headDim < dims.qkRope)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.indexer.key_length ${dsa.headDim} must be a power of two of at least 64 that holds the ${dims.qkRope} rotary dimensions`);
  if (dims.qLora < 1) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: the lightning indexer reads the q LoRA latent; attention.q_lora_rank is missing`);
  // Every position is selected when the context holds no more than top_k (V3.2: 2048).
  if (nCtxSeq !== undefined && nCtxSeq <= dsa.topK) return undefined;
  return dsa;
}

function mlaContext(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: Deepseek2Options): MlaBlockContext {
  refuseUnsupported(hp);
  const dims = readMlaDims(hp);
  const glmDsa = hp.arch === 'glm-dsa';
  const { ropeAttnFactor, kqScale } = deepseekYarn(hp, dims.qkNope + dims.qkRope, !glmDsa);
  return {
    hp,
    tensors,
    dims,
    // (glm-dsa routes with sigmoid when the file does not say.)
    routing: readMoeRouting(hp, glmDsa || isGlm47Lite(hp) ? GATING_SIGMOID : GATING_SOFTMAX),
    nDense: hp.meta.int('leading_dense_block_count', 0, 0, MAX_LAYERS),
    kqScale,
    rope: ropeParams(hp, false, { n_dims: dims.qkRope, attn_factor: ropeAttnFactor }),
    naive: opt.naiveMla ?? false,
    dsa: readDsa(hp, dims, opt.nCtxSeq),
  };
}

/**
 * The lightning indexer for block il, as llama.cpp's deepseek32 and glm-dsa graphs build it: per
 * head a query from the q LoRA latent `qa`, one key from `h` (LayerNorm with bias), both rotated
 * over their first qk_rope dimensions and then Hadamard-rotated (kept so in their own
 * cache), per-head weights from `h` scaled by 1/sqrt(heads x head size); the `dsa_index` op picks
 * each token's top-k positions, into the returned buffer the attention is restricted to.
 */
export function dsaIndexer(p: ProgramBuilder, c: MlaBlockContext, il: number, qa: number, h: number): number {
  const { need } = tensorLookup(c.hp, c.tensors);
  const { nHead: nh, headDim: hd, topK, neox, eps, full } = c.dsa!;
  // One selection buffer for every block: a shared block (glm-dsa) reads the last full block's.
  const sel = p.buf(`dsa_sel${topK}`, topK);
  if (!full[il]) return sel;
  const iq = p.buf(`dsa_q${nh * hd}`, nh * hd);
  const ik = p.buf(`dsa_k${hd}`, hd);
  const iw = p.buf(`dsa_w${nh}`, nh);
  const rope = { ...c.rope, neox };
  p.op('matmul', iq, { a: qa, weights: { weight: need(t(il, 'indexer.attn_q_b.weight')) } });
  p.op('rope', iq, { a: iq, params: { ...rope, head_dim: hd, n_head: nh } });
  p.op('matmul', ik, { a: h, weights: { weight: need(t(il, 'indexer.attn_k.weight')) } });
  p.op('layer_norm', ik, { a: ik, weights: { weight: need(t(il, 'indexer.k_norm.weight')), bias: need(t(il, 'indexer.k_norm.bias')) }, params: { eps } });
  p.op('rope', ik, { a: ik, params: { ...rope, head_dim: hd, n_head: 1 } });
  p.op('hadamard', iq, { a: iq, params: { n: hd } });
  p.op('hadamard', ik, { a: ik, params: { n: hd } });
  p.op('matmul', iw, { a: h, weights: { weight: need(t(il, 'indexer.proj.weight')) } });
  p.op('scale', iw, { a: iw, params: { scale: Math.fround(1 / Math.fround(Math.sqrt(hd * nh))) } });
  const layer = p.kvLayer(hd, 0);
  p.op('dsa_index', sel, { a: iq, b: ik, c: iw, params: { layer, n_head: nh, head_dim: hd, top_k: topK } });
  return sel;
}

/** Block `il` (MLA attention, then the dense or MoE FFN) on the residual stream `x`, with its own KV layer. */
export function mlaBlock(p: ProgramBuilder, c: MlaBlockContext, il: number, x: number): void {
  const { hp, tensors } = c;
  const shape = c.blockShape?.(il);
  const dims = shape?.dims ?? c.dims;
  const rope = shape?.rope ?? c.rope;
  const { need, maybe } = tensorLookup(hp, tensors);
  const { kvLora: L, qkNope, qkRope: R, vHead } = dims;
  const d = hp.nEmbd;
  const h = p.buf('h', d);
  const attnOut = p.buf('attn_out', d);
  // (Named by their widths: blocks of another geometry take buffers of their own.)
  const kva = p.buf(`kv_cmpr_pe${L + R}`, L + R);
  const lat = p.buf(`kv_cmpr${L}`, L);
  const H = hp.nHead[il];
  const q = p.buf(`q${H}x${qkNope + R}`, H * (qkNope + R));
  const attn = p.buf(`attn${H}x${vHead}`, H * vHead);
  p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
  const wq = c.dsa ? undefined : maybe(t(il, 'attn_q.weight'));
  let sel: number | undefined;
  if (wq) {
    p.op('matmul', q, { a: h, weights: { weight: wq } });
  } else {
    const qaWidth = tensors.get(need(t(il, 'attn_q_a.weight')))!.dims[1];
    const qa = p.buf(`q_a${qaWidth}`, qaWidth);
    p.op('matmul', qa, { a: h, weights: { weight: need(t(il, 'attn_q_a.weight')) } });
    p.op('rms_norm', qa, { a: qa, weights: { weight: need(t(il, 'attn_q_a_norm.weight')) }, params: { eps: hp.rmsEps } });
    if (c.dsa && (shape?.indexed ?? true)) sel = dsaIndexer(p, c, il, qa, h);
    p.op('matmul', q, { a: qa, weights: { weight: need(t(il, 'attn_q_b.weight')) } });
  }
  p.op('matmul', kva, { a: h, weights: { weight: need(t(il, 'attn_kv_a_mqa.weight')) } });
  p.op('copy', lat, { a: kva, params: { n: L } });
  p.op('rms_norm', lat, { a: lat, weights: { weight: need(t(il, 'attn_kv_a_norm.weight')) }, params: { eps: hp.rmsEps } });
  p.op('copy', kva, { a: lat, params: { n: L } });
  if (c.kRopeNorm) {
    // RMS norm of the shared RoPE key (the row's last R values), before its rotation.
    const kpe = p.buf(`k_pe${R}`, R);
    p.op('copy', kpe, { a: kva, params: { n: R, a_off: L } });
    p.op('rms_norm', kpe, { a: kpe, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('copy', kva, { a: kpe, params: { n: R, out_off: L } });
  }
  const rw = c.ropeFactors ? { weights: { freq_factors: c.ropeFactors } } : {};
  p.op('rope', kva, { a: kva, ...rw, params: { ...rope, head_dim: L + R, n_head: 1, rot_off: L } });
  p.op('rope', q, { a: q, ...rw, params: { ...rope, head_dim: qkNope + R, n_head: H, rot_off: qkNope } });
  // (The DSA architectures' loaders take the split layout only.)
  const kb = c.dsa ? need(t(il, 'attn_k_b.weight')) : maybe(t(il, 'attn_k_b.weight'));
  const weights: Record<string, string> = kb ? { k_b: kb, v_b: need(t(il, 'attn_v_b.weight')) } : { kv_b: need(t(il, 'attn_kv_b.weight')) };
  const layer = p.kvLayer(L + R, 0);
  p.op('mla_attention', attn, {
    a: q,
    b: kva,
    ...(sel !== undefined ? { c: sel } : {}),
    weights,
    params: {
      layer, n_head: H, kv_lora: L, qk_nope: qkNope, qk_rope: R, v_head: vHead, scale: shape?.kqScale ?? c.kqScale, naive: c.naive,
      ...(sel !== undefined ? { top_k: c.dsa!.topK } : {}),
      ...(shape?.window ? { window: shape.window } : {}),
    },
  });
  if (c.headGate) {
    // Head h's output times sigmoid(attn_gate_h . normed input), before the output projection.
    const gate = p.buf(`attn_gate${H}`, H);
    p.op('matmul', gate, { a: h, weights: { weight: need(t(il, 'attn_gate.weight')) } });
    p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { group: vHead } });
  }
  p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
  if (c.residualScale !== undefined) p.op('scale', attnOut, { a: attnOut, params: { scale: c.residualScale } });
  p.op('add', x, { a: x, b: attnOut });

  blockFfnHalf(p, c, il, x, h);
}

/** The FFN half of a DeepSeek block: ffn_norm, the dense or routed FFN (moeBlockFfn), the residual add, the control vector. */
function blockFfnHalf(
  p: ProgramBuilder,
  c: Pick<MlaBlockContext, 'hp' | 'tensors' | 'routing' | 'nDense' | 'moeOptions' | 'moeOptionsAt' | 'residualScale' | 'relu2Ffn'>,
  il: number,
  x: number,
  h: number,
): void {
  const { hp, tensors } = c;
  const { need } = tensorLookup(hp, tensors);
  p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  if (c.relu2Ffn && il < c.nDense) {
    const ff = tensors.get(need(t(il, 'ffn_up.weight')))!.dims[1];
    const u = p.buf(`ffn_up${ff}`, ff);
    p.op('matmul', u, { a: h, weights: { weight: need(t(il, 'ffn_up.weight')) } });
    p.op('relu_sqr', u, { a: u });
    p.op('matmul', ffnOut, { a: u, weights: { weight: need(t(il, 'ffn_down.weight')) } });
  } else moeBlockFfn(p, hp, tensors, il, h, ffnOut, c.routing, il < c.nDense, c.moeOptionsAt?.(il) ?? c.moeOptions);
  if (c.residualScale !== undefined) p.op('scale', ffnOut, { a: ffnOut, params: { scale: c.residualScale } });
  p.op('add', x, { a: x, b: ffnOut });
  // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
  p.op('cvec', x, { a: x, params: { layer: il } });
}

/**
 * DeepSeek-OCR's language model (`deepseek2-ocr`, llama.cpp's deepseek2 graph with is_ocr): the
 * deepseek2 block with plain multi-head attention in place of MLA. Q, K and V are n_embd wide
 * (n_head heads of n_embd / n_head, as many KV heads; a fused attn_qkv and q/k/v biases when the
 * file has them), NeoX RoPE over the whole head with the file's base and no scaling (the graph
 * passes freq_scale 1, ext_factor 0, attn_factor 1 whatever the file says), the attention scaled by
 * deepseek2's kq_scale (mscale^2 / sqrt(head); its loader reads no yarn_log_multiplier), attn_output
 * without bias; then deepseek2's FFN half (leading dense blocks, routed experts softmax by default,
 * shared experts required).
 */
function ocrBlock(p: ProgramBuilder, c: MlaBlockContext, il: number, x: number): void {
  const { hp, tensors } = c;
  const { need, maybe } = tensorLookup(hp, tensors);
  const H = hp.nHead[0];
  const hd = hp.nEmbd / H;
  const h = p.buf('h', hp.nEmbd);
  const attnOut = p.buf('attn_out', hp.nEmbd);
  const { q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
  p.op('rope', q, { a: q, params: { ...c.rope, head_dim: hd, n_head: H } });
  p.op('rope', k, { a: k, params: { ...c.rope, head_dim: hd, n_head: H } });
  const layer = p.kvLayer(H * hd, H * hd);
  p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: H, head_dim: hd, head_dim_v: hd, scale: c.kqScale } });
  p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
  p.op('add', x, { a: x, b: attnOut });
  blockFfnHalf(p, c, il, x, h);
}

/** deepseek2-ocr's sizes and scales (see ocrBlock); its loader requires expert_shared_count, expert_feed_forward_length and the shared experts. */
function ocrContext(hp: HParams, tensors: Map<string, GgufTensorInfo>): MlaBlockContext {
  const H = hp.nHead[0];
  const hd = hp.nEmbd / H;
  // llama.cpp sizes q/k/v as n_embd and runs n_head KV heads of n_embd / n_head for every block.
  if (!Number.isInteger(hd) || hd % 2 !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: embedding_length ${hp.nEmbd} is not head_count ${H} heads of an even size`);
  for (let il = 0; il < hp.nLayer; il++)
    if (hp.nHead[il] !== H || hp.nHeadKv[il] !== H) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has ${hp.nHead[il]} heads and ${hp.nHeadKv[il]} KV heads; this architecture runs ${H} of each in every block`);
  if (hp.headDimK !== hd || hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hp.headDimK} and value_length ${hp.headDimV} must be embedding_length / head_count = ${hd}`);
  for (const key of ['expert_shared_count', 'expert_feed_forward_length'])
    if (!hp.meta.has(key)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata ${key} is required`);
  return {
    hp,
    tensors,
    dims: { qLora: 0, kvLora: 0, qkNope: 0, qkRope: 0, vHead: hd },
    routing: readMoeRouting(hp, GATING_SOFTMAX),
    nDense: hp.meta.int('leading_dense_block_count', 0, 0, MAX_LAYERS),
    kqScale: deepseekYarn(hp, hd, false).kqScale,
    rope: { n_dims: hd, neox: true, freq_base: hp.ropeFreqBase, freq_scale: 1, ext_factor: 0, attn_factor: 1, beta_fast: 32, beta_slow: 1, n_ctx_orig: hp.ropeYarn.nCtxOrig },
    naive: false,
    moeOptions: { shared: 'required' },
  };
}

/** The first multi-token-prediction block's index when the file carries its tensors, else -1. */
export function mtpBlock(hp: HParams, tensors: Map<string, GgufTensorInfo>): number {
  if (hp.meta.int('nextn_predict_layers', 0, 0, MAX_LAYERS) < 1) return -1;
  const il = trunkLayers(hp);
  return tensors.has(t(il, 'nextn.eh_proj.weight')) ? il : -1;
}

/**
 * DeepSeek-V2/V2-Lite/V3 and Kimi-K2 (`deepseek2`): MLA attention with an optional q LoRA, a
 * latent KV cache (absorbed form), YaRN with DeepSeek's mscale, leading dense blocks, routed
 * experts (softmax, or sigmoid with a selection bias and group-limited top-k) plus shared experts.
 * The program offers the normalized final hidden state of every position (`hidden`, see
 * hiddenOutput), which embeddings and a multi-token-prediction block read. DeepSeek-OCR's language
 * model (`deepseek2-ocr`) runs the same trunk with plain multi-head attention blocks (ocrBlock).
 */
export function buildDeepseek2(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: Deepseek2Options = {}): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const ocr = hp.arch === 'deepseek2-ocr';
  const c = ocr ? ocrContext(hp, tensors) : mlaContext(hp, tensors, opt);
  const p = new ProgramBuilder();
  const x = p.buf('x', hp.nEmbd);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  for (let il = 0; il < trunkLayers(hp); il++) (ocr ? ocrBlock : mlaBlock)(p, c, il, x);
  return outputHead(p, hp, tensors, x);
}

/**
 * DeepSeek-V3's multi-token-prediction (NextN) block as a model of its own, as llama.cpp's
 * deepseek2 graph_mtp computes it: row t takes token x_t and the target's normalized hidden state
 * of the position before (batch.embd; zeros for position 0), concatenates enorm(embed(x_t)) and
 * hnorm(h), projects with eh_proj, runs the block (MLA over its own latent cache, MoE + shared
 * experts), and predicts the token after x_t with shared_head_norm and shared_head_head (or the
 * model's output norm and head). Its own normalized hidden state is the program's `hidden`, which
 * feeds the next drafted position.
 */
export function buildDeepseek2Mtp(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: Deepseek2Options = {}): ModelProgram {
  const il = mtpBlock(hp, tensors);
  if (il < 0) throw new EngineError('KAIL_E_INVALID_ARG', `${hp.arch}: the file carries no multi-token-prediction block (nextn_predict_layers and blk.N.nextn.* tensors)`);
  const c = mlaContext(hp, tensors, opt);
  const { p, x } = mtpInput(hp, tensors, il);
  mlaBlock(p, c, il, x);
  return mtpHead(p, hp, tensors, il, x);
}

/**
 * The start of a NextN block's program (llama.cpp's graph_mtp, every architecture alike): row t
 * takes token x_t and the target's normalized hidden state of the position before (batch.embd),
 * and the residual stream `x` starts as eh_proj [enorm(embed(x_t)); hnorm(h)].
 */
export function mtpInput(hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number): { p: ProgramBuilder; x: number } {
  const { need, maybe } = tensorLookup(hp, tensors);
  // (A zero epsilon would norm the first row's zero hidden state to 0/0, llama.cpp's NaNs, and every later row attends to it.)
  if (!(hp.rmsEps > 0))
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: layer_norm_rms_epsilon ${hp.rmsEps}: the MTP block norms the zero hidden state of position 0, which needs an epsilon > 0`);
  const d = hp.nEmbd;
  const p = new ProgramBuilder();
  const e = p.buf('mtp_embd', d);
  const hin = p.buf('mtp_h_in', d);
  const cat = p.buf('mtp_concat', 2 * d);
  const x = p.buf('x', d);
  p.op('embed', e, { weights: { weight: maybe(t(il, 'nextn.embed_tokens.weight')) ?? need('token_embd.weight') } });
  p.op('input', hin);
  p.op('rms_norm', e, { a: e, weights: { weight: need(t(il, 'nextn.enorm.weight')) }, params: { eps: hp.rmsEps } });
  p.op('rms_norm', hin, { a: hin, weights: { weight: need(t(il, 'nextn.hnorm.weight')) }, params: { eps: hp.rmsEps } });
  p.op('copy', cat, { a: e, params: { n: d } });
  p.op('copy', cat, { a: hin, params: { n: d, out_off: d } });
  p.op('matmul', x, { a: cat, weights: { weight: need(t(il, 'nextn.eh_proj.weight')) } });
  return { p, x };
}

/**
 * The start of a NextN block that is attention then an FFN (Qwen3.5's, Nemotron 3's): the block's
 * index, its input (mtpInput) in x, and buffers for the attention's normed input and its output.
 */
export function mtpAttentionStart(hp: HParams, tensors: Map<string, GgufTensorInfo>): { il: number; p: ProgramBuilder; x: number; h: number; attnOut: number } {
  const il = mtpBlock(hp, tensors);
  if (il < 0) throw new EngineError('KAIL_E_INVALID_ARG', `${hp.arch}: the file carries no multi-token-prediction block (nextn_predict_layers and blk.N.nextn.* tensors)`);
  const { p, x } = mtpInput(hp, tensors, il);
  return { il, p, x, h: p.buf('h', hp.nEmbd), attnOut: p.buf('attn_out', hp.nEmbd) };
}

/**
 * A NextN block's end: shared_head_norm (or the output norm) as the program's hidden state, then
 * shared_head_head (or the model's head). The norm is an RMS norm, or with `layerNorm` (its
 * epsilon) a LayerNorm without bias (Nemotron 3's).
 */
export function mtpHead(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, x: number, opt: { layerNorm?: number } = {}): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const d = hp.nEmbd;
  const hid = p.buf('h_nextn', d);
  // (Nemotron 3's LayerNorm head has no fallback: output_norm is an RMS norm's weight.)
  const norm = { weight: opt.layerNorm !== undefined ? need(t(il, 'nextn.shared_head_norm.weight')) : (maybe(t(il, 'nextn.shared_head_norm.weight')) ?? need('output_norm.weight')) };
  if (opt.layerNorm !== undefined) p.op('layer_norm', hid, { a: x, weights: norm, params: { eps: opt.layerNorm } });
  else p.op('rms_norm', hid, { a: x, weights: norm, params: { eps: hp.rmsEps } });
  p.hidden(hid);
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: hid });
  const head = maybe(t(il, 'nextn.shared_head_head.weight')) ?? maybe('output.weight') ?? need('token_embd.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}

export interface MlaKvShape {
  nLayer: number;
  nHead: number;
  kvLora: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
  /** Bytes per cached element: 2 for an F16 cache (default), 4 for F32. */
  elemBytes?: number;
}

/**
 * KV cache bytes per token: the latent cache kail keeps (kv_lora + qk_rope per layer) against a
 * naive per-head cache. `naiveFull` is what a decompressed MHA cache holds (per head the whole key,
 * nope + rope, and the value: llama.cpp's layout for attn_kv_b files); `naiveShared` keeps the RoPE
 * key once per layer (per head nope + value, plus qk_rope), the comparison the DeepSeek-V2 paper makes.
 */
export function mlaKvBytesPerToken(s: MlaKvShape): { absorbed: number; naiveShared: number; naiveFull: number; ratioShared: number; ratioFull: number } {
  const e = s.elemBytes ?? 2;
  const absorbed = s.nLayer * (s.kvLora + s.qkRope) * e;
  const naiveShared = s.nLayer * (s.nHead * (s.qkNope + s.vHead) + s.qkRope) * e;
  const naiveFull = s.nLayer * s.nHead * (s.qkNope + s.qkRope + s.vHead) * e;
  return { absorbed, naiveShared, naiveFull, ratioShared: naiveShared / absorbed, ratioFull: naiveFull / absorbed };
}
