import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { layerNormEps } from './bert';
import { GATING_SIGMOID, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** The Cohere decoders kail runs, as llama.cpp's loaders differ for them. */
export type CohereArch = 'cohere2moe' | 'cohere2' | 'command-r';

/**
 * Cohere's decoders: Command R / R+ (`command-r`), Command R7B / Command A (`cohere2`) and its MoE
 * (`cohere2moe`), as llama.cpp's src/models/{command-r,cohere2,cohere2moe}.cpp build them.
 *
 * Parallel blocks: one norm of the block input (`attn_norm`: a LayerNorm without bias; in a
 * cohere2moe file an RMSNorm when it has attention.layer_norm_rms_epsilon) feeds both the attention
 * and the FFN, and the block adds both to its input (FFN first, as llama.cpp). Attention: Q/K/V
 * (Command R+, 64 blocks or more: per-head LayerNorms of Q and K, one weight row per head) → RoPE
 * over adjacent pairs → attention scaled by 1/sqrt(head size) → output projection. cohere2 and
 * cohere2moe slide on the blocks attention.sliding_window_pattern flags (by default 3 of every 4,
 * the 4th full; cohere2moe: every 4th from block 0 full) and rotate only those (cohere2moe: and its
 * leading dense blocks), the others attending without positions; command-r rotates every block
 * and slides on none. FFN: a dense SwiGLU, or in cohere2moe after `leading_dense_block_count`
 * blocks routed SwiGLU experts (sigmoid unless expert_gating_func says otherwise; renormalization
 * and scale from the file; gate and up fused or not) with, when expert_shared_count > 0, a shared
 * SwiGLU expert, the two averaged. The output norm is of the same kind; the head is token_embd
 * (cohere2moe: output.weight when present); logits times `logit_scale` (optional in command-r).
 * The multi-token-prediction blocks a cohere2moe file may append are left out, as llama.cpp's main
 * graph leaves them.
 */
export function buildCohere(hp: HParams, tensors: Map<string, GgufTensorInfo>, arch: CohereArch): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const moe = arch === 'cohere2moe';
  if (moe && (hp.nExpert <= 0 || hp.nExpertUsed <= 0)) bad('expert_count and expert_used_count are required');
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) bad(`rope.dimension_count ${hp.ropeDims} must equal the head size ${hd}`);
  const rms = moe && md.has('attention.layer_norm_rms_epsilon');
  if (moe && !rms && !md.has('attention.layer_norm_epsilon')) bad('the file has neither attention.layer_norm_epsilon nor attention.layer_norm_rms_epsilon');
  const lnEps = rms ? undefined : layerNormEps(hp);
  const window = arch === 'command-r' ? 0 : md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const swa = arch === 'command-r' ? hp.nHead.map(() => false) : slidingWindowLayers(hp, 4, moe);
  const logitScale = md.num('logit_scale', arch === 'command-r' ? 0 : undefined);
  if (!Number.isFinite(logitScale)) bad(`logit_scale ${logitScale} is not a finite number`);
  const nDense = moe ? md.int('leading_dense_block_count', undefined, 0, MAX_LAYERS) : MAX_LAYERS;
  const shared = moe && md.int('expert_shared_count', 0, 0, 1 << 16) > 0;
  const routing = moe ? readMoeRouting(hp, GATING_SIGMOID) : undefined;
  // (llama.cpp's command-r loader reads the q/k norms of files with 64 blocks or more only.)
  const qkNorm = arch === 'command-r' && hp.nLayer >= 64;
  const rope = { ...ropeParams(hp, false), head_dim: hd };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < trunkLayers(hp); il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd, { layerNormEps: lnEps });
    if (qkNorm) {
      p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: lnEps!, head_dim: hd, n_head: H, layer_norm: 1 } });
      p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: lnEps!, head_dim: hd, n_head: Hkv, layer_norm: 1 } });
    }
    if (arch === 'command-r' || swa[il] || (moe && il < nDense)) {
      p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...(swa[il] ? { window } : {}) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });

    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (il < nDense) denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    else {
      moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing!, false, { probsBias: 'none', shared: shared ? 'required' : 'none' });
      if (shared) p.op('scale', ffnOut, { a: ffnOut, params: { scale: 0.5 } });
    }
    p.op('add', x, { a: ffnOut, b: x });
    p.op('add', x, { a: x, b: attnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { tied: !moe, ...(lnEps !== undefined ? { layerNorm: lnEps } : {}), ...(logitScale !== 0 ? { scale: logitScale } : {}) });
}
