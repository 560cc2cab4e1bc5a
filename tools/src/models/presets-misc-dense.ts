// Presets for the dense decoders of architectures/misc-dense.ts (qwen2vl, hunyuan_vl, plamo, plamo3,
// pangu-embedded, openelm): n_embd 256, FFN 512, 4 blocks (tiny-plamo3: 8, for its default window
// pattern), heads of 64 (4 query heads over 2 KV heads unless said), Llama 3 byte-level vocabulary
// (1024). Each one exercises what its loader reads beyond Llama's block (see misc-dense.ts).
// Measured against llama.cpp (node-llama-cpp's CPU build, F32 KV, flash attention off, 64 tokens,
// seed 7): F32 NMSE 2.8e-14 (tiny-pangu-embedded) to 4.1e-13 (tiny-qwen2vl); quantized kail 7.1e-7
// to 2.2e-4 against llama.cpp's own spread of 4.8e-5 to 9.7e-4. The same weights read another way
// (kail against llama.cpp on the file): tiny-plamo3 without its windows 1.4, tiny-plamo3-pattern
// 6.4e-1, tiny-hunyuan-vl without rope.scaling.alpha 1.2e-2.
import type { MiscDenseConfig } from './architectures/misc-dense';
import type { Preset } from './presets';

const base = {
  nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-6, ropeBase: 1e6,
  tiedEmbeddings: false, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const qwen2vl: MiscDenseConfig = { ...base, arch: 'qwen2vl', name: 'tiny-qwen2vl', qkvBias: true, ropeSections: [16, 8, 8, 0], outputBias: true };
const hunyuanVl: MiscDenseConfig = { ...base, arch: 'hunyuan_vl', name: 'tiny-hunyuan-vl', ropeAlpha: 1000, ropeSections: [16, 8, 8, 0], ropeBase: 1e4, normEps: 1e-5 };
const plamo: MiscDenseConfig = { ...base, arch: 'plamo', name: 'tiny-plamo', qkvBias: true, ropeBase: 1e4 };
const plamo3: MiscDenseConfig = { ...base, arch: 'plamo3', name: 'tiny-plamo3', nLayers: 8, window: 8, tiedEmbeddings: true };
const plamo3Pattern: MiscDenseConfig = { ...base, arch: 'plamo3', name: 'tiny-plamo3-pattern', window: 6, swaPattern: [true, false, true, false], ropeBaseSwa: 5e4 };
const pangu: MiscDenseConfig = { ...base, arch: 'pangu-embedded', name: 'tiny-pangu-embedded', qkvBias: true, ropeFreqs: true, ropeBase: 16e6 };
const openelm: MiscDenseConfig = {
  ...base, arch: 'openelm', name: 'tiny-openelm', headDim: 64, nHeads: 4, nKvHeads: 1, tiedEmbeddings: true, ropeBase: 1e4,
  heads: [4, 4, 8, 4], kvHeads: [1, 2, 2, 4], ffs: [256, 512, 768, 512],
};

export const MISC_DENSE_PRESETS: Record<string, Preset> = {
  'tiny-qwen2vl': { description: "qwen2vl (Qwen2-VL's language model, text only): Llama block with q/k/v biases, M-RoPE sections [16, 8, 8, 0] (NeoX for text), an output.bias the graph ignores, untied head", config: qwen2vl },
  'tiny-hunyuan-vl': { description: "hunyuan_vl (HunyuanOCR's language model, text only): per-head q/k norms after RoPE, rope.scaling.alpha 1000, M-RoPE sections [16, 8, 8, 0] (NeoX for text), untied head", config: hunyuanVl },
  'tiny-plamo': { description: 'plamo (PLaMo-13B): attention and SwiGLU FFN side by side from one RMS norm, q/k/v biases, NeoX RoPE, untied head', config: plamo },
  'tiny-plamo3': { description: 'plamo3 (PLaMo 3): one attn_qkv, per-head q/k norms before NeoX RoPE, post norms, fused gate|up; 8 blocks, window 8 on 7 of every 8 (default pattern) at the default rope.freq_base_swa 10000, tied head', config: plamo3 },
  'tiny-plamo3-pattern': { description: 'plamo3 with a BOOL window pattern (blocks 0 and 2 slide, window 6), rope.freq_base_swa 50000, untied head', config: plamo3Pattern },
  'tiny-pangu-embedded': { description: 'pangu-embedded (openPangu-Embedded): Llama block with q/k/v biases, attn_output.bias, NeoX RoPE, a rope_freqs the graph ignores, untied head', config: pangu },
  'tiny-openelm': { description: 'openelm (OpenELM): per-block heads [4, 4, 8, 4], KV heads [1, 2, 2, 4] and FFN widths [256, 512, 768, 512], one attn_qkv, per-head q/k norms before NeoX RoPE, tied head', config: openelm },
};
