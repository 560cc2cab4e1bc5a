// Qwen3, dense (src/models/qwen3.cpp): per-head q/k RMS norms, NeoX RoPE, a dense SwiGLU FFN; with
// `clsLabels`, a reranker's classification head (cls.output, pooling rank; llama.cpp scores the
// last token and softmaxes the labels).
import { attention, checkHeads, denseFfn, embeddings, linear, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export const qwen3: ArchDefinition = {
  name: 'qwen3',
  ggufArch: 'qwen3',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkExperts(c, false);
    if (c.nExperts > 0) throw new Error('qwen3: a dense architecture (qwen3moe has the experts)');
    if (c.clsLabels && c.clsLabels.length === 0) throw new Error('qwen3: clsLabels needs at least one label');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = baseMetadata('qwen3', c);
    if (c.clsLabels) m.push(['qwen3.pooling_type', kv.u32(4)], ['qwen3.classifier.output_labels', kv.arr(GgufType.STRING, c.clsLabels)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i, { qkNorm: true }));
      t.push(...denseFfn(c, i));
    }
    if (c.clsLabels) t.push(linear('cls.output.weight', c.dim, c.clsLabels.length, 'output'));
    return t;
  },
};
