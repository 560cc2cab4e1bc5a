import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { layerNormEps } from './bert';
import { GATING_SIGMOID, moeBlockFfn, outputHead, readMoeRouting, tensorLookup, trunkLayers } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Cohere's MoE decoder (`cohere2moe`, llama.cpp src/models/cohere2moe.cpp).
 *
 * Parallel blocks: one norm of the block input (`attn_norm`: an RMSNorm when the file has
 * attention.layer_norm_rms_epsilon, else a LayerNorm without bias) feeds both the attention and
 * the FFN, and the block adds both to its input (FFN first, as llama.cpp). Attention: Q/K/V →
 * RoPE over adjacent pairs on the sliding-window blocks (attention.sliding_window; the pattern
 * array, or every 4th block from block 0 full) and on the leading dense blocks, the others
 * attending without positions → attention scaled by 1/sqrt(head size) → output projection. FFN:
 * a dense SwiGLU on the `leading_dense_block_count` first blocks, else routed SwiGLU experts
 * (sigmoid unless expert_gating_func says otherwise; renormalization and scale from the file; gate
 * and up fused or not) and, with expert_shared_count > 0, a shared SwiGLU expert, the two
 * averaged. The output norm is of the same kind; logits times `logit_scale`. The
 * multi-token-prediction blocks a file may append are left out, as llama.cpp's main graph leaves
 * them.
 */
export function buildCohere2Moe(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) bad('expert_count and expert_used_count are required');
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) bad(`rope.dimension_count ${hp.ropeDims} must equal the head size ${hd}`);
  const rms = md.has('attention.layer_norm_rms_epsilon');
  if (!rms && !md.has('attention.layer_norm_epsilon')) bad('the file has neither attention.layer_norm_epsilon nor attention.layer_norm_rms_epsilon');
  const lnEps = rms ? undefined : layerNormEps(hp);
  const window = md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const swa = slidingWindowLayers(hp, 4, true);
  const logitScale = md.num('logit_scale');
  if (!Number.isFinite(logitScale)) bad(`logit_scale ${logitScale} is not a finite number`);
  const nDense = md.int('leading_dense_block_count', undefined, 0, MAX_LAYERS);
  const shared = md.int('expert_shared_count', 0, 0, 1 << 16) > 0;
  const routing = readMoeRouting(hp, GATING_SIGMOID);
  const rope = { ...ropeParams(hp, false), head_dim: hd };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < trunkLayers(hp); il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd, { layerNormEps: lnEps });
    if (swa[il] || il < nDense) {
      p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...(swa[il] ? { window } : {}) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });

    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (il < nDense) denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    else {
      moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'none', shared: shared ? 'required' : 'none' });
      if (shared) p.op('scale', ffnOut, { a: ffnOut, params: { scale: 0.5 } });
    }
    p.op('add', x, { a: ffnOut, b: x });
    p.op('add', x, { a: x, b: attnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { ...(lnEps !== undefined ? { layerNorm: lnEps } : {}), ...(logitScale !== 0 ? { scale: logitScale } : {}) });
}
