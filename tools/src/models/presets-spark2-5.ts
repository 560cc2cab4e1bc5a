// Presets for spark2_5 (Spark-X2.5; architectures/spark2-5.ts): n_embd 256, FFN 512, 4 heads of 64
// over 2 KV heads, Llama 3 byte-level vocabulary (1024), untied head. tiny-spark2-5: 4 blocks, every
// second one full attention (blocks 1, 3), the others sliding over 8 positions (so a 64-token
// sequence leaves the window), fused attn_qkv as the converter writes it, full blocks rotating 32
// of 64 dims and sliding ones all 64 (partial_rotary_factor 0.5 / 1.0), no rope.freq_base_swa (the
// sliding blocks take the full blocks' base, as llama.cpp's loader).
import type { Spark25Config } from './architectures/spark2-5';
import type { Preset } from './presets';

const spark: Spark25Config = {
  arch: 'spark2_5', name: 'tiny-spark2-5', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, headDim: 64, ctx: 4096, normEps: 1e-6, ropeBase: 1e4,
  tiedEmbeddings: false, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3',
  window: 8, fullInterval: 2, ropeDims: 32, ropeDimsSwa: 64, fusedQkv: true,
};

export const SPARK25_PRESETS: Record<string, Preset> = {
  'tiny-spark2-5': { description: 'spark2_5 (Spark-X2.5): sliding (window 8) and full blocks alternating, fused qkv, head-wise sigmoid attention gate, partial RoPE on full blocks (32 of 64 dims), GELU-gated FFN, untied head', config: spark },
};
