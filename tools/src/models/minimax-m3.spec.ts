// minimax-m3: the tensor list and keys llama.cpp's loader (src/models/minimax-m3.cpp) takes, as
// conversion/minimax.py writes them: per-head q/k norms, leading dense blocks, routed blocks with a
// selection bias, shared experts and the MSA indexer; its projections stay F32 in quantized files
// (llama-quant leaves indexer.q_proj / k_proj unquantized).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { getArch } from './architectures';
import type { MinimaxM3Config } from './architectures/minimax-m3';
import { planModel, writeModel } from './build';
import { getPreset } from './presets';

const shapes = (preset: string) => new Map(planModel(getPreset(preset).config, 'F32').tensors.map((t) => [t.name, t.shape]));
const IDX = ['indexer.q_proj.weight', 'indexer.k_proj.weight', 'indexer.q_norm.weight', 'indexer.k_norm.weight'];

describe('minimax-m3', () => {
  it('block 0 dense (ffn_gate/up/down), blocks 1-2 routed with exp_probs_b, a shared expert and the indexer; per-head q/k norms everywhere', () => {
    const s = shapes('tiny-minimax-m3');
    for (let i = 0; i < 3; i++) {
      expect(s.get(`blk.${i}.attn_q.weight`)).toEqual([256, 8 * 64]);
      expect(s.get(`blk.${i}.attn_k.weight`)).toEqual([256, 2 * 64]);
      expect(s.get(`blk.${i}.attn_output.weight`)).toEqual([8 * 64, 256]);
      expect([s.get(`blk.${i}.attn_q_norm.weight`), s.get(`blk.${i}.attn_k_norm.weight`)]).toEqual([[64], [64]]);
    }
    expect([s.get('blk.0.ffn_gate.weight'), s.get('blk.0.ffn_down.weight')]).toEqual([[256, 256], [256, 256]]);
    expect(IDX.some((n) => s.has(`blk.0.${n}`))).toBe(false);
    expect(s.has('blk.0.ffn_gate_inp.weight')).toBe(false);
    for (const i of [1, 2]) {
      expect(s.get(`blk.${i}.ffn_gate_exps.weight`)).toEqual([256, 128, 16]);
      expect(s.get(`blk.${i}.exp_probs_b.bias`)).toEqual([16]);
      expect(s.get(`blk.${i}.ffn_up_shexp.weight`)).toEqual([256, 128]);
      expect(IDX.map((n) => s.get(`blk.${i}.${n}`))).toEqual([[256, 2 * 64], [256, 64], [64], [64]]);
      expect(s.has(`blk.${i}.ffn_gate.weight`)).toBe(false);
    }
    // 3 globals; per block attn_norm, q, k, v, output, 2 q/k norms, ffn_norm; dense 3 FFN tensors;
    // routed: router, bias, 3 experts, 3 shared, 4 indexer.
    expect(s.size).toBe(3 + 3 * 8 + 3 + 2 * 12);
  });

  it('writes the converter keys: the indexer five, leading dense blocks, sigmoid gating with norm and scale, partial RoPE', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-minimax-m3-'));
    try {
      const out = path.join(dir, 'm3.gguf');
      writeModel({ config: getPreset('tiny-minimax-m3').config, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const v = (k: string) => kv.get(`minimax-m3.${k}`)?.value;
      expect(kv.get('general.architecture')!.value).toBe('minimax-m3');
      expect(['head_count', 'key_length', 'top_k', 'block_size', 'local_blocks'].map((k) => v(`attention.indexer.${k}`))).toEqual([2, 64, 4, 4, 2]);
      expect(['head_count', 'key_length', 'top_k', 'block_size', 'local_blocks'].every((k) => kv.get(`minimax-m3.attention.indexer.${k}`)!.type === GgufType.UINT32)).toBe(true);
      expect([v('leading_dense_block_count'), v('expert_shared_count'), v('expert_gating_func'), v('expert_weights_norm'), v('expert_weights_scale')]).toEqual([1, 1, 2, true, 2]);
      expect([v('rope.dimension_count'), v('attention.key_length'), v('expert_feed_forward_length'), v('feed_forward_length')]).toEqual([32, 64, 128, 256]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the indexer projections stay F32 in quantized files (the same bytes as the F32 file), the attention and experts quantize', () => {
    const t = new Map(planModel(getPreset('tiny-minimax-m3').config, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    for (const n of IDX) expect([n, t.get(`blk.1.${n}`)]).toEqual([n, GgmlType.F32]);
    for (const n of ['attn_q.weight', 'attn_output.weight', 'ffn_up_exps.weight', 'ffn_down_shexp.weight']) expect([n, t.get(`blk.1.${n}`)]).not.toEqual([n, GgmlType.F32]);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-minimax-m3-'));
    try {
      const bytes = (type: 'F32' | 'Q8_0', name: string) => {
        const out = path.join(dir, `${type}.gguf`);
        if (!fs.existsSync(out)) writeModel({ config: getPreset('tiny-minimax-m3-sparse').config, fileType: type, seed: 3, out });
        const h = readGgufHeader(out);
        const x = h.tensors.find((y) => y.name === name)!;
        const fd = fs.openSync(out, 'r');
        try {
          const b = Buffer.alloc(x.bytes);
          fs.readSync(fd, b, 0, x.bytes, h.dataOffset + x.offset);
          return b;
        } finally {
          fs.closeSync(fd);
        }
      };
      for (const n of ['blk.0.indexer.q_proj.weight', 'blk.1.indexer.k_proj.weight']) expect(bytes('Q8_0', n).equals(bytes('F32', n))).toBe(true);
      expect(bytes('Q8_0', 'blk.0.attn_q.weight').length).toBeLessThan(bytes('F32', 'blk.0.attn_q.weight').length);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configurations llama.cpp cannot load', () => {
    const c = getPreset('tiny-minimax-m3').config as MinimaxM3Config;
    expect(() => planModel({ ...c, msa: { ...c.msa, nHead: 4 } } as MinimaxM3Config, 'F32')).toThrow(/one indexer head per KV head/);
    expect(() => planModel({ ...c, msa: { ...c.msa, headDim: 16 } } as MinimaxM3Config, 'F32')).toThrow(/headDim >= ropeDims/);
    expect(() => planModel({ ...c, msa: { ...c.msa, block: 0 } } as MinimaxM3Config, 'F32')).toThrow(/block >= 1/);
    expect(() => planModel({ ...c, moe: { ...c.moe, nDense: 3 } } as MinimaxM3Config, 'F32')).toThrow(/at least one routed/);
    expect(() => planModel({ ...c, moe: { ...c.moe, gating: 'softmax' } } as MinimaxM3Config, 'F32')).toThrow(/sigmoid/);
    expect(() => planModel({ ...c, ropeDims: 66 } as MinimaxM3Config, 'F32')).toThrow(/ropeDims/);
    expect(getArch('minimax-m3').ggufArch).toBe('minimax-m3');
  });
});
