// Qwen3-MoE (src/models/qwen3moe.cpp): per-head q/k RMS norms, head size independent of dim
// (key_length), routed experts with top-k renormalization, no shared expert.
import { attention, checkHeads, embeddings, moeFfn, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export const qwen3moe: ArchDefinition = {
  name: 'qwen3moe',
  ggufArch: 'qwen3moe',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    checkExperts(c, true);
    return c;
  },
  metadata: (c) => [...baseMetadata('qwen3moe', c), ['qwen3moe.expert_feed_forward_length', kv.u32(c.expertFf)]],
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i, { qkNorm: true }));
      t.push(...moeFfn(c, i, c.expertFf));
    }
    return t;
  },
};
