// Presets for the diffusion LMs of architectures/diffusion.ts (llada, dream, llada-moe, rnd1):
// n_embd 256 (K-quants apply without fallbacks), 2 blocks, 4 query heads of 64 over 2 KV heads,
// the qwen2 byte-level vocabulary (1024) with <|fim_pad|> (1021) as the mask token.
import type { ModelConfig } from './arch';
import type { Preset } from './presets';

const base = {
  nLayers: 2, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-5, ropeBase: 10000, tiedEmbeddings: false,
  nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'qwen2' as const,
};

const llada: ModelConfig = { ...base, arch: 'llada', name: 'tiny-llada', ropeBase: 500000 };
const dream: ModelConfig = { ...base, arch: 'dream', name: 'tiny-dream', tiedEmbeddings: true, ropeBase: 1e6, normEps: 1e-6 };
const lladaMoe: ModelConfig = { ...base, arch: 'llada-moe', name: 'tiny-llada-moe', headDim: 64, nExperts: 16, nExpertsUsed: 4, expertFf: 128, ropeBase: 50000 };
const rnd1: ModelConfig = { ...base, arch: 'rnd1', name: 'tiny-rnd1', headDim: 128, nExperts: 16, nExpertsUsed: 4, expertFf: 256, ropeBase: 1e6, normEps: 1e-6 };

export const DIFFUSION_PRESETS: Record<string, Preset> = {
  'tiny-llada': { description: 'llada (LLaDA): llama block attending both ways, RoPE over adjacent pairs, no biases, diffusion.shift_logits false, mask token 1021', config: llada },
  'tiny-dream': { description: 'dream (Dream): qwen2 block attending both ways (q/k/v biases, NeoX RoPE), tied head, no shift key (shifted), mask token 1021', config: dream },
  'tiny-llada-moe': { description: 'llada-moe (LLaDA-MoE): per-head q/k norms, NeoX RoPE, 16 experts top-4 without renormalization, attending both ways, shift false', config: lladaMoe },
  'tiny-rnd1': { description: 'rnd1 (RND1): qwen3moe block (heads of 128, renormalized top-4 of 16 experts) attending both ways, diffusion.shift_logits true', config: rnd1 },
};
