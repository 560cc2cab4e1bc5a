// The programs of spark2_5 (spark2-5.ts, Spark-X2.5): sliding and full blocks by the BOOL pattern,
// each kind with its own rotary dims and base, the fused qkv, the sigmoid gate per head, the GELU-
// gated FFN; and the files the builder refuses, naming the key or tensor. Numerics are checked
// against llama.cpp in tools/src/parity/parity-spark2-5.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ProgramOp } from '@kailstream/core-native';

import { editedKv, opsOf, programOfFile as programOf, reshaped, tempDir, testModelFile, without } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
let f: File;
beforeAll(() => {
  f = testModelFile(dir, 'tiny-spark2-5');
}, 120_000);

describe('programs', () => {
  it('sliding blocks 0 and 2 (window 8, all 64 dims rotated), full blocks 1 and 3 (32 dims), one base', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'attention').map((o) => o.params!.window)).toEqual([8, undefined, 8, undefined]);
    expect(opsOf(p, 'attention').every((o) => o.params!.scale === 1 / 8)).toBe(true);
    const rope = opsOf(p, 'rope');
    expect(rope.map((o) => o.params!.n_dims)).toEqual([64, 64, 32, 32, 64, 64, 32, 32]);
    expect(rope.every((o) => o.params!.neox === true && o.params!.freq_base === 1e4)).toBe(true);
    // A file's rope.freq_base_swa reaches the sliding blocks only.
    const b = programOf(editedKv(f.kv, { 'spark2_5.rope.freq_base_swa': 5e5 }), f.tensors);
    expect(opsOf(b, 'rope').map((o) => o.params!.freq_base)).toEqual([5e5, 5e5, 1e4, 1e4, 5e5, 5e5, 1e4, 1e4]);
  });

  it('fused qkv, a sigmoid gate per head of 64, GELU-gated FFN, untied head', () => {
    const p = programOf(f.kv, f.tensors);
    const w = (o: ProgramOp) => o.weights?.weight ?? '';
    expect(opsOf(p, 'matmul').filter((o) => w(o).startsWith('blk.0.')).map(w)).toEqual([
      'blk.0.attn_qkv.weight', 'blk.0.attn_gate.weight', 'blk.0.attn_output.weight', 'blk.0.ffn_gate.weight', 'blk.0.ffn_up.weight', 'blk.0.ffn_down.weight',
    ]);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params)).toEqual(Array(4).fill({ group: 64 }));
    expect(opsOf(p, 'gelu')).toHaveLength(4);
    expect(opsOf(p, 'swiglu')).toHaveLength(0);
    expect(w(p.ops.at(-1)!)).toBe('output.weight');
    expect(programOf(f.kv, without(f.tensors, 'output.weight')).ops.at(-1)!.weights!.weight).toBe('token_embd.weight');
  });
});

describe('refusals', () => {
  const refuses = (kv: Record<string, unknown>, tensors: Map<string, GgufTensorInfo>, msg: RegExp) => {
    expect(() => programOf(kv as File['kv'], tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(msg) }));
  };
  it('the sliding window, its pattern and the norm epsilon required; rotary dims even and within the head', () => {
    refuses(editedKv(f.kv, { 'spark2_5.attention.sliding_window_pattern': undefined }), f.tensors, /sliding_window_pattern must be an array with one flag per block/);
    refuses(editedKv(f.kv, { 'spark2_5.attention.sliding_window_pattern': [true, false] as never }), f.tensors, /sliding_window_pattern has 2 entries for 4 layers/);
    refuses(editedKv(f.kv, { 'spark2_5.attention.sliding_window': undefined }), f.tensors, /lacks metadata 'spark2_5\.attention\.sliding_window'/);
    refuses(editedKv(f.kv, { 'spark2_5.attention.layer_norm_rms_epsilon': undefined }), f.tensors, /layer_norm_rms_epsilon/);
    refuses(editedKv(f.kv, { 'spark2_5.rope.dimension_count_swa': 33 }), f.tensors, /rope\.dimension_count_swa 33 must be an even number of dimensions, at most the head size 64/);
    refuses(editedKv(f.kv, { 'spark2_5.rope.dimension_count_swa': 66 }), f.tensors, /rope\.dimension_count_swa/);
    refuses(editedKv(f.kv, { 'spark2_5.rope.freq_base_swa': -1 }), f.tensors, /rope\.freq_base_swa -1 is not positive/);
  });
  it('one gate per head, the gate and the block tensors present', () => {
    refuses(f.kv, reshaped(f.tensors, 'blk.2.attn_gate.weight', [256, 8]), /blk\.2\.attn_gate\.weight is \[256, 8\], not \[256, 4\]/);
    refuses(f.kv, without(f.tensors, 'blk.1.attn_gate.weight'), /blk\.1\.attn_gate\.weight/);
    refuses(f.kv, without(f.tensors, 'blk.3.ffn_gate.weight'), /blk\.3\.ffn_gate\.weight/);
  });
});
