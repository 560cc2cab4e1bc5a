// Named model shapes. tiny-*: seconds to write and to run in llama.cpp, for tests (dims are
// multiples of 256 so every K-quant applies without fallbacks). bench-*: the shapes of real
// models (random weights), for throughput work; use --layers to cut them down.
import type { ModelConfig } from './arch';
import type { Phi3Config } from './architectures/phi3';
import type { Eagle3Config } from './architectures/eagle3';
import type { DflashConfig } from './architectures/dflash';
import { MOE_FAMILY_PRESETS } from './presets-moe-families';
import { GROVEMOE_PRESETS } from './presets-grovemoe';
import { LAGUNA_PRESETS } from './presets-laguna';
import { KIMI_K3_PRESETS } from './presets-kimi-k3';
import { KIMI_LINEAR_PRESETS } from './presets-kimi-linear';
import { BAILINGMOE3_PRESETS } from './presets-bailingmoe3';
import { DOTS3NOTE_PRESETS } from './presets-dots3note';
import { HY_V4_PRESETS } from './presets-hy-v4';
import { DEEPSEEK4_PRESETS } from './presets-deepseek4';
import { QWEN4EXP_PRESETS } from './presets-qwen4exp';
import { COHERE2MOE_PRESETS } from './presets-cohere2moe';
import { COHERE_DENSE_PRESETS } from './presets-cohere-dense';
import { LLAMA_DENSE_PRESETS } from './presets-llama-dense';
import { MISC_DENSE_PRESETS } from './presets-misc-dense';
import { TEXT_VL_PRESETS } from './presets-text-vl';
import { MLA_DENSE_PRESETS } from './presets-mla-dense';
import { JAIS_BITNET_PRESETS } from './presets-jais-bitnet';
import { T5_PRESETS } from './presets-t5';
import { DECI_PRESETS } from './presets-deci';
import { GEMMA3N_PRESETS } from './presets-gemma3n';
import { GRANITE_SWITCH_PRESETS } from './presets-granite-switch';
import { HRM_TEXT_PRESETS } from './presets-hrm-text';
import { SPARK25_PRESETS } from './presets-spark2-5';
import { TALKIE_PRESETS } from './presets-talkie';
import { SSM_PRESETS } from './presets-ssm';
import { PLAMO2_PRESETS } from './presets-plamo2';
import { RWKV_PRESETS } from './presets-rwkv';
import { DIFFUSION_PRESETS } from './presets-diffusion';

export interface Preset {
  description: string;
  config: ModelConfig;
}

const tiny = { ctx: 4096, normEps: 1e-5, tiedEmbeddings: false, expertFf: 0, sharedFf: 0, nExperts: 0, nExpertsUsed: 0 };

// The Qwen3 shapes the tiny qwen3moe/qwen3vlmoe and qwen3/qwen3vl/reranker presets share.
const TINY_QWEN3MOE: ModelConfig = {
  ...tiny, arch: 'qwen3moe', name: 'tiny-qwen3moe', nLayers: 2, dim: 256, ff: 768, nHeads: 4, nKvHeads: 2,
  headDim: 128, nExperts: 16, nExpertsUsed: 4, expertFf: 256, vocabSize: 1024, vocabKind: 'qwen2',
  ropeBase: 1e6, normEps: 1e-6,
};
const TINY_QWEN3: ModelConfig = {
  ...tiny, arch: 'qwen3', name: 'tiny-qwen3', nLayers: 2, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2,
  headDim: 64, nExperts: 0, nExpertsUsed: 0, expertFf: 0, vocabSize: 1024, vocabKind: 'qwen2',
  ropeBase: 1e6, normEps: 1e-6,
};

const TINY_BERT: ModelConfig = {
  ...tiny, arch: 'bert', name: 'tiny-bert', nLayers: 2, dim: 256, ff: 512, nHeads: 4, nKvHeads: 4,
  vocabSize: 1024, vocabKind: 'bert', ctx: 512, ropeBase: 10000, normEps: 1e-12, tiedEmbeddings: true,
};

