// Presets for laguna (Poolside Laguna XS.2 / S.2 / M.1; architectures/laguna.ts).
import type { LagunaConfig } from './architectures/laguna';
import type { Preset } from './presets';

// Laguna-XS.2 style, scaled down: 4 blocks of n_embd 64 with attention.sliding_window 8 (64-token
// tests pass it) and no pattern key, so llama.cpp's default applies: block 0 full, blocks 1-3
// sliding. Heads of 16 over 2 KV heads: the full block 6 query heads, the sliding ones 8 (XS.2's
// 48 / 64 scaled by 1/8, the full blocks with fewer; GQA groups of 3 and 4, so q, attn_gate and
// attn_output widths differ per block), written as the converter's INT32 array [6, 8, 8, 8]. Full
// blocks rotate half of each head (rope.dimension_count 8) at base 500000, the sliding ones the
// whole head (rope.dimension_count_swa 16) at rope.freq_base_swa 10000, as XS.2 (no YaRN here).
// Per-head q/k norms, per-HEAD attn_gate ([64, n_head_il]) under softplus; 1 dense block (SwiGLU of
// 128), then 8 sigmoid + bias experts top-2 of 32, renormalized and scaled by 2.5, plus an ungated
// shared expert of 64 (not the routed 32, as the real model's sizes may differ: a reader that sizes
// the shared expert by expert_feed_forward_length fails to load). exp_probs_b of std 0.1 rather than
// the default 0.05: over random router logits (sigmoid of std-2 logits, 8 experts, top-2) it changes
// about 37% of the top-2 choices (0.05: 21%), so a reader that ignores the selection bias differs
// visibly. Untied head, Llama 3 tokenizer (the converter writes the gpt2 BPE with pre "laguna").
// Every matrix row (64, 96, 128, 32) is a multiple of 32: no F16 fallback; n_embd 64 is not a
// multiple of 256, so K-quants fall back to Q5_0 / Q8_0 on every matrix.
// Measured in llama.cpp (CPU, flash attention off, 64 tokens in one batch, logits NMSE against the
// F32 file of the same seed): logits std 2.0, 58..63 distinct top-1 tokens of 64; Q8_0 3.6e-4..1.4e-3
// and Q4_K_M 5.8e-3..7.4e-3 (seeds 1-3; 3.6e-4..1.4e-3 over seeds 1-5 at Q8_0). Against the same F32
// file with one feature changed (seeds 1-3): window 4096 instead of 8 5.7e-2..6.4e-2, the selection
// bias zeroed 2.0e-2..2.5e-2, rope.dimension_count_swa 8 instead of 16 2.0e-2..2.6e-2, no
// rope.freq_base_swa (sliding blocks at 500000) 3.6e-3..5.1e-3, pattern [F, S, S, F] 4.0e-2, softmax
// gating 2.9e-2; an explicit [F, S, S, S] pattern, or no expert_gating_func key, give the same logits.
const lagunaXs: LagunaConfig = {
  arch: 'laguna', name: 'tiny-laguna', nLayers: 4, dim: 64, ff: 128, nHeads: 6, nHeadsSwa: 8, nKvHeads: 2, headDim: 16,
  window: 8, ropeDims: 8, ropeDimsSwa: 16, ropeBase: 500000, ropeBaseSwa: 10000, gate: 'head',
  nDense: 1, nExperts: 8, nExpertsUsed: 2, expertFf: 32, sharedFf: 64, wScale: 2.5, normW: true, gating: 'sigmoid', biasStd: 0.1,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, normEps: 1e-6, tiedEmbeddings: false,
};

// Laguna-M.1 style, scaled down: 4 blocks, no sliding-window keys at all (every block full
// attention, plain KV cache), uniform heads (4 query heads over 1 KV head of 32; still the
// converter's INT32 array [4, 4, 4, 4]) rotating half of each head (16 dims) at base 500000 with
// YaRN factor 4 over an original context of 16 and context_length 64 (= 4 x 16; at head 32 and base
// 5e5 every pair but the fastest ones is interpolated at every position, so 64-token tests exercise
// it); per-ELEMENT attn_gate ([64, 128]); 2 leading dense blocks of 128 (M.1 has 3 of 70), then 16
// sigmoid + bias experts top-4 of 32 (default bias std 0.05: about 37% of the top-4 choices moved),
// renormalized and scaled by 2.0 (another value than tiny-laguna's), an ungated shared expert of 96;
// tied head (no output.weight: llama.cpp falls back to token_embd).
// Measured as tiny-laguna: logits std 2.0, 59..61 distinct top-1 of 64; Q8_0 1.9e-3..6.2e-3 and
// Q4_K_M 2.2e-2..3.5e-2 (seeds 1-3), higher than tiny-laguna's because of the tied head (the same
// file untied: Q8_0 1.8e-4..5.6e-4 over seeds 1-5: the input embedding then starts the stream at unit
// std rather than at the head's 2/sqrt(n_embd), and the routed blocks weigh less); without the YaRN
// keys 9.0e-2..1.4e-1; a scalar UINT32 head_count, or rope.scaling.yarn_beta_* keys (which
// llama.cpp's laguna loader does not read), give the same logits.
const lagunaM: LagunaConfig = {
  arch: 'laguna', name: 'tiny-laguna-m', nLayers: 4, dim: 64, ff: 128, nHeads: 4, nKvHeads: 1, headDim: 32,
  ropeDims: 16, ropeBase: 500000, yarn: { factor: 4, origCtx: 16 }, gate: 'element',
  nDense: 2, nExperts: 16, nExpertsUsed: 4, expertFf: 32, sharedFf: 96, wScale: 2, normW: true, gating: 'sigmoid',
  vocabSize: 1024, vocabKind: 'llama3', ctx: 64, normEps: 1e-6, tiedEmbeddings: true,
};

// No bench-* shape: llama.cpp's sources name XS.2's 40 blocks (S.2 48, M.1 70), its 48 / 64 query
// heads, head 128 (the full blocks rotate 64 dims at 500000 with YaRN, the sliding ones 128 at 10000)
// and one dense block (M.1: 3), but not n_embd, the KV heads, the expert count / top-k, the expert
// and shared-expert sizes, the dense FFN size, the window or the vocabulary.
export const LAGUNA_PRESETS: Record<string, Preset> = {
  'tiny-laguna': {
    description: 'laguna (Laguna-XS.2 style): block 0 full (6 heads, RoPE on 8 of 16 dims, base 5e5), blocks 1-3 sliding (window 8, default pattern; 8 heads, RoPE on all 16, base 1e4) over 2 KV heads, q/k norms, per-head softplus attention gate, 1 dense block, 8 sigmoid + bias experts top-2 of 32 (norm, scale 2.5) with a shared expert of 64',
    config: lagunaXs,
  },
  'tiny-laguna-m': {
    description: 'laguna (Laguna-M.1 style): every block full attention (no window keys), 4 heads over 1 KV head of 32, RoPE on 16 dims with YaRN (factor 4 over 16), per-element softplus attention gate, 2 dense blocks, 16 sigmoid + bias experts top-4 of 32 (norm, scale 2) with a shared expert of 96, tied head',
    config: lagunaM,
  },
};
