import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { GATING_SIGMOID, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Xiaomi MiMo-V2 (`mimo2`, llama.cpp src/models/mimo2.cpp): GQA whose KV head count differs per
 * block, keys wider than values, NeoX RoPE over part of each key, sliding-window blocks
 * (`attention.sliding_window_pattern`, 1 = windowed) that rotate with `rope.freq_base_swa` (10000
 * when absent, as llama.cpp's default) at frequency scale 1 and may carry attention sinks; the
 * attention output times `attention.value_scale`; dense SwiGLU blocks where there is no router,
 * else sigmoid routing with an optional selection bias, renormalized (the loader reads no
 * scale and no expert groups). NextN blocks counted in block_count are left out.
 */
export function buildMimo2(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const window = hp.meta.int('attention.sliding_window', undefined, 1, 1 << 30);
  // (Its loader requires the pattern: one flag per block.)
  if (!hp.meta.has('attention.sliding_window_pattern')) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata attention.sliding_window_pattern is missing`);
  const swa = slidingWindowLayers(hp, 0);
  const baseSwa = hp.meta.num('rope.freq_base_swa', 10000);
  if (!(baseSwa > 0)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: rope.freq_base_swa ${baseSwa} is not positive`);
  const vScale = hp.meta.num('attention.value_scale', 1);
  if (!Number.isFinite(vScale)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.value_scale ${vScale} is not a finite number`);
  const routing = readMoeRouting(hp, GATING_SIGMOID, { gating: GATING_SIGMOID, normW: true, wScale: 0 });
  const [hdK, hdV] = [hp.headDimK, hp.headDimV];
  const rope = { ...ropeParams(hp, true), head_dim: hdK };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < trunkLayers(hp); il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hdK, hdV);
    const r = swa[il] ? { ...rope, freq_base: baseSwa, freq_scale: 1 } : rope;
    p.op('rope', q, { a: q, params: { ...r, n_head: H } });
    p.op('rope', k, { a: k, params: { ...r, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hdK, Hkv * hdV);
    const sinks = maybe(t(il, 'attn_sinks.weight'));
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      ...(sinks ? { weights: { sinks } } : {}),
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hdK, head_dim_v: hdV, scale: 1 / Math.sqrt(hdK), window: swa[il] ? window : 0 },
    });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    if (vScale !== 1) p.op('scale', attnOut, { a: attnOut, params: { scale: vScale } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'optional', shared: 'none' });
    else denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
