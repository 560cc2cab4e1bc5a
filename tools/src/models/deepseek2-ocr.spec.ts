// deepseek2-ocr (DeepSeek-OCR's language model): the tensors and keys llama.cpp's loader
// (src/models/deepseek2ocr.cpp) takes, as conversion/deepseek.py writes them with is_ocr: plain
// attention (n_embd-wide q/k/v/output, as many KV heads as heads, optional q/k/v biases), no MLA
// keys, leading dense blocks then routed blocks with the required shared experts; and the configs
// the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Deepseek2Config, Deepseek2OcrConfig } from './architectures/deepseek2';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'ffn_norm.weight'];
const BIAS = ['attn_q.bias', 'attn_k.bias', 'attn_v.bias'];
const DENSE = ['ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];

const config = (preset: string, over: Partial<Deepseek2OcrConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as Deepseek2OcrConfig;
const plan = (preset: string, over: Partial<Deepseek2OcrConfig> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel(config(preset, over), type);

describe('deepseek2-ocr', () => {
  it('tensors: plain attention on every block, dense block 0, routed blocks with shared experts after; -sig: q/k/v biases, the selection bias, no dense block', () => {
    const t = plan('tiny-deepseek2-ocr').tensors;
    const block = (ts: typeof t, i: number) => ts.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    expect(block(t, 0)).toEqual([...ATTN, ...DENSE].sort());
    expect(block(t, 1)).toEqual([...ATTN, ...MOE].sort());
    expect(block(t, 2)).toEqual([...ATTN, ...MOE].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const s = plan('tiny-deepseek2-ocr-sig').tensors;
    for (const i of [0, 1, 2]) expect(block(s, i)).toEqual([...ATTN, ...BIAS, ...MOE, 'exp_probs_b.bias'].sort());
    expect(DEFAULT_PRESET_FOR_ARCH['deepseek2-ocr']).toBe('tiny-deepseek2-ocr');
  });

  it('shapes as the loader creates them (q/k/v n_embd wide; shared experts of expert_ff x shared count)', () => {
    const s = new Map(plan('tiny-deepseek2-ocr').tensors.map((x) => [x.name, x.shape]));
    expect(['attn_q', 'attn_k', 'attn_v', 'attn_output'].map((n) => s.get(`blk.1.${n}.weight`))).toEqual([[256, 256], [256, 256], [256, 256], [256, 256]]);
    expect(['ffn_gate_inp', 'ffn_up_exps', 'ffn_down_exps', 'ffn_up_shexp', 'ffn_down_shexp'].map((n) => s.get(`blk.1.${n}.weight`))).toEqual([[256, 16], [256, 128, 16], [128, 256, 16], [256, 256], [256, 256]]);
    expect(s.get('blk.0.ffn_up.weight')).toEqual([256, 512]);
    const q = new Map(plan('tiny-deepseek2-ocr-sig', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of ['blk.0.attn_q.bias', 'blk.0.exp_probs_b.bias', 'blk.0.ffn_gate_inp.weight']) expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    expect(q.get('blk.0.attn_q.weight')).not.toBe(GgmlType.F32);
  });

  it("writes the converter's keys: no MLA keys, head_count_kv = head_count, rope base 10000, the routing keys", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ocr-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config('tiny-deepseek2-ocr-sig'), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const a = 'deepseek2-ocr.';
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith(a)).map((k) => [k.slice(a.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 256, block_count: 3, feed_forward_length: 512,
        'attention.head_count': 4, 'attention.head_count_kv': 4, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6),
        'rope.freq_base': 10000, 'rope.dimension_count': 0, expert_count: 16, expert_used_count: 4,
        leading_dense_block_count: 0, expert_feed_forward_length: 128, expert_shared_count: 1, expert_weights_norm: true, expert_gating_func: 2,
        expert_weights_scale: 2.5, expert_group_count: 4, expert_group_used_count: 2, 'attention.sliding_window': 16,
      });
      expect(readGgufHeader(out).kv.get('general.architecture')!.value).toBe('deepseek2-ocr');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-deepseek2-ocr', { nKvHeads: 2 })).toThrow(/as many KV heads as heads/);
    expect(() => plan('tiny-deepseek2-ocr', { ropeBase: 1e6 })).toThrow(/rope base 10000/);
    expect(() => plan('tiny-deepseek2-ocr', { headDim: 32 })).toThrow(/must be dim 256/);
    expect(() => plan('tiny-deepseek2-ocr', { moe: { ...config('tiny-deepseek2-ocr').moe, nShared: 0 } })).toThrow(/requires shared experts/);
    expect(() => plan('tiny-deepseek2-ocr', { mla: (getPreset('tiny-deepseek3').config as Deepseek2Config).mla } as Partial<Deepseek2OcrConfig>)).toThrow(/no MLA/);
    expect(() => plan('tiny-deepseek2-ocr', { slidingWindow: 0 })).toThrow(/slidingWindow/);
  });
});
