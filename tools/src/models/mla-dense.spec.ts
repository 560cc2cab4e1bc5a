// minicpm3 and plm (dense MLA decoders): the tensors and keys llama.cpp's loaders
// (src/models/minicpm3.cpp, plm.cpp) take, as conversion/minicpm.py and plm.py write them, and the
// configs the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { MlaDenseConfig } from './architectures/mla-dense';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const config = (preset: string, over: Partial<MlaDenseConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as MlaDenseConfig;
const plan = (preset: string, over: Partial<MlaDenseConfig> = {}, type: 'F32' | 'Q4_K_M' | 'Q8_0' = 'F32') => planModel(config(preset, over), type);
const block = (ts: { name: string; layer?: number }[], i: number) => ts.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();

const MLA = ['attn_norm.weight', 'attn_kv_a_mqa.weight', 'attn_kv_a_norm.weight', 'attn_kv_b.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_up.weight', 'ffn_down.weight'];

function keysOf(preset: string): Record<string, unknown> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mla-dense-spec-'));
  try {
    const out = path.join(dir, 'm.gguf');
    writeModel({ config: config(preset), fileType: 'F32', seed: 1, out });
    const kv = readGgufHeader(out).kv;
    const a = `${kv.get('general.architecture')!.value}.`;
    return Object.fromEntries([...kv.keys()].filter((k) => k.startsWith(a)).map((k) => [k.slice(a.length), kv.get(k)!.value]));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

describe('minicpm3 and plm writers', () => {
  it('minicpm3: q LoRA, one attn_kv_b, SwiGLU; LongRoPE tables of qk_rope / 2 in F32; an untied head', () => {
    const t = plan('tiny-minicpm3').tensors;
    for (const i of [0, 3]) expect(block(t, i)).toEqual([...MLA, 'attn_q_a.weight', 'attn_q_a_norm.weight', 'attn_q_b.weight', 'ffn_gate.weight'].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => [x.name, x.shape])).toEqual([
      ['token_embd.weight', [128, 1024]], ['output_norm.weight', [128]], ['output.weight', [128, 1024]], ['rope_factors_long.weight', [8]], ['rope_factors_short.weight', [8]],
    ]);
    const s = new Map(t.map((x) => [x.name, x.shape]));
    expect(['attn_q_a', 'attn_q_b', 'attn_kv_a_mqa', 'attn_kv_b', 'attn_output'].map((n) => s.get(`blk.1.${n}.weight`))).toEqual([[128, 96], [96, 4 * 48], [128, 64 + 16], [64, 4 * (32 + 32)], [4 * 32, 128]]);
    // The graph's x12 embedding scale is met by a token_embd drawn at 1/12; the residual writers'
    // gains carry the inverse of its 1.4/sqrt(4) residual scale.
    const init = new Map(t.map((x) => [x.name, x.init]));
    expect(init.get('token_embd.weight')).toEqual({ kind: 'normal', std: 1 / 12 });
    expect(init.get('blk.0.ffn_down.weight')).toEqual({ kind: 'normal', std: 1 / Math.sqrt(8) / 0.7 / Math.sqrt(256) });
    const q = new Map(plan('tiny-minicpm3', {}, 'Q8_0').tensors.map((x) => [x.name, x.type]));
    for (const n of ['rope_factors_long.weight', 'rope_factors_short.weight', 'blk.0.attn_q_a_norm.weight']) expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    expect(q.get('blk.0.attn_kv_b.weight')).toBe(GgmlType.Q8_0);
    expect(DEFAULT_PRESET_FOR_ARCH.minicpm3).toBe('tiny-minicpm3');
  });

  it('plm: a plain attn_q, an ungated FFN, the head tied, K-quants at n_embd 256', () => {
    const t = plan('tiny-plm').tensors;
    for (const i of [0, 3]) expect(block(t, i)).toEqual([...MLA, 'attn_q.weight'].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output_norm.weight']);
    const s = new Map(t.map((x) => [x.name, x.shape]));
    expect(['attn_q', 'attn_kv_a_mqa', 'attn_kv_b', 'attn_output'].map((n) => s.get(`blk.2.${n}.weight`))).toEqual([[256, 4 * 96], [256, 128 + 32], [128, 4 * (64 + 48)], [4 * 48, 256]]);
    const q = new Map(plan('tiny-plm', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect(q.get('blk.0.ffn_up.weight')).not.toBe(GgmlType.F32);
    expect(q.get('blk.0.attn_kv_a_norm.weight')).toBe(GgmlType.F32);
    expect(DEFAULT_PRESET_FOR_ARCH.plm).toBe('tiny-plm');
  });

  it("writes the converters' keys: minicpm3 without value_length or rope.freq_base, plm with them and without q_lora_rank", () => {
    const common = { vocab_size: 1024, block_count: 4, 'attention.head_count': 4, 'attention.head_count_kv': 4, 'attention.layer_norm_rms_epsilon': Math.fround(1e-5) };
    expect(keysOf('tiny-minicpm3')).toEqual({
      ...common, context_length: 4096, embedding_length: 128, feed_forward_length: 256,
      'attention.q_lora_rank': 96, 'attention.kv_lora_rank': 64, 'attention.key_length': 48, 'rope.dimension_count': 16,
    });
    expect(keysOf('tiny-minicpm3-long').context_length).toBe(128);
    expect(keysOf('tiny-plm')).toEqual({
      ...common, context_length: 4096, embedding_length: 256, feed_forward_length: 512,
      'attention.kv_lora_rank': 128, 'attention.key_length': 96, 'attention.value_length': 48, 'rope.dimension_count': 32, 'rope.freq_base': 100000,
    });
  });

  it('rejects configs the loaders cannot take, naming the field', () => {
    const cpm = config('tiny-minicpm3');
    expect(() => plan('tiny-minicpm3', { mla: { ...cpm.mla, qLora: 0 } })).toThrow(/requires q LoRA/);
    expect(() => plan('tiny-minicpm3', { mla: { ...cpm.mla, vHead: 16 } })).toThrow(/vHead must be dim \/ nHeads/);
    expect(() => plan('tiny-minicpm3', { ropeBase: 1e6 })).toThrow(/rope.freq_base \(10000\)/);
    expect(() => plan('tiny-minicpm3', { nExperts: 4 })).toThrow(/dense model/);
    expect(() => plan('tiny-minicpm3', { mla: { ...cpm.mla, qkRope: 15 } })).toThrow(/bad MLA sizes/);
    const plm = config('tiny-plm');
    expect(() => plan('tiny-plm', { mla: { ...plm.mla, qLora: 64 } })).toThrow(/no q LoRA/);
    expect(() => plan('tiny-plm', { tiedEmbeddings: false })).toThrow(/tiedEmbeddings/);
    expect(() => plan('tiny-plm', { longRope: true })).toThrow(/no LongRoPE/);
    expect(() => plan('tiny-plm', { mla: undefined as unknown as MlaDenseConfig['mla'] })).toThrow(/needs mla options/);
  });
});
