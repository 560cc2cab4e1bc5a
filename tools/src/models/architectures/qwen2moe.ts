// Qwen1.5-MoE / Qwen2-MoE (src/models/qwen2moe.cpp): q/k/v biases, routed experts of size
// expert_feed_forward_length without top-k renormalization, plus a sigmoid-gated shared expert.
import { attention, checkHeads, embeddings, moeFfn, requirePositive, sharedExpert } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export const qwen2moe: ArchDefinition = {
  name: 'qwen2moe',
  ggufArch: 'qwen2moe',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'sharedFf']);
    checkHeads(c);
    // qwen2moe builds q and the output projection as n_embd wide.
    if (c.headDim !== undefined && c.headDim * c.nHeads !== c.dim) throw new Error('qwen2moe: headDim*heads must equal dim');
    checkExperts(c, true);
    return c;
  },
  metadata: (c) => [
    ...baseMetadata('qwen2moe', c),
    ['qwen2moe.expert_feed_forward_length', kv.u32(c.expertFf)],
    ['qwen2moe.expert_shared_feed_forward_length', kv.u32(c.sharedFf)],
  ],
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i, { qkvBias: true }));
      t.push(...moeFfn(c, i, c.expertFf));
      t.push(...sharedExpert(c, i));
    }
    return t;
  },
};
