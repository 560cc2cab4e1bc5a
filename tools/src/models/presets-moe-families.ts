// Presets for deepseek2 (MLA), glm4moe, olmoe and gpt-oss. tiny-*: for parity tests (two MLA layouts each
// for a V2-Lite-style and a V3-style configuration); bench-*: real shapes with random weights.
import type { ArcticConfig } from './architectures/arctic';
import type { DbrxConfig } from './architectures/dbrx';
import type { Deepseek2Config, Deepseek2OcrConfig } from './architectures/deepseek2';
import type { GemmaConfig } from './architectures/gemma';
import type { Gemma4Config } from './architectures/gemma4';
import type { Gemma4AssistantConfig } from './architectures/gemma4-assistant';
import type { Glm4MoeConfig } from './architectures/glm4moe';
import type { GptOssConfig } from './architectures/gpt-oss';
import type { GraniteConfig, GraniteHybridConfig, GraniteSwaConfig } from './architectures/granite';
import type { GrokConfig } from './architectures/grok';
import type { JambaConfig } from './architectures/jamba';
import type { Mimo2Config } from './architectures/mimo2';
import type { Minimax01Config } from './architectures/minimax01';
import type { MinimaxM3Config } from './architectures/minimax-m3';
import type { Mistral3Config } from './architectures/mistral3';
import type { NemotronHConfig } from './architectures/nemotron-h';
import type { Phi3Config } from './architectures/phi3';
import type { Qwen35Config } from './architectures/qwen35';
import type { Step35Config } from './architectures/step35';
import type { Lfm2Config } from './architectures/lfm2';
import type { MapleConfig, MellumConfig } from './architectures/mellum-maple';
import type { AfmoeConfig, BailingMoe2Config, DeepseekConfig, Ernie45MoeConfig, ExaoneMoeConfig, HyV3Config, Llama4Config, MinimaxM2Config, SmallThinkerConfig } from './architectures/llama-moe';
import type { Preset } from './presets';

const base = { ctx: 4096, normEps: 1e-6, tiedEmbeddings: false, sharedFf: 0, vocabKind: 'llama3' as const, vocabSize: 1024 };

// V2-Lite style: no q LoRA, softmax routing without renormalization, 2 shared experts, YaRN with
// mscale_all_dim 0.707 (factor 40 over 4096 positions, as the real model).
const v2lite = (layout: 'kv_b' | 'split'): Deepseek2Config => ({
  ...base, arch: 'deepseek2', name: `tiny-deepseek2-lite${layout === 'split' ? '-split' : ''}`, nLayers: 3, dim: 256, ff: 512,
  nHeads: 4, nKvHeads: 4, nExperts: 16, nExpertsUsed: 4, expertFf: 256, ropeBase: 10000, ctx: 163840,
  mla: { qLora: 0, kvLora: 256, qkNope: 64, qkRope: 32, vHead: 64, layout },
  moe: { nDense: 1, nShared: 2, gating: 'softmax', probsBias: false, nGroup: 0, nGroupUsed: 0, normW: false, wScale: 1 },
  yarn: { factor: 40, origCtx: 4096, logMul: 0.0707 },
});

// V3 style: q LoRA, sigmoid routing with exp_probs_b, 4 expert groups of which 2 are used,
// renormalized then scaled by 2.5, one shared expert, YaRN factor 40 with mscale_all_dim 1.
const v3 = (layout: 'kv_b' | 'split'): Deepseek2Config => ({
  ...base, arch: 'deepseek2', name: `tiny-deepseek3${layout === 'kv_b' ? '-kvb' : ''}`, nLayers: 3, dim: 256, ff: 512,
  nHeads: 4, nKvHeads: 4, nExperts: 16, nExpertsUsed: 4, expertFf: 256, ropeBase: 10000, ctx: 163840,
  mla: { qLora: 256, kvLora: 256, qkNope: 64, qkRope: 32, vHead: 64, layout },
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 4, nGroupUsed: 2, normW: true, wScale: 2.5 },
  yarn: { factor: 40, origCtx: 4096, logMul: 0.1 },
});

const glm = (qkNorm: boolean): Glm4MoeConfig => ({
  ...base, arch: 'glm4moe', name: `tiny-glm4moe${qkNorm ? '-qknorm' : ''}`, nextn: qkNorm ? 1 : 0, nLayers: 3, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2,
  headDim: 128, ropeDims: 64, nExperts: 16, nExpertsUsed: 4, expertFf: 256, ropeBase: 1e6, qkNorm,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2.5 },
});

// The Llama-shaped decoders with DeepSeek-style routed blocks (architectures/llama-moe.ts).
const tinyMoe = { ...base, nLayers: 3, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, nExperts: 16, nExpertsUsed: 4, expertFf: 128, ropeBase: 10000 };
const deepseekMoe: DeepseekConfig = {
  ...tinyMoe, arch: 'deepseek', name: 'tiny-deepseek-moe', tiedEmbeddings: true,
  moe: { nDense: 1, nShared: 2, gating: 'softmax', probsBias: false, nGroup: 0, nGroupUsed: 0, normW: false, wScale: 1 },
};
const dots1: DeepseekConfig = {
  ...tinyMoe, arch: 'dots1', name: 'tiny-dots1', nKvHeads: 4, headDim: 64, ropeBase: 1e6,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2.5 },
};
const ernie: Ernie45MoeConfig = {
  ...tinyMoe, arch: 'ernie4_5-moe', name: 'tiny-ernie4_5-moe', sharedFf: 192, moeStep: 1, attnOutBias: true, ropeBase: 500000,
  moe: { nDense: 1, nShared: 2, gating: 'softmax', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 0 },
};
const minimax: MinimaxM2Config = { ...tinyMoe, arch: 'minimax-m2', name: 'tiny-minimax-m2', ff: 128, nLayers: 2, headDim: 64, ropeDims: 32, ropeBase: 5e6 };
// Llama 4: 4 blocks so that the fourth is a NoPE block with full attention and temperature tuning.
const llama4Scout: Llama4Config = { ...tinyMoe, arch: 'llama4', name: 'tiny-llama4', nLayers: 4, nExpertsUsed: 1, moeStep: 1, ropeFreqs: true, ropeBase: 500000 };
const llama4Maverick: Llama4Config = { ...llama4Scout, name: 'tiny-llama4-maverick', nExperts: 128, expertFf: 32, moeStep: 2 };

// Ling-lite style, scaled down: every block routed, 16 softmax experts top-4 renormalized, 2
// shared experts (one ungated expert of 2 x 128), RoPE over adjacent pairs of the whole head.
const lingV1: DeepseekConfig = {
  ...tinyMoe, arch: 'bailingmoe', name: 'tiny-bailingmoe',
  moe: { nDense: 0, nShared: 2, gating: 'softmax', probsBias: false, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 1 },
};
const ling: BailingMoe2Config = {
  ...tinyMoe, arch: 'bailingmoe2', name: 'tiny-bailingmoe2', ropeDims: 32, ropeBase: 600000,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 4, nGroupUsed: 2, normW: true, wScale: 2.5 },
};

// Granite's multipliers: attention 1/head_dim and logits / 6 as Granite 3.0-1B-A400M; embedding 2
// and residual 0.5 instead of its 12 and 0.22, so that with random (unit-scale) embeddings the
// blocks still move the logits.
const graniteScales = { embedding: 2, residual: 0.5, attention: 0.015625, logit: 6 };
const graniteMoe: GraniteConfig = { ...tinyMoe, arch: 'granitemoe', name: 'tiny-granitemoe', ff: 128, sharedFf: 192, nExpertsUsed: 8, scales: graniteScales };
const graniteDense: GraniteConfig = { ...tinyMoe, arch: 'granite', name: 'tiny-granite', nExperts: 0, nExpertsUsed: 0, expertFf: 0, scales: graniteScales };
// granite_swa (Granite 4.1 SWA style): the MoE form with its converter's fused experts and shared
// expert, the layer_types default (block 0 of 4 full, the rest sliding, window 8 of the 64 test
// tokens), the last block NoPE; the dense form with FFN biases, alternate sliding blocks, every block
// RoPE, tied embeddings.
const graniteSwaMoe: GraniteSwaConfig = {
  ...graniteMoe, arch: 'granite_swa', name: 'tiny-granite-swa-moe', nLayers: 4, slide: [false, true, true, true], window: 8, ropeBlocks: [true, true, true, false], fusedExperts: true,
};
const graniteSwaDense: GraniteSwaConfig = { ...graniteDense, arch: 'granite_swa', name: 'tiny-granite-swa', tiedEmbeddings: true, slide: [true, false], window: 8, fusedExperts: false, ffnBias: true };

// deepseek2-ocr (DeepSeek-OCR's language model): deepseek2's FFNs under plain multi-head attention.
// As DeepSeek-OCR: 1 dense block, softmax experts without renormalization or scale, 2 shared. -sig:
// the other routing deepseek2's FFN takes (sigmoid + exp_probs_b in 4 groups of which 2 are used,
// renormalized, x 2.5), no dense block, q/k/v biases, Unlimited-OCR's sliding_window key (metadata
// the decoder ignores). (Tied embeddings make these random models near-tied: llama.cpp's own Q8_0
// spread 1.2e-2 against 1.5e-4 untied, measured; the tied head is granite_swa's dense preset's.)
const ocr: Deepseek2OcrConfig = {
  ...tinyMoe, arch: 'deepseek2-ocr', name: 'tiny-deepseek2-ocr', nKvHeads: 4, ropeBase: 10000,
  moe: { nDense: 1, nShared: 2, gating: 'softmax', probsBias: false, nGroup: 0, nGroupUsed: 0, normW: false, wScale: 0 },
};
const ocrSig: Deepseek2OcrConfig = {
  ...ocr, name: 'tiny-deepseek2-ocr-sig', qkvBias: true, slidingWindow: 16,
  moe: { nDense: 0, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 4, nGroupUsed: 2, normW: true, wScale: 2.5 },
};

