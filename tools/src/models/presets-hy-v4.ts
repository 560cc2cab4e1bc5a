// Presets for hy_v4 (Tencent Hunyuan v4; architectures/hy-v4.ts).
import type { HyV4Config } from './architectures/hy-v4';
import type { Preset } from './presets';

// Hunyuan v4 style, scaled down: 4 blocks of n_embd 128 in 4 hyper-connection streams (hc_eps
// 1e-6, magnitude 2), absorbed MLA of 4 heads (q LoRA 64, kv_lora 64, keys 32 + 16 rotary, values
// 32) with sinks and a sigmoid output gate; a lightning indexer of 4 heads x 64 keeping the top 16
// positions on blocks 0 and 2, blocks 1 and 3 sharing their selection (so a 64-token input runs
// the sparse attention); block 0 dense (SwiGLU of 256), then 8 sigmoid + bias experts top-2 of 64,
// renormalized and scaled by 2.5, one shared expert, the routed SwiGLU clamped at 2.
const tiny: HyV4Config = {
  arch: 'hy_v4', name: 'tiny-hy-v4', nLayers: 4, dim: 128, ff: 256, nHeads: 4, nKvHeads: 1,
  mla: { qLora: 64, kvLora: 64, qkNope: 32, qkRope: 16, vHead: 32 },
  hc: { count: 4, eps: 1e-6, magnitude: 2 },
  dsa: { nHead: 4, headDim: 64, topK: 16, full: [true, false, true, false] },
  nExperts: 8, nExpertsUsed: 2, expertFf: 64, sharedFf: 0,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2.5 },
  swigluLimit: 2,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 10000, normEps: 1e-5, tiedEmbeddings: false,
};

// The all-full_attention checkpoints: no indexer keys or tensors, no clamp, 3 streams, 2 dense
// blocks of 5.
const full: HyV4Config = {
  ...tiny,
  name: 'tiny-hy-v4-full', nLayers: 5,
  hc: { count: 3, eps: 1e-6, magnitude: 2 },
  dsa: undefined,
  moe: { ...tiny.moe, nDense: 2 },
  swigluLimit: undefined,
};

export const HY_V4_PRESETS: Record<string, Preset> = {
  'tiny-hy-v4': {
    description: 'hy_v4 (Hunyuan v4 style): 4 hyper-connection streams, absorbed MLA with sinks and an output gate, DSA indexer (4 x 64, top 16) on blocks 0 and 2 shared by 1 and 3, 1 dense block, 8 sigmoid + bias experts top-2 clamped at 2 with a shared one',
    config: tiny,
  },
  'tiny-hy-v4-full': {
    description: 'hy_v4 without an indexer (the all-full_attention checkpoints): 3 hyper-connection streams, MLA with sinks and an output gate, 2 dense blocks, 8 sigmoid + bias experts top-2 with a shared one',
    config: full,
  },
};
