import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { Metadata, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeFactorTensor, ropeParams, trunkStart, withBias, type ProgramBuilder, type RopeFactorSource } from '../program-builder';
import { hiddenOutput, trunkLayers } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

/** What differs between the members of the Llama family of decoder graphs. */
export interface LlamaFamilyOptions {
  /** NeoX-style RoPE (rotate halves) instead of adjacent pairs. */
  neox: boolean;
  /** Per-head RMS norm on Q and K before RoPE (Qwen3, OLMoE). */
  qkNorm: boolean;
  /** Renormalize the top-k expert weights to sum to 1. */
  normExpertWeights: boolean;
  /** Shared expert with a sigmoid gate (Qwen2-MoE). */
  sharedExpertGate: boolean;
  /** Where the RoPE factors come from (default rope_freqs when present), and the context they may depend on. */
  ropeFactors?: RopeFactorSource;
  nCtxSeq?: number;
  /** The block layout of the dense decoders that differ from Llama's (DenseLayout); absent: Llama's. */
  layout?: DenseLayout;
  /**
   * Non-causal attention: every position attends to the whole sequence (the diffusion LMs llada,
   * llada-moe, rnd1 and dream, which llama.cpp runs with causal_attn false and no KV memory).
   * Default: causal.
   */
  causal?: boolean;
  /** The graph leaves out the attn_output / FFN biases and rope_freqs its loader reads (LLaDA's llada.cpp). */
  noBiasNoFreqs?: boolean;
  /** Every block routes to experts (llada-moe, rnd1: their loaders require ffn_gate_inp). */
  allExperts?: boolean;
  /** The head must be output.weight (llada-moe's loader requires it). */
  untiedHead?: boolean;
  /**
   * An embedding encoder (eurobert, neo-bert, llama-embed): no head; the program's output rows are
   * the final state after this RMS norm (output_norm.weight, NeoBERT's enc.output_norm.weight),
   * which the engine pools by the file's pooling_type (isEncoderArchitecture).
   */
  encoderNorm?: string;
}

/**
 * How a dense decoder's block differs from Llama's pre-norm block (olmo2, seed_oss, smollm3,
 * exaone4, ernie4_5, hunyuan-dense, glm4, apertus; internlm2, exaone, xverse, nanbeige, arcee,
 * maincoder, orion, olmo, starcoder2, stablelm, nemotron), as llama.cpp's src/models/<arch>.cpp build
 * them. These graphs scale scores by 1/sqrt(head) whatever attention.scale says (their loaders do
 * not read it), and add no FFN biases (their loaders take none).
 */
export interface DenseLayout {
  /** attn_norm before the projections (OLMo 2 and EXAONE 4 have none: the projections read the stream). */
  attnNorm: boolean;
  /** post_attention_norm of the attention output, before its residual add (OLMo 2, EXAONE 4, GLM-4). */
  attnPostNorm: boolean;
  /** The FFN's input norm: ffn_norm, post_attention_norm (Seed-OSS names it so) or none (OLMo 2, EXAONE 4). */
  ffnNorm: 'ffn_norm' | 'post_attention_norm' | 'none';
  /** post_ffw_norm of the FFN output, before its residual add (OLMo 2, EXAONE 4, GLM-4). */
  ffnPostNorm: boolean;
  /** Per-head q/k norms after RoPE instead of before (Hunyuan dense). */
  qkNormAfterRope?: boolean;
  /** Sliding-window blocks: the window, which blocks slide, and RoPE overrides on those. */
  swa?: (hp: HParams) => { window: number; layers: boolean[]; ropeSwa?: Record<string, number> } | undefined;
  /** Whether block il rotates (NoPE blocks: SmolLM3 every 4th, EXAONE 4's full blocks among sliding ones); swaOn: the file has sliding blocks. */
  rope?: (il: number, slides: boolean, swaOn: boolean) => boolean;
  /** Where the q/k norms must span: one head, or the whole projection (OLMo 2); absent: either, by their shape. */
  qkNormWidth?: 'head' | 'full';
  /** One ffn_up of twice feed_forward_length: SiLU of its first half times its second (GLM-4). */
  fusedUpGate?: boolean;
  /**
   * An ungated FFN, ffn_up then xIELU then ffn_down (Apertus), xIELU's parameters per block from the
   * keys xielu.alpha_n, xielu.alpha_p, xielu.beta and xielu.eps (no architecture prefix; one
   * number or one per block; required).
   */
  xielu?: boolean;
  /** Whether the graph adds attn_output.bias when the file has one (ERNIE 4.5's loader reads it, its graph does not). */
  attnOutBias: boolean;
  /** The RoPE base the loader derives (Hunyuan's rope.scaling.alpha NTK rule); absent: rope.freq_base. */
  ropeBase?: (hp: HParams) => number;
  /** The head must be output.weight (OLMo 2's loader requires it). */
  untiedHead?: boolean;
  /** Leave out NextN blocks counted in block_count (nextn_predict_layers: GLM-4, EXAONE 4). */
  nextn?: boolean;
  /**
   * LayerNorms (eps attention.layer_norm_epsilon, required) instead of RMS norms, on the blocks'
   * inputs and the output: 'affine' with weight and bias (Orion, StarCoder 2), 'plain' without
   * parameters (OLMo).
   */
  layerNorm?: 'affine' | 'plain';
  /** An ungated FFN: ffn_up, then ReLU² (Arcee) or GELU (StarCoder 2), then ffn_down. */
  ungated?: 'relu_sqr' | 'gelu';
  /** ffn_up.bias, ffn_down.bias and attn_output.bias: required (StarCoder 2) or added when present ('optional': Nemotron). */
  biases?: boolean | 'optional';
  /**
   * StableLM 2: per-head q/k LayerNorms (a weight row per head, no bias) before RoPE when the file
   * has attn_q_norm / attn_k_norm; without ffn_norm the FFN reads the attention's input norm
   * (parallel residual).
   */
  stablelm?: boolean;
  /** attention.clamp_kqv (optional): > 0 clamps Q, K and V to ± it after their projections (OLMo). */
  clampKqv?: boolean;
  /**
   * num_loops (optional, default 1) passes over the same blocks, each pass with KV rows of its own,
   * output_norm between passes unless skip_loop_final_norm (Nanbeige).
   */
  loops?: boolean;
  /**
   * Learned absolute positions (GPT-2, StarCoder): position_embd.weight (required) holds a row per
   * position, added to the token's embedding; the context may not pass its rows (model.ts refuses).
   */
  learnedPositions?: boolean;
  /** One attn_qkv with its bias, both required (GPT-2, StarCoder, Qwen: their loaders take no split q/k/v). */
  fusedQkv?: boolean;
  /** token_embd.weight optional: without it output.weight embeds the tokens too (CodeShell's loader). */
  embdFromOutput?: boolean;
  /**
   * Parallel blocks, x + attn(norm1(x)) + ffn(norm2(x)): 'ffn_norm', the FFN reads ffn_norm of the
   * block's input (GPT-NeoX with use_parallel_residual); 'attn_norm', it reads the attention's
   * input norm (Phi-2, Falcon). Only with layerNorm.
   */
  parallel?: 'ffn_norm' | 'attn_norm';
  /** Falcon-40B: with attn_norm_2 in the file (optional) the attention reads its LayerNorm of the input, the FFN attn_norm's. */
  attnNorm2?: boolean;
  /** One attn_qkv required, any q/k/v bias unread (Falcon's loader takes none). */
  fusedQkvNoBias?: boolean;
  /** output.bias required (Phi-2's loader). */
  outputBias?: boolean;
  /**
   * ALiBi: the maximum bias (llama.cpp's f_max_alibi_bias: BLOOM's and Refact's loaders fix 8,
   * MPT's reads attention.max_alibi_bias, Baichuan's fixes 8 at 40 blocks); > 0 adds each head's
   * slope x -|pos_k - pos_q| to its scores (the attention op's `alibi`); 0: none.
   */
  alibi?: (hp: HParams) => number;
  /** token_embd_norm (weight and bias, required): a LayerNorm of the embedding before the blocks (BLOOM). */
  tokenNorm?: boolean;
  /** The LayerNorms' biases optional (MPT: attn_norm, ffn_norm and output_norm biases each when present). */
  normBiasOptional?: boolean;
  /** MPT: position_embd added to the embedding when present; q/k norms and AWQ's ffn_act scales refused. */
  mpt?: boolean;
  /** The graph rotates without the rope_freqs / LongRoPE tables its loader may read (qwen2vl, plamo, pangu-embedded). */
  unusedRopeFreqs?: boolean;
  /** The graph leaves out the output.bias its loader reads (qwen2vl). */
  unusedOutputBias?: boolean;
  /**
   * post_attention_norm / post_ffw_norm may also be named without '.weight' (PLaMo 3: llama.cpp's
   * loader looks them up so, its converter writes '.weight'); kail reads either.
   */
  postNormBareNames?: boolean;
  /** The attention's score scale (Jais: 1/head, its muP attention); absent: 1/sqrt(head). */
  attnScale?: (hp: HParams) => number;
  /** ffn_gate.bias, ffn_up.bias and ffn_down.bias of the gated FFN, required (Jais). */
  gatedBiases?: boolean;
  /**
   * BitNet b1.58 (bitnet.cpp): an RMS attn_sub_norm of the attention before attn_output, an RMS
   * ffn_sub_norm of SiLU(gate) x up before ffn_down, each projection times its optional one-value
   * `.scale` tensor (attn_q.scale ... ffn_down.scale); the head is token_embd (its loader reads no output.weight).
   */
  bitnet?: boolean;
  /**
   * ModernBERT (a non-causal encoder): the sliding blocks' windows symmetric (attention's
   * sym_window: llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC), block 0's attn_norm optional (absent: the
   * stream itself), and the fused gate|up's activation by `{arch}.hidden_activation` (gelu / geglu
   * or absent: GEGLU; silu / swish / swiglu: SwiGLU; relu / reglu refused).
   */
  modernBert?: boolean;
  /**
   * Chameleon: per-head q/k LayerNorms before RoPE (eps 1e-5, a weight row per head, biases when
   * present); `swin`: attn_norm / ffn_norm of the sub-layers' outputs instead of their inputs; the
   * image tokens' logits (4..8195) clamped to -FLT_MAX in every row.
   */
  chameleon?: { swin: boolean };
}

