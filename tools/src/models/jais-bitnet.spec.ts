// The writer of architectures/jais-bitnet.ts (jais, jais2, bitnet): the tensors, shapes, types and
// keys each llama.cpp loader (src/models/<arch>.cpp) takes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import type { JaisBitnetConfig } from './architectures/jais-bitnet';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { presetPlans, writtenKeys } from './writer-spec.suite';
import type { FileTypeName } from './quant-plan';

const { config, plan, block } = presetPlans<JaisBitnetConfig>();
const heads = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
const LN = (n: string) => [`${n}.weight`, `${n}.bias`];

describe('jais / jais2 / bitnet writer', () => {
  it("each block's tensors as its loader names them, and the heads", () => {
    expect(block('tiny-jais', 2)).toEqual([...LN('attn_norm'), ...LN('attn_qkv'), ...LN('attn_output'), ...LN('ffn_norm'), ...LN('ffn_gate'), ...LN('ffn_up'), ...LN('ffn_down')].sort());
    expect(block('tiny-jais2', 0)).toEqual([...LN('attn_norm'), ...LN('attn_q'), ...LN('attn_k'), ...LN('attn_v'), ...LN('attn_output'), ...LN('ffn_norm'), ...LN('ffn_up'), ...LN('ffn_down')].sort());
    const S = (n: string) => [`${n}.weight`, `${n}.scale`];
    expect(block('tiny-bitnet', 3)).toEqual(['attn_norm.weight', 'attn_sub_norm.weight', 'ffn_norm.weight', 'ffn_sub_norm.weight', ...['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'].flatMap(S)].sort());
    expect(block('tiny-bitnet', 3).filter((n) => n.endsWith('.scale'))).toHaveLength(7);
    expect(heads('tiny-jais')).toEqual(['token_embd.weight', ...LN('output_norm'), 'output.weight']);
    expect(heads('tiny-jais2')).toEqual(['token_embd.weight', ...LN('output_norm')]);
    expect(heads('tiny-bitnet')).toEqual(['token_embd.weight', 'output_norm.weight']);
    expect(block('tiny-bitnet', 0).filter((n) => n.endsWith('.scale'))).toHaveLength(7);
    expect(plan('tiny-bitnet', { weightScales: false }).tensors.filter((x) => x.name.endsWith('.scale'))).toHaveLength(0);
    expect([DEFAULT_PRESET_FOR_ARCH.jais, DEFAULT_PRESET_FOR_ARCH.jais2, DEFAULT_PRESET_FOR_ARCH.bitnet]).toEqual(['tiny-jais', 'tiny-jais2', 'tiny-bitnet']);
  });

  it('shapes and types: the fused q/k/v, the sub-norms, one-value F32 scales beside ternary weights', () => {
    const s = new Map(plan('tiny-jais').tensors.map((x) => [x.name, x.shape]));
    expect([s.get('blk.0.attn_qkv.weight'), s.get('blk.0.attn_qkv.bias'), s.get('blk.0.ffn_gate.bias')]).toEqual([[256, 768], [768], [512]]);
    const b = new Map(plan('tiny-bitnet').tensors.map((x) => [x.name, x.shape]));
    expect([b.get('blk.0.attn_sub_norm.weight'), b.get('blk.0.ffn_sub_norm.weight'), b.get('blk.0.attn_k.weight'), b.get('blk.0.ffn_down.scale')]).toEqual([[256], [512], [256, 128], [1]]);
    for (const t of ['TQ2_0', 'TQ1_0'] as const) {
      const q = new Map(plan('tiny-bitnet', {}, t).tensors.map((x) => [x.name, x.type]));
      expect([q.get('blk.0.attn_q.weight'), q.get('blk.0.ffn_down.weight'), q.get('blk.0.attn_q.scale'), q.get('blk.0.ffn_sub_norm.weight')]).toEqual([GgmlType[t], GgmlType[t], GgmlType.F32, GgmlType.F32]);
    }
    const j = new Map(plan('tiny-jais', {}, 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([j.get('blk.0.attn_qkv.bias'), j.get('blk.0.ffn_gate.bias'), j.get('output_norm.bias')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.F32]);
  });

  it('keys: jais without rope.* and with max_alibi_bias, LayerNorm epsilons for jais / jais2, the RMS one for bitnet; refusals', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'jais-bitnet-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, config(preset));
      const j = keys('tiny-jais');
      expect(j.names.filter((k) => k.includes('.rope.'))).toEqual([]);
      expect([j.get('attention.max_alibi_bias'), j.get('attention.layer_norm_epsilon'), j.get('attention.layer_norm_rms_epsilon')]).toEqual([8, Math.fround(1e-5), undefined]);
      const j2 = keys('tiny-jais2');
      expect([j2.get('rope.dimension_count'), j2.get('rope.freq_base'), j2.get('attention.layer_norm_epsilon')]).toEqual([64, 5e5, Math.fround(1e-5)]);
      const b = keys('tiny-bitnet');
      expect([b.get('attention.layer_norm_rms_epsilon'), b.get('attention.layer_norm_epsilon'), b.get('rope.dimension_count')]).toEqual([Math.fround(1e-6), undefined, 64]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(() => plan('tiny-jais', { tiedEmbeddings: true })).toThrow(/jais: the loader requires output.weight/);
    expect(() => plan('tiny-bitnet', { tiedEmbeddings: false })).toThrow(/bitnet: the loader reads no output.weight/);
    expect(() => plan('tiny-jais2', { maxAlibiBias: 8 })).toThrow(/maxAlibiBias is jais's/);
    expect(() => plan('tiny-jais', { maxAlibiBias: -1 })).toThrow(/maxAlibiBias is jais's, a non-negative number/);
    expect(() => plan('tiny-jais', { qkvBias: true })).toThrow(/qkvBias is jais2's/);
    expect(() => plan('tiny-jais2', { weightScales: true })).toThrow(/weightScales is bitnet's/);
    expect(() => plan('tiny-bitnet', { headDim: 32 })).toThrow(/heads x head must be 256/);
  });
});
