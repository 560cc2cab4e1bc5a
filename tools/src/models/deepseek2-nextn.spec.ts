// DeepSeek-V3's multi-token-prediction (NextN) block in written files: names and ggml shapes as
// llama.cpp's deepseek2 load_arch_tensors creates them for block n_layer (the first past the trunk).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import type { Deepseek2Config } from './architectures/deepseek2';
import { generateTensorF32, planModel, writeModel } from './build';
import { getPreset } from './presets';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-nextn-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const mtp = getPreset('tiny-deepseek3-mtp').config as Deepseek2Config;
const L = mtp.nLayers;
const D = mtp.dim;
const V = mtp.vocabSize;

const NEXTN: [string, number[]][] = [
  [`blk.${L}.nextn.eh_proj.weight`, [2 * D, D]],
  [`blk.${L}.nextn.enorm.weight`, [D]],
  [`blk.${L}.nextn.hnorm.weight`, [D]],
  [`blk.${L}.nextn.shared_head_norm.weight`, [D]],
];
const OWN: [string, number[]][] = [
  [`blk.${L}.nextn.embed_tokens.weight`, [D, V]],
  [`blk.${L}.nextn.shared_head_head.weight`, [D, V]],
];

/** Block i's tensors with the `blk.i.` prefix removed. */
function blockShapes(shapes: Map<string, number[]>, i: number): Map<string, number[]> {
  const p = `blk.${i}.`;
  return new Map([...shapes].filter(([n]) => n.startsWith(p) && !n.startsWith(`${p}nextn.`)).map(([n, s]) => [n.slice(p.length), s]));
}

