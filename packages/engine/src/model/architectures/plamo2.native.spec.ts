// PLaMo 2 (plamo2): its program as llama.cpp's graph (src/models/plamo2.cpp) builds it, and the
// files the builder refuses with the key or tensor at fault. Numerics against llama.cpp:
// tools/src/parity/parity-plamo2.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { editedKv as edit, programOfFile as programOf, tempDir, testModelFile } from '../../testing';

const dir = tempDir('kail-plamo2-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const without = (m: Map<string, GgufTensorInfo>, ...names: string[]) => new Map([...m].filter(([k]) => !names.includes(k)));
const renamed = (m: Map<string, GgufTensorInfo>, from: string, to: string) => new Map([...m].map(([k, v]) => (k === from ? [to, { ...v, name: to }] : [k, v])));
const badModel = (re: RegExp) => expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(re) });

describe('plamo2 program', () => {
  it('Mamba blocks (per-head z|x split, normed B/C/dt, one scan with A and D per head) and GQA blocks (per-head q/k norms, NeoX RoPE over the head), post norms', () => {
    const f = testModelFile(dir, 'tiny-plamo2');
    const p = programOf(f.kv, f.tensors);
    // Recurrent states of blocks 0 and 2: the convolution window (3 taps x d_inner 512) and the scan's (512 x 16); KV rows of blocks 1 and 3 (2 heads x 64).
    expect(p.rsWidth).toEqual([3 * 512, 512 * 16, 3 * 512, 512 * 16]);
    expect(p.kvKWidth).toEqual([128, 128]);
    expect(p.ops.filter((o) => o.op === 'ssm_scan').map((o) => [o.params!.n_head, o.params!.head_dim, o.params!.d_state, o.params!.n_group])).toEqual(Array(2).fill([8, 64, 16, 1]));
    // ssm_in's rows per head: z at 128 k, x at 128 k + 64; one strided copy of the 8 heads each (blocks 0 and 2).
    const zx = p.ops.find((q) => q.op === 'matmul' && q.weights?.weight === 'blk.0.ssm_in.weight')!.out;
    const copies = p.ops.filter((o) => o.op === 'copy' && o.a === zx);
    expect(copies.map((o) => o.params)).toEqual([0, 64, 0, 64].map((a_off) => ({ n: 64, blocks: 8, a_stride: 128, out_stride: 64, a_off })));
    // (Copies in all: z, x, B|C and dt per Mamba block, q, k and v per attention block.)
    expect(p.ops.filter((o) => o.op === 'copy')).toHaveLength(2 * 4 + 2 * 3);
    const norms = p.ops.filter((o) => o.op === 'head_rms_norm');
    expect(norms.map((o) => o.weights!.weight)).toEqual([0, 1, 2, 3].flatMap((i) =>
      i % 2 === 0 ? [`blk.${i}.ssm_b_norm`, `blk.${i}.ssm_c_norm`, `blk.${i}.ssm_dt_norm`] : [`blk.${i}.attn_q_norm.weight`, `blk.${i}.attn_k_norm.weight`],
    ));
    const ropes = p.ops.filter((o) => o.op === 'rope');
    expect(ropes.map((o) => [o.params!.n_dims, o.params!.neox, o.params!.n_head])).toEqual([[64, true, 4], [64, true, 2], [64, true, 4], [64, true, 2]]);
    expect(p.ops.filter((o) => o.op === 'attention').map((o) => o.params!.scale)).toEqual(Array(2).fill(Math.fround(1 / 8)));
    const post = p.ops.filter((o) => o.op === 'rms_norm' && /post_/.test(String(o.weights!.weight)));
    expect(post.map((o) => o.weights!.weight)).toEqual([0, 1, 2, 3].flatMap((i) => [`blk.${i}.post_attention_norm`, `blk.${i}.post_ffw_norm`]));
    // llama.cpp's PLaMo 2 graph has no control-vector hook.
    expect(p.ops.filter((o) => o.op === 'cvec')).toEqual([]);
    // The norms named with '.weight' are taken as well.
    const named = ['blk.0.post_attention_norm', 'blk.3.post_ffw_norm'].reduce((m, n) => renamed(m, n, `${n}.weight`), f.tensors);
    expect(programOf(f.kv, named).ops.filter((o) => o.op === 'rms_norm' && /post_/.test(String(o.weights!.weight))).map((o) => o.weights!.weight)).toContain('blk.3.post_ffw_norm.weight');
  });

  it('refuses missing or malformed keys and tensors with what is wrong', () => {
    const f = testModelFile(dir, 'tiny-plamo2');
    const bad = (extra: Record<string, GgufValue | undefined>, tensors: Map<string, GgufTensorInfo>, re: RegExp) => expect(() => programOf(edit(f.kv, extra), tensors)).toThrow(badModel(re));
    for (const k of ['ssm.conv_kernel', 'ssm.inner_size', 'ssm.state_size', 'ssm.time_step_rank', 'ssm.group_count']) bad({ [`plamo2.${k}`]: undefined }, f.tensors, new RegExp(`lacks metadata 'plamo2\\.${k.replace('.', '\\.')}'`));
    bad({ 'plamo2.ssm.group_count': 1 }, f.tensors, /ssm\.group_count is 1; PLaMo 2's B and C are shared/);
    bad({ 'plamo2.ssm.time_step_rank': 3 }, f.tensors, /does not split into 3 heads/);
    bad({ 'plamo2.ssm.time_step_rank': 16 }, f.tensors, /'blk\.0\.ssm_dt\.weight' has shape \[64, 8\], expected \[64, 16\]/);
    bad({ 'plamo2.ssm.state_size': 32 }, f.tensors, /'blk\.0\.ssm_x\.weight' has shape \[512, 96\], expected \[512, 128\]/);
    bad({ 'plamo2.attention.key_length': undefined }, f.tensors, /key head dimension/);
    bad({ 'plamo2.attention.value_length': 32 }, f.tensors, /key length 64 and value length 32 differ/);
    bad({ 'plamo2.attention.head_count': [0, 3, 0, 4] }, f.tensors, /block 1: head_count 3 is not a positive multiple of head_count_kv 2/);
    bad({ 'plamo2.attention.head_count': [0, 0, 0, 4] }, f.tensors, /block 1: head_count 0/);
    for (const t of ['blk.0.ssm_in.weight', 'blk.2.ssm_b_norm', 'blk.0.ssm_a', 'blk.2.ssm_dt.bias', 'blk.1.attn_qkv.weight', 'blk.3.attn_k_norm.weight', 'blk.1.post_attention_norm.weight', 'blk.2.ffn_up.weight', 'output_norm.weight'])
      bad({}, without(f.tensors, t.replace(/\.post_attention_norm\.weight$/, '.post_attention_norm')), new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}'`));
    // A q norm shared by all heads (PLaMo 3's) is not PLaMo 2's row per head.
    const shared = new Map(f.tensors);
    shared.set('blk.1.attn_q_norm.weight', { ...f.tensors.get('blk.1.attn_q_norm.weight')!, dims: [64] });
    bad({}, shared, /'blk\.1\.attn_q_norm\.weight' has shape \[64\], expected \[64, 4\] \(a weight row per head\)/);
    const sep = new Map(f.tensors);
    sep.set('blk.1.attn_q.weight', { ...f.tensors.get('blk.1.attn_qkv.weight')!, name: 'blk.1.attn_q.weight' });
    bad({}, sep, /block 1 has attn_q\.weight; PLaMo 2's attention is one attn_qkv/);
    const conv = new Map(f.tensors);
    conv.set('blk.0.ssm_conv1d.weight', { ...f.tensors.get('blk.0.ssm_conv1d.weight')!, dims: [4, 256] });
    bad({}, conv, /'blk\.0\.ssm_conv1d\.weight' has shape \[4, 256\], expected \[4, 512\]/);
  });
});
