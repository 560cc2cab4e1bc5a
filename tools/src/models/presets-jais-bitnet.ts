// Presets for architectures/jais-bitnet.ts (jais, jais2, bitnet): n_embd 256 and FFN 512 (K-quants
// and TQ1_0 / TQ2_0 apply without fallbacks), 4 blocks, Llama 3 byte-level vocabulary (1024).
// tiny-jais: 4 heads of 64 (MHA, as Jais), ALiBi with max_alibi_bias 8, output.weight.
// tiny-jais2: 4 query heads over 2 KV heads, q/k/v biases, NeoX RoPE, tied head.
// tiny-bitnet: 4 query heads over 2 KV heads, per-tensor scales on every projection, tied head
// (BitNet's head is always token_embd).
import type { LlamaEncoderConfig } from './architectures/encoders-llama';
import type { JaisBitnetConfig } from './architectures/jais-bitnet';
import type { GemmaConfig } from './architectures/gemma';
import type { JinaBertConfig } from './architectures/jina-bert';
import type { Preset } from './presets';

const base = {
  nLayers: 4, dim: 256, ff: 512, nHeads: 4, nKvHeads: 2, ctx: 4096, normEps: 1e-5, ropeBase: 10000,
  tiedEmbeddings: true, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, vocabKind: 'llama3' as const,
};

const jais: JaisBitnetConfig = { ...base, arch: 'jais', name: 'tiny-jais', nKvHeads: 4, tiedEmbeddings: false, maxAlibiBias: 8 };
const jais2: JaisBitnetConfig = { ...base, arch: 'jais2', name: 'tiny-jais2', qkvBias: true, ropeBase: 5e5 };
const bitnet: JaisBitnetConfig = { ...base, arch: 'bitnet', name: 'tiny-bitnet', weightScales: true, normEps: 1e-6, ropeBase: 5e5 };

// Embedding encoders of Llama's block (architectures/encoders-llama.ts): eurobert (q/k/v biases,
// NeoX RoPE, mean pooling), neo-bert (fused q/k/v, fused gate|up, CLS pooling), llama-embed
// (attention.causal false, last-token pooling; -causal: attention.causal true, mean pooling).
const eurobert: LlamaEncoderConfig = { ...base, arch: 'eurobert', name: 'tiny-eurobert', qkvBias: true, pooling: 1, ropeBase: 250000 };
const neoBert: LlamaEncoderConfig = { ...base, arch: 'neo-bert', name: 'tiny-neo-bert', nKvHeads: 4, pooling: 2 };
const llamaEmbed: LlamaEncoderConfig = { ...base, arch: 'llama-embed', name: 'tiny-llama-embed', pooling: 3, ropeBase: 500000 };
const llamaEmbedCausal: LlamaEncoderConfig = { ...llamaEmbed, name: 'tiny-llama-embed-causal', causal: true, pooling: 1 };
// modern-bert: 6 blocks, symmetric windows of 8 (4 positions either side) on blocks 1, 2, 4, 5
// (every 3rd full from block 0, the loader's default), global base 1.6e5 and rope.freq_base_swa 1e4,
// GEGLU, no attn_norm on block 0, CLS pooling; -swiglu: hidden_activation silu, window 6 with
// sliding_window_pattern 2, block 0 with an attn_norm, no rope.freq_base_swa, mean pooling.
const modernBert: LlamaEncoderConfig = { ...base, arch: 'modern-bert', name: 'tiny-modern-bert', nLayers: 6, nKvHeads: 4, window: 8, ropeBase: 160000, ropeBaseSwa: 10000, pooling: 2 };
const modernBertSwiglu: LlamaEncoderConfig = { ...modernBert, name: 'tiny-modern-bert-swiglu', window: 6, swaPattern: 2, ropeBaseSwa: undefined, hiddenAct: 'silu', attnNorm0: true, pooling: 1 };

// jina-bert-v2 (BERT's block with ALiBi, WordPiece vocabulary, 2 blocks as tiny-bert): the fused
// GEGLU ffn_up with q/k LayerNorms and mean pooling; -gated: one attn_qkv, a separate ffn_gate
// (GELU-gated), attn_norm_2, CLS pooling.
const jina: JinaBertConfig = { ...base, arch: 'jina-bert-v2', name: 'tiny-jina-bert-v2', nLayers: 2, nKvHeads: 4, vocabKind: 'bert', ctx: 512, normEps: 1e-12, qkNorm: true, pooling: 1 };
const jinaGated: JinaBertConfig = { ...jina, name: 'tiny-jina-bert-v2-gated', qkNorm: false, fusedQkv: true, gatedFfn: true, attnNorm2: true, pooling: 2 };

