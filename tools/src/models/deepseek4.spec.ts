// deepseek4 (DeepSeek-V4): the tensors and keys llama.cpp's loader (src/models/deepseek4.cpp)
// takes, as conversion/deepseek.py DeepseekV4Model writes them: hyper-connection fn/base/scale
// per block and for the head, q LoRA attention over one shared key/value row with sinks and a
// grouped output LoRA, compressors by each block's ratio (the indexer's on CSA blocks), the hash
// table on the leading blocks (I32, distinct experts per token) and a selection bias after them,
// an MTP block after the trunk; the F32 the converter keeps; and the configs the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import type { Deepseek4Config } from './architectures/deepseek4';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const HC = ['hc_attn_fn.weight', 'hc_attn_base.weight', 'hc_attn_scale.weight', 'hc_ffn_fn.weight', 'hc_ffn_base.weight', 'hc_ffn_scale.weight'];
const ATTN = ['attn_norm.weight', 'attn_sinks.weight', 'attn_q_a.weight', 'attn_q_a_norm.weight', 'attn_q_b.weight', 'attn_kv.weight', 'attn_kv_a_norm.weight', 'attn_output_a.weight', 'attn_output_b.weight', ...HC];
const COMP = ['attn_compressor_kv.weight', 'attn_compressor_gate.weight', 'attn_compressor_ape.weight', 'attn_compressor_norm.weight'];
const INDEXER = ['indexer.proj.weight', 'indexer.attn_q_b.weight', 'indexer_compressor_kv.weight', 'indexer_compressor_gate.weight', 'indexer_compressor_ape.weight', 'indexer_compressor_norm.weight'];
const MOE = ['ffn_gate_inp.weight', 'ffn_norm.weight', 'ffn_gate_exps.weight', 'ffn_down_exps.weight', 'ffn_up_exps.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];
const NEXTN = ['nextn.eh_proj.weight', 'nextn.enorm.weight', 'nextn.hnorm.weight', 'nextn.shared_head_norm.weight'];

const config = (over: Partial<Deepseek4Config> = {}) => ({ ...getPreset('tiny-deepseek4').config, ...over }) as Deepseek4Config;
const plan = (over: Partial<Deepseek4Config> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel(config(over), type);

describe('deepseek4', () => {
  it('tensors: per block attention and hc, compressors by ratio (CSA with the indexer, HCA, none), the hash table on block 0, a selection bias after; the MTP block; the head hc', () => {
    const t = plan().tensors;
    const names = new Set(t.map((x) => x.name));
    const blk = (i: number) => [...names].filter((n) => n.startsWith(`blk.${i}.`)).map((n) => n.slice(`blk.${i}.`.length)).sort();
    expect(blk(0)).toEqual([...ATTN, ...COMP, ...INDEXER, ...MOE, 'ffn_gate_tid2eid.weight'].sort());
    expect(blk(1)).toEqual([...ATTN, ...COMP, ...MOE, 'exp_probs_b.bias'].sort());
    expect(blk(2)).toEqual([...ATTN, ...MOE, 'exp_probs_b.bias'].sort());
    expect(blk(3)).toEqual(blk(0).filter((n) => n !== 'ffn_gate_tid2eid.weight').concat('exp_probs_b.bias').sort());
    expect(blk(4)).toEqual([...ATTN, ...MOE, 'exp_probs_b.bias', ...NEXTN].sort());
    for (const n of ['output_hc_fn.weight', 'output_hc_base.weight', 'output_hc_scale.weight', 'output.weight']) expect(names.has(n)).toBe(true);
    const s = new Map(t.map((x) => [x.name, x.shape]));
    expect([s.get('output_hc_fn.weight'), s.get('output_hc_scale.weight'), s.get('blk.0.hc_attn_fn.weight'), s.get('blk.0.hc_attn_scale.weight')]).toEqual([[512, 4], [1], [512, 24], [3]]);
    expect([s.get('blk.0.attn_output_a.weight'), s.get('blk.0.attn_output_b.weight'), s.get('blk.0.attn_kv.weight')]).toEqual([[192, 64], [64, 128], [128, 96]]);
    expect([s.get('blk.0.attn_compressor_kv.weight'), s.get('blk.0.attn_compressor_ape.weight'), s.get('blk.1.attn_compressor_kv.weight'), s.get('blk.1.attn_compressor_ape.weight')]).toEqual([[128, 192], [192, 4], [128, 96], [96, 128]]);
    expect([s.get('blk.0.indexer_compressor_ape.weight'), s.get('blk.0.indexer.attn_q_b.weight'), s.get('blk.0.ffn_gate_tid2eid.weight')]).toEqual([[128, 4], [64, 256], [2, 1024]]);
    expect(DEFAULT_PRESET_FOR_ARCH.deepseek4).toBe('tiny-deepseek4');
  });

  it('types: the hash table I32 in every file type; F32 for the hc tensors, position biases, sinks, indexer proj and 1-D tensors', () => {
    const q = new Map(plan({}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect(q.get('blk.0.ffn_gate_tid2eid.weight')).toBe(GgmlType.I32);
    expect(new Map(plan().tensors.map((x) => [x.name, x.type])).get('blk.0.ffn_gate_tid2eid.weight')).toBe(GgmlType.I32);
    for (const n of ['output_hc_fn.weight', 'blk.1.hc_attn_fn.weight', 'blk.1.hc_ffn_base.weight', 'blk.0.attn_compressor_ape.weight', 'blk.0.indexer_compressor_ape.weight', 'blk.0.indexer.proj.weight', 'blk.1.attn_sinks.weight', 'blk.1.ffn_gate_inp.weight', 'blk.1.exp_probs_b.bias'])
      expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    expect(q.get('blk.1.attn_output_a.weight')).not.toBe(GgmlType.F32);
  });

  it("writes the converter's keys and a hash table of distinct experts per token", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config(), fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      const kv = h.kv;
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('deepseek4.')).map((k) => [k.slice('deepseek4.'.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 128, embedding_length_out: 512, block_count: 5, feed_forward_length: 64,
        'attention.head_count': 4, 'attention.head_count_kv': 1, 'attention.key_length': 96, 'attention.value_length': 96,
        'attention.layer_norm_rms_epsilon': Math.fround(1e-6), 'attention.q_lora_rank': 64, 'attention.sliding_window': 8,
        'rope.freq_base': 10000, 'rope.dimension_count': 32, expert_count: 8, expert_used_count: 2, expert_feed_forward_length: 64,
        expert_shared_count: 1, expert_weights_scale: 1.5, expert_weights_norm: true, expert_gating_func: 4,
        swiglu_clamp_exp: [1.5, 1.5, 1.5, 1.5, 1.5], swiglu_clamp_shexp: [1.5, 1.5, 1.5, 1.5, 1.5],
        'attention.indexer.head_count': 4, 'attention.indexer.key_length': 64, 'attention.indexer.top_k': 4,
        'attention.output_group_count': 2, 'attention.output_lora_rank': 32, 'attention.compress_ratios': [4, 128, 0, 4, 0],
        'attention.compress_rope_freq_base': 160000, 'hyper_connection.count': 4, 'hyper_connection.sinkhorn_iterations': 3,
        'hyper_connection.epsilon': Math.fround(1e-6), hash_layer_count: 1, nextn_predict_layers: 1,
      });
      expect([kv.get('deepseek4.attention.compress_ratios')!.elemType, kv.get('deepseek4.swiglu_clamp_exp')!.elemType]).toEqual([GgufType.UINT32, GgufType.FLOAT32]);
      const tab = h.tensors.find((t) => t.name === 'blk.0.ffn_gate_tid2eid.weight')!;
      const b = readGgufTensorBytes(out, tab);
      const ids = new Int32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
      expect(ids.length).toBe(2 * 1024);
      let distinct = 0, inRange = 0;
      const used = new Set<number>();
      for (let r = 0; r < 1024; r++) {
        if (ids[2 * r] !== ids[2 * r + 1]) distinct++;
        for (const e of [ids[2 * r], ids[2 * r + 1]]) if (e >= 0 && e < 8) { inRange++; used.add(e); }
      }
      expect([distinct, inRange, used.size]).toEqual([1024, 2048, 8]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the yarn preset: rope.scaling keys, no MTP block, two hash tables, no shared-expert clamp', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: getPreset('tiny-deepseek4-yarn').config, fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      const v = (k: string) => h.kv.get(`deepseek4.${k}`)?.value;
      expect([v('rope.scaling.type'), v('rope.scaling.factor'), v('rope.scaling.original_context_length'), v('block_count'), v('nextn_predict_layers'), v('hash_layer_count'), v('swiglu_clamp_shexp'), v('attention.compress_ratios')]).toEqual([
        'yarn', 4, 64, 4, 0, 2, [0, 0, 0, 0], [128, 4, 4, 0],
      ]);
      expect(h.tensors.filter((t) => t.name.endsWith('ffn_gate_tid2eid.weight')).map((t) => t.name)).toEqual(['blk.0.ffn_gate_tid2eid.weight', 'blk.1.ffn_gate_tid2eid.weight']);
      expect(h.tensors.some((t) => t.name.startsWith('blk.4.'))).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan({ hc: { count: 3, iters: 3, eps: 1e-6 } })).toThrow(/4 hyper-connection streams only/);
    expect(() => plan({ ratios: [4, 64, 0, 4] })).toThrow(/ratios needs one of 0, 4, 128 per block/);
    expect(() => plan({ ratios: [4, 128] })).toThrow(/ratios needs one of 0, 4, 128 per block/);
    expect(() => plan({ oGroups: 3 })).toThrow(/4 heads do not split into 3 output groups/);
    expect(() => plan({ indexer: { nHead: 4, headDim: 32, topK: 4 } })).toThrow(/power-of-two key of at least 64/);
    expect(() => plan({ rope: 7 })).toThrow(/rope 7 must be even/);
    expect(() => plan({ mtp: 2 })).toThrow(/mtp is 0 or 1/);
    expect(() => plan({ hashLayers: 5 })).toThrow(/hashLayers 5 out of range/);
    expect(() => plan({ yarn: { factor: 1, origCtx: 64 } })).toThrow(/yarn needs a factor > 1/);
  });
});
