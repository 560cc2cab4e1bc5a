// Presets for bailingmoe3 (inclusionAI Ling 3, BailingMoeV3; architectures/bailingmoe3.ts).
import type { BailingMoe3Config } from './architectures/bailingmoe3';
import type { Preset } from './presets';

// Ling-3.0 style, scaled down: 4 trunk blocks K M K M (K: KDA, M: MLA; layer_group_size 2, the real
// models 4) and the NextN block (MLA, routed), 4 heads; KDA heads of 64 (d_inner 256) with 4-tap
// convolutions and the safe gate's lower bound -5; MLA with a q LoRA of 128, a latent of 128,
// per-head keys of 64 + a RoPE part of 32 and values of 64; 1 dense SwiGLU block of 512, then 16
// sigmoid + bias experts top-4 of 128, renormalized and scaled by 2.5, plus one shared expert of its
// own width, 192 (expert_shared_feed_forward_length). SwiGLU limits per block on the experts and the
// shared expert (0 on the dense block, 1 to 2 elsewhere: a limit of 1 clips about a third of the up
// values). Untied head. n_embd 256, so K-quants apply to the matrices that read it.
const bailingMoe3: BailingMoe3Config = {
  arch: 'bailingmoe3', name: 'tiny-bailingmoe3', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 1, nExperts: 16, nExpertsUsed: 4, expertFf: 128, sharedFf: 192,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 10000, normEps: 1e-5, tiedEmbeddings: false,
  kda: { headDim: 64, convKernel: 4, lowerBound: -5 },
  mla: { kvLora: 128, qkNope: 64, qkRope: 32, vHead: 64, qLora: 128 },
  groupSize: 2, nDense: 1, nShared: 1, wScale: 2.5, normW: true,
  swigluLimit: [0, 1, 1.5, 1, 1.25], swigluLimitShared: [0, 2, 1, 1.5, 1],
  nextn: 1,
};
// The converter's other cases: no q LoRA (attn_q), no expert_shared_feed_forward_length (llama.cpp
// then takes expertFf x expert_shared_count: 2 x 128), no clamp keys, no NextN block, a head tied
// to token_embd, routing weights not renormalized; 5 trunk blocks K K K M M (group 4: the fifth
// is past the last whole group, so MLA) and 2 dense blocks.
const bailingMoe3Tied: BailingMoe3Config = {
  ...bailingMoe3, name: 'tiny-bailingmoe3-tied', nLayers: 5, sharedFf: 0, nShared: 2, tiedEmbeddings: true,
  mla: { ...bailingMoe3.mla, qLora: 0 }, groupSize: 4, nDense: 2, normW: false, wScale: 1.5,
  swigluLimit: undefined, swigluLimitShared: undefined, nextn: 0,
};

export const BAILINGMOE3_PRESETS: Record<string, Preset> = {
  'tiny-bailingmoe3': {
    description: 'bailingmoe3 (Ling 3 style): KDA blocks with the safe gate (lower bound -5) and MLA blocks with RoPE, q LoRA and a gate per head, 1 dense block, 16 sigmoid + bias experts top-4 and a shared expert of its own width, SwiGLU limits, an MTP block',
    config: bailingMoe3,
  },
  'tiny-bailingmoe3-tied': {
    description: 'tiny-bailingmoe3 without q LoRA, clamps, MTP or expert_shared_feed_forward_length (2 shared experts), a tied head, unnormalized routing, blocks K K K M M with 2 dense',
    config: bailingMoe3Tied,
  },
};
