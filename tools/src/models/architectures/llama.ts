// llama (dense) and its MoE form, Mixtral: same GGUF architecture "llama", experts through
// llama.expert_count with ffn_*_exps tensors of size feed_forward_length (src/models/llama.cpp).
import { attention, checkHeads, denseFfn, embeddings, headDim, moeFfn, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { baseMetadata, checkExperts } from './common';
import { longRopeMetadata, longRopeTensors, type Phi3Config } from './phi3';

function normalize(c: ModelConfig): ModelConfig {
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  checkHeads(c);
  // llama.cpp requires n_rot == head size for llama, and attention width == dim here.
  if (c.headDim !== undefined && c.headDim * c.nHeads !== c.dim) throw new Error(`${c.arch}: headDim*heads must equal dim`);
  checkExperts(c, c.arch === 'mixtral');
  return c;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const t = [...embeddings(c), ...longRopeTensors(headDim(c), (c as Phi3Config).longrope)];
  for (let i = 0; i < c.nLayers; i++) {
    t.push(...attention(c, i));
    t.push(...(c.nExperts > 0 ? moeFfn(c, i, c.ff) : denseFfn(c, i)));
  }
  return t;
}

export const llama: ArchDefinition = {
  name: 'llama',
  ggufArch: 'llama',
  normalize,
  // (`longrope`: LongRoPE tables with rope.scaling.type longrope, which llama.cpp's llama loader reads then.)
  metadata: (c) => [...baseMetadata('llama', c), ...longRopeMetadata('llama', c, (c as Phi3Config).longrope)],
  tensors,
};

export const mixtral: ArchDefinition = { ...llama, name: 'mixtral' };
