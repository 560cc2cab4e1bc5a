import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { EngineError } from '../errors';
import type { HParams } from './hparams';

/** RoPE op parameters from the file's hyperparameters (ggml's rope_ext: base, scale, YaRN). */
export function ropeParams(hp: HParams, neox: boolean, overrides: { n_dims?: number; attn_factor?: number } = {}): Record<string, number | boolean> {
  return {
    n_dims: overrides.n_dims ?? hp.ropeDims,
    neox,
    freq_base: hp.ropeFreqBase,
    freq_scale: hp.ropeFreqScale,
    ext_factor: hp.ropeYarn.extFactor,
    attn_factor: overrides.attn_factor ?? hp.ropeYarn.attnFactor,
    beta_fast: hp.ropeYarn.betaFast,
    beta_slow: hp.ropeYarn.betaSlow,
    n_ctx_orig: hp.ropeYarn.nCtxOrig,
  };
}

/**
 * Where an architecture's loader finds its RoPE frequency factors: `rope_freqs` (Llama 3's
 * scaling), Phi-3's LongRoPE tables `rope_factors_long`/`rope_factors_short` ('longrope'), or the
 * tables when rope.scaling.type is longrope and rope_freqs otherwise ('typed': llama, granite).
 */
export type RopeFactorSource = 'freqs' | 'longrope' | 'typed';

/**
 * The frequency-factor tensor llama.cpp's get_rope_factors gives the rope ops (none when the file
 * lacks it). Of the LongRoPE tables it takes the long one when the context of one sequence, padded
 * to a multiple of 256 as llama.cpp pads it, is longer than rope.scaling.original_context_length,
 * else the short one: the factors follow the context the model is loaded with, not the position.
 */
export function ropeFactorTensor(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number, source: RopeFactorSource): string | undefined {
  const has = (name: string) => (tensors.has(name) ? name : undefined);
  if (source === 'freqs' || (source === 'typed' && hp.ropeScalingType !== 'longrope')) return has('rope_freqs.weight');
  const padded = Math.ceil(nCtxSeq / 256) * 256;
  return has(padded > hp.ropeYarn.nCtxOrig ? 'rope_factors_long.weight' : 'rope_factors_short.weight');
}

/**
 * llama_context's yarn_attn_factor for a file whose loader read mscale_all_dim (0: none): with YaRN,
 * get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) (or get_mscale(f, 1) without it) over
 * 1 + 0.1 ln f, which the rope op multiplies back, times rope.scaling.attn_factor; without YaRN
 * rope.scaling.attn_factor alone. mscale is 1 except in deepseek2 files, where llama.cpp takes
 * mscale_all_dim itself when it is not 1 ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]).
 */
export function yarnAttnFactor(hp: HParams, mscaleAllDim: number): number {
  const ropeAttn = hp.ropeYarn.attnFactor;
  if (hp.ropeYarn.extFactor === 0) return ropeAttn;
  const factor = 1 / hp.ropeFreqScale;
  const getMscale = (scale: number, m: number) => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
  let a: number;
  if (mscaleAllDim !== 0) {
    const mscale = hp.arch === 'deepseek2' && mscaleAllDim !== 1 ? mscaleAllDim : 1;
    a = getMscale(factor, mscale) / getMscale(factor, mscaleAllDim);
  } else {
    a = getMscale(factor, 1);
  }
  return (a / (1 + 0.1 * Math.log(factor))) * ropeAttn;
}

/** A matmul's weights: the matrix, and its bias when the file has one. */
export function withBias(w: string, b: string | undefined): Record<string, string> {
  return b ? { weight: w, bias: b } : { weight: w };
}

/**
 * Layer il's attention inputs: the q/k/v/attn buffers of its head counts (head sizes hdK, hdV),
 * attn_norm of the residual stream x into h (plus attn_norm.bias with `normBias`), and the q/k/v
 * projections of h (with their biases when the file has them). `qPerHead` (default hdK): the
 * floats the query projection gives per head (Qwen3-Next/3.5: a query and its gate, 2 hdK).
 * `clampKqv` > 0: the projections clamped to ± it (llama.cpp's build_qkv; DBRX), a fused product
 * before its split.
 */
