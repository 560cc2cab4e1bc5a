// The programs of the dense decoders buildLlamaFamily runs with a DenseLayout (olmo2, seed_oss,
// smollm3, exaone4, ernie4_5, hunyuan-dense, glm4): which norms each block has and where, which
// blocks rotate and slide, the q/k norms' width and place, the fused gate|up; and the files the
// builder refuses, naming the tensor or key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const opsOf = (p: ModelProgram, op: ProgramOp['op']) => p.ops.filter((o) => o.op === op);
const normsOf = (p: ModelProgram) => opsOf(p, 'rms_norm').map((o) => o.weights!.weight.replace(/^blk\.\d+\./, ''));
type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-olmo2', 'tiny-olmo2-swa', 'tiny-seed-oss', 'tiny-smollm3', 'tiny-exaone4', 'tiny-exaone4-swa', 'tiny-ernie4_5', 'tiny-hunyuan-dense', 'tiny-glm4', 'tiny-apertus'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);

describe('dense layouts', () => {
  it('olmo2: no input norms, full-width q/k norms, post norms on both sub-layers, an untied head; OLMo 3 windows rotate unscaled', () => {
    const p = prog('tiny-olmo2');
    expect(normsOf(p).slice(0, 4)).toEqual(['attn_q_norm.weight', 'attn_k_norm.weight', 'post_attention_norm.weight', 'post_ffw_norm.weight']);
    expect(opsOf(p, 'head_rms_norm')).toHaveLength(0);
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true)).toBe(true);
    expect(p.ops.filter((o) => o.op === 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    const s = prog('tiny-olmo2-swa');
    expect(opsOf(s, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 8, 8, 0]);
    expect(opsOf(s, 'rope').map((o) => o.params!.ext_factor === 0 && o.params!.freq_scale === 1)).toEqual([true, true, true, true, true, true, true, true]);
  });

  it('seed_oss and smollm3: the FFN norm post_attention_norm; NoPE on every 4th block', () => {
    expect(normsOf(prog('tiny-seed-oss')).slice(0, 2)).toEqual(['attn_norm.weight', 'post_attention_norm.weight']);
    const p = prog('tiny-smollm3');
    expect(opsOf(p, 'rope')).toHaveLength(2 * 3);
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === false)).toBe(true);
  });

  it('exaone4: per-head q/k norms before RoPE; windows and NoPE full blocks only at 64 blocks', () => {
    const p = prog('tiny-exaone4');
    expect(opsOf(p, 'head_rms_norm')).toHaveLength(2 * 4);
    expect(opsOf(p, 'rope')).toHaveLength(2 * 4);
    expect(opsOf(p, 'attention').every((o) => o.params!.window === undefined)).toBe(true);
    const s = prog('tiny-exaone4-swa');
    const windows = opsOf(s, 'attention').map((o) => o.params!.window ?? 0);
    expect(windows.slice(0, 8)).toEqual([8, 8, 8, 0, 8, 8, 8, 0]);
    expect(opsOf(s, 'rope')).toHaveLength(2 * 48);
    // A 4-block file with the window key stays full with RoPE (llama.cpp keys windows on 64 blocks).
    const f = files['tiny-exaone4'];
    const w = programOf({ ...f.kv, 'exaone4.attention.sliding_window': 8 }, f.tensors);
    expect(opsOf(w, 'attention').every((o) => o.params!.window === undefined)).toBe(true);
  });

  it("ernie4_5 leaves attn_output.bias out; hunyuan-dense norms q/k after RoPE at the alpha-scaled base; glm4's sandwich norms and fused gate|up", () => {
    expect(opsOf(prog('tiny-ernie4_5'), 'matmul').some((o) => o.weights!.bias?.endsWith('attn_output.bias'))).toBe(false);
    const h = prog('tiny-hunyuan-dense');
    const firstRope = h.ops.findIndex((o) => o.op === 'rope');
    const firstNorm = h.ops.findIndex((o) => o.op === 'head_rms_norm');
    expect(firstNorm).toBeGreaterThan(firstRope);
    expect(Number(opsOf(h, 'rope')[0].params!.freq_base)).toBeCloseTo(10000 * Math.pow(1000, 64 / 62), -2);
    const g = prog('tiny-glm4');
    expect(normsOf(g).slice(0, 4)).toEqual(['attn_norm.weight', 'post_attention_norm.weight', 'ffn_norm.weight', 'post_ffw_norm.weight']);
    expect(opsOf(g, 'swiglu')[0].params).toEqual({ a_off: 0, b_off: 512, n: 512 });
    expect(opsOf(g, 'rope').every((o) => o.params!.n_dims === 32 && o.params!.neox === false)).toBe(true);
    const m = programOf({ ...files['tiny-glm4'].kv, 'glm4.rope.dimension_sections': [8, 4, 4, 0] }, files['tiny-glm4'].tensors);
    expect(opsOf(m, 'rope').every((o) => o.params!.neox === true)).toBe(true);
    // One section set is not M-RoPE (llama.cpp's use_mrope needs the first two).
    const one = programOf({ ...files['tiny-glm4'].kv, 'glm4.rope.dimension_sections': [16, 0, 0, 0] }, files['tiny-glm4'].tensors);
    expect(opsOf(one, 'rope').every((o) => o.params!.neox === false)).toBe(true);
  });
});

