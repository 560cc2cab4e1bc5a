// qwen4exp (Qwen3.8-Flash-Next): the tensors and keys llama.cpp's loader (src/models/qwen4exp.cpp)
// takes, as conversion/qwen4exp.py Qwen4ExpTextModel writes them: hyper-connection modules per
// block and for the head (1-D gammas, low-rank down/up, inject), Qwen3.5's delta-net and gated
// attention blocks without norms, the QSA indexer's q/k projections and norms on full-attention
// blocks, experts with a gated shared expert, PLE on one delta-net block with its UINT64 hash
// constants; the types llama-quantize gives them; and the configs the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Qwen4ExpConfig } from './architectures/qwen4exp';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const HC = ['attn_norm', 'attn_down', 'attn_up', 'attn_inject', 'ffn_norm', 'ffn_down', 'ffn_up', 'ffn_inject'].map((n) => `hc_${n}.weight`);
const LINEAR = ['attn_qkv.weight', 'attn_gate.weight', 'ssm_conv1d.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_beta.weight', 'ssm_alpha.weight', 'ssm_norm.weight', 'ssm_out.weight'];
const FULL = ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'indexer.q_proj.weight', 'indexer.k_proj.weight', 'indexer.q_norm.weight', 'indexer.k_norm.weight'];
const MOE = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'ffn_gate_inp_shexp.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];
const PLE = ['ple_key.weight', 'ple_value.weight', 'ple_norm_key.weight', 'ple_norm_query.weight', 'ple_norm_conv.weight', 'ple_conv1d.weight'];

