// granite_swa (Granite 4.1 SWA, dense or MoE): the tensors and keys llama.cpp's loader
// (src/models/granite-swa.cpp) takes, as conversion/granite.py GraniteSWAModel / GraniteMoeSWAModel
// write them: a sink per head on every block, the sliding-window and RoPE patterns as BOOL arrays,
// fused gate/up experts and a fused shared expert in the MoE form, FFN biases in the dense one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { GraniteSwaConfig } from './architectures/granite';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_sinks.weight', 'ffn_norm.weight'];
const config = (preset: string, over: Partial<GraniteSwaConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as GraniteSwaConfig;
const plan = (preset: string, over: Partial<GraniteSwaConfig> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel(config(preset, over), type);

describe('granite_swa', () => {
  it('tensors: sinks on every block; MoE with fused gate/up experts and shared expert; dense with FFN biases and a tied head', () => {
    const t = plan('tiny-granite-swa-moe').tensors;
    const block = (ts: typeof t, i: number) => ts.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    for (const i of [0, 1, 2, 3]) expect(block(t, i)).toEqual([...ATTN, 'ffn_gate_inp.weight', 'ffn_gate_up_exps.weight', 'ffn_down_exps.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'].sort());
    const d = plan('tiny-granite-swa').tensors;
    for (const i of [0, 1, 2]) expect(block(d, i)).toEqual([...ATTN, 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', 'ffn_gate.bias', 'ffn_up.bias', 'ffn_down.bias'].sort());
    expect(d.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output_norm.weight']);
    const s = new Map(t.map((x) => [x.name, x.shape]));
    expect(['attn_sinks', 'ffn_gate_up_exps', 'ffn_down_exps', 'ffn_up_shexp', 'ffn_down_shexp'].map((n) => s.get(`blk.2.${n}.weight`))).toEqual([[4], [256, 256, 16], [128, 256, 16], [256, 384], [192, 256]]);
    const q = new Map(plan('tiny-granite-swa-moe', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.attn_sinks.weight'), q.get('blk.0.ffn_gate_inp.weight')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.ffn_gate_up_exps.weight')).not.toBe(GgmlType.F32);
    expect(DEFAULT_PRESET_FOR_ARCH.granite_swa).toBe('tiny-granite-swa-moe');
  });

  it("writes the converter's keys: Granite's multipliers, the window, BOOL patterns, the shared expert's width", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'granite-swa-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config('tiny-granite-swa-moe', { nLayers: 6 }), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const a = 'granite_swa.';
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith(a)).map((k) => [k.slice(a.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 256, block_count: 6, feed_forward_length: 128,
        'attention.head_count': 4, 'attention.head_count_kv': 2, 'rope.freq_base': 10000, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6),
        'rope.dimension_count': 64, expert_count: 16, expert_used_count: 8,
        logit_scale: 6, residual_scale: 0.5, embedding_scale: 2, 'attention.scale': 0.015625,
        'attention.sliding_window': 8,
        // --layers 6: the 4-block patterns repeated.
        'attention.sliding_window_pattern': [false, true, true, true, false, true],
        'attention.rope_pattern': [true, true, true, false, true, true],
        expert_shared_feed_forward_length: 192,
      });
      expect([kv.get(`${a}attention.sliding_window_pattern`)!.elemType, kv.get(`${a}attention.rope_pattern`)!.elemType]).toEqual([GgufType.BOOL, GgufType.BOOL]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-granite-swa-moe', { window: 0 })).toThrow(/positive window/);
    expect(() => plan('tiny-granite-swa-moe', { slide: [] })).toThrow(/slide flags/);
    expect(() => plan('tiny-granite-swa-moe', { ffnBias: true })).toThrow(/FFN biases are the dense form/);
    expect(() => plan('tiny-granite-swa', { fusedExperts: true })).toThrow(/need experts/);
    expect(() => plan('tiny-granite-swa', { ropeBlocks: [] })).toThrow(/ropeBlocks/);
  });
});
