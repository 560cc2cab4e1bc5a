// The hrm_text writer (architectures/hrm-text.ts): the tensors and keys llama.cpp's loader
// (src/models/hrm-text.cpp) takes, two stacks' blocks written under a block_count of cache slots.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import type { HrmTextConfig } from './architectures/hrm-text';
import { DEFAULT_PRESET_FOR_ARCH } from './presets';
import { presetPlans, writtenKeys, FFN, QKV } from './writer-spec.suite';

const { config, plan, block, shapes, globals } = presetPlans<HrmTextConfig>();

describe('hrm_text writer', () => {
  it('writes 2 x layers_per_stack blocks of gated attention and SwiGLU, no norm weights, z_l_init', () => {
    const blocks = new Set(plan('tiny-hrm-text').tensors.filter((t) => t.layer !== undefined).map((t) => t.layer));
    expect([...blocks]).toEqual([0, 1, 2, 3]);
    expect(block('tiny-hrm-text', 3)).toEqual([...QKV, 'attn_gate.weight', ...FFN].sort());
    expect(globals('tiny-hrm-text')).toEqual(['token_embd.weight', 'output.weight', 'hrm.z_l_init']);
    expect(globals('tiny-hrm-text-tied')).toEqual(['token_embd.weight', 'hrm.z_l_init']);
    expect(new Set(plan('tiny-hrm-text-tied').tensors.map((t) => t.layer))).toEqual(new Set([undefined, 0, 1]));
    const s = shapes('tiny-hrm-text');
    expect([s.get('hrm.z_l_init'), s.get('blk.2.attn_gate.weight'), s.get('blk.2.attn_k.weight')]).toEqual([[256], [256, 256], [256, 128]]);
    const q = new Map(plan('tiny-hrm-text', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect(q.get('hrm.z_l_init')).toBe(GgmlType.F32);
    expect(q.get('blk.0.attn_gate.weight')).not.toBe(GgmlType.F32);
    expect(DEFAULT_PRESET_FOR_ARCH.hrm_text).toBe('tiny-hrm-text');
  });

  it('writes block_count as the cache slots, the cycles, prefix_lm and embedding_scale when given', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hrm-text-spec-'));
    try {
      const m = writtenKeys(dir, config('tiny-hrm-text'));
      expect(['block_count', 'hrm.layers_per_stack', 'hrm.h_cycles', 'hrm.l_cycles', 'hrm.prefix_lm', 'embedding_scale'].map((k) => m.get(k))).toEqual([12, 2, 2, 2, false, 2]);
      expect(m.kv.get('hrm_text.hrm.prefix_lm')?.type).toBe(GgufType.BOOL);
      const t = writtenKeys(dir, config('tiny-hrm-text-tied'));
      expect([t.get('block_count'), t.get('hrm.prefix_lm'), t.get('embedding_scale')]).toEqual([6, true, undefined]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses configs its loader cannot take', () => {
    expect(() => plan('tiny-hrm-text', { hCycles: 0 })).toThrow(/hCycles must be a positive integer/);
    expect(() => plan('tiny-hrm-text', { hCycles: 3 })).toThrow(/nLayers \(block_count\) must be the KV cache slots layersPerStack x hCycles x \(lCycles \+ 1\) = 18, got 12/);
    expect(() => plan('tiny-hrm-text', { lCycles: 1.5 })).toThrow(/lCycles must be a positive integer/);
    expect(() => plan('tiny-hrm-text', { nExperts: 4, nExpertsUsed: 2 })).toThrow(/dense architecture/);
    expect(() => plan('tiny-hrm-text', { embeddingScale: Number.NaN })).toThrow(/embeddingScale/);
  });
});