// Phi: LongRoPE over a 1024-token context trained at 256 (so a context above 256 takes the long
// factors, one at or below it the short ones), the converter's SWA key (which llama.cpp ignores).
const phiBase = { ...tinyMoe, nExperts: 0, nExpertsUsed: 0, expertFf: 0, ctx: 1024, normEps: 1e-5, vocabKind: 'phi3' as const, longrope: { origCtx: 256 }, slidingWindow: 2047 };
const phi3: Phi3Config = { ...phiBase, arch: 'phi3', name: 'tiny-phi3', ropeDims: 48, fusedQkv: true };
const phimoe: Phi3Config = { ...phiBase, arch: 'phimoe', name: 'tiny-phimoe', ff: 128, nExperts: 16, nExpertsUsed: 2 };
const phi3Mini4k: Phi3Config = { ...phiBase, arch: 'phi3', name: 'tiny-phi3-4k', ctx: 4096, longrope: undefined, tiedEmbeddings: true };

// V3.2 style: V3's blocks with a lightning indexer of 16 heads of 64 keeping 16 positions per
// query, so a 64-token input runs most of its attention sparse.
const v32: Deepseek2Config = { ...v3('split'), arch: 'deepseek32', name: 'tiny-deepseek32', dsa: { nHead: 16, headDim: 64, topK: 16 } };
// GLM-5.2 style: 4 blocks, 2 with their own indexer and 2 sharing the selection before them,
// sigmoid routing written as GLM writes it, no YaRN.
const glmDsa: Deepseek2Config = {
  ...v3('split'), arch: 'glm-dsa', name: 'tiny-glm-dsa', nLayers: 4, yarn: undefined, ropeBase: 1e6,
  dsa: { nHead: 16, headDim: 64, topK: 16, types: [1, 0, 1, 0] },
};

// MiMo-V2-Flash style: keys of 96, values of 64, NeoX RoPE on 32; block 0 dense with full
// attention, blocks 1-3 windowed (8 positions, so 64 tokens pass it) with sinks and their own KV
// heads; value scale 0.707; 16 sigmoid experts top-4 with a selection bias.
const mimo2: Mimo2Config = {
  ...tinyMoe, arch: 'mimo2', name: 'tiny-mimo2', nLayers: 4, nKvHeads: 2, headDim: 96, headDimV: 64, ropeDims: 32, ropeBase: 5e6,
  swaPattern: [0, 1, 1, 1], window: 8, nKvHeadsSwa: 4, valueScale: 0.707, nDense: 1,
};

// K-EXAONE style: 4 blocks, the first 3 windowed (8 positions) with RoPE, the 4th full without;
// 1 dense block, sigmoid + bias experts renormalized and scaled, a shared expert.
const exaone: ExaoneMoeConfig = {
  ...tinyMoe, arch: 'exaone-moe', name: 'tiny-exaone-moe', nLayers: 4, ropeBase: 1e6, window: 8, swa: [true, true, true, false],
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2.5 },
};

// Arcee Trinity style: 4 blocks (the 4th full attention without RoPE, the others windowed over 8
// positions), 1 dense block, sigmoid + bias experts renormalized and scaled, a shared expert.
const trinity: AfmoeConfig = {
  ...tinyMoe, arch: 'afmoe', name: 'tiny-afmoe', nLayers: 4, ropeBase: 1e4, window: 8,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2.826 },
};

// mistral4 (HF model_type mistral4): deepseek2 under its own name, with YaRN of mscale_all_dim 0.707, where llama.cpp's
// deepseek2-only mscale rule does not apply.
const mistral4: Deepseek2Config = { ...v3('split'), arch: 'mistral4', name: 'tiny-mistral4', yarn: { factor: 40, origCtx: 4096, logMul: 0.0707 } };

// Ministral 3 style (dense): YaRN factor 4 over an original context of 16 with its own betas and
// mscale_all_dim 0.7, and the query temperature, whose floor of 16 positions 64 tokens cross 3 times.
const ministral3: Mistral3Config = {
  ...tinyMoe, arch: 'mistral3', name: 'tiny-mistral3', nExperts: 0, nExpertsUsed: 0, expertFf: 0, ropeBase: 1e6, ctx: 64,
  yarn: { factor: 4, origCtx: 16, betaFast: 16, betaSlow: 2, logMul: 0.7 }, tempScale: 0.1,
};

// Hunyuan v3 style: 1 dense block, sigmoid + bias experts renormalized and scaled by 2.5, a shared expert of 192.
const hyV3: HyV3Config = { ...tinyMoe, arch: 'hy_v3', name: 'tiny-hy-v3', ff: 512, expertFf: 128, sharedFf: 192, nDense: 1, ropeBase: 1e6 };

// Qwen3.5-35B-A3B style, scaled down: 4 blocks (0-2 gated delta net, 3 full attention with its
// query gate), heads of 64 rotating a quarter (16) with M-RoPE sections [3, 3, 2, 0] (the real
// [11, 11, 10, 0] over 32 pairs, scaled to 8); linear attention of 2 key heads and 4 value heads
// of 64 (as the real 16/32 of 128: twice the value heads), conv kernel 4; 16 softmax experts top-4
// of 128 and a sigmoid-gated shared expert of 128. Every matrix row is a multiple of 256 except
// ffn_down_exps / ffn_down_shexp (128, as the other tiny MoE presets: K-quants fall back to
// Q5_0 / Q8_0 there). tiny-qwen35: the dense Qwen3.5 (ffn_down rows of 512).
const qwen35moe: Qwen35Config = {
  ...tinyMoe, arch: 'qwen35moe', name: 'tiny-qwen35moe', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, headDim: 64,
  ropeDims: 16, ropeSections: [3, 3, 2, 0], fullAttentionInterval: 4, linearAttn: { kHeads: 2, vHeads: 4, headDim: 64, convKernel: 4 },
  nExperts: 16, nExpertsUsed: 4, expertFf: 128, sharedFf: 128, vocabKind: 'qwen2', vocabSize: 1024, ropeBase: 1e7, normEps: 1e-6,
};
// Qwen3-Next-80B-A3B style: tiny-qwen35moe's trunk with Qwen3-Next's ssm_ba, value heads grouped
// by key head and plain NeoX RoPE; -ssm-in: the older fused ssm_in projection.
const qwen3next: Qwen35Config = { ...qwen35moe, arch: 'qwen3next', name: 'tiny-qwen3next', ropeSections: [] };
const qwen3nextSsmIn: Qwen35Config = { ...qwen3next, name: 'tiny-qwen3next-ssm-in', ssmIn: true };
const qwen35: Qwen35Config = { ...qwen35moe, arch: 'qwen35', name: 'tiny-qwen35', ff: 512, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0 };

// LFM2-8B-A1B style: 4 blocks (convolution, convolution, GQA, convolution; the real one has 6 GQA
// blocks among 24), 3-tap short convolutions, 1 dense block then 16 sigmoid experts top-4 with a
// selection bias; tiny-lfm2: the dense LFM2 (LFM2-1.2B style).
const lfm2moe: Lfm2Config = {
  ...tinyMoe, arch: 'lfm2moe', name: 'tiny-lfm2moe', nLayers: 4, ropeBase: 1e6, attnBlocks: [false, false, true, false], convTaps: 3, nDense: 1, tiedEmbeddings: true,
};
const lfm2: Lfm2Config = { ...lfm2moe, arch: 'lfm2', name: 'tiny-lfm2', nExperts: 0, nExpertsUsed: 0, expertFf: 0, nDense: undefined };

// Nemotron-3-Nano-30B-A3B style: 6 blocks M E * E M E (the real 52 interleave Mamba2, expert and
// attention blocks so), attention of 4 heads of 64 over 2 KV heads without positions, Mamba2 of 8
// heads of 64 (d_inner 512) with 2 groups of state 64 (B and C 2 x 64) and 4-tap convolutions, 16
// sigmoid + bias experts top-4 of 256 (relu² up/down) renormalized and scaled by 2.5, a relu²
// shared expert of 512. tiny-nemotron-h: the dense Nemotron-H (Nemotron-Nano-9B-v2 style), relu²
// FFN blocks of 512 where the experts were.
const nemotronHMoe: NemotronHConfig = {
  ...tinyMoe, arch: 'nemotron_h_moe', name: 'tiny-nemotron-h-moe', nLayers: 6, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, headDim: 64, pattern: 'ME*EME',
  ssm: { convKernel: 4, stateSize: 64, nGroup: 2, nHeads: 8, headDim: 64 }, nExperts: 16, nExpertsUsed: 4, expertFf: 256, sharedFf: 512,
  moe: { normW: true, wScale: 2.5 }, normEps: 1e-5,
};
const nemotronH: NemotronHConfig = { ...nemotronHMoe, arch: 'nemotron_h', name: 'tiny-nemotron-h', pattern: 'M-*-M-', nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, moe: undefined };
// Nemotron 3 Super style latent MoE: tiny-nemotron-h-moe whose routed experts run in a latent
// width of 128 (moe_latent_size; ffn_latent_down 256 -> 128 before them, ffn_latent_up 128 -> 256
// after), the router and the shared expert on the full 256. 128 rather than 256, so that the latent
// differs from n_embd and a mix-up of the two widths fails to load or to match: the rows of 128
// (ffn_up_exps, ffn_latent_up) take the K-quants' fallbacks (Q4_K -> Q5_0, Q6_K -> Q8_0), as
// ffn_down_exps does in the other tiny MoE presets; ffn_down_exps and ffn_latent_down (rows of 256)
// keep their K-quants.
const nemotronHMoeLatent: NemotronHConfig = { ...nemotronHMoe, name: 'tiny-nemotron-h-moe-latent', latent: 128 };
// Nemotron 3 Super style multi-token prediction: tiny-nemotron-h-moe plus its MTP block blk.6
// (nextn.enorm / hnorm / eh_proj, a NoPE attention sub-layer of the trunk's heads, post_attention_norm
// and the trunk's expert layout, nextn.shared_head_norm as a LayerNorm before output).
const nemotronHMoeMtp: NemotronHConfig = { ...nemotronHMoe, name: 'tiny-nemotron-h-moe-mtp', nextn: 1 };

