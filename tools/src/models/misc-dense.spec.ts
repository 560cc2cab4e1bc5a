// The dense decoders of architectures/misc-dense.ts (qwen2vl, hunyuan_vl, plamo, plamo3,
// pangu-embedded, openelm): the tensors and keys each llama.cpp loader (src/models/<arch>.cpp) takes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import type { MiscDenseConfig } from './architectures/misc-dense';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { presetPlans, writtenKeys, BIAS, FFN, QKV } from './writer-spec.suite';

const { config, plan, block, shapes, globals } = presetPlans<MiscDenseConfig>();

describe('misc-dense writer', () => {
  it("each block's tensors as its loader names them, and the file-level ones", () => {
    expect(block('tiny-qwen2vl', 1)).toEqual(['attn_norm.weight', ...QKV, ...BIAS, 'ffn_norm.weight', ...FFN].sort());
    expect(globals('tiny-qwen2vl')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight', 'output.bias']);
    expect(block('tiny-hunyuan-vl', 0)).toEqual(['attn_norm.weight', ...QKV, 'attn_q_norm.weight', 'attn_k_norm.weight', 'ffn_norm.weight', ...FFN].sort());
    expect(block('tiny-plamo', 2)).toEqual(['attn_norm.weight', ...QKV, ...BIAS, ...FFN].sort());
    expect(globals('tiny-plamo')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const p3 = ['attn_norm.weight', 'attn_qkv.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_up.weight', 'ffn_down.weight'];
    expect(block('tiny-plamo3', 7)).toEqual([...p3, 'post_attention_norm', 'post_ffw_norm'].sort());
    expect(block('tiny-plamo3-pattern', 0)).toEqual([...p3, 'post_attention_norm', 'post_ffw_norm'].sort());
    expect(plan('tiny-plamo3', { postNormWeightNames: true }).tensors.filter((x) => x.layer === 0 && x.name.includes('.post_')).map((x) => x.name)).toEqual(['blk.0.post_attention_norm.weight', 'blk.0.post_ffw_norm.weight']);
    expect(globals('tiny-plamo3')).toEqual(['token_embd.weight', 'output_norm.weight']);
    expect(block('tiny-pangu-embedded', 3)).toEqual(['attn_norm.weight', ...QKV, ...BIAS, 'attn_output.bias', 'ffn_norm.weight', ...FFN].sort());
    expect(globals('tiny-pangu-embedded')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight', 'rope_freqs.weight']);
    expect(block('tiny-openelm', 2)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.weight', 'ffn_norm.weight', ...FFN].sort());
    expect(globals('tiny-openelm')).toEqual(['token_embd.weight', 'output_norm.weight']);
  });

  it("shapes: openelm's per-block q|k|v rows and FFN widths, plamo3's fused gate|up; biases and norms stay F32", () => {
    const e = shapes('tiny-openelm');
    expect([0, 1, 2, 3].map((i) => e.get(`blk.${i}.attn_qkv.weight`))).toEqual([[256, 384], [256, 512], [256, 768], [256, 768]]);
    expect([0, 1, 2, 3].map((i) => e.get(`blk.${i}.attn_output.weight`))).toEqual([[256, 256], [256, 256], [512, 256], [256, 256]]);
    expect([0, 1, 2, 3].map((i) => e.get(`blk.${i}.ffn_down.weight`))).toEqual([[256, 256], [512, 256], [768, 256], [512, 256]]);
    const p = shapes('tiny-plamo3');
    expect([p.get('blk.0.attn_qkv.weight'), p.get('blk.0.ffn_up.weight'), p.get('blk.0.ffn_down.weight')]).toEqual([[256, 512], [256, 1024], [512, 256]]);
    const q = new Map(plan('tiny-plamo3-pattern', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.post_ffw_norm'), q.get('blk.0.attn_q_norm.weight')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.attn_qkv.weight')).not.toBe(GgmlType.F32);
    const b = new Map(plan('tiny-pangu-embedded', {}, 'Q8_0').tensors.map((x) => [x.name, x.type]));
    expect([b.get('blk.0.attn_output.bias'), b.get('rope_freqs.weight')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(DEFAULT_PRESET_FOR_ARCH.qwen2vl).toBe('tiny-qwen2vl');
    expect(DEFAULT_PRESET_FOR_ARCH['pangu-embedded']).toBe('tiny-pangu-embedded');
  });

  it('writes the keys the loaders read: sections, alpha, windows and their base, per-block arrays', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'misc-dense-spec-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, config(preset));
      const v = keys('tiny-qwen2vl');
      expect([v.get('rope.dimension_sections'), v.type('rope.dimension_sections'), v.get('rope.dimension_count')]).toEqual([[16, 8, 8, 0], GgufType.INT32, 64]);
      const h = keys('tiny-hunyuan-vl');
      expect([h.get('rope.scaling.alpha'), h.get('rope.dimension_sections')]).toEqual([1000, [16, 8, 8, 0]]);
      const p = keys('tiny-plamo3-pattern');
      expect([p.get('attention.sliding_window'), p.get('attention.sliding_window_pattern'), p.type('attention.sliding_window_pattern'), p.get('rope.freq_base_swa')]).toEqual([6, [true, false, true, false], GgufType.BOOL, 50000]);
      const d = keys('tiny-plamo3');
      expect([d.get('attention.sliding_window'), d.get('attention.sliding_window_pattern'), d.get('rope.freq_base_swa')]).toEqual([8, undefined, undefined]);
      const o = keys('tiny-openelm');
      expect([o.get('attention.head_count'), o.get('attention.head_count_kv'), o.get('feed_forward_length'), o.type('attention.head_count')]).toEqual([[4, 4, 8, 4], [1, 2, 2, 4], [256, 512, 768, 512], GgufType.INT32]);
      expect([o.get('attention.key_length'), o.get('attention.value_length')]).toEqual([64, 64]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses configs the loaders cannot take', () => {
    expect(() => plan('tiny-plamo', { tiedEmbeddings: true })).toThrow(/requires output\.weight/);
    expect(() => plan('tiny-openelm', { tiedEmbeddings: false })).toThrow(/reads no output\.weight/);
    expect(() => plan('tiny-qwen2vl', { ropeSections: undefined })).toThrow(/ropeSections/);
    expect(() => plan('tiny-qwen2vl', { ropeSections: [32, 8, 0, 0] })).toThrow(/ropeSections/);
    expect(() => plan('tiny-openelm', { heads: [4, 4, 8] })).toThrow(/heads needs one positive integer per block/);
    expect(() => plan('tiny-openelm', { kvHeads: [3, 2, 2, 4] })).toThrow(/not divisible/);
    expect(() => plan('tiny-hunyuan-vl', { window: 8 })).toThrow(/plamo3's/);
  });
});
