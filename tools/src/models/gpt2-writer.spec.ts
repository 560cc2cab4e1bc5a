// The GPT-2-style decoders of architectures/llama-dense.ts (gpt2, starcoder, codeshell, qwen): the
// tensors and keys each llama.cpp loader (src/models/<arch>.cpp) takes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import type { DenseFamilyConfig } from './architectures/llama-dense';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { presetPlans, writtenKeys } from './writer-spec.suite';

const { config, plan, block, shapes } = presetPlans<DenseFamilyConfig>();
const heads = (preset: string) => plan(preset).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
const LN_BLOCK = ['attn_norm.weight', 'attn_norm.bias', 'attn_qkv.weight', 'attn_qkv.bias', 'attn_output.weight', 'attn_output.bias', 'ffn_norm.weight', 'ffn_norm.bias', 'ffn_up.weight', 'ffn_up.bias', 'ffn_down.weight', 'ffn_down.bias'];

describe('GPT-2-style writer', () => {
  it("each block's and the trunk's tensors as the loaders name and size them", () => {
    for (const p of ['tiny-gpt2', 'tiny-starcoder', 'tiny-codeshell']) expect(block(p, 1)).toEqual([...LN_BLOCK].sort());
    expect(block('tiny-codeshell-split', 0)).toEqual(['attn_norm.weight', 'attn_norm.bias', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_q.bias', 'attn_k.bias', 'attn_v.bias', ...LN_BLOCK.slice(4)].sort());
    expect(block('tiny-qwen', 2)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_qkv.bias', 'attn_output.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'].sort());
    expect(heads('tiny-gpt2')).toEqual(['token_embd.weight', 'position_embd.weight', 'output_norm.weight', 'output_norm.bias']);
    expect(heads('tiny-starcoder')).toEqual(['token_embd.weight', 'position_embd.weight', 'output_norm.weight', 'output_norm.bias', 'output.weight']);
    expect(heads('tiny-codeshell-split')).toEqual(['output_norm.weight', 'output_norm.bias', 'output.weight']);
    expect(heads('tiny-qwen')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const g = shapes('tiny-gpt2');
    expect([g.get('position_embd.weight'), g.get('blk.0.attn_qkv.weight'), g.get('blk.0.attn_qkv.bias')]).toEqual([[256, 256], [256, 768], [768]]);
    // StarCoder's multi-query attn_qkv: n_embd + 2 x one head.
    expect(shapes('tiny-starcoder').get('blk.0.attn_qkv.weight')).toEqual([256, 384]);
    // Qwen's FFN tensors are half of feed_forward_length.
    expect(shapes('tiny-qwen').get('blk.0.ffn_up.weight')).toEqual([256, 512]);
    // Positions and biases stay F32, as llama-quantize leaves them.
    const q = new Map(plan('tiny-gpt2', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('position_embd.weight'), q.get('blk.0.attn_qkv.bias'), q.get('blk.0.ffn_down.bias')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.attn_qkv.weight')).not.toBe(GgmlType.F32);
    expect([DEFAULT_PRESET_FOR_ARCH.gpt2, DEFAULT_PRESET_FOR_ARCH.starcoder, DEFAULT_PRESET_FOR_ARCH.codeshell, DEFAULT_PRESET_FOR_ARCH.qwen]).toEqual(['tiny-gpt2', 'tiny-starcoder', 'tiny-codeshell', 'tiny-qwen']);
  });

  it('the keys: no rope.* for learned positions, attention.layer_norm_epsilon, Qwen’s doubled feed_forward_length', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gpt2-writer-spec-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, config(preset));
      const g = keys('tiny-gpt2');
      expect(g.names.filter((k) => k.startsWith('gpt2.rope.'))).toEqual([]);
      expect([g.get('context_length'), g.get('attention.layer_norm_epsilon'), g.get('attention.layer_norm_rms_epsilon')]).toEqual([256, Math.fround(1e-5), undefined]);
      expect(keys('tiny-starcoder').get('attention.head_count_kv')).toBe(1);
      const c = keys('tiny-codeshell');
      expect([c.get('rope.dimension_count'), c.get('attention.layer_norm_epsilon')]).toEqual([64, Math.fround(1e-5)]);
      const q = keys('tiny-qwen');
      expect([q.get('feed_forward_length'), q.get('attention.layer_norm_rms_epsilon')]).toEqual([1024, Math.fround(1e-5)]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects configs the loaders cannot take, naming the field', () => {
    expect(() => plan('tiny-gpt2', { fusedQkv: false })).toThrow(/the loader requires one attn_qkv and its bias/);
    expect(() => plan('tiny-qwen', { qkvBias: false })).toThrow(/the loader requires one attn_qkv and its bias/);
    expect(() => plan('tiny-qwen', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
    expect(() => plan('tiny-codeshell', { tiedEmbeddings: true })).toThrow(/requires output.weight/);
    expect(() => plan('tiny-starcoder', { noTokenEmbd: true })).toThrow(/noTokenEmbd is codeshell's/);
    expect(() => plan('tiny-codeshell', { ropeDims: 32 })).toThrow(/the graph asserts rope.dimension_count == head size/);
  });
});
