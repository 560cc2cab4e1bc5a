import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { requiredSlidingWindowPattern } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Spark-X2.5 (`spark2_5`, Spark2_5ForCausalLM; llama.cpp src/models/spark2-5.cpp). Sliding-window
 * blocks (`attention.sliding_window_pattern`, one flag per block, required as llama.cpp's loader
 * requires it; window `attention.sliding_window`) and full blocks, each with its per-block head
 * counts and one head size (key_length = value_length). RMSNorm (eps
 * attention.layer_norm_rms_epsilon, required) → Q/K/V (a fused attn_qkv or the three projections)
 * → NeoX RoPE: full blocks rotate `rope.dimension_count` dims with the file's base and scale,
 * sliding blocks `rope.dimension_count_swa` (default: the full count) with `rope.freq_base_swa`
 * (default: the full blocks' base) and the same scale → attention scaled by 1/sqrt(head) → each
 * head's output times sigmoid(attn_gate · normed input) (attn_gate [n_embd, n_head], required) →
 * attn_output → residual. RMSNorm → GELU-gated FFN gelu(gate) * up → ffn_down (ggml_geglu_split, the
 * F16 GELU table's) → residual. Output norm, then output.weight or the tied token_embd.
 */
export function buildSpark25(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  md.num('attention.layer_norm_rms_epsilon');
  const swa = requiredSlidingWindowPattern(hp);
  const window = md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match (llama.cpp's graph asserts one head size)`);
  const rotFull = hp.ropeDims;
  const rotSwa = md.int('rope.dimension_count_swa', rotFull, 0, hd);
  for (const [key, n] of [['rope.dimension_count', rotFull], ['rope.dimension_count_swa', rotSwa]] as const)
    if (n % 2 !== 0 || n > hd) bad(`${key} ${n} must be an even number of dimensions, at most the head size ${hd}`);
  const baseSwa = md.num('rope.freq_base_swa', hp.ropeFreqBase);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const ropeFull = { ...ropeParams(hp, true, { n_dims: rotFull }), head_dim: hd };
  const ropeSwa = { ...ropeParams(hp, true, { n_dims: rotSwa }), head_dim: hd, freq_base: baseSwa };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const rope = swa[il] ? ropeSwa : ropeFull;
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...(swa[il] ? { window } : {}) },
    });
    const gateW = need(t(il, 'attn_gate.weight'));
    const gd = tensors.get(gateW)!.dims;
    if (gd[0] !== hp.nEmbd || gd[1] !== H) bad(`${gateW} is [${gd.join(', ')}], not [${hp.nEmbd}, ${H}] (one gate per head of block ${il})`);
    const gate = p.buf(`attn_gate${H}`, H);
    p.op('matmul', gate, { a: h, weights: { weight: gateW } });
    p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { group: hd } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut, 'geglu');
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
