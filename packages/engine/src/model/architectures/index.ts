import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { buildAfmoe } from './afmoe';
import { buildMuseGlimmer } from './muse-glimmer';
import { buildTalkie } from './talkie';
import { buildBert } from './bert';
import { buildT5, buildT5Encoder } from './t5';
import { buildCohere } from './cohere';
import { buildDeepseek2, buildDeepseek2Mtp } from './deepseek2';
import { buildDots3note } from './dots3note';
import { buildGemma } from './gemma';
import { buildGemma3n } from './gemma3n';
import { buildHrmText } from './hrm-text';
import { buildSpark25 } from './spark2-5';
import { buildGemma4 } from './gemma4';
import { buildGemma4Assistant } from './gemma4-assistant';
import { buildArctic } from './arctic';
import { buildDbrx } from './dbrx';
import { buildDeci } from './deci';
import { buildGrok } from './grok';
import { buildHyV4 } from './hy-v4';
import { buildDeepseek4, buildDeepseek4Mtp } from './deepseek4';
import { buildLaguna } from './laguna';
import { buildStep35 } from './step35';
import { buildGlm4Moe } from './glm4moe';
import { buildGptOss } from './gpt-oss';
import { buildGranite } from './granite';
import { buildGraniteSwitch } from './granite-switch';
import { buildLlamaFamily, DENSE_ARCHITECTURES } from './llama-family';
import { buildLfm2 } from './lfm2';
import { buildKimiK3 } from './kimi-k3';
import { buildKimiLinear } from './kimi-linear';
import { buildBailingMoe3 } from './bailingmoe3';
import { buildFalconH1, buildJamba, buildMamba, buildNemotronH, buildNemotronHMtp } from './mamba2';
import { buildPlamo2 } from './plamo2';
import { buildRwkv6, buildRwkv7 } from './rwkv7';
import { buildLlama4 } from './llama4';
import { buildMimo2 } from './mimo2';
import { buildMinimax01 } from './minimax01';
import { buildMinimaxM3 } from './minimax-m3';
import { buildMistral3 } from './mistral3';
import { buildMlaDense } from './mla-dense';
import { buildPhi3 } from './phi3';
import { buildQwen35, buildQwen35Mtp } from './qwen35';
import { buildQwen4Exp } from './qwen4exp';
import { buildLlamaMoe, LLAMA_MOE_ARCHITECTURES } from './llama-moe';
import { buildEagle3 } from './eagle3';
import { buildDflash } from './dflash';

/** What a program depends on besides the file: the context of one sequence (LongRoPE picks its factors by it). */
export interface BuildOptions {
  nCtxSeq: number;
  /** Hidden rows as the file's MTP block reads them (LoadModelOptions.nextnHidden; deepseek4's streams). */
  nextnHidden?: boolean;
}

type Builder = (hp: HParams, tensors: Map<string, GgufTensorInfo>, o: BuildOptions) => ModelProgram;

