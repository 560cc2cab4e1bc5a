import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** llama.cpp's hard-coded Llama 4 constants (load_arch_hparams): the chunk and temperature tuning. */
const CHUNK = 8192;
const TEMP_FLOOR = 8192;
const TEMP_SCALE = 0.1;
const TEMP_OFFSET = 1.0;
/** Every fourth layer has no RoPE (n_no_rope_layer_step). */
const NO_ROPE_STEP = 4;

/**
 * Llama 4 (`llama4`, llama.cpp src/models/llama4.cpp; Scout 17B-16E, Maverick 17B-128E): three of
 * every four layers use RoPE (with the file's llama3 `rope_freqs` factors) and attend within
 * chunks of 8192 positions, with an L2 (weightless RMS) norm of each Q and K head after RoPE
 * unless the model has 128 experts; every fourth layer has no RoPE, attends over the whole
 * context and scales its queries by the position's temperature, log(floor((pos + 1) / 8192) + 1)
 * * 0.1 + 1. Every `interleave_moe_layer_step`-th block is routed: top-k by router logit, each
 * expert's input weighted by the sigmoid of its logit (before the FFN, not after), plus an ungated
 * shared expert; the others are dense SwiGLU blocks.
 */
export function buildLlama4(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: expert_count and expert_used_count are required (llama.cpp refuses a llama4 file without experts)`);
  const step = hp.meta.int('interleave_moe_layer_step', undefined, 0, MAX_LAYERS);
  if (hp.meta.has('attention.sliding_window') && hp.meta.num('attention.sliding_window') === 0)
    throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: attention.sliding_window 0 (no chunked attention) is not supported`);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd || hp.ropeDims !== hd)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd}, value_length ${hp.headDimV} and rope.dimension_count ${hp.ropeDims} must match`);
  const chunked = slidingWindowLayers(hp, 4);
  const baseSwa = hp.meta.num('rope.freq_base_swa', hp.ropeFreqBase);
  if (!(baseSwa > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.freq_base_swa ${baseSwa} is not positive`);
  const kqNorm = hp.nExpert !== 128; // llama.cpp: use_kq_norm unless the 17B-128E type
  // Routing: sigmoid of the selected logits (gating 3), no renormalization; the loader reads no
  // expert_weights_scale and the graph passes no selection bias.
  // (readMoeRouting reads the expert groups; the `moe` op's gating 3 is this selection.)
  const routing = { ...readMoeRouting(hp, 2, { gating: 2, normW: false, wScale: 0 }), gating: 3 };
  const ropeFreqs = maybe('rope_freqs.weight');
  const scale = hp.attentionScale || 1 / Math.sqrt(hd);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const rope = { ...ropeParams(hp, false), head_dim: hd };
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const useRope = (il + 1) % NO_ROPE_STEP !== 0;
    const temp: Record<string, number> = useRope ? {} : { temp_scale: TEMP_SCALE, temp_floor: TEMP_FLOOR, temp_offset: TEMP_OFFSET };
    if (useRope) {
      const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
      const freqBase = chunked[il] ? baseSwa : hp.ropeFreqBase;
      p.op('rope', q, { a: q, weights: rw, params: { ...rope, freq_base: freqBase, n_head: H } });
      p.op('rope', k, { a: k, weights: rw, params: { ...rope, freq_base: freqBase, n_head: Hkv } });
      if (kqNorm) {
        p.op('head_rms_norm', q, { a: q, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
        p.op('head_rms_norm', k, { a: k, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
      }
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale, chunk: chunked[il] ? CHUNK : 0, ...temp },
    });
    // (Its loader creates no attn_output.bias, so a file's is not used.)
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    const routed = step > 0 && (il + 1) % step === 0;
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, !routed, { probsBias: 'none', shared: 'required', moeParams: { w_before: 1 } });
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
