// Presets for graniteswitch (Granite Switch, architectures/granite-switch.ts): tiny-granite's shape
// (3 blocks, n_embd 256, 4 heads of 64 over 2 KV heads, FFN 512, Granite's test multipliers) with
// 4 adapters of rank 4 whose activation tokens sit inside the parity tests' sequences, so the
// router's slot changes mid-sequence: in the F32 tests' 64 tokens (metrics.ts tokenIds(64, 1024,
// 11)) 426 at position 9 and 919 at 40 (slot 0 -> 1 -> 2, the average of adapters 1 and 3); in the
// quantized tests' 128 (tokenIds(128, 1024, 5)) 561 at 9 and 306 at 40 (slot 0 -> 2 -> 3).
// tiny-graniteswitch-2: 2 adapters (adapter 2's token 919 at position 40: slot 0 -> 2), llama.cpp's
// default router gain (no key), tied embeddings; tiny-graniteswitch-zero: tiny-graniteswitch with
// every delta zero (the base model: a test's reference).
import type { GraniteSwitchConfig } from './architectures/granite-switch';
import type { Preset } from './presets';

const graniteScales = { embedding: 2, residual: 0.5, attention: 0.015625, logit: 6 };
const gs: GraniteSwitchConfig = {
  arch: 'graniteswitch', name: 'tiny-graniteswitch', nLayers: 3, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2,
  nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 10000, normEps: 1e-6,
  tiedEmbeddings: false, scales: graniteScales,
  adapters: { activate: [426, 561, 919, 306], substitute: [100, 101, 102, 103], rank: 4, gain: 15 },
};

export const GRANITE_SWITCH_PRESETS: Record<string, Preset> = {
  'tiny-graniteswitch': { description: 'graniteswitch (Granite Switch): Granite dense with 4 per-token switched LoRA adapters of rank 4, activated mid-sequence', config: gs },
  'tiny-graniteswitch-2': {
    description: 'graniteswitch with 2 adapters, the default router gain and tied embeddings',
    config: { ...gs, name: 'tiny-graniteswitch-2', tiedEmbeddings: true, adapters: { activate: [5, 919], substitute: [7, 8], rank: 4 } } as GraniteSwitchConfig,
  },
  'tiny-graniteswitch-zero': {
    description: 'tiny-graniteswitch with every LoRA delta zero (the base model: a test reference)',
    config: { ...gs, name: 'tiny-graniteswitch-zero', adapters: { ...gs.adapters, zeroDeltas: true } } as GraniteSwitchConfig,
  },
};
