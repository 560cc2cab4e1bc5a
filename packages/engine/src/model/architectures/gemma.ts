import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;
const f32 = Math.fround;

/**
 * Google Gemma, Gemma 2 and Gemma 3, dense (`gemma`, `gemma2`, `gemma3`: llama.cpp
 * src/models/gemma.cpp, gemma2.cpp, gemma3.cpp). The embedding times sqrt(n_embd); per block
 * RMSNorm → GQA with NeoX RoPE, the query scaled before attention (attention scale 1) → residual;
 * RMSNorm → GeGLU FFN (the F16 table's GELU of the gate times up) → residual. The head is the
 * token embedding (Gemma 3: output.weight when the file has one).
 *
 * Gemma: queries times 1/sqrt(head_dim), every block global.
 * Gemma 2: post-attention and post-FFN norms; sliding-window blocks (`attention.sliding_window`,
 * 4096 when absent; the pattern's default period 2) rotating with `rope.freq_base_swa` (else the
 * file's base); attention scores soft-capped by `attn_logit_softcapping` (50 when absent) and the
 * logits by `final_logit_softcapping` (30 when absent); queries times 1/sqrt(head_dim), or
 * 1/sqrt(n_embd / n_head) for the 46-block 27B.
 * Gemma 3: Gemma 2's norms plus per-head q/k norms; no score capping, logit capping only when the
 * file sets it; sliding windows only with `attention.sliding_window` > 0 (pattern period 6),
 * those blocks rotating with `rope.freq_base_swa` (10000 when absent) at scale 1 while full
 * blocks use the file's base and scaling; the 62-block 27B scales queries by 1/sqrt(n_embd /
 * n_head).
 */
export function buildGemma(hp: HParams, tensors: Map<string, GgufTensorInfo>, gen: 1 | 2 | 3): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  // Sliding windows: Gemma 2 always (4096 by default), Gemma 3 when the file gives one.
  const window = gen === 2 ? md.int('attention.sliding_window', 4096, 1, 1 << 30) : gen === 3 ? md.int('attention.sliding_window', 0, 0, 1 << 30) : 0;
  const swa = window > 0 ? slidingWindowLayers(hp, gen === 2 ? 2 : 6) : hp.nHead.map(() => false);
  const baseSwa = md.num('rope.freq_base_swa', gen === 2 ? hp.ropeFreqBase : 10000);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const attnCap = gen === 2 ? md.num('attn_logit_softcapping', 50) : 0;
  const finalCap = gen === 2 ? md.num('final_logit_softcapping', 30) : gen === 3 ? md.num('final_logit_softcapping', 0) : 0;
  for (const [k, v] of [['attn_logit_softcapping', attnCap], ['final_logit_softcapping', finalCap]] as const)
    if (!(v >= 0) || !Number.isFinite(v) || (gen === 2 && v === 0)) bad(`${k} ${v} is not a ${gen === 2 ? 'positive' : 'non-negative'} number`);
  // gemma_pytorch's query_pre_attn_scalar: n_embd / n_head (integer division) for the 27B models.
  const big = (gen === 2 && hp.nLayer === 46) || (gen === 3 && hp.nLayer === 62);
  const qScale = f32(1 / f32(Math.sqrt(big ? Math.floor(hp.nEmbd / hp.nHead[0]) : hd)));
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  // Gemma 2's sliding blocks keep the file's frequency scale; Gemma 3's rotate unscaled.
  const ropeSwa = { ...rope, freq_base: baseSwa, freq_scale: gen === 2 ? hp.ropeFreqScale : 1 };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  p.op('scale', x, { a: x, params: { scale: f32(Math.sqrt(hp.nEmbd)) } });
  const res = p.buf('attn_res', hp.nEmbd);
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  const norm = (il: number, buf: number, name: string) => p.op('rms_norm', buf, { a: buf, weights: { weight: need(t(il, name)) }, params: { eps: hp.rmsEps } });
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    if (gen === 3) {
      p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
      p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    }
    const r = swa[il] ? ropeSwa : rope;
    p.op('rope', q, { a: q, params: { ...r, n_head: H } });
    p.op('rope', k, { a: k, params: { ...r, n_head: Hkv } });
    p.op('scale', q, { a: q, params: { scale: qScale } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    const params = { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1, ...(swa[il] ? { window } : {}), ...(attnCap > 0 ? { softcap: attnCap } : {}) };
    p.op('attention', attn, { a: q, b: k, c: v, params });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    if (gen > 1) norm(il, attnOut, 'post_attention_norm.weight');
    p.op('add', res, { a: attnOut, b: x });
    p.op('rms_norm', h, { a: res, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut, 'geglu');
    if (gen > 1) norm(il, ffnOut, 'post_ffw_norm.weight');
    p.op('add', x, { a: ffnOut, b: res });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  // Gemma and Gemma 2 read the embedding as the head whatever else the file holds.
  return outputHead(p, hp, tensors, x, undefined, { tied: gen < 3, softcap: finalCap });
}