describe('deepseek2 nextn: 1 (tiny-deepseek3-mtp)', () => {
  it('the file: block_count = trunk + 1, nextn_predict_layers = 1, the MTP block as a trunk MoE block plus the nextn tensors', () => {
    const out = path.join(dir, 'mtp.gguf');
    const res = writeModel({ config: mtp, fileType: 'F32', seed: 7, out });
    const h = readGgufHeader(out);
    expect(h.kv.get('deepseek2.block_count')!.value).toBe(L + 1);
    expect(h.kv.get('deepseek2.nextn_predict_layers')!.value).toBe(1);
    expect(h.kv.get('deepseek2.leading_dense_block_count')!.value).toBe(1);
    const shapes = new Map(h.tensors.map((t) => [t.name, t.shape]));
    for (const [name, shape] of NEXTN) expect([name, shapes.get(name)]).toEqual([name, shape]);
    for (const [name] of OWN) expect(shapes.has(name)).toBe(false);
    // Every tensor of the last trunk block (a MoE block: q LoRA, split k_b/v_b, router + bias,
    // experts, shared expert), with the same shapes; nothing else at that index but nextn.*.
    const trunk = blockShapes(shapes, L - 1);
    const block = blockShapes(shapes, L);
    expect([...trunk.keys()].sort()).toEqual(
      [
        'attn_norm.weight', 'attn_q_a.weight', 'attn_q_a_norm.weight', 'attn_q_b.weight', 'attn_kv_a_mqa.weight', 'attn_kv_a_norm.weight',
        'attn_k_b.weight', 'attn_v_b.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_gate_inp.weight', 'exp_probs_b.bias',
        'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight',
      ].sort(),
    );
    expect(block).toEqual(trunk);
    expect(h.tensors.filter((t) => t.name.startsWith(`blk.${L}.`)).length).toBe(trunk.size + NEXTN.length);
    expect(res.tensors.length).toBe(h.tensors.length);
    // The values are the generator's, like every other tensor.
    for (const [name] of NEXTN) {
      const t = h.tensors.find((x) => x.name === name)!;
      expect(t.type).toBe(GgmlType.F32);
      const want = generateTensorF32(mtp, 7, name);
      expect([name, Buffer.from(readGgufTensorBytes(out, t)).equals(Buffer.from(want.buffer))]).toEqual([name, true]);
    }
  });

  it('trunk tensors are those of tiny-deepseek3, value for value (the same seed writes the same trunk)', () => {
    const base = getPreset('tiny-deepseek3').config;
    const a = planModel(base, 'F32').tensors;
    const b = planModel(mtp, 'F32').tensors.filter((t) => !t.name.startsWith(`blk.${L}.`));
    expect(b.map((t) => [t.name, t.shape])).toEqual(a.map((t) => [t.name, t.shape]));
    for (const name of ['token_embd.weight', 'blk.2.attn_q_b.weight', 'blk.2.ffn_down_exps.weight']) {
      expect(Buffer.from(generateTensorF32(mtp, 7, name).buffer).equals(Buffer.from(generateTensorF32(base, 7, name).buffer))).toBe(true);
    }
  });

  it('expert groups must be fewer than the experts (llama.cpp asserts n_expert_groups < n_expert)', () => {
    const base = getPreset('tiny-deepseek3').config as Deepseek2Config;
    const groups = base.moe.nGroup;
    expect(groups).toBeGreaterThan(1);
    expect(() => planModel({ ...base, nExperts: groups }, 'F32')).toThrow(`expert groups ${base.moe.nGroupUsed}/${groups} do not fit ${groups} experts`);
    expect(planModel({ ...base, nExperts: groups * 2 }, 'F32').tensors.length).toBeGreaterThan(0);
  });

  it('tiny-deepseek3 itself carries no NextN metadata or tensors', () => {
    const out = path.join(dir, 'base.gguf');
    writeModel({ config: getPreset('tiny-deepseek3').config, fileType: 'F32', seed: 7, out });
    const h = readGgufHeader(out);
    expect(h.kv.get('deepseek2.block_count')!.value).toBe(L);
    expect(h.kv.has('deepseek2.nextn_predict_layers')).toBe(false);
    expect(h.tensors.some((t) => t.name.includes('nextn') || t.name.startsWith(`blk.${L}.`))).toBe(false);
  });

  it('nextnOwnEmbeddings adds nextn.embed_tokens and nextn.shared_head_head, {n_embd, n_vocab}', () => {
    const s = new Map(planModel({ ...mtp, nextnOwnEmbeddings: true } as Deepseek2Config, 'F32').tensors.map((t) => [t.name, t.shape]));
    for (const [name, shape] of [...NEXTN, ...OWN]) expect([name, s.get(name)]).toEqual([name, shape]);
  });

  it('init: eh_proj std 1/sqrt(2*dim) (unit-scale stream from two normed halves), norms near 1', () => {
    const std = (a: Float32Array, mean = 0) => Math.sqrt(a.reduce((s, x) => s + (x - mean) ** 2, 0) / a.length);
    expect(std(generateTensorF32(mtp, 7, `blk.${L}.nextn.eh_proj.weight`)) * Math.sqrt(2 * D)).toBeCloseTo(1, 1);
    for (const n of ['enorm', 'hnorm', 'shared_head_norm']) {
      const w = generateTensorF32(mtp, 7, `blk.${L}.nextn.${n}.weight`);
      expect(Math.abs(w.reduce((s, x) => s + x, 0) / w.length - 1)).toBeLessThan(0.05);
    }
  });

  it('quantized plans: eh_proj typed like a linear, nextn norms F32, the block typed like a last layer', () => {
    const q = new Map(planModel({ ...mtp, nextnOwnEmbeddings: true } as Deepseek2Config, 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    expect(q.get(`blk.${L}.nextn.eh_proj.weight`)).toBe(GgmlType.Q4_K);
    for (const n of ['enorm', 'hnorm', 'shared_head_norm']) expect(q.get(`blk.${L}.nextn.${n}.weight`)).toBe(GgmlType.F32);
    expect(q.get(`blk.${L}.nextn.shared_head_head.weight`)).toBe(q.get('output.weight'));
    expect(q.get(`blk.${L}.nextn.embed_tokens.weight`)).toBe(q.get('token_embd.weight'));
    expect(q.get(`blk.${L}.ffn_down_exps.weight`)).toBe(GgmlType.Q6_K);
    expect(q.get(`blk.${L}.ffn_gate_inp.weight`)).toBe(GgmlType.F32);
    const q8 = new Map(planModel(mtp, 'Q8_0').tensors.map((t) => [t.name, t.type]));
    expect(q8.get(`blk.${L}.nextn.eh_proj.weight`)).toBe(GgmlType.Q8_0);
  });

  it('refuses what llama.cpp graph_mtp cannot run', () => {
    const plan = (c: Partial<Deepseek2Config>) => () => planModel({ ...mtp, ...c } as Deepseek2Config, 'F32');
    expect(plan({ nextn: 2 })).toThrow(/nextn must be 0 or 1/);
    expect(plan({ mla: { ...mtp.mla, qLora: 0 } })).toThrow(/needs q LoRA/);
    expect(plan({ mla: { ...mtp.mla, layout: 'kv_b' } })).toThrow(/split attn_k_b\/attn_v_b/);
    expect(plan({ moe: { ...mtp.moe, nShared: 0 } })).toThrow(/needs shared experts/);
    expect(plan({ nextn: 0, nextnOwnEmbeddings: true })).toThrow(/needs nextn: 1/);
  });
});
