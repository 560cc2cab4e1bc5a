// The program of gemma3n (buildGemma3n): AltUp's predict / correct / magnitude ops around every
// block, LAuReL, the gaussian top-k on the blocks whose activation_sparsity_scale is positive, the
// per-layer inputs added to streams 1..n-1, the shared-KV blocks' readers; the files the builder
// refuses, naming the tensor or key; the native checks of the two new ops. Numerics are checked
// against llama.cpp in tools/src/parity/parity-gemma3n.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { native } from '../../native';
import { EngineModel } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
let file = '';
let f: File;
beforeAll(() => {
  file = writeTestModel(dir, 'tiny-gemma3n');
  f = testModelFile(dir, 'tiny-gemma3n');
}, 300_000);

describe('gemma3n layout (tiny-gemma3n: 22 blocks, 4 streams, 256 per-layer inputs)', () => {
  it('AltUp around every block, top-k on blocks 0-9, two shared-KV readers, the merged streams into a soft-capped tied head', () => {
    const p = programOf(f.kv, f.tensors);
    const altup = opsOf(p, 'altup');
    // One magnitude at the start, predict and correct per block, one magnitude at the end.
    expect(altup.map((o) => o.params!.mode)).toEqual([2, ...Array(22).fill([0, 1]).flat(), 2]);
    expect(altup.every((o) => o.params!.dim === 64)).toBe(true);
    expect([altup[0].params!.n, altup[1].params!.n, altup.at(-1)!.params!.n]).toEqual([3, 4, 3]);
    expect(opsOf(p, 'gaussian_topk').map((o) => o.params!.std_mul)).toEqual(Array(10).fill(Math.fround(1.6448533535003662)));
    const att = opsOf(p, 'attention');
    expect(att.filter((o) => o.b === undefined).map((o) => o.params!.layer)).toEqual([att[18].params!.layer, att[19].params!.layer]);
    expect(att.map((o) => (o.params!.window ? 'S' : 'F')).join('')).toBe('SSSSFSSSSFSSSSFSSSSFSF');
    for (const w of ['laurel_l', 'laurel_r', 'inp_gate', 'proj', 'altup_predict_coef', 'altup_correct_coef', 'altup_router'])
      expect(opsOf(p, 'matmul').filter((o) => o.weights!.weight === `blk.21.${w}.weight`)).toHaveLength(w === 'altup_router' ? 2 : 1);
    expect(opsOf(p, 'matmul').filter((o) => /^blk\.2[01]\.attn_[kv]\.weight$/.test(o.weights!.weight))).toHaveLength(0);
    expect(opsOf(p, 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
    expect(opsOf(p, 'softcap').at(-1)!.params!.cap).toBe(30);
    // Without activation_sparsity_scale: llama.cpp's blocks 0-9.
    const kv = { ...f.kv };
    delete kv['gemma3n.activation_sparsity_scale'];
    expect(opsOf(programOf(kv, f.tensors), 'gaussian_topk')).toHaveLength(10);
  });

  const edited = (edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(f.tensors);
    edit(t);
    const kv: Record<string, unknown> = { ...f.kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  it.each<[string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a file without altup_proj', (t) => t.delete('altup_proj.weight'), undefined, /altup_proj\.weight/],
    ['a file without laurel_l', (t) => t.delete('blk.3.laurel_l.weight'), undefined, /blk\.3\.laurel_l\.weight/],
    ['a file without altup_correct_scale', (t) => t.delete('blk.7.altup_correct_scale.weight'), undefined, /blk\.7\.altup_correct_scale\.weight/],
    ['a file without per_layer_token_embd', (t) => t.delete('per_layer_token_embd.weight'), undefined, /per_layer_token_embd\.weight/],
    ['a sparsity array of the wrong length', () => {}, (kv) => (kv['gemma3n.activation_sparsity_scale'] = [1, 2]), /activation_sparsity_scale has 2 entries for 22 layers/],
    ['a negative sparsity scale', () => {}, (kv) => (kv['gemma3n.activation_sparsity_scale'] = Array(22).fill(-1)), /activation_sparsity_scale entries must be non-negative/],
    ['an active stream past the streams', () => {}, (kv) => (kv['gemma3n.altup.active_idx'] = 4), /altup\.active_idx/],
    ['shared KV from blocks that are not sliding then full', () => {}, (kv) => (kv['gemma3n.attention.shared_kv_layers'] = 3), /shared_kv_layers 3 leaves blocks 17 and 18/],
    ['a file without attention.sliding_window', () => {}, (kv) => delete kv['gemma3n.attention.sliding_window'], /gemma3n\.attention\.sliding_window/],
  ])('refuses %s, naming it', (_what, edit, kvEdit, want) => {
    expect(edited(edit, kvEdit)).toThrow(want);
  });

  it('EngineModel.load refuses a file whose LAuReL tensor is renamed away with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const renamed = patchedCopy(file, `${dir}/g3n-renamed.gguf`, 'blk.1.laurel_r.weight', 'blk.1.laurel_r.weighX');
    expect(() => EngineModel.load(renamed, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/laurel_r\.weight/) }));
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
  });

  describe('native checks of the altup and gaussian_topk ops', () => {
    const load = (p: ModelProgram) => new (native().Model)(file, p, { threads: 1, nCtx: 16 }).close();
    const tampered = (op: ProgramOp['op'], edit: (o: ProgramOp) => void, nth = 0) => {
      const q: ModelProgram = JSON.parse(JSON.stringify(programOf(f.kv, f.tensors)));
      edit(q.ops.filter((o) => o.op === op)[nth]);
      return q;
    };
    it('accepts the program the builder makes', () => {
      expect(() => load(programOf(f.kv, f.tensors))).not.toThrow();
    });
    it.each<[string, string, number, RegExp]>([
      ['3 AltUp streams over altup_proj\'s 3 slices', 'gemma3n.altup.num_inputs', 3, /altup_proj\.weight' \[64, 64, 3\]/],
    ])('refuses a file whose metadata disagrees with its tensors: %s', (_what, key, value, want) => {
      expect(() => load(programOf({ ...f.kv, [key]: value } as File['kv'], f.tensors))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
    });
    it('refuses 128 per-layer inputs over a table of 256 per block, naming the table', () => {
      const kv = { ...f.kv, 'gemma3n.embedding_length_per_layer_input': 128 } as File['kv'];
      expect(() => programOf(kv, f.tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/per_layer_token_embd\.weight \[5632, 512\] is not embedding_length_per_layer_input 128 x 22 blocks wide/) }));
    });
    it.each<[string, ProgramOp['op'], (o: ProgramOp) => void, number, RegExp]>([
      ['an unknown AltUp mode', 'altup', (o) => (o.params!.mode = 5), 0, /\(altup\): mode 5 is not 0 \(predict\), 1 \(correct\) or 2 \(magnitude\)/],
      ['more streams than the buffer holds', 'altup', (o) => (o.params!.n = 5), 1, /\(altup\): 320 values at offset 0 do not fit buffer 'altup'/],
      ['an active stream past the streams', 'altup', (o) => (o.params!.act = 4), 1, /\(altup\): active stream 4 is not one of the 4 streams/],
      ['a correct without its coefficients', 'altup', (o) => delete o.c, 2, /\(altup\): needs buffer c/],
      ['a magnitude target past its buffer', 'altup', (o) => (o.params!.b_off = 64 * 4), 0, /\(altup\): 64 values at offset 256 do not fit buffer '\w+' \(b, width 64\)/],
      ['a top-k without std_mul', 'gaussian_topk', (o) => delete o.params!.std_mul, 0, /\(gaussian_topk\): std_mul is missing or not a finite number/],
    ])('refuses %s', (_what, op, edit, nth, want) => {
      expect(() => load(tampered(op, edit, nth))).toThrow(want);
    });
  });
});