const config = (preset: string, over: Partial<Qwen4ExpConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as Qwen4ExpConfig;
const plan = (preset: string, over: Partial<Qwen4ExpConfig> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel(config(preset, over), type);

describe('qwen4exp', () => {
  it('tensors: hc modules on every block, delta nets and gated attention as the layer pattern says, PLE on block 1, no norms; the head hc and the n-gram table', () => {
    const t = plan('tiny-qwen4exp').tensors;
    const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    expect(block(0)).toEqual([...HC, ...LINEAR, ...MOE].sort());
    expect(block(1)).toEqual([...HC, ...LINEAR, ...PLE, ...MOE].sort());
    expect(block(3)).toEqual([...HC, ...FULL, ...MOE].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output.weight', 'output_hc_norm.weight', 'output_hc_down.weight', 'output_hc_up.weight', 'per_layer_token_embd.weight']);
    // attention.recurrent_layers: full attention on blocks 1 and 4; no PLE.
    const l = plan('tiny-qwen4exp-layers').tensors;
    expect(l.filter((x) => x.name.endsWith('attn_q.weight')).map((x) => x.layer)).toEqual([1, 4]);
    expect(l.some((x) => x.name.includes('ple'))).toBe(false);
    expect(DEFAULT_PRESET_FOR_ARCH.qwen4exp).toBe('tiny-qwen4exp');
  });

  it('shapes as the loader creates them', () => {
    const s = new Map(plan('tiny-qwen4exp').tensors.map((x) => [x.name, x.shape]));
    // hc 4 x n_embd 256, rank 32.
    expect(['output_hc_norm', 'output_hc_down', 'output_hc_up'].map((n) => s.get(`${n}.weight`))).toEqual([[1024], [1024, 32], [32, 1024]]);
    expect(['hc_attn_norm', 'hc_attn_down', 'hc_attn_up', 'hc_attn_inject', 'hc_ffn_inject'].map((n) => s.get(`blk.2.${n}.weight`))).toEqual([[1024], [1024, 32], [32, 1024], [1024, 4], [1024, 4]]);
    expect(['attn_qkv.weight', 'attn_gate.weight', 'ssm_conv1d.weight', 'ssm_a', 'ssm_beta.weight', 'ssm_out.weight'].map((n) => s.get(`blk.0.${n}`))).toEqual([[256, 512], [256, 256], [4, 512], [4], [256, 4], [256, 256]]);
    expect(['attn_q.weight', 'attn_k.weight', 'indexer.q_proj.weight', 'indexer.k_proj.weight', 'indexer.q_norm.weight'].map((n) => s.get(`blk.3.${n}`))).toEqual([[256, 512], [256, 128], [256, 128], [256, 32], [32]]);
    expect(PLE.map((n) => s.get(`blk.1.${n}`))).toEqual([[256, 1024], [256, 256], [1024], [1024], [1024], [4, 1024]]);
    // 4 heads of 64: vocabularies 311, 257, 293, 269 with gaps 0, 5, 0, 17.
    expect(s.get('per_layer_token_embd.weight')).toEqual([64, 1152]);
  });

  it('types as llama-quantize gives them: norms and gammas, the router, convolutions and the indexer projections F32; the PLE taps in their fallback', () => {
    const q = new Map(plan('tiny-qwen4exp', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of ['output_hc_norm.weight', 'blk.1.hc_attn_norm.weight', 'blk.1.ple_norm_key.weight', 'blk.0.ssm_conv1d.weight', 'blk.0.ffn_gate_inp.weight', 'blk.3.indexer.q_proj.weight', 'blk.3.indexer.k_proj.weight'])
      expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    expect(q.get('blk.1.ple_conv1d.weight')).toBe(GgmlType.F16);
    for (const n of ['blk.1.hc_attn_down.weight', 'blk.1.hc_attn_inject.weight', 'blk.1.ple_key.weight', 'per_layer_token_embd.weight']) expect([n, q.get(n) === GgmlType.F32]).toEqual([n, false]);
  });

  it("writes the converter's keys and types", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen4exp-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config('tiny-qwen4exp'), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('qwen4exp.')).map((k) => [k.slice('qwen4exp.'.length), kv.get(k)!.value]));
      const u64 = (xs: (number | bigint)[]) => xs.map((x) => BigInt(x));
      const norm = (v: unknown) => (Array.isArray(v) || ArrayBuffer.isView(v) ? Array.from(v as ArrayLike<unknown>, (x) => (typeof x === 'bigint' ? x : x)) : v);
      expect(Object.fromEntries(Object.entries(keys).map(([k, v]) => [k, norm(v)]))).toEqual({
        vocab_size: 1024, context_length: 256, embedding_length: 256, block_count: 4, feed_forward_length: 512,
        'attention.head_count': 4, 'attention.head_count_kv': 2, 'attention.key_length': 64, 'attention.value_length': 64,
        'rope.freq_base': 1e7, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6), 'rope.dimension_count': 16, 'rope.dimension_sections': [3, 3, 2, 0],
        expert_count: 16, expert_used_count: 4,
        'ssm.conv_kernel': 4, 'ssm.state_size': 64, 'ssm.group_count': 2, 'ssm.time_step_rank': 4, 'ssm.inner_size': 256, full_attention_interval: 4,
        expert_feed_forward_length: 128, expert_shared_feed_forward_length: 128,
        'hyper_connection.count': 4, 'hyper_connection.low_rank': 32,
        'attention.indexer.head_count': 4, 'attention.indexer.key_length': 32, 'attention.indexer.top_k': 256, 'attention.compress_ratios': [0, 0, 0, 4],
        'ple.layers': [1], 'ple.ngram_size': 3, 'ple.heads_per_ngram': 2, 'ple.conv_kernel': 4, 'ple.eos_token_id': 835, embedding_length_per_layer_input: 64,
        'ple.layer_multipliers': u64([0x1f3a5c7e9b1dn, 0x15b7d9f13579n, 0x1abcdef12345n]), 'ple.head_offsets': u64([0, 316, 573, 883]), 'ple.head_vocab_sizes': u64([311, 257, 293, 269]),
      });
      expect(['hyper_connection.low_rank', 'ple.ngram_size'].map((k) => kv.get(`qwen4exp.${k}`)!.type)).toEqual([GgufType.UINT32, GgufType.UINT32]);
      expect(['attention.compress_ratios', 'ple.layers', 'ple.layer_multipliers', 'ple.head_offsets', 'ple.head_vocab_sizes'].map((k) => kv.get(`qwen4exp.${k}`)!.elemType)).toEqual([
        GgufType.INT32, GgufType.INT32, GgufType.UINT64, GgufType.UINT64, GgufType.UINT64,
      ]);
      const l = path.join(dir, 'l.gguf');
      writeModel({ config: config('tiny-qwen4exp-layers'), fileType: 'F32', seed: 1, out: l });
      const lk = readGgufHeader(l).kv;
      expect(norm(lk.get('qwen4exp.attention.recurrent_layers')!.value)).toEqual([true, false, true, true, false]);
      expect(lk.get('qwen4exp.attention.recurrent_layers')!.elemType).toBe(GgufType.BOOL);
      expect([...lk.keys()].some((k) => k.includes('.ple.'))).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    const ple = config('tiny-qwen4exp').ple!;
    expect(() => plan('tiny-qwen4exp', { hc: { count: 1, lowRank: 32 } })).toThrow(/count of at least 2 streams/);
    expect(() => plan('tiny-qwen4exp', { indexer: { nHead: 4, headDim: 32, topK: 256, ratio: 65 } })).toThrow(/ratio in 1..64/);
    expect(() => plan('tiny-qwen4exp', { recurrentLayers: [true, false] })).toThrow(/one flag per block/);
    expect(() => plan('tiny-qwen4exp', { ple: { ...ple, layer: 3 } })).toThrow(/PLE layer must be a linear-attention block/);
    expect(() => plan('tiny-qwen4exp', { ple: { ...ple, headDim: 32 } })).toThrow(/headDim x heads = dim/);
    expect(() => plan('tiny-qwen4exp', { ple: { ...ple, multipliers: ple.multipliers.slice(0, 2) } })).toThrow(/a multiplier per n-gram position/);
    expect(() => plan('tiny-qwen4exp', { ropeSections: [3, 3, 3, 0] })).toThrow(/ropeSections/);
  });
});