// Nemotron-3-Nano-30B-A3B's published HF config as recalled (not read from a file; llama.cpp's
// nemotron-h.cpp names 52 blocks LLM_TYPE_31B_A3_5B): 52 blocks of hybrid_override_pattern below
// (23 Mamba2, 23 experts, 6 attention), hidden 2688, attention of 32 query heads of 128 over 2 KV
// heads (NoPE), Mamba2 of 64 heads of 64 (d_inner 4096) with 8 groups of state 128 and 4-tap
// convolutions, 128 sigmoid + bias experts top-6 of moe_intermediate_size 1856 (relu²),
// norm_topk_prob with routed_scaling_factor 2.5, a shared expert of 3712, vocabulary 131072,
// context 262144, norm eps 1e-5. Routing balance: moeFfn's router (logits of std ~2 over normed
// inputs) and residual-gain writers, as the other bench-* presets, and exp_probs_b of std 0.002
// instead of 0.05 (see NemotronHConfig: over 2000 tokens at block 1, 0.05 leaves 13 of the 128
// experts unused and gives one 3.6x its share; 0.002 gives 0.6x..1.4x, the unbiased router
// 0.66x..1.3x, and still changes about a fifth of the tokens' choices). --layers N keeps the
// pattern's first N blocks (8: M E M E M * E M).
// 2688, 1856 and 3712 are not multiples of 256: at Q4_K the matrices over those rows fall back to
// Q5_0 (only ssm_out and attn_output, rows of 4096, stay Q4_K), as llama-quant does for the real model.
const nemotron3Nano: NemotronHConfig = {
  ...nemotronHMoe, name: 'bench-nemotron-3-nano-shaped', nLayers: 52, dim: 2688, ff: 1856, nHeads: 32, nKvHeads: 2, headDim: 128,
  pattern: 'MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME', ssm: { convKernel: 4, stateSize: 128, nGroup: 8, nHeads: 64, headDim: 64 },
  nExperts: 128, nExpertsUsed: 6, expertFf: 1856, sharedFf: 3712, moe: { normW: true, wScale: 2.5, biasStd: 0.002 }, vocabSize: 131072, ctx: 262144, normEps: 1e-5,
};

// Granite-4.0-H-Tiny style: 4 blocks (Mamba2, Mamba2, GQA, Mamba2; the real one has 4 GQA blocks
// among 40), NoPE attention of 4 heads of 64 over 2 KV heads, Mamba2 of 8 heads of 64 (d_inner
// 2 x 256) with 1 group of state 64 and 4-tap convolutions, 16 softmax experts top-4 of 256
// renormalized, a shared expert of 512, Granite 4.0's multipliers (the init undoes them, see
// architectures/granite.ts). -dense: Granite-4.0-H-Micro style, a SwiGLU FFN of 512 per block.
const graniteHybrid: GraniteHybridConfig = {
  ...tinyMoe, arch: 'granitehybrid', name: 'tiny-granitehybrid', nLayers: 4, dim: 256, ff: 256, nHeads: 4, nKvHeads: 2, attnBlocks: [false, false, true, false],
  ssm: { convKernel: 4, stateSize: 64, nGroup: 1, nHeads: 8, headDim: 64 }, nExperts: 16, nExpertsUsed: 4, expertFf: 256, sharedFf: 512, normEps: 1e-5,
  scales: { embedding: 12, residual: 0.22, attention: 0.015625, logit: 8 },
};
const graniteHybridDense: GraniteHybridConfig = { ...graniteHybrid, name: 'tiny-granitehybrid-dense', ff: 512, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 512 };

// Jamba 1.5 / 1.7 Mini style in 4 blocks: Mamba-1 + dense FFN, Mamba-1 + experts, NoPE GQA + dense
// FFN, Mamba-1 + experts (the real ones: attention every 8th block from 4, experts every 2nd from
// 1; here attention every 4th from 2), attention of 4 heads of 64 over 2 KV heads, Mamba-1 of
// d_inner 512 (2 x dim) with state 16, 4-tap convolutions and a dt rank of 32 (HF's default would be
// ceil(256 / 16) = 16, but ssm_dt's rows of dt_rank would then fit no 32-block type and fall back to
// F16 in every quantized file; with 32 they take Q8_0 / Q5_0 / Q4_0 as the other presets' narrow
// rows), 16 softmax experts top-2 without renormalization. The experts and the dense FFNs share one
// feed_forward_length of 256 (llama.cpp reads one n_ff for both, as the real models have).
const jamba: JambaConfig = {
  ...base, arch: 'jamba', name: 'tiny-jamba', nLayers: 4, dim: 256, ff: 256, nHeads: 4, nKvHeads: 2, nExperts: 16, nExpertsUsed: 2, expertFf: 256,
  vocabKind: 'spm', ropeBase: 10000, normEps: 1e-6, ssm: { convKernel: 4, stateSize: 16, dtRank: 32 },
  layout: { attnPeriod: 4, attnOffset: 2, expertPeriod: 2, expertOffset: 1 },
};

// Gemma-4-26B-A4B style, scaled down: 6 blocks S S F S S F (S: sliding window of 8, F: full
// attention), 4 query heads; sliding blocks of 2 KV heads of 16, full blocks of 1 KV head of 32
// without attn_v (attention_k_eq_v: V is K's projection), proportional RoPE on the full blocks
// (rope_freqs: 4 of their 16 pairs rotate, base 1e6; the sliding ones base 1e4), a GELU MLP of 96 as
// the shared expert beside 8 softmax experts top-2 of 32 with per-expert output scales, experts
// fused as ffn_gate_up_exps (-split: ffn_gate_exps + ffn_up_exps), tied head, logit soft cap 30.
// n_embd 64 as asked of these presets (not a multiple of 256: K-quants fall back to Q5_0 / Q8_0 on
// every matrix). Gemma's tokenizer is SentencePiece-based: spm vocabulary.
const S = true;
const F = false;
const gemma4Moe: Gemma4Config = {
  ...base, arch: 'gemma4', name: 'tiny-gemma4', nLayers: 6, dim: 64, ff: 96, nHeads: 4, nKvHeads: 2, headDim: 16, headDimFull: 32, nKvHeadsFull: 1,
  swaPattern: [S, S, F, S, S, F], window: 8, ropeBase: 1e6, ropeBaseSwa: 1e4, kEqV: true, fusedGateUp: true, nEmbdPerLayer: 0, sharedKvLayers: 0,
  doubleWideMlp: false, softcap: 30, nExperts: 8, nExpertsUsed: 2, expertFf: 32, tiedEmbeddings: true, vocabKind: 'spm', normEps: 1e-6,
};
// Gemma-4-E2B style (dense), scaled down: 6 blocks S S S F S F with tiny-gemma4's heads but attn_v
// on every block that has a cache, per-layer embeddings of 8 per block, the last 2 blocks sharing
// the caches of blocks 2 (sliding) and 3 (full) with a double-wide MLP (feed_forward_length
// [96 x 4, 192 x 2], use_double_wide_mlp), no experts.
const gemma4E: Gemma4Config = {
  ...gemma4Moe, name: 'tiny-gemma4-e', swaPattern: [S, S, S, F, S, F], kEqV: false, fusedGateUp: false, nEmbdPerLayer: 8, sharedKvLayers: 2, doubleWideMlp: true,
  nExperts: 0, nExpertsUsed: 0, expertFf: 0,
};
// Gemma-4-26B-A4B's published shape: 30 blocks of 5 sliding (window 1024; 16 heads of 256 over 8
// KV heads) then 1 full (16 heads of 512 over 2 KV heads, no attn_v), hidden 2816, a GELU MLP of
// 2112 beside 128 experts top-8 of 704 (fused gate/up), context 262144, vocabulary 32000 as the
// other bench presets (the real one: 262144). Routing balance as the other bench-* presets: router
// logits of std ~2 over its normalized input (see architectures/gemma4.ts) and residual-gain
// writers. --layers N keeps the pattern's first N blocks with the last made full (2: S F). With
// few blocks the stream is mostly the token's own embedding, so through the tied head its own logit
// nears the soft cap (--layers 2, measured: 29.8 of 30, the others std 2); the 30 blocks mix it away
// (a 1024-wide cut: logits within +-9.4, 64 distinct top-1 tokens over 64 positions).
// 2112 and 704 are not multiples of 256: at Q4_K the matrices over those rows (ffn_down,
// ffn_down_exps) fall back to Q5_0, as llama-quant does for the real model.
const gemma4_26bA4b: Gemma4Config = {
  ...gemma4Moe, name: 'bench-gemma4-26b-a4b-shaped', nLayers: 30, dim: 2816, ff: 2112, nHeads: 16, nKvHeads: 8, headDim: 256, headDimFull: 512, nKvHeadsFull: 2,
  swaPattern: Array.from({ length: 30 }, (_, i) => (i + 1) % 6 !== 0), window: 1024, nExperts: 128, nExpertsUsed: 8, expertFf: 704, vocabSize: 32000, ctx: 262144,
};

// Gemma 1 / 2 / 3 (dense), scaled down, n_embd 64 as the Gemma 4 presets (K-quants fall back to
// Q5_0 / Q8_0), spm vocabulary, tied head. tiny-gemma: Gemma-2B style MQA (4 heads over 1 KV head)
// with heads of 32, so the attention width (128) is not n_embd as on the real models.
// tiny-gemma2: even blocks sliding (window 8: 64-token tests pass it), attention / final logit soft
// caps 50 / 30 as Gemma 2 ships. tiny-gemma3: 6 blocks (5 sliding of window 8, then 1 full), q/k
// norms, full blocks with base 1e6 and linear RoPE scaling 8 as Gemma 3 4B and up (sliding: 1e4,
// unscaled), no logit soft cap.
const tinyGemma = { ...base, vocabKind: 'spm' as const, nLayers: 4, dim: 64, ff: 128, nHeads: 4, tiedEmbeddings: true, nExperts: 0, nExpertsUsed: 0, expertFf: 0 };
const gemma1: GemmaConfig = { ...tinyGemma, arch: 'gemma', name: 'tiny-gemma', nKvHeads: 1, headDim: 32, ropeBase: 10000 };
const gemma2: GemmaConfig = { ...tinyGemma, arch: 'gemma2', name: 'tiny-gemma2', nKvHeads: 2, headDim: 16, ropeBase: 10000, window: 8, attnSoftcap: 50, softcap: 30 };
const gemma3: GemmaConfig = { ...tinyGemma, arch: 'gemma3', name: 'tiny-gemma3', nLayers: 6, nKvHeads: 2, headDim: 32, ropeBase: 1e6, window: 8, ropeScale: 8, softcap: 0 };