const t = (i: number, name: string) => `blk.${i}.${name}`;
/** Chameleon's image tokens [from, to) (llama.cpp's chameleon.cpp) and float's lowest finite value. */
const CHAMELEON_IMAGE_TOKENS = [4, 8196] as const;
const FLT_MAX = 3.4028234663852886e38;

/**
 * The Llama family: token embedding, per layer RMSNorm → GQA attention with RoPE → residual →
 * RMSNorm → SwiGLU FFN or routed experts (softmax → top-k) → residual; output norm and head
 * (tied to the embedding when output.weight is absent). Covers llama (dense and Mixtral-style
 * MoE), qwen2, qwen2moe, qwen3, qwen3moe and olmoe; with a DenseLayout, the dense decoders of
 * DENSE_ARCHITECTURES (post norms, NoPE and sliding blocks, fused or ungated FFNs).
 */
export function buildLlamaFamily(hp: HParams, tensors: Map<string, GgufTensorInfo>, opt: LlamaFamilyOptions): ModelProgram {
  const need = (name: string): string => {
    if (!tensors.has(name)) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks tensor '${name}', which the ${hp.arch} architecture requires`);
    return name;
  };
  const maybe = (name: string): string | undefined => (tensors.has(name) ? name : undefined);
  const lo = opt.layout;
  const { p, x, h, attnOut } = trunkStart(hp, lo?.embdFromOutput ? (maybe('token_embd.weight') ?? need('output.weight')) : need('token_embd.weight'));
  if (lo?.learnedPositions) p.op('embed', x, { weights: { weight: need('position_embd.weight') }, params: { index: 1, accumulate: true } });
  if (lo?.mpt && maybe('position_embd.weight')) p.op('embed', x, { weights: { weight: need('position_embd.weight') }, params: { index: 1, accumulate: true } });
  const d = hp.nEmbd;
  if (lo && hp.headDimK !== hp.headDimV) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hp.headDimK} and value_length ${hp.headDimV} must match`);
  const rp = { ...ropeParams(hp, opt.neox), ...(lo?.ropeBase ? { freq_base: lo.ropeBase(hp) } : {}) };
  const ropeFreqs = opt.noBiasNoFreqs || lo?.unusedRopeFreqs ? undefined : ropeFactorTensor(hp, tensors, opt.nCtxSeq ?? 0, opt.ropeFactors ?? 'freqs');
  const swa = lo?.swa?.(hp);
  const nBlocks = lo?.nextn ? trunkLayers(hp) : hp.nLayer;
  const xielu = lo?.xielu ? xieluParams(hp, nBlocks) : undefined;
  const rmsNorm = (buf: number, a: number, weight: string) => p.op('rms_norm', buf, { a, weights: { weight }, params: { eps: hp.rmsEps } });
  // LayerNorm layouts: `base`.weight and `base`.bias ('affine'), or no parameters ('plain').
  const lnEps = lo?.layerNorm ? hp.meta.num('attention.layer_norm_epsilon') : 0;
  if (!(lnEps >= 0 && lnEps < 1)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.layer_norm_epsilon ${lnEps} is not in [0, 1)`);
  const layerNorm = (buf: number, a: number, base: string) =>
    p.op('layer_norm', buf, { a, ...(lo?.layerNorm === 'affine' ? { weights: withBias(need(`${base}.weight`), (lo.normBiasOptional ? maybe : need)(`${base}.bias`)) } : {}), params: { eps: lnEps } });
  // BLOOM's LayerNorm of the embedding (llama.cpp's tok_norm / tok_norm_b).
  if (lo?.tokenNorm) layerNorm(x, x, 'token_embd_norm');
  const alibi = lo?.alibi?.(hp) ?? 0;
  if (!(alibi >= 0 && Number.isFinite(alibi))) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ALiBi's maximum bias ${alibi} is not a non-negative number`);
  const clampKqv = lo?.clampKqv ? hp.meta.num('attention.clamp_kqv', 0) : 0;
  // Nanbeige's loops: pass j runs the same blocks again over KV rows of its own.
  const nLoops = lo?.loops ? hp.meta.int('num_loops', 1, 1, Math.max(1, Math.floor(512 / nBlocks))) : 1;
  const loopNorm = nLoops > 1 && !hp.meta.bool('skip_loop_final_norm', false);

  for (let li = 0; li < nBlocks * nLoops; li++) {
    const il = li % nBlocks;
    if (lo?.modernBert && il === 0 && !maybe(t(0, 'attn_norm.weight'))) p.op('copy', h, { a: x });
    else if (lo?.layerNorm) layerNorm(h, x, t(il, 'attn_norm'));
    if (lo?.fusedQkv) for (const n of ['attn_qkv.weight', 'attn_qkv.bias']) need(t(il, n));
    // Falcon-40B's attention reads attn_norm_2 of the input (h keeps attn_norm's for the FFN).
    const norm2 = lo?.attnNorm2 ? maybe(t(il, 'attn_norm_2.weight')) : undefined;
    const ha = norm2 ? p.buf('attn_norm_2', d) : h;
    if (norm2) p.op('layer_norm', ha, { a: x, weights: withBias(norm2, maybe(t(il, 'attn_norm_2.bias'))), params: { eps: lnEps } });
    if (lo?.fusedQkvNoBias) need(t(il, 'attn_qkv.weight'));
    const qkvMaybe = lo?.fusedQkvNoBias ? (name: string) => (/\.attn_(qkv|q|k|v)\.bias$/.test(name) ? undefined : maybe(name)) : maybe;
    const { H: nHead, Hkv: nHeadKv, q, k, v, attn } = qkvProjections(p, hp, il, lo?.layerNorm ? { x: ha, h: ha } : { x, h }, { need, maybe: qkvMaybe }, hp.headDimK, hp.headDimV, { noNorm: lo ? !lo.attnNorm || lo.layerNorm !== undefined : false });
    // BitNet's per-tensor scales (llama.cpp's build_lora_mm w_s: the product times the one value).
    const wScale = (buf: number, base: string) => {
      const s = lo?.bitnet ? maybe(t(il, `${base}.scale`)) : undefined;
      if (!s) return;
      const info = tensors.get(s)!;
      if (info.dims.reduce((a, b) => a * b, 1) !== 1) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ${base}.scale is [${info.dims.join(', ')}], not one value`);
      p.op('mul', buf, { a: buf, weights: { weight: s } });
    };
    if (lo?.bitnet) {
      if (maybe(t(il, 'attn_qkv.weight'))) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ${hp.arch} takes split attn_q / attn_k / attn_v, not attn_qkv`);
      wScale(q, 'attn_q');
      wScale(k, 'attn_k');
      wScale(v, 'attn_v');
    }
    if (clampKqv > 0) for (const b of [q, k, v]) p.op('clamp', b, { a: b, params: { limit: clampKqv } });
    const qw = nHead * hp.headDimK;
    const kw = nHeadKv * hp.headDimK;
    if (lo?.mpt) {
      if (maybe(t(il, 'ffn_act.scales'))) throw new EngineError('KAIL_E_UNSUPPORTED', `layer ${il}: AWQ activation scales (ffn_act.scales) are not supported`);
      // (llama.cpp's mpt graph cannot run q/k norms: it reshapes the fused qkv's non-contiguous
      // view, which ggml_reshape_2d asserts against; with no reference to match, kail refuses them.)
      if (maybe(t(il, 'attn_q_norm.weight')) || maybe(t(il, 'attn_k_norm.weight')))
        throw new EngineError('KAIL_E_UNSUPPORTED', `layer ${il}: MPT's q/k LayerNorms (attn_q_norm / attn_k_norm) are not supported (llama.cpp's mpt graph cannot run them either)`);
    }
    const vw = nHeadKv * hp.headDimV;
    const qkNorms = () => {
      const qn = need(t(il, 'attn_q_norm.weight'));
      const kn = need(t(il, 'attn_k_norm.weight'));
      // OLMoE and OLMo 2 normalize the whole projection; Qwen3 each head.
      const [qnDims, knDims] = [tensors.get(qn)!.dims, tensors.get(kn)!.dims];
      const full = qnDims[0] === qw && knDims[0] === kw;
      if (!full && (qnDims[0] !== hp.headDimK || knDims[0] !== hp.headDimK))
        throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: attn_q_norm [${qnDims.join(', ')}] / attn_k_norm [${knDims.join(', ')}] are neither one head (${hp.headDimK}) nor the projections (${qw}, ${kw})`);
      if (lo?.qkNormWidth && (lo.qkNormWidth === 'full') !== full)
        throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ${hp.arch} normalizes q and k over ${lo.qkNormWidth === 'full' ? `the whole projections (${qw}, ${kw})` : `one head (${hp.headDimK})`}; the file's attn_q_norm / attn_k_norm have ${qnDims[0]} / ${knDims[0]}`);
      if (full) {
        rmsNorm(q, q, qn);
        rmsNorm(k, k, kn);
      } else {
        p.op('head_rms_norm', q, { a: q, weights: { weight: qn }, params: { eps: hp.rmsEps, head_dim: hp.headDimK, n_head: nHead } });
        p.op('head_rms_norm', k, { a: k, weights: { weight: kn }, params: { eps: hp.rmsEps, head_dim: hp.headDimK, n_head: nHeadKv } });
      }
    };
    if (opt.qkNorm && !lo?.qkNormAfterRope) qkNorms();
    if (lo?.stablelm && (maybe(t(il, 'attn_q_norm.weight')) || maybe(t(il, 'attn_k_norm.weight')))) {
      for (const [buf, name, n] of [[q, 'attn_q_norm.weight', nHead], [k, 'attn_k_norm.weight', nHeadKv]] as const) {
        const w = need(t(il, name));
        const dims = tensors.get(w)!.dims;
        if (dims[0] !== hp.headDimK || (dims[1] ?? 1) !== n)
          throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ${name} is [${dims.join(', ')}]; ${hp.arch} takes one row of ${hp.headDimK} per head (${n})`);
        p.op('head_rms_norm', buf, { a: buf, weights: { weight: w }, params: { eps: lnEps, head_dim: hp.headDimK, n_head: n, layer_norm: 1 } });
      }
    }
    if (lo?.chameleon)
      for (const [buf, name, n] of [[q, 'attn_q_norm', nHead], [k, 'attn_k_norm', nHeadKv]] as const) {
        const w = need(t(il, `${name}.weight`));
        const b = maybe(t(il, `${name}.bias`));
        for (const x of b ? [w, b] : [w]) {
          const dims = tensors.get(x)!.dims;
          if (dims[0] !== hp.headDimK || (dims[1] ?? 1) !== n)
            throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ${x.slice(x.indexOf('.', 4) + 1)} is [${dims.join(', ')}]; ${hp.arch} takes one row of ${hp.headDimK} per head (${n})`);
        }
        p.op('head_rms_norm', buf, { a: buf, weights: withBias(w, b), params: { eps: 1e-5, head_dim: hp.headDimK, n_head: n, layer_norm: 1 } });
      }
    const slides = swa?.layers[il] ?? false;
    if (!lo?.learnedPositions && (lo?.rope?.(il, slides, swa !== undefined) ?? true)) {
      const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
      const r = slides && swa?.ropeSwa ? { ...rp, ...swa.ropeSwa } : rp;
      p.op('rope', q, { a: q, weights: rw, params: { ...r, head_dim: hp.headDimK, n_head: nHead } });
      p.op('rope', k, { a: k, weights: rw, params: { ...r, head_dim: hp.headDimK, n_head: nHeadKv } });
    }
    if (opt.qkNorm && lo?.qkNormAfterRope) qkNorms();
    const layer = p.kvLayer(kw, vw);
    const scale = lo?.attnScale ? lo.attnScale(hp) : lo ? 1 / Math.sqrt(hp.headDimK) : hp.attentionScale || 1 / Math.sqrt(hp.headDimK);
    const window: Record<string, number | boolean> = slides ? (lo?.modernBert ? { sym_window: swa!.window } : { window: swa!.window }) : {};
    if (opt.causal === false) window.causal = false;
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: nHead, n_head_kv: nHeadKv, head_dim: hp.headDimK, head_dim_v: hp.headDimV, scale, ...window, ...(alibi > 0 ? { alibi } : {}) } });
    const oBias = lo?.biases === true ? need(t(il, 'attn_output.bias')) : lo?.biases === 'optional' ? maybe(t(il, 'attn_output.bias')) : opt.noBiasNoFreqs ? undefined : !lo || lo.attnOutBias ? maybe(t(il, 'attn_output.bias')) : undefined;
    if (lo?.bitnet) rmsNorm(attn, attn, need(t(il, 'attn_sub_norm.weight')));
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), lo?.bitnet ? undefined : oBias) });
    wScale(attnOut, 'attn_output');
    const postNorm = (base: string) => (lo?.postNormBareNames ? (maybe(t(il, `${base}.weight`)) ?? maybe(t(il, base)) ?? need(t(il, `${base}.weight`))) : need(t(il, `${base}.weight`)));
    if (lo?.attnPostNorm) rmsNorm(attnOut, attnOut, postNorm('post_attention_norm'));
    if (lo?.chameleon?.swin) rmsNorm(attnOut, attnOut, need(t(il, 'attn_norm.weight')));
    // GPT-NeoX's parallel blocks: the FFN's norm of the block's input, before the attention adds in.
    if (lo?.parallel === 'ffn_norm') layerNorm(h, x, t(il, 'ffn_norm'));
    p.op('add', x, { a: x, b: attnOut });

    // FFN
    const ffnNorm = !lo ? (maybe(t(il, 'ffn_norm.weight')) ?? need(t(il, 'post_attention_norm.weight'))) : lo.ffnNorm === 'none' || lo.layerNorm ? undefined : need(t(il, `${lo.ffnNorm}.weight`));
    // (StableLM 2's parallel blocks have no ffn_norm: h still holds the attention's input norm.)
    if (lo?.parallel) {
      // (Parallel blocks: h already holds the FFN's input.)
    } else if (lo?.stablelm) {
      const fw = maybe(t(il, 'ffn_norm.weight'));
      if (fw) p.op('layer_norm', h, { a: x, weights: withBias(fw, maybe(t(il, 'ffn_norm.bias'))), params: { eps: lnEps } });
    } else if (lo?.layerNorm) layerNorm(h, x, t(il, 'ffn_norm'));
    else if (ffnNorm) rmsNorm(h, x, ffnNorm);
    else p.op('copy', h, { a: x });
    const ffnOut = p.buf('ffn_out', d);
    if (opt.allExperts) need(t(il, 'ffn_gate_inp.weight'));
    if (!lo && tensors.has(t(il, 'ffn_gate_inp.weight'))) {
      softmaxExperts(p, hp, il, need, h, ffnOut, opt.normExpertWeights, hp.expertWeightsScale);
      if (opt.sharedExpertGate) gatedSharedExpert(p, tensors, il, need, h, ffnOut);
    } else if (lo?.fusedUpGate) fusedSwiglu(p, tensors, il, need, h, ffnOut, lo.modernBert ? modernBertAct(hp) : 'swiglu');
    else if (xielu || lo?.ungated) {
      const up = need(t(il, 'ffn_up.weight'));
      const ff = tensors.get(up)!.dims[1];
      const u = p.buf(`ffn_up${ff}`, ff);
      const bias = (name: string) => (lo?.biases === true ? need(t(il, name)) : lo?.biases === 'optional' ? maybe(t(il, name)) : undefined);
      p.op('matmul', u, { a: h, weights: withBias(up, bias('ffn_up.bias')) });
      if (xielu) p.op('xielu', u, { a: u, params: xielu[il] });
      else p.op(lo!.ungated!, u, { a: u });
      p.op('matmul', ffnOut, { a: u, weights: withBias(need(t(il, 'ffn_down.weight')), bias('ffn_down.bias')) });
    }
    else if (lo?.bitnet) {
      const ff = tensors.get(need(t(il, 'ffn_up.weight')))!.dims[1];
      const g = p.buf(`ffn_gate${ff}`, ff);
      const u = p.buf(`ffn_up${ff}`, ff);
      p.op('matmul', g, { a: h, weights: { weight: need(t(il, 'ffn_gate.weight')) } });
      wScale(g, 'ffn_gate');
      p.op('matmul', u, { a: h, weights: { weight: need(t(il, 'ffn_up.weight')) } });
      wScale(u, 'ffn_up');
      p.op('swiglu', g, { a: g, b: u });
      rmsNorm(g, g, need(t(il, 'ffn_sub_norm.weight')));
      p.op('matmul', ffnOut, { a: g, weights: { weight: need(t(il, 'ffn_down.weight')) } });
      wScale(ffnOut, 'ffn_down');
    }
    else denseGatedFfn(p, tensors, il, { need, maybe: lo?.gatedBiases ? need : lo || opt.noBiasNoFreqs ? () => undefined : maybe }, h, ffnOut);
    if (lo?.ffnPostNorm) rmsNorm(ffnOut, ffnOut, postNorm('post_ffw_norm'));
    if (lo?.chameleon?.swin) rmsNorm(ffnOut, ffnOut, need(t(il, 'ffn_norm.weight')));
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: li } });
    // Between Nanbeige's passes: output_norm, unless skip_loop_final_norm.
    if (loopNorm && il === nBlocks - 1 && li + 1 < nBlocks * nLoops) rmsNorm(x, x, need('output_norm.weight'));
  }
  if (opt.encoderNorm && lo?.layerNorm) return p.build(layerNormOutput(p, hp, x, withBias(need(opt.encoderNorm), (lo.normBiasOptional ? maybe : need)(opt.encoderNorm.replace(/\.weight$/, '.bias'))), lnEps));
  if (opt.encoderNorm) return p.build(hiddenOutput(p, hp, need, x, undefined, opt.encoderNorm));
  const ho = lo?.layerNorm ? layerNormOutput(p, hp, x, lo.layerNorm === 'affine' ? withBias(need('output_norm.weight'), (lo.normBiasOptional ? maybe : need)('output_norm.bias')) : undefined, lnEps) : hiddenOutput(p, hp, need, x);
  const head = lo?.bitnet ? need('token_embd.weight') : lo?.untiedHead || opt.untiedHead ? need('output.weight') : (maybe('output.weight') ?? need('token_embd.weight'));
  const nVocab = tensors.get(head)!.dims[1];
  const logits = p.buf('logits', nVocab, true);
  // qwen2 files may carry an output bias (dream's loader reads one, its non-causal graph adds none).
  p.op('matmul', logits, { a: ho, weights: withBias(head, opt.causal === false || lo?.unusedOutputBias ? undefined : lo?.outputBias ? need('output.bias') : maybe('output.bias')) });
  // Chameleon's text-only output: the image tokens 4..8195 at -FLT_MAX (llama.cpp's ggml_clamp of
  // them; its ggml_set_1d reaches only the first output row, kail clamps every row).
  if (lo?.chameleon) {
    if (nVocab <= CHAMELEON_IMAGE_TOKENS[1]) throw new EngineError('KAIL_E_BAD_MODEL', `chameleon: a vocabulary of ${nVocab} does not pass the image tokens ${CHAMELEON_IMAGE_TOKENS[0]}..${CHAMELEON_IMAGE_TOKENS[1] - 1} its text output suppresses`);
    const [lo0, hi0] = CHAMELEON_IMAGE_TOKENS;
    p.op('clamp', logits, { a: logits, params: { a_off: lo0, out_off: lo0, n: hi0 - lo0, min: -FLT_MAX, max: -FLT_MAX } });
  }
  return p.build(logits);
}

