import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart, type ProgramBuilder } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants (gpt-oss's): alpha and limit. */
const OAI = { oai_alpha: 1.702, limit: 7.0 };

/** MSA (MiniMax Sparse Attention) as the file's attention.indexer.* keys give it. */
export interface MsaParams {
  /** Indexer heads: one per KV head. */
  nHead: number;
  headDim: number;
  /** Blocks each KV head attends to. */
  topK: number;
  /** Positions per block. */
  block: number;
  /** The token's own block and the local - 1 before it are always selected. */
  local: number;
}

/** The MSA keys, as llama.cpp's minimax-m3 loader requires them (every one of them). */
export function readMsa(hp: HParams): MsaParams {
  const md = hp.meta;
  const m: MsaParams = {
    nHead: md.int('attention.indexer.head_count', undefined, 1, MAX_DIM),
    headDim: md.int('attention.indexer.key_length', undefined, 1, MAX_DIM),
    topK: md.int('attention.indexer.top_k', undefined, 1, 1 << 24),
    block: md.int('attention.indexer.block_size', undefined, 1, 1 << 24),
    local: md.int('attention.indexer.local_blocks', undefined, 0, 1 << 24),
  };
  if (m.headDim < hp.ropeDims) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.indexer.key_length ${m.headDim} is smaller than the ${hp.ropeDims} rotary dimensions its heads take`);
  return m;
}

/** A [n_embd, rows] projection of block il, checked. */
function projection(hp: HParams, tensors: Map<string, GgufTensorInfo>, name: string, rows: number, what: string): string {
  const { need } = tensorLookup(hp, tensors);
  const w = need(name);
  const dims = tensors.get(w)!.dims;
  if (dims.length !== 2 || dims[0] !== hp.nEmbd || dims[1] !== rows)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: '${w}' is [${dims.join(', ')}], expected [${hp.nEmbd}, ${rows}] (${what})`);
  return w;
}

