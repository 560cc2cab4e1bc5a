// Presets for the dense decoders of architectures/llama-dense.ts (olmo2, seed_oss, smollm3,
// exaone4, ernie4_5, hunyuan-dense, glm4). n_embd 256 and FFN 512 (K-quants apply without
// fallbacks), 4 blocks, 4 query heads of 64 over 2 KV heads, Llama 3 byte-level vocabulary (1024);
// tiny-exaone4-swa has the 64 blocks llama.cpp's exaone4 loader needs for windows, at n_embd 64.
// Each one exercises what its loader reads beyond Llama's block (see llama-dense.ts).
// Measured against llama.cpp (node-llama-cpp's CPU build, F32 KV, flash attention off, 64 tokens,
// seed 7): F32 NMSE 4e-14 to 2e-13 (tiny-exaone4-swa 4.1e-13: 64 post-normed blocks); Q4_K_M
// kail 4.5e-5 to 3.2e-4 against llama.cpp's own spread (F16 KV, flash attention) of 1.4e-4 to
// 9.2e-4. The same weights read another way, against each file (kail): tiny-olmo2-swa with a
// window of 4096 6.9e-1; tiny-exaone4-swa window 4096 6.1e-1, every block sliding 3.9e-1 (tied,
// its 64 blocks buried the embedding: llama.cpp's Q8_0 spread 2.5e-3; untied 6.2e-4);
// tiny-hunyuan-dense without rope.scaling.alpha 1.2e-2; tiny-glm4 rotating the whole head 3.5e-1.
import type { DenseFamilyConfig } from './architectures/llama-dense';
import type { Preset } from './presets';

const base = {
  nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-5, ropeBase: 10000,
  tiedEmbeddings: true, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const olmo2: DenseFamilyConfig = { ...base, arch: 'olmo2', name: 'tiny-olmo2', tiedEmbeddings: false, normEps: 1e-6, ropeBase: 500000 };
const olmo2Swa: DenseFamilyConfig = { ...olmo2, name: 'tiny-olmo2-swa', window: 8 };
const seedOss: DenseFamilyConfig = { ...base, arch: 'seed_oss', name: 'tiny-seed-oss', headDim: 48, qkvBias: true, ropeBase: 1e7 };
const smollm3: DenseFamilyConfig = { ...base, arch: 'smollm3', name: 'tiny-smollm3', ropeBase: 5e6 };
const exaone4: DenseFamilyConfig = { ...base, arch: 'exaone4', name: 'tiny-exaone4', tiedEmbeddings: false, ropeBase: 1e6 };
const exaone4Swa: DenseFamilyConfig = { ...base, arch: 'exaone4', name: 'tiny-exaone4-swa', nLayers: 64, dim: 64, ff: 64, window: 8, ropeBase: 1e6, tiedEmbeddings: false };
const ernie45: DenseFamilyConfig = { ...base, arch: 'ernie4_5', name: 'tiny-ernie4_5', attnOutBias: true, ropeBase: 500000 };
const hunyuanDense: DenseFamilyConfig = { ...base, arch: 'hunyuan-dense', name: 'tiny-hunyuan-dense', ropeAlpha: 1000, tiedEmbeddings: false };
// Apertus: raw xIELU parameters of their own per block (softplus(0.8 raw) = 1.17; the negative
// branch's slope alpha_n' = beta + softplus(alpha_n)), eps -1e-6 as Apertus ships.
const apertus: DenseFamilyConfig = {
  ...base, arch: 'apertus', name: 'tiny-apertus', tiedEmbeddings: false, attnOutBias: true, ropeBase: 12e6,
  xielu: { alphaN: [0.8, 0.2, -0.5, 1.5], alphaP: [0.8, -0.6, 0.3, 1.2], beta: [0.5, 0.4, 0.6, 0.5], eps: [-1e-6, -1e-6, -1e-3, -1e-6] },
};
const glm4: DenseFamilyConfig = { ...base, arch: 'glm4', name: 'tiny-glm4', ropeDims: 32, qkvBias: true };

const glm4Mrope: DenseFamilyConfig = { ...glm4, name: 'tiny-glm4-mrope', ropeSections: [8, 4, 4, 0] };

export const LLAMA_DENSE_PRESETS: Record<string, Preset> = {
  'tiny-olmo2': { description: 'olmo2 (OLMo 2): post norms only, q/k RMS norms over the whole projections, NeoX RoPE, untied head', config: olmo2 },
  'tiny-olmo2-swa': { description: 'tiny-olmo2 with attention.sliding_window 8 (OLMo 3): blocks 0-2 slide (default period 4) and rotate unscaled, block 3 full', config: olmo2Swa },
  'tiny-seed-oss': { description: 'seed_oss (Seed-OSS): Llama block, FFN norm named post_attention_norm, heads of 48 (attention 192 wide), q/k/v biases, NeoX RoPE', config: seedOss },
  'tiny-smollm3': { description: 'smollm3 (SmolLM3): Llama block, RoPE over adjacent pairs, block 3 NoPE (every 4th)', config: smollm3 },
  'tiny-exaone4': { description: 'exaone4 (EXAONE 4.0, 1.2B rule): post norms only, per-head q/k norms, NeoX RoPE in every block, untied head', config: exaone4 },
  'tiny-exaone4-swa': { description: 'exaone4 with 64 blocks (32B rule): window 8 on 3 blocks of every 4 with RoPE, the 4th full and NoPE; n_embd 64, untied head', config: exaone4Swa },
  'tiny-ernie4_5': { description: 'ernie4_5 (ERNIE 4.5 dense): Llama block, RoPE over adjacent pairs, an attn_output.bias the graph ignores', config: ernie45 },
  'tiny-hunyuan-dense': { description: 'hunyuan-dense: per-head q/k norms after NeoX RoPE, rope.scaling.alpha 1000 (base x alpha^(64/62)), untied head', config: hunyuanDense },
  'tiny-apertus': { description: 'apertus (Apertus): per-head q/k norms before NeoX RoPE, attn_output.bias, ungated FFN through xIELU with raw parameters of their own per block (FLOAT32 arrays), untied head', config: apertus },
  'tiny-glm4-mrope': { description: 'tiny-glm4 with rope.dimension_sections [8, 4, 4, 0] (GLM-4.1V text model): M-RoPE, which on text tokens rotates NeoX-style pairs', config: glm4Mrope },
  'tiny-glm4': { description: 'glm4 (GLM-4 dense): sandwich norms on attention and FFN, fused gate|up, RoPE over adjacent pairs on 32 of 64 dimensions, q/k/v biases', config: glm4 },
};
