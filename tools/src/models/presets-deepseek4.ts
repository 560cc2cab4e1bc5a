// Presets for deepseek4 (DeepSeek-V4; architectures/deepseek4.ts).
import type { Deepseek4Config } from './architectures/deepseek4';
import type { Preset } from './presets';

// DeepSeek-V4 style, scaled down: 4 blocks of n_embd 128 in 4 hyper-connection streams (3
// Sinkhorn iterations, eps 1e-6), 4 query heads of 96 (32 rotary) from a q LoRA of 64 over one
// shared key/value row, a raw sliding window of 8 with sinks, output LoRA in 2 groups of rank 32;
// compress ratios 4 (CSA: lightning indexer of 4 x 64 keeping the top 4 compressed entries), 128
// (HCA), 0 (window only), 4 (CSA) with compress RoPE base 160000; block 0 hash-routed (token id
// table), the others sqrt-softplus + bias routing, 8 experts top-2 of 64 renormalized and scaled
// by 1.5, one shared expert, both SwiGLUs clamped at 1.5; one MTP block (window attention, sqrt-softplus
// experts; run as the speculative draft: EngineModel.load(path, { mtp: true })).
const tiny: Deepseek4Config = {
  arch: 'deepseek4', name: 'tiny-deepseek4', nLayers: 4, dim: 128, ff: 64, nHeads: 4, nKvHeads: 1,
  head: 96, rope: 32, qLora: 64, oGroups: 2, oLora: 32, window: 8,
  ratios: [4, 128, 0, 4], compressRopeBase: 160000,
  indexer: { nHead: 4, headDim: 64, topK: 4 },
  hc: { count: 4, iters: 3, eps: 1e-6 },
  hashLayers: 1,
  nExperts: 8, nExpertsUsed: 2, expertFf: 64, sharedFf: 0,
  nShared: 1, normW: true, wScale: 1.5, swigluLimit: 1.5,
  mtp: 1,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 10000, normEps: 1e-6, tiedEmbeddings: false,
};

// The other shapes: YaRN (factor 4 over 64 positions) on the compressing blocks' RoPE, HCA first
// (ratios 128, 4, 4, 0), two hash-routed blocks, 20 Sinkhorn iterations, unclamped shared experts
// (swiglu_clamp_shexp 0), no MTP block.
const yarn: Deepseek4Config = {
  ...tiny,
  name: 'tiny-deepseek4-yarn',
  ratios: [128, 4, 4, 0],
  hc: { count: 4, iters: 20, eps: 1e-6 },
  hashLayers: 2,
  swigluLimitShexp: 0,
  mtp: 0,
  yarn: { factor: 4, origCtx: 64 },
};

export const DEEPSEEK4_PRESETS: Record<string, Preset> = {
  'tiny-deepseek4': {
    description: 'deepseek4 (DeepSeek-V4 style): 4 hyper-connection streams with Sinkhorn mixing, q LoRA attention over one shared key/value row with sinks and a window of 8, CSA (indexer top 4) / HCA compressed attention, grouped output LoRA, a hash-routed block, sqrt-softplus experts top-2 clamped at 1.5 with a shared one, an MTP block',
    config: tiny,
  },
  'tiny-deepseek4-yarn': {
    description: 'deepseek4 with YaRN on the compressing blocks, HCA first (128, 4, 4, 0), two hash-routed blocks, 20 Sinkhorn iterations, unclamped shared experts, no MTP block',
    config: yarn,
  },
};
