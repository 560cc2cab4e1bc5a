// Presets for jina-bert-v3 (architectures/jina-bert-v3.ts) and T5's encoder (architectures/t5.ts,
// t5encoder): n_embd 256, FFN 512, mean pooling.
// - tiny-jina-bert-v3: 2 blocks of 4 heads, NeoX RoPE at base 20000 (jina-embeddings-v3's), WordPiece vocabulary.
// - tiny-t5encoder (flan-T5's block): 3 blocks, 4 heads of 48 (heads x d_kv 192, not the width, as
//   T5's d_kv is its own), GELU-gated FFN, 32 relative buckets in block 0 only (the others use it).
//   Both write attention.causal false (converted files do not): llama.cpp's llama_decode runs a
//   t5encoder file without it causally (its KV-cache path keeps the causal default; only
//   llama_encode attends both ways), where T5's encoder and kail attend both ways.
// - tiny-t5encoder-relu (T5's block): ReLU FFN, 8 buckets (max_exact 2 per direction: most
//   distances in the logarithmic buckets), a table in every block.
// - tiny-t5 (flan-T5, the whole encoder-decoder `t5`): tiny-t5encoder's encoder (3 blocks), 2
//   decoder blocks (decoder_block_count below block_count: llama.cpp's loader, node-llama-cpp
//   3.22.1's, fails with more decoder than encoder blocks, a vector range check on its per-layer
//   arrays), an untied output head, decoder_start_token_id 0.
// - tiny-t5-relu (T5): ReLU FFN, 8 buckets with a table per block (both stacks), a tied head,
//   2 decoder blocks, decoder_start_token_id 3.
import type { JinaBertV3Config } from './architectures/jina-bert';
import type { T5Config } from './architectures/t5';
import type { Preset } from './presets';

const base = {
  nLayers: 2, dim: 256, ff: 512, nHeads: 4, nKvHeads: 4, ctx: 512, normEps: 1e-12, ropeBase: 20000,
  tiedEmbeddings: true, nExperts: 0, nExpertsUsed: 0, expertFf: 0, sharedFf: 0, vocabSize: 1024, pooling: 1,
};

const jinaV3: JinaBertV3Config = { ...base, arch: 'jina-bert-v3', name: 'tiny-jina-bert-v3', vocabKind: 'bert' };
const t5enc: T5Config = { ...base, arch: 't5encoder', name: 'tiny-t5encoder', vocabKind: 'spm', causal: false, nLayers: 3, headDim: 48, normEps: 1e-6, relBuckets: 32 };
const t5encRelu: T5Config = { ...t5enc, name: 'tiny-t5encoder-relu', reluFfn: true, relBuckets: 8, relBiasEveryBlock: true };
const t5Full: T5Config = { ...base, arch: 't5', name: 'tiny-t5', vocabKind: 'spm', nLayers: 3, decLayers: 2, headDim: 48, normEps: 1e-6, relBuckets: 32, tiedEmbeddings: false, pooling: undefined };
const t5Relu: T5Config = { ...t5Full, name: 'tiny-t5-relu', reluFfn: true, relBuckets: 8, relBiasEveryBlock: true, tiedEmbeddings: true, nLayers: 2, decLayers: 2, decoderStart: 3 };

export const T5_PRESETS: Record<string, Preset> = {
  'tiny-jina-bert-v3': { description: 'jina-bert-v3 (jina-embeddings-v3): BERT post-norm block, NeoX RoPE (base 20000), attn_qkv with bias, GELU FFN with biases, mean pooling', config: jinaV3 },
  'tiny-t5encoder': { description: "t5encoder (flan-T5's encoder): RMS norms, unscaled attention with a relative position bias (32 buckets, block 0's shared), heads of 48, GELU-gated FFN, mean pooling", config: t5enc },
  'tiny-t5': { description: "t5 (flan-T5): 3 encoder and 2 decoder blocks, relative position biases (32 buckets, block 0's shared per stack), heads of 48, GELU-gated FFN, cross-attention, untied head, decoder start token 0", config: t5Full },
  'tiny-t5-relu': { description: 't5 (T5): ReLU FFN, 8 relative buckets with a table per block, 2 encoder and 2 decoder blocks, tied head, decoder start token 3', config: t5Relu },
  'tiny-t5encoder-relu': { description: "t5encoder (T5's encoder): ReLU FFN, 8 relative buckets, a bias table per block, mean pooling", config: t5encRelu },
};
