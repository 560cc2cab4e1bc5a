import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { tensorLookup } from './deepseek2';

/**
 * HRM-Text (`hrm_text`, DFM Mimir; llama.cpp src/models/hrm-text.cpp): a low stack (blk.0..lps-1)
 * and a high stack (blk.lps..2lps-1) of pre-norm blocks, every norm a parameterless RMS norm (eps
 * attention.layer_norm_rms_epsilon, required): per block RMSNorm → GQA with NeoX RoPE, the output
 * gated elementwise by sigmoid(attn_gate · input) before attn_output → residual; RMSNorm → SwiGLU
 * → residual; and an RMSNorm after each stack pass. zH starts as the embedding (times
 * embedding_scale when present and not 0), zL as hrm.z_l_init (one row, broadcast); then h_cycles
 * times: l_cycles times zL = low(zH + zL), then zH = high(zH + zL). The logits are the head of the
 * last zH (no output norm; output.weight, else token_embd).
 *
 * block_count counts KV cache slots, not written blocks: lps x h_cycles x (l_cycles + 1), one per
 * block of every stack pass. Each pass attends over cache rows of its own while its weights are the
 * stack's, so the program declares a KV layer per slot (what `kail plan` and the load size the
 * cache by) and reads each weight once. hrm.prefix_lm is read and ignored: llama.cpp runs causal
 * attention whatever it says, and so does kail.
 */
export function buildHrmText(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const md = hp.meta;
  const lps = md.int('hrm.layers_per_stack', undefined, 1, MAX_LAYERS);
  const hCycles = md.int('hrm.h_cycles', undefined, 1, MAX_LAYERS);
  const lCycles = md.int('hrm.l_cycles', undefined, 1, MAX_LAYERS);
  const nSlot = lps * hCycles * (lCycles + 1);
  if (hp.nLayer !== nSlot)
    bad(`block_count ${hp.nLayer} is not layers_per_stack x h_cycles x (l_cycles + 1) = ${lps} x ${hCycles} x ${lCycles + 1} = ${nSlot} (a KV cache slot per block of every stack pass)`);
  md.bool('hrm.prefix_lm', false);
  const eps = md.num('attention.layer_norm_rms_epsilon');
  const embScale = md.num('embedding_scale', 0);
  if (!Number.isFinite(embScale)) bad(`embedding_scale ${embScale} is not a finite number`);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  // (llama.cpp's graph takes the head counts of block 0 for every slot.)
  for (let s = 1; s < nSlot; s++)
    if (hp.nHead[s] !== hp.nHead[0] || hp.nHeadKv[s] !== hp.nHeadKv[0])
      bad(`cache slot ${s} has ${hp.nHead[s]} heads / ${hp.nHeadKv[s]} KV heads where slot 0 has ${hp.nHead[0]} / ${hp.nHeadKv[0]}: every pass runs the same blocks`);
  const zInit = need('hrm.z_l_init');
  const zDims = tensors.get(zInit)!.dims;
  if (zDims[0] !== hp.nEmbd || zDims.reduce((a, b) => a * b, 1) !== hp.nEmbd) bad(`hrm.z_l_init is [${zDims.join(', ')}], not one row of embedding_length ${hp.nEmbd}`);

  const { p, x: zH, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  if (embScale !== 0) p.op('scale', zH, { a: zH, params: { scale: embScale } });
  const zL = p.buf('z_l', hp.nEmbd);
  const s = p.buf('stack', hp.nEmbd);
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const rmsNorm = (out: number, a: number) => p.op('rms_norm', out, { a, params: { eps } });
  // z_L's first value: hrm.z_l_init in every row.
  p.op('embed', zL, { weights: { weight: zInit }, params: { index: 2 } });

  /** One pass of the stack whose blocks start at blk.`blk0`, over cache slots slot0.., from zH + zL into `out`. */
  const stack = (blk0: number, slot0: number, out: number) => {
    p.op('add', s, { a: zH, b: zL });
    for (let i = 0; i < lps; i++) {
      const il = blk0 + i;
      const slot = slot0 + i;
      rmsNorm(h, s);
      const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x: h, h }, { need, maybe }, hd, hd, { noNorm: true });
      const gate = p.buf(`attn_gate${H * hd}`, H * hd);
      p.op('matmul', gate, { a: h, weights: { weight: need(`blk.${il}.attn_gate.weight`) } });
      p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
      // (Declared in slot order: KV layer `slot`.)
      const layer = p.kvLayer(Hkv * hd, Hkv * hd);
      p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
      p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { per_element: 1 } });
      p.op('matmul', attnOut, { a: attn, weights: { weight: need(`blk.${il}.attn_output.weight`) } });
      p.op('add', s, { a: s, b: attnOut });
      rmsNorm(h, s);
      denseGatedFfn(p, tensors, il, { need, maybe: () => undefined }, h, ffnOut);
      p.op('add', s, { a: s, b: ffnOut });
      // llama.cpp's build_cvec(cur, slot): control vectors index the slots, not the blocks.
      p.op('cvec', s, { a: s, params: { layer: slot } });
    }
    rmsNorm(out, s);
  };
  for (let hc = 0; hc < hCycles; hc++) {
    for (let lc = 0; lc < lCycles; lc++) stack(0, (hc * (lCycles + 1) + lc) * lps, zL);
    stack(lps, (hc * (lCycles + 1) + lCycles) * lps, zH);
  }

  p.hidden(zH);
  const ho = p.buf('h_out', hp.nEmbd, true);
  p.op('gather_out', ho, { a: zH });
  const head = maybe('output.weight') ?? need('token_embd.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}
