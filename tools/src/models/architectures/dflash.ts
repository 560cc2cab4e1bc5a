// DFlash block-diffusion drafts (llama.cpp's `dflash`, src/models/dflash.cpp; conversion/qwen.py's
// DFlashModel writes them from z-lab's Qwen3-*-DFlash checkpoints and their target's tokenizer): an
// encoder `fc` over the target's hidden states at the blocks of dflash.target_layers (each the
// target's n_embd wide, concatenated), RMS-normed by enc.output_norm (the checkpoint's hidden_norm),
// whose result is projected by every block's attn_k / attn_v (k-normed, RoPE'd) into the draft's KV
// cache at the target's positions; then Qwen3 blocks (per-head q/k norms, NeoX RoPE, SwiGLU) run
// over a noise block [last token, mask x (block_size - 1)] attending both ways, output_norm, and
// the head. As z-lab's checkpoints, the tiny drafts have no token_embd / output of their own
// (llama.cpp takes the target's) unless ownEmbeddings is set. The tokenizer is the target's, with
// tokenizer.ggml.mask_token_id naming the mask token. With draftVocab, the head covers a smaller
// draft vocabulary and `d2t` (I64, absolute target ids) maps it back, as llama.cpp's loader reads it.
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { attention, checkHeads, denseFfn, linear, norm, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { baseMetadata } from './common';
import { eagle3D2t } from './eagle3';

export interface DflashConfig extends ModelConfig {
  /** The target blocks whose inputs the encoder reads (dflash.target_layers, llama.cpp's extract layers). */
  targetLayers: number[];
  /** The target's n_embd. */
  targetDim: number;
  /** dflash.block_size: the noise block's length (drafts at most block_size - 1 tokens). */
  blockSize: number;
  /** Write token_embd.weight and output.weight (else the target's are used). Default false. */
  ownEmbeddings?: boolean;
  /** dflash.attention.causal, when given. */
  causal?: boolean;
  /** A draft vocabulary of this many tokens with a d2t map into the target's (0: none; needs ownEmbeddings). */
  draftVocab?: number;
}

/** The mask token the tiny drafts name: <|fim_pad|>, third from the end of the qwen2 vocabulary. */
export function dflashMaskId(c: ModelConfig): number {
  return c.vocabSize - 3;
}

function normalize(c: ModelConfig): ModelConfig {
  const e = c as DflashConfig;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'targetDim' as keyof ModelConfig, 'blockSize' as keyof ModelConfig]);
  checkHeads(c);
  if (c.vocabKind !== 'qwen2') throw new Error('dflash: the tiny drafts use the qwen2 vocabulary (its <|fim_pad|> is the mask token)');
  if (!Array.isArray(e.targetLayers) || e.targetLayers.length < 1 || !e.targetLayers.every((l) => Number.isInteger(l) && l >= 0))
    throw new Error('dflash: targetLayers must be one or more block indices');
  if (e.blockSize < 2) throw new Error('dflash: blockSize must be at least 2 (the last token and one mask)');
  const dv = e.draftVocab ?? 0;
  if (!Number.isInteger(dv) || dv < 0 || dv > c.vocabSize) throw new Error(`dflash: draftVocab must be in [0, ${c.vocabSize}]`);
  if (dv && !e.ownEmbeddings) throw new Error('dflash: a d2t draft vocabulary needs its own output head (ownEmbeddings)');
  if (e.ownEmbeddings === false || e.ownEmbeddings === undefined) {
    if (c.dim !== e.targetDim) throw new Error("dflash: a draft that takes the target's token_embd / output has the target's width");
  }
  return c;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const e = c as DflashConfig;
  const d = c.dim;
  const t: TensorSpec[] = [];
  if (e.ownEmbeddings) t.push({ name: 'token_embd.weight', shape: [d, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' });
  t.push(linear('fc.weight', e.targetLayers.length * e.targetDim, d, 'attn_q'));
  t.push(norm('enc.output_norm.weight', d));
  t.push(norm('output_norm.weight', d));
  const dv = e.draftVocab ?? 0;
  if (e.ownEmbeddings) t.push(linear('output.weight', d, dv || c.vocabSize, 'output', undefined, 2));
  if (dv) t.push({ name: 'd2t', shape: [dv], init: { kind: 'values', values: eagle3D2t(c.vocabSize, dv) }, role: 'index64' });
  for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...denseFfn(c, i));
  return t;
}

export const dflash: ArchDefinition = {
  name: 'dflash',
  ggufArch: 'dflash',
  normalize,
  metadata: (c) => {
    const e = c as DflashConfig;
    const m: [string, GgufValue][] = [
      ...baseMetadata('dflash', c),
      ['dflash.target_layers', kv.arr(GgufType.INT32, e.targetLayers)],
      ['dflash.block_size', kv.u32(e.blockSize)],
      ['tokenizer.ggml.mask_token_id', kv.u32(dflashMaskId(c))],
    ];
    if (e.causal !== undefined) m.push(['dflash.attention.causal', kv.bool(e.causal)]);
    return m;
  },
  tensors,
};
