// The spark2_5 writer (architectures/spark2-5.ts): the tensors and keys llama.cpp's loader
// (src/models/spark2-5.cpp) takes and conversion/spark2_5.py writes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgufType } from '../gguf/constants';
import type { Spark25Config } from './architectures/spark2-5';
import { DEFAULT_PRESET_FOR_ARCH } from './presets';
import { presetPlans, writtenKeys, FFN } from './writer-spec.suite';

const { config, plan, block, shapes, globals } = presetPlans<Spark25Config>();

describe('spark2_5 writer', () => {
  it('writes blocks of fused qkv, a head-wise attn_gate and a gated FFN (or split q/k/v)', () => {
    expect(block('tiny-spark2-5', 3)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_gate.weight', 'attn_output.weight', 'ffn_norm.weight', ...FFN].sort());
    expect(globals('tiny-spark2-5')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const s = shapes('tiny-spark2-5');
    // Q of 4 heads of 64 and K, V of 2: 256 + 128 + 128 rows; one gate per head.
    expect([s.get('blk.0.attn_qkv.weight'), s.get('blk.0.attn_gate.weight'), s.get('blk.0.attn_output.weight')]).toEqual([[256, 512], [256, 4], [256, 256]]);
    expect(plan('tiny-spark2-5', { fusedQkv: false }).tensors.map((t) => t.name)).toEqual(expect.arrayContaining(['blk.0.attn_q.weight', 'blk.0.attn_k.weight', 'blk.0.attn_v.weight']));
    expect(DEFAULT_PRESET_FOR_ARCH.spark2_5).toBe('tiny-spark2-5');
  });

  it('writes the window, the BOOL pattern (every second block full) and both rotary counts', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spark2-5-spec-'));
    try {
      const m = writtenKeys(dir, config('tiny-spark2-5'));
      expect(['attention.sliding_window', 'rope.dimension_count', 'rope.dimension_count_swa', 'rope.freq_base_swa'].map((k) => m.get(k))).toEqual([8, 32, 64, undefined]);
      expect(m.type('attention.sliding_window_pattern')).toBe(GgufType.BOOL);
      expect(Array.from(m.get('attention.sliding_window_pattern') as ArrayLike<boolean>)).toEqual([true, false, true, false]);
      expect(writtenKeys(dir, { ...config('tiny-spark2-5'), ropeBaseSwa: 5e5 } as Spark25Config).get('rope.freq_base_swa')).toBe(5e5);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses configs its loader cannot take', () => {
    expect(() => plan('tiny-spark2-5', { ropeDims: 33 })).toThrow(/ropeDims must be an even count of at most headDim 64/);
    expect(() => plan('tiny-spark2-5', { ropeDimsSwa: 128 })).toThrow(/ropeDimsSwa/);
    expect(() => plan('tiny-spark2-5', { window: 0 })).toThrow(/window must be a positive integer/);
    expect(() => plan('tiny-spark2-5', { nExperts: 4, nExpertsUsed: 2 })).toThrow(/dense architecture/);
    expect(() => plan('tiny-spark2-5', { ropeBaseSwa: -1 })).toThrow(/ropeBaseSwa/);
  });
});
