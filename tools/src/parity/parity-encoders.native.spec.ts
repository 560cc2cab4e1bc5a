// Encoder-only embedding models (llama.cpp's bert, nomic-bert and nomic-bert-moe graphs:
// non-causal attention, layer norms, GELU or SwiGLU, gate-less GELU experts, learned or rotary
// positions, mean or CLS pooling) against
// llama.cpp's embedding context (node-llama-cpp, flash attention off; it keeps no KV cache for
// these), files from the project's writer in several types. kail's embedding is what the engine
// service returns for /v1/embeddings before normalization: LocalModelHost, EMBED_MODEL (the file's
// pooling type), the prompt tokenized with the vocabulary's [CLS] ... [SEP].
import type { FileTypeName } from '../models/quant-plan';
import { getPreset } from '../models/presets';
import { encoderParityCases } from './encoder-parity.suite';

/** NMSE bounds per file type: the measured values are 10-1000x below (a last-bit difference that flips one of GELU's F16 table entries or an 8-bit activation rounding moves a text by up to ~1e-9 in F32 and ~5e-6 in Q4_K). */
const BOUND: Partial<Record<FileTypeName, number>> = { F32: 1e-8, F16: 1e-6, Q8_0: 1e-5, Q4_K: 1e-4 };
const TYPES: Record<string, FileTypeName[]> = {
  'tiny-bert': ['F32', 'F16', 'Q8_0', 'Q4_K'],
  'tiny-nomic-bert': ['F32', 'F16', 'Q8_0', 'Q4_K'],
  'tiny-nomic-bert-moe': ['F32', 'Q8_0'],
  'tiny-bert-cls': ['F32'],
  'tiny-bert-causal': ['F32'],
};
const CASES = Object.entries(TYPES).flatMap(([preset, types]) => types.map((t) => [preset, t, BOUND[t]!] as [string, FileTypeName, number]));

describe("encoder embeddings against llama.cpp's embedding context", () => {
  // tiny-bert-cls: tiny-bert with CLS pooling (pooling_type 2, as bge files); tiny-bert-causal:
  // with attention.causal true, which llama.cpp ignores for a model without a KV cache (its
  // encode() always attends both ways), and so does kail.
  const variants: Record<string, object> = { 'tiny-bert-cls': { pooling: 2 }, 'tiny-bert-causal': { causal: true } };
  encoderParityCases({
    name: 'enc',
    cases: CASES,
    pad: 16,
    config: (preset) => (variants[preset] ? { ...getPreset('tiny-bert').config, name: preset, ...variants[preset] } : getPreset(preset).config),
    // [CLS] first and [SEP] last, as llama.cpp's WordPiece tokenizer adds them.
    checkPrompts: (prompts) => {
      for (const p of prompts) expect([p[0], p[p.length - 1]]).toEqual([2, 3]);
    },
  });
});
