// Presets for RWKV-7 and ARWKV-7 (architectures/rwkv.ts).
import type { Rwkv6Config, Rwkv7Config } from './architectures/rwkv';
import type { Preset } from './presets';

// RWKV-7 in 3 blocks of n_embd 256: 4 WKV heads of 64, LoRA ranks 32 (decay), 32 (iclr), 16 (value
// residual mix), 32 (gate), a channel mix of 512, the RWKV "world" vocabulary (tokenizer.ggml.model
// "rwkv") as real RWKV-6/RWKV-7 files carry it.
const rwkv7Tiny: Rwkv7Config = {
  arch: 'rwkv7', name: 'tiny-rwkv7', nLayers: 3, dim: 256, ff: 512, nHeads: 0, nKvHeads: 0, vocabKind: 'rwkv', tiedEmbeddings: false,
  ctx: 4096, normEps: 1e-5, expertFf: 0, sharedFf: 0, nExperts: 0, nExpertsUsed: 0, vocabSize: 1024, ropeBase: 10000,
  rwkv: { headSize: 64, decayRank: 32, iclrRank: 32, valueRank: 16, gateRank: 32 },
};

// ARWKV-7 (RWKV-7 time mixes in Qwen2.5) in 3 blocks of n_embd 256: 4 WKV heads of 64, RMS norms,
// a SwiGLU FFN of 512, the qwen2 vocabulary; the gate (six lerps) on every block, the group norm on
// blocks 1 and 2 (optional per block in the loader). Gate-less blocks (five lerps): see rwkv.spec.ts.
const arwkv7Tiny: Rwkv7Config = {
  ...rwkv7Tiny, arch: 'arwkv7', name: 'tiny-arwkv7', vocabKind: 'qwen2', normEps: 1e-6,
  rwkv: { headSize: 64, decayRank: 32, iclrRank: 32, valueRank: 16, gateRank: 32 }, gateBlocks: [0, 1, 2], groupNormBlocks: [1, 2],
};

// RWKV-6 in 3 blocks of n_embd 256: 4 WKV heads of 64, the token-shift LoRA of rank 16 (five
// slices), the decay LoRA of rank 32, a channel mix of 512, rescale_every_n_layers 2 (block 1's
// residual halved, blocks 2's outputs written at half scale as the converter does).
const rwkv6Tiny: Rwkv6Config = {
  arch: 'rwkv6', name: 'tiny-rwkv6', nLayers: 3, dim: 256, ff: 512, nHeads: 0, nKvHeads: 0, vocabKind: 'rwkv', tiedEmbeddings: false,
  ctx: 4096, normEps: 1e-5, expertFf: 0, sharedFf: 0, nExperts: 0, nExpertsUsed: 0, vocabSize: 1024, ropeBase: 10000,
  rwkv6: { headSize: 64, mixExtra: 16, decayExtra: 32, rescaleEvery: 2 },
};

// RWKV-6-Qwen2 (QRWKV6) in 3 blocks of n_embd 256: 4 WKV heads of 64 over k/v of 2 heads (GQA),
// r/k/v biases, gated linear attention (no time_first), a SwiGLU FFN of 512, the qwen2 vocabulary.
const rwkv6Qwen2Tiny: Rwkv6Config = { ...rwkv6Tiny, arch: 'rwkv6qwen2', name: 'tiny-rwkv6qwen2', vocabKind: 'qwen2', normEps: 1e-6, rwkv6: { ...rwkv6Tiny.rwkv6, rescaleEvery: 0 }, kvHeads: 2, qkvBias: true };

export const RWKV_PRESETS: Record<string, Preset> = {
  'tiny-rwkv7': { description: 'rwkv7 (RWKV-7 Goose style): 3 blocks of time mix (WKV-7 over 4 heads of 64, LoRA decay/iclr/value-mix/gate, group norm) and channel mix (relu^2, 512), LN0, RWKV world vocabulary', config: rwkv7Tiny },
  'tiny-arwkv7': { description: 'arwkv7 (ARWKV-7 style): 3 blocks of RWKV-7 time mix (4 heads of 64, gated; group norm on blocks 1 and 2) and a SwiGLU FFN of 512, RMS norms, qwen2 vocabulary', config: arwkv7Tiny },
  'tiny-rwkv6': { description: 'rwkv6 (RWKV-6 Finch style): 3 blocks of time mix (data-dependent lerps, LoRA decay, WKV-6 over 4 heads of 64 with time_first, group norm, SiLU gate) and channel mix (relu^2 512, receptance gate), LN0, rescale every 2 blocks, RWKV world vocabulary', config: rwkv6Tiny },
  'tiny-rwkv6qwen2': { description: 'rwkv6qwen2 (QRWKV6 style): 3 blocks of RWKV-6 time mix (gated linear attention over 4 heads of 64, k/v of 2 heads, r/k/v biases) and a SwiGLU FFN of 512, RMS norms, qwen2 vocabulary', config: rwkv6Qwen2Tiny },
};