// SmallThinker-4B-A0.6B style, scaled down: 4 blocks of n_embd 64, 4 heads over 2 KV heads of 16
// (NeoX RoPE everywhere, no window), 8 softmax ReGLU experts top-2 of 32 renormalized, routed from
// each block's input; no shared expert, untied head, Qwen2 tokenizer. -swa: SmallThinker-21B-A3B
// style, 8 blocks with sigmoid routing and attention.sliding_window 4096 (the value llama.cpp forces
// whatever the file says): blocks 0 and 4 full attention without RoPE, the others sliding with it
// (64-token tests stay inside the window, so only the NoPE blocks differ from the plain layout).
// n_embd 64 (not a multiple of 256): K-quants fall back to Q5_0 / Q8_0 on every matrix.
const smallthinker: SmallThinkerConfig = {
  ...base, arch: 'smallthinker', name: 'tiny-smallthinker', nLayers: 4, dim: 64, ff: 32, nHeads: 4, nKvHeads: 2, nExperts: 8, nExpertsUsed: 2, expertFf: 32,
  vocabKind: 'qwen2', ropeBase: 1e6, window: 0, gating: 'softmax',
};
const smallthinkerSwa: SmallThinkerConfig = { ...smallthinker, name: 'tiny-smallthinker-swa', nLayers: 8, window: 4096, gating: 'sigmoid' };
// SmallThinker-21B-A3B's shape as recalled (not checked against its config.json): 52 blocks of
// 2560, 28 heads over 4 KV heads of 128, 64 experts top-6 of 768, sigmoid routing, the sliding
// window; vocabulary 32000 as the other bench presets. --layers N keeps the first N blocks.
const smallthinker21b: SmallThinkerConfig = {
  ...smallthinkerSwa, name: 'bench-smallthinker-21b-a3b-shaped', nLayers: 52, dim: 2560, ff: 768, nHeads: 28, nKvHeads: 4, headDim: 128,
  nExperts: 64, nExpertsUsed: 6, expertFf: 768, vocabSize: 32000, ctx: 16384,
};

// Step-3.5-Flash style, scaled down: 6 blocks F S S S F S (F: full attention, every 4th block from
// 0 as in Step-3.5-Flash's layer_types; S: sliding window of 8, so 64-token tests pass it), heads of
// 16: the full blocks 4 over 2 KV heads rotating half of each head (8 dims) with base 5e6, the
// sliding ones 6 over 2 (different on purpose: q, attn_gate and attn_output widths differ per
// block) rotating all 16 with base 1e4; per-head q/k norms and the head-wise attention gate; 1
// dense block (SwiGLU of 128), then 8 sigmoid + bias experts top-2 of 32 renormalized and scaled by
// 3.0 (the real moe_router_scaling_factor; activations stay O(1), see architectures/step35.ts) with
// an ungated shared expert of 32; untied head, Llama 3 tokenizer. No clamps, no rope_freqs.
// n_embd 64 (not a multiple of 256): K-quants fall back to Q5_0 / Q8_0 on every matrix.
const step35Tiny: Step35Config = {
  ...base, arch: 'step35', name: 'tiny-step35', nLayers: 6, dim: 64, ff: 128, nHeads: 4, nKvHeads: 2, headDim: 16, nHeadsSwa: 6, nKvHeadsSwa: 2,
  window: 8, fullInterval: 4, ropeBase: 5e6, ropeBaseSwa: 1e4, nDense: 1, nExperts: 8, nExpertsUsed: 2, expertFf: 32, sharedFf: 32, wScale: 3, normW: true,
  normEps: 1e-5,
};
// tiny-step35 with per-block SwiGLU clamps and llama3 RoPE factors. swiglu_clamp_exp
// [0, 1, 0, 1, 0.75, 1] and swiglu_clamp_shexp [0, 0, 1, 1, 0.75, 0]: 0 on the dense block 0, each
// kind alone on some routed blocks (1 and 5: experts only, 2: shared expert only) so that a reader
// swapping the two arrays differs. The clamped values come after ffn_norm (up ~ N(0, 1), gate too),
// so a limit of 1 clips about a third of the up values and a tenth of silu(gate) (> 1 for gate >
// 1.28): the clamps change the outputs (the real model's 7 would never be reached by these random
// weights). rope_freqs: factor 8, low 1, high 4 over an original context of 16 (as tiny-mistral3's
// YaRN), which at head 16 and base 5e6 gives the full blocks' 4 pairs (wavelengths 6.3, 297, 1.4e4,
// 6.6e5) the factors [1.74, 8, 8, 8], padded with 1 to 8 entries. Measured in llama.cpp (64 tokens,
// F32 logits NMSE against the same file without rope_freqs): 2.2e-3 at 16, 2.5e-4..2.7e-4 at 64 to
// 512 (where the fastest pair, the only one that turns much within 64 positions, keeps factor 1),
// against a Q8_0-vs-F32 spread of 1.2e-4..8.1e-4 (seeds 1-5, 7); the clamps: 4.4e-2 (experts alone
// 2.1e-2, shared expert alone 2.6e-2).
const step35Clamp: Step35Config = {
  ...step35Tiny, name: 'tiny-step35-clamp', swigluLimit: [0, 1, 0, 1, 0.75, 1], swigluLimitShared: [0, 0, 1, 1, 0.75, 0],
  ropeFreqs: { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, origCtx: 16 },
};
// Step-3.5-Flash's shape as recalled, not checked against config.json: 45 blocks of 4096, heads
// of 128, full blocks (0, 4, 8, ... 44) 64 heads over 8 KV heads, sliding ones 96 over 8 with a
// window of 512, 3 leading dense blocks of 11264, then 288 sigmoid + bias experts top-8 of 1280
// renormalized and scaled by 3.0 with a shared expert of 1280; context 16384 and vocabulary 32000
// as the other bench presets (the real one 128896). llama.cpp's tests/test-gguf-model-data.cpp
// checks ggml-org/Step-3.5-Flash-GGUF for 45 blocks, 4096, feed_forward_length 11264, head
// arrays starting 64 / 8, 288 experts, heads of 128 and 754 tensors: 3 + 3 x 12 + 42 x 17 = 753
// here, the 754th being rope_freqs.weight (llama3 scaling), which this preset leaves out as it
// does the real model's clamps. Every matrix row (4096, 11264, 1280, 8192, 12288) is a multiple of
// 256: Q4_K everywhere. --layers N keeps the first N blocks (at most 3 of them dense).
const step35Flash: Step35Config = {
  ...step35Tiny, name: 'bench-step35-flash-shaped', nLayers: 45, dim: 4096, ff: 11264, nHeads: 64, nKvHeads: 8, headDim: 128, nHeadsSwa: 96, nKvHeadsSwa: 8,
  window: 512, nDense: 3, nExperts: 288, nExpertsUsed: 8, expertFf: 1280, sharedFf: 1280, vocabSize: 32000, ctx: 16384,
  // (exp_probs_b of std 0.002, as bench-nemotron-3-nano-shaped: with 0.05 the bias outweighs the
  // saturated sigmoid scores and each MoE layer used only 44 % of its 288 experts over 64 random
  // tokens, measured at --layers 6.)
  biasStd: 0.002,
};

// Mellum2-12B-A2.5B style, scaled down: 4 blocks of n_embd 64, 4 heads over 2 KV heads of 32
// (attention width 128 > n_embd, key_length / value_length written, as tiny-qwen3moe), per-head
// q/k norms, NeoX RoPE over the whole head (llama.cpp's mellum graph asserts n_rot == head), 8
// softmax SwiGLU experts top-2 of 32 renormalized, no shared expert, untied head (required).
// tiny-mellum: attention.sliding_window 8 (so 64-token tests pass it) with the BOOL pattern
// [true, true, true, false] (blocks 0-2 sliding, 3 full), rope.freq_base 1e6 and
// rope.freq_base_swa 1e4 (distinct, so a reader taking the wrong one differs; llama.cpp's graph
// rotates the sliding blocks with freq_base too and uses freq_base_swa only in the K-shift, see
// architectures/mellum-maple.ts). tiny-mellum-full: no sliding keys, every block full.
// n_embd 64 (not a multiple of 256): K-quants fall back to Q5_0 / Q8_0 on every matrix.
// Measured in llama.cpp (node-llama-cpp's CPU build, flash attention off, F32 KV, 64 tokens,
// seeds 1-3): logits std 1.99..2.02, 57..63 distinct top-1 tokens of 64; F32 vs Q8_0 NMSE
// 1.4e-4..7.8e-4 (-full 3.3e-4..1.3e-3), Q4_K_M 4.7e-3..6.5e-3; tiny-mellum against -full
// (the window) 6.7e-2..7.6e-2; tiny-mellum with rope.freq_base_swa 1e6 or without the key, or
// without the pattern array (llama.cpp's default every-4th-full is the same pattern): identical
// logits (NMSE 0); the pattern [false, true, true, true] instead: 4.3e-2..5.3e-2.
const mellumTiny: MellumConfig = {
  ...base, arch: 'mellum', name: 'tiny-mellum', nLayers: 4, dim: 64, ff: 128, nHeads: 4, nKvHeads: 2, headDim: 32, nExperts: 8, nExpertsUsed: 2, expertFf: 32,
  ropeBase: 1e6, normEps: 1e-6, window: 8, swaPattern: [true, true, true, false], ropeBaseSwa: 1e4,
};
const mellumFull: MellumConfig = { ...mellumTiny, name: 'tiny-mellum-full', window: 0, swaPattern: undefined, ropeBaseSwa: undefined };
// deepgrove maple-preview style, scaled down: tiny-mellum's trunk (4 blocks of 64, 4 heads / 2 KV
// of 32, q/k norms, 8 softmax experts top-2 of 32, untied head) with maple's required window 8 and
// pattern [true, true, true, false]: blocks 0-2 sliding with NeoX RoPE on 16 of the 32 dims
// (rope.dimension_count 16: partial_rotary_factor 0.5) at rope.freq_base_swa 1e4, block 3 full
// attention without RoPE (its base 1e6 then unused: a reader rotating the full block, or the
// sliding ones at 1e6, differs). swiglu_clamp_exp [1, 0.5, 0, 0.75] (FLOAT32 per block; the real
// model's 7 is never reached by random weights): the experts' gate and up pre-activations come out
// of ffn_norm at ~N(0, 1), so 1 clips 32% of the up values and caps 16% of the gates, 0.5 62% and
// 31%, 0.75 45% and 23%; block 2's 0 is no clamp (a reader clamping at 0 zeroes that block's
// experts), and the limits differ per block so a reader taking one scalar differs too.
// Measured in llama.cpp as tiny-mellum (seeds 1-3): logits std 1.99..2.02, 57..63 distinct top-1
// tokens; F32 vs Q8_0 NMSE 1.2e-4..1.5e-4, Q4_K_M 2.9e-3..4.1e-3. Against tiny-maple: no clamps
// (all 0, or all 7) 4.9e-2..5.2e-2; one limit 1 on every block 1.4e-2..1.6e-2; block 2 clamped at
// 1e-5 (a reader clamping at 0) 2.6e-2..2.8e-2; RoPE over the whole head 2.1e-2..2.5e-2;
// freq_base_swa 1e6 (the sliding blocks at the global base) 1.8e-3..2.2e-3 (small: within the
// window of 8 only the fastest pairs turn); rope.freq_base 1e4 instead of 1e6: identical (NMSE 0).
const mapleTiny: MapleConfig = {
  ...mellumTiny, arch: 'maple', name: 'tiny-maple', ropeDims: 16, window: 8, swaPattern: [true, true, true, false], ropeBaseSwa: 1e4,
  swigluLimit: [1, 0.5, 0, 0.75],
};

