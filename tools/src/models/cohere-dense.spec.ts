// cohere2 (Command R7B / Command A) and command-r (Command R / Command R+): the tensors and keys
// llama.cpp's loaders (src/models/cohere2.cpp, src/models/command-r.cpp) take, as
// conversion/command_r.py Cohere2Model / CommandR2Model write them: parallel blocks with one
// LayerNorm and a dense SwiGLU FFN, always a tied head, cohere2's window and pattern (default
// period 4, a BOOL array or a UINT32 period), command-r's per-head q/k norms from 64 blocks;
// refusals naming the field; the weights' scales; and written files read back.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { cohere2IsSwa, cohere2UsesRope, cohereDenseHeadStd, commandRHasQkNorm, type Cohere2Config, type CommandRConfig } from './architectures/cohere-dense';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset, PRESETS } from './presets';

type Cfg = Cohere2Config & CommandRConfig;
const BLOCK = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const BIAS = ['attn_q.bias', 'attn_k.bias', 'attn_v.bias'];
const QKNORM = ['attn_q_norm.weight', 'attn_k_norm.weight'];
const GLOBALS = ['token_embd.weight', 'output_norm.weight'];

const config = (preset: string, over: Partial<Cfg> = {}) => ({ ...getPreset(preset).config, ...over }) as Cfg;
const plan = (preset: string, over: Partial<Cfg> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<Cfg> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const stats = (a: ArrayLike<number>) => {
  const v = Array.from(a);
  const m = v.reduce((s, x) => s + x, 0) / v.length;
  return { mean: m, std: Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length - m * m) };
};

