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
