import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { ProgramBuilder, ropeFactorTensor, ropeParams } from '../program-builder';
import { hiddenOutput, mlaBlock, readMlaDims, refuseUnsupported, tensorLookup, type MlaBlockContext } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * MiniCPM3's scales, which llama.cpp's graph (src/models/minicpm3.cpp) hard-codes rather than
 * reading from the file (its converter writes none): the embedding times 12, each sub-layer's
 * output times 1.4 / sqrt(block_count) before its residual add, the normed hidden state times
 * 256 / n_embd before the head.
 */
const MINICPM3_SCALE_EMBD = 12;
const MINICPM3_SCALE_DEPTH = 1.4;
const MINICPM3_EMBD_BASE = 256;

/**
 * The dense decoders with DeepSeek's multi-head latent attention, run through deepseek2's mlaBlock
 * (absorbed MLA over the latent KV cache, kv_lora + qk_rope per token and block):
 *
 * - MiniCPM3 (`minicpm3`, llama.cpp src/models/minicpm3.cpp): q LoRA (attn_q_a, its norm,
 *   attn_q_b) and one attn_kv_b; NeoX RoPE on the last qk_rope dimensions with LongRoPE's factor
 *   tables (rope_factors_long when the context of one sequence, padded to 256, is longer than the
 *   original context, else rope_factors_short; neither: plain RoPE); the attention scaled by
 *   1/sqrt(key_length); a SwiGLU FFN in every block; the embedding, residual and head scales above;
 *   output.weight or the tied embedding.
 * - PLM (`plm`, src/models/plm.cpp): a plain attn_q, one attn_kv_b, RoPE over adjacent pairs, an
 *   ungated FFN ffn_up -> squared ReLU -> ffn_down, the head always the token embedding (llama.cpp's
 *   loader ignores an output.weight).
 *
 * value_length defaults to n_embd / head_count (MiniCPM3's converter does not write it).
 */
export function buildMlaDense(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const minicpm3 = hp.arch === 'minicpm3';
  refuseUnsupported(hp);
  const dims = readMlaDims(hp);
  if (minicpm3 && dims.qLora < 1) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention.q_lora_rank is required (the queries go through attn_q_a and attn_q_b)`);
  const headK = dims.qkNope + dims.qkRope;
  // The loaders take these layouts only: q LoRA (minicpm3) or attn_q (plm), and one attn_kv_b.
  for (let il = 0; il < hp.nLayer; il++) {
    if (minicpm3) need(t(il, 'attn_q_a.weight'));
    else need(t(il, 'attn_q.weight'));
    need(t(il, 'attn_kv_b.weight'));
  }
  const factors = minicpm3 ? ropeFactorTensor(hp, tensors, nCtxSeq, 'longrope') : undefined;
  const f32 = Math.fround;
  const c: MlaBlockContext = {
    hp,
    tensors,
    dims,
    routing: { gating: 0, normW: false, wScale: 0, nGroup: 0, nGroupUsed: 0 },
    nDense: hp.nLayer,
    kqScale: f32(1 / f32(Math.sqrt(headK))),
    rope: ropeParams(hp, minicpm3, { n_dims: dims.qkRope }),
    naive: false,
    ...(factors ? { ropeFactors: factors } : {}),
    ...(minicpm3 ? { residualScale: f32(f32(MINICPM3_SCALE_DEPTH) / f32(Math.sqrt(hp.nLayer))) } : { relu2Ffn: true }),
  };
  const p = new ProgramBuilder();
  const x = p.buf('x', hp.nEmbd);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  if (minicpm3) p.op('scale', x, { a: x, params: { scale: MINICPM3_SCALE_EMBD } });
  for (let il = 0; il < hp.nLayer; il++) mlaBlock(p, c, il, x);
  const ho = hiddenOutput(p, hp, need, x);
  if (minicpm3) p.op('scale', ho, { a: ho, params: { scale: f32(MINICPM3_EMBD_BASE / hp.nEmbd) } });
  const head = minicpm3 && tensors.has('output.weight') ? 'output.weight' : 'token_embd.weight';
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}
