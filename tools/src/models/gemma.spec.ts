// gemma / gemma2 / gemma3 (dense Gemma 1-3): the tensor lists and keys llama.cpp's loaders
// (src/models/gemma.cpp, gemma2.cpp, gemma3.cpp) take, as conversion/gemma.py writes them, and the
// residual-write scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { readGgufHeader } from '../gguf/reader';
import type { GemmaConfig } from './architectures/gemma';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight'];
const FFN = ['ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];

const plan = (preset: string, over: Partial<GemmaConfig> = {}) => planModel({ ...getPreset(preset).config, ...over } as GemmaConfig, 'F32');
const block = (preset: string, i: number) =>
  plan(preset)
    .tensors.filter((x) => x.layer === i)
    .map((x) => x.name.slice(`blk.${i}.`.length))
    .sort();
const globals = (preset: string, over: Partial<GemmaConfig> = {}) =>
  plan(preset, over)
    .tensors.filter((x) => x.layer === undefined)
    .map((x) => [x.name, x.shape]);

const mean = (a: Float32Array) => a.reduce((s, x) => s + x, 0) / a.length;
const std = (a: Float32Array) => Math.sqrt(a.reduce((s, x) => s + x * x, 0) / a.length - mean(a) ** 2);

describe('gemma / gemma2 / gemma3', () => {
  it('tensors: plain pre-norm blocks, post norms from gemma2, q/k norms on gemma3; the head is token_embd', () => {
    expect(block('tiny-gemma', 0)).toEqual([...ATTN, ...FFN].sort());
    expect(block('tiny-gemma2', 3)).toEqual([...ATTN, ...FFN, 'post_attention_norm.weight', 'post_ffw_norm.weight'].sort());
    expect(block('tiny-gemma3', 5)).toEqual([...ATTN, ...FFN, 'post_attention_norm.weight', 'post_ffw_norm.weight', 'attn_q_norm.weight', 'attn_k_norm.weight'].sort());
    const head = [['token_embd.weight', [64, 1024]], ['output_norm.weight', [64]]];
    for (const p of ['tiny-gemma', 'tiny-gemma2', 'tiny-gemma3']) expect(globals(p)).toEqual(head);
    // gemma / gemma2 always read the head from token_embd; gemma3 takes output.weight when present.
    expect(globals('tiny-gemma2', { tiedEmbeddings: false })).toEqual(head);
    expect(globals('tiny-gemma3', { tiedEmbeddings: false })).toEqual([...head, ['output.weight', [64, 1024]]]);
    expect([plan('tiny-gemma').tensors.length, plan('tiny-gemma2').tensors.length, plan('tiny-gemma3').tensors.length]).toEqual([2 + 4 * 9, 2 + 4 * 11, 2 + 6 * 13]);
    expect([DEFAULT_PRESET_FOR_ARCH.gemma, DEFAULT_PRESET_FOR_ARCH.gemma2, DEFAULT_PRESET_FOR_ARCH.gemma3]).toEqual(['tiny-gemma', 'tiny-gemma2', 'tiny-gemma3']);
  });

  it('attention width is heads x key_length, apart from n_embd (MQA on tiny-gemma)', () => {
    const shapes = (p: string) => {
      const s = new Map(plan(p).tensors.map((t) => [t.name, t.shape]));
      return ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_q_norm', 'attn_k_norm'].map((n) => s.get(`blk.0.${n}.weight`));
    };
    expect(shapes('tiny-gemma')).toEqual([[64, 128], [64, 32], [64, 32], [128, 64], undefined, undefined]);
    expect(shapes('tiny-gemma2')).toEqual([[64, 64], [64, 32], [64, 32], [64, 64], undefined, undefined]);
    expect(shapes('tiny-gemma3')).toEqual([[64, 128], [64, 64], [64, 64], [128, 64], [32], [32]]);
  });

  it('rejects configs the loaders cannot take', () => {
    expect(() => plan('tiny-gemma2', { softcap: 0 })).toThrow(/positive/);
    expect(() => plan('tiny-gemma2', { window: 0 })).toThrow(/positive/);
    expect(() => plan('tiny-gemma', { headDim: 15 })).toThrow(/even/);
    expect(() => plan('tiny-gemma', { headDim: undefined as unknown as number })).toThrow(/headDim/);
    expect(() => plan('tiny-gemma3', { nKvHeads: 3 })).toThrow(/divisible/);
    expect(() => plan('tiny-gemma', { nExperts: 4, nExpertsUsed: 2 })).toThrow(/dense/);
  });

  it('residual writes at 2/sqrt(2L): post-norm gains on gemma2 / gemma3, attn_output / ffn_down on gemma', () => {
    const g2 = getPreset('tiny-gemma2').config;
    const g3 = getPreset('tiny-gemma3').config;
    expect(mean(generateTensorF32(g2, 1, 'blk.0.post_attention_norm.weight'))).toBeCloseTo(2 / Math.sqrt(8), 1);
    expect(mean(generateTensorF32(g3, 1, 'blk.5.post_ffw_norm.weight'))).toBeCloseTo(2 / Math.sqrt(12), 1);
    expect(mean(generateTensorF32(g3, 1, 'blk.0.attn_k_norm.weight'))).toBeCloseTo(1, 1);
    const g1 = getPreset('tiny-gemma').config;
    expect(std(generateTensorF32(g1, 1, 'blk.0.ffn_down.weight'))).toBeCloseTo(2 / Math.sqrt(8) / Math.sqrt(128), 2);
    expect(std(generateTensorF32(g1, 1, 'token_embd.weight'))).toBeCloseTo(2 / 8, 2);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gemma-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const keys = (preset: string, over: Partial<GemmaConfig> = {}) => {
      const out = path.join(dir, `${preset}.gguf`);
      const config = { ...getPreset(preset).config, ...over } as GemmaConfig;
      writeModel({ config, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const a = String(kv.get('general.architecture')!.value);
      return Object.fromEntries([...kv.keys()].filter((k) => k.startsWith(`${a}.`)).map((k) => [k.slice(a.length + 1), kv.get(k)!.value]));
    };
    const COMMON = { vocab_size: 1024, context_length: 4096, embedding_length: 64, feed_forward_length: 128, 'attention.head_count': 4, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6) };

    it('gemma: the keys GemmaModel writes, rope.freq_base only when not the default 10000', () => {
      expect(keys('tiny-gemma')).toEqual({ ...COMMON, block_count: 4, 'attention.head_count_kv': 1, 'attention.key_length': 32, 'attention.value_length': 32 });
      expect(keys('tiny-gemma', { ropeBase: 1e6 })['rope.freq_base']).toBe(1e6);
    });

    it('gemma2: soft caps and the sliding window', () => {
      expect(keys('tiny-gemma2')).toEqual({
        ...COMMON, block_count: 4, 'attention.head_count_kv': 2, 'attention.key_length': 16, 'attention.value_length': 16,
        attn_logit_softcapping: 50, final_logit_softcapping: 30, 'attention.sliding_window': 8,
      });
    });

    it('gemma3: base 1e6 with linear scaling 8, the window; no soft cap, no scaling at factor 1, no window at 0', () => {
      expect(keys('tiny-gemma3')).toEqual({
        ...COMMON, block_count: 6, 'attention.head_count_kv': 2, 'attention.key_length': 32, 'attention.value_length': 32,
        'rope.freq_base': 1e6, 'rope.scaling.type': 'linear', 'rope.scaling.factor': 8, 'attention.sliding_window': 8,
      });
      const k = keys('tiny-gemma3', { ropeScale: 1, window: 0, softcap: 30 });
      expect([k['rope.scaling.type'], k['attention.sliding_window'], k.final_logit_softcapping]).toEqual([undefined, undefined, 30]);
    });
  });
});
