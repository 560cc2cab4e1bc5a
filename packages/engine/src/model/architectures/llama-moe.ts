import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart, withBias, type ProgramBuilder } from '../program-builder';
import { GATING_SIGMOID, GATING_SOFTMAX, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers, type MoeBlockOptions, type MoeRouting } from './deepseek2';
import { requiredSlidingWindowPattern, slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** What differs between the decoders with GQA attention and DeepSeek-style routed blocks. */
export interface LlamaMoeOptions {
  /** NeoX RoPE (rotate halves) instead of adjacent pairs; rope.dimension_count may be partial. */
  neox: boolean;
  /** RMS norms on Q and K: before RoPE per head or over the whole projection, per head after RoPE (Hunyuan), or none. */
  qkNorm: 'head' | 'full' | 'head-after-rope' | 'none';
  /** The routing llama.cpp builds for the file (which keys the architecture's loader reads). */
  routing: (hp: HParams) => MoeRouting;
  /** Whether block il has a dense SwiGLU FFN instead of experts. */
  dense: (hp: HParams, il: number, tensors: Map<string, GgufTensorInfo>) => boolean;
  /** Selection bias, shared experts and expert activation of block il, as the architecture's loader reads them. */
  block: (hp: HParams, il: number) => MoeBlockOptions;
  /** Whether the graph adds attn_output.bias when the file has one (ERNIE's and MiniMax's do not). */
  attnOutBias: boolean;
  /**
   * Sliding-window blocks (K-EXAONE): the window, which blocks slide, and whether only those rotate
   * (the full-attention blocks then use no positions, NoPE), or which blocks rotate (`rope`).
   */
  swa?: (hp: HParams) => { window: number; layers: boolean[]; ropeOnlySwa: boolean; rope?: boolean[]; ropeSwa?: Record<string, number> };
  /**
   * The router reads the block's input, before attention (SmallThinker): its experts are known
   * then, and a streaming model reads them while the attention computes (the `moe_prefetch` op).
   */
  routeOnInput?: boolean;
  /** Rotate with the file's rope_freqs factors when it has them. */
  ropeFreqs?: boolean;
  /** The loader requires output.weight (no tied head). */
  untiedHead?: boolean;
  /** More of a routed block's FFN after its experts (GroveMoE's chunk experts), adding into `out`. */
  afterMoe?: (p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, h: number, out: number) => void;
}

/** leading_dense_block_count, within the file's blocks. */
export function leadingDense(hp: HParams): number {
  return hp.meta.int('leading_dense_block_count', 0, 0, MAX_LAYERS);
}

/**
 * Decoders of the Llama shape whose FFN is a DeepSeek-style routed block (router with optional
 * selection bias, top-k experts, ungated shared experts, leading dense blocks): RMSNorm → GQA
 * attention with RoPE (optionally q/k norms, an attn_output bias) → residual → RMSNorm → FFN →
 * residual; output norm and head. DeepSeek-MoE (`deepseek`), dots.llm1 (`dots1`), ERNIE 4.5 MoE
 * (`ernie4_5-moe`), MiniMax-M2 (`minimax-m2`), Hunyuan-A13B (`hunyuan-moe`), Hunyuan v3 (`hy_v3`), K-EXAONE
 * (`exaone-moe`), Ling-lite/plus (`bailingmoe`) and Ling 2.0 (`bailingmoe2`), as llama.cpp's
 * src/models/<arch>.cpp build them.
 */
export function buildLlamaMoe(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: LlamaMoeOptions): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  if (hp.headDimK !== hp.headDimV) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hp.headDimK} and value_length ${hp.headDimV} must match`);
  const routing = opt.routing(hp);
  const hd = hp.headDimK;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const rope = { ...ropeParams(hp, opt.neox), head_dim: hd };
  const swa = opt.swa?.(hp);
  const freqs = opt.ropeFreqs ? maybe('rope_freqs.weight') : undefined;
  const rw = freqs ? { freq_factors: freqs } : undefined;
  // (block_count includes the NextN blocks some files append; llama.cpp leaves them out.)
  for (let il = 0; il < trunkLayers(hp); il++) {
    let routerIn: number | undefined;
    if (opt.routeOnInput) {
      routerIn = p.buf('router_in', hp.nEmbd);
      p.op('copy', routerIn, { a: x });
      p.op('moe_prefetch', routerIn, { a: routerIn });
    }
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const headNorms = () => {
      p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
      p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    };
    if (opt.qkNorm === 'head') headNorms();
    else if (opt.qkNorm === 'full') {
      p.op('rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps } });
      p.op('rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps } });
    }
    const slides = swa?.layers[il] ?? false;
    if (swa?.rope ? swa.rope[il] : !swa?.ropeOnlySwa || slides) {
      const r = slides && swa?.ropeSwa ? { ...rope, ...swa.ropeSwa } : rope;
      p.op('rope', q, { a: q, weights: rw, params: { ...r, n_head: H } });
      p.op('rope', k, { a: k, weights: rw, params: { ...r, n_head: Hkv } });
    }
    if (opt.qkNorm === 'head-after-rope') headNorms();
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    const window: Record<string, number> = slides ? { window: swa!.window } : {};
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...window } });
    const oBias = opt.attnOutBias ? maybe(t(il, 'attn_output.bias')) : undefined;
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), oBias) });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    const block = opt.block(hp, il);
    const dense = opt.dense(hp, il, tensors);
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, dense, routerIn === undefined ? block : { ...block, routerInput: routerIn });
    if (!dense) opt.afterMoe?.(p, hp, tensors, il, h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { untied: opt.untiedHead });
}

const SOFTMAX = GATING_SOFTMAX;

// dots.llm1 (src/models/dots1.cpp): per-head q/k norms, NeoX RoPE, gating/norm/scale from the
// file, optional selection bias, shared experts in every routed block.
const DOTS1: LlamaMoeOptions = {
  neox: true,
  qkNorm: 'head',
  routing: (hp) => readMoeRouting(hp, 0),
  dense: (hp, il) => il < leadingDense(hp),
  block: () => ({ probsBias: 'optional', shared: 'required' }),
  attnOutBias: true,
};

/** llama.cpp's threshold below which a per-layer SwiGLU limit means "no limit". */
export const SWIGLU_LIMIT_EPS = 1e-6;

// The Qwen3-MoE blocks with sliding windows of Mellum and Maple: per-head q/k norms, NeoX RoPE,
// softmax experts renormalized and unscaled (neither loader reads a scale), no shared experts, an
// untied head.
const QWEN3MOE_SWA = {
  neox: true,
  qkNorm: 'head',
  routing: (hp: HParams) => readMoeRouting(hp, SOFTMAX, { gating: SOFTMAX, normW: true, wScale: 0 }),
  dense: () => false,
  attnOutBias: false,
  untiedHead: true,
} as const;

/** The architectures buildLlamaMoe runs, with what each one's llama.cpp loader reads. */
export const LLAMA_MOE_ARCHITECTURES: Record<string, LlamaMoeOptions> = {
  // DeepSeek-MoE 16B (src/models/deepseek.cpp): softmax, no renormalization, the file's scale, no
  // selection bias (the graph passes none), shared experts in every routed block.
  deepseek: {
    neox: false,
    qkNorm: 'none',
    routing: (hp) => readMoeRouting(hp, SOFTMAX, { gating: SOFTMAX, normW: false }),
    dense: (hp, il) => il < leadingDense(hp),
    block: () => ({ probsBias: 'none', shared: 'required' }),
    attnOutBias: true,
  },
  dots1: DOTS1,
  // ERNIE 4.5 MoE (src/models/ernie4-5-moe.cpp): softmax with renormalization and no scale (its
  // loader reads neither key), optional selection bias, routed blocks from leading_dense_block_count
  // every interleave_moe_layer_step blocks, a shared expert when expert_shared_feed_forward_length > 0.
  'ernie4_5-moe': {
    neox: false,
    qkNorm: 'none',
    routing: (hp) => readMoeRouting(hp, SOFTMAX, { gating: SOFTMAX, normW: true, wScale: 0 }),
    dense: (hp, il) => il < leadingDense(hp) || (il + 1) % ernieMoeStep(hp) !== 0,
    block: (hp) => ({ probsBias: 'optional', shared: hp.meta.int('expert_shared_feed_forward_length', 0, 0, 1 << 30) > 0 ? 'required' : 'none' }),
    // Its loader reads attn_output.bias, but the MoE graph passes none to build_attn.
    attnOutBias: false,
  },
  // MiniMax-M2 (src/models/minimax-m2.cpp): q/k norms over the whole projections, partial NeoX
  // RoPE, every block routed with a selection bias, renormalized, no scale, no shared experts.
  'minimax-m2': {
    neox: true,
    qkNorm: 'full',
    routing: (hp) => readMoeRouting(hp, 0, { normW: true, wScale: 0 }),
    dense: () => false,
    block: () => ({ probsBias: 'required', shared: 'none' }),
    attnOutBias: false,
  },
  // Hunyuan-A13B (src/models/hunyuan-moe.cpp): per-head q/k norms after RoPE, every block routed
  // (softmax, renormalized; its loader reads no scale) plus an ungated shared expert, added after.
  'hunyuan-moe': {
    neox: true,
    qkNorm: 'head-after-rope',
    routing: (hp) => readMoeRouting(hp, SOFTMAX, { gating: SOFTMAX, normW: true, wScale: 0 }),
    dense: () => false,
    block: () => ({ probsBias: 'none', shared: 'required' }),
    attnOutBias: false,
  },
  // K-EXAONE (exaone-moe, src/models/exaone-moe.cpp): dots1's blocks without its attn_output
  // bias, NeoX RoPE (with rope_freqs when present) on the sliding-window blocks only, the others attending everything
  // without positions; windows from attention.sliding_window (128 by default) on the blocks
  // load_swa_pattern picks (every 4th full by default); routing from the file (the gating key
  // required), optional selection bias, shared experts, leading dense blocks; NextN left out.
  // SmallThinker (smallthinker, src/models/smallthinker.cpp): every block routed, by a router that
  // reads the block's input before attention; ReGLU experts (relu(gate) * up), gating from the
  // file, renormalized and scaled by expert_weights_scale; NeoX RoPE; with attention.sliding_window
  // set, a window of 4096 whatever its value (as llama.cpp) on every block but each 4th (dense
  // first), and RoPE on those only.
  smallthinker: {
    neox: true,
    qkNorm: 'none',
    routing: (hp) => readMoeRouting(hp, 0, { normW: true }),
    dense: () => false,
    block: () => ({ probsBias: 'none', shared: 'none', moeParams: { act: 5 } }),
    attnOutBias: true,
    routeOnInput: true,
    swa: (hp) => {
      if (hp.meta.int('attention.sliding_window', 0, 0, 1 << 30) === 0) return { window: 0, layers: hp.nHead.map(() => false), ropeOnlySwa: false };
      return { window: 4096, layers: slidingWindowLayers(hp, 4, true), ropeOnlySwa: true, rope: hp.nHead.map((_, il) => il % 4 !== 0) };
    },
  },
  'exaone-moe': {
    ...DOTS1,
    attnOutBias: false,
    swa: (hp) => ({ window: hp.meta.int('attention.sliding_window', 128, 1, 1 << 30), layers: slidingWindowLayers(hp, 4), ropeOnlySwa: true }),
    ropeFreqs: true,
  },
  // Hunyuan v3 (hy_v3, src/models/hy-v3.cpp): per-head q/k norms before NeoX RoPE, dense blocks
  // where the file has no router, routing from the file (sigmoid when it does not say; no expert
  // groups) with a selection bias named blk.N.exp_probs_b, an ungated shared expert in every
  // routed block; NextN blocks left out.
  hy_v3: {
    neox: true,
    qkNorm: 'head',
    routing: (hp) => readMoeRouting(hp, GATING_SIGMOID),
    dense: (_hp, il, tensors) => !tensors.has(t(il, 'ffn_gate_inp.weight')),
    block: () => ({ probsBias: 'optional', probsBiasName: 'exp_probs_b', shared: 'required' }),
    attnOutBias: false,
  },
  // Ling-lite / Ling-plus (bailingmoe, src/models/bailingmoe.cpp): RoPE over adjacent pairs (with
  // rope_freqs when present), every block routed (softmax; renormalization from the file; the
  // file's scale), shared experts, attn_output.bias when present; leading_dense_block_count is read
  // by its loader but its graph routes every block.
  bailingmoe: {
    neox: false,
    qkNorm: 'none',
    routing: (hp) => readMoeRouting(hp, SOFTMAX, { gating: SOFTMAX }),
    dense: () => false,
    block: () => ({ probsBias: 'none', shared: 'required' }),
    attnOutBias: true,
    ropeFreqs: true,
  },
  // Ling 2.0 / Ring 2.0 (bailingmoe2, src/models/bailingmoe2.cpp): a fused attn_qkv, per-head q/k
  // norms, partial NeoX RoPE, leading dense blocks, routing from the file (gating required),
  // optional selection bias, shared experts; NextN blocks left out.
  bailingmoe2: {
    neox: true,
    qkNorm: 'head',
    routing: (hp) => readMoeRouting(hp, 0),
    dense: (hp, il) => il < leadingDense(hp),
    block: () => ({ probsBias: 'optional', shared: 'required' }),
    attnOutBias: false,
  },
  // JetBrains Mellum 2 (mellum, src/models/mellum.cpp): Qwen3-MoE blocks; with
  // attention.sliding_window set, windows on the blocks load_swa_pattern picks (3 of every 4 by
  // default), whose RoPE has the file's base but no scaling (scale 1, no YaRN).
  mellum: {
    ...QWEN3MOE_SWA,
    block: () => ({ probsBias: 'none', shared: 'none' }),
    swa: (hp) => {
      const window = hp.meta.int('attention.sliding_window', 0, 0, 1 << 30);
      if (window === 0) return { window: 0, layers: hp.nHead.map(() => false), ropeOnlySwa: false };
      return { window, layers: slidingWindowLayers(hp, 4), ropeOnlySwa: false, ropeSwa: { freq_scale: 1, ext_factor: 0, attn_factor: 1 } };
    },
  },
  // deepgrove Maple (maple, src/models/maple.cpp): Qwen3-MoE blocks, windows on the blocks the
  // required pattern array flags, RoPE on those only (rope.dimension_count_swa dimensions, base
  // rope.freq_base_swa), the others attending without positions; experts with ggml_swiglu_clamp at
  // each block's swiglu_clamp_exp (required).
  maple: {
    ...QWEN3MOE_SWA,
    block: (hp, il) => {
      const limit = hp.meta.perLayerNum('swiglu_clamp_exp', hp.nLayer, undefined, 0)[il];
      return { probsBias: 'none', shared: 'none', ...(limit > SWIGLU_LIMIT_EPS ? { moeParams: { act: 7, limit } } : {}) };
    },
    swa: (hp) => {
      const baseSwa = hp.meta.num('rope.freq_base_swa', hp.ropeFreqBase);
      if (!(baseSwa > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.freq_base_swa ${baseSwa} is not positive`);
      const nDims = hp.meta.int('rope.dimension_count_swa', hp.ropeDims, 0, hp.headDimK);
      if (nDims % 2 !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.dimension_count_swa ${nDims} is not an even number of dimensions`);
      return {
        window: hp.meta.int('attention.sliding_window', undefined, 1, 1 << 30),
        layers: requiredSlidingWindowPattern(hp),
        ropeOnlySwa: true,
        ropeSwa: { n_dims: nDims, freq_base: baseSwa },
      };
    },
  },
  // inclusionAI GroveMoE (grovemoe, src/models/grovemoe.cpp): Qwen3-MoE blocks (experts selected
  // by the sigmoid of the logits, weighted by their softmax, renormalized, unscaled) plus chunk
  // experts (groveChunkExperts); the head tied when the file has no output.weight.
  grovemoe: {
    neox: true,
    qkNorm: 'head',
    routing: (hp) => {
      const r = readMoeRouting(hp, SOFTMAX, { gating: SOFTMAX, normW: true, wScale: 0 });
      if (r.nGroup > 1) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: expert groups (expert_group_count ${r.nGroup}) with chunk experts are not supported`);
      return r;
    },
    dense: () => false,
    block: () => ({ probsBias: 'none', shared: 'none', moeParams: { sel_sigmoid: 1 } }),
    attnOutBias: false,
    afterMoe: groveChunkExperts,
  },
};