const ARCHITECTURES: Record<string, Builder> = {
  llama: (hp, ts, o) => buildLlamaFamily(hp, ts, { neox: false, qkNorm: false, normExpertWeights: true, sharedExpertGate: false, ropeFactors: 'typed', nCtxSeq: o.nCtxSeq }),
  qwen2: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: false, normExpertWeights: false, sharedExpertGate: false }),
  qwen2moe: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: false, normExpertWeights: false, sharedExpertGate: true }),
  qwen3: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false }),
  qwen3moe: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: true, sharedExpertGate: false }),
  olmoe: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false }),
  // Qwen3-VL's language models. Text tokens get one position in every M-RoPE section (llama.cpp's
  // batch broadcasts it), which makes the interleaved M-RoPE exactly NeoX RoPE; the deepstack
  // additions are zero for them. (Images need the mmproj vision tower, which kail does not run.)
  qwen3vl: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false }),
  qwen3vlmoe: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: true, sharedExpertGate: false }),
  deepseek2: (hp, ts) => buildDeepseek2(hp, ts),
  // Mistral's MLA MoE models (HF model_type mistral4): llama.cpp runs them with deepseek2's loader and graph.
  mistral4: (hp, ts) => buildDeepseek2(hp, ts),
  // DeepSeek-OCR's language model: deepseek2's blocks with plain multi-head attention instead of MLA.
  'deepseek2-ocr': (hp, ts) => buildDeepseek2(hp, ts),
  // DeepSeek-V3.2 (and V3.2-Exp/Speciale): deepseek2's MLA restricted to the positions its
  // lightning indexer selects (DSA).
  deepseek32: (hp, ts, o) => buildDeepseek2(hp, ts, { nCtxSeq: o.nCtxSeq }),
  // GLM-5 (5, 5.1, 5.2): the same, its blocks either computing a selection or sharing the last one.
  'glm-dsa': (hp, ts, o) => buildDeepseek2(hp, ts, { nCtxSeq: o.nCtxSeq }),
  // rednote dots.llm3: absorbed MLA on sliding and full blocks of their own geometry, the full
  // ones with DSA's indexer, a norm on the RoPE key, a sigmoid gate per head.
  dots3note: (hp, ts, o) => buildDots3note(hp, ts, { nCtxSeq: o.nCtxSeq }),
  // Tencent Hunyuan v4: hyper-connections (hc residual streams mixed around each sublayer),
  // absorbed MLA with a sink per head and a sigmoid output gate, optional DSA with shared blocks.
  hy_v4: (hp, ts, o) => buildHyV4(hp, ts, { nCtxSeq: o.nCtxSeq }),
  // DeepSeek-V4: hyper-connections with Sinkhorn mixing, one shared key/value row per token over a
  // sliding window plus compressed rows (CSA: top-k by a lightning indexer; HCA), grouped output
  // LoRA, sqrt-softplus and hash-routed experts.
  deepseek4: (hp, ts, o) => buildDeepseek4(hp, ts, { nextnHidden: o.nextnHidden }),
  // Dense decoders with deepseek2's MLA and latent cache: MiniCPM3 (q LoRA, LongRoPE tables,
  // embedding / residual / head scales) and PLM (plain attn_q, squared-ReLU FFN, tied head).
  minicpm3: (hp, ts, o) => buildMlaDense(hp, ts, o.nCtxSeq),
  plm: (hp, ts, o) => buildMlaDense(hp, ts, o.nCtxSeq),
  // DeciLM / Llama-3.1-Nemotron-51B: Llama blocks with their own head counts and FFN widths, blocks
  // without attention or with a linear map in its place, blocks without FFN.
  deci: (hp, ts, o) => buildDeci(hp, ts, o.nCtxSeq),
  glm4moe: (hp, ts) => buildGlm4Moe(hp, ts),
  'gpt-oss': (hp, ts) => buildGptOss(hp, ts),
  llama4: (hp, ts) => buildLlama4(hp, ts),
  mimo2: (hp, ts) => buildMimo2(hp, ts),
  mistral3: (hp, ts, o) => buildMistral3(hp, ts, o.nCtxSeq),
  afmoe: (hp, ts) => buildAfmoe(hp, ts),
  'muse-glimmer': (hp, ts) => buildMuseGlimmer(hp, ts),
  talkie: (hp, ts) => buildTalkie(hp, ts),
  granite: (hp, ts, o) => buildGranite(hp, ts, o.nCtxSeq),
  // MiniCPM (1/2/4 dense, MoE): Granite's graph with MiniCPM's default multipliers.
  minicpm: (hp, ts, o) => buildGranite(hp, ts, o.nCtxSeq),
  granitemoe: (hp, ts, o) => buildGranite(hp, ts, o.nCtxSeq),
  // Granite with sliding-window blocks (Granite 4.1 SWA, dense or MoE): a sink per head, NoPE blocks by rope_pattern.
  granite_swa: (hp, ts, o) => buildGranite(hp, ts, o.nCtxSeq),
  // Granite Switch: per-token switched LoRA adapters picked by a one-head router over activation tokens.
  graniteswitch: (hp, ts) => buildGraniteSwitch(hp, ts),
  phi3: (hp, ts, o) => buildPhi3(hp, ts, o.nCtxSeq),
  phimoe: (hp, ts, o) => buildPhi3(hp, ts, o.nCtxSeq),
  // Qwen3.5 / 3.6: gated delta net blocks (a recurrent state per sequence) and gated full attention.
  qwen35: (hp, ts) => buildQwen35(hp, ts),
  qwen35moe: (hp, ts) => buildQwen35(hp, ts),
  qwen3next: (hp, ts) => buildQwen35(hp, ts),
  qwen4exp: (hp, ts) => buildQwen4Exp(hp, ts),
  // Liquid AI LFM2 / LFM2-MoE: gated short convolutions (a recurrent conv state) and GQA blocks.
  lfm2: (hp, ts) => buildLfm2(hp, ts),
  lfm2moe: (hp, ts) => buildLfm2(hp, ts),
  // NVIDIA Nemotron-H / Nemotron 3: Mamba-2 blocks (a recurrent conv and SSM state), GQA blocks
  // without RoPE, squared-ReLU FFN or expert blocks.
  nemotron_h: (hp, ts) => buildNemotronH(hp, ts),
  nemotron_h_moe: (hp, ts) => buildNemotronH(hp, ts),
  // IBM Granite 4.0-H: Granite's multipliers over Mamba-2 and GQA blocks.
  granitehybrid: (hp, ts, o) => buildGranite(hp, ts, o.nCtxSeq),
  // AI21 Jamba: Mamba-1 and GQA blocks, experts every other block.
  jamba: (hp, ts) => buildJamba(hp, ts),
  // Preferred Networks PLaMo 2: Mamba blocks (per-head z|x, normed B/C/dt) and GQA blocks with per-head q/k norms, post norms.
  plamo2: (hp, ts) => buildPlamo2(hp, ts),
  // Pure state-space models: Mamba-1 (and Falcon-Mamba's dt/B/C norms) and Mamba-2 blocks only,
  // no attention and so no KV cache.
  mamba: (hp, ts) => buildMamba(hp, ts),
  mamba2: (hp, ts) => buildMamba(hp, ts),
  // RWKV-7: time mix (the WKV-7 recurrence, token shifts) and channel mix blocks; no attention.
  rwkv7: (hp, ts) => buildRwkv7(hp, ts),
  // ARWKV-7: RWKV-7 time mixes (one token shift) with Qwen2.5's RMS norms and SwiGLU FFNs.
  arwkv7: (hp, ts) => buildRwkv7(hp, ts),
  // RWKV-6: time mix (data-dependent lerps, LoRA decay, the WKV-6 recurrence with time_first) and channel mix blocks.
  rwkv6: (hp, ts) => buildRwkv6(hp, ts),
  // RWKV-6-Qwen2 (QRWKV6): RWKV-6 time mixes (gated linear attention, GQA k/v) with Qwen2.5's RMS norms and SwiGLU FFNs.
  rwkv6qwen2: (hp, ts) => buildRwkv6(hp, ts),
  // TII Falcon-H1: attention and a Mamba-2 mixer side by side in every block, then a SwiGLU FFN.
  'falcon-h1': (hp, ts) => buildFalconH1(hp, ts),
  // Moonshot Kimi-Linear: KDA blocks (a delta rule with a gate per key channel, recurrent states
  // per sequence) and MLA blocks without RoPE, DeepSeek-style experts with a shared one.
  'kimi-linear': (hp, ts) => buildKimiLinear(hp, ts),
  // Moonshot Kimi-K3: kimi-linear's KDA and NoPE MLA blocks (full-rank KDA gate, gate lower bound,
  // MLA output gate), situ FFNs, latent experts, cross-layer residual attention.
  'kimi-k3': (hp, ts) => buildKimiK3(hp, ts),
  // inclusionAI Ling 3 (BailingMoeV3): KDA blocks with a lower-bounded gate and MLA blocks with
  // RoPE and a gate per head, clamped SwiGLU experts beside a shared expert; the MTP block left out.
  bailingmoe3: (hp, ts) => buildBailingMoe3(hp, ts),
  // MiniMax-Text-01 / MiniMax-M1: lightning attention blocks (a recurrent state per sequence) and
  // softmax attention every eighth, experts in every block.
  'minimax-01': (hp, ts) => buildMinimax01(hp, ts),
  // MiniMax-M3: GQA with per-head q/k norms, leading dense blocks, swigluoai experts beside a shared
  // expert, and MSA: each KV group attends to the blocks its lightning indexer head ranks best.
  'minimax-m3': (hp, ts, o) => buildMinimaxM3(hp, ts, { nCtxSeq: o.nCtxSeq }),
  // Google Gemma 4 (26B-A4B experts, 31B, E2B/E4B): sliding and full blocks of their own head
  // sizes, shared KV blocks, a dense GeGLU beside routed GeGLU experts, per-layer embeddings.
  gemma4: (hp, ts) => buildGemma4(hp, ts),
  // Google Gemma 3n (E2B/E4B): AltUp streams, LAuReL, per-layer embeddings, gaussian top-k
  // activation sparsity, sliding windows and shared KV blocks.
  gemma3n: (hp, ts) => buildGemma3n(hp, ts),
  // HRM-Text (DFM Mimir): a low and a high stack of gated-attention blocks run in nested cycles,
  // every stack pass over KV cache slots of its own (block_count counts the slots).
  hrm_text: (hp, ts) => buildHrmText(hp, ts),
  // Spark-X2.5: sliding and full blocks with their own rotary dims, a sigmoid gate per attention
  // head, a GELU-gated FFN.
  spark2_5: (hp, ts) => buildSpark25(hp, ts),
  // Google Gemma, Gemma 2 and Gemma 3 (dense): GeGLU, post norms from 2, sliding windows and
  // soft-capping from 2, q/k norms from 3.
  gemma: (hp, ts) => buildGemma(hp, ts, 1),
  gemma2: (hp, ts) => buildGemma(hp, ts, 2),
  gemma3: (hp, ts) => buildGemma(hp, ts, 3),
  // StepFun Step 3.5 (Step-3.5-Flash): sliding and full blocks with their own head counts and
  // RoPE (half the dimensions on full blocks), a sigmoid gate per attention head, sigmoid-routed
  // experts beside a shared expert, per-block SwiGLU limits.
  step35: (hp, ts) => buildStep35(hp, ts),
  // xAI Grok-1 / Grok-2: soft-capped attention scores, post-attention and post-FFN norms, GeGLU
  // experts (beside a dense GeGLU in Grok-2), embedding and logit multipliers.
  grok: (hp, ts) => buildGrok(hp, ts),
  // Databricks DBRX: LayerNorms without bias, a fused and clamped QKV, routed SwiGLU experts.
  dbrx: (hp, ts) => buildDbrx(hp, ts),
  // Snowflake Arctic: a dense residual MLP and 128 experts beside it, the experts reading the
  // block's input (so streamed experts are read while the attention runs).
  arctic: (hp, ts) => buildArctic(hp, ts),
  // Poolside Laguna: blocks with their own query head counts, sliding and full blocks with their
  // own RoPE, a softplus gate per head or per value on the attention, sigmoid + bias experts
  // beside a shared expert.
  laguna: (hp, ts) => buildLaguna(hp, ts),
  // Cohere's decoders: parallel attention and FFN blocks, a logit scale. Command R / R+ (per-head
  // q/k LayerNorms), Command R7B / Command A (NoPE full blocks among sliding ones) and Cohere's
  // MoE (experts averaged with a shared expert).
  cohere2moe: (hp, ts) => buildCohere(hp, ts, 'cohere2moe'),
  cohere2: (hp, ts) => buildCohere(hp, ts, 'cohere2'),
  'command-r': (hp, ts) => buildCohere(hp, ts, 'command-r'),
  // Dense decoders of Llama's family with their own block layouts: OLMo 2 (post norms, full-width
  // q/k norms, OLMo 3's windows), Seed-OSS, SmolLM3 (NoPE every 4th block), EXAONE 4.0 (post norms,
  // windows with NoPE full blocks at 64 blocks), ERNIE 4.5, Hunyuan dense (q/k norms after RoPE,
  // alpha-scaled base), GLM-4 (sandwich norms, fused gate|up, partial RoPE).
  ...DENSE_ARCHITECTURES,
  ...Object.fromEntries(Object.entries(LLAMA_MOE_ARCHITECTURES).map(([arch, opt]) => [arch, (hp: HParams, ts: Map<string, GgufTensorInfo>) => buildLlamaMoe(hp, ts, opt)])),
  // Diffusion LMs (llama.cpp's llada.cpp, llada-moe.cpp, rnd1.cpp, dream.cpp): the trunks of llama,
  // OLMoE-like MoE with per-head q/k norms, qwen3moe and qwen2 with non-causal attention, every
  // position's logits from one pass over the whole canvas; generated by model/diffusion.ts's loop.
  llada: (hp, ts) => buildLlamaFamily(hp, ts, { neox: false, qkNorm: false, normExpertWeights: false, sharedExpertGate: false, causal: false, noBiasNoFreqs: true }),
  'llada-moe': (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: false, sharedExpertGate: false, causal: false, allExperts: true, untiedHead: true }),
  rnd1: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: true, normExpertWeights: true, sharedExpertGate: false, causal: false, allExperts: true }),
  dream: (hp, ts) => buildLlamaFamily(hp, ts, { neox: true, qkNorm: false, normExpertWeights: false, sharedExpertGate: false, causal: false }),
  bert: (hp, ts) => buildBert(hp, ts, { positions: 'learned', ffn: 'gelu' }),
  'nomic-bert': (hp, ts) => buildBert(hp, ts, { positions: 'rope', ffn: 'swiglu' }),
  // (Its dense layers are BERT's GELU FFNs with biases; every other one routes to experts.)
  'nomic-bert-moe': (hp, ts) => buildBert(hp, ts, { positions: 'rope', ffn: 'gelu' }),
  // Jina Embeddings v2 (jina-bert-v2): BERT's post-norm block with ALiBi (max bias 8, no positions),
  // optional q/k LayerNorms and attn_norm_2, a GELU-gated or GEGLU FFN.
  'jina-bert-v2': (hp, ts) => buildBert(hp, ts, { positions: 'alibi', ffn: 'jina' }),
  // Jina Embeddings v3 (jina-bert-v3: XLM-RoBERTa with rotary positions): BERT's post-norm block,
  // NeoX RoPE, one attn_qkv with its bias, GELU FFN with biases (llama.cpp's bert.cpp branches).
  'jina-bert-v3': (hp, ts) => buildBert(hp, ts, { positions: 'rope', ffn: 'gelu' }),
  // T5's encoder (t5encoder): RMS norms, unscaled attention with a relative position bias.
  t5encoder: (hp, ts) => buildT5Encoder(hp, ts),
  // T5 / flan-T5 (t5): the encoder and the decoder as one program in two passes (buildT5).
  t5: (hp, ts) => buildT5(hp, ts),
  // EmbeddingGemma (gemma-embedding): Gemma 3's block as a non-causal encoder, symmetric windows.
  'gemma-embedding': (hp, ts) => buildGemma(hp, ts, 3, true),
  // Llama's graph as an embedding model (llama-embed: llama-embed-nemotron): no head, the
  // output_norm'd state pooled by pooling_type; attention both ways when attention.causal is false
  // (llama.cpp's no-cache attention input follows causal_attn, default true).
  'llama-embed': (hp, ts, o) =>
    buildLlamaFamily(hp, ts, { neox: false, qkNorm: false, normExpertWeights: true, sharedExpertGate: false, ropeFactors: 'typed', nCtxSeq: o.nCtxSeq, encoderNorm: 'output_norm.weight', ...(hp.meta.bool('attention.causal', true) ? {} : { causal: false }) }),
  // EAGLE-3 drafts: they run bound to a target (speculative decoding), reading its layers' hidden states.
  eagle3: (hp, ts, o) => buildEagle3(hp, ts, o.nCtxSeq),
  // Gemma 4 assistant drafts: bound to a target whose KV cache they read (LoadModelOptions.kvSource,
  // which EngineModel.load passes to buildGemma4Assistant itself); without one, refused.
  'gemma4-assistant': (hp, ts) => buildGemma4Assistant(hp, ts, undefined),
  // DFlash block-diffusion drafts: bound to a target whose layers' hidden states fill their KV cache.
  dflash: (hp, ts, o) => buildDflash(hp, ts, o.nCtxSeq),
};

