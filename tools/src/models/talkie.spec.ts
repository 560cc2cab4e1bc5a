// The talkie writer (architectures/talkie.ts): the tensors and keys llama.cpp's loader
// (src/models/talkie.cpp) takes: no norm weights, a q gain {1, n_head}, layer_output_scale {1},
// split or fused qkv, the converter's attn_output.scale / ffn_down.scale.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import type { TalkieConfig } from './architectures/talkie';
import { DEFAULT_PRESET_FOR_ARCH } from './presets';
import { presetPlans, writtenKeys, FFN, QKV } from './writer-spec.suite';

const { config, plan, block, shapes, globals } = presetPlans<TalkieConfig>();

describe('talkie writer', () => {
  it('writes split or fused qkv, the per-head q gain, layer_output_scale and no norm weights', () => {
    expect(block('tiny-talkie', 3)).toEqual([...QKV, ...FFN, 'attn_q_norm.weight', 'layer_output_scale.weight', 'attn_output.scale', 'ffn_down.scale'].sort());
    expect(block('tiny-talkie-fused', 0)).toEqual(['attn_qkv.weight', 'attn_output.weight', ...FFN, 'attn_q_norm.weight', 'layer_output_scale.weight'].sort());
    expect(globals('tiny-talkie')).toEqual(['token_embd.weight', 'output.weight']);
    const s = shapes('tiny-talkie');
    expect([s.get('blk.1.attn_q_norm.weight'), s.get('blk.1.layer_output_scale.weight'), s.get('blk.1.ffn_down.scale')]).toEqual([[1, 4], [1], [1]]);
    expect(shapes('tiny-talkie-fused').get('blk.0.attn_qkv.weight')).toEqual([256, 768]);
    const q = new Map(plan('tiny-talkie', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of ['blk.0.attn_q_norm.weight', 'blk.0.layer_output_scale.weight', 'blk.0.attn_output.scale']) expect(q.get(n)).toBe(GgmlType.F32);
    expect(DEFAULT_PRESET_FOR_ARCH.talkie).toBe('tiny-talkie');
  });

  it('writes logit_scale and the rms epsilon', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'talkie-spec-'));
    try {
      const m = writtenKeys(dir, config('tiny-talkie'));
      expect(m.get('logit_scale')).toBeCloseTo(1.7, 6);
      expect(m.get('attention.layer_norm_rms_epsilon')).toBeCloseTo(1.1920929e-7, 12);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses configs its loader cannot take', () => {
    expect(() => plan('tiny-talkie', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
    expect(() => plan('tiny-talkie', { nExperts: 4, nExpertsUsed: 2 })).toThrow(/dense architecture/);
    expect(() => plan('tiny-talkie', { logitScale: Number.NaN })).toThrow(/logitScale/);
  });
});
