// Presets for Cohere's dense decoders: cohere2 (Command R7B / Command A) and command-r (Command R /
// Command R+); architectures/cohere-dense.ts.
import type { Cohere2Config, CommandRConfig } from './architectures/cohere-dense';
import type { Preset } from './presets';

const base = {
  ctx: 4096, normEps: 1e-5, tiedEmbeddings: true, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0,
  vocabSize: 1024, vocabKind: 'llama3' as const,
};

// Command R7B's layout, scaled down: 4 blocks of n_embd 64, 4 heads over 2 KV heads of 16, SwiGLU
// of 128. attention.sliding_window 8 (64-token tests pass it) and NO pattern key, as the converter
// writes Cohere2 files: llama.cpp's default period 4 makes blocks 0-2 sliding (with RoPE) and block
// 3 full without positions (NoPE). logit_scale 0.25 (not 1: a reader that drops it is off by 4x;
// the tied token_embd is at std 2 / (8 x 0.25) = 1, logits of std ~2 after the multiply).
// attention.layer_norm_epsilon 1e-5 (LayerNorms without bias). RoPE base 50000. Llama 3
// byte-level BPE vocabulary (1024). Every matrix row (64, 128) is a multiple of 32: no F16
// fallback; K-quants fall back to Q5_0 / Q8_0 (n_embd 64 is not a multiple of 256).
// Measured in llama.cpp (node-llama-cpp's CPU build, flash attention off, F32 KV, 64 tokens,
// seed 1): logits std 2.05, 64 distinct top-1 tokens of 64 (each the input token itself: the head
// is the input embedding, as in every tied preset), F32 vs Q8_0 NMSE 1.4e-4, Q4_K_M 1.3e-3; the
// same weights with another reading, against this file: window 4096 5.0e-2, every block sliding
// (period 0) 1.6e-2, the dense-first rule [F, S, S, S] 3.9e-2.
const tinyCohere2: Cohere2Config = {
  ...base, arch: 'cohere2', name: 'tiny-cohere2', nLayers: 4, dim: 64, ff: 128, nHeads: 4, nKvHeads: 2,
  window: 8, logitScale: 0.25, ropeBase: 50000,
};

// tiny-cohere2 with an explicit attention.sliding_window_pattern BOOL array unlike the default
// ([S, S, S, F]): [F, S, F, S] (blocks 0 and 2 full and NoPE, 1 and 3 sliding with RoPE), so a
// reader that ignores the array differs; also q/k/v biases (the loader's optional tensors).
// Measured as tiny-cohere2: logits std 2.05, Q8_0 1.3e-4, Q4_K_M 1.2e-3; against this file: no
// pattern key (the default [S, S, S, F]) 5.4e-2, period 2 ([S, F, S, F]) 7.3e-2.
const patternCohere2: Cohere2Config = {
  ...tinyCohere2, name: 'tiny-cohere2-pattern', swaPattern: [false, true, false, true], qkvBias: true,
};

// Command R's layout, scaled down: 4 blocks, every one full attention with RoPE, no q/k norms
// (under 64 blocks), logit_scale 0.0625 (Command R's own value; the tied token_embd at
// 2 / (8 x 0.0625) = 4, the residual writers scaled with it). RoPE base 8e6 (Command R's), eps
// 1e-5. Measured as tiny-cohere2: logits std 2.05, Q8_0 1.3e-4, Q4_K_M 1.2e-3; against this
// file: RoPE base 10000 1.1e-2.
const tinyCommandR: CommandRConfig = {
  ...base, arch: 'command-r', name: 'tiny-command-r', nLayers: 4, dim: 64, ff: 128, nHeads: 4, nKvHeads: 2,
  logitScale: 0.0625, ropeBase: 8e6,
};

// Command R+'s rule: 64 blocks (llama.cpp's threshold), so every block has per-head LayerNorm
// weights on q and k: attn_q_norm [16, 4], attn_k_norm [16, 2], values around 1 (std 0.5), one
// row per head. Small blocks (n_embd 64, SwiGLU of 64) keep the file small (6.7 MB in F32).
// logit_scale 0.8333 (Command R+'s; the tied token_embd at 2 / (8 x 0.8333) = 0.3). RoPE base
// 7.5e7 (Command R+'s). --layers N below 64 drops the q/k norms, as llama.cpp's loader does.
// Measured as tiny-cohere2: logits std 2.05, Q8_0 1.4e-4, Q4_K_M 1.3e-3; against this file: every
// head reading row 0 of the q/k norms 2.0e-2, the q/k norm weights all 1 1.7e-2.
const plusCommandR: CommandRConfig = {
  ...tinyCommandR, name: 'tiny-command-r-plus', nLayers: 64, ff: 64, logitScale: 0.8333, ropeBase: 75e6, qkNormStd: 0.5,
};

// No bench-* shapes.
export const COHERE_DENSE_PRESETS: Record<string, Preset> = {
  'tiny-cohere2': {
    description: 'cohere2 (Command R7B style): parallel blocks (one LayerNorm feeds attention and SwiGLU FFN), 4 heads / 2 KV of 16, window 8 on blocks 0-2 (default period 4, no pattern key) with RoPE, block 3 full NoPE, logit_scale 0.25, tied head',
    config: tinyCohere2,
  },
  'tiny-cohere2-pattern': {
    description: 'tiny-cohere2 with an explicit sliding_window_pattern BOOL array [F, S, F, S] (RoPE on blocks 1 and 3 only) and q/k/v biases',
    config: patternCohere2,
  },
  'tiny-command-r': {
    description: 'command-r (Command R style): parallel blocks, 4 heads / 2 KV of 16, full attention with RoPE everywhere, no q/k norms, logit_scale 0.0625, tied head',
    config: tinyCommandR,
  },
  'tiny-command-r-plus': {
    description: 'command-r with 64 blocks (Command R+ rule): per-head LayerNorm weights attn_q_norm [16, 4] / attn_k_norm [16, 2] (std 0.5 around 1) in every block, n_embd 64, ff 64, logit_scale 0.8333',
    config: plusCommandR,
  },
};
