// GLM-4.5 (llama.cpp src/models/glm4-moe.cpp): Q/K/V biases, optional per-head q/k norms, partial
// NeoX RoPE, `post_attention_norm` as the FFN input norm, leading dense blocks, sigmoid-routed
// experts with a selection bias, normalization and scale, plus shared experts.
import { attention, checkHeads, embeddings, headDim, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import { baseMetadata } from './common';
import { checkDeepseekMoe, deepseekFfn, deepseekMoeMetadata } from './deepseek2';
import type { DeepseekMoeOptions } from './deepseek2';

/**
 * nextn: multi-token-prediction blocks counted in block_count (as GLM-4.5 files do) but not written
 * (a trunk-only file, which llama.cpp accepts); the decoder must leave them out.
 */
export type Glm4MoeConfig = ModelConfig & { moe: DeepseekMoeOptions; qkNorm: boolean; ropeDims: number; nextn?: number };

export const glm4moe: ArchDefinition = {
  name: 'glm4moe',
  ggufArch: 'glm4moe',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as Glm4MoeConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'ropeDims' as keyof ModelConfig]);
    checkHeads(c);
    checkDeepseekMoe(c, g.moe);
    if (g.ropeDims > headDim(c) || g.ropeDims % 2 !== 0) throw new Error('glm4moe: ropeDims must be even and at most the head size');
    return c;
  },
  metadata(c: ModelConfig) {
    const g = c as Glm4MoeConfig;
    return [
      ...baseMetadata('glm4moe', c).filter(([k]) => k !== 'glm4moe.rope.dimension_count' && k !== 'glm4moe.block_count'),
      ['glm4moe.block_count', kv.u32(c.nLayers + (g.nextn ?? 0))],
      ['glm4moe.nextn_predict_layers', kv.u32(g.nextn ?? 0)],
      ['glm4moe.rope.dimension_count', kv.u32(g.ropeDims)],
      ...deepseekMoeMetadata('glm4moe', c, g.moe),
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as Glm4MoeConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i, { qkvBias: true, qkNorm: g.qkNorm }));
      t.push(...deepseekFfn(c, g.moe, i, 'post_attention_norm'));
    }
    return t;
  },
};
