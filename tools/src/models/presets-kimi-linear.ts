// Presets for kimi-linear (Moonshot Kimi-Linear-48B-A3B; architectures/kimi-linear.ts).
import type { KimiLinearConfig } from './architectures/kimi-linear';
import type { Preset } from './presets';

// Kimi-Linear-48B-A3B style, scaled down: 4 blocks K M K M (K: KDA, M: MLA without RoPE; the real
// 27 repeat K K K M), 4 heads; KDA heads of 64 (d_inner 256, the real 32 x 128) with 4-tap
// convolutions; MLA over a latent of 128 with per-head keys of 64 + a shared part of 32 and values
// of 64 (the real 512, 128 + 64, 128); 1 dense SwiGLU block of 512, then 16 sigmoid + bias experts
// top-4 of 128 (the real 256 top-8 of 1024), renormalized and scaled by 2.446 (routed_scaling_factor),
// plus one shared expert of 128. Untied head. n_embd 256, so K-quants apply to the matrices that
// read it (ssm_f_b / ssm_g_b rows of 64 take the fallbacks).
const kimiLinear: KimiLinearConfig = {
  arch: 'kimi-linear', name: 'tiny-kimi-linear', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 1, nExperts: 16, nExpertsUsed: 4, expertFf: 128, sharedFf: 0,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 10000, normEps: 1e-5, tiedEmbeddings: false,
  kda: { headDim: 64, convKernel: 4 },
  mla: { kvLora: 128, qkNope: 64, qkRope: 32, vHead: 64, layout: 'split' },
  attnLayers: [1, 3], nDense: 1, nShared: 1, wScale: 2.446,
};
// The older layouts llama.cpp's loader also takes. -fused: one fused attn_qkv, 3-D convolution
// taps and a 2-D ssm_a (llama.cpp's parity list). -kvb: tiny-kimi-linear with its MLA through one
// attn_kv_b run without the MLA cache (per-head key and value lengths, every head cached), that
// attn_kv_b the fold of tiny-kimi-linear's attn_k_b / attn_v_b: with the same seed every tensor is
// the same draw, so the two files are one model (tools/src/parity checks kail gives both the same
// logits; llama.cpp's graph for such files pairs the query's and key's halves in different orders).
const kimiLinearFused: KimiLinearConfig = { ...kimiLinear, name: 'tiny-kimi-linear-fused', kda: { ...kimiLinear.kda, fusedQkv: true, squeezed: true } };
const kimiLinearKvb: KimiLinearConfig = { ...kimiLinear, name: 'tiny-kimi-linear-kvb', mla: { ...kimiLinear.mla, layout: 'kv_b' } };

export const KIMI_LINEAR_PRESETS: Record<string, Preset> = {
  'tiny-kimi-linear': {
    description: 'kimi-linear (Kimi-Linear-48B-A3B style): KDA blocks (4 heads of 64, per-channel gates, separate q/k/v convolutions) and NoPE MLA blocks (split attn_k_b/attn_v_b), 1 dense block, 16 sigmoid + bias experts top-4 and a shared expert',
    config: kimiLinear,
  },
  'tiny-kimi-linear-fused': {
    description: 'tiny-kimi-linear with a fused attn_qkv, 3-D convolution taps and a 2-D ssm_a (older or re-quantized files)',
    config: kimiLinearFused,
  },
  'tiny-kimi-linear-kvb': {
    description: 'tiny-kimi-linear with its MLA through one attn_kv_b (no MLA cache), the fold of tiny-kimi-linear\'s attn_k_b/attn_v_b: the same model for the same seed',
    config: kimiLinearKvb,
  },
};
