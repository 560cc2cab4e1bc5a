// The vision-language text decoders of architectures/text-vl.ts (paddleocr, cogvlm, chameleon) and
// muse-glimmer (architectures/muse-glimmer.ts): the tensors and keys each llama.cpp loader
// (src/models/<arch>.cpp) takes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import type { TextVlConfig } from './architectures/text-vl';
import { DEFAULT_PRESET_FOR_ARCH } from './presets';
import { presetPlans, writtenKeys, BIAS, FFN, QKV } from './writer-spec.suite';

const { config, plan, block, shapes, globals } = presetPlans<TextVlConfig>();
const VIS = ['vis_attn_qkv.weight', 'vis_attn_output.weight', 'vis_gate.weight', 'vis_up.weight', 'vis_down.weight'];
const QKN = ['attn_q_norm.weight', 'attn_k_norm.weight'];

describe('text-vl writer', () => {
  it("each block's tensors as its loader names them, and the file-level ones", () => {
    expect(block('tiny-paddleocr', 1)).toEqual(['attn_norm.weight', ...QKV, ...BIAS, 'attn_output.bias', 'ffn_norm.weight', ...FFN].sort());
    expect(block('tiny-cogvlm', 3)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_output.weight', 'ffn_norm.weight', ...FFN, ...VIS].sort());
    expect(block('tiny-chameleon', 0)).toEqual(['attn_norm.weight', ...QKV, ...QKN, 'attn_q_norm.bias', 'attn_k_norm.bias', 'ffn_norm.weight', ...FFN].sort());
    expect(block('tiny-chameleon-swin', 2)).toEqual(['attn_norm.weight', ...QKV, ...QKN, 'ffn_norm.weight', ...FFN].sort());
    expect(globals('tiny-paddleocr')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    expect(globals('tiny-chameleon-swin')).toEqual(['token_embd.weight', 'output_norm.weight']);
  });

  it("shapes: cogvlm's q|k|v thirds (text and vision), chameleon's per-head norms kept F32", () => {
    const c = shapes('tiny-cogvlm');
    expect([c.get('blk.0.attn_qkv.weight'), c.get('blk.0.vis_attn_qkv.weight'), c.get('blk.0.vis_down.weight')]).toEqual([[256, 768], [256, 768], [512, 256]]);
    const m = shapes('tiny-chameleon');
    expect([m.get('blk.0.attn_q_norm.weight'), m.get('blk.0.attn_k_norm.bias'), m.get('output.weight')]).toEqual([[64, 4], [64, 2], [256, 8448]]);
    const q = new Map(plan('tiny-chameleon', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.attn_q_norm.weight'), q.get('blk.0.attn_k_norm.bias')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.attn_q.weight')).not.toBe(GgmlType.F32);
    const v = new Map(plan('tiny-cogvlm', {}, 'Q8_0').tensors.map((x) => [x.name, x.type]));
    expect(v.get('blk.0.vis_attn_qkv.weight')).toBe(GgmlType.Q8_0);
    expect([DEFAULT_PRESET_FOR_ARCH.paddleocr, DEFAULT_PRESET_FOR_ARCH.cogvlm, DEFAULT_PRESET_FOR_ARCH.chameleon]).toEqual(['tiny-paddleocr', 'tiny-cogvlm', 'tiny-chameleon']);
  });

  it('writes the keys the loaders read: sections, swin_norm, the base cogvlm ignores', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'text-vl-spec-'));
    try {
      const p = writtenKeys(dir, config('tiny-paddleocr'));
      expect([p.get('rope.dimension_sections'), p.type('rope.dimension_sections'), p.get('rope.dimension_count')]).toEqual([[16, 8, 8, 0], GgufType.INT32, 64]);
      expect(writtenKeys(dir, config('tiny-cogvlm')).get('rope.freq_base')).toBe(5e5);
      const s = writtenKeys(dir, config('tiny-chameleon-swin'));
      expect([s.get('swin_norm'), s.kv.get('chameleon.swin_norm')?.type]).toEqual([true, GgufType.BOOL]);
      expect(writtenKeys(dir, config('tiny-chameleon')).get('swin_norm')).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("muse-glimmer: its gate and post norms per block, the keys its loader reads", () => {
    expect(block('tiny-muse-glimmer', 3)).toEqual(['attn_norm.weight', ...QKV, ...QKN, 'attn_gate.weight', 'post_attention_norm.weight', 'ffn_norm.weight', ...FFN, 'post_ffw_norm.weight'].sort());
    expect(globals('tiny-muse-glimmer')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    expect(shapes('tiny-muse-glimmer').get('blk.0.attn_gate.weight')).toEqual([256, 256]);
    const q = new Map(plan('tiny-muse-glimmer', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.post_ffw_norm.weight'), q.get('blk.0.attn_q_norm.weight')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.attn_gate.weight')).not.toBe(GgmlType.F32);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'text-vl-spec-'));
    try {
      const m = writtenKeys(dir, config('tiny-muse-glimmer') as never);
      expect(['attention.sliding_window', 'logit_scale', 'final_logit_softcapping', 'rope.freq_base_swa'].map((k) => m.get(k))).toEqual([8, 0.5, 3, 5e4]);
      expect(m.get('attention.sliding_window_pattern')).toBeUndefined();
      const b = writtenKeys(dir, config('tiny-muse-glimmer-pattern') as never);
      expect([b.get('attention.sliding_window_pattern'), b.type('attention.sliding_window_pattern'), b.get('final_logit_softcapping')]).toEqual([[true, false, true, false], GgufType.BOOL, undefined]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(() => plan('tiny-muse-glimmer', { tiedEmbeddings: true })).toThrow(/requires output\.weight/);
    expect(() => plan('tiny-muse-glimmer', { window: 0 } as never)).toThrow(/window/);
    expect(DEFAULT_PRESET_FOR_ARCH['muse-glimmer']).toBe('tiny-muse-glimmer');
  });

  it('refuses configs its loaders cannot take', () => {
    expect(() => plan('tiny-paddleocr', { ropeSections: undefined })).toThrow(/ropeSections are required/);
    expect(() => plan('tiny-cogvlm', { nKvHeads: 2 })).toThrow(/nKvHeads = nHeads/);
    expect(() => plan('tiny-chameleon', { vocabSize: 1024 })).toThrow(/must pass 8196/);
    expect(() => plan('tiny-cogvlm', { swinNorm: true })).toThrow(/chameleon's/);
    expect(() => plan('tiny-chameleon', { qkvBias: true })).toThrow(/paddleocr's/);
  });
});
