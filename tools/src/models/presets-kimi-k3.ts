// Presets for kimi-k3 (Moonshot Kimi-K3 2.8T-A50B; architectures/kimi-k3.ts).
import type { KimiK3Config } from './architectures/kimi-k3';
import type { Preset } from './presets';

// Kimi-K3 style, scaled down: 5 blocks K K M K M (K: KDA with a full-rank gate and the gate lower
// bound -5; M: NoPE MLA with a q LoRA of 64 and the sigmoid output gate), 4 heads; KDA heads of 64
// with 4-tap convolutions; MLA over a latent of 128 (per-head keys 64 + a shared part of 32, values
// 64); residual attention banking every 2nd block's input (blocks 0, 2, 4); 1 dense situ block of
// 512, then 16 sigmoid + bias experts top-4 of 128 in a latent space of 128 (ffn_routed_down / _up
// around them, ffn_routed_norm on their sum), renormalized and scaled by 2.5, plus one shared expert
// of 128 at n_embd; situ beta 2 and linear beta 3 (both tanh bounds reached by the activations).
// Untied head. n_embd 256.
const kimiK3: KimiK3Config = {
  arch: 'kimi-k3', name: 'tiny-kimi-k3', nLayers: 5, dim: 256, ff: 512, nHeads: 4, nKvHeads: 1, nExperts: 16, nExpertsUsed: 4, expertFf: 128, sharedFf: 0,
  vocabSize: 1024, vocabKind: 'llama3', ctx: 4096, ropeBase: 10000, normEps: 1e-5, tiedEmbeddings: false,
  kda: { headDim: 64, convKernel: 4, lowerBound: -5 },
  mla: { kvLora: 128, qkNope: 64, qkRope: 32, vHead: 64, qLora: 64, outGate: true },
  attnLayers: [2, 4], nDense: 1, nShared: 1, wScale: 2.5, normW: true,
  latent: 128, routedNorm: true, resBlock: 2, situBeta: 2, situLinearBeta: 3,
};
// -plain: every optional part off, as llama.cpp's loader also takes it: no residual attention
// (attn_res.block_size 0), experts at n_embd (no expert_latent_length), no gate lower bound
// (softplus decay, as kimi-linear), attn_q without LoRA, no MLA output gate, situ without the
// linear beta (situ_linear_beta 0), weights not renormalized; 4 blocks K M K M, resBlock 0.
const kimiK3Plain: KimiK3Config = {
  ...kimiK3, name: 'tiny-kimi-k3-plain', nLayers: 4, attnLayers: [1, 3],
  kda: { headDim: 64, convKernel: 4 },
  mla: { kvLora: 128, qkNope: 64, qkRope: 32, vHead: 64, outGate: false },
  normW: false, latent: 0, routedNorm: false, resBlock: 0, situLinearBeta: 0,
};
// -res3: residual attention every 3rd block over 7 blocks (banks 0, 3, 6: the head mixes 3 banked
// inputs), latent experts without ffn_routed_norm, no shared expert.
const kimiK3Res3: KimiK3Config = {
  ...kimiK3, name: 'tiny-kimi-k3-res3', nLayers: 7, attnLayers: [3, 6], resBlock: 3, routedNorm: false, nShared: 0,
};

export const KIMI_K3_PRESETS: Record<string, Preset> = {
  'tiny-kimi-k3': {
    description: 'kimi-k3 (Kimi-K3 style): KDA (full-rank gate, gate lower bound) and NoPE MLA (q LoRA, output gate) blocks, residual attention every 2nd block, situ FFNs, 16 latent sigmoid + bias experts top-4 and a shared expert',
    config: kimiK3,
  },
  'tiny-kimi-k3-plain': {
    description: 'tiny-kimi-k3 with every optional part off: no residual attention, experts at n_embd, softplus KDA decay, attn_q, no MLA gate, situ without linear beta',
    config: kimiK3Plain,
  },
  'tiny-kimi-k3-res3': {
    description: 'tiny-kimi-k3 over 7 blocks with residual attention every 3rd block, latent experts without ffn_routed_norm and no shared expert',
    config: kimiK3Res3,
  },
};
