// Presets for dots3note (rednote dots.llm3; architectures/dots3note.ts).
import type { Dots3noteConfig } from './architectures/dots3note';
import type { Preset } from './presets';

// dots.llm3 style, scaled down: 5 blocks of n_embd 256, blocks 0 and 3 full attention (4 heads;
// kv_lora 128, keys 64 + 32 rotary, values 64; rope.freq_base 1e6) with a lightning indexer of 16
// heads x 64 keeping the top 16 positions, blocks 1, 2 and 4 sliding over 8 positions (6 heads;
// kv_lora 64, keys 32 + 32, values 32; rope.freq_base_swa 1e4), so a 64-token input passes both the
// window and top_k; q LoRA 128 shared. Block 0 dense (SwiGLU of 512), then 16 sigmoid + bias
// experts top-4 of 128, renormalized and scaled by 2.5, one shared expert; untied head. One MTP
// block after the trunk, as the converter keeps it (llama.cpp loads and skips it).
const tiny: Dots3noteConfig = {
  arch: 'dots3note', name: 'tiny-dots3note', nLayers: 5, dim: 256, ff: 512, nHeads: 4, nKvHeads: 1,
  qLora: 128, qkRope: 32,
  full: { nHeads: 4, kvLora: 128, qkNope: 64, vHead: 64 },
  swa: { nHeads: 6, kvLora: 64, qkNope: 32, vHead: 32 },
  fullEvery: 3, window: 8, ropeBase: 1e6, ropeBaseSwa: 1e4,
  dsa: { nHead: 16, headDim: 64, topK: 16 },
  nExperts: 16, nExpertsUsed: 4, expertFf: 128, sharedFf: 0,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2.5 },
  nextn: 1,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, normEps: 1e-6, tiedEmbeddings: false,
};

export const DOTS3NOTE_PRESETS: Record<string, Preset> = {
  'tiny-dots3note': {
    description: 'dots3note (dots.llm3 style): absorbed MLA on full blocks (0, 3: DSA indexer 16 x 64, top 16) and sliding ones (window 8, own kv_lora / head sizes / heads / RoPE base), RoPE-key norm, head-wise sigmoid gate, 1 dense block, 16 sigmoid + bias experts top-4 with a shared one, an MTP block kept',
    config: tiny,
  },
};
