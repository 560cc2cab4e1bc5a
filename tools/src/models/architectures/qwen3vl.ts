// Qwen3-VL's language models (src/models/qwen3vl.cpp, qwen3vlmoe.cpp): Qwen3 / Qwen3-MoE blocks
// with interleaved M-RoPE sections (rope.dimension_sections) and n_deepstack_layers (the vision
// tower's features added to the first blocks' outputs; zero for text tokens). The vision tower
// itself lives in a separate mmproj file.
import type { ArchDefinition, ModelConfig } from '../arch';
import { headDim } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { qwen3 } from './qwen3';
import { qwen3moe } from './qwen3moe';

/** ropeSections: the 4 M-RoPE sections (time, height, width, extra), in rotated pairs. */
export type Qwen3VlConfig = ModelConfig & { ropeSections: number[]; deepstack: number };

function vl(base: ArchDefinition, name: string): ArchDefinition {
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      const v = c as Qwen3VlConfig;
      const out = base.normalize({ ...c, arch: base.name }) as Qwen3VlConfig;
      if (!Array.isArray(v.ropeSections) || v.ropeSections.length !== 4 || v.ropeSections.some((s) => !Number.isInteger(s) || s < 0))
        throw new Error(`${name}: ropeSections must be 4 non-negative integers`);
      if (v.ropeSections.reduce((a, b) => a + b, 0) > headDim(c) / 2) throw new Error(`${name}: ropeSections cover more than the head's ${headDim(c) / 2} rotated pairs`);
      return { ...out, arch: name, ropeSections: v.ropeSections, deepstack: v.deepstack ?? 0 } as Qwen3VlConfig;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const v = c as Qwen3VlConfig;
      return [
        ...base.metadata(c).map(([k, val]): [string, GgufValue] => [k.replace(`${base.ggufArch}.`, `${name}.`), val]),
        [`${name}.rope.dimension_sections`, kv.arr(GgufType.INT32, v.ropeSections)],
        [`${name}.n_deepstack_layers`, kv.u32(v.deepstack)],
      ];
    },
    tensors: (c) => base.tensors(c),
  };
}

export const qwen3vl = vl(qwen3, 'qwen3vl');
export const qwen3vlmoe = vl(qwen3moe, 'qwen3vlmoe');
