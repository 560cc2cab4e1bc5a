// graniteswitch (Granite Switch): the tensors and keys llama.cpp's loader (src/models/granite-switch.cpp)
// takes: a fused attn_qkv, stacked LoRA pairs [n_in, rank, n_slots] / [rank, n_out, n_slots] on the
// seven projections with slot 0 (the base model) zero and kept in F32 by every file type (llama.cpp's
// quantizer leaves tensors whose names do not end in "weight"), Granite's multipliers and the
// adapters' keys (INT32 token id arrays, the router gain only when given).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { GraniteSwitchConfig } from './architectures/granite-switch';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const config = (preset: string, over: Partial<GraniteSwitchConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as GraniteSwitchConfig;
const PROJ = ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'];

describe('graniteswitch', () => {
  it('tensors: fused qkv, a stacked LoRA pair per projection (F32 in every type), slot 0 zero', () => {
    const { tensors } = planModel(config('tiny-graniteswitch'), 'Q4_K_M');
    const block = tensors.filter((x) => x.layer === 1).map((x) => x.name.slice('blk.1.'.length)).sort();
    expect(block).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', ...PROJ.flatMap((p) => [`${p}.lora_a`, `${p}.lora_b`])].sort());
    const s = new Map(tensors.map((x) => [x.name, x]));
    expect(PROJ.map((p) => [s.get(`blk.0.${p}.lora_a`)!.shape, s.get(`blk.0.${p}.lora_b`)!.shape])).toEqual([
      [[256, 4, 5], [4, 256, 5]], [[256, 4, 5], [4, 128, 5]], [[256, 4, 5], [4, 128, 5]], [[256, 4, 5], [4, 256, 5]],
      [[256, 4, 5], [4, 512, 5]], [[256, 4, 5], [4, 512, 5]], [[512, 4, 5], [4, 256, 5]],
    ]);
    expect(s.get('blk.0.attn_qkv.weight')!.shape).toEqual([256, 512]);
    expect(tensors.filter((x) => /lora_[ab]$/.test(x.name)).every((x) => x.type === GgmlType.F32)).toBe(true);
    expect(s.get('blk.0.attn_qkv.weight')!.type).not.toBe(GgmlType.F32);
    const a = generateTensorF32(config('tiny-graniteswitch'), 7, 'blk.2.ffn_down.lora_a');
    expect(a.subarray(0, 512 * 4).every((v) => v === 0)).toBe(true);
    expect(a.subarray(512 * 4, 512 * 8).some((v) => v !== 0)).toBe(true);
    const z = generateTensorF32(config('tiny-graniteswitch-zero'), 7, 'blk.2.ffn_down.lora_b');
    expect(z.every((v) => v === 0)).toBe(true);
    expect(generateTensorF32(config('tiny-graniteswitch-zero'), 7, 'blk.2.ffn_down.lora_a')).toEqual(a);
    expect(DEFAULT_PRESET_FOR_ARCH.graniteswitch).toBe('tiny-graniteswitch');
  });

  it("writes llama.cpp's keys: Granite's multipliers, the adapters' count, rank, INT32 token ids, the gain when given", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'granite-switch-spec-'));
    try {
      const keysOf = (preset: string) => {
        const out = path.join(dir, `${preset}.gguf`);
        writeModel({ config: config(preset, { nLayers: 1 }), fileType: 'F32', seed: 1, out });
        const kv = readGgufHeader(out).kv;
        return { kv, keys: Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('graniteswitch.')).map((k) => [k.slice('graniteswitch.'.length), kv.get(k)!.value])) };
      };
      const { kv, keys } = keysOf('tiny-graniteswitch');
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 256, block_count: 1, feed_forward_length: 512,
        'attention.head_count': 4, 'attention.head_count_kv': 2, 'rope.freq_base': 10000, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6),
        'rope.dimension_count': 64, logit_scale: 6, residual_scale: 0.5, embedding_scale: 2, 'attention.scale': 0.015625,
        'adapters.count': 4, 'adapters.lora_rank': 4, 'adapters.token_ids_activate': [426, 561, 919, 306], 'adapters.token_ids_substitute': [100, 101, 102, 103], 'adapters.router_gain': 15,
      });
      expect(kv.get('graniteswitch.adapters.token_ids_activate')!.elemType).toBe(GgufType.INT32);
      expect(keysOf('tiny-graniteswitch-2').keys['adapters.router_gain']).toBeUndefined();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    const plan = (over: Partial<GraniteSwitchConfig['adapters']>) => planModel(config('tiny-graniteswitch', { adapters: { ...config('tiny-graniteswitch').adapters, ...over } }), 'F32');
    expect(() => plan({ substitute: [1, 2, 3] })).toThrow(/4 activation tokens but 3 substitutes/);
    expect(() => plan({ substitute: [1, 2, 3, 1024] })).toThrow(/token id 1024 is outside the vocabulary of 1024/);
    expect(() => plan({ rank: 0 })).toThrow(/adapters\.rank must be a positive integer/);
    expect(() => plan({ activate: [5, 5, 6, 7] })).toThrow(/activation tokens must be distinct/);
    expect(() => planModel(config('tiny-graniteswitch', { nExperts: 4, nExpertsUsed: 2 }), 'F32')).toThrow(/a dense architecture/);
  });
});
