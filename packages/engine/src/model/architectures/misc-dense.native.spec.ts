// The programs of qwen2vl, hunyuan_vl, plamo, plamo3, pangu-embedded and openelm (DenseLayout
// members of llama-family.ts): M-RoPE as NeoX for text, the parallel block, windows and their
// RoPE base, per-block head counts, what each graph leaves out; and the files the builders refuse,
// naming the tensor or key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-misc-dense.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ProgramOp } from '@kailstream/core-native';

import { editedKv, opsOf, programOfFile as programOf, tempDir, testModelFile, without } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-qwen2vl', 'tiny-hunyuan-vl', 'tiny-plamo', 'tiny-plamo3', 'tiny-plamo3-pattern', 'tiny-pangu-embedded', 'tiny-openelm'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);
const withTensor = (ts: Map<string, GgufTensorInfo>, name: string, dims: number[]) => new Map([...ts, [name, { ...ts.get('output_norm.weight')!, name, dims }]]);
const weightOf = (o: ProgramOp) => o.weights?.weight ?? '';

describe('programs', () => {
  it('qwen2vl: NeoX RoPE over the whole head (its M-RoPE on text), no rope_freqs, the output.bias left out', () => {
    const p = prog('tiny-qwen2vl');
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true && o.params!.n_dims === 64 && o.weights === undefined)).toBe(true);
    const head = opsOf(p, 'matmul').at(-1)!;
    expect(head.weights).toEqual({ weight: 'output.weight' });
    expect(opsOf(p, 'matmul').some((o) => o.weights!.bias?.endsWith('attn_q.bias'))).toBe(true);
  });

  it('hunyuan_vl: q/k norms after RoPE at the alpha-scaled base, with or without XD-RoPE sections', () => {
    const p = prog('tiny-hunyuan-vl');
    expect(p.ops.findIndex((o) => o.op === 'head_rms_norm')).toBeGreaterThan(p.ops.findIndex((o) => o.op === 'rope'));
    expect(Number(opsOf(p, 'rope')[0].params!.freq_base)).toBeCloseTo(10000 * Math.pow(1000, 64 / 62), -2);
    const f = files['tiny-hunyuan-vl'];
    expect(programOf(editedKv(f.kv, { 'hunyuan_vl.rope.dimension_sections': undefined }), f.tensors).ops).toEqual(p.ops);
  });

  it('plamo: one attn_norm feeds attention and FFN side by side; an untied head', () => {
    const p = prog('tiny-plamo');
    const norms = opsOf(p, 'rms_norm').map(weightOf);
    expect(norms.filter((n) => n.startsWith('blk.0.'))).toEqual(['blk.0.attn_norm.weight']);
    const h = opsOf(p, 'rms_norm')[0].out;
    expect(opsOf(p, 'matmul').find((o) => weightOf(o) === 'blk.0.ffn_gate.weight')!.a).toBe(h);
    expect(weightOf(opsOf(p, 'matmul').at(-1)!)).toBe('output.weight');
  });

  it('plamo3: q/k norms before RoPE, post norms, windows on the pattern at rope.freq_base_swa (default 10000)', () => {
    const p = prog('tiny-plamo3');
    expect(p.ops.findIndex((o) => o.op === 'head_rms_norm')).toBeLessThan(p.ops.findIndex((o) => o.op === 'rope'));
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 8, 8, 8, 8, 8, 8, 0]);
    expect(opsOf(p, 'rope').map((o) => o.params!.freq_base)).toEqual([...Array(14).fill(10000), 1e6, 1e6]);
    expect(opsOf(p, 'rms_norm').map(weightOf).filter((n) => n.startsWith('blk.0.'))).toEqual(['blk.0.attn_norm.weight', 'blk.0.post_attention_norm', 'blk.0.ffn_norm.weight', 'blk.0.post_ffw_norm']);
    const q = prog('tiny-plamo3-pattern');
    expect(opsOf(q, 'attention').map((o) => o.params!.window ?? 0)).toEqual([6, 0, 6, 0]);
    expect(opsOf(q, 'rope').filter((_, i) => i % 2 === 0).map((o) => o.params!.freq_base)).toEqual([5e4, 1e6, 5e4, 1e6]);
  });

  it('pangu-embedded: attn_output.bias added, rope_freqs unread; openelm: heads and KV rows per block', () => {
    const p = prog('tiny-pangu-embedded');
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.bias?.endsWith('attn_output.bias'))).toHaveLength(4);
    expect(opsOf(p, 'rope').every((o) => o.weights === undefined)).toBe(true);
    const e = prog('tiny-openelm');
    expect(opsOf(e, 'attention').map((o) => [o.params!.n_head, o.params!.n_head_kv])).toEqual([[4, 1], [4, 2], [8, 2], [4, 4]]);
    expect(weightOf(opsOf(e, 'matmul').at(-1)!)).toBe('token_embd.weight');
  });
});

describe('refusals', () => {
  const refuses = (kv: Record<string, unknown>, tensors: Map<string, GgufTensorInfo>, msg: RegExp) => {
    expect(() => programOf(kv as File['kv'], tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(msg) }));
  };
  it('qwen2vl needs its sections, within the head, and RoPE over the whole head', () => {
    const f = files['tiny-qwen2vl'];
    refuses(editedKv(f.kv, { 'qwen2vl.rope.dimension_sections': undefined }), f.tensors, /qwen2vl\.rope\.dimension_sections/);
    refuses(editedKv(f.kv, { 'qwen2vl.rope.dimension_sections': [0, 0, 0, 8] }), f.tensors, /none of the first three/);
    refuses(editedKv(f.kv, { 'qwen2vl.rope.dimension_sections': [64, 8, 8, 0] }), f.tensors, /more than the head/);
    refuses(editedKv(f.kv, { 'qwen2vl.rope.dimension_sections': [16, 8, 8] }), f.tensors, /rope\.dimension_sections has 3 entries; it takes 4/);
    refuses(editedKv(f.kv, { 'qwen2vl.rope.dimension_count': 32 }), f.tensors, /rope\.dimension_count 32 must equal the head dimension 64/);
  });
  it('plamo needs output.weight; plamo3 its post norms and attn_qkv; pangu-embedded attn_output.bias; openelm no output.weight', () => {
    const pl = files['tiny-plamo'];
    refuses(pl.kv, without(pl.tensors, 'output.weight'), /output\.weight/);
    const p3 = files['tiny-plamo3-pattern'];
    refuses(p3.kv, without(p3.tensors, 'blk.1.post_ffw_norm'), /blk\.1\.post_ffw_norm/);
    refuses(p3.kv, without(p3.tensors, 'blk.2.attn_qkv.weight'), /blk\.2\.attn_qkv\.weight/);
    refuses(editedKv(p3.kv, { 'plamo3.rope.freq_base_swa': -1 }), p3.tensors, /freq_base_swa/);
    const pg = files['tiny-pangu-embedded'];
    refuses(pg.kv, without(pg.tensors, 'blk.3.attn_output.bias'), /blk\.3\.attn_output\.bias/);
    const oe = files['tiny-openelm'];
    refuses(oe.kv, withTensor(oe.tensors, 'output.weight', [256, 1024]), /output\.weight/);
    refuses(editedKv(oe.kv, { 'openelm.attention.head_count': [4, 4, 8] }), oe.tensors, /3 entries for 4 layers/);
    refuses(oe.kv, without(oe.tensors, 'blk.0.attn_k_norm.weight'), /blk\.0\.attn_k_norm\.weight/);
  });
});