// EmbeddingGemma (gemma-embedding: Gemma 3's block as a non-causal encoder), spm vocabulary: 6
// blocks (blocks 0-4 sliding through a symmetric window of 8, i.e. 4 positions either side; block 5
// full), 4 heads of 64 over 1 KV head, full blocks at base 1e6, sliding ones at rope.freq_base_swa
// 1e4 (unscaled), the sentence-transformers projections dense_2 / dense_3 (256 -> 512 -> 256), mean
// pooling; -plain: no projections, no rope.freq_base_swa (the loader's 10000), window 6, last-token pooling.
const gemmaEmbedding: GemmaConfig = {
  ...base, arch: 'gemma-embedding', name: 'tiny-gemma-embedding', vocabKind: 'spm', nLayers: 6, nKvHeads: 1, headDim: 64, ropeBase: 1e6, normEps: 1e-6,
  window: 8, ropeBaseSwa: 1e4, denseWidth: 512, pooling: 1,
};
const gemmaEmbeddingPlain: GemmaConfig = { ...gemmaEmbedding, name: 'tiny-gemma-embedding-plain', window: 6, ropeBaseSwa: undefined, denseWidth: undefined, pooling: 3 };

export const JAIS_BITNET_PRESETS: Record<string, Preset> = {
  'tiny-jais': { description: 'jais (Jais): LayerNorms with biases, one attn_qkv with its bias, ALiBi (max_alibi_bias 8), 1/head scores, SwiGLU FFN with gate / up / down biases, attn_output.bias, output.weight', config: jais },
  'tiny-jais2': { description: 'jais2 (Jais-2): LayerNorms with biases, q/k/v biases, NeoX RoPE, attn_output.bias, ungated ReLU² FFN with biases, tied head', config: jais2 },
  'tiny-eurobert': { description: 'eurobert (EuroBERT): non-causal Llama block (RMS norms, q/k/v biases, NeoX RoPE, SwiGLU), no head, mean pooling', config: eurobert },
  'tiny-neo-bert': { description: 'neo-bert (NeoBERT): non-causal, RMS norms, one attn_qkv, fused gate|up SwiGLU, RoPE over adjacent pairs, enc.output_norm, CLS pooling', config: neoBert },
  'tiny-llama-embed': { description: 'llama-embed (llama-embed-nemotron): Llama block without a head, attention.causal false, last-token pooling', config: llamaEmbed },
  'tiny-llama-embed-causal': { description: 'llama-embed with attention.causal true (llama.cpp attends causally then), mean pooling', config: llamaEmbedCausal },
  'tiny-jina-bert-v2': { description: 'jina-bert-v2 (Jina Embeddings v2): BERT block with ALiBi (max bias 8), q/k LayerNorms, fused GEGLU ffn_up, mean pooling', config: jina },
  'tiny-jina-bert-v2-gated': { description: 'jina-bert-v2 with one attn_qkv, a separate ffn_gate (GELU-gated FFN), attn_norm_2, CLS pooling', config: jinaGated },
  'tiny-gemma-embedding': { description: 'gemma-embedding (EmbeddingGemma): Gemma 3 block as a non-causal encoder, symmetric windows of 8 on blocks 0-4, rope.freq_base_swa, dense_2 / dense_3 projections, mean pooling', config: gemmaEmbedding },
  'tiny-gemma-embedding-plain': { description: 'gemma-embedding without projections or rope.freq_base_swa, window 6, last-token pooling', config: gemmaEmbeddingPlain },
  'tiny-modern-bert': { description: 'modern-bert (ModernBERT): LayerNorms without biases, symmetric windows of 8 on 2 of every 3 blocks at their own RoPE base, fused q/k/v, GEGLU, no attn_norm on block 0, CLS pooling', config: modernBert },
  'tiny-modern-bert-swiglu': { description: 'modern-bert with hidden_activation silu (SwiGLU), window 6 with pattern period 2, attn_norm on block 0, mean pooling', config: modernBertSwiglu },
  'tiny-bitnet': { description: 'bitnet (BitNet b1.58): Llama block with NeoX RoPE, attn_sub_norm / ffn_sub_norm, per-tensor scales on every projection, head token_embd', config: bitnet },
};