/** The output LayerNorm (with its weight and bias, or none) into the hidden output, over the kept rows. */
function layerNormOutput(p: ProgramBuilder, hp: HParams, x: number, weights: Record<string, string> | undefined, eps: number): number {
  const hid = p.buf('h_norm', hp.nEmbd);
  p.op('layer_norm', hid, { a: x, ...(weights ? { weights } : {}), params: { eps } });
  p.hidden(hid);
  const ho = p.buf('h_out', hp.nEmbd, true);
  p.op('gather_out', ho, { a: hid });
  return ho;
}

/** ModernBERT's FFN activation from `{arch}.hidden_activation` (llama.cpp's llm_ffn_op_type_from_string, GEGLU by default). */
function modernBertAct(hp: HParams): 'swiglu' | 'geglu' {
  const raw = hp.meta.kv[`${hp.arch}.hidden_activation`];
  if (raw === undefined) return 'geglu';
  const a = String(raw);
  if (a === 'silu' || a === 'swish' || a === 'swiglu') return 'swiglu';
  if (a === 'relu' || a === 'reglu') throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: hidden_activation '${a}' is not supported`);
  return 'geglu';
}

/** xIELU's raw parameters of each block (llama.cpp's get_key_or_arr of the xielu.* keys, required). */
function xieluParams(hp: HParams, nBlocks: number): Record<string, number>[] {
  const md = new Metadata(hp.meta.kv, 'xielu');
  const [an, ap, beta, eps] = ['alpha_n', 'alpha_p', 'beta', 'eps'].map((k) => md.perLayerNum(k, nBlocks, undefined));
  return an.map((_, il) => ({ alpha_n: an[il], alpha_p: ap[il], beta: beta[il], eps: eps[il] }));
}

/**
 * Layer il's FFN over one ffn_up of twice feed_forward_length (GLM-4; llama.cpp's LLM_FFN_SWIGLU
 * on one tensor): SiLU of its first half times its second, then ffn_down.
 */
function fusedSwiglu(p: ProgramBuilder, tensors: Map<string, GgufTensorInfo>, il: number, need: (name: string) => string, h: number, out: number, act: 'swiglu' | 'geglu' = 'swiglu'): void {
  const up = need(t(il, 'ffn_up.weight'));
  const ff2 = tensors.get(up)!.dims[1];
  const down = need(t(il, 'ffn_down.weight'));
  const ff = tensors.get(down)!.dims[0];
  if (ff2 !== 2 * ff) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: ffn_up gives ${ff2} values, not twice ffn_down's ${ff} inputs`);
  const u = p.buf(`ffn_up${ff2}`, ff2);
  const g = p.buf(`ffn_gate${ff}`, ff);
  p.op('matmul', u, { a: h, weights: { weight: up } });
  if (act === 'geglu') {
    // ggml_geglu: the F16 table's GELU of the first half times the second.
    p.op('copy', g, { a: u, params: { a_off: 0, n: ff } });
    p.op('gelu', g, { a: g });
    p.op('mul', g, { a: g, b: u, params: { b_off: ff, n: ff } });
  } else p.op('swiglu', g, { a: u, b: u, params: { a_off: 0, b_off: ff, n: ff } });
  p.op('matmul', out, { a: g, weights: { weight: down } });
}