export const PRESETS: Record<string, Preset> = {
  'tiny-llama': {
    description: 'dense llama, Llama 3 byte-level BPE tokenizer',
    config: {
      ...tiny, arch: 'llama', name: 'tiny-llama', nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2,
      vocabSize: 1024, vocabKind: 'llama3', ropeBase: 500000,
    },
  },
  'tiny-qwen3': {
    description: 'dense Qwen3 (per-head q/k norms, NeoX RoPE), qwen2 byte-level BPE tokenizer: the tiny DFlash drafts\' target',
    config: TINY_QWEN3,
  },
  // DFlash block-diffusion drafts for tiny-qwen3 (same vocabulary and width; the encoder reads its blocks 0 and 1).
  'tiny-dflash': {
    description: "DFlash draft for tiny-qwen3: fc over 2 target layers, 2 Qwen3 blocks over a noise block of 8, the target's token_embd and output",
    config: { ...TINY_QWEN3, arch: 'dflash', name: 'tiny-dflash', nLayers: 2, targetLayers: [0, 1], targetDim: 256, blockSize: 8 } as DflashConfig,
  },
  'tiny-dflash-own': {
    description: 'tiny-dflash with its own token_embd and output, reading target block 1 alone, dflash.attention.causal true, a noise block of 4',
    config: { ...TINY_QWEN3, arch: 'dflash', name: 'tiny-dflash-own', nLayers: 1, targetLayers: [1], targetDim: 256, blockSize: 4, ownEmbeddings: true, causal: true } as DflashConfig,
  },
  'tiny-dflash-d2t': {
    description: "tiny-dflash with its own token_embd and a 512-token draft vocabulary (output over it, d2t into the target's), a noise block of 6",
    config: { ...TINY_QWEN3, arch: 'dflash', name: 'tiny-dflash-d2t', nLayers: 2, targetLayers: [0, 1], targetDim: 256, blockSize: 6, ownEmbeddings: true, draftVocab: 512 } as DflashConfig,
  },
  // EAGLE-3 drafts for tiny-llama (same vocabulary; the encoder reads its blocks 1, 2 and 3).
  'tiny-llama-eagle3': {
    description: 'EAGLE-3 draft for tiny-llama: fc over 3 target layers, one block, its own token_embd and output',
    config: { ...tiny, arch: 'eagle3', name: 'tiny-llama-eagle3', nLayers: 1, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, vocabSize: 1024, vocabKind: 'llama3', ropeBase: 500000, targetLayers: [1, 2, 3], targetDim: 256 } as Eagle3Config,
  },
  'tiny-llama-eagle3-d2t': {
    description: 'tiny-llama-eagle3 with a 512-token draft vocabulary (d2t), norm_before_fc and norm_before_residual',
    config: { ...tiny, arch: 'eagle3', name: 'tiny-llama-eagle3-d2t', nLayers: 1, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, vocabSize: 1024, vocabKind: 'llama3', ropeBase: 500000, targetLayers: [0, 2, 3], targetDim: 256, draftVocab: 512, normBeforeFc: true, normBeforeResidual: true } as Eagle3Config,
  },
  'tiny-llama-eagle3-shared': {
    description: "tiny-llama-eagle3 without token_embd and output: the target's are used",
    config: { ...tiny, arch: 'eagle3', name: 'tiny-llama-eagle3-shared', nLayers: 1, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, vocabSize: 1024, vocabKind: 'llama3', ropeBase: 500000, targetLayers: [1, 2, 3], targetDim: 256, ownEmbeddings: false } as Eagle3Config,
  },
  'tiny-qwen3moe-eagle3': {
    description: 'EAGLE-3 draft for tiny-qwen3moe (Qwen2 tokenizer): reads its blocks 0, 1 and 1 (its input twice)',
    config: { ...tiny, arch: 'eagle3', name: 'tiny-qwen3moe-eagle3', nLayers: 1, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, vocabSize: 1024, vocabKind: 'qwen2', ropeBase: 1e6, normEps: 1e-6, targetLayers: [0, 1, 1], targetDim: 256 } as Eagle3Config,
  },
  'tiny-llama-longrope': {
    description: 'tiny-llama with rope.scaling.type longrope and LongRoPE factor tables (1024 positions, 256 original)',
    config: { ...tiny, arch: 'llama', name: 'tiny-llama-longrope', nLayers: 2, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, vocabSize: 1024, vocabKind: 'llama3', ropeBase: 10000, ctx: 1024, longrope: { origCtx: 256, typed: true } } as Phi3Config,
  },
  'tiny-mixtral': {
    description: 'llama-architecture MoE (8 experts, top-2), SentencePiece tokenizer',
    config: {
      ...tiny, arch: 'mixtral', name: 'tiny-mixtral', nLayers: 2, dim: 256, ff: 512, nHeads: 8, nKvHeads: 4,
      nExperts: 8, nExpertsUsed: 2, vocabSize: 1024, vocabKind: 'spm', ropeBase: 1e6,
    },
  },
  'tiny-qwen2moe': {
    description: 'qwen2moe: q/k/v biases, 16 experts top-4 plus a gated shared expert, Qwen2 tokenizer',
    config: {
      ...tiny, arch: 'qwen2moe', name: 'tiny-qwen2moe', nLayers: 2, dim: 256, ff: 1024, nHeads: 4, nKvHeads: 4,
      nExperts: 16, nExpertsUsed: 4, expertFf: 256, sharedFf: 512, vocabSize: 1024, vocabKind: 'qwen2',
      ropeBase: 1e6, normEps: 1e-6,
    },
  },
  'tiny-qwen3moe': {
    description: 'qwen3moe: q/k norms, head size 128 (attention width 512 > dim 256), 16 experts top-4',
    config: TINY_QWEN3MOE,
  },
  'tiny-qwen3vlmoe': {
    description: 'qwen3vlmoe (Qwen3-VL-30B-A3B style language model): tiny-qwen3moe with interleaved M-RoPE sections and 3 deepstack layers',
    config: { ...TINY_QWEN3MOE, arch: 'qwen3vlmoe', name: 'tiny-qwen3vlmoe', ropeBase: 5e6, ropeSections: [24, 20, 20, 0], deepstack: 3 } as ModelConfig,
  },
  'tiny-qwen3vl': {
    description: 'qwen3vl (Qwen3-VL dense language model): qwen3 with interleaved M-RoPE sections [12, 10, 10, 0] and deepstack',
    config: { ...TINY_QWEN3, arch: 'qwen3vl', name: 'tiny-qwen3vl', ropeBase: 5e6, ropeSections: [12, 10, 10, 0], deepstack: 2 } as ModelConfig,
  },
  'tiny-qwen3-reranker': {
    description: 'qwen3 dense with a reranker head (cls.output over labels yes/no, pooling rank), as Qwen3-Reranker files are converted',
    config: { ...TINY_QWEN3, name: 'tiny-qwen3-reranker', clsLabels: ['yes', 'no'] },
  },
  'bench-llama-1b': {
    description: 'Llama 3.2 1B shape (16 x 2048, ff 8192, GQA 32/8, tied embeddings), vocab 32000: ~1.0B params',
    config: {
      ...tiny, arch: 'llama', name: 'bench-llama-1b', nLayers: 16, dim: 2048, ff: 8192, nHeads: 32, nKvHeads: 8,
      vocabSize: 32000, vocabKind: 'llama3', ctx: 131072, ropeBase: 500000, tiedEmbeddings: true,
    },
  },
  'tiny-bert': {
    description: 'bert embedding encoder (MiniLM-style): learned positions, GELU, layer norms, mean pooling; WordPiece vocab',
    config: TINY_BERT,
  },
  'tiny-bert-reranker': {
    description: 'tiny-bert with a cross-encoder reranker head (cls dense + tanh, cls.output with one score, pooling rank), as bge-reranker files',
    config: { ...TINY_BERT, name: 'tiny-bert-reranker', clsLabels: ['score'] },
  },
  'tiny-nomic-bert': {
    description: 'nomic-bert embedding encoder (nomic-embed-text-style): NeoX RoPE, fused qkv, SwiGLU, layer norms, mean pooling',
    config: { ...TINY_BERT, arch: 'nomic-bert', name: 'tiny-nomic-bert', ctx: 2048, ropeBase: 1000 },
  },
  'tiny-nomic-bert-moe': {
    description: 'nomic-bert-moe embedding encoder (nomic-embed-text-v2-moe-style): every second layer 8 gate-less GELU experts, top-2',
    config: { ...TINY_BERT, arch: 'nomic-bert-moe', name: 'tiny-nomic-bert-moe', ctx: 2048, ropeBase: 10000, nExperts: 8, nExpertsUsed: 2 },
  },
  'bench-bge-base-shaped': {
    description: 'bge-base-en-v1.5 shape (bert, 12 x 768, ff 3072, 12 heads, 512 positions, CLS pooling), vocab 30522',
    config: { ...TINY_BERT, name: 'bench-bge-base-shaped', nLayers: 12, dim: 768, ff: 3072, nHeads: 12, nKvHeads: 12, vocabSize: 30522, pooling: 2 },
  },
  'bench-qwen3-30b-a3b-shaped': {
    description: 'Qwen3-30B-A3B shape (48 x 2048, 128 experts top-8 of ff 768, head 128, GQA 32/4), vocab 32000',
    config: {
      ...tiny, arch: 'qwen3moe', name: 'bench-qwen3-30b-a3b-shaped', nLayers: 48, dim: 2048, ff: 6144, nHeads: 32,
      nKvHeads: 4, headDim: 128, nExperts: 128, nExpertsUsed: 8, expertFf: 768, vocabSize: 32000, vocabKind: 'qwen2',
      ctx: 40960, ropeBase: 1e6, normEps: 1e-6,
    },
  },
  'bench-mixtral-8x7b-shaped': {
    description: 'Mixtral 8x7B shape (32 x 4096, 8 experts top-2 of ff 14336, GQA 32/8), vocab 32000',
    config: {
      ...tiny, arch: 'mixtral', name: 'bench-mixtral-8x7b-shaped', nLayers: 32, dim: 4096, ff: 14336, nHeads: 32,
      nKvHeads: 8, nExperts: 8, nExpertsUsed: 2, vocabSize: 32000, vocabKind: 'spm', ctx: 32768, ropeBase: 1e6,
    },
  },
  ...MOE_FAMILY_PRESETS,
  ...GROVEMOE_PRESETS,
  ...LAGUNA_PRESETS,
  ...KIMI_LINEAR_PRESETS,
  ...KIMI_K3_PRESETS,
  ...BAILINGMOE3_PRESETS,
  ...DOTS3NOTE_PRESETS,
  ...HY_V4_PRESETS,
  ...DEEPSEEK4_PRESETS,
  ...QWEN4EXP_PRESETS,
  ...COHERE2MOE_PRESETS,
  ...COHERE_DENSE_PRESETS,
  ...LLAMA_DENSE_PRESETS,
  ...MISC_DENSE_PRESETS,
  ...TEXT_VL_PRESETS,
  ...MLA_DENSE_PRESETS,
  ...JAIS_BITNET_PRESETS,
  ...T5_PRESETS,
  ...DECI_PRESETS,
  ...GEMMA3N_PRESETS,
  ...GRANITE_SWITCH_PRESETS,
  ...HRM_TEXT_PRESETS,
  ...SPARK25_PRESETS,
  ...TALKIE_PRESETS,
  ...SSM_PRESETS,
  ...PLAMO2_PRESETS,
  ...RWKV_PRESETS,
  ...DIFFUSION_PRESETS,
};