// Grok-1 style, scaled down: 4 blocks of n_embd 64, 4 heads over 2 KV heads of 16, 8 softmax
// GeGLU experts top-2 as wide as feed_forward_length (64; no expert_feed_forward_length, no dense
// FFN), Grok-1's post-FFN norm name layer_output_norm, rope base 10000, SentencePiece vocabulary,
// tied head (Grok-1's in_out_embed), no final soft cap. Multipliers: embedding_scale 8 = sqrt(64)
// (Grok-1's 78.38 is sqrt(6144): the same rule at this width; the real value over the unit-std
// random embeddings other presets use would put the stream at std ~80) and logit_scale 1/sqrt(3)
// (Grok-1's): the writer draws token_embd at 2 / (sqrt(64) x logit_scale) = 0.43 so the tied head
// gives logits of std ~2, which puts the embedding into the stream at 8 x 0.43 = 3.5 (the post-norm
// gains follow it; architectures/grok.ts). attention.output_scale 0.5 (twice the converter's
// default head^-0.5 = 0.25, so a reader using the usual 1/sqrt(head) is off by 2x) and
// attn_logit_softcapping 5 (Grok-1's 30 would never be reached by random weights): block 0's raw
// scores (q.k x 0.5, no RoPE, 64 tokens, seed 1) have std 2.1 and reach 8.9, 22% of them beyond
// half the cap. Measured in llama.cpp (flash attention off, F32 KV, 64 tokens, seeds 1-5 and 7):
// logits std 2.05, the input token's own logit leading through the tied head (max ~16), F32 vs
// Q8_0 NMSE 2.5e-4..4.0e-3 (median 5.6e-4), Q4_K_M 2.7e-3..5.8e-3; the same file with the cap at
// 1e6 (none): 3.8e-2..5.0e-2 from the capped one.
//
// tiny-grok2, Grok-2 style: tiny-grok's attention with a dense GeGLU FFN of 128 beside the experts
// of 64 (expert_feed_forward_length; the sum x sqrt(2)/2), Grok-2's post-FFN norm name
// post_ffw_norm, untied head, byte-level BPE vocabulary; embedding_scale 8, logit_scale 0.5
// (Grok-2's, as recalled), attention.output_scale 0.375 with cap 4 (block 0's raw scores std 1.6,
// max 6.6, times YaRN's magnitude scale 1 + 0.1 ln 4 on q and k: std ~2.0), final_logit_softcapping
// 8 (logits of std 2.0 reaching 8.3..9.6 come out within +-6.7; cap 5 would squash every top logit to
// ~4.7, cap 10 barely bends them), YaRN factor 4 over an original context of 16 with context
// length 64 (= 4 x 16; the real model: 16 over 8192, as recalled) and the converter's other keys
// (ext_factor 1, attn_factor 1, beta_fast 8, beta_slow 1): at head 16 and base 1e4 every pair but
// the fastest is interpolated (positions / 4) at every position, so 64-token tests exercise it.
// attention.temperature_length 1024 as Grok-2's attn_temperature_len (as recalled; llama.cpp's graph
// does not use it). Measured as tiny-grok: logits std 1.9, 48..61 distinct top-1 tokens of 64,
// F32 vs Q8_0 NMSE 2.8e-4..1.0e-3 (median 4.0e-4), Q4_K_M 5.2e-3..8.3e-3; against the same file
// without each feature: attention cap 5.3e-2..6.8e-2, YaRN 1.0e-1..1.5e-1, dense FFN
// 8.0e-2..1.0e-1, final cap 5.4e-3..5.8e-3.
// n_embd 64 (not a multiple of 256): K-quants fall back to Q5_0 / Q8_0 on every matrix.
const grok1: GrokConfig = {
  ...base, arch: 'grok', name: 'tiny-grok', nLayers: 4, dim: 64, ff: 64, nHeads: 4, nKvHeads: 2, nExperts: 8, nExpertsUsed: 2, expertFf: 0, dense: false,
  vocabKind: 'spm', ctx: 8192, ropeBase: 10000, normEps: 1e-5, tiedEmbeddings: true,
  embeddingScale: 8, logitScale: 0.5773502691896257, attnOutScale: 0.5, attnSoftcap: 5, routerSoftcap: 30, softcap: 0, postFfnNorm: 'layer_output_norm',
};
const grok2: GrokConfig = {
  ...grok1, name: 'tiny-grok2', ff: 128, expertFf: 64, dense: true, vocabKind: 'llama3', ctx: 64, tiedEmbeddings: false,
  embeddingScale: 8, logitScale: 0.5, attnOutScale: 0.375, attnSoftcap: 4, softcap: 8, postFfnNorm: 'post_ffw_norm',
  yarn: { factor: 4, origCtx: 16, extFactor: 1, attnFactor: 1, betaFast: 8, betaSlow: 1 }, attnTempLength: 1024,
};
// Grok-2's shape as recalled, not checked against config.json: 64 blocks of 8192, 64 heads over 8
// KV heads of 128, a dense GeGLU FFN of 32768 beside 8 experts top-2 of 16384, rope base 208533496
// with YaRN factor 16 over 8192 (HF rope_type "original"), embedding_multiplier_scale 90.51
// (sqrt(8192)), output_multiplier_scale 0.5, attn_output_multiplier 1/sqrt(128), soft caps 30
// (attention, router) and 50 (final), attn_temperature_len 1024; context 16384 and vocabulary
// 32000 as the other bench presets (the real model's, as recalled: 131072 each). 3 + 64 x 15 =
// 963 tensors, 267.9B parameters (~269.5B with the real vocabulary). The init undoes the
// multipliers (architectures/grok.ts): a 2-block cut to n_embd 512 gives logits of std 2.0 in
// llama.cpp. Every matrix row (8192, 32768, 16384) is a multiple of 256: Q4_K everywhere. --layers
// N keeps the first N blocks.
const grok2Bench: GrokConfig = {
  ...grok2, name: 'bench-grok2-shaped', nLayers: 64, dim: 8192, ff: 32768, expertFf: 16384, nHeads: 64, nKvHeads: 8, headDim: 128, vocabSize: 32000, ctx: 16384,
  ropeBase: 208533496, embeddingScale: 90.50966799187809, logitScale: 0.5, attnOutScale: 0.08838834764831845, attnSoftcap: 30, softcap: 50,
  yarn: { factor: 16, origCtx: 8192, extFactor: 1, attnFactor: 1, betaFast: 8, betaSlow: 1 },
};

// DBRX style, scaled down: 4 blocks of n_embd 64, 4 heads over 2 KV heads of 16 (fused attn_qkv of
// 128 rows), 16 softmax SwiGLU experts top-4 of 32 (feed_forward_length), LayerNorms with eps 1e-5
// (the converter's constant), rope base 500000 (DBRX's rope_theta), untied head, Llama 3
// byte-level BPE vocabulary (DBRX's tokenizer is tiktoken's cl100k, converted as gpt2 with the dbrx
// pre-tokenizer, whose split regex is llama3's). attention.clamp_kqv 1.5 (DBRX's clip_qkv 8 would
// never be reached by these weights): q, k and v come out of the LayerNorm and attn_qkv at std ~1,
// and the clamp cuts 13-15% of them (block 0 over 64 tokens, seeds 1-5 and 7; 1.0 would cut 32%,
// 2.0 under 5%). Measured in llama.cpp (flash attention off, F32 KV, 64 tokens, seeds 1-5 and 7):
// logits std 1.99..2.04, 56..61 distinct top-1 tokens of 64, F32 vs Q8_0 NMSE 1.1e-4..2.0e-4,
// Q4_K_M 2.8e-3..3.5e-3; the same file with clamp_kqv 1e6 (none; 0 gives the same logits) 8.7e-3..1.0e-2
// from the clamped one (clamp 1.0: 2.2e-2..2.8e-2, 2.0: 2.3e-3..3.0e-3, below Q4_K_M's error).
// n_embd 64 (not a multiple of 256): K-quants fall back to Q5_0 / Q8_0 on every matrix.
const dbrxTiny: DbrxConfig = {
  ...base, arch: 'dbrx', name: 'tiny-dbrx', nLayers: 4, dim: 64, ff: 32, nHeads: 4, nKvHeads: 2, nExperts: 16, nExpertsUsed: 4, expertFf: 0,
  ropeBase: 500000, normEps: 1e-5, clampKqv: 1.5,
};
// DBRX's shape as recalled, not checked against config.json: 40 blocks of 6144 (d_model), 48 heads
// over 8 KV heads of 128, 16 experts top-4 of 10752 (ffn_hidden_size), clip_qkv 8, rope_theta
// 500000; context 16384 and vocabulary 32000 as the other bench presets (the real ones, as
// recalled: max_seq_len 32768, vocab 100352). 3 + 40 x 8 = 323 tensors, 130.8B parameters (~131.6B
// with the real vocabulary). Every matrix row (6144, 10752) is a multiple of 256: Q4_K everywhere.
// --layers N keeps the first N blocks.
const dbrxBench: DbrxConfig = {
  ...dbrxTiny, name: 'bench-dbrx-shaped', nLayers: 40, dim: 6144, ff: 10752, nHeads: 48, nKvHeads: 8, vocabSize: 32000, ctx: 16384, clampKqv: 8,
};

