import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { EngineError } from '../errors';

/** Upper bounds of the sizes and counts a model file may declare (far above any real model). */
export const MAX_LAYERS = 4096;
export const MAX_DIM = 1 << 20;
export const MAX_HEADS = 1 << 14;
export const MAX_EXPERTS = 1 << 16;

/** Reads `<arch>.<key>` style metadata with type checks and errors that name the key. */
export class Metadata {
  constructor(
    readonly kv: Record<string, GgufValue>,
    readonly arch: string,
  ) {}

  has(key: string): boolean {
    return this.kv[this.full(key)] !== undefined;
  }

  private full(key: string): string {
    return key.startsWith('general.') || key.startsWith('tokenizer.') ? key : `${this.arch}.${key}`;
  }

  num(key: string, def?: number): number {
    const k = this.full(key);
    const v = this.kv[k];
    if (v === undefined) {
      if (def !== undefined) return def;
      throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks metadata '${k}'`);
    }
    let n: number;
    if (typeof v === 'number') n = v;
    else if (typeof v === 'bigint') n = Number(v);
    else if (typeof v === 'boolean') n = v ? 1 : 0;
    else throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' must be a number, is ${Array.isArray(v) || ArrayBuffer.isView(v) ? 'an array' : typeof v}`);
    if (!Number.isFinite(n)) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' is ${n}, not a finite number`);
    return n;
  }

  /**
   * An integer metadata value in min..max: sizes and counts are checked before anything is sized
   * by them (a corrupt block_count of 2^31 must not become an array of 2^31 layers).
   */
  int(key: string, def: number | undefined, min: number, max: number): number {
    const v = this.num(key, def);
    if (!Number.isInteger(v) || v < min || v > max)
      throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${this.full(key)}' is ${v}; expected an integer in ${min}..${max}`);
    return v;
  }

  bool(key: string, def: boolean): boolean {
    const v = this.kv[this.full(key)];
    if (v === undefined) return def;
    if (typeof v === 'boolean') return v;
    if (typeof v === 'number') return v !== 0;
    throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${this.full(key)}' must be a boolean`);
  }

  str(key: string, def?: string): string {
    const k = this.full(key);
    const v = this.kv[k];
    if (v === undefined) {
      if (def !== undefined) return def;
      throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks metadata '${k}'`);
    }
    if (typeof v !== 'string') throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' must be a string`);
    return v;
  }

  /** A per-layer value stored either as one number or an array with one entry per layer. */
  perLayer(key: string, nLayer: number, def?: number, min = 0, max = MAX_DIM): number[] {
    return this.perLayerValues(key, nLayer, def, (x) => Number.isInteger(x) && x >= min && x <= max, `an integer in ${min}..${max}`);
  }

  /** perLayer for real numbers (per-layer limits and scales): any finite value of at least `min`; required without a default. */
  perLayerNum(key: string, nLayer: number, def: number | undefined, min = -Infinity): number[] {
    return this.perLayerValues(key, nLayer, def, (x) => Number.isFinite(x) && x >= min, min === -Infinity ? 'a finite number' : `a finite number of at least ${min}`);
  }

  private perLayerValues(key: string, nLayer: number, def: number | undefined, ok: (x: number) => boolean, expected: string): number[] {
    const k = this.full(key);
    const v = this.kv[k];
    if (!Number.isInteger(nLayer) || nLayer < 1 || nLayer > MAX_LAYERS) throw new EngineError('KAIL_E_BAD_MODEL', `block count ${nLayer} is not an integer in 1..${MAX_LAYERS}`);
    if (v === undefined && def !== undefined) return new Array(nLayer).fill(def);
    if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean' || v === undefined) {
      const one = this.num(key, def);
      if (!ok(one)) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' is ${one}; expected ${expected}`);
      return new Array(nLayer).fill(one);
    }
    if (typeof v === 'string') throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' must be a number or an array with one number per layer, is a string`);
    const arr = Array.from(v as ArrayLike<unknown>, (x) => (typeof x === 'number' || typeof x === 'bigint' || typeof x === 'boolean' ? Number(x) : NaN));
    if (arr.length !== nLayer) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' has ${arr.length} entries for ${nLayer} layers`);
    const bad = arr.findIndex((x) => !ok(x));
    if (bad >= 0) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' entry ${bad} is ${String((v as ArrayLike<unknown>)[bad])}; expected ${expected}`);
    return arr;
  }
}

