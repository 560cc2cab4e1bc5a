// Diffusion language models (llama.cpp src/models/llada.cpp, llada-moe.cpp, rnd1.cpp, dream.cpp):
// the trunks of llama (llada), OLMoE-like MoE with per-head q/k norms (llada-moe), qwen3moe (rnd1)
// and qwen2 (dream), attending both ways. Each file carries the mask token the diffusion loop fills
// the canvas with (tokenizer.ggml.mask_token_id: here <|fim_pad|>, a control token of the qwen2
// vocabulary) and, where the model predicts the token at its own position (LLaDA), diffusion.shift_logits
// false; without the key the loop reads position i's token from row i - 1 (Dream, RND1).
import { attention, checkHeads, denseFfn, embeddings, moeFfn, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/** The mask token the tiny files name: <|fim_pad|>, third from the end of the qwen2 vocabulary. */
export function diffusionMaskId(c: ModelConfig): number {
  return c.vocabSize - 3;
}

function diffusionKeys(c: ModelConfig, shift: boolean | undefined): [string, GgufValue][] {
  if (c.vocabKind !== 'qwen2') throw new Error(`${c.arch}: the diffusion presets use the qwen2 vocabulary (its <|fim_pad|> is the mask token)`);
  const m: [string, GgufValue][] = [['tokenizer.ggml.mask_token_id', kv.u32(diffusionMaskId(c))]];
  if (shift !== undefined) m.push(['diffusion.shift_logits', kv.bool(shift)]);
  return m;
}

function normalize(moe: boolean) {
  return (c: ModelConfig): ModelConfig => {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', ...(moe ? (['expertFf'] as const) : [])]);
    checkHeads(c);
    checkExperts(c, moe);
    return c;
  };
}

/** LLaDA: llama's block (RoPE over adjacent pairs), no biases, diffusion.shift_logits false. */
export const llada: ArchDefinition = {
  name: 'llada',
  ggufArch: 'llada',
  normalize: normalize(false),
  metadata: (c) => [...baseMetadata('llada', c), ...diffusionKeys(c, false)],
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i), ...denseFfn(c, i));
    return t;
  },
};

/** Dream: qwen2's block (q/k/v biases, NeoX RoPE); no shift key (the loop's default, shifted). */
export const dream: ArchDefinition = {
  name: 'dream',
  ggufArch: 'dream',
  normalize: normalize(false),
  metadata: (c) => [...baseMetadata('dream', c), ...diffusionKeys(c, undefined)],
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkvBias: true }), ...denseFfn(c, i));
    return t;
  },
};

/** LLaDA-MoE: per-head q/k norms, NeoX RoPE, softmax top-k experts without renormalization; shift false. */
export const lladaMoe: ArchDefinition = {
  name: 'llada-moe',
  ggufArch: 'llada-moe',
  normalize: normalize(true),
  metadata: (c) => [...baseMetadata('llada-moe', c), ['llada-moe.expert_feed_forward_length', kv.u32(c.expertFf)], ...diffusionKeys(c, false)],
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...moeFfn(c, i, c.expertFf));
    return t;
  },
};

/** RND1: qwen3moe's block (per-head q/k norms, renormalized top-k experts); diffusion.shift_logits true. */
export const rnd1: ArchDefinition = {
  name: 'rnd1',
  ggufArch: 'rnd1',
  normalize: normalize(true),
  metadata: (c) => [...baseMetadata('rnd1', c), ['rnd1.expert_feed_forward_length', kv.u32(c.expertFf)], ...diffusionKeys(c, true)],
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...moeFfn(c, i, c.expertFf));
    return t;
  },
};
