// Presets for qwen4exp (Qwen3.8-Flash-Next style; architectures/qwen4exp.ts).
import type { Qwen4ExpConfig } from './architectures/qwen4exp';
import type { Preset } from './presets';

// Qwen3.8-Flash-Next style, scaled down: 4 blocks of n_embd 256 in 4 hyper-connection streams
// (gate rank 32), 3 gated delta-net blocks (2 key / 4 value heads of 64, 4-tap convolutions) then
// 1 gated full-attention block (4 heads of 64 over 2 KV heads, q/k norms, interleaved M-RoPE on 16
// of 64) with a QSA indexer (4 heads x 32, blocks of 4, budget 256 positions: past the parity
// prompts, so the selection keeps every position there; -qsa drops), 16 experts top-4 of 128 and
// a gated shared expert of 128; PLE n-gram embeddings on block 1: trigrams, 2 heads per n-gram (4
// heads of 64 rows from a table of 1152), 45-bit multipliers, a 4-tap convolution 3 positions
// apart, EOS 835 (a token of the parity specs' inputs, so their n-grams reset).
const tiny: Qwen4ExpConfig = {
  arch: 'qwen4exp', name: 'tiny-qwen4exp', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, headDim: 64,
  ropeDims: 16, ropeSections: [3, 3, 2, 0], fullAttentionInterval: 4, linearAttn: { kHeads: 2, vHeads: 4, headDim: 64, convKernel: 4 },
  hc: { count: 4, lowRank: 32 },
  indexer: { nHead: 4, headDim: 32, topK: 256, ratio: 4 },
  ple: {
    layer: 1, ngram: 3, headsPerNgram: 2, convKernel: 4, eos: 835, headDim: 64, vocab: [311, 257, 293, 269], gap: [0, 5, 0, 17],
    multipliers: [0x1f3a5c7e9b1dn, 0x15b7d9f13579n, 0x1abcdef12345n],
  },
  nExperts: 16, nExpertsUsed: 4, expertFf: 128, sharedFf: 128,
  vocabSize: 1024, vocabKind: 'qwen2', ctx: 256, ropeBase: 1e7, normEps: 1e-6, tiedEmbeddings: false,
};

// The layer pattern from attention.recurrent_layers (the converter writes it from layer_types):
// full attention on blocks 1 and 4 of 5, 2 hyper-connection streams of rank 64.
const layers: Qwen4ExpConfig = {
  ...tiny,
  name: 'tiny-qwen4exp-layers', nLayers: 5, recurrentLayers: [true, false, true, true, false],
  hc: { count: 2, lowRank: 64 },
  ple: undefined,
};

// QSA that drops positions: the -layers geometry (two full-attention blocks, both with the indexer)
// keeping the top 8 positions in blocks of 4 plus the incomplete tail (W = 8 + 4 - 1 = 11), so a
// 64-token prompt attends to 11 of up to 64 positions per query.
const qsa: Qwen4ExpConfig = {
  ...layers,
  name: 'tiny-qwen4exp-qsa',
  indexer: { nHead: 4, headDim: 32, topK: 8, ratio: 4 },
};

export const QWEN4EXP_PRESETS: Record<string, Preset> = {
  'tiny-qwen4exp': {
    description: 'qwen4exp (Qwen3.8-Flash-Next style): 4 hyper-connection streams (rank 32), 3 gated delta-net blocks then 1 gated full-attention block with a QSA indexer (budget 256), 16 experts top-4 with a gated shared expert, PLE trigram embeddings on block 1',
    config: tiny,
  },
  'tiny-qwen4exp-layers': {
    description: 'qwen4exp with attention.recurrent_layers (full attention on blocks 1 and 4 of 5), 2 hyper-connection streams of rank 64, no PLE',
    config: layers,
  },
  'tiny-qwen4exp-qsa': {
    description: 'qwen4exp whose QSA drops positions: the -layers geometry with the indexer keeping the top 8 positions in blocks of 4 plus the tail (11 of a 64-token prompt)',
    config: qsa,
  },
};
