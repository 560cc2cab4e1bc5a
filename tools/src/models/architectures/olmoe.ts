// OLMoE (llama.cpp src/models/olmoe.cpp): q/k RMS norms over the whole projection (n_embd wide),
// NeoX RoPE, routed experts of size feed_forward_length, softmax top-k without renormalization.
import { attention, checkHeads, embeddings, moeFfn, norm, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { baseMetadata, checkExperts } from './common';

export const olmoe: ArchDefinition = {
  name: 'olmoe',
  ggufArch: 'olmoe',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    if (c.nKvHeads !== c.nHeads || c.headDim !== undefined) throw new Error('olmoe: q/k norms span n_embd, so heads must be dim / nHeads with no GQA');
    checkExperts(c, true);
    return c;
  },
  metadata: (c) => baseMetadata('olmoe', c),
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i), norm(`blk.${i}.attn_q_norm.weight`, c.dim, i), norm(`blk.${i}.attn_k_norm.weight`, c.dim, i));
      t.push(...moeFfn(c, i, c.ff));
    }
    return t;
  },
};
