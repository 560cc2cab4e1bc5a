// The programs of hrm_text (hrm-text.ts, HRM-Text / DFM Mimir): low and high stacks run in nested
// cycles, a KV layer per cache slot while the weights are the two stacks' (read once by the plan),
// parameterless norms, gated attention, z_L from hrm.z_l_init; the KV accounting of inspect and
// plan by slots; and the files the builder refuses, naming the key or tensor. Numerics are checked
// against llama.cpp in tools/src/parity/parity-hrm-text.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ProgramOp } from '@kailstream/core-native';

import { kvCacheReport, openGgufMetadata, planModel } from '../model';
import { editedKv, opsOf, programOfFile as programOf, reshaped, tempDir, testModelFile, without, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
beforeAll(() => {
  for (const p of ['tiny-hrm-text', 'tiny-hrm-text-tied']) files[p] = testModelFile(dir, p);
}, 120_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);
const weightOf = (o: ProgramOp) => o.weights?.weight ?? '';

describe('programs', () => {
  it('a KV layer per cache slot (12), each pass reading its stack: low blk.0-1, high blk.2-3', () => {
    const p = prog('tiny-hrm-text');
    expect(p.kvKWidth).toEqual(Array(12).fill(128));
    expect(p.kvVWidth).toEqual(Array(12).fill(128));
    const att = opsOf(p, 'attention');
    expect(att.map((o) => o.params!.layer)).toEqual([...Array(12).keys()]);
    expect(att.every((o) => o.params!.scale === 1 / 8 && o.params!.window === undefined && o.params!.causal === undefined)).toBe(true);
    // The block each slot's query comes from: 2 low passes, then the high one, twice.
    const qBlk = opsOf(p, 'matmul').filter((o) => weightOf(o).endsWith('.attn_q.weight')).map((o) => Number(weightOf(o).split('.')[1]));
    expect(qBlk).toEqual([0, 1, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3]);
    expect(opsOf(p, 'cvec').map((o) => o.params!.layer)).toEqual([...Array(12).keys()]);
    const read = new Set(p.ops.flatMap((o) => Object.values(o.weights ?? {})));
    // Every tensor of the file is read (the 4 written blocks' 8 each), none more.
    expect([...read].sort()).toEqual([...files['tiny-hrm-text'].tensors.keys()].filter((n) => n !== 'token_embd.weight' || read.has(n)).sort());
    expect([...read].filter((n) => n.startsWith('blk.'))).toHaveLength(4 * 8);
  });

  it('parameterless norms (2 per block, 1 per pass), NeoX RoPE, gated attention, z_L init, embedding scale, no output norm', () => {
    const p = prog('tiny-hrm-text');
    const norms = opsOf(p, 'rms_norm');
    expect(norms).toHaveLength(12 * 2 + 6);
    expect(norms.every((o) => o.weights === undefined && o.params!.eps === Math.fround(1e-6))).toBe(true);
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true && o.params!.n_dims === 64)).toBe(true);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params)).toEqual(Array(12).fill({ per_element: 1 }));
    expect(p.ops.slice(0, 3).map((o) => [o.op, o.weights, o.params])).toEqual([
      ['embed', { weight: 'token_embd.weight' }, undefined],
      ['scale', undefined, { scale: 2 }],
      ['embed', { weight: 'hrm.z_l_init' }, { index: 2 }],
    ]);
    // The head reads the last high pass's normed state, which is also the hidden output.
    const gather = opsOf(p, 'gather_out')[0];
    expect(gather.a).toBe(p.hidden);
    expect(norms.at(-1)!.out).toBe(p.hidden);
    expect(weightOf(p.ops.at(-1)!)).toBe('output.weight');
    const t = prog('tiny-hrm-text-tied');
    expect([t.kvKWidth.length, opsOf(t, 'scale').length, weightOf(t.ops.at(-1)!)]).toEqual([6, 0, 'token_embd.weight']);
    expect(opsOf(t, 'matmul').filter((o) => weightOf(o).endsWith('.attn_q.weight')).map((o) => weightOf(o))).toEqual(['blk.0.attn_q.weight', 'blk.1.attn_q.weight', 'blk.0.attn_q.weight', 'blk.1.attn_q.weight', 'blk.0.attn_q.weight', 'blk.1.attn_q.weight']);
  });

  it('inspect and plan size the KV cache by slots and count each weight once', () => {
    const file = writeTestModel(dir, 'tiny-hrm-text', 'F32');
    const meta = openGgufMetadata(file);
    let tensorBytes = 0;
    try {
      // 12 slots x (K + V) x 128 values x 2 bytes.
      expect(kvCacheReport(meta, 'f16').bytesPerToken).toBe(12 * 2 * 128 * 2);
      tensorBytes = meta.tensors.reduce((a, t) => a + t.nbytes, 0);
    } finally {
      meta.close();
    }
    const plan = planModel(file, { ramBytes: 2 ** 30, nCtx: 256, nSeqMax: 1, kvType: 'f16' });
    expect(plan.kvBytes).toBe(256 * 12 * 2 * 128 * 2);
    expect([plan.residentBytes, plan.residentTensors]).toEqual([tensorBytes, 35]);
  });
});