describe('cohere2 / command-r', () => {
  it('tensors: one attn_norm and a dense SwiGLU per block (no ffn_norm), never output.weight; biases on the pattern preset; per-head q/k norms only from 64 blocks', () => {
    const cases: [string, number, string[]][] = [
      ['tiny-cohere2', 4, BLOCK],
      ['tiny-cohere2-pattern', 4, [...BLOCK, ...BIAS]],
      ['tiny-command-r', 4, BLOCK],
      ['tiny-command-r-plus', 64, [...BLOCK, ...QKNORM]],
    ];
    for (const [p, n, block] of cases) {
      const t = plan(p).tensors;
      for (let i = 0; i < n; i++) {
        const names = t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
        expect([p, i, names]).toEqual([p, i, [...block].sort()]);
      }
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(GLOBALS);
      expect(t.length).toBe(GLOBALS.length + n * block.length);
      expect(new Set(t.map((x) => x.name)).size).toBe(t.length);
      expect(t.some((x) => /^output\.weight$|ffn_norm|attn_qkv|_exps|shexp|rope_freqs/.test(x.name))).toBe(false);
    }
    // llama.cpp's rule: n_layer >= 64. --layers 63 drops them, 64 keeps them, a 4-block file gets none.
    expect(commandRHasQkNorm(config('tiny-command-r-plus', { nLayers: 63 }))).toBe(false);
    expect(plan('tiny-command-r-plus', { nLayers: 63 }).tensors.some((t) => t.name.includes('_norm.weight') && /attn_[qk]_norm/.test(t.name))).toBe(false);
    expect(plan('tiny-command-r', { nLayers: 64 }).tensors.filter((t) => /attn_[qk]_norm/.test(t.name)).length).toBe(128);
    // cohere2 never takes q/k norms, whatever its depth.
    expect(plan('tiny-cohere2', { nLayers: 64 }).tensors.some((t) => /attn_[qk]_norm/.test(t.name))).toBe(false);

    expect(DEFAULT_PRESET_FOR_ARCH.cohere2).toBe('tiny-cohere2');
    expect(DEFAULT_PRESET_FOR_ARCH['command-r']).toBe('tiny-command-r');
    expect(Object.keys(PRESETS).filter((k) => /cohere2(?!moe)|command-r/.test(k)).sort()).toEqual(['tiny-cohere2', 'tiny-cohere2-pattern', 'tiny-command-r', 'tiny-command-r-plus']);
    expect(Object.values(PRESETS).filter((p) => p.config.arch === 'cohere2' || p.config.arch === 'command-r').every((p) => p.config.tiedEmbeddings)).toBe(true);
  });

  it('shapes: n_embd x n_embd q and attn_output, 2 KV heads of 16, FFN of 128 (64 on plus), per-head q/k norm rows [16, heads]', () => {
    for (const p of ['tiny-cohere2', 'tiny-command-r']) {
      const s = shapes(p);
      for (let i = 0; i < 4; i++) {
        expect(BLOCK.map((n) => s.get(`blk.${i}.${n}`))).toEqual([[64], [64, 64], [64, 32], [64, 32], [64, 64], [64, 128], [64, 128], [128, 64]]);
      }
      expect([s.get('token_embd.weight'), s.get('output_norm.weight'), s.has('output.weight')]).toEqual([[64, 1024], [64], false]);
    }
    const b = shapes('tiny-cohere2-pattern');
    expect(BIAS.map((n) => b.get(`blk.2.${n}`))).toEqual([[64], [32], [32]]);
    const r = shapes('tiny-command-r-plus');
    for (const i of [0, 31, 63]) {
      expect([...QKNORM, 'attn_q.weight', 'attn_k.weight', 'ffn_gate.weight', 'ffn_down.weight'].map((n) => r.get(`blk.${i}.${n}`))).toEqual([[16, 4], [16, 2], [64, 64], [64, 32], [64, 64], [64, 64]]);
    }
    // Other head counts: q/k norms follow heads / kv heads; the head size follows dim / heads.
    const h = shapes('tiny-command-r-plus', { nHeads: 8, nKvHeads: 8 });
    expect([h.get('blk.5.attn_q_norm.weight'), h.get('blk.5.attn_k_norm.weight'), h.get('blk.5.attn_k.weight')]).toEqual([[8, 8], [8, 8], [64, 64]]);
  });

  it('cohere2 pattern and RoPE: default period 4 [S, S, S, F] (full blocks NoPE), explicit arrays, periods (0: all sliding), --layers', () => {
    const d = plan('tiny-cohere2').config as Cohere2Config;
    expect(d.swaPattern).toBeUndefined();
    expect([0, 1, 2, 3].map((i) => cohere2IsSwa(d, i))).toEqual([true, true, true, false]);
    expect([0, 1, 2, 3].map((i) => cohere2UsesRope(d, i))).toEqual([true, true, true, false]);
    const nine = plan('tiny-cohere2', { nLayers: 9 }).config as Cohere2Config;
    expect(Array.from({ length: 9 }, (_, i) => cohere2IsSwa(nine, i))).toEqual([true, true, true, false, true, true, true, false, true]);
    const arr = plan('tiny-cohere2-pattern').config as Cohere2Config;
    expect([0, 1, 2, 3].map((i) => [cohere2IsSwa(arr, i), cohere2UsesRope(arr, i)])).toEqual([[false, false], [true, true], [false, false], [true, true]]);
    const per = (p: number) => {
      const c = plan('tiny-cohere2', { swaPattern: p, nLayers: 6 }).config as Cohere2Config;
      return Array.from({ length: 6 }, (_, i) => cohere2IsSwa(c, i));
    };
    expect(per(0)).toEqual([true, true, true, true, true, true]);
    expect(per(2)).toEqual([true, false, true, false, true, false]);
    expect(per(3)).toEqual([true, true, false, true, true, false]);
    expect(per(4)).toEqual([true, true, true, false, true, true]);
    // --layers 1: block 0 slides under the default rule.
    expect(cohere2IsSwa(plan('tiny-cohere2', { nLayers: 1 }).config as Cohere2Config, 0)).toBe(true);
  });

  it('types: norms (the 2-D per-head q/k norms too) and biases F32 in every file; matrices quantized (rows of 64 fall back to Q5_0 / Q8_0)', () => {
    for (const p of ['tiny-cohere2', 'tiny-cohere2-pattern', 'tiny-command-r', 'tiny-command-r-plus']) {
      for (const ft of ['Q8_0', 'Q4_K_M', 'Q2_K', 'F16'] as const) {
        const q = new Map(planModel(config(p), ft).tensors.map((t) => [t.name, t.type]));
        for (const n of ['blk.0.attn_norm.weight', 'output_norm.weight']) expect([p, ft, n, q.get(n)]).toEqual([p, ft, n, GgmlType.F32]);
        if (p === 'tiny-command-r-plus') for (const n of QKNORM) expect([p, ft, n, q.get(`blk.7.${n}`)]).toEqual([p, ft, n, GgmlType.F32]);
        if (p === 'tiny-cohere2-pattern') for (const n of BIAS) expect([p, ft, n, q.get(`blk.1.${n}`)]).toEqual([p, ft, n, GgmlType.F32]);
      }
      const q = new Map(planModel(config(p), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
      expect(q.get('blk.0.attn_q.weight')).toBe(GgmlType.Q5_0);
      // Tied: token_embd is the head, typed as output (Q6_K, falling back to Q8_0 on rows of 64).
      expect(q.get('token_embd.weight')).toBe(GgmlType.Q8_0);
    }
  });

  it('rejects configs the loaders cannot take, naming the field', () => {
    for (const p of ['tiny-cohere2', 'tiny-command-r']) {
      const a = p === 'tiny-cohere2' ? 'cohere2' : 'command-r';
      expect(() => plan(p, { ff: 0 })).toThrow(new RegExp(`${a}: ff must be a positive integer`));
      expect(() => plan(p, { nLayers: 0 })).toThrow(/nLayers must be a positive integer/);
      expect(() => plan(p, { nKvHeads: 3 })).toThrow(/heads 4 not divisible by kv heads 3/);
      expect(() => plan(p, { headDim: 32 })).toThrow(/heads 4 x head size 32 must be dim 64 \(the loader sizes attn_q and attn_output as n_embd\)/);
      expect(() => plan(p, { dim: 66 })).toThrow(/head size 16.5 must be dim 66/);
      expect(() => plan(p, { nHeads: 64, nKvHeads: 2 })).toThrow(/head size 1 must be even for RoPE/);
      expect(() => plan(p, { ropeBase: 0 })).toThrow(/ropeBase must be positive/);
      for (const v of [0, -1, Number.NaN, undefined]) expect(() => plan(p, { normEps: v as number })).toThrow(/normEps must be positive \(attention.layer_norm_epsilon is required\)/);
      expect(() => plan(p, { tiedEmbeddings: false })).toThrow(new RegExp(`${a}: tiedEmbeddings must be true \\(the loader's head is always token_embd; it never reads output.weight\\)`));
      expect(() => plan(p, { nExperts: 8, nExpertsUsed: 2 })).toThrow(/a dense architecture \(nExperts \/ nExpertsUsed must be 0, got 8 \/ 2; use cohere2moe/);
      expect(() => plan(p, { qkvBias: 'yes' as never })).toThrow(/qkvBias must be a boolean/);
      for (const v of [0, -0.25, Number.NaN, Number.POSITIVE_INFINITY]) expect(() => plan(p, { logitScale: v })).toThrow(/logitScale must be a positive finite number/);
    }
    const c = 'tiny-cohere2';
    expect(() => plan(c, { logitScale: undefined })).toThrow(/logitScale must be a positive finite number \(logit_scale is required\)/);
    for (const w of [0, -8, 2.5, undefined]) expect(() => plan(c, { window: w as number })).toThrow(/window must be a positive integer \(attention.sliding_window is required\)/);
    expect(() => plan(c, { swaPattern: [true, false] })).toThrow(/swaPattern must have one flag per block \(4\), got length 2/);
    expect(() => plan('tiny-cohere2-pattern', { nLayers: 2 })).toThrow(/swaPattern must have one flag per block \(2\), got length 4/);
    expect(() => plan(c, { swaPattern: [true, 1, false, true] as never })).toThrow(/swaPattern\[1\] must be a boolean/);
    for (const v of [-1, 2.5, '4']) expect(() => plan(c, { swaPattern: v as never })).toThrow(/swaPattern must be a boolean array \(one flag per block\) or a non-negative integer period/);
    // No sliding block: llama.cpp's iswa cache asserts is_swa_any().
    expect(() => plan(c, { swaPattern: 1 })).toThrow(/swaPattern 1 leaves no sliding block in 4; llama.cpp's cohere2 cache needs at least one/);
    expect(() => plan(c, { swaPattern: [false, false, false, false] })).toThrow(/leaves no sliding block/);
    expect(() => plan(c, { swaPattern: 8 })).not.toThrow(); // blocks 0-3 slide (il % 8 < 7)
    expect(() => plan(c, { qkNormStd: 0.5 })).toThrow(/cohere2: qkNormStd is command-r's/);
    const r = 'tiny-command-r';
    expect(() => plan(r, { window: 8 })).toThrow(/command-r: window is cohere2's/);
    expect(() => plan(r, { swaPattern: 4 })).toThrow(/command-r: swaPattern is cohere2's/);
    for (const v of [-0.1, Number.NaN, 'x']) expect(() => plan(r, { qkNormStd: v as number })).toThrow(/qkNormStd must be a non-negative finite number/);
    // Defaults: command-r's logit_scale may be absent; q/k norm std 0.5.
    const d = plan(r, { logitScale: undefined, qkNormStd: undefined }).config as CommandRConfig;
    expect([d.logitScale, d.qkNormStd]).toEqual([undefined, 0.5]);
  });

  it('scales: tied token_embd at 2 / (sqrt(dim) x logit_scale); writers at residualGain x that std; per-head q/k norm rows around 1, distinct per head', () => {
    const cases: [string, number][] = [['tiny-cohere2', 1], ['tiny-command-r', 4], ['tiny-command-r-plus', 2 / (8 * 0.8333)]];
    for (const [p, e] of cases) {
      const c = config(p);
      expect(cohereDenseHeadStd(c)).toBeCloseTo(e, 6);
      const rg = 1 / Math.sqrt(2 * c.nLayers);
      const ratio = (name: string, want: number) => stats(generateTensorF32(c, 1, name)).std / want;
      expect([p, ratio('token_embd.weight', e)]).toEqual([p, expect.closeTo(1, 1)]);
      expect([p, ratio('blk.0.attn_q.weight', 1 / 8)]).toEqual([p, expect.closeTo(1, 1)]);
      expect([p, ratio('blk.1.attn_output.weight', (rg * e) / 8)]).toEqual([p, expect.closeTo(1, 1)]);
      expect([p, ratio('blk.1.ffn_down.weight', (rg * e) / Math.sqrt(c.ff))]).toEqual([p, expect.closeTo(1, 1)]);
      for (const n of ['blk.2.attn_norm.weight', 'output_norm.weight']) expect(stats(generateTensorF32(c, 1, n)).mean).toBeCloseTo(1, 1);
    }
    // Without logit_scale (command-r's optional key) the head is at the plain 2 / sqrt(dim).
    expect(cohereDenseHeadStd(config('tiny-command-r', { logitScale: undefined }))).toBe(0.25);
    const plus = config('tiny-command-r-plus');
    for (const n of QKNORM) {
      const w = generateTensorF32(plus, 1, `blk.3.${n}`);
      expect(stats(w).mean).toBeCloseTo(1, 0);
      expect(stats(w).std).toBeGreaterThan(0.35);
      const rows = Array.from({ length: w.length / 16 }, (_, h) => Array.from(w.subarray(h * 16, h * 16 + 16)).join());
      expect(new Set(rows).size).toBe(rows.length);
    }
    expect(stats(generateTensorF32(config('tiny-cohere2-pattern'), 1, 'blk.1.attn_k.bias')).std).toBeGreaterThan(0.05);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cohere-dense-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const write = (preset: string, over: Partial<Cfg> = {}, fileType: 'F32' | 'Q8_0' = 'F32') => {
      const out = path.join(dir, `${preset}-${Object.keys(over).join('-')}.gguf`);
      const cfg = config(preset, over);
      writeModel({ config: cfg, fileType, seed: 5, out });
      const h = readGgufHeader(out);
      const a = String(h.kv.get('general.architecture')!.value);
      const own = [...h.kv.keys()].filter((k) => k.startsWith(`${a}.`));
      const keys = Object.fromEntries(own.map((k) => [k.slice(a.length + 1), h.kv.get(k)!.value]));
      const types = Object.fromEntries(own.map((k) => [k.slice(a.length + 1), h.kv.get(k)!.type]));
      return { out, cfg, h, a, keys, types };
    };
    const roundTrip = (out: string, cfg: Cfg, names: string[]) => {
      const h = readGgufHeader(out);
      expect(h.tensors.map((t) => [t.name, t.shape])).toEqual(planModel(cfg, 'F32').tensors.map((t) => [t.name, t.shape]));
      expect(h.tensors.some((t) => t.name === 'output.weight')).toBe(false);
      for (const name of names) {
        const t = h.tensors.find((x) => x.name === name)!;
        expect([name, t.type]).toEqual([name, GgmlType.F32]);
        expect([name, Buffer.from(readGgufTensorBytes(out, t)).equals(Buffer.from(generateTensorF32(cfg, 5, name).buffer))]).toEqual([name, true]);
      }
    };
    const COMMON = {
      context_length: 4096, embedding_length: 64, block_count: 4, feed_forward_length: 128,
      'attention.head_count': 4, 'attention.head_count_kv': 2, 'attention.layer_norm_epsilon': Math.fround(1e-5), 'rope.scaling.type': 'none',
    };
    const U32 = ['context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count', 'attention.head_count_kv'];

    it('tiny-cohere2: layer_norm_epsilon, logit_scale, sliding_window, vocab_size, rope.dimension_count; no pattern key (llama.cpp default); no RMS eps, no key_length', () => {
      const { out, cfg, a, keys, types } = write('tiny-cohere2');
      expect(a).toBe('cohere2');
      expect(keys).toEqual({ ...COMMON, vocab_size: 1024, 'rope.freq_base': 50000, 'rope.dimension_count': 16, logit_scale: 0.25, 'attention.sliding_window': 8 });
      for (const k of [...U32, 'vocab_size', 'rope.dimension_count', 'attention.sliding_window']) expect([k, types[k]]).toEqual([k, GgufType.UINT32]);
      for (const k of ['rope.freq_base', 'logit_scale', 'attention.layer_norm_epsilon']) expect([k, types[k]]).toEqual([k, GgufType.FLOAT32]);
      expect(types['rope.scaling.type']).toBe(GgufType.STRING);
      roundTrip(out, cfg, ['token_embd.weight', 'output_norm.weight', 'blk.0.attn_q.weight', 'blk.3.ffn_down.weight', 'blk.2.attn_norm.weight']);
    });

    it('tiny-cohere2-pattern: the pattern as a BOOL array; q/k/v biases; a period is a UINT32 key', () => {
      const { out, cfg, h, keys } = write('tiny-cohere2-pattern');
      expect(keys['attention.sliding_window_pattern']).toEqual([false, true, false, true]);
      expect(h.kv.get('cohere2.attention.sliding_window_pattern')).toMatchObject({ type: GgufType.ARRAY, elemType: GgufType.BOOL });
      roundTrip(out, cfg, ['blk.0.attn_q.bias', 'blk.3.attn_v.bias', 'blk.1.attn_k.weight']);
      const p = write('tiny-cohere2', { swaPattern: 0 });
      expect([p.keys['attention.sliding_window_pattern'], p.types['attention.sliding_window_pattern']]).toEqual([0, GgufType.UINT32]);
      // An explicit head size is written as key_length / value_length.
      const hd = write('tiny-cohere2', { headDim: 16 });
      expect([hd.keys['attention.key_length'], hd.keys['attention.value_length'], hd.types['attention.key_length']]).toEqual([16, 16, GgufType.UINT32]);
    });

    it('tiny-command-r: the converter keys (no vocab_size, no rope.dimension_count, no window keys); logit_scale optional', () => {
      const { out, cfg, a, keys, types } = write('tiny-command-r');
      expect(a).toBe('command-r');
      expect(keys).toEqual({ ...COMMON, 'rope.freq_base': 8e6, logit_scale: 0.0625 });
      for (const k of U32) expect([k, types[k]]).toEqual([k, GgufType.UINT32]);
      for (const k of ['rope.freq_base', 'logit_scale', 'attention.layer_norm_epsilon']) expect([k, types[k]]).toEqual([k, GgufType.FLOAT32]);
      roundTrip(out, cfg, ['token_embd.weight', 'blk.1.ffn_gate.weight', 'blk.3.attn_output.weight']);
      const none = write('tiny-command-r', { logitScale: undefined });
      expect('logit_scale' in none.keys).toBe(false);
    });

    it('tiny-command-r-plus: 64 blocks with per-head q/k norm weights read back; Q8_0 keeps them F32', () => {
      const { out, cfg, keys } = write('tiny-command-r-plus');
      expect(keys).toEqual({ ...COMMON, block_count: 64, feed_forward_length: 64, 'rope.freq_base': 75e6, logit_scale: Math.fround(0.8333) });
      roundTrip(out, cfg, ['blk.0.attn_q_norm.weight', 'blk.0.attn_k_norm.weight', 'blk.63.attn_q_norm.weight', 'blk.40.attn_k_norm.weight']);
      const q = write('tiny-command-r-plus', { nLayers: 64 }, 'Q8_0');
      const types = new Map(q.h.tensors.map((t) => [t.name, t.type]));
      expect([types.get('blk.9.attn_q_norm.weight'), types.get('blk.9.attn_k_norm.weight'), types.get('blk.9.attn_q.weight')]).toEqual([GgmlType.F32, GgmlType.F32, GgmlType.Q8_0]);
      // --layers 63: no q/k norms in the file.
      const cut = write('tiny-command-r-plus', { nLayers: 63 });
      expect([cut.keys.block_count, cut.h.tensors.some((t) => /attn_[qk]_norm/.test(t.name))]).toEqual([63, false]);
    });
  });
});
