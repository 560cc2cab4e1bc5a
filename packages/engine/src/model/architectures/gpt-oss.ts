import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart, withBias } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Which layers attend through a sliding window, as llama.cpp's load_swa_pattern: the file's
 * `attention.sliding_window_pattern` as one flag per layer, or as a period n (layer il slides
 * unless il % n == n - 1, or with `denseFirst` unless il % n == 0; 0: every layer), else the
 * architecture's default period.
 */
/** The sliding-window flags of a loader that requires them as an array (get_arr without a default), one per block. */
export function requiredSlidingWindowPattern(hp: HParams): boolean[] {
  const raw = hp.meta.kv[`${hp.arch}.attention.sliding_window_pattern`];
  if (raw === undefined || typeof raw !== 'object' || raw === null || !('length' in raw))
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata attention.sliding_window_pattern must be an array with one flag per block`);
  return slidingWindowLayers(hp, 0);
}

export function slidingWindowLayers(hp: HParams, defaultPeriod: number, denseFirst = false): boolean[] {
  const key = 'attention.sliding_window_pattern';
  const raw = hp.meta.has(key) ? hp.meta.kv[`${hp.arch}.${key}`] : undefined;
  if (raw !== undefined && typeof raw === 'object' && raw !== null && 'length' in (raw as object)) {
    const flags = Array.from(raw as ArrayLike<unknown>, (v) => Boolean(v));
    if (flags.length !== hp.nLayer) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${key} has ${flags.length} entries for ${hp.nLayer} layers`);
    return flags;
  }
  const period = raw === undefined ? defaultPeriod : hp.meta.int(key, defaultPeriod, 0, 1 << 16);
  return Array.from({ length: hp.nLayer }, (_, il) => period === 0 || (denseFirst ? il % period !== 0 : il % period < period - 1));
}

/**
 * gpt-oss (`gpt-oss`, llama.cpp src/models/openai-moe.cpp): Q/K/V/O with biases, NeoX RoPE (YaRN
 * from the file's rope.scaling keys; sliding-window layers may have their own base), a learned
 * attention sink per head, every other layer attending through a sliding window
 * (`attention.sliding_window`), the FFN input norm `post_attention_norm`, and routed experts
 * only: a router with a bias, top-k by logit with the softmax of the k selected logits as
 * weights, experts with gate/up/down biases and the clamped SwiGLU (alpha 1.702, limit 7).
 */
export function buildGptOss(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const window = hp.meta.int('attention.sliding_window', undefined, 1, 1 << 30);
  const swa = slidingWindowLayers(hp, 2);
  const baseSwa = hp.meta.num('rope.freq_base_swa', hp.ropeFreqBase);
  if (!(baseSwa > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.freq_base_swa ${baseSwa} is not positive`);
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_count and expert_used_count are required`);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd || hd > MAX_DIM) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd} and value_length ${hp.headDimV} must match`);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const d = hp.nEmbd;
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const freqBase = swa[il] ? baseSwa : hp.ropeFreqBase;
    p.op('rope', q, { a: q, params: { ...rope, freq_base: freqBase, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, freq_base: freqBase, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      weights: { sinks: need(t(il, 'attn_sinks.weight')) },
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), window: swa[il] ? window : 0 },
    });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', d);
    const weights: Record<string, string> = {
      gate_inp: need(t(il, 'ffn_gate_inp.weight')),
      gate_exps: need(t(il, 'ffn_gate_exps.weight')),
      up_exps: need(t(il, 'ffn_up_exps.weight')),
      down_exps: need(t(il, 'ffn_down_exps.weight')),
    };
    const biases: [string, string][] = [
      ['gate_inp_b', 'ffn_gate_inp.bias'],
      ['gate_exps_b', 'ffn_gate_exps.bias'],
      ['up_exps_b', 'ffn_up_exps.bias'],
      ['down_exps_b', 'ffn_down_exps.bias'],
    ];
    for (const [role, name] of biases) weights[role] = need(t(il, name));
    p.op('moe', ffnOut, {
      a: h,
      weights,
      params: {
        n_expert: hp.nExpert,
        n_expert_used: hp.nExpertUsed,
        gating: 2,
        norm_w: false,
        w_scale: hp.expertWeightsScale,
        act: 1,
        alpha: 1.702,
        limit: 7.0,
        moe_layer: p.moeLayer(hp.nExpert),
      },
    });
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