describe('refusals', () => {
  const refuses = (kv: Record<string, unknown>, tensors: Map<string, GgufTensorInfo>, msg: RegExp) => {
    expect(() => programOf(kv as File['kv'], tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(msg) }));
  };
  it('block_count must be the slot count; the cycles and layers per stack present and positive', () => {
    const f = files['tiny-hrm-text'];
    refuses(editedKv(f.kv, { 'hrm_text.block_count': 4 }), f.tensors, /block_count 4 is not layers_per_stack x h_cycles x \(l_cycles \+ 1\) = 2 x 2 x 3 = 12/);
    refuses(editedKv(f.kv, { 'hrm_text.hrm.h_cycles': 0 }), f.tensors, /'hrm_text\.hrm\.h_cycles' is 0; expected an integer in 1\.\./);
    refuses(editedKv(f.kv, { 'hrm_text.hrm.l_cycles': 0 }), f.tensors, /'hrm_text\.hrm\.l_cycles' is 0/);
    refuses(editedKv(f.kv, { 'hrm_text.hrm.layers_per_stack': undefined }), f.tensors, /lacks metadata 'hrm_text\.hrm\.layers_per_stack'/);
    refuses(editedKv(f.kv, { 'hrm_text.hrm.prefix_lm': 'yes' }), f.tensors, /'hrm_text\.hrm\.prefix_lm' must be a boolean/);
    refuses(editedKv(f.kv, { 'hrm_text.attention.layer_norm_rms_epsilon': undefined }), f.tensors, /layer_norm_rms_epsilon/);
    refuses(editedKv(f.kv, { 'hrm_text.attention.head_count': new Uint32Array([4, 4, 4, 4, 4, 2, 4, 4, 4, 4, 4, 4]) as never }), f.tensors, /cache slot 5 has 2 heads/);
  });
  it('needs hrm.z_l_init (one row of n_embd) and every block tensor of both stacks', () => {
    const f = files['tiny-hrm-text'];
    refuses(f.kv, without(f.tensors, 'hrm.z_l_init'), /lacks tensor 'hrm\.z_l_init'/);
    refuses(f.kv, reshaped(f.tensors, 'hrm.z_l_init', [128]), /hrm\.z_l_init is \[128\], not one row of embedding_length 256/);
    refuses(f.kv, without(f.tensors, 'blk.3.attn_gate.weight'), /blk\.3\.attn_gate\.weight/);
    refuses(f.kv, without(f.tensors, 'blk.1.ffn_down.weight'), /blk\.1\.ffn_down\.weight/);
    const t = files['tiny-hrm-text-tied'];
    refuses(t.kv, without(t.tensors, 'token_embd.weight'), /token_embd\.weight/);
  });
});