/** Hyperparameters shared by the decoder-only architectures. */
export interface HParams {
  arch: string;
  nLayer: number;
  nEmbd: number;
  nCtxTrain: number;
  nHead: number[];
  nHeadKv: number[];
  headDimK: number;
  headDimV: number;
  nFf: number[];
  rmsEps: number;
  /** `{arch}.pooling_type` (llama.cpp's: 0 none, 1 mean, 2 cls, 3 last, 4 rank); -1 when absent. */
  poolingType: number;
  ropeFreqBase: number;
  ropeDims: number;
  ropeFreqScale: number;
  ropeScalingType: string;
  ropeYarn: { extFactor: number; attnFactor: number; betaFast: number; betaSlow: number; nCtxOrig: number };
  nExpert: number;
  nExpertUsed: number;
  nFfExp: number;
  nFfShexp: number;
  expertWeightsScale: number;
  attentionScale: number;
  nVocab: number;
  /** The file's metadata, for architecture-specific keys. */
  meta: Metadata;
}

/** Architectures whose blocks without KV heads (attention.head_count_kv 0) are recurrent. */
const KV_HEADLESS_BLOCKS = new Set(['lfm2', 'lfm2moe', 'nemotron_h', 'nemotron_h_moe', 'granitehybrid', 'jamba', 'kimi-linear', 'bailingmoe3', 'kimi-k3']);

/**
 * Architectures whose blocks each have their own attention (DeciLM / Nemotron-51B): head_count 0
 * for a block without attention, head_count_kv 0 for one whose attention is a linear replacement;
 * PLaMo 2: both 0 for its Mamba blocks.
 */
const VARIABLE_ATTENTION_BLOCKS = new Set(['deci', 'plamo2']);

/** Architectures without attention (the pure state-space models): head_count 0, no head sizes. */
const ATTENTION_FREE = new Set(['mamba', 'mamba2', 'rwkv7', 'arwkv7', 'rwkv6', 'rwkv6qwen2']);

export function readHParams(md: Metadata, tensors: Map<string, GgufTensorInfo>): HParams {
  const nLayer = md.int('block_count', undefined, 1, MAX_LAYERS);
  const nEmbd = md.int('embedding_length', undefined, 1, MAX_DIM);
  const noAttn = ATTENTION_FREE.has(md.arch);
  const nHead = md.perLayer('attention.head_count', nLayer, undefined, noAttn || VARIABLE_ATTENTION_BLOCKS.has(md.arch) ? 0 : 1, MAX_HEADS);
  // llama.cpp: head_count_kv defaults to head_count, layer by layer.
  // (LFM2's, Nemotron-H's, Granite 4.0-H's, Jamba's and Kimi-Linear's converters write 0 KV heads for the
  // convolution, Mamba, KDA and FFN blocks, which llama.cpp then treats as recurrent or attention-free; everywhere
  // else a block has at least one.)
  const kvMin = KV_HEADLESS_BLOCKS.has(md.arch) || VARIABLE_ATTENTION_BLOCKS.has(md.arch) ? 0 : 1;
  const nHeadKv = md.has('attention.head_count_kv') ? md.perLayer('attention.head_count_kv', nLayer, undefined, kvMin, MAX_HEADS) : [...nHead];
  const headDimK = md.num('attention.key_length', noAttn && nHead[0] === 0 ? 0 : nEmbd / nHead[0]);
  const headDimV = md.num('attention.value_length', noAttn && nHead[0] === 0 ? 0 : nEmbd / nHead[0]);
  for (const [what, hd] of [['key', headDimK], ['value', headDimV]] as const)
    if (!Number.isInteger(hd) || hd < (noAttn ? 0 : 1) || hd > MAX_DIM)
      throw new EngineError('KAIL_E_BAD_MODEL', `${what} head dimension ${hd} is not an integer in 1..${MAX_DIM} (embedding_length ${nEmbd}, head_count ${nHead[0]})`);
  const nExpert = md.int('expert_count', 0, 0, MAX_EXPERTS);
  // As llama.cpp load_hparams: the type defaults to linear, the factor comes from
  // rope.scaling.factor or else the older rope.scale_linear, and freq_scale is its inverse.
  const scalingType = md.str('rope.scaling.type', 'linear');
  const scalingFactor = md.num('rope.scaling.factor', 0) || md.num('rope.scale_linear', 0);
  const freqScale = scalingFactor ? 1 / scalingFactor : 1;
  const nCtxTrain = md.num('context_length', 4096);
  const embd = tensors.get('token_embd.weight');
  const nVocab = embd ? embd.dims[1] : md.num('vocab_size');
  const hp: HParams = {
    arch: md.arch,
    nLayer,
    nEmbd,
    nCtxTrain,
    nHead,
    nHeadKv,
    headDimK,
    headDimV,
    nFf: md.perLayer('feed_forward_length', nLayer, 0, 0, MAX_DIM),
    rmsEps: md.num('attention.layer_norm_rms_epsilon', 1e-5),
    poolingType: md.num('pooling_type', -1),
    ropeFreqBase: md.num('rope.freq_base', 10000),
    ropeDims: md.num('rope.dimension_count', headDimK),
    ropeFreqScale: scalingType === 'none' ? 1 : freqScale,
    ropeScalingType: scalingType,
    // llama.cpp reads rope.scaling.yarn_ext_factor/yarn_beta_fast/yarn_beta_slow (which the converter
    // copies from the HF config) only for grok and mistral3; these architectures get its defaults.
    ropeYarn: {
      extFactor: scalingType === 'yarn' ? 1 : 0,
      attnFactor: md.num('rope.scaling.attn_factor', 1),
      betaFast: 32,
      betaSlow: 1,
      nCtxOrig: md.num('rope.scaling.original_context_length', nCtxTrain),
    },
    nExpert,
    nExpertUsed: md.int('expert_used_count', 0, 0, MAX_EXPERTS),
    nFfExp: md.int('expert_feed_forward_length', 0, 0, MAX_DIM),
    nFfShexp: md.int('expert_shared_feed_forward_length', 0, 0, MAX_DIM),
    expertWeightsScale: md.num('expert_weights_scale', 0),
    attentionScale: md.num('attention.scale', 0),
    nVocab,
    meta: md,
  };
  checkHParams(hp, tensors);
  return hp;
}

