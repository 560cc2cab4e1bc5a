// The programs of the dense decoders buildLlamaFamily runs with a DenseLayout (olmo2, seed_oss,
// smollm3, exaone4, ernie4_5, hunyuan-dense, glm4): which norms each block has and where, which
// blocks rotate and slide, the q/k norms' width and place, the fused gate|up; and the files the
// builder refuses, naming the tensor or key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const normsOf = (p: ModelProgram) => opsOf(p, 'rms_norm').map((o) => o.weights!.weight.replace(/^blk\.\d+\./, ''));
type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-olmo2', 'tiny-olmo2-swa', 'tiny-seed-oss', 'tiny-smollm3', 'tiny-exaone4', 'tiny-exaone4-swa', 'tiny-ernie4_5', 'tiny-hunyuan-dense', 'tiny-glm4', 'tiny-apertus',
  'tiny-internlm2', 'tiny-exaone', 'tiny-nanbeige', 'tiny-nanbeige-skip', 'tiny-arcee', 'tiny-maincoder', 'tiny-orion', 'tiny-olmo', 'tiny-starcoder2', 'tiny-minicpm', 'tiny-minicpm-default', 'tiny-stablelm', 'tiny-stablelm-12b', 'tiny-nemotron'];
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

describe('session 47: Llama-block relatives and LayerNorm layouts', () => {
  const f = (p: string) => files[p];
  it('internlm2: one fused attn_qkv sliced into q|k|v; exaone and nanbeige rotate with rope_freqs (NeoX for exaone)', () => {
    const p = prog('tiny-internlm2');
    expect(opsOf(p, 'matmul').filter((o) => /attn_(q|k|v)\.weight$/.test(o.weights!.weight)).map((o) => o.weights!.weight)).toEqual([]);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.weight.endsWith('attn_qkv.weight'))).toHaveLength(4);
    expect(opsOf(p, 'copy').filter((o) => o.params?.n !== undefined).map((o) => [o.params!.a_off, o.params!.n]).slice(0, 3)).toEqual([[0, 256], [256, 128], [384, 128]]);
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === false && o.weights === undefined)).toBe(true);
    expect(opsOf(prog('tiny-exaone'), 'rope').every((o) => o.params!.neox === true && o.weights?.freq_factors === 'rope_freqs.weight')).toBe(true);
    expect(opsOf(prog('tiny-nanbeige'), 'rope').every((o) => o.params!.neox === false && o.weights?.freq_factors === 'rope_freqs.weight')).toBe(true);
  });

  it('nanbeige: num_loops passes over the blocks with KV rows of their own, output_norm between them unless skip_loop_final_norm', () => {
    const p = prog('tiny-nanbeige');
    const att = opsOf(p, 'attention');
    expect(att.map((o) => o.params!.layer)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.weight.endsWith('attn_q.weight')).map((o) => o.weights!.weight)).toEqual([0, 1, 2, 3, 0, 1, 2, 3].map((i) => `blk.${i}.attn_q.weight`));
    expect(opsOf(p, 'rms_norm').filter((o) => o.weights!.weight === 'output_norm.weight')).toHaveLength(2);
    const s = prog('tiny-nanbeige-skip');
    expect(opsOf(s, 'attention')).toHaveLength(6);
    expect(opsOf(s, 'rms_norm').filter((o) => o.weights!.weight === 'output_norm.weight')).toHaveLength(1);
    const one = programOf({ ...f('tiny-nanbeige').kv, 'nanbeige.num_loops': 1 }, f('tiny-nanbeige').tensors);
    expect(opsOf(one, 'attention')).toHaveLength(4);
    expect(() => programOf({ ...f('tiny-nanbeige').kv, 'nanbeige.num_loops': 0 }, f('tiny-nanbeige').tensors)).toThrow(/'nanbeige\.num_loops' is 0/);
  });

  it('arcee ReLU² and starcoder2 GELU ungated FFNs (starcoder2 with every bias); maincoder norms q/k per head after RoPE', () => {
    const a = prog('tiny-arcee');
    expect([opsOf(a, 'relu_sqr').length, opsOf(a, 'swiglu').length]).toEqual([4, 0]);
    const s = prog('tiny-starcoder2');
    expect([opsOf(s, 'gelu').length, opsOf(s, 'swiglu').length, opsOf(s, 'rms_norm').length]).toEqual([4, 0, 0]);
    expect(opsOf(s, 'matmul').filter((o) => o.weights!.bias).map((o) => o.weights!.bias!.replace(/^blk\.\d+\./, '')).slice(0, 6)).toEqual(['attn_q.bias', 'attn_k.bias', 'attn_v.bias', 'attn_output.bias', 'ffn_up.bias', 'ffn_down.bias']);
    const m = prog('tiny-maincoder');
    expect(m.ops.findIndex((o) => o.op === 'head_rms_norm')).toBeGreaterThan(m.ops.findIndex((o) => o.op === 'rope'));
    expect(opsOf(m, 'head_rms_norm')).toHaveLength(8);
  });

  it('LayerNorms: orion and starcoder2 with weight and bias on every norm, olmo without parameters and with Q/K/V clamped', () => {
    const o = prog('tiny-orion');
    expect(opsOf(o, 'layer_norm').map((x) => [x.weights!.weight, x.weights!.bias].join(' ')).slice(0, 2)).toEqual(['blk.0.attn_norm.weight blk.0.attn_norm.bias', 'blk.0.ffn_norm.weight blk.0.ffn_norm.bias']);
    expect(opsOf(o, 'layer_norm').at(-1)!.weights).toEqual({ weight: 'output_norm.weight', bias: 'output_norm.bias' });
    expect(opsOf(o, 'rms_norm')).toHaveLength(0);
    const l = prog('tiny-olmo');
    expect(opsOf(l, 'layer_norm')).toHaveLength(9);
    expect(opsOf(l, 'layer_norm').every((x) => x.weights === undefined && Number(x.params!.eps) === Math.fround(1e-5))).toBe(true);
    expect(opsOf(l, 'clamp').map((x) => x.params!.limit)).toEqual(Array(12).fill(1.5));
    // clamp_kqv absent or 0: no clamp (llama.cpp clamps only above 0).
    const kv = { ...f('tiny-olmo').kv };
    delete kv['olmo.attention.clamp_kqv'];
    expect(opsOf(programOf(kv, f('tiny-olmo').tensors), 'clamp')).toHaveLength(0);
    expect(opsOf(programOf({ ...kv, 'olmo.attention.clamp_kqv': 0 }, f('tiny-olmo').tensors), 'clamp')).toHaveLength(0);
  });

  it("minicpm: Granite's multipliers from its keys, or the loader's defaults (x12, 1.4 / sqrt(L), 256 / n_embd), always RoPE, 1/sqrt(head) whatever attention.scale says", () => {
    const scales = (p: ModelProgram) => opsOf(p, 'scale').map((o) => Number(o.params!.scale));
    const k = scales(prog('tiny-minicpm'));
    expect([k[0], k[1], k.at(-1)]).toEqual([12, 0.5, 2]);
    const d = scales(prog('tiny-minicpm-default'));
    expect([d[0], d[1], d.at(-1)]).toEqual([12, Math.fround(Math.fround(1.4) / 2), 0.5]);
    const g = f('tiny-minicpm-default');
    const q = programOf({ ...g.kv, 'minicpm.attention.scale': 0.01, 'minicpm.rope.scaling.finetuned': false }, g.tensors);
    expect(opsOf(q, 'attention').every((o) => o.params!.scale === 1 / 8)).toBe(true);
    expect(opsOf(q, 'rope')).toHaveLength(2 * 4);
    expect(opsOf(prog('tiny-minicpm'), 'matmul').filter((o) => o.weights!.bias?.endsWith('attn_output.bias'))).toHaveLength(4);
  });

  it('stablelm: partial NeoX RoPE, per-head q/k LayerNorms before it and parallel blocks when the file has them; nemotron: ReLU², its optional biases', () => {
    const s = prog('tiny-stablelm');
    expect(opsOf(s, 'rope').every((o) => o.params!.n_dims === 16 && o.params!.neox === true)).toBe(true);
    expect(opsOf(s, 'layer_norm')).toHaveLength(2 * 4 + 1);
    expect(opsOf(s, 'head_rms_norm')).toHaveLength(0);
    const b = prog('tiny-stablelm-12b');
    // One LayerNorm per block (the attention's input, which the FFN reads too) and the output's.
    expect(opsOf(b, 'layer_norm').map((o) => o.weights!.weight)).toEqual(['blk.0.attn_norm.weight', 'blk.1.attn_norm.weight', 'blk.2.attn_norm.weight', 'blk.3.attn_norm.weight', 'output_norm.weight']);
    const hn = opsOf(b, 'head_rms_norm');
    expect(hn.map((o) => [o.params!.layer_norm, o.params!.n_head]).slice(0, 2)).toEqual([[1, 4], [1, 2]]);
    expect(b.ops.findIndex((o) => o.op === 'head_rms_norm')).toBeLessThan(b.ops.findIndex((o) => o.op === 'rope'));
    const ffnIn = b.ops.find((o) => o.op === 'matmul' && o.weights!.weight === 'blk.0.ffn_gate.weight')!.a;
    expect(b.ops.find((o) => o.op === 'layer_norm')!.out).toBe(ffnIn);
    const n = prog('tiny-nemotron');
    expect([opsOf(n, 'relu_sqr').length, opsOf(n, 'rope').every((o) => o.params!.n_dims === 32)]).toEqual([4, true]);
    expect(opsOf(n, 'matmul').filter((o) => o.weights!.bias).length).toBe(3 * 4);
    const t = new Map(f('tiny-nemotron').tensors);
    for (let i = 0; i < 4; i++) for (const x of ['attn_output', 'ffn_up', 'ffn_down']) t.delete(`blk.${i}.${x}.bias`);
    expect(opsOf(programOf(f('tiny-nemotron').kv, t), 'matmul').filter((o) => o.weights!.bias)).toHaveLength(0);
  });

  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(files[p].tensors);
    edit(t);
    const kv = { ...files[p].kv };
    kvEdit(kv);
    return () => programOf(kv as typeof files[string]['kv'], t);
  };
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['an orion file without attn_norm.bias', 'tiny-orion', (t) => t.delete('blk.2.attn_norm.bias'), undefined, /blk\.2\.attn_norm\.bias/],
    ['an orion file without output_norm.bias', 'tiny-orion', (t) => t.delete('output_norm.bias'), undefined, /'output_norm\.bias'/],
    ['an orion file without output.weight', 'tiny-orion', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
    ['an internlm2 file without output.weight', 'tiny-internlm2', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
    ['a starcoder2 file without ffn_up.bias', 'tiny-starcoder2', (t) => t.delete('blk.1.ffn_up.bias'), undefined, /blk\.1\.ffn_up\.bias/],
    ['a starcoder2 file without attn_output.bias', 'tiny-starcoder2', (t) => t.delete('blk.0.attn_output.bias'), undefined, /blk\.0\.attn_output\.bias/],
    ['an olmo file without attention.layer_norm_epsilon', 'tiny-olmo', () => {}, (kv) => delete kv['olmo.attention.layer_norm_epsilon'], /lacks metadata 'olmo\.attention\.layer_norm_epsilon'/],
    ['an arcee file without ffn_down', 'tiny-arcee', (t) => t.delete('blk.3.ffn_down.weight'), undefined, /blk\.3\.ffn_down\.weight/],
    ['stablelm q norms one row for all heads', 'tiny-stablelm-12b', (t) => t.set('blk.1.attn_q_norm.weight', { ...t.get('blk.1.attn_q_norm.weight')!, dims: [64] }), undefined, /layer 1: attn_q_norm\.weight is \[64\]; stablelm takes one row of 64 per head \(4\)/],
    ['a stablelm file with attn_q_norm but no attn_k_norm', 'tiny-stablelm-12b', (t) => t.delete('blk.2.attn_k_norm.weight'), undefined, /blk\.2\.attn_k_norm\.weight/],
    ['a nemotron file with a negative LayerNorm epsilon', 'tiny-nemotron', () => {}, (kv) => (kv['nemotron.attention.layer_norm_epsilon'] = -1e-5), /nemotron: attention\.layer_norm_epsilon -0\.00001 is not in \[0, 1\)/],
    ['a maincoder file without attn_k_norm', 'tiny-maincoder', (t) => t.delete('blk.1.attn_k_norm.weight'), undefined, /blk\.1\.attn_k_norm\.weight/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it.each<[string, string, string, string]>([
    ['tiny-orion', 'blk.1.ffn_norm.bias', 'blk.1.ffn_norm.biaX', 'blk\\.1\\.ffn_norm\\.bias'],
    ['tiny-internlm2', 'blk.2.attn_qkv.weight', 'blk.2.attn_qkv.weighX', 'blk\\.2\\.attn_q\\.weight'],
  ])('EngineModel.load of %s with %s renamed away fails with KAIL_E_BAD_MODEL', (p, from, to, want) => {
    const file = writeTestModel(dir, p);
    const bad = patchedCopy(file, `${dir}/${p}-renamed.gguf`, from, to);
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(new RegExp(want)) }));
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

// Parallel-residual decoders (gptneox, phi2, falcon): which norm each sub-layer reads, in which
// order the residual adds, the fused QKV and its bias, the biases each loader requires.
describe('parallel-residual layouts', () => {
  const PAR = ['tiny-gptneox', 'tiny-gptneox-seq', 'tiny-phi2', 'tiny-phi2-fused', 'tiny-falcon', 'tiny-falcon-40b', 'tiny-chatglm', 'tiny-chatglm-split'];
  const pf: Record<string, File> = {};
  beforeAll(() => {
    for (const p of PAR) pf[p] = testModelFile(dir, p);
  }, 300_000);
  const pprog = (p: string) => programOf(pf[p].kv, pf[p].tensors);
  const lnOf = (p: ModelProgram) => opsOf(p, 'layer_norm').map((o) => o.weights!.weight);
  const at = (p: ModelProgram, pred: (o: ProgramOp) => boolean) => p.ops.findIndex(pred);
  const mm = (p: ModelProgram, w: string) => p.ops.find((o) => o.op === 'matmul' && o.weights!.weight === w)!;
  // Block 0's attention add into the stream: the first add whose b is the attn_output product.
  const attnAdd = (p: ModelProgram) => at(p, (o) => o.op === 'add' && o.b === mm(p, 'blk.0.attn_output.weight').out);

  it('gptneox: use_parallel_residual reads ffn_norm of the block input before the attention adds in; false, after; fused QKV and every bias; partial NeoX RoPE', () => {
    const par = pprog('tiny-gptneox');
    const seq = pprog('tiny-gptneox-seq');
    for (const p of [par, seq]) {
      expect(lnOf(p).slice(0, 2)).toEqual(['blk.0.attn_norm.weight', 'blk.0.ffn_norm.weight']);
      expect(opsOf(p, 'layer_norm').every((o) => o.weights!.bias === o.weights!.weight.replace(/weight$/, 'bias'))).toBe(true);
      expect(mm(p, 'blk.0.attn_qkv.weight').weights!.bias).toBe('blk.0.attn_qkv.bias');
      expect(opsOf(p, 'matmul').filter((o) => o.weights!.bias).length).toBe(4 * 4);
      expect(opsOf(p, 'gelu')).toHaveLength(4);
      expect(mm(p, 'output.weight').weights!.bias).toBeUndefined();
    }
    const ffnNorm = (p: ModelProgram) => at(p, (o) => o.op === 'layer_norm' && o.weights!.weight === 'blk.0.ffn_norm.weight');
    expect(ffnNorm(par)).toBeLessThan(attnAdd(par));
    expect(ffnNorm(seq)).toBeGreaterThan(attnAdd(seq));
    expect(opsOf(par, 'rope').every((o) => o.params!.n_dims === 16 && o.params!.neox === true)).toBe(true);
    expect(opsOf(seq, 'rope').every((o) => o.params!.n_dims === 32)).toBe(true);
  });

  it('phi2: one LayerNorm per block read by attention and FFN, split or fused q/k/v with biases, output.bias', () => {
    for (const name of ['tiny-phi2', 'tiny-phi2-fused']) {
      const p = pprog(name);
      expect(lnOf(p)).toEqual(['blk.0.attn_norm.weight', 'blk.1.attn_norm.weight', 'blk.2.attn_norm.weight', 'blk.3.attn_norm.weight', 'output_norm.weight']);
      expect(mm(p, 'blk.0.ffn_up.weight').a).toBe(opsOf(p, 'layer_norm')[0].out);
      expect(mm(p, 'output.weight').weights!.bias).toBe('output.bias');
      for (const w of ['attn_output', 'ffn_up', 'ffn_down']) expect(mm(p, `blk.2.${w}.weight`).weights!.bias).toBe(`blk.2.${w}.bias`);
      expect(opsOf(p, 'attention').every((o) => o.params!.scale === 1 / 8)).toBe(true);
    }
    expect(mm(pprog('tiny-phi2'), 'blk.1.attn_k.weight').weights!.bias).toBe('blk.1.attn_k.bias');
    expect(mm(pprog('tiny-phi2-fused'), 'blk.1.attn_qkv.weight').weights!.bias).toBe('blk.1.attn_qkv.bias');
  });

  it('falcon: the FFN reads attn_norm beside the attention (Falcon-40B: the attention reads attn_norm_2), multi-query, no biases, tied or untied head', () => {
    const f7 = pprog('tiny-falcon');
    expect(lnOf(f7).slice(0, 2)).toEqual(['blk.0.attn_norm.weight', 'blk.1.attn_norm.weight']);
    expect(mm(f7, 'blk.0.ffn_up.weight').a).toBe(mm(f7, 'blk.0.attn_qkv.weight').a);
    expect(opsOf(f7, 'attention').every((o) => o.params!.n_head_kv === 1 && o.params!.n_head === 4)).toBe(true);
    expect(opsOf(f7, 'matmul').filter((o) => o.weights!.bias)).toHaveLength(0);
    expect(opsOf(f7, 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
    expect(opsOf(f7, 'rope').every((o) => o.params!.n_dims === 64 && o.params!.neox === true)).toBe(true);
    const f40 = pprog('tiny-falcon-40b');
    const ln = opsOf(f40, 'layer_norm');
    expect(ln.slice(0, 2).map((o) => o.weights!.weight)).toEqual(['blk.0.attn_norm.weight', 'blk.0.attn_norm_2.weight']);
    expect(mm(f40, 'blk.0.attn_qkv.weight').a).toBe(ln[1].out);
    expect(mm(f40, 'blk.0.ffn_up.weight').a).toBe(ln[0].out);
    expect(opsOf(f40, 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    // A falcon file's attn_qkv.bias is not read (the loader takes none).
    const t = new Map(pf['tiny-falcon'].tensors);
    t.set('blk.0.attn_qkv.bias', { ...t.get('blk.0.attn_norm.bias')!, name: 'blk.0.attn_qkv.bias', dims: [384] });
    expect(opsOf(programOf(pf['tiny-falcon'].kv, t), 'matmul').filter((o) => o.weights!.bias)).toHaveLength(0);
  });

  it('chatglm (beside them): RMS norms, fused q/k/v with its bias or split, RoPE over adjacent pairs on half the head, the fused gate|up, no attn_output bias', () => {
    const c = pprog('tiny-chatglm');
    expect(normsOf(c).slice(0, 3)).toEqual(['attn_norm.weight', 'ffn_norm.weight', 'attn_norm.weight']);
    expect(mm(c, 'blk.0.attn_qkv.weight').weights!.bias).toBe('blk.0.attn_qkv.bias');
    expect(opsOf(c, 'rope').every((o) => o.params!.n_dims === 32 && o.params!.neox === false)).toBe(true);
    expect(opsOf(c, 'swiglu').map((o) => [o.params!.b_off, o.params!.n])[0]).toEqual([512, 512]);
    expect(opsOf(c, 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    const s = pprog('tiny-chatglm-split');
    expect(opsOf(s, 'matmul').filter((o) => o.weights!.bias)).toHaveLength(0);
    expect(opsOf(s, 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
    // The loader takes no attn_output.bias: one in the file is not read.
    const t = new Map(pf['tiny-chatglm-split'].tensors);
    t.set('blk.0.attn_output.bias', { ...t.get('blk.0.attn_norm.weight')!, name: 'blk.0.attn_output.bias' });
    expect(opsOf(programOf(pf['tiny-chatglm-split'].kv, t), 'matmul').filter((o) => o.weights!.bias)).toHaveLength(0);
  });

  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(pf[p].tensors);
    edit(t);
    const kv = { ...pf[p].kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a gptneox file without use_parallel_residual', 'tiny-gptneox', () => {}, (kv) => delete kv['gptneox.use_parallel_residual'], /lacks metadata 'gptneox\.use_parallel_residual'/],
    ['a gptneox file without attn_qkv.bias', 'tiny-gptneox', (t) => t.delete('blk.1.attn_qkv.bias'), undefined, /blk\.1\.attn_qkv\.bias/],
    ['a gptneox file without attn_qkv (split q/k/v)', 'tiny-gptneox-seq', (t) => t.delete('blk.0.attn_qkv.weight'), undefined, /blk\.0\.attn_qkv\.weight/],
    ['a gptneox file without ffn_norm.bias', 'tiny-gptneox', (t) => t.delete('blk.3.ffn_norm.bias'), undefined, /blk\.3\.ffn_norm\.bias/],
    ['a gptneox file without output.weight', 'tiny-gptneox', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
    ['a phi2 file without output.bias', 'tiny-phi2', (t) => t.delete('output.bias'), undefined, /'output\.bias'/],
    ['a phi2 file without ffn_down.bias', 'tiny-phi2', (t) => t.delete('blk.2.ffn_down.bias'), undefined, /blk\.2\.ffn_down\.bias/],
    ['a phi2 file without attention.layer_norm_epsilon', 'tiny-phi2', () => {}, (kv) => delete kv['phi2.attention.layer_norm_epsilon'], /lacks metadata 'phi2\.attention\.layer_norm_epsilon'/],
    ['a falcon file with partial RoPE', 'tiny-falcon', () => {}, (kv) => (kv['falcon.rope.dimension_count'] = 32), /falcon: rope\.dimension_count 32 must equal the head dimension 64/],
    ['a falcon file without attn_qkv', 'tiny-falcon', (t) => t.delete('blk.2.attn_qkv.weight'), undefined, /blk\.2\.attn_qkv\.weight/],
    ['a falcon file without attn_norm.bias', 'tiny-falcon-40b', (t) => t.delete('blk.0.attn_norm.bias'), undefined, /blk\.0\.attn_norm\.bias/],
    ['a chatglm ffn_up not twice ffn_down', 'tiny-chatglm', (t) => t.set('blk.1.ffn_up.weight', { ...t.get('blk.1.ffn_up.weight')!, dims: [256, 512] }), undefined, /layer 1: ffn_up gives 512 values, not twice ffn_down's 512/],
    ['a chatglm file without ffn_norm', 'tiny-chatglm-split', (t) => t.delete('blk.3.ffn_norm.weight'), undefined, /blk\.3\.ffn_norm\.weight/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it('EngineModel.load of a gptneox file with ffn_up.bias renamed away fails with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const file = writeTestModel(dir, 'tiny-gptneox');
    const bad = patchedCopy(file, `${dir}/gptneox-renamed.gguf`, 'blk.1.ffn_up.bias', 'blk.1.ffn_up.biaX');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/blk\.1\.ffn_up\.bias/) }));
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
  });
});

// ALiBi decoders (bloom, mpt, refact, baichuan): the attention ops' maximum bias, where it comes
// from (fixed by the loader, attention.max_alibi_bias, Baichuan's block count), no RoPE beside it,
// BLOOM's embedding LayerNorm, MPT's optional biases and positions, and the refusals.
describe('ALiBi layouts', () => {
  const AL = ['tiny-bloom', 'tiny-mpt', 'tiny-mpt-plain', 'tiny-refact', 'tiny-baichuan', 'tiny-baichuan-13b'];
  const af: Record<string, File> = {};
  beforeAll(() => {
    for (const p of AL) af[p] = testModelFile(dir, p);
  }, 300_000);
  const aprog = (p: string) => programOf(af[p].kv, af[p].tensors);
  const alibiOf = (p: ModelProgram) => opsOf(p, 'attention').map((o) => o.params!.alibi ?? 0);
  const mm = (p: ModelProgram, w: string) => p.ops.find((o) => o.op === 'matmul' && o.weights!.weight === w)!;

  it("bloom: the embedding's LayerNorm first, ALiBi 8 without RoPE, one attn_qkv with its bias, every bias, GELU", () => {
    const p = aprog('tiny-bloom');
    expect(alibiOf(p)).toEqual([8, 8, 8, 8]);
    expect(opsOf(p, 'rope')).toHaveLength(0);
    const ln = opsOf(p, 'layer_norm')[0];
    expect([ln.weights, p.ops.indexOf(ln)]).toEqual([{ weight: 'token_embd_norm.weight', bias: 'token_embd_norm.bias' }, 1]);
    expect(mm(p, 'blk.0.attn_qkv.weight').weights!.bias).toBe('blk.0.attn_qkv.bias');
    for (const w of ['attn_output', 'ffn_up', 'ffn_down']) expect(mm(p, `blk.3.${w}.weight`).weights!.bias).toBe(`blk.3.${w}.bias`);
    expect(opsOf(p, 'gelu')).toHaveLength(4);
  });

  it('mpt: ALiBi from attention.max_alibi_bias (absent: none), clamp_kqv, position_embd when present, optional biases', () => {
    const p = aprog('tiny-mpt');
    expect(alibiOf(p)).toEqual([8, 8, 8, 8]);
    expect(opsOf(p, 'rope')).toHaveLength(0);
    expect(opsOf(p, 'embed').map((o) => o.params?.index ?? 0)).toEqual([0, 1]);
    expect(opsOf(p, 'clamp').map((o) => o.params!.limit)).toEqual(Array(12).fill(1.5));
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.bias).length).toBe(4 * 4);
    const plain = aprog('tiny-mpt-plain');
    expect(alibiOf(plain)).toEqual([4, 4, 4, 4]);
    expect(opsOf(plain, 'embed')).toHaveLength(1);
    expect([opsOf(plain, 'clamp').length, opsOf(plain, 'matmul').filter((o) => o.weights!.bias).length]).toEqual([0, 0]);
    expect(opsOf(plain, 'layer_norm').every((o) => o.weights!.bias === undefined)).toBe(true);
    const kv = { ...af['tiny-mpt-plain'].kv };
    delete kv['mpt.attention.max_alibi_bias'];
    expect(alibiOf(programOf(kv, af['tiny-mpt-plain'].tensors))).toEqual([0, 0, 0, 0]);
  });

  it('refact: RMS norms, SwiGLU, ALiBi 8 without RoPE, one KV head; baichuan: RoPE at 32 blocks, ALiBi at 40, neither otherwise (llama.cpp keys it on the count)', () => {
    const r = aprog('tiny-refact');
    expect([alibiOf(r), opsOf(r, 'rope').length, opsOf(r, 'attention')[0].params!.n_head_kv]).toEqual([[8, 8, 8, 8], 0, 1]);
    const b7 = aprog('tiny-baichuan');
    expect([alibiOf(b7).every((a) => a === 0), opsOf(b7, 'rope').length, opsOf(b7, 'rope')[0].params!.neox]).toEqual([true, 64, false]);
    const b13 = aprog('tiny-baichuan-13b');
    expect([alibiOf(b13).every((a) => a === 8), alibiOf(b13).length, opsOf(b13, 'rope').length]).toEqual([true, 40, 0]);
    // The 13B file's first 32 blocks read as a 32-block file rotate; as a 36-block file, neither.
    const first = (n: number) => programOf({ ...af['tiny-baichuan-13b'].kv, 'baichuan.block_count': n }, new Map([...af['tiny-baichuan-13b'].tensors].filter(([k]) => !(Number(/^blk\.(\d+)\./.exec(k)?.[1] ?? -1) >= n))));
    expect(opsOf(first(32), 'rope')).toHaveLength(64);
    const b36 = first(36);
    expect([opsOf(b36, 'rope').length, alibiOf(b36).every((a) => a === 0)]).toEqual([0, true]);
  });

  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(af[p].tensors);
    edit(t);
    const kv = { ...af[p].kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  const copyAs = (t: Map<string, GgufTensorInfo>, from: string, to: string) => t.set(to, { ...t.get(from)!, name: to });
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a bloom file without token_embd_norm.bias', 'tiny-bloom', (t) => t.delete('token_embd_norm.bias'), undefined, /'token_embd_norm\.bias'/],
    ['a bloom file without attn_qkv.bias', 'tiny-bloom', (t) => t.delete('blk.2.attn_qkv.bias'), undefined, /blk\.2\.attn_qkv\.bias/],
    ['a bloom file without ffn_down.bias', 'tiny-bloom', (t) => t.delete('blk.1.ffn_down.bias'), undefined, /blk\.1\.ffn_down\.bias/],
    ['an mpt file with a negative max_alibi_bias', 'tiny-mpt', () => {}, (kv) => (kv['mpt.attention.max_alibi_bias'] = -8), /mpt: ALiBi's maximum bias -8 is not a non-negative number/],
    ['an mpt file with q/k norms (llama.cpp cannot run them)', 'tiny-mpt', (t) => copyAs(t, 'blk.0.attn_norm.weight', 'blk.0.attn_q_norm.weight'), undefined, /layer 0: MPT's q\/k LayerNorms .* are not supported/],
    ["an mpt file with AWQ's ffn_act scales", 'tiny-mpt', (t) => copyAs(t, 'blk.1.ffn_up.bias', 'blk.1.ffn_act.scales'), undefined, /layer 1: AWQ activation scales \(ffn_act\.scales\) are not supported/],
    ['an mpt file without attention.layer_norm_epsilon', 'tiny-mpt-plain', () => {}, (kv) => delete kv['mpt.attention.layer_norm_epsilon'], /lacks metadata 'mpt\.attention\.layer_norm_epsilon'/],
    ['a refact file without ffn_gate', 'tiny-refact', (t) => t.delete('blk.3.ffn_gate.weight'), undefined, /blk\.3\.ffn_gate\.weight/],
    ['a baichuan file without output.weight', 'tiny-baichuan-13b', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it('EngineModel.load of a bloom file with token_embd_norm.weight renamed away fails with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const file = writeTestModel(dir, 'tiny-bloom');
    const bad = patchedCopy(file, `${dir}/bloom-renamed.gguf`, 'token_embd_norm.weight', 'token_embd_norm.weighX');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/token_embd_norm\.weight/) }));
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
  });
});
