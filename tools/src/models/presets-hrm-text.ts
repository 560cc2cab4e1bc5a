// Presets for hrm_text (HRM-Text, DFM Mimir; architectures/hrm-text.ts): n_embd 256, FFN 512, heads
// of 64, Llama 3 byte-level vocabulary (1024). tiny-hrm-text: 2 blocks per stack, 2 high passes of
// 2 low passes each (12 KV slots over 4 written blocks), GQA 4/2, embedding_scale 2, untied head.
// tiny-hrm-text-tied: 1 block per stack, 3 high passes of 1 low pass (6 slots over 2 blocks), 4 KV
// heads, no embedding_scale key, prefix_lm true (read and unused, as llama.cpp), tied head.
// Measured against llama.cpp (node-llama-cpp's CPU build, F32 KV, flash attention off, 64 tokens,
// seed 7): F32 NMSE 3.0e-14 (tiny-hrm-text) and 5.5e-14 (tied); Q4_K_M 8.2e-5 against llama.cpp's
// own spread of 9.0e-5, the tied Q8_0 4.7e-5 against 8.4e-5; control vectors by slot 3.3e-14.
import type { HrmTextConfig } from './architectures/hrm-text';
import type { Preset } from './presets';

const base = {
  dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-6, ropeBase: 1e4,
  tiedEmbeddings: false, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const hrm: HrmTextConfig = { ...base, arch: 'hrm_text', name: 'tiny-hrm-text', nLayers: 12, layersPerStack: 2, hCycles: 2, lCycles: 2, embeddingScale: 2 };
const tied: HrmTextConfig = { ...base, arch: 'hrm_text', name: 'tiny-hrm-text-tied', nLayers: 6, layersPerStack: 1, hCycles: 3, lCycles: 1, nKvHeads: 4, tiedEmbeddings: true, prefixLm: true, normEps: 1e-5, ropeBase: 5e5 };

export const HRM_TEXT_PRESETS: Record<string, Preset> = {
  'tiny-hrm-text': { description: 'hrm_text (HRM-Text, DFM Mimir): low and high stacks of 2 parameterless-norm blocks with sigmoid-gated attention, 2 high passes of 2 low passes (12 KV slots over 4 blocks), z_L from hrm.z_l_init, embedding_scale 2, untied head', config: hrm },
  'tiny-hrm-text-tied': { description: 'hrm_text with 1 block per stack, 3 high passes of 1 low pass (6 KV slots over 2 blocks), 4 KV heads, no embedding_scale, prefix_lm true (causal regardless, as llama.cpp), tied head', config: tied },
};