/** The tiny preset used as the base for `--arch X` without `--preset`. */
export const DEFAULT_PRESET_FOR_ARCH: Record<string, string> = {
  llama: 'tiny-llama',
  mixtral: 'tiny-mixtral',
  qwen2moe: 'tiny-qwen2moe',
  qwen3moe: 'tiny-qwen3moe',
  deepseek2: 'tiny-deepseek3',
  deepseek32: 'tiny-deepseek32',
  'glm-dsa': 'tiny-glm-dsa',
  dots3note: 'tiny-dots3note',
  hy_v4: 'tiny-hy-v4',
  deepseek4: 'tiny-deepseek4',
  qwen4exp: 'tiny-qwen4exp',
  mistral4: 'tiny-mistral4',
  mistral3: 'tiny-mistral3',
  hy_v3: 'tiny-hy-v3',
  glm4moe: 'tiny-glm4moe',
  olmoe: 'tiny-olmoe',
  bert: 'tiny-bert',
  'nomic-bert': 'tiny-nomic-bert',
  deepseek: 'tiny-deepseek-moe',
  dots1: 'tiny-dots1',
  'ernie4_5-moe': 'tiny-ernie4_5-moe',
  'minimax-m2': 'tiny-minimax-m2',
  llama4: 'tiny-llama4',
  'hunyuan-moe': 'tiny-hunyuan-moe',
  bailingmoe: 'tiny-bailingmoe',
  bailingmoe2: 'tiny-bailingmoe2',
  granite: 'tiny-granite',
  granitemoe: 'tiny-granitemoe',
  granite_swa: 'tiny-granite-swa-moe',
  graniteswitch: 'tiny-graniteswitch',
  'deepseek2-ocr': 'tiny-deepseek2-ocr',
  minicpm3: 'tiny-minicpm3',
  plm: 'tiny-plm',
  deci: 'tiny-deci',
  gemma3n: 'tiny-gemma3n',
  hrm_text: 'tiny-hrm-text',
  spark2_5: 'tiny-spark2-5',
  talkie: 'tiny-talkie',
  phi3: 'tiny-phi3',
  mimo2: 'tiny-mimo2',
  'exaone-moe': 'tiny-exaone-moe',
  afmoe: 'tiny-afmoe',
  phimoe: 'tiny-phimoe',
  qwen3vl: 'tiny-qwen3vl',
  qwen3vlmoe: 'tiny-qwen3vlmoe',
  qwen35moe: 'tiny-qwen35moe',
  qwen35: 'tiny-qwen35',
  qwen3next: 'tiny-qwen3next',
  lfm2: 'tiny-lfm2',
  lfm2moe: 'tiny-lfm2moe',
  nemotron_h_moe: 'tiny-nemotron-h-moe',
  nemotron_h: 'tiny-nemotron-h',
  granitehybrid: 'tiny-granitehybrid',
  jamba: 'tiny-jamba',
  mamba: 'tiny-mamba',
  mamba2: 'tiny-mamba2',
  rwkv7: 'tiny-rwkv7',
  arwkv7: 'tiny-arwkv7',
  rwkv6: 'tiny-rwkv6',
  rwkv6qwen2: 'tiny-rwkv6qwen2',
  'falcon-h1': 'tiny-falcon-h1',
  'kimi-linear': 'tiny-kimi-linear',
  'kimi-k3': 'tiny-kimi-k3',
  bailingmoe3: 'tiny-bailingmoe3',
  'minimax-01': 'tiny-minimax-01',
  'minimax-m3': 'tiny-minimax-m3',
  gemma4: 'tiny-gemma4',
  gemma: 'tiny-gemma',
  gemma2: 'tiny-gemma2',
  gemma3: 'tiny-gemma3',
  smallthinker: 'tiny-smallthinker',
  step35: 'tiny-step35',
  grok: 'tiny-grok',
  dbrx: 'tiny-dbrx',
  arctic: 'tiny-arctic',
  grovemoe: 'tiny-grovemoe',
  laguna: 'tiny-laguna',
  cohere2moe: 'tiny-cohere2moe',
  cohere2: 'tiny-cohere2',
  'command-r': 'tiny-command-r',
  olmo2: 'tiny-olmo2',
  seed_oss: 'tiny-seed-oss',
  smollm3: 'tiny-smollm3',
  exaone4: 'tiny-exaone4',
  ernie4_5: 'tiny-ernie4_5',
  'hunyuan-dense': 'tiny-hunyuan-dense',
  qwen2vl: 'tiny-qwen2vl',
  hunyuan_vl: 'tiny-hunyuan-vl',
  plamo: 'tiny-plamo',
  plamo3: 'tiny-plamo3',
  plamo2: 'tiny-plamo2',
  'pangu-embedded': 'tiny-pangu-embedded',
  openelm: 'tiny-openelm',
  paddleocr: 'tiny-paddleocr',
  cogvlm: 'tiny-cogvlm',
  chameleon: 'tiny-chameleon',
  'muse-glimmer': 'tiny-muse-glimmer',
  glm4: 'tiny-glm4',
  apertus: 'tiny-apertus',
  internlm2: 'tiny-internlm2',
  exaone: 'tiny-exaone',
  xverse: 'tiny-xverse',
  nanbeige: 'tiny-nanbeige',
  arcee: 'tiny-arcee',
  maincoder: 'tiny-maincoder',
  orion: 'tiny-orion',
  olmo: 'tiny-olmo',
  starcoder2: 'tiny-starcoder2',
  minicpm: 'tiny-minicpm',
  stablelm: 'tiny-stablelm',
  nemotron: 'tiny-nemotron',
  gptneox: 'tiny-gptneox',
  chatglm: 'tiny-chatglm',
  phi2: 'tiny-phi2',
  falcon: 'tiny-falcon',
  gpt2: 'tiny-gpt2',
  starcoder: 'tiny-starcoder',
  codeshell: 'tiny-codeshell',
  qwen: 'tiny-qwen',
  bloom: 'tiny-bloom',
  mpt: 'tiny-mpt',
  refact: 'tiny-refact',
  baichuan: 'tiny-baichuan',
  jais: 'tiny-jais',
  jais2: 'tiny-jais2',
  bitnet: 'tiny-bitnet',
  eurobert: 'tiny-eurobert',
  'neo-bert': 'tiny-neo-bert',
  'llama-embed': 'tiny-llama-embed',
  'jina-bert-v2': 'tiny-jina-bert-v2',
  'jina-bert-v3': 'tiny-jina-bert-v3',
  t5encoder: 'tiny-t5encoder',
  t5: 'tiny-t5',
  'gemma-embedding': 'tiny-gemma-embedding',
  'modern-bert': 'tiny-modern-bert',
  llada: 'tiny-llada',
  dream: 'tiny-dream',
  'llada-moe': 'tiny-llada-moe',
  rnd1: 'tiny-rnd1',
  mellum: 'tiny-mellum',
  maple: 'tiny-maple',
};

export function getPreset(name: string): Preset {
  const p = PRESETS[name];
  if (!p) throw new Error(`unknown preset '${name}'; known: ${Object.keys(PRESETS).join(', ')}`);
  return { description: p.description, config: { ...p.config } };
}

/** Whether the preset's model routes each token to some of its experts (so near-ties can flip). */
export function presetRoutes(name: string): boolean {
  const c = getPreset(name).config;
  return c.nExperts > 0 && c.nExpertsUsed < c.nExperts;
}