/**
 * Encoder-only embedding models (non-causal attention, no output head): they give embeddings and
 * generate no text, and a sequence is computed in one forward pass.
 */
const ENCODERS = new Set(['bert', 'nomic-bert', 'nomic-bert-moe', 'jina-bert-v2', 'jina-bert-v3', 't5encoder', 'eurobert', 'neo-bert', 'llama-embed', 'gemma-embedding', 'modern-bert']);

export function isEncoderArchitecture(arch: string): boolean {
  return ENCODERS.has(arch);
}

/**
 * Diffusion language models: non-causal attention and an output head; text comes from the
 * diffusion loop (model/diffusion.ts: every step one pass over prompt + masked canvas), never from
 * autoregressive decoding. A sequence is computed in one pass from position 0, as an encoder's.
 */
const DIFFUSION = new Set(['llada', 'llada-moe', 'rnd1', 'dream']);

export function isDiffusionArchitecture(arch: string): boolean {
  return DIFFUSION.has(arch);
}

/** The context a load gets without one asked for: the training context, at most 4096. */
export function defaultContext(hp: HParams): number {
  return Math.min(hp.nCtxTrain || 4096, 4096);
}

/** Architectures (GGUF `general.architecture`) this build can run. */
export const SUPPORTED_ARCHITECTURES = Object.keys(ARCHITECTURES).sort();

