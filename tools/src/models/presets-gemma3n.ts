// Presets for gemma3n (Gemma 3n E2B / E4B text decoders, architectures/gemma3n.ts). tiny-gemma3n:
// 22 blocks (llama.cpp shares KV from block 20 on, so the last 2 reuse blocks 18 (sliding) and 19
// (full); gaussian top-k sparsity on blocks 0-9 as llama.cpp), n_embd 64, 4 heads of 16 over 2 KV
// heads, sliding windows of 8 on 4 blocks of 5 and the last block full, an FFN of 96, LAuReL of
// rank 64, 4 AltUp streams and 256 per-layer inputs per block (llama.cpp's fixed numbers),
// SentencePiece vocabulary of 512.
import type { Gemma3nConfig } from './architectures/gemma3n';
import type { Preset } from './presets';

const L = 22;
const gemma3n: Gemma3nConfig = {
  arch: 'gemma3n', name: 'tiny-gemma3n', nLayers: L, dim: 64, ff: 96, nHeads: 4, nKvHeads: 2, headDim: 16,
  swaPattern: Array.from({ length: L }, (_, i) => i < L - 1 && i % 5 < 4), window: 8, ropeBase: 1e6, ropeBaseSwa: 1e4, laurelRank: 64,
  sharedKvLayers: 2, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 512, vocabKind: 'spm', ctx: 4096, normEps: 1e-6, tiedEmbeddings: true,
};

export const GEMMA3N_PRESETS: Record<string, Preset> = {
  'tiny-gemma3n': {
    description: 'gemma3n (Gemma 3n E2B-style): 4 AltUp streams, LAuReL, 256 per-layer inputs, gaussian top-k on blocks 0-9, sliding windows, the last 2 of 22 blocks sharing KV',
    config: gemma3n,
  },
};
