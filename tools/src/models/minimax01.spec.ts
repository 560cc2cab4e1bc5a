// minimax-01: the tensor list and keys llama.cpp's loader (src/models/minimax-01.cpp) takes, as
// conversion/minimax.py writes them, and the three ways it picks the lightning blocks.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { getArch } from './architectures';
import { planModel, writeModel } from './build';
import { getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));
const lightning = (preset: string) => {
  const s = shapes(preset);
  return Array.from({ length: getPreset(preset).config.nLayers }, (_, i) => s.has(`blk.${i}.attn_qkv.weight`));
};

describe('minimax-01', () => {
  it('lightning blocks: fused q|k|v, attn_norm_2 and attn_gate; softmax blocks: q/k/v; experts of feed_forward_length in every block', () => {
    const s = shapes('tiny-minimax-01');
    for (let i = 0; i < 7; i++) {
      expect(s.get(`blk.${i}.attn_qkv.weight`)).toEqual([256, 3 * 8 * 64]);
      expect(s.get(`blk.${i}.attn_gate.weight`)).toEqual([256, 8 * 64]);
      expect(s.get(`blk.${i}.attn_norm_2.weight`)).toEqual([8 * 64]);
      expect(s.has(`blk.${i}.attn_q.weight`)).toBe(false);
    }
    expect(s.get('blk.7.attn_q.weight')).toEqual([256, 8 * 64]);
    expect(s.get('blk.7.attn_k.weight')).toEqual([256, 2 * 64]);
    expect(s.get('blk.7.attn_v.weight')).toEqual([256, 2 * 64]);
    expect(s.has('blk.7.attn_qkv.weight')).toBe(false);
    expect(s.has('blk.7.attn_norm_2.weight')).toBe(false);
    for (let i = 0; i < 8; i++) {
      expect(s.get(`blk.${i}.attn_norm.weight`)).toEqual([256]);
      expect(s.get(`blk.${i}.attn_output.weight`)).toEqual([512, 256]);
      expect(s.get(`blk.${i}.ffn_norm.weight`)).toEqual([256]);
      expect(s.get(`blk.${i}.ffn_gate_inp.weight`)).toEqual([256, 8]);
      expect(s.get(`blk.${i}.ffn_gate_exps.weight`)).toEqual([256, 128, 8]);
      expect(s.get(`blk.${i}.ffn_down_exps.weight`)).toEqual([128, 256, 8]);
    }
    // 3 globals; per block 2 norms, attn_output and 4 expert tensors; 3 more per lightning block, 3 per softmax block.
    expect(s.size).toBe(3 + 8 * 7 + 8 * 3);
  });

  it('picks the lightning blocks as llama.cpp: the default interval of 8, full_attention_interval, attention.recurrent_layers', () => {
    expect(lightning('tiny-minimax-01')).toEqual([true, true, true, true, true, true, true, false]);
    expect(lightning('tiny-minimax-01-interval')).toEqual([true, false, true, false]);
    expect(lightning('tiny-minimax-01-recurrent-layers')).toEqual([true, false, true, true]);
  });

  it('writes the converter keys: residual_scale, rotary_dim, key_length; the layer keys only where a variant has them', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-minimax01-'));
    try {
      const kvOf = (preset: string) => {
        const out = path.join(dir, `${preset}.gguf`);
        writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 1, out });
        return readGgufHeader(out).kv;
      };
      const kv = kvOf('tiny-minimax-01');
      const v = (k: string) => kv.get(`minimax-01.${k}`)?.value;
      expect(kv.get('general.architecture')!.value).toBe('minimax-01');
      expect(kv.get('minimax-01.residual_scale')!.type).toBe(GgufType.FLOAT32);
      expect(v('residual_scale')).toBe(2);
      expect(v('rope.dimension_count')).toBe(32);
      expect([v('attention.key_length'), v('attention.value_length')]).toEqual([64, 64]);
      expect([v('attention.head_count'), v('attention.head_count_kv'), v('feed_forward_length'), v('expert_count'), v('expert_used_count')]).toEqual([8, 2, 128, 8, 2]);
      expect(v('attention.layer_norm_rms_epsilon')).toBeCloseTo(1e-5, 10);
      expect(kv.has('minimax-01.full_attention_interval')).toBe(false);
      expect(kv.has('minimax-01.attention.recurrent_layers')).toBe(false);
      expect(kv.has('minimax-01.expert_feed_forward_length')).toBe(false);
      expect(kvOf('tiny-minimax-01-interval').get('minimax-01.full_attention_interval')!.value).toBe(2);
      const r = kvOf('tiny-minimax-01-recurrent-layers').get('minimax-01.attention.recurrent_layers')!;
      expect(r.elemType).toBe(GgufType.BOOL);
      expect(r.value).toEqual([true, false, true, true]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('norms stay F32, the projections quantize', () => {
    const t = new Map(planModel(getPreset('tiny-minimax-01').config, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of ['attn_norm.weight', 'attn_norm_2.weight', 'ffn_norm.weight']) expect([n, t.get(`blk.0.${n}`)]).toEqual([n, GgmlType.F32]);
    for (const n of ['attn_qkv.weight', 'attn_gate.weight', 'attn_output.weight', 'ffn_up_exps.weight']) expect([n, t.get(`blk.0.${n}`)]).not.toEqual([n, GgmlType.F32]);
  });

  it('rejects inconsistent configurations', () => {
    const c = getPreset('tiny-minimax-01-recurrent-layers').config;
    expect(() => planModel({ ...c, nLayers: 1, layers: { interval: 2 } } as typeof c, 'F32')).toThrow(/at least 2 blocks/);
    expect(() => planModel({ ...c, layers: { recurrent: [true, false] } } as typeof c, 'F32')).toThrow(/one flag per block/);
    expect(() => planModel({ ...c, layers: { interval: 0 } } as typeof c, 'F32')).toThrow(/interval must be a positive integer/);
    expect(() => planModel({ ...c, ropeDims: 66 } as typeof c, 'F32')).toThrow(/ropeDims/);
    expect(() => planModel({ ...c, nExperts: 0, nExpertsUsed: 0 }, 'F32')).toThrow(/experts/);
    expect(getArch('minimax-01').ggufArch).toBe('minimax-01');
  });
});
