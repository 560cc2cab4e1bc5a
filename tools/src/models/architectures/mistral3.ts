// Ministral 3 (`mistral3`, llama.cpp src/models/mistral3.cpp) as conversion/mistral3.py writes it:
// Llama's keys and tensors, YaRN (type, factor, original context, beta_fast/beta_slow, and the log
// multiplier as mscale_all_dim) and Llama 4's attention.temperature_scale.
import { attention, checkHeads, denseFfn, embeddings, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type Mistral3Config = ModelConfig & {
  yarn: { factor: number; origCtx: number; betaFast: number; betaSlow: number; logMul: number };
  tempScale: number;
};

export const mistral3: ArchDefinition = {
  name: 'mistral3',
  ggufArch: 'mistral3',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    const m = c as Mistral3Config;
    if (!m.yarn || !(m.yarn.factor > 1) || !(m.yarn.origCtx > 0)) throw new Error('mistral3: needs yarn options (use a preset)');
    if (c.nExperts > 0) throw new Error('mistral3: the dense form only');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as Mistral3Config;
    const a = 'mistral3';
    return [
      ...baseMetadata(a, c),
      [`${a}.rope.scaling.type`, kv.str('yarn')],
      [`${a}.rope.scaling.factor`, kv.f32(m.yarn.factor)],
      [`${a}.rope.scaling.original_context_length`, kv.u32(m.yarn.origCtx)],
      [`${a}.rope.scaling.yarn_beta_fast`, kv.f32(m.yarn.betaFast)],
      [`${a}.rope.scaling.yarn_beta_slow`, kv.f32(m.yarn.betaSlow)],
      [`${a}.rope.scaling.yarn_log_multiplier`, kv.f32(m.yarn.logMul)],
      [`${a}.attention.temperature_scale`, kv.f32(m.tempScale)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i), ...denseFfn(c, i));
    return t;
  },
};
