// What the writer specs of the dense families (llama-dense, gpt2-writer, misc-dense, jais-bitnet,
// encoders2) share: plans of a preset with overrides (its tensors per block, their shapes, the
// tensors outside blocks), the usual attention and FFN tensor names, and the keys a written F32 file
// carries. (Test-only: left out of the tools build by tsconfig.lib.json's *.suite.ts.)
import path from 'node:path';

import { readGgufHeader } from '../gguf/reader';
import type { ModelConfig } from './arch';
import { planModel, writeModel } from './build';
import { getPreset } from './presets';
import type { FileTypeName } from './quant-plan';

export const QKV = ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight'];
export const FFN = ['ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
export const BIAS = ['attn_q.bias', 'attn_k.bias', 'attn_v.bias'];

/** Plans of presets whose config type is C. */
export function presetPlans<C extends ModelConfig>() {
  const config = (preset: string, over: Partial<C> = {}) => ({ ...getPreset(preset).config, ...over }) as C;
  const plan = (preset: string, over: Partial<C> = {}, type: FileTypeName = 'F32') => planModel(config(preset, over), type);
  /** Block i's tensor names, less `blk.i.`, sorted. */
  const block = (preset: string, i: number) =>
    plan(preset).tensors.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
  const shapes = (preset: string) => new Map(plan(preset).tensors.map((x) => [x.name, x.shape]));
  /** The tensors outside blocks, in plan order. */
  const globals = (preset: string) => plan(preset).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
  return { config, plan, block, shapes, globals };
}

/** Writes `config` as F32 (seed 1) in `dir` and reads its keys back: get/type take a key without the architecture prefix. */
export function writtenKeys(dir: string, config: ModelConfig) {
  const out = path.join(dir, `${config.name}.gguf`);
  writeModel({ config, fileType: 'F32', seed: 1, out });
  const kv = readGgufHeader(out).kv;
  return { kv, names: [...kv.keys()], get: (k: string) => kv.get(`${config.arch}.${k}`)?.value, type: (k: string) => kv.get(`${config.arch}.${k}`)?.elemType };
}
