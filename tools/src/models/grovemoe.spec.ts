// grovemoe (inclusionAI GroveMoE): the tensors and keys llama.cpp's loader (src/models/grovemoe.cpp)
// takes, as conversion/grovemoe.py GroveMoeModel writes them: qwen3moe blocks plus the chunk
// experts ffn_{gate,up,down}_chexps (expert_count / experts_per_group of them, each of
// expert_chunk_feed_forward_length), the UINT32 / FLOAT32 keys, the optional head, the type plan
// of the chunk experts (llama-quant treats them as the routed experts' ffn_up / ffn_gate /
// ffn_down), and the weights' scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, ggmlTypeTraits, GgufType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { groveChunkExperts, groveChunkExpertsUsed, groveStreamStd, type GroveMoeConfig } from './architectures/grovemoe';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { FILE_TYPES, fitType } from './quant-plan';
import { Xoshiro128 } from './rng';

const BLOCK = [
  'attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output.weight',
  'ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight',
  'ffn_gate_chexps.weight', 'ffn_up_chexps.weight', 'ffn_down_chexps.weight',
];
const CHEXPS = ['ffn_gate_chexps', 'ffn_up_chexps', 'ffn_down_chexps'];

const config = (preset: string, over: Partial<GroveMoeConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as GroveMoeConfig;
const plan = (preset: string, over: Partial<GroveMoeConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<GroveMoeConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const types = (preset: string, ft: (typeof FILE_TYPES)[number], over: Partial<GroveMoeConfig> = {}) =>
  new Map(planModel(config(preset, over), ft).tensors.map((t) => [t.name, t.type]));
const params = (preset: string, over: Partial<GroveMoeConfig> = {}) => plan(preset, over).tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
const stats = (a: ArrayLike<number>) => {
  const v = Array.from(a);
  const m = v.reduce((s, x) => s + x, 0) / v.length;
  return { mean: m, std: Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length - m * m) };
};

describe('grovemoe', () => {
  it('tensors: qwen3moe blocks plus ffn_{gate,up,down}_chexps in every block; untied head on tiny-grovemoe, tied (no output.weight) on -g4', () => {
    for (const [p, globals] of [
      ['tiny-grovemoe', ['token_embd.weight', 'output_norm.weight', 'output.weight']],
      ['tiny-grovemoe-g4', ['token_embd.weight', 'output_norm.weight']],
    ] as const) {
      const t = plan(p).tensors;
      const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
      for (let i = 0; i < 4; i++) expect(block(i)).toEqual([...BLOCK].sort());
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(globals);
      expect(t.length).toBe(globals.length + 4 * BLOCK.length);
    }
    expect(DEFAULT_PRESET_FOR_ARCH.grovemoe).toBe('tiny-grovemoe');
  });

  it('presets: the shapes and grouping each one is meant to cover', () => {
    const c = config('tiny-grovemoe');
    expect([c.nLayers, c.dim, c.nHeads, c.nKvHeads, c.headDim, c.nExperts, c.nExpertsUsed, c.expertFf, c.chunkFf, c.expertsPerGroup, c.expertGroupScale, c.tiedEmbeddings]).toEqual([
      4, 256, 4, 2, 128, 8, 2, 512, 64, 2, 0.5, false,
    ]);
    // 4 chunk experts, 2 of them per token (n_expert_used <= n_chunk).
    expect([groveChunkExperts(c), groveChunkExpertsUsed(c)]).toEqual([4, 2]);
    const g4 = config('tiny-grovemoe-g4');
    expect([g4.nExperts, g4.nExpertsUsed, g4.expertsPerGroup, g4.chunkFf, g4.expertGroupScale, g4.tiedEmbeddings]).toEqual([8, 2, 4, 256, 0.25, true]);
    // 2 chunk experts, as many as the experts used: the chunk call picks both slots (the same chunk
    // expert twice when the top two experts share a group).
    expect([groveChunkExperts(g4), groveChunkExpertsUsed(g4)]).toEqual([2, 2]);
    // The chunk width differs from the head size (the loader's default when the key is absent), the
    // expert width and n_embd on tiny-grovemoe.
    expect(new Set([c.dim, c.headDim, c.expertFf, c.chunkFf]).size).toBe(4);
  });

  it('shapes (ggml order): chexps [n_embd, chunk ff, n_expert / experts_per_group], down [chunk ff, n_embd, n_chunk]; attention of heads x 128', () => {
    const s = shapes('tiny-grovemoe');
    expect(['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_q_norm', 'attn_k_norm', 'ffn_norm'].map((n) => s.get(`blk.2.${n}.weight`))).toEqual([
      [256, 512], [256, 256], [256, 256], [512, 256], [128], [128], [256],
    ]);
    expect(['ffn_gate_inp', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', ...CHEXPS].map((n) => s.get(`blk.3.${n}.weight`))).toEqual([
      [256, 8], [256, 512, 8], [256, 512, 8], [512, 256, 8], [256, 64, 4], [256, 64, 4], [64, 256, 4],
    ]);
    expect([s.get('token_embd.weight'), s.get('output_norm.weight'), s.get('output.weight')]).toEqual([[256, 1024], [256], [256, 1024]]);
    const g4 = shapes('tiny-grovemoe-g4');
    expect(CHEXPS.map((n) => g4.get(`blk.0.${n}.weight`))).toEqual([[256, 256, 2], [256, 256, 2], [256, 256, 2]]);
    // experts_per_group 1: a chunk expert per expert; 8: a single one.
    expect(shapes('tiny-grovemoe', { expertsPerGroup: 1 }).get('blk.0.ffn_down_chexps.weight')).toEqual([64, 256, 8]);
    expect(shapes('tiny-grovemoe', { expertsPerGroup: 8, nExpertsUsed: 1 }).get('blk.0.ffn_up_chexps.weight')).toEqual([256, 64, 1]);
    expect(shapes('tiny-grovemoe', { chunkFf: 96 }).get('blk.1.ffn_gate_chexps.weight')).toEqual([256, 96, 4]);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-grovemoe', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/grovemoe: needs experts/);
    expect(() => plan('tiny-grovemoe', { nExpertsUsed: 9 })).toThrow(/experts-used 9 must be in \[1, 8\]/);
    expect(() => plan('tiny-grovemoe', { nExpertsUsed: 0 })).toThrow(/experts-used 0/);
    expect(() => plan('tiny-grovemoe', { expertFf: 0 })).toThrow(/expertFf must be a positive integer/);
    expect(() => plan('tiny-grovemoe', { ff: 0 })).toThrow(/ff must be a positive integer/);
    expect(() => plan('tiny-grovemoe', { nKvHeads: 3 })).toThrow(/heads 4 not divisible by kv heads 3/);
    expect(() => plan('tiny-grovemoe', { headDim: 127 })).toThrow(/head size 127 must be even/);
    for (const v of [0, -1, 2.5, Number.NaN, undefined]) {
      expect(() => plan('tiny-grovemoe', { chunkFf: v as number })).toThrow(/grovemoe: chunkFf must be a positive integer \(expert_chunk_feed_forward_length/);
      expect(() => plan('tiny-grovemoe', { expertsPerGroup: v as number })).toThrow(/grovemoe: expertsPerGroup must be a positive integer \(experts_per_group/);
    }
    expect(() => plan('tiny-grovemoe', { expertsPerGroup: 3 })).toThrow(/grovemoe: expertsPerGroup 3 must divide the expert count 8/);
    expect(() => plan('tiny-grovemoe', { expertsPerGroup: 16 })).toThrow(/expertsPerGroup 16 must divide the expert count 8/);
    for (const v of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0.05, undefined, '0.05']) {
      expect(() => plan('tiny-grovemoe', { expertGroupScale: v as number })).toThrow(/grovemoe: expertGroupScale must be a finite number >= 0 \(expert_group_scale/);
    }
    // More experts used than chunk experts: llama.cpp's graph asserts (it sums n_expert_used views of
    // a chunk output holding min(n_expert_used, n_chunk)), so no such file is written.
    expect(() => plan('tiny-grovemoe-g4', { nExpertsUsed: 3 })).toThrow(/grovemoe: experts-used 3 must be <= the chunk expert count 2 \(nExperts \/ expertsPerGroup/);
    expect(() => plan('tiny-grovemoe', { expertsPerGroup: 8 })).toThrow(/experts-used 2 must be <= the chunk expert count 1/);
    expect(() => plan('bench-grovemoe-shaped', { expertsPerGroup: 32 })).toThrow(/experts-used 8 must be <= the chunk expert count 4/);
    // 0: the chunk experts add nothing (still a loadable file); any divisor of the expert count with enough chunk experts.
    expect((plan('tiny-grovemoe', { expertGroupScale: 0 }).config as GroveMoeConfig).expertGroupScale).toBe(0);
    for (const g of [1, 2, 4]) expect(() => plan('tiny-grovemoe', { expertsPerGroup: g })).not.toThrow();
    expect(() => plan('tiny-grovemoe', { expertsPerGroup: 8, nExpertsUsed: 1 })).not.toThrow();
    expect(() => plan('bench-grovemoe-shaped', { expertsPerGroup: 16 })).not.toThrow();
  });

  it('quant plan: chexps take the routed experts\' types (llama-quant matches ffn_up / ffn_gate / ffn_down by substring), with the same fallbacks by row length', () => {
    // tiny-grovemoe-g4: every chexps row (256) is as wide as a K-quant block, so in every file type
    // each chunk tensor has exactly the type of its routed counterpart in the same block.
    for (const ft of FILE_TYPES) {
      const q = types('tiny-grovemoe-g4', ft);
      for (let i = 0; i < 4; i++) {
        for (const r of ['gate', 'up', 'down']) expect([ft, i, r, q.get(`blk.${i}.ffn_${r}_chexps.weight`)]).toEqual([ft, i, r, q.get(`blk.${i}.ffn_${r}_exps.weight`)]);
      }
    }
    // tiny-grovemoe: gate / up rows are n_embd (256) as the routed ones; ffn_down_chexps' rows of 64 take the fallback.
    for (const ft of FILE_TYPES) {
      const q = types('tiny-grovemoe', ft);
      for (let i = 0; i < 4; i++) {
        expect(q.get(`blk.${i}.ffn_gate_chexps.weight`)).toBe(q.get(`blk.${i}.ffn_gate_exps.weight`));
        expect(q.get(`blk.${i}.ffn_up_chexps.weight`)).toBe(q.get(`blk.${i}.ffn_up_exps.weight`));
        const down = q.get(`blk.${i}.ffn_down_chexps.weight`)!;
        expect([ft, i, down]).toEqual([ft, i, fitType(q.get(`blk.${i}.ffn_down_exps.weight`)!, 64)]);
        // Never F16: 64 is a multiple of every fallback's 32-wide block (Q1_0's 128-value block has
        // no fallback, in llama.cpp either: F16 there).
        if (ft !== 'F16' && ft !== 'Q1_0') expect([ft, down]).not.toEqual([ft, GgmlType.F16]);
      }
    }
    // The concrete types. Q4_K: Q4_K, and Q5_0 on the rows of 64.
    const q4k = types('tiny-grovemoe', 'Q4_K');
    expect(CHEXPS.map((n) => q4k.get(`blk.0.${n}.weight`))).toEqual([GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q5_0]);
    // Q4_K_M: ffn_down on the use_more_bits blocks (2 and 3 of 4) Q6_K (Q8_0 on rows of 64), else Q4_K (Q5_0).
    const q4km = types('tiny-grovemoe', 'Q4_K_M');
    expect([0, 1, 2, 3].map((i) => q4km.get(`blk.${i}.ffn_down_chexps.weight`))).toEqual([GgmlType.Q5_0, GgmlType.Q5_0, GgmlType.Q8_0, GgmlType.Q8_0]);
    expect([0, 1, 2, 3].map((i) => q4km.get(`blk.${i}.ffn_gate_chexps.weight`))).toEqual([GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q4_K]);
    const g4km = types('tiny-grovemoe-g4', 'Q4_K_M');
    expect([0, 1, 2, 3].map((i) => g4km.get(`blk.${i}.ffn_down_chexps.weight`))).toEqual([GgmlType.Q4_K, GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.Q6_K]);
    // Q6_K / IQ2_XXS / Q8_0 / MXFP4 on the rows of 64: Q8_0, IQ4_NL, Q8_0, MXFP4.
    expect(['Q6_K', 'IQ2_XXS', 'Q8_0', 'MXFP4'].map((ft) => types('tiny-grovemoe', ft as 'Q8_0').get('blk.1.ffn_down_chexps.weight'))).toEqual([
      GgmlType.Q8_0, GgmlType.IQ4_NL, GgmlType.Q8_0, GgmlType.MXFP4,
    ]);
    // F32 in every file: norms, routers.
    for (const n of ['blk.0.ffn_gate_inp.weight', 'blk.0.attn_q_norm.weight', 'blk.0.ffn_norm.weight']) expect([n, q4k.get(n)]).toEqual([n, GgmlType.F32]);
  });

  it('bench-grovemoe-shaped: 675 tensors, 32.46B parameters (the published 33B with the real vocabulary); Q4_K but ffn_down_chexps (rows of 128: Q5_0); --layers N keeps N blocks', () => {
    const c = config('bench-grovemoe-shaped');
    expect([c.nLayers, c.dim, c.nHeads, c.nKvHeads, c.headDim, c.nExperts, c.nExpertsUsed, c.expertFf, c.chunkFf, c.expertsPerGroup, c.expertGroupScale, c.vocabSize]).toEqual([
      48, 2048, 32, 4, 128, 128, 8, 768, 128, 2, 0.05, 32000,
    ]);
    const full = plan('bench-grovemoe-shaped');
    expect(full.tensors.length).toBe(3 + 48 * BLOCK.length);
    expect(params('bench-grovemoe-shaped')).toBe(32_456_783_872);
    expect(params('bench-grovemoe-shaped') / 1e9).toBeCloseTo(32.46, 2);
    // With the real vocabulary of 151936: 33.0B.
    expect(params('bench-grovemoe-shaped', { vocabSize: 151936 }) / 1e9).toBeCloseTo(32.95, 2);
    const cut = planModel(config('bench-grovemoe-shaped', { nLayers: 2 }), 'Q4_K');
    expect(cut.tensors.length).toBe(3 + 2 * BLOCK.length);
    const s = new Map(cut.tensors.map((t) => [t.name, t.shape]));
    expect(['attn_q', 'attn_k', 'attn_output', 'ffn_gate_inp', 'ffn_up_exps', 'ffn_down_exps', ...CHEXPS].map((n) => s.get(`blk.1.${n}.weight`))).toEqual([
      [2048, 4096], [2048, 512], [4096, 2048], [2048, 128], [2048, 768, 128], [768, 2048, 128], [2048, 128, 64], [2048, 128, 64], [128, 2048, 64],
    ]);
    const quantized = cut.tensors.filter((t) => t.shape.length > 1 && t.role !== 'router');
    expect(quantized.filter((t) => t.type !== GgmlType.Q4_K).map((t) => [t.name, t.type])).toEqual([
      ['blk.0.ffn_down_chexps.weight', GgmlType.Q5_0],
      ['blk.1.ffn_down_chexps.weight', GgmlType.Q5_0],
    ]);
  });

  it('scales: routed experts as qwen3moe; chunk gate/up at gain 2/residualGain (their input is the routed mix), chunk down at residualGain; tied: writers x the embedding std', () => {
    const c = config('tiny-grovemoe');
    const rg = 1 / Math.sqrt(8); // 4 blocks
    const ratio = (name: string, want: number) => stats(generateTensorF32(c, 1, name)).std / want;
    expect(ratio('token_embd.weight', 1)).toBeCloseTo(1, 1);
    expect(ratio('output.weight', 2 / 16)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_inp.weight', 2 / 16)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_exps.weight', 1 / 16)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down_exps.weight', rg / Math.sqrt(512))).toBeCloseTo(1, 1);
    expect(ratio('blk.0.attn_output.weight', rg / Math.sqrt(512))).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_gate_chexps.weight', 2 / rg / 16)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_up_chexps.weight', 2 / rg / 16)).toBeCloseTo(1, 1);
    expect(ratio('blk.0.ffn_down_chexps.weight', rg / 8)).toBeCloseTo(1, 1);
    // Tied head (-g4): token_embd at the output's scale (2/sqrt(256) = 1/8), and every residual
    // writer scaled with it; the chunk gate / up gain grows by as much (their input is the routed mix).
    expect(groveStreamStd(c)).toBe(1);
    const g4 = config('tiny-grovemoe-g4');
    expect(groveStreamStd(g4)).toBe(1 / 8);
    const r4 = (name: string, want: number) => stats(generateTensorF32(g4, 1, name)).std / want;
    expect(r4('token_embd.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(r4('blk.1.attn_output.weight', rg / 8 / Math.sqrt(512))).toBeCloseTo(1, 1);
    expect(r4('blk.1.ffn_down_exps.weight', rg / 8 / Math.sqrt(512))).toBeCloseTo(1, 1);
    expect(r4('blk.1.ffn_down_chexps.weight', rg / 8 / 16)).toBeCloseTo(1, 1);
    expect(r4('blk.1.ffn_gate_chexps.weight', (2 * 8) / rg / 16)).toBeCloseTo(1, 1);
    expect(r4('blk.1.attn_q.weight', 1 / 16)).toBeCloseTo(1, 1);
    expect(r4('blk.1.ffn_gate_inp.weight', 2 / 16)).toBeCloseTo(1, 1);

    // Block 0's FFN as llama.cpp's graph computes it, over 64 unit-variance normed inputs: routed
    // mix (softmax top-2, renormalized), then the chunk experts on that mix (top-2 expert ids / 2,
    // weights read from the softmax at the chunk ids, renormalized), times expert_group_scale.
    const W = (n: string) => generateTensorF32(c, 1, `blk.0.${n}.weight`);
    const [router, ge, ue, de, gc, uc, dc] = ['ffn_gate_inp', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', ...CHEXPS].map(W);
    const D = 256;
    const swiglu = (x: Float32Array, g: Float32Array, u: Float32Array, d: Float32Array, e: number, ff: number, pre?: number[]) => {
      const h = new Float32Array(ff);
      for (let j = 0; j < ff; j++) {
        let a = 0;
        let b = 0;
        const o = (e * ff + j) * D;
        for (let i = 0; i < D; i++) {
          a += g[o + i] * x[i];
          b += u[o + i] * x[i];
        }
        pre?.push(a);
        h[j] = (a / (1 + Math.exp(-a))) * b;
      }
      const out = new Float32Array(D);
      for (let k = 0; k < D; k++) {
        let s = 0;
        const o = (e * D + k) * ff;
        for (let j = 0; j < ff; j++) s += d[o + j] * h[j];
        out[k] = s;
      }
      return out;
    };
    const rng = new Xoshiro128(7);
    const x = new Float32Array(D);
    const routed: number[] = [];
    const chunk: number[] = [];
    const chunkPre: number[] = [];
    for (let s = 0; s < 64; s++) {
      rng.fillNormal(x, 0, 1);
      const logits = Array.from({ length: 8 }, (_, e) => x.reduce((a, v, i) => a + v * router[e * D + i], 0));
      const mx = Math.max(...logits);
      const z = logits.map((l) => Math.exp(l - mx));
      const probs = z.map((v) => v / z.reduce((a, b) => a + b, 0));
      const top = logits.map((l, e) => [l, e] as const).sort((p, q) => q[0] - p[0]).slice(0, 2).map(([, e]) => e);
      const y = new Float32Array(D);
      const wsum = top.reduce((a, e) => a + probs[e], 0);
      for (const e of top) swiglu(x, ge, ue, de, e, 512).forEach((v, k) => (y[k] += (probs[e] / wsum) * v));
      const ids = top.map((e) => Math.floor(e / 2));
      const csum = ids.reduce((a, id) => a + probs[id], 0);
      const cy = new Float32Array(D);
      for (const id of ids) swiglu(y, gc, uc, dc, id, 64, chunkPre).forEach((v, k) => (cy[k] += (probs[id] / csum) * v));
      routed.push(...y);
      chunk.push(...cy.map((v) => v * c.expertGroupScale));
    }
    // The routed mix comes out at about half of residualGain (measured 0.48 x 0.35)...
    const r = stats(routed).std;
    expect(r / rg).toBeGreaterThan(0.25);
    expect(r / rg).toBeLessThan(1.5);
    // ... so the chunk experts' gate pre-activations are O(1) (measured 0.95), as the routed experts' over the normed input.
    const pre = stats(chunkPre).std;
    expect(pre).toBeGreaterThan(0.25);
    expect(pre).toBeLessThan(2);
    // And the scaled chunk mix is a visible fraction of the routed one (measured 0.54; the real scale 0.05 would make it a tenth of this).
    const share = stats(chunk).std / r;
    expect(share).toBeGreaterThan(0.2);
    expect(share).toBeLessThan(1);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-grovemoe-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const write = (preset: string, over: Partial<GroveMoeConfig> = {}) => {
      const out = path.join(dir, `${preset}.gguf`);
      writeModel({ config: config(preset, over), fileType: 'F32', seed: 1, out });
      const h = readGgufHeader(out);
      expect(h.kv.get('general.architecture')!.value).toBe('grovemoe');
      const keys = Object.fromEntries([...h.kv.keys()].filter((k) => k.startsWith('grovemoe.')).map((k) => [k.slice('grovemoe.'.length), h.kv.get(k)!.value]));
      return { out, h, kv: h.kv, keys };
    };
    const U32 = [
      'vocab_size', 'context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count', 'attention.head_count_kv',
      'rope.dimension_count', 'attention.key_length', 'attention.value_length', 'expert_count', 'expert_used_count', 'expert_feed_forward_length',
      'expert_chunk_feed_forward_length', 'experts_per_group',
    ];
    const F32 = ['rope.freq_base', 'attention.layer_norm_rms_epsilon', 'expert_group_scale'];

    it('tiny-grovemoe: the converter\'s keys (expert_chunk_feed_forward_length, experts_per_group UINT32; expert_group_scale FLOAT32) and the tensors round trip', () => {
      const { out, h, kv, keys } = write('tiny-grovemoe');
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 256, block_count: 4, feed_forward_length: 768,
        'attention.head_count': 4, 'attention.head_count_kv': 2, 'rope.freq_base': 1e6, 'attention.layer_norm_rms_epsilon': Math.fround(1e-6),
        'rope.dimension_count': 128, 'attention.key_length': 128, 'attention.value_length': 128, expert_count: 8, expert_used_count: 2,
        expert_feed_forward_length: 512, expert_chunk_feed_forward_length: 64, experts_per_group: 2, expert_group_scale: 0.5,
      });
      expect(Object.keys(keys).sort()).toEqual([...U32, ...F32].sort());
      for (const k of U32) expect([k, kv.get(`grovemoe.${k}`)!.type]).toEqual([k, GgufType.UINT32]);
      for (const k of F32) expect([k, kv.get(`grovemoe.${k}`)!.type]).toEqual([k, GgufType.FLOAT32]);
      expect(kv.get('tokenizer.ggml.model')!.value).toBe('gpt2');
      expect(kv.get('tokenizer.ggml.pre')!.value).toBe('qwen2');
      // The tensor table is the plan, and a chunk tensor's bytes are generateTensorF32's values.
      const p = plan('tiny-grovemoe').tensors;
      expect(h.tensors.map((t) => [t.name, t.shape, t.type])).toEqual(p.map((t) => [t.name, t.shape, GgmlType.F32]));
      const t = h.tensors.find((x) => x.name === 'blk.3.ffn_down_chexps.weight')!;
      const b = readGgufTensorBytes(out, t);
      expect(new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4)).toEqual(generateTensorF32(config('tiny-grovemoe'), 1, t.name));
    });

    it('tiny-grovemoe-g4: experts_per_group 4, chunk 256, scale 0.25, top-2; no output.weight', () => {
      const { h, kv, keys } = write('tiny-grovemoe-g4');
      expect([keys.expert_used_count, keys.experts_per_group, keys.expert_chunk_feed_forward_length, keys.expert_group_scale]).toEqual([2, 4, 256, 0.25]);
      expect(kv.get('grovemoe.expert_group_scale')!.type).toBe(GgufType.FLOAT32);
      expect(h.tensors.some((t) => t.name === 'output.weight')).toBe(false);
      expect(h.tensors.find((t) => t.name === 'blk.0.ffn_gate_chexps.weight')!.shape).toEqual([256, 256, 2]);
      // The bench preset's real scale survives FLOAT32 as 0.05f.
      expect(write('bench-grovemoe-shaped', { nLayers: 1, dim: 256, nHeads: 4, nKvHeads: 2, headDim: 64, expertFf: 256, chunkFf: 64, nExperts: 8, nExpertsUsed: 2, vocabSize: 1024 }).keys.expert_group_scale).toBe(Math.fround(0.05));
    });

    it('--expert-pool covers the chunk experts as well as the routed ones', () => {
      // A stand-in Q8_0 "quantizer" that stamps each block with its first value: pooled rows repeat.
      const fake = (type: GgmlType, data: Float32Array) => {
        const tr = ggmlTypeTraits(type);
        const out = new Uint8Array((data.length / tr.blockSize) * tr.typeSize);
        const dv = new DataView(out.buffer);
        for (let b = 0; b < data.length / tr.blockSize; b++) dv.setFloat32(b * tr.typeSize, data[b * tr.blockSize], true);
        return out;
      };
      const distinctRows = (out: string, name: string) => {
        const t = readGgufHeader(out).tensors.find((x) => x.name === name)!;
        const bytes = readGgufTensorBytes(out, t);
        const row = (t.shape[0] / 32) * 34;
        return new Set(Array.from({ length: bytes.length / row }, (_, i) => bytes.subarray(i * row, (i + 1) * row).toString('hex'))).size;
      };
      const pooled = path.join(dir, 'pooled.gguf');
      const plain = path.join(dir, 'plain.gguf');
      writeModel({ config: config('tiny-grovemoe'), fileType: 'Q8_0', seed: 1, out: pooled, quantize: fake, expertPool: 3 });
      writeModel({ config: config('tiny-grovemoe'), fileType: 'Q8_0', seed: 1, out: plain, quantize: fake });
      for (const n of ['blk.0.ffn_up_exps.weight', 'blk.0.ffn_gate_chexps.weight', 'blk.2.ffn_down_chexps.weight']) {
        expect([n, distinctRows(pooled, n)]).toEqual([n, 3]);
        expect(distinctRows(plain, n)).toBeGreaterThan(200);
      }
      // Not the router's neighbours: attention stays generated row by row.
      expect(distinctRows(pooled, 'blk.0.attn_q.weight')).toBe(512);
    });
  });
});
