// Embedding encoders of Llama's block (eurobert, neo-bert, llama-embed: RMS norms, RoPE, SwiGLU,
// no head), jina-bert-v2 (BERT's block with ALiBi, GEGLU or GELU-gated FFNs) and gemma-embedding
// (Gemma 3's block, non-causal, symmetric sliding windows, sentence-transformers projections) against llama.cpp's embedding context (node-llama-cpp), as parity-encoders does for the
// BERT family: kail's embedding is what the engine service returns for /v1/embeddings before
// normalization (LocalModelHost, EMBED_MODEL: the file's pooling type, mean / CLS / last), the
// prompt tokenized with the file's byte-level vocabulary (BOS first).
import type { FileTypeName } from '../models/quant-plan';
import { encoderParityCases } from './encoder-parity.suite';

// (Quantized: one text's 8-bit activation rounding flipping moves it by up to ~2e-5, CLS pooling's one row most; the other texts stay at 1e-14.)
const BOUND: Partial<Record<FileTypeName, number>> = { F32: 1e-11, Q8_0: 1e-4, Q4_K: 1e-4 };
const TYPES: Record<string, FileTypeName[]> = {
  'tiny-eurobert': ['F32', 'Q4_K'],
  'tiny-neo-bert': ['F32', 'Q8_0'],
  'tiny-llama-embed': ['F32', 'Q4_K'],
  'tiny-llama-embed-causal': ['F32'],
  'tiny-jina-bert-v2': ['F32', 'Q4_K'],
  'tiny-jina-bert-v2-gated': ['F32'],
  // (With quantized dense_2 / dense_3 kail projects each row before pooling and llama.cpp the pooled
  // row: the same map, but the projections' 8-bit activations are rounded from other vectors, which
  // moves every text by ~1e-4 (measured Q8_0 6e-5 to 1.2e-4, Q4_K 1.2e-4 to 1.6e-4); the quantized
  // case is the file without them.)
  'tiny-gemma-embedding': ['F32'],
  'tiny-gemma-embedding-plain': ['F32', 'Q4_K'],
  'tiny-modern-bert': ['F32', 'Q8_0'],
  'tiny-modern-bert-swiglu': ['F32'],
};
// jina-bert-v2's, EmbeddingGemma's and ModernBERT's GELU goes through ggml's F16 table: an input one float ulp
// off across an F16 rounding boundary takes the neighbouring entry, which moves a text by up to
// ~5e-10 (jina), ~2e-9 (modern-bert) and ~4e-9 (gemma-embedding-plain's first text; measured; the one-token texts stay
// at 2e-14), where a wrong window, slope or projection moves it by 1e-4 and more.
const GELU_F32 = 3e-8;
const gelu = (preset: string) => preset.startsWith('tiny-jina') || preset.startsWith('tiny-gemma') || preset === 'tiny-modern-bert';
const CASES = Object.entries(TYPES).flatMap(([preset, types]) =>
  types.map((t) => [preset, t, t === 'F32' && gelu(preset) ? GELU_F32 : BOUND[t]!] as [string, FileTypeName, number]),
);

describe("Llama-block encoder embeddings against llama.cpp's embedding context", () => {
  encoderParityCases({ name: 'enc2', cases: CASES });
});
