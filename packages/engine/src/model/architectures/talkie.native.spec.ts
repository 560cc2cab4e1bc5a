// The programs of talkie (talkie.ts, Talkie 1930): weightless RMS norms, the normed embedding
// added to every block times its layer_output_scale, the per-head q gain (head_rms_norm's
// head_gain) after RoPE, the per-tensor scales; and the files the builder refuses, naming the key
// or tensor. Numerics are checked against llama.cpp in tools/src/parity/parity-talkie.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo } from '@kailstream/core-native';

import { editedKv, opsOf, programOfFile as programOf, reshaped, tempDir, testModelFile, without } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
beforeAll(() => {
  for (const p of ['tiny-talkie', 'tiny-talkie-fused']) files[p] = testModelFile(dir, p);
}, 120_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);

describe('programs', () => {
  it('reads every tensor of the file; norms carry no weight but the q gain; the head is scaled', () => {
    for (const name of ['tiny-talkie', 'tiny-talkie-fused']) {
      const p = prog(name);
      const read = new Set(p.ops.flatMap((o) => Object.values(o.weights ?? {})));
      expect([...read].sort()).toEqual([...files[name].tensors.keys()].sort());
      expect(opsOf(p, 'rms_norm').every((o) => o.weights === undefined)).toBe(true);
      const heads = opsOf(p, 'head_rms_norm');
      expect(heads.filter((o) => o.params!.head_gain === 1).map((o) => o.weights!.weight)).toEqual([0, 1, 2, 3].map((i) => `blk.${i}.attn_q_norm.weight`));
      expect(heads.filter((o) => o.params!.head_gain === undefined).every((o) => o.weights === undefined)).toBe(true);
      expect(opsOf(p, 'rope').every((o) => o.params!.neox === true)).toBe(true);
      expect(opsOf(p, 'scale').at(-1)!.params!.scale).toBeCloseTo(name === 'tiny-talkie' ? 1.7 : 0.6, 6);
    }
  });
});

describe('refusals', () => {
  const refuses = (kv: Record<string, unknown>, tensors: Map<string, GgufTensorInfo>, msg: RegExp) => {
    expect(() => programOf(kv as File['kv'], tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(msg) }));
  };
  it('names the missing or misshapen tensor and the missing logit_scale', () => {
    const f = files['tiny-talkie'];
    refuses(editedKv(f.kv, { 'talkie.logit_scale': undefined }), f.tensors, /logit_scale/);
    refuses(f.kv, without(f.tensors, 'blk.2.layer_output_scale.weight'), /lacks tensor 'blk\.2\.layer_output_scale\.weight'/);
    refuses(f.kv, without(f.tensors, 'output.weight'), /lacks tensor 'output\.weight'/);
    refuses(f.kv, reshaped(f.tensors, 'blk.1.attn_q_norm.weight', [4]), /blk\.1\.attn_q_norm\.weight is \[4\], expected \[1, 4\]/);
    refuses(f.kv, reshaped(f.tensors, 'blk.0.layer_output_scale.weight', [2]), /blk\.0\.layer_output_scale\.weight is \[2\], not one value/);
    refuses(f.kv, reshaped(f.tensors, 'blk.3.ffn_down.scale', [1, 2]), /blk\.3\.ffn_down\.scale is \[1, 2\], not one value/);
  });
});