/**
 * GroveMoE's chunk ("adjugate") experts after the routed ones, as llama.cpp's grovemoe graph
 * builds them: a second expert set of expert_count / experts_per_group experts, routed by the
 * same router on the same input (top min(k, chunk experts) by the sigmoid of the logits, expert e
 * standing for chunk e / experts_per_group, each weighted by the softmax probability at the chunk's
 * own index, renormalized), run on the routed experts' output, times expert_group_scale, added.
 * Its experts stream like the routed ones; its routing is not counted in the heatmap.
 */
function groveChunkExperts(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const g = md.int('experts_per_group', undefined, 1, hp.nExpert);
  const scale = md.num('expert_group_scale');
  if (!Number.isFinite(scale)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_group_scale ${scale} is not a finite number`);
  const nChunk = Math.floor(hp.nExpert / g);
  if (nChunk * g !== hp.nExpert) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: experts_per_group ${g} does not divide expert_count ${hp.nExpert}`);
  const chunkOut = p.buf('chunk_out', hp.nEmbd);
  p.op('moe', chunkOut, {
    a: out,
    b: h,
    weights: {
      gate_inp: need(t(il, 'ffn_gate_inp.weight')),
      gate_exps: need(t(il, 'ffn_gate_chexps.weight')),
      up_exps: need(t(il, 'ffn_up_chexps.weight')),
      down_exps: need(t(il, 'ffn_down_chexps.weight')),
    },
    params: { n_expert: nChunk, n_route: hp.nExpert, chunk_group: g, n_expert_used: Math.min(hp.nExpertUsed, nChunk), gating: 0, norm_w: 1, w_scale: 0, sel_sigmoid: 1 },
  });
  p.op('scale', chunkOut, { a: chunkOut, params: { scale } });
  p.op('add', out, { a: out, b: chunkOut });
}

function ernieMoeStep(hp: HParams): number {
  const step = hp.meta.int('interleave_moe_layer_step', 0, 0, MAX_LAYERS);
  if (step < 1) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: interleave_moe_layer_step must be at least 1 (the file has ${step || 'none'})`);
  return step;
}
