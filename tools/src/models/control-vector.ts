// Control vectors for the project's test models, in llama.cpp's format (what its cvector-generator
// and repeng write): general.architecture "controlvector", controlvector.model_hint (the base
// architecture), controlvector.layer_count, and one F32 vector direction.N of n_embd values per
// layer N it steers (N from 1). Random directions, seeded per tensor name like the models'.
import { GgmlType } from '../gguf/constants';
import { GgufWriter, kv } from '../gguf/writer';
import type { ModelConfig } from './arch';
import { getArch } from './architectures';
import { hashSeed, Xoshiro128 } from './rng';

export interface WriteControlVectorOptions {
  /** The base model's config. */
  config: ModelConfig;
  out: string;
  /** The layers with a direction (each 1 .. nLayers - 1, as llama.cpp applies them). Default all of them. */
  layers?: number[];
  /** Standard deviation of the directions' values. Default 0.5 (the residual stream's scale is about 1). */
  std?: number;
  seed?: number;
}

export function writeControlVector(opts: WriteControlVectorOptions): { path: string; layers: number[] } {
  const c = opts.config;
  const layers = opts.layers ?? Array.from({ length: c.nLayers - 1 }, (_, i) => i + 1);
  for (const l of layers) if (!Number.isInteger(l) || l < 1) throw new Error(`control vector layers start at 1, got ${l}`);
  const w = new GgufWriter(opts.out);
  w.set('general.architecture', kv.str('controlvector'));
  w.set('controlvector.model_hint', kv.str(getArch(c.arch).ggufArch));
  w.set('controlvector.layer_count', kv.u32(layers.length));
  for (const l of layers) w.addTensor({ name: `direction.${l}`, shape: [c.dim], type: GgmlType.F32 });
  w.begin();
  try {
    for (const l of layers) {
      const v = new Float32Array(c.dim);
      new Xoshiro128(hashSeed(opts.seed ?? 1, `direction.${l}`)).fillNormal(v, 0, opts.std ?? 0.5);
      w.writeTensorData(`direction.${l}`, new Uint8Array(v.buffer));
    }
    w.finish();
  } catch (e) {
    w.abort();
    throw e;
  }
  return { path: opts.out, layers };
}
