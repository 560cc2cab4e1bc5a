// Presets for cohere2moe (Cohere's MoE decoder, 49 blocks / 30B-A3B; architectures/cohere2moe.ts).
import type { Cohere2MoeConfig } from './architectures/cohere2moe';
import type { Preset } from './presets';

// The real model's layout, scaled down: 5 blocks of n_embd 64 (one leading dense block, then 4
// routed ones, as 49 = 1 + 48), 4 heads over 2 KV heads of 16. attention.sliding_window 8 (64-token
// tests pass it) and the pattern array the converter writes for a dense-first period-4 layer_types
// (sliding except every 4th block from block 0): [false, true, true, true, false]. Block 0 (full,
// dense lead) therefore rotates with RoPE, blocks 1-3 (sliding) too, and block 4 (full, routed)
// attends without positions (NoPE): a reader that ropes every block, or none of the full ones,
// differs. Only attention.layer_norm_epsilon (eps 1e-5, HF layer_norm_eps): LayerNorms without bias.
// logit_scale 0.25 (not 1: a reader that drops it is off by 4x on every logit; the tied
// token_embd is at std 2 / (8 x 0.25) = 1 so the logits keep std ~2 after the multiply). Dense FFN
// of 128; 8 experts top-2 of 32, softmax routing written as expert_gating_func 1 (not llama.cpp's
// default sigmoid: a reader that ignores the key differs), renormalized (expert_weights_norm true),
// no expert_weights_scale; one shared expert of 32 (expert_shared_count 1, expert_shared_feed_
// forward_length 32 as the converter writes expertFf x count), averaged with the routed mix.
// Separate ffn_gate_exps / ffn_up_exps, tied head (no output.weight), Llama 3 byte-level BPE
// vocabulary (the real tokenizer is a gpt2 BPE too). RoPE base 50000. Every matrix row (64, 128,
// 32) is a multiple of 32: no F16 fallback; n_embd 64 is not a multiple of 256, so K-quants fall
// back to Q5_0 / Q8_0 on every matrix. Measured in llama.cpp (node-llama-cpp's CPU build, flash
// attention off, F32 KV, 64 tokens, seed 1): logits std 2.05, 63 distinct top-1 tokens of 64, F32
// vs Q8_0 NMSE 3.9e-4, Q4_K_M 1.8e-3; the same weights with another reading, against this file:
// sigmoid gating (no key) 8.2e-3, RMSNorms 4.1e-2, window 4096 4.9e-2, every block sliding 3.0e-2,
// block 0 sliding 1.8e-2, expert_weights_norm false 2.6e-3.
const tiny: Cohere2MoeConfig = {
  arch: 'cohere2moe', name: 'tiny-cohere2moe', nLayers: 5, dim: 64, ff: 128, nHeads: 4, nKvHeads: 2, headDim: 16,
  window: 8, logitScale: 0.25, nDense: 1, normKind: 'layer', normEps: 1e-5,
  nExperts: 8, nExpertsUsed: 2, expertFf: 32, nShared: 1, sharedFf: 32, gating: 'softmax', normW: true,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 50000, tiedEmbeddings: true,
};

// tiny-cohere2moe with the other options llama.cpp's loader takes: only
// attention.layer_norm_rms_epsilon (1e-6: RMSNorms, at attn_norm and output_norm), experts fused
// as ffn_gate_up_exps ([64, 64, 8]: gate rows first), no shared expert (no expert_shared_* keys),
// no expert_gating_func key (llama.cpp's default: sigmoid), renormalized and scaled by
// expert_weights_scale 2.5 (the converter writes none; llama.cpp reads it; the routed writer is at
// residualGain / 2.5), q/k/v biases (optional tensors of the loader), untied head (output.weight
// at 2 / (8 x 0.25)). Same blocks, window, pattern and logit_scale. Measured as tiny-cohere2moe:
// logits std 1.99, 62 distinct top-1 tokens of 64, F32 vs Q8_0 NMSE 7.2e-4, Q4_K_M 6.4e-3; against
// this file: expert_weights_scale patched to 1 (a reader that drops the scale) 2.5e-2, LayerNorms
// 4.6e-2, softmax gating 1.4e-2.
const rms: Cohere2MoeConfig = {
  ...tiny, name: 'tiny-cohere2moe-rms', normKind: 'rms', normEps: 1e-6, fusedGateUp: true, nShared: 0, sharedFf: 0,
  gating: undefined, wScale: 2.5, qkvBias: true, tiedEmbeddings: false,
};

// No bench-* shape: llama.cpp's sources name the 49 blocks (30B-A3B) but not n_embd, the heads,
// the expert count / top-k, the expert and dense FFN sizes, the window or the vocabulary.
export const COHERE2MOE_PRESETS: Record<string, Preset> = {
  'tiny-cohere2moe': {
    description: 'cohere2moe (Cohere MoE style): parallel blocks (one LayerNorm feeds attention and FFN, no ffn_norm), 4 heads / 2 KV of 16, RoPE on sliding blocks (window 8, pattern [F,S,S,S,F]) and the dense lead only (block 4 NoPE), 1 dense block, 8 softmax experts top-2 of 32 renormalized + 1 shared (averaged), logit_scale 0.25, tied head',
    config: tiny,
  },
  'tiny-cohere2moe-rms': {
    description: 'tiny-cohere2moe with RMSNorms (layer_norm_rms_epsilon), fused ffn_gate_up_exps, no shared expert, default (sigmoid) gating, expert_weights_scale 2.5, q/k/v biases, untied head',
    config: rms,
  },
};
