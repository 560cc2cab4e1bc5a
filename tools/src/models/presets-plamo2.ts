// Presets for PLaMo 2 (architectures/plamo2.ts): n_embd 256, 4 blocks alternating Mamba (even
// blocks, HF mamba_step 2) and attention (odd), heads of 64 (4 query heads over 2 KV heads), Mamba
// mixers of 8 heads x 64 (d_inner 512) with a state of 16 and 4-tap convolutions (dt 64 wide:
// llama.cpp's max(64, n_embd / 16)), a fused SwiGLU FFN of 512 in every block, an untied head, PLaMo
// 2's own vocabulary kind (tokenizer.ggml.model "plamo2", 1024 tokens).
import type { Plamo2Config } from './architectures/plamo2';
import type { Preset } from './presets';

const plamo2Tiny: Plamo2Config = {
  arch: 'plamo2', name: 'tiny-plamo2', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-6, ropeBase: 10000,
  tiedEmbeddings: false, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'plamo2',
  ssm: { convKernel: 4, stateSize: 16, nHeads: 8 },
};

export const PLAMO2_PRESETS: Record<string, Preset> = {
  'tiny-plamo2': {
    description: 'plamo2 (PLaMo 2 style): 4 blocks alternating Mamba (8 heads x 64, state 16, normed B/C/dt, per-head A and D) and GQA (4 x 64 over 2 KV heads, fused qkv, per-head q/k norms, NeoX RoPE), each with post norms and a fused SwiGLU FFN of 512',
    config: plamo2Tiny,
  },
};