/**
 * Qwen's shared expert (Qwen2-MoE, Qwen3-Next, Qwen3.5): a SwiGLU FFN of `h` times
 * sigmoid(ffn_gate_inp_shexp . h), added to `out`.
 */
export function gatedSharedExpert(p: ProgramBuilder, tensors: Map<string, GgufTensorInfo>, il: number, need: (name: string) => string, h: number, out: number): void {
  const ffS = tensors.get(need(t(il, 'ffn_up_shexp.weight')))!.dims[1];
  const sg = p.buf(`sh_gate${ffS}`, ffS);
  const su = p.buf(`sh_up${ffS}`, ffS);
  const so = p.buf('sh_out', p.width(out));
  const sgate = p.buf('sh_gate_logit', 1);
  p.op('matmul', sg, { a: h, weights: { weight: need(t(il, 'ffn_gate_shexp.weight')) } });
  p.op('matmul', su, { a: h, weights: { weight: need(t(il, 'ffn_up_shexp.weight')) } });
  p.op('swiglu', sg, { a: sg, b: su });
  p.op('matmul', so, { a: sg, weights: { weight: need(t(il, 'ffn_down_shexp.weight')) } });
  p.op('matmul', sgate, { a: h, weights: { weight: need(t(il, 'ffn_gate_inp_shexp.weight')) } });
  p.op('sigmoid_mul', so, { a: so, b: sgate });
  p.op('add', out, { a: out, b: so });
}

