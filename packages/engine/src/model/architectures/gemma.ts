import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart, type ProgramBuilder } from '../program-builder';
import { hiddenOutput, outputHead, tensorLookup } from './deepseek2';
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
 * EmbeddingGemma (`gemma-embedding`, `embedding`: gemma-embedding.cpp): Gemma 3's block as a
 * non-causal encoder; attention.sliding_window required, the sliding blocks' windows symmetric
 * (a token sees sliding_window / 2 positions either side, llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC);
 * queries always times 1/sqrt(head_dim); no head: the output_norm'd rows, through the optional
 * sentence-transformers dense_2 and dense_3 projections, pooled by pooling_type
 * (llama.cpp projects the pooled row; the projections are linear, so projecting each row first
 * gives the same pooled embedding).
 */
export function buildGemma(hp: HParams, tensors: Map<string, GgufTensorInfo>, gen: 1 | 2 | 3, embedding = false): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  // Sliding windows: Gemma 2 always (4096 by default), Gemma 3 when the file gives one.
  const window = embedding ? md.int('attention.sliding_window', undefined, 1, 1 << 30) : gen === 2 ? md.int('attention.sliding_window', 4096, 1, 1 << 30) : gen === 3 ? md.int('attention.sliding_window', 0, 0, 1 << 30) : 0;
  const swa = window > 0 ? slidingWindowLayers(hp, gen === 2 ? 2 : 6) : hp.nHead.map(() => false);
  const baseSwa = md.num('rope.freq_base_swa', gen === 2 ? hp.ropeFreqBase : 10000);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const attnCap = gen === 2 ? md.num('attn_logit_softcapping', 50) : 0;
  const finalCap = embedding ? 0 : gen === 2 ? md.num('final_logit_softcapping', 30) : gen === 3 ? md.num('final_logit_softcapping', 0) : 0;
  for (const [k, v] of [['attn_logit_softcapping', attnCap], ['final_logit_softcapping', finalCap]] as const)
    if (!(v >= 0) || !Number.isFinite(v) || (gen === 2 && v === 0)) bad(`${k} ${v} is not a ${gen === 2 ? 'positive' : 'non-negative'} number`);
  // gemma_pytorch's query_pre_attn_scalar: n_embd / n_head (integer division) for the 27B models.
  const big = !embedding && ((gen === 2 && hp.nLayer === 46) || (gen === 3 && hp.nLayer === 62));
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
    const win: Record<string, number> = swa[il] ? (embedding ? { sym_window: window } : { window }) : {};
    const params = { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1, ...win, ...(attnCap > 0 ? { softcap: attnCap } : {}), ...(embedding ? { causal: false } : {}) };
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
  if (embedding) return p.build(embeddingGemmaOutput(p, hp, tensors, need, maybe, x));
  // Gemma and Gemma 2 read the embedding as the head whatever else the file holds.
  return outputHead(p, hp, tensors, x, undefined, { tied: gen < 3, softcap: finalCap });
}

/** EmbeddingGemma's output rows: output_norm, then the optional dense_2 and dense_3 projections back to n_embd (llama.cpp's loader reads no dense biases). */
function embeddingGemmaOutput(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, need: (n: string) => string, maybe: (n: string) => string | undefined, x: number): number {
  const d2 = maybe('dense_2.weight');
  const d3 = maybe('dense_3.weight');
  if (!d2 && !d3) return hiddenOutput(p, hp, need, x);
  if (!d2 || !d3) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: the sentence-transformers projections need both dense_2.weight and dense_3.weight (the file has ${d2 ? 'dense_2' : 'dense_3'} only)`);
  const [i2, o2] = tensors.get(d2)!.dims;
  const [i3, o3] = tensors.get(d3)!.dims;
  if (i2 !== hp.nEmbd || o3 !== hp.nEmbd || i3 !== o2)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: dense_2 [${i2}, ${o2}] and dense_3 [${i3}, ${o3}] must map n_embd ${hp.nEmbd} to a width and back`);
  const hid = p.buf('h_norm', hp.nEmbd);
  p.op('rms_norm', hid, { a: x, weights: { weight: need('output_norm.weight') }, params: { eps: hp.rmsEps } });
  const mid = p.buf(`dense_2_${o2}`, o2);
  p.op('matmul', mid, { a: hid, weights: { weight: d2 } });
  p.op('matmul', hid, { a: mid, weights: { weight: d3 } });
  p.hidden(hid);
  const ho = p.buf('h_out', hp.nEmbd, true);
  p.op('gather_out', ho, { a: hid });
  return ho;
}