// Arctic style, scaled down: 4 blocks of n_embd 64, 4 heads over 2 KV heads of 16 (normal RoPE,
// base 10000), a dense SwiGLU MLP of 64 (n_embd, fixed by the loader) on the post-attention stream
// beside 16 softmax SwiGLU experts top-2 of 32 (feed_forward_length) on the block input, RMS eps
// 1e-5, untied head (HF Arctic's lm_head), SentencePiece vocabulary (Arctic's is Llama's
// tokenizer.model). The dense MLP and the experts each write at residualGain / sqrt(2)
// (architectures/arctic.ts). Measured in llama.cpp (flash attention off, F32 KV, 64 tokens, seeds
// 1-3): logits std 1.99..2.03, 59..62 distinct top-1 tokens of 64, F32 vs Q8_0 NMSE 1.6e-4..3.9e-4,
// Q4_K_M 4.3e-3..4.7e-3. n_embd 64 (not a multiple of 256): K-quants fall back to Q5_0 / Q8_0 on
// every matrix.
const arcticTiny: ArcticConfig = {
  ...base, arch: 'arctic', name: 'tiny-arctic', nLayers: 4, dim: 64, ff: 32, nHeads: 4, nKvHeads: 2, nExperts: 16, nExpertsUsed: 2, expertFf: 0,
  vocabKind: 'spm', ropeBase: 10000, normEps: 1e-5,
};
// Snowflake Arctic's shape as recalled, not checked against config.json: 35 blocks of 7168, 56
// heads over 8 KV heads of 128, the dense residual MLP 7168 wide, 128 experts top-2 of 4864
// (intermediate_size), rope_theta 10000, rms_norm_eps 1e-5, max_position_embeddings 4096, untied;
// vocabulary 32000 (the real one's too, as recalled). 3 + 35 x 16 = 563 tensors, 478.6B
// parameters. Every matrix row (7168, 4864) is a multiple of 256: Q4_K everywhere. --layers N keeps
// the first N blocks.
const arcticBench: ArcticConfig = {
  ...arcticTiny, name: 'bench-arctic-shaped', nLayers: 35, dim: 7168, ff: 4864, nHeads: 56, nKvHeads: 8, nExperts: 128, nExpertsUsed: 2, vocabSize: 32000, ctx: 4096,
};

// MiniMax-Text-01 / M1 style in 8 blocks: lightning attention (8 heads of 64 over a 256-wide
// stream, so key_length is written) in blocks 0-6 and softmax GQA (2 KV heads, NeoX RoPE on 32 of
// 64) in block 7, as llama.cpp's default full_attention_interval of 8 picks without a key (the
// converter writes none); 8 softmax experts top-2 of feed_forward_length 128 in every block;
// residual_scale 2 ((2 x 8)^(1/4), as MiniMax's alpha (2 x 80)^(1/4) = 3.56). The variants pick
// the blocks through the two keys llama.cpp reads first: full_attention_interval 2, and
// attention.recurrent_layers (softmax in block 1 only).
const minimax01: Minimax01Config = {
  ...base, arch: 'minimax-01', name: 'tiny-minimax-01', nLayers: 8, dim: 256, ff: 128, nHeads: 8, nKvHeads: 2, headDim: 64, ropeDims: 32,
  nExperts: 8, nExpertsUsed: 2, expertFf: 128, ropeBase: 1e7, normEps: 1e-5, residualScale: 2, layers: 'default',
};
const minimax01Interval: Minimax01Config = { ...minimax01, name: 'tiny-minimax-01-interval', nLayers: 4, residualScale: 8 ** 0.25, layers: { interval: 2 } };
const minimax01Recurrent: Minimax01Config = { ...minimax01Interval, name: 'tiny-minimax-01-recurrent-layers', layers: { recurrent: [true, false, true, true] } };

// MiniMax-M3 in 3 blocks (1 dense, 2 with MSA): 8 heads of 64 over 2 KV heads, NeoX RoPE on 32,
// an indexer head of 64 per KV head; blocks of 4 positions, the top 4 kept, the own block and the
// one before forced in: 64 tokens attend sparsely from position 16 on, each KV group its own blocks.
const minimaxM3: MinimaxM3Config = {
  ...base, arch: 'minimax-m3', name: 'tiny-minimax-m3', nLayers: 3, dim: 256, ff: 256, nHeads: 8, nKvHeads: 2, headDim: 64, ropeDims: 32,
  nExperts: 16, nExpertsUsed: 4, expertFf: 128, ropeBase: 5e6,
  moe: { nDense: 1, nShared: 1, gating: 'sigmoid', probsBias: true, nGroup: 0, nGroupUsed: 0, normW: true, wScale: 2 },
  msa: { nHead: 2, headDim: 64, topK: 4, block: 4, local: 2 },
};
// Every block routed and sparse (llama.cpp's flash attention rounds a dense block's F32 cache to
// F16, its MSA blocks keep F32: this file is the exact reference); blocks of 16, top 2, 1 local:
// sparse from position 32. (Blocks of 8 over 128 tokens: near-ties between blocks flip under
// llama.cpp's F16 cache at 3 positions of 128, 4-5e-2 each, its Q4_K_M spread 1.2e-3; of 16: 2.4e-4.)
const minimaxM3Sparse: MinimaxM3Config = {
  ...minimaxM3, name: 'tiny-minimax-m3-sparse', nLayers: 2, moe: { ...minimaxM3.moe, nDense: 0 }, msa: { nHead: 2, headDim: 64, topK: 2, block: 16, local: 1 },
};

