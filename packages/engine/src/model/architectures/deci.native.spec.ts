// deci (DeciLM / Nemotron-51B): blocks of their own shape from the per-block head_count,
// head_count_kv and feed_forward_length arrays, as llama.cpp's deci graph builds them (except its
// FFN-free blocks: see deci.ts), and the metadata and tensors the builder refuses, naming them.
// Numerics are checked against llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue, ModelProgram } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { opsOf, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const names = (p: ModelProgram, re: RegExp) => opsOf(p, 'matmul').map((o) => o.weights!.weight).filter((w) => re.test(w));

describe('deci program', () => {
  let f: ReturnType<typeof testModelFile>;
  let nf: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-deci');
    nf = testModelFile(dir, 'tiny-deci-noffn');
  }, 60_000);

  it('attends in the blocks with KV heads (2, 4, 1, 2 of 4 heads), a linear map in block 1, nothing in block 2; one KV layer per attending block', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'attention').map((o) => [o.params!.n_head, o.params!.n_head_kv, o.params!.head_dim, o.params!.scale])).toEqual([2, 4, 1, 2].map((kv) => [4, kv, 64, 1 / 8]));
    expect([p.kvKWidth, p.kvVWidth]).toEqual([[128, 256, 64, 128], [128, 256, 64, 128]]);
    expect(names(p, /attn_output/)).toEqual([0, 1, 3, 4, 5].map((i) => `blk.${i}.attn_output.weight`));
    // The linear map has no bias (llama.cpp's graph adds none there); the attention outputs theirs.
    expect(opsOf(p, 'matmul').filter((o) => /attn_output/.test(o.weights!.weight)).map((o) => o.weights!.bias)).toEqual([0, undefined, 3, 4, 5].map((i) => (i === undefined ? undefined : `blk.${i}.attn_output.bias`)));
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === false && o.weights!.freq_factors === 'rope_freqs.weight')).toBe(true);
    expect(opsOf(p, 'rope')).toHaveLength(8);
  });

  it('FFNs of their own widths with biases; an FFN-free block adds its attention and nothing else', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'matmul').filter((o) => /ffn_gate/.test(o.weights!.weight)).map((o) => [o.weights!.weight, o.weights!.bias])).toEqual(
      [0, 1, 2, 3, 4, 5].map((i) => [`blk.${i}.ffn_gate.weight`, `blk.${i}.ffn_gate.bias`]),
    );
    expect(p.buffers.filter((b) => /^ffn_gate\d+$/.test(b.name)).map((b) => b.width).sort()).toEqual([256, 512, 768]);
    const q = programOf(nf.kv, nf.tensors);
    expect(names(q, /ffn_down/)).toEqual([0, 1, 2].map((i) => `blk.${i}.ffn_down.weight`));
    expect(names(q, /attn_output/)).toEqual(['blk.0.attn_output.weight', 'blk.2.attn_output.weight', 'blk.3.attn_output.weight']);
    expect(opsOf(q, 'add')).toHaveLength(3 + 3);
    expect(opsOf(q, 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['a value head other than the key head', (kv) => (kv['deci.attention.value_length'] = 32), /key_length 64, value_length 32 and rope.dimension_count 64 must be equal/],
    ['KV heads that do not divide the heads', (kv) => (kv['deci.attention.head_count_kv'] = [3, 0, 0, 4, 1, 2]), /head_count 4 is not a multiple of head_count_kv 3/],
    ['a head count array of the wrong length', (kv) => (kv['deci.attention.head_count'] = [4, 4, 0]), /head_count/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });

  it.each(['blk.1.attn_output.weight', 'blk.1.attn_norm.weight', 'blk.2.ffn_up.weight', 'blk.3.attn_k.weight', 'blk.4.ffn_norm.weight'])('refuses a file without %s, naming it', (name) => {
    const t = new Map(f.tensors);
    t.delete(name);
    expect(() => programOf(f.kv, t)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining(`'${name}'`) }));
  });

  it('refuses a linear map that is not n_embd x n_embd; loads', () => {
    const t = new Map(f.tensors);
    t.set('blk.1.attn_output.weight', { ...t.get('blk.1.attn_output.weight')!, dims: [256, 128] });
    expect(() => programOf(f.kv, t)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/block 1's linear attention 'blk.1.attn_output.weight' is \[256, 128\]/) }));
    EngineModel.load(writeTestModel(dir, 'tiny-deci'), { threads: 1, nCtx: 32 }).close();
  });
});
