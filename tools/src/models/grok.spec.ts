// grok (xAI Grok-1 / Grok-2): the tensors and keys llama.cpp's loader (src/models/grok.cpp) takes,
// as conversion/grok.py writes them for each generation: Grok-1 (experts as wide as
// feed_forward_length, layer_output_norm, tied head) and Grok-2 (a dense GeGLU FFN beside the
// experts of expert_feed_forward_length, post_ffw_norm, final logit soft cap, YaRN, untied head),
// the multiplier and soft-cap keys, and the weights' scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { grokEmbdStd, grokHeadStd, grokStreamStd, grokWriteGain, type GrokConfig } from './architectures/grok';
import { generateTensorF32, planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { Xoshiro128 } from './rng';

const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_output_norm.weight'];
const MOE = ['ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];
const GROK1 = [...ATTN, ...MOE, 'layer_output_norm.weight'];
const GROK2 = [...ATTN, ...MOE, 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', 'post_ffw_norm.weight'];

const config = (preset: string, over: Partial<GrokConfig> = {}) => ({ ...getPreset(preset).config, ...over }) as GrokConfig;
const plan = (preset: string, over: Partial<GrokConfig> = {}) => planModel(config(preset, over), 'F32');
const shapes = (preset: string, over: Partial<GrokConfig> = {}) => new Map(plan(preset, over).tensors.map((t) => [t.name, t.shape]));
const stats = (a: Float32Array) => {
  const m = a.reduce((s, x) => s + x, 0) / a.length;
  return { mean: m, std: Math.sqrt(a.reduce((s, x) => s + x * x, 0) / a.length - m * m) };
};

describe('grok', () => {
  it('tensors: Grok-1 blocks (experts only, layer_output_norm, tied head) and Grok-2 blocks (dense GeGLU beside the experts, post_ffw_norm, output.weight)', () => {
    for (const [p, names, globals] of [
      ['tiny-grok', GROK1, ['token_embd.weight', 'output_norm.weight']],
      ['tiny-grok2', GROK2, ['token_embd.weight', 'output_norm.weight', 'output.weight']],
    ] as const) {
      const t = plan(p).tensors;
      const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
      for (let i = 0; i < 4; i++) expect(block(i)).toEqual([...names].sort());
      expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(globals);
      expect(t.length).toBe(globals.length + 4 * names.length);
    }
    // The config chooses the post-FFN norm's name (the loader takes either) and the dense FFN apart.
    const swapped = plan('tiny-grok', { postFfnNorm: 'post_ffw_norm', dense: true }).tensors.filter((x) => x.layer === 0).map((x) => x.name);
    expect(swapped).toContain('blk.0.post_ffw_norm.weight');
    expect(swapped).toContain('blk.0.ffn_up.weight');
    expect(swapped).not.toContain('blk.0.layer_output_norm.weight');
    expect(DEFAULT_PRESET_FOR_ARCH.grok).toBe('tiny-grok');
  });

  it('shapes: q and attn_output n_embd wide, k/v of 2 KV heads of 16; experts of ff (Grok-1) or expertFf (Grok-2), dense FFN of ff', () => {
    const s1 = shapes('tiny-grok');
    expect(['attn_q', 'attn_k', 'attn_v', 'attn_output', 'attn_output_norm', 'ffn_gate_inp', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', 'layer_output_norm'].map((n) => s1.get(`blk.2.${n}.weight`))).toEqual([
      [64, 64], [64, 32], [64, 32], [64, 64], [64], [64, 8], [64, 64, 8], [64, 64, 8], [64, 64, 8], [64],
    ]);
    expect(s1.get('token_embd.weight')).toEqual([64, 1024]);
    // Grok-1 with a narrower ff: the experts follow it.
    expect(shapes('tiny-grok', { ff: 32 }).get('blk.0.ffn_down_exps.weight')).toEqual([32, 64, 8]);
    const s2 = shapes('tiny-grok2');
    expect(['ffn_gate', 'ffn_up', 'ffn_down', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', 'post_ffw_norm'].map((n) => s2.get(`blk.1.${n}.weight`))).toEqual([
      [64, 128], [64, 128], [128, 64], [64, 64, 8], [64, 64, 8], [64, 64, 8], [64],
    ]);
    expect(shapes('tiny-grok2', { expertFf: 32 }).get('blk.1.ffn_gate_exps.weight')).toEqual([64, 32, 8]);
    expect(s2.get('output.weight')).toEqual([64, 1024]);
  });

  it('types: norms and routers F32 in every file; Q4_K_M follows the 8-expert rules', () => {
    const q = new Map(planModel(config('tiny-grok2'), 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    for (const n of ['blk.0.attn_output_norm.weight', 'blk.0.post_ffw_norm.weight', 'blk.0.ffn_gate_inp.weight', 'output_norm.weight']) expect([n, q.get(n)]).toEqual([n, GgmlType.F32]);
    // attn_v / attn_k at Q8_0 with 8 experts; n_embd 64 rows fall back from Q4_K to Q5_0.
    expect([q.get('blk.0.attn_v.weight'), q.get('blk.0.attn_k.weight'), q.get('blk.0.attn_q.weight'), q.get('output.weight')]).toEqual([GgmlType.Q8_0, GgmlType.Q8_0, GgmlType.Q5_0, GgmlType.Q8_0]);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan('tiny-grok', { nExperts: 0, nExpertsUsed: 0 })).toThrow(/experts/);
    expect(() => plan('tiny-grok', { nExpertsUsed: 9 })).toThrow(/experts-used/);
    expect(() => plan('tiny-grok', { ff: 0 })).toThrow(/ff must be a positive integer/);
    expect(() => plan('tiny-grok', { headDim: 32 })).toThrow(/heads 4 x head size 32 must be dim 64/);
    expect(() => plan('tiny-grok', { nKvHeads: 3 })).toThrow(/divisible/);
    expect(() => plan('tiny-grok', { expertFf: -1 })).toThrow(/expertFf/);
    expect(() => plan('tiny-grok', { dense: undefined })).toThrow(/dense/);
    for (const f of ['embeddingScale', 'logitScale', 'attnOutScale', 'attnSoftcap', 'routerSoftcap'] as const) {
      expect(() => plan('tiny-grok', { [f]: 0 })).toThrow(new RegExp(`grok: ${f} must be a positive number`));
      expect(() => plan('tiny-grok', { [f]: undefined })).toThrow(new RegExp(f));
    }
    expect(() => plan('tiny-grok', { softcap: -1 })).toThrow(/softcap must be/);
    expect(() => plan('tiny-grok', { postFfnNorm: 'ffn_post_norm' as GrokConfig['postFfnNorm'] })).toThrow(/postFfnNorm must be one of layer_output_norm, post_ffw_norm/);
    expect(() => plan('tiny-grok2', { attnTempLength: 1.5 })).toThrow(/attnTempLength/);
    const yarn = config('tiny-grok2').yarn!;
    expect(() => plan('tiny-grok2', { yarn: { ...yarn, factor: 0.5 } })).toThrow(/yarn.factor/);
    expect(() => plan('tiny-grok2', { yarn: { ...yarn, origCtx: 0 } })).toThrow(/yarn.origCtx/);
    expect(() => plan('tiny-grok2', { yarn: { ...yarn, extFactor: -1 } })).toThrow(/yarn.extFactor/);
    expect(() => plan('tiny-grok2', { yarn: { ...yarn, attnFactor: 0 } })).toThrow(/yarn.attnFactor/);
    expect(() => plan('tiny-grok2', { yarn: { ...yarn, betaFast: 1, betaSlow: 8 } })).toThrow(/betaSlow < betaFast/);
    // No YaRN: null as well as absent.
    expect((plan('tiny-grok2', { yarn: null as unknown as undefined }).config as GrokConfig).yarn).toBeUndefined();
  });

  it('bench-grok2-shaped: 963 tensors, 267.9B parameters, Q4_K everywhere; --layers N keeps N blocks', () => {
    const full = plan('bench-grok2-shaped');
    expect(full.tensors.length).toBe(3 + 64 * GROK2.length);
    expect(full.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0) / 1e9).toBeCloseTo(267.9, 1);
    const cut = planModel(config('bench-grok2-shaped', { nLayers: 1 }), 'Q4_K');
    expect(cut.tensors.length).toBe(3 + GROK2.length);
    expect(cut.tensors.filter((t) => t.shape.length > 1 && t.role !== 'router').every((t) => t.type === GgmlType.Q4_K)).toBe(true);
    const s = new Map(cut.tensors.map((t) => [t.name, t.shape]));
    expect(['attn_q', 'attn_k', 'ffn_up', 'ffn_up_exps', 'ffn_down_exps'].map((n) => s.get(`blk.0.${n}.weight`))).toEqual([
      [8192, 8192], [8192, 1024], [8192, 32768], [8192, 16384, 8], [16384, 8192, 8],
    ]);
  });

  it('scales: the head at 2 / (sqrt(dim) x logit_scale), token_embd at 2 / embedding_scale (untied), post norms at the stream std / sqrt(2L) (post-FFN half), routers at 2 / sqrt(dim)', () => {
    const g1 = config('tiny-grok');
    const g2 = config('tiny-grok2');
    // Tied: token_embd is the head; the stream then gets 8 x 0.43.
    expect(grokEmbdStd(g1)).toBeCloseTo(2 / (8 * 0.5773502691896257), 6);
    expect(grokStreamStd(g1)).toBeCloseTo(3.4641, 3);
    expect(grokEmbdStd(g2)).toBeCloseTo(0.25, 6);
    expect(grokHeadStd(g2)).toBeCloseTo(0.5, 6);
    expect(grokStreamStd(g2)).toBeCloseTo(2, 6);
    expect(grokWriteGain(g2)).toBeCloseTo(2 / Math.sqrt(8), 6);
    // Within ~5%.
    const ratio = (c: GrokConfig, name: string, want: number) => stats(generateTensorF32(c, 1, name)).std / want;
    expect(ratio(g1, 'token_embd.weight', grokHeadStd(g1))).toBeCloseTo(1, 1);
    expect(ratio(g2, 'token_embd.weight', 0.25)).toBeCloseTo(1, 1);
    expect(ratio(g2, 'output.weight', 0.5)).toBeCloseTo(1, 1);
    expect(ratio(g2, 'blk.0.ffn_gate_inp.weight', 2 / 8)).toBeCloseTo(1, 1);
    expect(ratio(g2, 'blk.0.attn_q.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio(g2, 'blk.0.attn_output.weight', 1 / 8)).toBeCloseTo(1, 1);
    expect(ratio(g2, 'blk.0.ffn_down.weight', 1 / Math.sqrt(128))).toBeCloseTo(1, 1);
    expect(ratio(g2, 'blk.0.ffn_down_exps.weight', 1 / 8)).toBeCloseTo(1, 1);
    for (const [c, post] of [[g1, 'layer_output_norm'], [g2, 'post_ffw_norm']] as const) {
      const a = stats(generateTensorF32(c, 1, 'blk.3.attn_output_norm.weight'));
      const f = stats(generateTensorF32(c, 1, `blk.3.${post}.weight`));
      expect(a.mean / grokWriteGain(c)).toBeCloseTo(1, 1);
      expect(f.mean / (grokWriteGain(c) / 2)).toBeCloseTo(1, 1);
      expect(stats(generateTensorF32(c, 1, 'blk.3.ffn_norm.weight')).mean).toBeCloseTo(1, 1);
    }
    // Routing over unit-RMS inputs (what ffn_norm hands the router): every expert in some top-2, none in all.
    const r = generateTensorF32(g1, 1, 'blk.1.ffn_gate_inp.weight');
    const hits = new Array(8).fill(0);
    const x = new Float32Array(64);
    const rng = new Xoshiro128(5);
    for (let s = 0; s < 200; s++) {
      rng.fillNormal(x, 0, 1);
      const logits = Array.from({ length: 8 }, (_, e) => [x.reduce((acc, v, i) => acc + v * r[e * 64 + i], 0), e] as const).sort((p, q) => q[0] - p[0]);
      for (const [, e] of logits.slice(0, 2)) hits[e]++;
    }
    expect(Math.min(...hits)).toBeGreaterThan(0);
    expect(Math.max(...hits)).toBeLessThan(200);
  });

  describe('written files', () => {
    let dir: string;
    beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-grok-'))));
    afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

    const header = (preset: string) => {
      const out = path.join(dir, `${preset}.gguf`);
      writeModel({ config: config(preset), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('grok');
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('grok.')).map((k) => [k.slice('grok.'.length), kv.get(k)!.value]));
      return { kv, keys };
    };
    const f = Math.fround;
    const COMMON = {
      vocab_size: 1024, embedding_length: 64, block_count: 4, 'attention.head_count': 4, 'attention.head_count_kv': 2,
      'rope.freq_base': 10000, 'attention.layer_norm_rms_epsilon': f(1e-5), expert_count: 8, expert_used_count: 2,
      router_logit_softcapping: 30, embedding_scale: 8,
    };

    it('tiny-grok: no expert_feed_forward_length, no final soft cap, no YaRN, no rope.dimension_count', () => {
      const { kv, keys } = header('tiny-grok');
      expect(keys).toEqual({
        ...COMMON, context_length: 8192, feed_forward_length: 64, attn_logit_softcapping: 5,
        'attention.output_scale': 0.5, logit_scale: f(0.5773502691896257),
      });
      for (const k of ['embedding_scale', 'logit_scale', 'attention.output_scale', 'attn_logit_softcapping', 'router_logit_softcapping']) expect([k, kv.get(`grok.${k}`)!.type]).toEqual([k, GgufType.FLOAT32]);
    });

    it('tiny-grok2: expert_feed_forward_length, final_logit_softcapping, the YaRN keys and attention.temperature_length', () => {
      const { kv, keys } = header('tiny-grok2');
      expect(keys).toEqual({
        ...COMMON, context_length: 64, feed_forward_length: 128, expert_feed_forward_length: 64, attn_logit_softcapping: 4, final_logit_softcapping: 8,
        'attention.output_scale': 0.375, logit_scale: 0.5,
        'rope.scaling.type': 'yarn', 'rope.scaling.factor': 4, 'rope.scaling.original_context_length': 16, 'rope.scaling.yarn_ext_factor': 1,
        'rope.scaling.yarn_attn_factor': 1, 'rope.scaling.yarn_beta_fast': 8, 'rope.scaling.yarn_beta_slow': 1, 'attention.temperature_length': 1024,
      });
      expect([kv.get('grok.rope.scaling.original_context_length')!.type, kv.get('grok.attention.temperature_length')!.type, kv.get('grok.rope.scaling.yarn_beta_fast')!.type]).toEqual([
        GgufType.UINT32, GgufType.UINT32, GgufType.FLOAT32,
      ]);
    });
  });
});