export const MOE_FAMILY_PRESETS: Record<string, Preset> = {
  'tiny-minimax-m3': {
    description: 'minimax-m3 (MiniMax-M3 style): per-head q/k norms, NeoX RoPE on 32 of 64, 1 dense block, swigluoai sigmoid + bias experts (norm, scale 2) and a shared expert, MSA on the routed blocks (indexer head per KV head, blocks of 4, top 4, 2 local)',
    config: minimaxM3,
  },
  'tiny-minimax-m3-sparse': { description: 'minimax-m3 with every block routed and sparse (no dense block), blocks of 16, top 2, 1 local', config: minimaxM3Sparse },
  'tiny-minimax-01': {
    description: 'minimax-01 (MiniMax-Text-01 / M1 style): lightning-attention blocks 0-6 (8 heads of 64, SiLU q|k|v, attn_norm_2, sigmoid gate), softmax GQA block 7 with NeoX RoPE on 32 of 64 (the default interval of 8), 8 softmax experts top-2, residual_scale 2',
    config: minimax01,
  },
  'tiny-minimax-01-interval': { description: 'minimax-01 with full_attention_interval 2 in 4 blocks (softmax in blocks 1 and 3)', config: minimax01Interval },
  'tiny-minimax-01-recurrent-layers': { description: 'minimax-01 with attention.recurrent_layers [1, 0, 1, 1] (softmax in block 1)', config: minimax01Recurrent },
  'tiny-arctic': {
    description: 'arctic (Snowflake Arctic style): 4 heads / 2 KV of 16, a dense SwiGLU MLP of n_embd on the post-attention stream plus 16 softmax SwiGLU experts top-2 of 32 renormalized on the block input (ffn_norm_exps), both added to the residual, untied head, SentencePiece vocabulary',
    config: arcticTiny,
  },
  'bench-arctic-shaped': {
    description: 'Snowflake Arctic shape as recalled (35 x 7168, 56/8 heads x 128, dense MLP 7168 + 128 experts top-2 of 4864), vocab 32000; --layers N keeps the first N blocks',
    config: arcticBench,
  },
  'tiny-dbrx': {
    description: 'dbrx (DBRX style): LayerNorms without bias, fused attn_qkv clamped to +-1.5 (attention.clamp_kqv), 4 heads / 2 KV of 16 with NeoX RoPE, no ffn_norm (attn_output_norm feeds the experts), 16 softmax SwiGLU experts top-4 of 32 renormalized, untied head',
    config: dbrxTiny,
  },
  'bench-dbrx-shaped': {
    description: 'DBRX shape as recalled (40 x 6144, 48/8 heads x 128, fused qkv clamped to +-8, 16 experts top-4 of 10752), vocab 32000; --layers N keeps the first N blocks',
    config: dbrxBench,
  },
  'tiny-grok': {
    description: 'grok (Grok-1 style): 4 heads / 2 KV of 16, attention scaled by attention.output_scale and soft-capped (cap 5), post-attention and post-FFN norms (layer_output_norm), 8 softmax GeGLU experts top-2 of 64 (no dense FFN), embedding / logit multipliers, tied head',
    config: grok1,
  },
  'tiny-grok2': {
    description: 'grok (Grok-2 style): tiny-grok with a dense GeGLU FFN of 128 beside the experts of 64 (sum x sqrt(2)/2), post_ffw_norm, output scale 0.375 with attention cap 4, final logit soft cap 8, YaRN (factor 4 over 16 positions), untied head',
    config: grok2,
  },
  'bench-grok2-shaped': {
    description: 'Grok-2 shape as recalled (64 x 8192, 64/8 heads x 128, dense GeGLU 32768 + 8 experts top-2 of 16384, YaRN 16 over 8192, Grok-2 multipliers and caps 30 / 50), vocab 32000; --layers N keeps the first N blocks',
    config: grok2Bench,
  },
  'tiny-step35': {
    description: 'step35 (Step-3.5-Flash style): full blocks (every 4th from 0, 4 heads / 2 KV, half-head RoPE) and sliding ones (6 heads / 2 KV, window 8), q/k norms, head-wise attention gate, 1 dense block, 8 sigmoid + bias experts top-2 (norm, scale 3) with a shared expert',
    config: step35Tiny,
  },
  'tiny-step35-clamp': {
    description: 'tiny-step35 with per-block SwiGLU clamps on the experts and the shared expert (swiglu_clamp_exp / _shexp, limits 0.75-1) and llama3 rope_freqs for the full blocks',
    config: step35Clamp,
  },
  'bench-step35-flash-shaped': {
    description: 'Step-3.5-Flash shape as recalled (45 x 4096: full blocks 64/8 heads x 128, sliding 96/8 over 512; 3 dense blocks of 11264, then 288 sigmoid experts top-8 of 1280 + a shared one of 1280), vocab 32000; --layers N keeps the first N blocks',
    config: step35Flash,
  },
  'tiny-smallthinker': {
    description: 'smallthinker (SmallThinker-4B-A0.6B style): every block routed by a router over the block input (before attn_norm), 8 softmax ReGLU experts top-2 renormalized, no window',
    config: smallthinker,
  },
  'bench-smallthinker-21b-a3b-shaped': {
    description: 'SmallThinker-21B-A3B shape as recalled (52 x 2560, 28/4 heads of 128, 64 sigmoid ReGLU experts top-6 of 768, routers over the block input, window 4096), vocab 32000',
    config: smallthinker21b,
  },
  'tiny-smallthinker-swa': {
    description: 'tiny-smallthinker in 8 blocks with sigmoid routing and attention.sliding_window (SmallThinker-21B-A3B style): every 4th block from 0 full attention without RoPE, the others sliding',
    config: smallthinkerSwa,
  },
  'tiny-mellum': {
    description: 'mellum (Mellum2-12B-A2.5B style): 4 heads / 2 KV of 32 (width 128 > n_embd 64), q/k norms, blocks 0-2 sliding (window 8, pattern array), rope bases 1e6 / swa 1e4, 8 softmax experts top-2 of 32, untied head',
    config: mellumTiny,
  },
  'tiny-mellum-full': { description: 'tiny-mellum without sliding-window keys: every block full attention', config: mellumFull },
  'tiny-maple': {
    description: 'maple (maple-preview style): tiny-mellum\'s trunk, blocks 0-2 sliding (window 8) with NeoX RoPE on 16 of 32 dims at base 1e4, block 3 full NoPE, experts with per-block SwiGLU clamps [1, 0.5, 0, 0.75] (swiglu_clamp_exp)',
    config: mapleTiny,
  },
  'tiny-gemma': {
    description: 'gemma (Gemma 1, 2B style): MQA 4 heads over 1 KV head of 32 (attention width 128 over n_embd 64), GELU-gated MLP, embedding scaled by sqrt(n_embd), tied head',
    config: gemma1,
  },
  'tiny-gemma2': {
    description: 'gemma2: tiny-gemma\'s block with post-attention / post-FFN norms, 4 heads over 2 KV heads of 16, even blocks sliding (window 8), attention / final logit soft caps 50 / 30',
    config: gemma2,
  },
  'tiny-gemma3': {
    description: 'gemma3: gemma2\'s block with q/k norms and no soft caps, 6 blocks (5 sliding of window 8, 1 full), heads of 32, full blocks base 1e6 with linear RoPE scaling 8, tied head',
    config: gemma3,
  },
  'tiny-gemma4': {
    description: 'gemma4 (Gemma-4-26B-A4B style): sliding blocks (2 KV heads of 16, window 8) and full ones (1 KV head of 32, V = K, proportional RoPE), post norms, a GELU MLP beside 8 softmax experts top-2 (fused gate_up, per-expert scales), tied head, soft cap 30',
    config: gemma4Moe,
  },
  'tiny-gemma4-split': { description: 'tiny-gemma4 with separate ffn_gate_exps / ffn_up_exps', config: { ...gemma4Moe, name: 'tiny-gemma4-split', fusedGateUp: false } as Gemma4Config },
  'tiny-gemma4-e': {
    description: 'gemma4 dense (Gemma-4-E2B style): tiny-gemma4\'s attention with attn_v everywhere, per-layer embeddings of 8, the last 2 blocks reusing earlier KV caches with a double-wide MLP',
    config: gemma4E,
  },
  // A Gemma 4 assistant draft for tiny-gemma4 and tiny-gemma4-e (their last sliding / full caches have
  // tiny-gemma4's heads): 2 blocks S F of width 32 (the target's 64 is embedding_length_out).
  'tiny-gemma4-assistant': {
    description: 'gemma4-assistant draft for tiny-gemma4(-e): 2 blocks (sliding, full) of width 32 attending over the target\'s last sliding and full caches, pre/post projections to the target\'s 64',
    config: { ...gemma4Moe, arch: 'gemma4-assistant', name: 'tiny-gemma4-assistant', nLayers: 2, dim: 32, ff: 64, targetDim: 64, swaPattern: [S, F], nExperts: 0, nExpertsUsed: 0, expertFf: 0 } as unknown as Gemma4AssistantConfig,
  },
  'bench-gemma4-26b-a4b-shaped': {
    description: 'Gemma-4-26B-A4B shape (30 x 2816: 5 sliding blocks of 16/8 heads x 256 then 1 full of 16/2 heads x 512, V = K; GELU MLP 2112 + 128 experts top-8 of 704), vocab 32000; --layers N keeps N blocks, the last full',
    config: gemma4_26bA4b,
  },
  'tiny-jamba': {
    description: 'jamba (Jamba 1.5 / 1.7 Mini style): blocks of Mamba-1 (d_inner 512, state 16, dt rank 32, normed dt/B/C) + dense FFN, Mamba-1 + experts, NoPE GQA + dense FFN, Mamba-1 + experts; 16 softmax SwiGLU experts top-2 sharing feed_forward_length 256 with the dense FFNs',
    config: jamba,
  },
  'tiny-lfm2moe': { description: 'lfm2moe (LFM2-8B-A1B style): gated short-convolution blocks (a recurrent conv state) and a GQA block with q/k norms, 1 dense block, sigmoid + bias experts, token_embd_norm', config: lfm2moe },
  'tiny-lfm2': { description: 'lfm2 (dense LFM2 style): tiny-lfm2moe with SwiGLU FFNs in every block', config: lfm2 },
  'tiny-nemotron-h-moe': {
    description: 'nemotron_h_moe (Nemotron-3-Nano-30B-A3B style): blocks M E * E M E of Mamba2 (8 heads x 64, 2 groups of state 64), NoPE GQA and sigmoid + bias relu² experts (16, top-4, norm + scale 2.5) with a relu² shared expert; attn_norm only',
    config: nemotronHMoe,
  },
  'tiny-nemotron-h-moe-latent': {
    description: 'nemotron_h_moe with a latent MoE (Nemotron 3 Super style): tiny-nemotron-h-moe whose routed experts run in a latent width of 128 between ffn_latent_down and ffn_latent_up (moe_latent_size); router and shared expert full width',
    config: nemotronHMoeLatent,
  },
  'tiny-nemotron-h-moe-mtp': {
    description: 'tiny-nemotron-h-moe with its multi-token-prediction block (Nemotron 3 Super style): blk.6 = nextn.* inputs, NoPE GQA, post_attention_norm, the sigmoid + bias experts with a relu² shared expert, a LayerNorm head norm (block_count 7, nextn_predict_layers 1)',
    config: nemotronHMoeMtp,
  },
  'tiny-nemotron-h': { description: 'nemotron_h (Nemotron-H / Nemotron-Nano-9B-v2 style): tiny-nemotron-h-moe with relu² FFN blocks of 512 (M - * - M -)', config: nemotronH },
  'bench-nemotron-3-nano-shaped': {
    description: 'Nemotron-3-Nano-30B-A3B shape as recalled (52 x 2688: Mamba2 64 heads x 64, 8 groups of state 128; NoPE attention 32/2 heads x 128; 128 sigmoid experts top-6 of ff 1856 + a shared one of 3712), vocab 131072; --layers N keeps the first N blocks',
    config: nemotron3Nano,
  },
  'tiny-granitehybrid': {
    description: 'granitehybrid (Granite-4.0-H-Tiny style): Mamba2 blocks (8 heads x 64, state 64) and a NoPE GQA block, each with softmax SwiGLU experts (16, top-4) and a shared expert, Granite multipliers',
    config: graniteHybrid,
  },
  'tiny-granitehybrid-dense': { description: 'granitehybrid without experts (Granite-4.0-H-Micro style): tiny-granitehybrid with a SwiGLU FFN of 512 per block', config: graniteHybridDense },
  'tiny-qwen35moe': { description: 'qwen35moe (Qwen3.5/3.6-35B-A3B style): 3 gated delta-net blocks then 1 gated full-attention block (q/k norms, M-RoPE on 16 of 64), 16 experts top-4 with a gated shared expert', config: qwen35moe },
  'tiny-qwen35moe-mtp': { description: 'tiny-qwen35moe with its multi-token-prediction block (a gated full-attention block with the MoE FFN after the trunk, nextn.*)', config: { ...qwen35moe, name: 'tiny-qwen35moe-mtp', nextn: 1 } as Qwen35Config },
  'bench-qwen35-35b-a3b-shaped': {
    description: 'Qwen3.5-35B-A3B shape (40 x 2048: 3 gated delta nets of 16/32 heads x 128 then 1 gated attention block of 16/2 heads x 256, repeated; 256 experts top-8 of ff 512 + a shared one of 512), vocab 32000',
    config: {
      ...qwen35moe, name: 'bench-qwen35-35b-a3b-shaped', nLayers: 40, dim: 2048, ff: 512, nHeads: 16, nKvHeads: 2, headDim: 256, ropeDims: 64, ropeSections: [11, 11, 10, 0],
      linearAttn: { kHeads: 16, vHeads: 32, headDim: 128, convKernel: 4 }, nExperts: 256, nExpertsUsed: 8, expertFf: 512, sharedFf: 512, vocabSize: 32000, ctx: 262144,
    } as Qwen35Config,
  },
  'tiny-qwen3next-mtp': { description: 'tiny-qwen3next with its multi-token-prediction block', config: { ...qwen3next, name: 'tiny-qwen3next-mtp', nextn: 1 } as Qwen35Config },
  'tiny-qwen3next': { description: 'qwen3next (Qwen3-Next-80B-A3B style): tiny-qwen35moe with ssm_ba, value heads grouped by key head, NeoX RoPE without sections', config: qwen3next },
  'tiny-qwen3next-ssm-in': { description: "qwen3next with the older fused ssm_in projection (per key head: q, k, its group's values and gates)", config: qwen3nextSsmIn },
  'tiny-qwen35': { description: 'qwen35 (dense Qwen3.5 style): tiny-qwen35moe\'s hybrid trunk (3 delta-net blocks, 1 gated attention block) with a SwiGLU FFN of 512', config: qwen35 },
  'tiny-hy-v3': { description: 'hy_v3 (Hunyuan v3 style): per-head q/k norms, 1 dense block, sigmoid + bias (blk.N.exp_probs_b) experts, an ungated shared expert', config: hyV3 },
  'tiny-mistral3': { description: 'mistral3 (Ministral 3 style, dense): YaRN with its own betas and mscale_all_dim, Llama 4 query temperature', config: ministral3 },
  'tiny-mistral4': { description: 'mistral4 (Mistral MLA MoE): tiny-deepseek3 under its own name, YaRN with mscale_all_dim 0.707', config: mistral4 },
  'tiny-afmoe': { description: 'afmoe (Arcee Trinity style): embedding x sqrt(dim), gated attention with q/k norms, windowed RoPE blocks and a full NoPE one, post norms, sigmoid + bias experts with a shared one', config: trinity },
  'tiny-exaone-moe': { description: 'exaone-moe (K-EXAONE style): per-head q/k norms, 3 windowed RoPE blocks and a full NoPE one, 1 dense block, sigmoid + bias experts with a shared one', config: exaone },
  'tiny-mimo2': { description: 'mimo2 (MiMo-V2-Flash style): wider keys than values, partial RoPE, windowed blocks with sinks and their own KV heads, value scale, sigmoid experts', config: mimo2 },
  'tiny-glm-dsa': { description: 'glm-dsa (GLM-5.2 style): MLA with DSA, blocks 1 and 3 reusing the indexer selection of blocks 0 and 2; sigmoid routing, no YaRN', config: glmDsa },
  'tiny-deepseek32': { description: 'deepseek32 (DeepSeek-V3.2 style): tiny-deepseek3 with DSA, a lightning indexer of 16 heads x 64 keeping the top 16 positions', config: v32 },
  'tiny-phi3': { description: 'phi3 (Phi-4-mini style): fused attn_qkv and gate/up, NeoX RoPE on 48 of 64 dims with LongRoPE tables (1024 positions, 256 original)', config: phi3 },
  'tiny-phi3-4k': { description: 'phi3 (Phi-3-mini-4k style): separate q/k/v, full RoPE without factor tables, tied embeddings', config: phi3Mini4k },
  'tiny-phimoe': { description: 'phimoe (Phi-3.5-MoE style): biased norms, attention and head, 16 experts top-2 renormalized, LongRoPE', config: phimoe },
  'tiny-granitemoe': { description: 'granitemoe (Granite MoE with a shared expert): Granite multipliers, 16 experts top-8 renormalized, an ungated shared expert of 192', config: graniteMoe },
  'tiny-granite': { description: 'granite (Granite 3.x dense): the Llama graph with Granite multipliers', config: graniteDense },
  'tiny-granite-swa-moe': {
    description: 'granite_swa (Granite 4.1 MoE SWA style): tiny-granitemoe in 4 blocks, 3 sliding (window 8) and 1 full, a sink per head, the last block NoPE, fused gate/up experts and shared expert',
    config: graniteSwaMoe,
  },
  'tiny-granite-swa': { description: 'granite_swa dense: tiny-granite with alternate sliding blocks (window 8), a sink per head, FFN biases, tied embeddings', config: graniteSwaDense },
  'tiny-deepseek2-ocr': { description: 'deepseek2-ocr (DeepSeek-OCR language model style): multi-head attention (NeoX RoPE, base 10000), 1 dense block, 16 softmax experts top-4, 2 shared', config: ocr },
  'tiny-deepseek2-ocr-sig': {
    description: 'deepseek2-ocr with sigmoid + bias routing in 4 groups (2 used), renormalized x 2.5, one shared expert, q/k/v biases, a sliding_window key the decoder ignores',
    config: ocrSig,
  },
  'tiny-bailingmoe': {
    description: 'bailingmoe (Ling-lite / Ling-plus style): separate q/k/v with RoPE over adjacent pairs, every block routed (16 softmax experts top-4 renormalized), 2 shared experts',
    config: lingV1,
  },
  'tiny-bailingmoe2': {
    description: 'bailingmoe2 (Ling 2.0 style): fused attn_qkv, per-head q/k norms, NeoX RoPE on 32 of 64 dims, 1 dense block, sigmoid + bias experts in 4 groups (2 used), 1 shared',
    config: ling,
  },
  'tiny-hunyuan-moe': {
    description: 'hunyuan-moe (Hunyuan-A13B style): per-head q/k norms after NeoX RoPE, 16 experts top-4 renormalized, an ungated shared expert of 192',
    config: { ...tinyMoe, arch: 'hunyuan-moe', name: 'tiny-hunyuan-moe', ff: 128, sharedFf: 192, headDim: 64, ropeBase: 11158839.9 },
  },
  'tiny-llama4': {
    description: 'llama4 (Scout style): chunked attention with L2 q/k norms on 3 of 4 blocks, a NoPE block with temperature tuning, llama3 rope_freqs, 16 experts top-1 weighted before the FFN, shared expert',
    config: llama4Scout,
  },
  'tiny-llama4-maverick': {
    description: 'tiny-llama4 with 128 experts (so no q/k norms, as Maverick) routed on every second block, dense blocks between',
    config: llama4Maverick,
  },
  'tiny-deepseek-moe': { description: 'deepseek (DeepSeek-MoE 16B style): 1 dense block, softmax experts, 2 shared, tied embeddings', config: deepseekMoe },
  'tiny-dots1': { description: 'dots1 (dots.llm1 style): per-head q/k norms, NeoX RoPE, 1 dense block, sigmoid + bias experts with norm and scale 2.5, 1 shared', config: dots1 },
  'tiny-ernie4_5-moe': { description: 'ernie4_5-moe (ERNIE-4.5-21B-A3B style): attn_output bias, 1 dense block, softmax + bias experts renormalized, a shared expert of 192', config: ernie },
  'tiny-minimax-m2': { description: 'minimax-m2: q/k norms over the projections, NeoX RoPE on 32 of 64 head dims, sigmoid + bias experts renormalized', config: minimax },
  'tiny-deepseek2-lite': { description: 'deepseek2, V2-Lite style: MLA without q LoRA (attn_kv_b layout), YaRN, softmax experts, 2 shared', config: v2lite('kv_b') },
  'tiny-deepseek2-lite-split': { description: 'tiny-deepseek2-lite with the split attn_k_b/attn_v_b layout', config: v2lite('split') },
  'tiny-deepseek3': { description: 'deepseek2, V3 style: q LoRA, split MLA layout, YaRN, sigmoid + exp_probs_b, 4 groups (2 used), norm + scale', config: v3('split') },
  'tiny-deepseek3-mtp': {
    description: 'tiny-deepseek3 plus one DeepSeek-V3 multi-token-prediction (NextN) block as blk.3 (head and embeddings shared with the trunk)',
    config: { ...v3('split'), name: 'tiny-deepseek3-mtp', nextn: 1 } as Deepseek2Config,
  },
  'tiny-deepseek3-kvb': { description: 'tiny-deepseek3 with the attn_kv_b layout', config: v3('kv_b') },
  'tiny-glm4moe': { description: 'glm4moe: q/k/v biases, partial NeoX RoPE, 1 dense block, sigmoid + bias experts, shared expert', config: glm(false) },
  'tiny-glm4moe-qknorm': { description: 'tiny-glm4moe with per-head q/k norms and one (unwritten) NextN block in block_count, as GLM-4.5 files', config: glm(true) },
  'tiny-olmoe': {
    description: 'olmoe: q/k norms over n_embd, NeoX RoPE, 16 experts top-4 without renormalization',
    config: { ...base, arch: 'olmoe', name: 'tiny-olmoe', nLayers: 2, dim: 256, ff: 256, nHeads: 4, nKvHeads: 4, nExperts: 16, nExpertsUsed: 4, expertFf: 0, ropeBase: 10000 },
  },
  'tiny-gpt-oss': {
    description: 'gpt-oss: q/k/v/o biases, attention sinks, sliding window 8 on even layers, YaRN (factor 32 over 4096), 8 experts top-2 with biases, clamped SwiGLU',
    config: {
      ...base, arch: 'gpt-oss', name: 'tiny-gpt-oss', nLayers: 3, dim: 256, ff: 0, nHeads: 4, nKvHeads: 2, headDim: 64, nExperts: 8, nExpertsUsed: 2,
      expertFf: 256, ropeBase: 150000, normEps: 1e-5, slidingWindow: 8, yarn: { factor: 32, origCtx: 4096 },
    } as GptOssConfig,
  },
  'bench-gpt-oss-20b-shaped': {
    description: 'gpt-oss-20b shape (24 x 2880, 64 heads of 64 over 8 kv heads, window 128, 32 experts top-4 of ff 2880), vocab 32000',
    config: {
      ...base, arch: 'gpt-oss', name: 'bench-gpt-oss-20b-shaped', nLayers: 24, dim: 2880, ff: 0, nHeads: 64, nKvHeads: 8, headDim: 64, nExperts: 32,
      nExpertsUsed: 4, expertFf: 2880, vocabSize: 32000, ropeBase: 150000, normEps: 1e-5, slidingWindow: 128, yarn: { factor: 32, origCtx: 4096 },
    } as GptOssConfig,
  },
  'bench-deepseek-v2-lite-shaped': {
    description: 'DeepSeek-V2-Lite shape (27 x 2048, 64 routed + 2 shared experts top-6 of ff 1408, kv_lora 512, no q LoRA), vocab 32000',
    config: {
      ...v2lite('split'), name: 'bench-deepseek-v2-lite-shaped', nLayers: 27, dim: 2048, ff: 10944, nHeads: 16, nKvHeads: 16, nExperts: 64,
      nExpertsUsed: 6, expertFf: 1408, vocabSize: 32000,
      mla: { qLora: 0, kvLora: 512, qkNope: 128, qkRope: 64, vHead: 128, layout: 'split' },
    } as Deepseek2Config,
  },
};
