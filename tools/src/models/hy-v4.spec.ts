// hy_v4 (Tencent Hunyuan v4): the tensors and keys llama.cpp's loader (src/models/hy-v4.cpp) takes,
// as conversion/hy_v4.py HYV4Model writes them: hyper-connection fn/base/scale per block and for
// the head, MLA with sinks and an output gate, indexer tensors on the indexing blocks only, leading
// dense blocks then routed blocks with a selection bias and shared experts; the F32 the converter
// forces in every file type; and the configs the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { HyV4Config } from './architectures/hy-v4';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const HC = ['hc_attn_fn.weight', 'hc_attn_base.weight', 'hc_attn_scale.weight', 'hc_ffn_fn.weight', 'hc_ffn_base.weight', 'hc_ffn_scale.weight'];
const ATTN = [
  'attn_norm.weight', 'attn_sinks.weight', 'attn_q_a.weight', 'attn_q_a_norm.weight', 'attn_q_b.weight', 'attn_kv_a_mqa.weight', 'attn_kv_a_norm.weight',
  'attn_k_b.weight', 'attn_v_b.weight', 'attn_output.weight', 'attn_gate.weight', ...HC, 'ffn_norm.weight',
];
const INDEXER = ['indexer.k_norm.weight', 'indexer.k_norm.bias', 'indexer.proj.weight', 'indexer.attn_k.weight', 'indexer.attn_q_b.weight'];
const DENSE = ['ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'exp_probs_b.bias', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];

const config = (preset: string, over: Partial<HyV4Config> = {}) => ({ ...getPreset(preset).config, ...over }) as HyV4Config;
const plan = (preset: string, over: Partial<HyV4Config> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel(config(preset, over), type);

describe('hy_v4', () => {
  it('tensors: hc fn/base/scale and MLA with sinks and a gate on every block, the indexer on blocks 0 and 2, dense block 0, routed blocks after; the head hc', () => {
    const t = plan('tiny-hy-v4').tensors;
    const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    expect(block(0)).toEqual([...ATTN, ...INDEXER, ...DENSE].sort());
    expect(block(1)).toEqual([...ATTN, ...MOE].sort());
    expect(block(2)).toEqual([...ATTN, ...INDEXER, ...MOE].sort());
    expect(block(3)).toEqual([...ATTN, ...MOE].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight', 'output_hc_fn.weight', 'output_hc_base.weight', 'output_hc_scale.weight']);
    // Without an indexer: no indexer tensors anywhere; dense blocks 0 and 1.
    const f = plan('tiny-hy-v4-full').tensors;
    expect(f.some((x) => x.name.includes('indexer'))).toBe(false);
    expect(f.filter((x) => x.name.endsWith('ffn_up.weight')).map((x) => x.layer)).toEqual([0, 1]);
    expect(DEFAULT_PRESET_FOR_ARCH.hy_v4).toBe('tiny-hy-v4');
  });

  it('shapes as the loader creates them', () => {
    const s = new Map(plan('tiny-hy-v4').tensors.map((x) => [x.name, x.shape]));
    expect(['output_hc_fn', 'output_hc_base', 'output_hc_scale'].map((n) => s.get(`${n}.weight`))).toEqual([[512, 4], [4], [1]]);
    expect(['hc_attn_fn', 'hc_attn_base', 'hc_attn_scale', 'hc_ffn_fn'].map((n) => s.get(`blk.1.${n}.weight`))).toEqual([[512, 8], [8], [2], [512, 8]]);
    expect(['attn_sinks', 'attn_q_a', 'attn_q_b', 'attn_kv_a_mqa', 'attn_k_b', 'attn_v_b', 'attn_output', 'attn_gate'].map((n) => s.get(`blk.1.${n}.weight`))).toEqual([
      [4], [128, 64], [64, 192], [128, 80], [32, 64, 4], [64, 32, 4], [128, 128], [128, 128],
    ]);
    expect(['indexer.attn_q_b.weight', 'indexer.attn_k.weight', 'indexer.k_norm.bias', 'indexer.proj.weight'].map((n) => s.get(`blk.2.${n}`))).toEqual([[64, 256], [128, 64], [64], [128, 4]]);
    expect(['ffn_gate_inp.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'exp_probs_b.bias', 'ffn_up_shexp.weight'].map((n) => s.get(`blk.3.${n}`))).toEqual([[128, 8], [128, 64, 8], [64, 128, 8], [8], [128, 64]]);
    expect(new Map(plan('tiny-hy-v4-full').tensors.map((x) => [x.name, x.shape])).get('blk.4.hc_ffn_fn.weight')).toEqual([384, 6]);
  });

  it('F32 in every file type: the hc matrices (forced by the converter), 1-D tensors, the router, the indexer proj and k_norm bias', () => {
    const q = new Map(plan('tiny-hy-v4', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of ['output_hc_fn.weight', 'blk.1.hc_attn_fn.weight', 'blk.1.hc_ffn_fn.weight', 'blk.1.hc_attn_scale.weight', 'blk.1.attn_sinks.weight', 'blk.1.ffn_gate_inp.weight', 'blk.2.indexer.proj.weight', 'blk.2.indexer.k_norm.bias'])
      expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    expect(q.get('blk.1.attn_gate.weight')).not.toBe(GgmlType.F32);
  });

  it("writes the converter's keys and types", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hyv4-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config('tiny-hy-v4'), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('hy_v4.')).map((k) => [k.slice('hy_v4.'.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 128, block_count: 4, feed_forward_length: 256,
        'attention.head_count': 4, 'attention.head_count_kv': 1, 'attention.key_length': 80, 'attention.value_length': 64,
        'attention.layer_norm_rms_epsilon': Math.fround(1e-5), 'attention.q_lora_rank': 64, 'attention.kv_lora_rank': 64,
        'attention.key_length_mla': 48, 'attention.value_length_mla': 32, 'rope.freq_base': 10000, 'rope.dimension_count': 16,
        expert_count: 8, expert_used_count: 2, leading_dense_block_count: 1, expert_feed_forward_length: 64, expert_shared_count: 1,
        expert_weights_norm: true, expert_gating_func: 2, expert_weights_scale: 2.5,
        'hyper_connection.count': 4, 'hyper_connection.epsilon': Math.fround(1e-6), 'hyper_connection.magnitude': 2,
        swiglu_clamp_exp: [2, 2, 2, 2],
        'attention.indexer.head_count': 4, 'attention.indexer.key_length': 64, 'attention.indexer.top_k': 16, 'attention.indexer.types': [true, false, true, false],
      });
      expect([kv.get('hy_v4.hyper_connection.count')!.type, kv.get('hy_v4.hyper_connection.epsilon')!.type, kv.get('hy_v4.hyper_connection.magnitude')!.type]).toEqual([GgufType.UINT32, GgufType.FLOAT32, GgufType.FLOAT32]);
      expect([kv.get('hy_v4.attention.indexer.types')!.elemType, kv.get('hy_v4.swiglu_clamp_exp')!.elemType]).toEqual([GgufType.BOOL, GgufType.FLOAT32]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-hy-v4', { hc: { count: 0, eps: 1e-6, magnitude: 2 } })).toThrow(/hc needs a positive integer count/);
    expect(() => plan('tiny-hy-v4', { dsa: { nHead: 4, headDim: 16, topK: 16, full: [true, false, true, false] } })).toThrow(/key longer than the rotary dims/);
    expect(() => plan('tiny-hy-v4', { dsa: { nHead: 4, headDim: 64, topK: 16, full: [false, true, true, false] } })).toThrow(/block 0 true/);
    expect(() => plan('tiny-hy-v4', { dsa: { nHead: 4, headDim: 64, topK: 16, full: [true] } })).toThrow(/one flag per block/);
    expect(() => plan('tiny-hy-v4', { moe: { ...config('tiny-hy-v4').moe, nShared: 0 } })).toThrow(/shared experts are required/);
    expect(() => plan('tiny-hy-v4', { mla: { qLora: 0, kvLora: 64, qkNope: 32, qkRope: 16, vHead: 32 } })).toThrow(/positive qLora/);
    expect(() => plan('tiny-hy-v4', { swigluLimit: -1 })).toThrow(/swigluLimit/);
  });
});