describe('apertus', () => {
  it("an ungated FFN through xIELU with each block's raw parameters; attn_output.bias added; per-head q/k norms before RoPE", () => {
    const p = prog('tiny-apertus');
    const x = opsOf(p, 'xielu');
    expect(x.map((o) => [o.params!.alpha_n, o.params!.alpha_p, o.params!.beta].map((v) => Number(v).toFixed(3)))).toEqual([
      ['0.800', '0.800', '0.500'], ['0.200', '-0.600', '0.400'], ['-0.500', '0.300', '0.600'], ['1.500', '1.200', '0.500'],
    ]);
    expect(Number(x[2].params!.eps)).toBeCloseTo(-1e-3, 9);
    expect(opsOf(p, 'swiglu')).toHaveLength(0);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.bias?.endsWith('attn_output.bias'))).toHaveLength(4);
    expect(p.ops.findIndex((o) => o.op === 'head_rms_norm')).toBeLessThan(p.ops.findIndex((o) => o.op === 'rope'));
    // One number for every block, as get_key_or_arr takes it.
    const f = files['tiny-apertus'];
    const one = programOf({ ...f.kv, 'xielu.beta': 0.25 }, f.tensors);
    expect(opsOf(one, 'xielu').map((o) => o.params!.beta)).toEqual([0.25, 0.25, 0.25, 0.25]);
  });

  it.each<[string, string, number | number[] | undefined, RegExp]>([
    ['without xielu.alpha_p', 'xielu.alpha_p', undefined, /lacks metadata 'xielu\.alpha_p'/],
    ['with an array of the wrong length', 'xielu.eps', [-1e-6, -1e-6], /'xielu\.eps' has 2 entries for 4 layers/],
    ['with a non-finite entry', 'xielu.alpha_n', [0.8, NaN, 0.1, 0.2], /'xielu\.alpha_n' entry 1 is NaN/],
  ])('refuses a file %s, naming the key', (_what, key, value, want) => {
    const kv = { ...files['tiny-apertus'].kv };
    if (value === undefined) delete kv[key];
    else kv[key] = value;
    expect(() => programOf(kv, files['tiny-apertus'].tensors)).toThrow(want);
  });
});

describe('refusals', () => {
  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void) => {
    const t = new Map(files[p].tensors);
    edit(t);
    return () => programOf(files[p].kv, t);
  };
  const reshape = (t: Map<string, GgufTensorInfo>, name: string, dims: number[]) => t.set(name, { ...t.get(name)!, dims });
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, RegExp]>([
    ['an olmo2 file without post_ffw_norm', 'tiny-olmo2', (t) => t.delete('blk.2.post_ffw_norm.weight'), /blk\.2\.post_ffw_norm\.weight/],
    ['an olmo2 file without output.weight', 'tiny-olmo2', (t) => t.delete('output.weight'), /'output\.weight'/],
    ['olmo2 q/k norms one head wide', 'tiny-olmo2', (t) => { reshape(t, 'blk.1.attn_q_norm.weight', [64]); reshape(t, 'blk.1.attn_k_norm.weight', [64]); }, /olmo2 normalizes q and k over the whole projections/],
    ['exaone4 q/k norms of no width it knows', 'tiny-exaone4', (t) => reshape(t, 'blk.0.attn_k_norm.weight', [32]), /attn_k_norm \[32\] are neither one head \(64\)/],
    ['a seed_oss file without its FFN norm', 'tiny-seed-oss', (t) => t.delete('blk.3.post_attention_norm.weight'), /blk\.3\.post_attention_norm\.weight/],
    ['a glm4 ffn_up not twice ffn_down', 'tiny-glm4', (t) => reshape(t, 'blk.1.ffn_up.weight', [256, 768]), /ffn_up gives 768 values, not twice ffn_down's 512/],
    ['a hunyuan-dense file without attn_q_norm', 'tiny-hunyuan-dense', (t) => t.delete('blk.0.attn_q_norm.weight'), /blk\.0\.attn_q_norm\.weight/],
  ])('refuses %s, naming it', (_what, p, edit, want) => {
    expect(edited(p, edit)).toThrow(want);
  });

  it('EngineModel.load of a file whose tensor is renamed away fails with KAIL_E_BAD_MODEL, naming it; the file itself loads', () => {
    const f = writeTestModel(dir, 'tiny-exaone4');
    const bad = patchedCopy(f, `${dir}/exaone4-renamed.gguf`, 'blk.1.post_attention_norm.weight', 'blk.1.post_attention_norX.weight');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/blk\.1\.post_attention_norm\.weight/) }));
    EngineModel.load(f, { threads: 1, nCtx: 32 }).close();
  });
});
