import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { EngineError } from '../errors';

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
    if (typeof v === 'number') return v;
    if (typeof v === 'bigint') return Number(v);
    if (typeof v === 'boolean') return v ? 1 : 0;
    throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' must be a number, is ${Array.isArray(v) ? 'an array' : typeof v}`);
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
  perLayer(key: string, nLayer: number, def?: number): number[] {
    const k = this.full(key);
    const v = this.kv[k];
    if (v === undefined && def !== undefined) return new Array(nLayer).fill(def);
    if (typeof v === 'number' || typeof v === 'bigint' || v === undefined) return new Array(nLayer).fill(this.num(key, def));
    const arr = Array.from(v as ArrayLike<number>, Number);
    if (arr.length !== nLayer) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' has ${arr.length} entries for ${nLayer} layers`);
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

export function readHParams(md: Metadata, tensors: Map<string, GgufTensorInfo>): HParams {
  const nLayer = md.num('block_count');
  const nEmbd = md.num('embedding_length');
  const nHead = md.perLayer('attention.head_count', nLayer);
  const nHeadKv = md.perLayer('attention.head_count_kv', nLayer, nHead[0]);
  const headDimK = md.num('attention.key_length', nEmbd / nHead[0]);
  const headDimV = md.num('attention.value_length', nEmbd / nHead[0]);
  if (!Number.isInteger(headDimK) || headDimK <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `head dimension ${headDimK} is not a positive integer (embedding_length ${nEmbd}, head_count ${nHead[0]})`);
  const nExpert = md.num('expert_count', 0);
  const scalingType = md.str('rope.scaling.type', 'none');
  const scalingFactor = md.num('rope.scaling.factor', 0);
  const freqScale = md.num('rope.scale_linear', 0) || (scalingFactor ? 1 / scalingFactor : 1);
  const nCtxTrain = md.num('context_length', 4096);
  const embd = tensors.get('token_embd.weight');
  const nVocab = embd ? embd.dims[1] : md.num('vocab_size');
  return {
    arch: md.arch,
    nLayer,
    nEmbd,
    nCtxTrain,
    nHead,
    nHeadKv,
    headDimK,
    headDimV,
    nFf: md.perLayer('feed_forward_length', nLayer, 0),
    rmsEps: md.num('attention.layer_norm_rms_epsilon', 1e-5),
    ropeFreqBase: md.num('rope.freq_base', 10000),
    ropeDims: md.num('rope.dimension_count', headDimK),
    ropeFreqScale: scalingType === 'none' ? 1 : freqScale,
    ropeScalingType: scalingType,
    ropeYarn: {
      extFactor: scalingType === 'yarn' ? md.num('rope.scaling.yarn_ext_factor', 1) : 0,
      attnFactor: md.num('rope.scaling.attn_factor', 1),
      betaFast: md.num('rope.scaling.yarn_beta_fast', 32),
      betaSlow: md.num('rope.scaling.yarn_beta_slow', 1),
      nCtxOrig: md.num('rope.scaling.original_context_length', nCtxTrain),
    },
    nExpert,
    nExpertUsed: md.num('expert_used_count', 0),
    nFfExp: md.num('expert_feed_forward_length', 0),
    nFfShexp: md.num('expert_shared_feed_forward_length', 0),
    expertWeightsScale: md.num('expert_weights_scale', 0),
    attentionScale: md.num('attention.scale', 0),
    nVocab,
    meta: md,
  };
}
