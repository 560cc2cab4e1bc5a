// IBM Granite 3.x (src/models/granite.cpp): `granite` (dense) and `granitemoe` (routed blocks with
// experts as wide as `ff`, plus an ungated shared expert of `sharedFf` when it is not 0), the
// Llama graph with Granite's embedding, attention, residual and logit multipliers.
import { attention, checkHeads, denseFfn, embeddings, moeFfn, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { ungatedSharedExpert } from './deepseek2';

/** The multipliers (converters copy them from the HF config). */
export type GraniteConfig = ModelConfig & { scales: { embedding: number; residual: number; attention: number; logit: number } };

function granite(name: 'granite' | 'granitemoe'): ArchDefinition {
  const moe = name === 'granitemoe';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
      checkHeads(c);
      if (!(c as GraniteConfig).scales) throw new Error(`${name}: needs scales (use a preset)`);
      checkExperts(c, moe);
      if (!moe && c.nExperts > 0) throw new Error('granite: a dense architecture (granitemoe has the experts)');
      return moe ? { ...c, expertFf: c.ff } : c;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const s = (c as GraniteConfig).scales;
      const m: [string, GgufValue][] = [
        ...baseMetadata(name, c),
        [`${name}.logit_scale`, kv.f32(s.logit)],
        [`${name}.residual_scale`, kv.f32(s.residual)],
        [`${name}.embedding_scale`, kv.f32(s.embedding)],
        [`${name}.attention.scale`, kv.f32(s.attention)],
      ];
      if (moe && c.sharedFf > 0) m.push([`${name}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)]);
      return m;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const t = embeddings(c);
      for (let i = 0; i < c.nLayers; i++) {
        t.push(...attention(c, i));
        if (!moe) t.push(...denseFfn(c, i));
        else t.push(...moeFfn(c, i, c.ff), ...(c.sharedFf > 0 ? ungatedSharedExpert(c, i, c.sharedFf) : []));
      }
      return t;
    },
  };
}

export const graniteDense = granite('granite');
export const graniteMoe = granite('granitemoe');