/** A swigluoai FFN (ffn_gate/up/down with `suffix`) of block il on h into `into`. */
function swigluOai(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, suffix: string, h: number, into: number): void {
  const { need } = tensorLookup(hp, tensors);
  const dims = tensors.get(need(t(il, `ffn_up${suffix}.weight`)))!.dims;
  if (dims.length !== 2) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: 'blk.${il}.ffn_up${suffix}.weight' is [${dims.join(', ')}], not a matrix`);
  const ff = dims[1];
  const g = p.buf(`ffn_gate${ff}`, ff);
  const u = p.buf(`ffn_up${ff}`, ff);
  p.op('matmul', g, { a: h, weights: { weight: need(t(il, `ffn_gate${suffix}.weight`)) } });
  p.op('matmul', u, { a: h, weights: { weight: need(t(il, `ffn_up${suffix}.weight`)) } });
  p.op('swiglu', g, { a: g, b: u, params: OAI });
  p.op('matmul', into, { a: g, weights: { weight: need(t(il, `ffn_down${suffix}.weight`)) } });
}

/**
 * MiniMax-M3 (llama.cpp's src/models/minimax-m3.cpp): RMSNorm → GQA with per-head q/k RMS norms
 * and partial NeoX RoPE → residual → RMSNorm → FFN → residual. Blocks before
 * leading_dense_block_count have full attention and a dense swigluoai FFN; the others route
 * (sigmoid + exp_probs_b selection, renormalized and scaled as the file says) to swigluoai experts
 * beside a swigluoai shared expert, and attend sparsely (MSA): the lightning indexer
 * (indexer.q_proj with one head per KV head, indexer.k_proj, per-head RMS norms, the block's RoPE)
 * keeps a key per position; the `msa_index` op picks per KV head the top_k blocks of block_size
 * positions by their best score, the token's own block and local_blocks - 1 before it always, and
 * the attention op sees those blocks only. llama.cpp runs MSA with flash attention only (without
 * it, dense attention with a warning); kail always runs the model's MSA. With a context of one
 * sequence no longer than top_k blocks every visible block is selected: the indexer is left out.
 */
export function buildMinimaxM3(hp: HParams, tensors: Map<string, GgufTensorInfo>, opts: { nCtxSeq?: number } = {}): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  if (hp.headDimK !== hp.headDimV) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hp.headDimK} and value_length ${hp.headDimV} must match`);
  if (hp.meta.int('expert_gating_func', 0, 0, 1 << 16) === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: the file has no expert_gating_func, which its loader requires`);
  hp.meta.int('expert_shared_count', undefined, 0, 1 << 16);
  const routing = readMoeRouting(hp, 0);
  const msa = readMsa(hp);
  const nDense = hp.meta.int('leading_dense_block_count', 0, 0, MAX_LAYERS);
  const sparse = opts.nCtxSeq === undefined || opts.nCtxSeq > msa.topK * msa.block;
  const hd = hp.headDimK;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  for (let il = 0; il < trunkLayers(hp); il++) {
    const routed = il >= nDense;
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe: (n) => (tensors.has(n) ? n : undefined) }, hd, hd);
    const msaHere = routed && sparse;
    if (msaHere && msa.nHead !== Hkv) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.indexer.head_count ${msa.nHead} must equal head_count_kv ${Hkv} (one indexer head per KV group)`);
    // With MSA the query buffer carries the selection after the heads: q | blocks per KV head.
    const qs = msaHere ? p.buf(`q_msa${H * hd + Hkv * msa.topK}`, H * hd + Hkv * msa.topK) : q;
    if (msaHere) p.op('copy', qs, { a: q, params: { n: H * hd } });
    p.op('head_rms_norm', qs, { a: qs, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    p.op('rope', qs, { a: qs, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    let sel: Record<string, number> = {};
    if (msaHere) {
      const ihd = msa.headDim;
      const iq = p.buf(`msa_q${msa.nHead * ihd}`, msa.nHead * ihd);
      const ik = p.buf(`msa_k${ihd}`, ihd);
      p.op('matmul', iq, { a: h, weights: { weight: projection(hp, tensors, t(il, 'indexer.q_proj.weight'), msa.nHead * ihd, `${msa.nHead} indexer heads of ${ihd}`) } });
      p.op('matmul', ik, { a: h, weights: { weight: projection(hp, tensors, t(il, 'indexer.k_proj.weight'), ihd, `one indexer key of ${ihd}`) } });
      p.op('head_rms_norm', iq, { a: iq, weights: { weight: need(t(il, 'indexer.q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: ihd, n_head: msa.nHead } });
      p.op('head_rms_norm', ik, { a: ik, weights: { weight: need(t(il, 'indexer.k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: ihd, n_head: 1 } });
      const irope = { ...ropeParams(hp, true), head_dim: ihd };
      p.op('rope', iq, { a: iq, params: { ...irope, n_head: msa.nHead } });
      p.op('rope', ik, { a: ik, params: { ...irope, n_head: 1 } });
      const ilayer = p.kvLayer(ihd, 0);
      p.op('msa_index', qs, { a: iq, b: ik, params: { layer: ilayer, n_head: msa.nHead, head_dim: ihd, top_k: msa.topK, block: msa.block, local: msa.local, out_off: H * hd } });
      sel = { sel_off: H * hd, top_k: msa.topK, block: msa.block };
    }
    p.op('attention', attn, { a: qs, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...sel } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (!routed) swigluOai(p, hp, tensors, il, '', h, ffnOut);
    else {
      moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'required', shared: 'none', moeParams: { act: 1, alpha: OAI.oai_alpha, limit: OAI.limit } });
      const so = p.buf('sh_out', hp.nEmbd);
      swigluOai(p, hp, tensors, il, '_shexp', h, so);
      p.op('add', ffnOut, { a: ffnOut, b: so });
    }
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { untied: true });
}