export function qkvProjections(
  p: ProgramBuilder,
  hp: HParams,
  il: number,
  io: { x: number; h: number },
  lookup: { need: (name: string) => string; maybe: (name: string) => string | undefined },
  hdK: number,
  hdV: number,
  opts: { normBias?: boolean; qPerHead?: number; layerNormEps?: number; noNorm?: boolean; clampKqv?: number } = {},
): { H: number; Hkv: number; q: number; k: number; v: number; attn: number } {
  const H = hp.nHead[il];
  const Hkv = hp.nHeadKv[il];
  if (H % Hkv !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
  const qw = H * (opts.qPerHead ?? hdK);
  const q = p.buf(`q${qw}`, qw);
  const k = p.buf(`k${Hkv * hdK}`, Hkv * hdK);
  const v = p.buf(`v${Hkv * hdV}`, Hkv * hdV);
  const attn = p.buf(`attn${H * hdV}`, H * hdV);
  const { need, maybe } = lookup;
  const t = (name: string) => `blk.${il}.${name}`;
  const normBias = opts.normBias ? need(t('attn_norm.bias')) : undefined;
  // (A LayerNorm with layerNormEps, else an RMSNorm; with noNorm none: the projections read x
  // itself, as OLMo 2's and EXAONE 4's post-norm blocks do.)
  if (opts.noNorm) p.op('copy', io.h, { a: io.x });
  else if (opts.layerNormEps !== undefined) p.op('layer_norm', io.h, { a: io.x, weights: withBias(need(t('attn_norm.weight')), normBias), params: { eps: opts.layerNormEps } });
  else p.op('rms_norm', io.h, { a: io.x, weights: withBias(need(t('attn_norm.weight')), normBias), params: { eps: hp.rmsEps } });
  // A fused attn_qkv (llama.cpp's create_tensor_qkv takes it for any architecture): one product,
  // then Q, K and V are its slices in that order.
  const fused = maybe(t('attn_qkv.weight'));
  const clamp = opts.clampKqv ?? 0;
  if (fused) {
    const [wq, wk, wv] = [qw, Hkv * hdK, Hkv * hdV];
    if (maybe(t('attn_q.bias')) || maybe(t('attn_k.bias')) || maybe(t('attn_v.bias')))
      throw new EngineError('KAIL_E_UNSUPPORTED', `layer ${il}: a fused attn_qkv with separate q/k/v biases is not supported`);
    const qkv = p.buf(`qkv${wq + wk + wv}`, wq + wk + wv);
    p.op('matmul', qkv, { a: io.h, weights: withBias(fused, maybe(t('attn_qkv.bias'))) });
    if (clamp > 0) p.op('clamp', qkv, { a: qkv, params: { limit: clamp } });
    p.op('copy', q, { a: qkv, params: { a_off: 0, n: wq } });
    p.op('copy', k, { a: qkv, params: { a_off: wq, n: wk } });
    p.op('copy', v, { a: qkv, params: { a_off: wq + wk, n: wv } });
    return { H, Hkv, q, k, v, attn };
  }
  for (const [buf, w] of [[q, 'attn_q'], [k, 'attn_k'], [v, 'attn_v']] as const) {
    p.op('matmul', buf, { a: io.h, weights: withBias(need(t(`${w}.weight`)), maybe(t(`${w}.bias`))) });
    if (clamp > 0) p.op('clamp', buf, { a: buf, params: { limit: clamp } });
  }
  return { H, Hkv, q, k, v, attn };
}

/**
 * Layer il's dense gated FFN of `h` into `out` (SwiGLU): ffn_gate/ffn_up, SiLU(gate) * up, ffn_down, each
 * with its bias when the file has one (llama.cpp's loaders read them as optional). With `geglu`
 * the gate goes through GELU instead (the F16 table's, as ggml_geglu_split: Gemma).
 */
export function denseGatedFfn(
  p: ProgramBuilder,
  tensors: Map<string, GgufTensorInfo>,
  il: number,
  lookup: { need: (name: string) => string; maybe: (name: string) => string | undefined },
  h: number,
  out: number,
  act: 'swiglu' | 'geglu' = 'swiglu',
): void {
  const { need, maybe } = lookup;
  const t = (name: string) => `blk.${il}.${name}`;
  const ff = tensors.get(need(t('ffn_up.weight')))!.dims[1];
  const g = p.buf(`ffn_gate${ff}`, ff);
  const u = p.buf(`ffn_up${ff}`, ff);
  p.op('matmul', g, { a: h, weights: withBias(need(t('ffn_gate.weight')), maybe(t('ffn_gate.bias'))) });
  p.op('matmul', u, { a: h, weights: withBias(need(t('ffn_up.weight')), maybe(t('ffn_up.bias'))) });
  if (act === 'geglu') {
    p.op('gelu', g, { a: g });
    p.op('mul', g, { a: g, b: u });
  } else {
    p.op('swiglu', g, { a: g, b: u });
  }
  p.op('matmul', out, { a: g, weights: withBias(need(t('ffn_down.weight')), maybe(t('ffn_down.bias'))) });
}

/**
 * The start of a decoder trunk: a builder with the residual stream `x`, the normed input `h` and
 * `attn_out` (all n_embd wide), and the token embedding into `x`.
 */
export function trunkStart(hp: HParams, embedding: string): { p: ProgramBuilder; x: number; h: number; attnOut: number } {
  const p = new ProgramBuilder();
  const x = p.buf('x', hp.nEmbd);
  const h = p.buf('h', hp.nEmbd);
  const attnOut = p.buf('attn_out', hp.nEmbd);
  p.op('embed', x, { weights: { weight: embedding } });
  return { p, x, h, attnOut };
}

/** Composes a model program: named float buffers and the ops that run over them, in order. */
export class ProgramBuilder {
  private readonly buffers: ModelProgram['buffers'] = [];
  private readonly byName = new Map<string, number>();
  private readonly ops: ProgramOp[] = [];
  private readonly kvK: number[] = [];
  private readonly kvV: number[] = [];
  private readonly rs: number[] = [];
  private nMoeLayers = 0;
  private nExpert = 0;
  private hiddenBuf = -1;

  /** A buffer of `width` floats per row (per token, or per output row); reused by name. */
  buf(name: string, width: number, outRows = false): number {
    if (!Number.isInteger(width) || width < 1)
      throw new EngineError('KAIL_E_BAD_MODEL', `buffer '${name}' would be ${width} wide: a tensor it is sized from has too few dimensions or a zero size`);
    const have = this.byName.get(name);
    if (have !== undefined) {
      const b = this.buffers[have];
      // Widths come from the file's tensor shapes: layers that disagree are a bad file.
      if (b.width !== width || b.outRows !== outRows)
        throw new EngineError('KAIL_E_BAD_MODEL', `buffer '${name}' is ${width} wide here but ${b.width} in an earlier layer: the model's tensor shapes disagree between layers`);
      return have;
    }
    this.buffers.push({ name, width, outRows });
    this.byName.set(name, this.buffers.length - 1);
    return this.buffers.length - 1;
  }

  /** A buffer's width (floats per row). */
  width(buf: number): number {
    return this.buffers[buf].width;
  }

  op(op: ProgramOp['op'], out: number, rest: Omit<ProgramOp, 'op' | 'out'> = {}): void {
    this.ops.push({ op, out, ...rest });
  }

  /** Declares a KV layer and returns its index for attention ops. */
  kvLayer(kWidth: number, vWidth: number): number {
    this.kvK.push(kWidth);
    this.kvV.push(vWidth);
    return this.kvK.length - 1;
  }

  /** Declares a recurrent layer (`width` floats of state per sequence) and returns its index for ssm_conv / gated_delta_net ops. */
  rsLayer(width: number): number {
    this.rs.push(width);
    return this.rs.length - 1;
  }

  /** Declares a MoE layer for expert statistics and returns its index. */
  moeLayer(nExpert: number): number {
    this.nExpert = Math.max(this.nExpert, nExpert);
    return this.nMoeLayers++;
  }

  /** Names a per-token buffer forward() can return (ForwardBatch.hidden). */
  hidden(buf: number): void {
    if (this.buffers[buf]?.outRows !== false) throw new Error('program: the hidden buffer must be a per-token buffer');
    this.hiddenBuf = buf;
  }

  build(logits: number): ModelProgram {
    return {
      buffers: this.buffers,
      ops: this.ops,
      logits,
      hidden: this.hiddenBuf,
      kvKWidth: this.kvK,
      kvVWidth: this.kvV,
      ...(this.rs.length ? { rsWidth: this.rs } : {}),
      nMoeLayers: this.nMoeLayers,
      nExpert: this.nExpert,
    };
  }
}