export function buildProgram(hp: HParams, tensors: Map<string, GgufTensorInfo>, o: BuildOptions = { nCtxSeq: defaultContext(hp) }): ModelProgram {
  const b = ARCHITECTURES[hp.arch];
  if (!b) throw new EngineError('KAIL_E_UNSUPPORTED', `architecture '${hp.arch}' is not supported; supported: ${SUPPORTED_ARCHITECTURES.join(', ')}`);
  return b(hp, tensors, o);
}

/**
 * The program of a file's multi-token-prediction block, run as a draft model of its own (see
 * buildDeepseek2Mtp, buildQwen35Mtp, buildNemotronHMtp, buildDeepseek4Mtp): deepseek2, qwen35moe, qwen35, qwen3next, nemotron_h_moe and deepseek4; other architectures, and
 * files without the block, are refused.
 */
export function buildMtpProgram(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  if (hp.arch === 'qwen35moe' || hp.arch === 'qwen35' || hp.arch === 'qwen3next') return buildQwen35Mtp(hp, tensors);
  if (hp.arch === 'nemotron_h_moe') return buildNemotronHMtp(hp, tensors);
  if (hp.arch === 'deepseek4') return buildDeepseek4Mtp(hp, tensors);
  if (hp.arch !== 'deepseek2') throw new EngineError('KAIL_E_UNSUPPORTED', `multi-token-prediction drafting is implemented for deepseek2, qwen35moe, qwen35, qwen3next, nemotron_h_moe and deepseek4 files; this one is '${hp.arch}'`);
  return buildDeepseek2Mtp(hp, tensors);
}