/**
 * Routed experts chosen by softmax over the router's logits (top-k, renormalized with `normW`, times
 * `wScale` when not 0 or 1), SwiGLU unless `act` says otherwise (the moe op's act; 2 and 3 have no
 * gate experts).
 */
export function softmaxExperts(p: ProgramBuilder, hp: HParams, il: number, need: (name: string) => string, h: number, out: number, normW: boolean, wScale: number, act = 0): void {
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il} has a router but expert_count/expert_used_count are missing`);
  const gated = act !== 2 && act !== 3;
  p.op('moe', out, {
    a: h,
    weights: {
      gate_inp: need(t(il, 'ffn_gate_inp.weight')),
      ...(gated ? { gate_exps: need(t(il, 'ffn_gate_exps.weight')) } : {}),
      up_exps: need(t(il, 'ffn_up_exps.weight')),
      down_exps: need(t(il, 'ffn_down_exps.weight')),
    },
    params: { n_expert: hp.nExpert, n_expert_used: hp.nExpertUsed, gating: 0, norm_w: normW, w_scale: wScale, moe_layer: p.moeLayer(hp.nExpert), ...(act ? { act } : {}) },
  });
}

const DENSE: Omit<DenseLayout, 'attnNorm' | 'ffnNorm'> = { attnPostNorm: false, ffnPostNorm: false, attnOutBias: false };
// OLMo 2's and EXAONE 4's blocks: no input norms; post norms on the attention and FFN outputs.
const POST_NORMS = { ...DENSE, attnNorm: false, attnPostNorm: true, ffnNorm: 'none', ffnPostNorm: true } as const;

// Llama's pre-norm block, and the options of a dense member without q/k norms.
const PRE: DenseLayout = { ...DENSE, attnNorm: true, ffnNorm: 'ffn_norm' };
const PLAIN = { qkNorm: false, normExpertWeights: false, sharedExpertGate: false } as const;

/** RoPE dimension sections with two or more set (llama.cpp's use_mrope): text tokens then rotate as NeoX. */
function usesMrope(hp: HParams): boolean {
  const raw = hp.meta.kv[`${hp.arch}.rope.dimension_sections`];
  if (raw === undefined || raw === null || typeof raw !== 'object' || !('length' in raw)) return false;
  const s = Array.from(raw as ArrayLike<unknown>, Number);
  return s[0] > 0 && s[1] > 0;
}

/**
 * The dense decoders buildLlamaFamily runs with a DenseLayout, as llama.cpp's
 * src/models/<arch>.cpp build them (1/sqrt(head) scores; SwiGLU FFNs and RMS norms unless the
 * layout says otherwise).
 */
export const DENSE_ARCHITECTURES: Record<string, (hp: HParams, tensors: Map<string, GgufTensorInfo>, o: { nCtxSeq: number }) => ModelProgram> = {
  // OLMo 2 (olmo2.cpp): post norms only, q/k norms over the whole projections, NeoX RoPE, an
  // untied head; with attention.sliding_window > 0 (OLMo 3), windows on the blocks
  // load_swa_pattern picks (every 4th full by default) that rotate unscaled (scale 1, no YaRN).
  olmo2: (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false,
      layout: {
        ...POST_NORMS, qkNormWidth: 'full', untiedHead: true,
        swa: (h) => {
          const window = h.meta.int('attention.sliding_window', 0, 0, 1 << 30);
          return window > 0 ? { window, layers: slidingWindowLayers(h, 4), ropeSwa: { freq_scale: 1, ext_factor: 0, attn_factor: 1 } } : undefined;
        },
      },
    }),
  // ByteDance Seed-OSS (seed-oss.cpp): Llama's block with NeoX RoPE, q/k/v biases when present,
  // the FFN's input norm named post_attention_norm.
  seed_oss: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: false, normExpertWeights: false, sharedExpertGate: false, layout: { ...DENSE, attnNorm: true, ffnNorm: 'post_attention_norm' } }),
  // SmolLM3 (smollm3.cpp): Llama's block, every 4th block (il + 1 a multiple of 4) without RoPE.
  smollm3: (hp, ts) => buildLlamaFamily(hp, ts, { neox: false, qkNorm: false, normExpertWeights: false, sharedExpertGate: false, layout: { ...DENSE, attnNorm: true, ffnNorm: 'ffn_norm', rope: (il) => (il + 1) % 4 !== 0 } }),
  // EXAONE 4.0 (exaone4.cpp): post norms only, per-head q/k norms before NeoX RoPE (rope_freqs
  // when present). With 64 blocks (the 32B; llama.cpp keys it on the block count, not on the
  // file's keys) windows (attention.sliding_window, 4096 by default) on the blocks
  // load_swa_pattern picks (every 4th full), RoPE on those only, the full ones NoPE; below, every
  // block full with RoPE. NextN blocks left out.
  exaone4: (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false,
      layout: {
        ...POST_NORMS, qkNormWidth: 'head', nextn: true,
        swa: (h) => (trunkLayers(h) === 64 ? { window: h.meta.int('attention.sliding_window', 4096, 1, 1 << 30), layers: slidingWindowLayers(h, 4) } : undefined),
        rope: (_il, slides, swaOn) => !swaOn || slides,
      },
    }),
  // ERNIE 4.5 dense (ernie4-5.cpp): Llama's block; its loader reads attn_output.bias, the graph adds none.
  ernie4_5: (hp, ts) => buildLlamaFamily(hp, ts, { neox: false, qkNorm: false, normExpertWeights: false, sharedExpertGate: false, layout: { ...DENSE, attnNorm: true, ffnNorm: 'ffn_norm' } }),
  // Hunyuan dense (hunyuan-vl.cpp): per-head q/k norms after NeoX RoPE, whose base is
  // rope.freq_base x alpha^(head / (head - 2)) when rope.scaling.alpha > 0.
  'hunyuan-dense': (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false,
      layout: {
        ...DENSE, attnNorm: true, ffnNorm: 'ffn_norm', qkNormAfterRope: true, qkNormWidth: 'head',
        ropeBase: (h) => {
          const alpha = Math.fround(h.meta.num('rope.scaling.alpha', 0));
          if (!(alpha > 0)) return h.ropeFreqBase;
          const dim = h.headDimK;
          return Math.fround(Math.fround(h.ropeFreqBase) * Math.fround(Math.pow(alpha, Math.fround(dim / (dim - 2)))));
        },
      },
    }),
  // GLM-4 dense (glm4.cpp): attention and FFN each between an input norm and a post norm, partial
  // RoPE over adjacent pairs (NeoX-like for text when the file has M-RoPE sections), q/k/v biases,
  // one fused gate|up; NextN blocks left out.
  glm4: (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      neox: usesMrope(hp), qkNorm: false, normExpertWeights: false, sharedExpertGate: false,
      layout: { ...DENSE, attnNorm: true, attnPostNorm: true, ffnNorm: 'ffn_norm', ffnPostNorm: true, fusedUpGate: true, nextn: true },
    }),
  // Swiss AI Apertus (apertus.cpp): Llama's block with per-head q/k norms before NeoX RoPE (the
  // loader's q/k norm biases unused by the graph), attn_output.bias when present, rope_freqs or
  // the LongRoPE tables by rope.scaling.type, an ungated FFN through xIELU, an untied head.
  apertus: (hp, ts, o) =>
    buildLlamaFamily(hp, ts, {
      neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false, ropeFactors: 'typed', nCtxSeq: o.nCtxSeq,
      layout: { ...DENSE, attnNorm: true, ffnNorm: 'ffn_norm', qkNormWidth: 'head', attnOutBias: true, xielu: true, untiedHead: true },
    }),
  // InternLM2 (internlm2.cpp): Llama's block (q/k/v fused in attn_qkv as converted, or split),
  // RoPE over adjacent pairs, output.weight required.
  internlm2: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, untiedHead: true } }),
  // EXAONE 3 (exaone.cpp): Llama's block with NeoX RoPE (rope_freqs when present).
  exaone: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: PRE }),
  // XVERSE (xverse.cpp): Llama's block, RoPE over adjacent pairs, output.weight required.
  xverse: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, untiedHead: true } }),
  // Nanbeige (nanbeige.cpp): Llama's block (rope_freqs when present), num_loops passes over the
  // blocks, output_norm between them unless skip_loop_final_norm.
  nanbeige: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, loops: true } }),
  // Arcee AFM (arcee.cpp): Llama's block with an ungated ReLU² FFN (rope_freqs when present).
  arcee: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, ungated: 'relu_sqr' } }),
  // Maincoder (maincoder.cpp): Llama's block with per-head q/k RMS norms after RoPE.
  maincoder: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, qkNorm: true, layout: { ...PRE, qkNormAfterRope: true, qkNormWidth: 'head' } }),
  // Orion (orion.cpp): Llama's block under LayerNorms with biases (output_norm too), NeoX RoPE,
  // output.weight required.
  orion: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', untiedHead: true } }),
  // OLMo (olmo.cpp): LayerNorms without parameters, Q, K and V clamped to ± attention.clamp_kqv
  // when it is positive, RoPE over adjacent pairs.
  olmo: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, layerNorm: 'plain', clampKqv: true } }),
  // StarCoder 2 (starcoder2.cpp): LayerNorms with biases, NeoX RoPE, attn_output.bias, an ungated
  // GELU FFN with biases on ffn_up and ffn_down.
  starcoder2: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true } }),
  // StableLM (stablelm.cpp): LayerNorms with biases, partial NeoX RoPE (rope.dimension_count),
  // StableLM 2 12B's per-head q/k LayerNorms and parallel blocks (no ffn_norm), output.weight required.
  stablelm: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', stablelm: true, untiedHead: true } }),
  // Nemotron (nemotron.cpp): LayerNorms with biases (LayerNorm1p's +1 folded in by the converter),
  // partial NeoX RoPE, an ungated ReLU² FFN, optional attn_output / ffn_up / ffn_down biases,
  // output.weight required.
  nemotron: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'relu_sqr', biases: 'optional', untiedHead: true } }),
  // GPT-NeoX (gptneox.cpp; Pythia, GPT-NeoX-20B): LayerNorms with biases, one attn_qkv with its
  // bias, partial NeoX RoPE, an ungated GELU FFN, every bias, output.weight required;
  // use_parallel_residual (required) true: attention and FFN side by side, each from a norm of the
  // block's input; false: one after the other.
  gptneox: (hp, ts) => {
    const key = 'gptneox.use_parallel_residual';
    if (hp.meta.kv[key] === undefined) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks metadata '${key}'`);
    const par = hp.meta.bool('use_parallel_residual', false);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true, fusedQkv: true, untiedHead: true, ...(par ? { parallel: 'ffn_norm' as const } : {}) } });
  },
  // Phi-2 (phi2.cpp): one LayerNorm (with bias) that attention and the FFN read side by side, q/k/v
  // fused or split (optional biases), partial NeoX RoPE, attn_output / ffn_up / ffn_down biases, an
  // ungated GELU FFN, output.weight and output.bias required.
  phi2: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true, parallel: 'attn_norm', untiedHead: true, outputBias: true } }),
  // ChatGLM3 / GLM-4 (chatglm.cpp): Llama's RMS-norm block with q/k/v fused (as converted, with
  // its bias) or split, RoPE over adjacent pairs on rope.dimension_count (half the head as
  // converted), no attn_output bias, one ffn_up of twice feed_forward_length (SiLU of its first
  // half times its second); the head tied to token_embd when output.weight is absent.
  chatglm: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, fusedUpGate: true } }),
  // Falcon (falcon.cpp): attention and an ungated GELU FFN side by side from attn_norm's LayerNorm
  // (Falcon-40B: the attention from attn_norm_2's when the file has it), one attn_qkv (MQA / GQA),
  // NeoX RoPE over the whole head (the loader refuses a partial one), no biases; the head tied to
  // token_embd when output.weight is absent.
  falcon: (hp, ts) => {
    if (hp.ropeDims !== hp.headDimK) throw new EngineError('KAIL_E_BAD_MODEL', `falcon: rope.dimension_count ${hp.ropeDims} must equal the head dimension ${hp.headDimK}`);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', parallel: 'attn_norm', attnNorm2: true, fusedQkvNoBias: true } });
  },
  // GPT-2 (gpt2.cpp) and StarCoder (starcoder.cpp; multi-query, head_count_kv 1, in its files):
  // learned absolute positions (position_embd, required) added to the embedding and no RoPE,
  // LayerNorms with biases, one attn_qkv with its bias (required), attn_output / ffn_up / ffn_down
  // biases, an ungated GELU FFN; the head tied to token_embd when output.weight is absent.
  gpt2: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true, learnedPositions: true, fusedQkv: true } }),
  starcoder: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true, learnedPositions: true, fusedQkv: true } }),
  // CodeShell (codeshell.cpp): GPT-2's block with NeoX RoPE over the whole head (the graph asserts
  // rope.dimension_count == head) instead of positions, q/k/v fused or split (optional biases),
  // output.weight required, which embeds the tokens too when token_embd is absent.
  codeshell: (hp, ts) => {
    if (hp.ropeDims !== hp.headDimK) throw new EngineError('KAIL_E_BAD_MODEL', `codeshell: rope.dimension_count ${hp.ropeDims} must equal the head dimension ${hp.headDimK}`);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true, untiedHead: true, embdFromOutput: true } });
  },
  // Qwen (v1) (qwen.cpp): Llama's block with one attn_qkv and its bias (required), NeoX RoPE, no
  // attn_output bias, output.weight required. feed_forward_length is twice the FFN's width (the
  // loader sizes ffn_gate / ffn_up / ffn_down by its half): a file where it is not is refused.
  qwen: (hp, ts) => {
    for (let il = 0; il < hp.nLayer; il++) {
      const ff = ts.get(`blk.${il}.ffn_up.weight`)?.dims[1];
      if (ff !== undefined && hp.nFf[il] !== 2 * ff)
        throw new EngineError('KAIL_E_BAD_MODEL', `qwen: layer ${il}: feed_forward_length ${hp.nFf[il]} is not twice ffn_up's ${ff} outputs (Qwen's files count the gate and up halves together)`);
    }
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, fusedQkv: true, untiedHead: true } });
  },
  // BLOOM (bloom.cpp): a LayerNorm of the embedding (token_embd_norm), LayerNorms with biases, one
  // attn_qkv with its bias, ALiBi (max bias 8, fixed by the loader) and no RoPE, attn_output /
  // ffn_up / ffn_down biases, an ungated GELU FFN; the head tied to token_embd when output.weight is absent.
  bloom: (hp, ts) =>
    buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, layerNorm: 'affine', ungated: 'gelu', biases: true, fusedQkv: true, tokenNorm: true, alibi: () => 8, rope: () => false } }),
  // MPT (mpt.cpp): LayerNorms whose biases are optional, q/k/v (one attn_qkv as converted, its bias
  // optional) clamped to ± attention.clamp_kqv when positive, ALiBi with attention.max_alibi_bias
  // (absent: 0, no ALiBi), no RoPE, position_embd added when present, optional attn_output /
  // ffn_up / ffn_down biases, an ungated GELU FFN; the head tied to token_embd when output.weight
  // is absent. q/k norms (which llama.cpp's graph asserts against) and AWQ scales are refused.
  mpt: (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      ...PLAIN, neox: false,
      layout: { ...PRE, layerNorm: 'affine', normBiasOptional: true, ungated: 'gelu', biases: 'optional', clampKqv: true, mpt: true, alibi: (h) => h.meta.num('attention.max_alibi_bias', 0), rope: () => false },
    }),
  // Refact (refact.cpp): Llama's block without RoPE, ALiBi (max bias 8, fixed by the loader); the
  // attn_output and FFN biases its loader reads are not added by its graph.
  refact: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, alibi: () => 8, rope: () => false } }),
  // Baichuan (baichuan.cpp): Llama's block, output.weight required. llama.cpp keys the positions on
  // the block count: 32 blocks (7B) rotate by RoPE over adjacent pairs, 40 blocks (13B) take ALiBi
  // (max bias 8); any other count takes neither (its type is unknown), as it does.
  baichuan: (hp, ts) =>
    buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, untiedHead: true, alibi: (h) => (h.nLayer === 40 ? 8 : 0), rope: () => hp.nLayer === 32 } }),
  // Jais (jais.cpp): LayerNorms with biases, one attn_qkv with its bias (both required), no RoPE,
  // ALiBi of attention.max_alibi_bias (optional; 0: none), scores scaled by 1/head (muP; the
  // converter folds the embedding and width scales into token_embd and output), attn_output.bias,
  // a SwiGLU FFN with ffn_gate / ffn_up / ffn_down biases (required), output.weight required.
  jais: (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      ...PLAIN, neox: false,
      layout: { ...PRE, layerNorm: 'affine', fusedQkv: true, biases: true, gatedBiases: true, untiedHead: true, rope: () => false, alibi: (h) => h.meta.num('attention.max_alibi_bias', 0), attnScale: (h) => 1 / h.headDimK },
    }),
  // Jais-2 (jais2.cpp): LayerNorms with biases, q/k/v (optional biases), NeoX RoPE over the whole
  // head, attn_output.bias, an ungated ReLU² FFN with ffn_up / ffn_down biases (all required), head
  // output.weight or token_embd.
  jais2: (hp, ts) => {
    wholeHeadRope(hp);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, layerNorm: 'affine', ungated: 'relu_sqr', biases: true } });
  },
  // EuroBERT (eurobert.cpp): an encoder of Llama's block (RMS norms, q/k/v with optional biases,
  // NeoX RoPE, SwiGLU), non-causal, no head: the output_norm'd state, pooled by pooling_type.
  eurobert: (hp, ts) => buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, causal: false, encoderNorm: 'output_norm.weight', layout: { ...PRE, unusedRopeFreqs: true } }),
  // NeoBERT (neo-bert.cpp): an encoder with RMS norms, one attn_qkv (no bias), RoPE over adjacent
  // pairs, one ffn_up of twice the FFN (SiLU of its first half times its second), non-causal, the
  // state after enc.output_norm; its optional classifier head (cls) is refused.
  'neo-bert': (hp, ts) => {
    if (ts.has('cls.weight') || ts.has('cls.output.weight')) throw new EngineError('KAIL_E_UNSUPPORTED', "neo-bert: the classifier head (cls / cls.output) is not supported");
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, causal: false, encoderNorm: 'enc.output_norm.weight', layout: { ...PRE, fusedQkvNoBias: true, fusedUpGate: true, unusedRopeFreqs: true } });
  },
  // ModernBERT (modern-bert.cpp): a non-causal encoder; a LayerNorm (weight only) of the embedding,
  // pre-norm blocks of LayerNorms (block 0's attn_norm optional), one attn_qkv (no bias), NeoX RoPE,
  // with attention.sliding_window > 0 symmetric windows on the blocks load_swa_pattern(3, dense
  // first) picks (every 3rd full, from block 0) rotating at rope.freq_base_swa (10000 when absent)
  // unscaled, a fused gate|up GEGLU (or SwiGLU by hidden_activation), output_norm; no head.
  'modern-bert': (hp, ts) => {
    if (ts.has('cls.weight') || ts.has('cls.output.weight')) throw new EngineError('KAIL_E_UNSUPPORTED', 'modern-bert: the classifier head (cls / cls.output) is not supported');
    return buildLlamaFamily(hp, ts, {
      ...PLAIN, neox: true, causal: false, encoderNorm: 'output_norm.weight',
      layout: {
        ...PRE, layerNorm: 'affine', normBiasOptional: true, tokenNorm: true, fusedQkvNoBias: true, fusedUpGate: true, modernBert: true, unusedRopeFreqs: true,
        swa: (h) => {
          const window = h.meta.int('attention.sliding_window', 0, 0, 1 << 30);
          if (window === 0) return undefined;
          const base = h.meta.num('rope.freq_base_swa', 10000);
          if (!(base > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${h.arch}: rope.freq_base_swa ${base} is not positive`);
          return { window, layers: slidingWindowLayers(h, 3, true), ropeSwa: { freq_base: base, freq_scale: 1 } };
        },
      },
    });
  },
  // BitNet b1.58 (bitnet.cpp): Llama's block with NeoX RoPE, sub-norms before attn_output and
  // ffn_down, per-tensor scales (DenseLayout bitnet); the head is token_embd (a file with an
  // output.weight is refused: llama.cpp's loader reads none).
  bitnet: (hp, ts) => {
    if (ts.has('output.weight')) throw new EngineError('KAIL_E_BAD_MODEL', "bitnet: the head is token_embd (llama.cpp's loader reads no output.weight); the file has one");
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, bitnet: true } });
  },
  // Qwen2-VL's language model (qwen2vl.cpp): Llama's block with q/k/v biases when present and
  // M-RoPE over rope.dimension_sections (required) on the whole head. Text tokens get one position
  // in every section (llama.cpp's batch broadcasts it), which makes M-RoPE exactly NeoX RoPE. The
  // graph reads no rope_freqs and leaves out the output.bias its loader reads. (Images need the
  // vision tower, which kail does not run.)
  qwen2vl: (hp, ts) => {
    mropeSections(hp, true);
    wholeHeadRope(hp);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, unusedRopeFreqs: true, unusedOutputBias: true } });
  },
  // HunyuanOCR / Hunyuan-VL's language model (hunyuan-vl.cpp): hunyuan-dense's block and RoPE base
  // (both run that graph); with rope.dimension_sections (optional, two or more set) it rotates by
  // M-RoPE (XD-RoPE): NeoX RoPE for text, whose position is the same in every section. (llama.cpp
  // gives text tokens position 0 in the fourth section, HunyuanOCR's 16 lowest-frequency pairs,
  // which then do not rotate; kail rotates them with the rest, as the model does.)
  hunyuan_vl: (hp, ts, o) => {
    mropeSections(hp, false);
    wholeHeadRope(hp);
    return DENSE_ARCHITECTURES['hunyuan-dense'](hp, ts, o);
  },
  // PLaMo (plamo.cpp, PLaMo-13B): attention and the SwiGLU FFN side by side from one RMS norm
  // (attn_norm), NeoX RoPE over the whole head (rope_freqs unread), q/k/v biases when present,
  // output.weight required.
  plamo: (hp, ts) => {
    wholeHeadRope(hp);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, ffnNorm: 'none', parallel: 'attn_norm', untiedHead: true, unusedRopeFreqs: true } });
  },
  // PLaMo 3 (plamo3.cpp): one attn_qkv (no bias), per-head q/k RMS norms before NeoX RoPE,
  // post_attention_norm and post_ffw_norm on the sub-layers' outputs (named with or without
  // '.weight': llama.cpp's loader looks them up without, its converter writes with), one ffn_up of
  // twice the FFN (SiLU of its first half times its second). With attention.sliding_window > 0,
  // windows on the blocks load_swa_pattern(8) picks (7 of every 8 by default), rotating at
  // rope.freq_base_swa (absent: llama.cpp's 10000, not the file's base) and scale 1.
  plamo3: (hp, ts) =>
    buildLlamaFamily(hp, ts, {
      ...PLAIN, neox: true, qkNorm: true,
      layout: {
        ...PRE, attnPostNorm: true, ffnPostNorm: true, fusedUpGate: true, fusedQkvNoBias: true, qkNormWidth: 'head', postNormBareNames: true,
        swa: (h) => {
          const window = h.meta.int('attention.sliding_window', 0, 0, 1 << 30);
          if (window === 0) return undefined;
          const base = h.meta.num('rope.freq_base_swa', 10000);
          if (!(base > 0 && Number.isFinite(base))) throw new EngineError('KAIL_E_BAD_MODEL', `plamo3: rope.freq_base_swa ${base} is not a positive number`);
          return { window, layers: slidingWindowLayers(h, 8), ropeSwa: { freq_base: base, freq_scale: 1 } };
        },
      },
    }),
  // openPangu-Embedded (pangu-embed.cpp): Llama's block with NeoX RoPE over the whole head (the
  // rope_freqs / LongRoPE tables its loader reads unused), q/k/v biases when present,
  // attn_output.bias required.
  'pangu-embedded': (hp, ts) => {
    wholeHeadRope(hp);
    for (let il = 0; il < hp.nLayer; il++)
      if (!ts.has(`blk.${il}.attn_output.bias`)) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks tensor 'blk.${il}.attn_output.bias', which the pangu-embedded architecture requires`);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, attnOutBias: true, unusedRopeFreqs: true } });
  },
  // Apple OpenELM (openelm.cpp): head counts and FFN widths per block (arrays), one attn_qkv (no
  // bias) of q|k|v heads, per-head q/k RMS norms before NeoX RoPE, the head tied to token_embd
  // (the loader reads no output.weight: a file with one is refused).
  openelm: (hp, ts) => {
    if (ts.has('output.weight')) throw new EngineError('KAIL_E_BAD_MODEL', 'openelm: the head is token_embd (llama.cpp\'s loader reads no output.weight); the file has one');
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, qkNorm: true, layout: { ...PRE, fusedQkvNoBias: true, qkNormWidth: 'head', unusedRopeFreqs: true } });
  },
  // PaddleOCR-VL's language model (paddleocr.cpp, ERNIE 4.5's loader): qwen2vl's graph with the
  // attn_output.bias added when present; q/k/v biases when present; M-RoPE over
  // rope.dimension_sections (required: ggml's M-RoPE divides by their sum), NeoX RoPE for text.
  paddleocr: (hp, ts) => {
    mropeSections(hp, true);
    wholeHeadRope(hp);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, attnOutBias: true, unusedRopeFreqs: true } });
  },
  // CogVLM's language model (cogvlm.cpp), text tokens: one attn_qkv (no bias) split into three
  // n_embd thirds (head_count_kv = head_count, heads covering n_embd), NeoX RoPE over the whole
  // head at base 10000 (ggml_rope's default: the graph ignores rope.freq_base, as CogVLM's own
  // rotary embedding does), Llama's FFN. The vision expert (vis_attn_qkv, vis_attn_output,
  // vis_gate, vis_up, vis_down: required by the loader) runs only on image embeddings, which
  // kail (no vision tower) never feeds.
  cogvlm: (hp, ts) => {
    wholeHeadRope(hp);
    for (let il = 0; il < hp.nLayer; il++) {
      if (hp.nHeadKv[il] !== hp.nHead[il] || hp.headDimK * hp.nHead[il] !== hp.nEmbd)
        throw new EngineError('KAIL_E_BAD_MODEL', `cogvlm: layer ${il}: head_count_kv ${hp.nHeadKv[il]} must equal head_count ${hp.nHead[il]} and head ${hp.headDimK} x heads must be n_embd ${hp.nEmbd} (its graph splits attn_qkv in thirds)`);
      for (const n of ['vis_attn_qkv', 'vis_attn_output', 'vis_gate', 'vis_up', 'vis_down'])
        if (!ts.has(`blk.${il}.${n}.weight`)) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks tensor 'blk.${il}.${n}.weight', which the cogvlm architecture requires`);
    }
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: true, layout: { ...PRE, fusedQkvNoBias: true, unusedRopeFreqs: true, ropeBase: () => 10000 } });
  },
  // Chameleon (chameleon.cpp), text output: per-head q/k LayerNorms (eps 1e-5, weight [head,
  // n_head], biases when present) before RoPE over adjacent pairs on the whole head; with
  // swin_norm (optional, default false) attn_norm / ffn_norm normalize the attention's and the
  // FFN's outputs instead of their inputs; the image tokens' logits 4..8195 at -FLT_MAX (the
  // vocabulary must pass them); the head tied to token_embd when output.weight is absent.
  chameleon: (hp, ts) => {
    wholeHeadRope(hp);
    const swin = hp.meta.bool('swin_norm', false);
    return buildLlamaFamily(hp, ts, { ...PLAIN, neox: false, layout: { ...PRE, attnNorm: !swin, ffnNorm: swin ? 'none' : 'ffn_norm', chameleon: { swin }, unusedRopeFreqs: true } });
  },
};

/** qwen2vl's, plamo's, pangu-embedded's and hunyuan_vl's graphs assert rope.dimension_count == the head. */
function wholeHeadRope(hp: HParams): void {
  if (hp.ropeDims !== hp.headDimK) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.dimension_count ${hp.ropeDims} must equal the head dimension ${hp.headDimK}`);
}

/**
 * rope.dimension_sections (one number or 4; required for qwen2vl): ggml's M-RoPE needs one of the
 * first three set when it rotates by them, and their sum within the head.
 */
function mropeSections(hp: HParams, required: boolean): void {
  if (!required && !hp.meta.has('rope.dimension_sections')) return;
  const raw = hp.meta.kv[`${hp.arch}.rope.dimension_sections`];
  if (raw !== null && typeof raw === 'object' && 'length' in raw && (raw as ArrayLike<unknown>).length !== 4)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.dimension_sections has ${(raw as ArrayLike<unknown>).length} entries; it takes 4 (or one number for all)`);
  const s = hp.meta.perLayer('rope.dimension_sections', 4, undefined, 0, 1 << 16);
  const on = required || (s[0] > 0 && s[1] > 0);
  if (on && !(s[0] > 0 || s[1] > 0 || s[2] > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.dimension_sections [${s.join(', ')}] sets none of the first three sections`);
  if (on && s[0] + s[1] + s[2] + s[3] > hp.headDimK) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.dimension_sections [${s.join(', ')}] add up to more than the head dimension ${hp.headDimK}`);
}
