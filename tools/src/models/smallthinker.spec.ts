// smallthinker (PowerInfer SmallThinker): the tensors and keys llama.cpp's loader
// (src/models/smallthinker.cpp) takes, as conversion/smallthinker.py writes them, and the scales of
// the router (which reads the raw residual stream) and of the ReGLU experts' writes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { readGgufHeader } from '../gguf/reader';
import type { SmallThinkerConfig } from './architectures/llama-moe';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const BLOCK = [
  'attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight',
  'ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight',
];

const config = (preset: string, over: Partial<SmallThinkerConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as SmallThinkerConfig;
const plan = (preset: string, over: Partial<SmallThinkerConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<SmallThinkerConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const std = (a: Float32Array) => {
  const m = a.reduce((s, x) => s + x, 0) / a.length;
  return Math.sqrt(a.reduce((s, x) => s + x * x, 0) / a.length - m * m);
};

describe('smallthinker', () => {
  it('tensors: Llama attention and a routed block everywhere (no shared expert, no dense FFN); output.weight unless tied', () => {
    for (const [p, n] of [['tiny-smallthinker', 4], ['tiny-smallthinker-swa', 8]] as const) {
      const t = plan(p).tensors;
      for (let i = 0; i < n; i++) expect(t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort()).toEqual([...BLOCK].sort());
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
      expect(t.length).toBe(3 + n * BLOCK.length);
    }
    expect([...shapes('tiny-smallthinker', { tiedEmbeddings: true }).keys()]).not.toContain('output.weight');
    expect(DEFAULT_PRESET_FOR_ARCH.smallthinker).toBe('tiny-smallthinker');
  });

  it('shapes: router [n_embd, n_expert], gate/up [n_embd, n_ff_exp, E], down [n_ff_exp, n_embd, E], GQA 4/2 heads of 16', () => {
    const s = shapes('tiny-smallthinker-swa');
    expect(['attn_q', 'attn_k', 'attn_v', 'attn_output'].map((n) => s.get(`blk.7.${n}.weight`))).toEqual([[64, 64], [64, 32], [64, 32], [64, 64]]);
    expect(['ffn_gate_inp', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'].map((n) => s.get(`blk.7.${n}.weight`))).toEqual([[64, 8], [64, 32, 8], [64, 32, 8], [32, 64, 8]]);
    expect(s.get('token_embd.weight')).toEqual([64, 1024]);
  });

  it('rejects configs the loader cannot take', () => {
    expect(() => plan('tiny-smallthinker', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/experts/);
    expect(() => plan('tiny-smallthinker', { nExpertsUsed: 9 })).toThrow(/experts-used/);
    expect(() => plan('tiny-smallthinker', { expertFf: 0 })).toThrow(/expertFf/);
    expect(() => plan('tiny-smallthinker', { gating: 'none' as 'softmax' })).toThrow(/gating/);
    expect(() => plan('tiny-smallthinker', { window: -1 })).toThrow(/window/);
    expect(() => plan('tiny-smallthinker', { nKvHeads: 3 })).toThrow(/divisible/);
  });

  it('scales: router logits of std ~2 over the stream (untied: unit-std embeddings; tied: 2/sqrt(dim)), expert writes at residualGain/sqrt(2)', () => {
    const c = config('tiny-smallthinker');
    const tied = { ...c, tiedEmbeddings: true };
    // Within 5% (the router holds only 512 values).
    const ratio = (cfg: SmallThinkerConfig, name: string, want: number) => std(generateTensorF32(cfg, 1, name)) / want;
    expect(ratio(c, 'token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.0.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(tied, 'token_embd.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(tied, 'blk.0.ffn_gate_inp.weight', 1)).toBeCloseTo(1, 1);
    // 4 blocks: residualGain 1/sqrt(8); 32 inputs per expert row.
    expect(ratio(c, 'blk.3.ffn_down_exps.weight', 1 / Math.sqrt(8) / Math.SQRT2 / Math.sqrt(32))).toBeCloseTo(1, 1);
    expect(ratio(c, 'blk.3.ffn_gate_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-smallthinker-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const keys = (preset: string, over: Partial<SmallThinkerConfig> = {}) => {
      const out = path.join(dir, `${preset}.gguf`);
      writeModel({ config: config(preset, over), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('smallthinker');
      return Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('smallthinker.')).map((k) => [k.slice('smallthinker.'.length), kv.get(k)!.value]));
    };
    const COMMON = {
      vocab_size: 1024, context_length: 4096, embedding_length: 64, feed_forward_length: 32, 'attention.head_count': 4, 'attention.head_count_kv': 2,
      'rope.freq_base': 1e6, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6), 'rope.dimension_count': 16,
      expert_count: 8, expert_used_count: 2, expert_feed_forward_length: 32,
    };

    it('tiny-smallthinker: softmax gating (1), no window, no expert_weights_scale', () => {
      expect(keys('tiny-smallthinker')).toEqual({ ...COMMON, block_count: 4, expert_gating_func: 1 });
    });

    it('tiny-smallthinker-swa: sigmoid gating (2) and attention.sliding_window', () => {
      expect(keys('tiny-smallthinker-swa')).toEqual({ ...COMMON, block_count: 8, expert_gating_func: 2, 'attention.sliding_window': 4096 });
    });
  });
});
