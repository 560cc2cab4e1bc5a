// deci (DeciLM / Nemotron-51B): the tensors and keys llama.cpp's loader (src/models/deci.cpp) takes
// per block, as conversion/deci.py writes a block_configs model, and the configs the writer refuses.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { DeciConfig } from './architectures/deci';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const config = (preset: string, over: Partial<DeciConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as DeciConfig;
const plan = (preset: string, over: Partial<DeciConfig> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel(config(preset, over), type);
const block = (ts: { name: string; layer?: number }[], i: number) => ts.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_output.bias'];
const FFN = ['ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', 'ffn_gate.bias', 'ffn_up.bias', 'ffn_down.bias'];

describe('deci writer', () => {
  it('tensors per block: attention, a linear map (attn_norm + attn_output), or none; FFNs of their own widths; rope_freqs', () => {
    const t = plan('tiny-deci').tensors;
    expect(block(t, 0)).toEqual([...ATTN, ...FFN].sort());
    expect(block(t, 1)).toEqual(['attn_norm.weight', 'attn_output.weight', ...FFN].sort());
    expect(block(t, 2)).toEqual([...FFN].sort());
    const s = new Map(t.map((x) => [x.name, x.shape]));
    expect(['blk.1.attn_output.weight', 'blk.2.ffn_up.weight', 'blk.3.ffn_down.weight', 'blk.4.attn_k.weight', 'blk.4.attn_q.weight', 'rope_freqs.weight'].map((n) => s.get(n))).toEqual([
      [256, 256], [256, 768], [256, 256], [256, 64], [256, 256], [32],
    ]);
    expect(t.find((x) => x.name === 'rope_freqs.weight')!.init).toEqual({ kind: 'ramp', start: 1, step: 7 / 31 });
    const q = new Map(plan('tiny-deci', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of ['rope_freqs.weight', 'blk.0.ffn_up.bias']) expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    expect(q.get('blk.0.ffn_up.weight')).not.toBe(GgmlType.F32);
    // -noffn: block 3 attends and has no FFN; its twin's zero ffn_down.
    const n = plan('tiny-deci-noffn').tensors;
    expect(block(n, 3)).toEqual(ATTN.filter((x) => x !== 'attn_output.bias').sort());
    const twin = planModel({ ...config('tiny-deci-noffn'), blocks: config('tiny-deci-noffn').blocks.map((b, i) => (i === 3 ? { ...b, ff: 256 } : b)), zeroFfnDown: [3] } as DeciConfig, 'F32').tensors;
    expect(twin.find((x) => x.name === 'blk.3.ffn_down.weight')!.init).toEqual({ kind: 'const', value: 0 });
    expect(DEFAULT_PRESET_FOR_ARCH.deci).toBe('tiny-deci');
  });

  it("writes the converter's per-block arrays and head sizes", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deci-spec-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config('tiny-deci'), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('deci.')).map((k) => [k.slice(5), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 256, block_count: 6,
        feed_forward_length: [512, 512, 768, 256, 512, 512], 'attention.head_count': [4, 4, 0, 4, 4, 4], 'attention.head_count_kv': [2, 0, 0, 4, 1, 2],
        'rope.freq_base': 500000, 'attention.layer_norm_rms_epsilon': Math.fround(1e-5), 'attention.key_length': 64, 'attention.value_length': 64, 'rope.dimension_count': 64,
      });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    const b = config('tiny-deci').blocks;
    expect(() => plan('tiny-deci', { blocks: b.slice(1) })).toThrow(/one per layer/);
    expect(() => plan('tiny-deci', { blocks: b.map((x, i) => (i === 0 ? { ...x, heads: 2 } : x)) })).toThrow(/block 0 has 2 heads/);
    expect(() => plan('tiny-deci', { blocks: b.map((x, i) => (i === 0 ? { ...x, kvHeads: 3 } : x)) })).toThrow(/kvHeads 3 must divide/);
    expect(() => plan('tiny-deci', { zeroFfnDown: [0] })).toThrow(/zeroFfnDown with ffnBias/);
    expect(() => plan('tiny-deci-noffn', { zeroFfnDown: [3] })).toThrow(/names block 3, which has no FFN/);
    expect(() => plan('tiny-deci', { nExperts: 4 })).toThrow(/dense model/);
  });
});