/**
 * Values no architecture can run with, refused with the key and the value before anything is
 * sized by them: the forward pass would otherwise read past a buffer, divide by zero or fill the
 * logits with NaN.
 */
function checkHParams(hp: HParams, tensors: Map<string, GgufTensorInfo>): void {
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (hp.nExpert > 0 && hp.nExpertUsed > hp.nExpert) bad(`expert_used_count ${hp.nExpertUsed} is larger than expert_count ${hp.nExpert}`);
  if (!(hp.rmsEps >= 0 && hp.rmsEps < 1)) bad(`attention.layer_norm_rms_epsilon ${hp.rmsEps} is not in [0, 1)`);
  if (!(hp.ropeFreqBase > 0)) bad(`rope.freq_base ${hp.ropeFreqBase} is not positive`);
  if (!Number.isInteger(hp.ropeDims) || hp.ropeDims < 0 || hp.ropeDims % 2 !== 0 || hp.ropeDims > hp.headDimK)
    bad(`rope.dimension_count ${hp.ropeDims} is not an even number of dimensions within the key head (${hp.headDimK})`);
  // llama.cpp load_hparams: llama rotates whole heads ("invalid n_rot").
  if (hp.arch === 'llama' && hp.ropeDims !== hp.headDimK) bad(`rope.dimension_count ${hp.ropeDims} must equal the head dimension ${hp.headDimK}`);
  // llama.cpp knows these (an unknown name is LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, which it asserts
  // against). longrope rotates as linear does (no YaRN ramp); the architectures that read
  // rope_factors_long/short pick one by the context (see ropeFactorTensor).
  if (!['none', 'linear', 'yarn', 'longrope'].includes(hp.ropeScalingType)) bad(`rope.scaling.type '${hp.ropeScalingType}' is not one of none, linear, yarn, longrope`);
  // Real files carry about 1 to 1.5 (LongRoPE's sqrt(1 + ln s / ln n), YaRN's mscale); a value
  // that scales K past F16's range fills the cache with infinities.
  if (!(hp.ropeYarn.attnFactor >= 0 && hp.ropeYarn.attnFactor <= 64)) bad(`rope.scaling.attn_factor ${hp.ropeYarn.attnFactor} is not in [0, 64]`);
  if (!(hp.ropeFreqScale > 0)) bad(`RoPE frequency scale ${hp.ropeFreqScale} (1 / rope.scaling.factor) is not positive`);
  if (!Number.isInteger(hp.nCtxTrain) || hp.nCtxTrain < 0) bad(`context_length ${hp.nCtxTrain} is not a non-negative integer`);
  if (!Number.isInteger(hp.ropeYarn.nCtxOrig) || hp.ropeYarn.nCtxOrig < 0) bad(`rope.scaling.original_context_length ${hp.ropeYarn.nCtxOrig} is not a non-negative integer`);
  // Block tensors past block_count: llama.cpp refuses such a file (tensors left unused), and the
  // model this would run is not the one in the file.
  for (const name of tensors.keys()) {
    const m = /^blk\.(\d+)\./.exec(name);
    if (m && Number(m[1]) >= hp.nLayer) bad(`tensor '${name}' belongs to block ${m[1]}, but block_count is ${hp.nLayer}`);
  }
}
