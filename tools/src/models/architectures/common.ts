import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { headDim } from '../arch';
import type { ModelConfig } from '../arch';

/** The sizes every model here writes: vocabulary, context, width, blocks, FFN width, head counts. */
export function sizeMetadata(arch: string, c: ModelConfig): [string, GgufValue][] {
  return [
    [`${arch}.vocab_size`, kv.u32(c.vocabSize)],
    [`${arch}.context_length`, kv.u32(c.ctx)],
    [`${arch}.embedding_length`, kv.u32(c.dim)],
    [`${arch}.block_count`, kv.u32(c.nLayers)],
    [`${arch}.feed_forward_length`, kv.u32(c.ff)],
    [`${arch}.attention.head_count`, kv.u32(c.nHeads)],
    [`${arch}.attention.head_count_kv`, kv.u32(c.nKvHeads)],
  ];
}

/** The `<arch>.*` keys every transformer here shares (llama.cpp load_hparams). */
export function baseMetadata(arch: string, c: ModelConfig): [string, GgufValue][] {
  const m: [string, GgufValue][] = [
    ...sizeMetadata(arch, c),
    [`${arch}.rope.freq_base`, kv.f32(c.ropeBase)],
    [`${arch}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
    [`${arch}.rope.dimension_count`, kv.u32(headDim(c))],
  ];
  if (c.headDim !== undefined) {
    m.push([`${arch}.attention.key_length`, kv.u32(c.headDim)], [`${arch}.attention.value_length`, kv.u32(c.headDim)]);
  }
  if (c.nExperts > 0) {
    m.push([`${arch}.expert_count`, kv.u32(c.nExperts)], [`${arch}.expert_used_count`, kv.u32(c.nExpertsUsed)]);
  }
  return m;
}

export function checkExperts(c: ModelConfig, required: boolean): void {
  if (required && c.nExperts <= 0) throw new Error(`${c.arch}: needs experts (--experts)`);
  if (c.nExperts > 0 && (c.nExpertsUsed <= 0 || c.nExpertsUsed > c.nExperts)) {
    throw new Error(`${c.arch}: experts-used ${c.nExpertsUsed} must be in [1, ${c.nExperts}]`);
  }
}
