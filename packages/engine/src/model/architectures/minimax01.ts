import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart, type ProgramBuilder } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Which blocks are lightning attention, as llama.cpp's minimax-01 loader: `attention.recurrent_layers`
 * (one flag per block, or one for all) when the file has it, else every block but each
 * full_attention_interval-th (default 8; MiniMax's converter writes neither key).
 */
export function minimaxRecurrentLayers(hp: HParams): boolean[] {
  if (hp.meta.has('attention.recurrent_layers')) return hp.meta.perLayer('attention.recurrent_layers', hp.nLayer, undefined, 0, 1).map((v) => v === 1);
  const interval = hp.meta.int('full_attention_interval', 8, 1, 1 << 20);
  return Array.from({ length: hp.nLayer }, (_, i) => (i + 1) % interval !== 0);
}

/**
 * A lightning-attention block (llama.cpp's minimax-01 graph) on the normed input `h` into `out`:
 * SiLU(attn_qkv h) gives per head its q, k and v; the `lightning_attn` op keeps a head_dim x
 * head_dim state per head decayed by exp(-slope_h x the layer's slope scale) each token; the
 * heads' outputs RMS-normed together by attn_norm_2, times sigmoid(attn_gate h), attn_output.
 */
function lightningAttention(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const H = hp.nHead[0];
  const D = hp.headDimK;
  const shape = (name: string, rows: number) => {
    const w = need(t(il, name));
    const dims = tensors.get(w)!.dims;
    if (dims.length < 2 || dims[0] !== hp.nEmbd || dims[1] !== rows)
      throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: '${w}' is [${dims.join(', ')}], expected [${hp.nEmbd}, ${rows}] (${H} heads of ${D})`);
    return w;
  };
  const qkv = p.buf(`la_qkv${3 * H * D}`, 3 * H * D);
  const core = p.buf(`la_core${H * D}`, H * D);
  const gate = p.buf(`la_gate${H * D}`, H * D);
  p.op('matmul', qkv, { a: h, weights: { weight: shape('attn_qkv.weight', 3 * H * D) } });
  // (llama.cpp: float slope_scale = 1.0 - 1.0 * il / (n_layer - 1) + 1e-5, in double then float.)
  const slopeScale = 1.0 - (1.0 * il) / (hp.nLayer - 1) + 1e-5;
  p.op('lightning_attn', core, { a: qkv, params: { layer: p.rsLayer(H * D * D), n_head: H, head_dim: D, slope_scale: slopeScale, silu: 1 } });
  p.op('rms_norm', core, { a: core, weights: { weight: need(t(il, 'attn_norm_2.weight')) }, params: { eps: hp.rmsEps } });
  p.op('matmul', gate, { a: h, weights: { weight: shape('attn_gate.weight', H * D) } });
  p.op('sigmoid_mul', core, { a: core, b: gate, params: { per_element: 1 } });
  p.op('matmul', out, { a: core, weights: { weight: need(t(il, 'attn_output.weight')) } });
}

/**
 * MiniMax-Text-01 / MiniMax-M1 (`minimax-01`, llama.cpp src/models/minimax-01.cpp): lightning
 * (linear) attention blocks with a recurrent state per sequence, softmax GQA blocks with NeoX RoPE
 * over rope.dimension_count of each head every full_attention_interval-th block, and softmax
 * top-k experts renormalized in every block. The residual of each half is its normed input times
 * residual_scale (llama.cpp adds residual_scale x attn_norm(x) to the attention's output, and
 * residual_scale x ffn_norm(.) to the experts'), not the stream itself.
 */
export function buildMinimax01(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const lookup = tensorLookup(hp, tensors);
  const { need } = lookup;
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  // Its loader requires both keys (no defaults).
  if (!hp.meta.has('attention.layer_norm_rms_epsilon')) throw bad(`model file lacks metadata '${hp.arch}.attention.layer_norm_rms_epsilon'`);
  const alpha = hp.meta.num('residual_scale');
  // (One layer would make the slope scale 0 / 0: llama.cpp computes NaN.)
  if (hp.nLayer < 2) throw bad(`${hp.nLayer} block: the lightning blocks' slope scale 1 - il / (block_count - 1) needs at least 2`);
  if (hp.nHead.some((n) => n !== hp.nHead[0]) || hp.nHeadKv.some((n) => n !== hp.nHeadKv[0]))
    throw bad('head_count and head_count_kv must be the same in every block (llama.cpp sizes every block by the first)');
  if (hp.headDimV !== hp.headDimK) throw bad(`key length ${hp.headDimK} and value length ${hp.headDimV} differ (llama.cpp's graph asserts they are equal)`);
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw bad('the model has no experts (expert_count / expert_used_count), which every block of it routes to');
  const recurrent = minimaxRecurrentLayers(hp);
  // Softmax top-k renormalized (build_moe_ffn's arguments; the loader reads no weight scale and no
  // selection bias), within the file's expert groups when it has them, as for every architecture.
  const routing = readMoeRouting(hp, 1, { gating: 1, normW: true, wScale: 0 });
  const hd = hp.headDimK;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    if (recurrent[il]) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      lightningAttention(p, hp, tensors, il, h, attnOut);
    } else {
      const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, lookup, hd, hd);
      const rope = { ...ropeParams(hp, true), head_dim: hd };
      p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
      const layer = p.kvLayer(Hkv * hd, Hkv * hd);
      p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
      p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    }
    p.op('scale', h, { a: h, params: { scale: alpha } });
    p.op('add', x, { a: attnOut, b: h });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'none', shared: 'none' });
    p.op('scale', h, { a: h, params: { scale: alpha } });
    p.op('add', x, { a: ffnOut, b: h });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
