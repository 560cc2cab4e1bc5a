// EAGLE-3 draft files (arch eagle3) as llama.cpp's converter (conversion/llama.py) writes them and
// its eagle3 loader reads them: the target's layers and width, the encoder's fc over 3 x target
// width, one decoder block whose q/k/v read 2 x n_embd, optional own token_embd/output, d2t (I64,
// absolute target ids) and enc.output_norm (norm_before_fc); the tokenizer is the target's.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader, readGgufTensorBytes } from '../gguf/reader';
import { eagle3D2t, type Eagle3Config } from './architectures/eagle3';
import { writeModel } from './build';
import { getPreset } from './presets';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-eagle3-writer-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function write(preset: string) {
  const out = path.join(dir, `${preset}.gguf`);
  writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 3, out });
  return { out, h: readGgufHeader(out) };
}

describe('eagle3 drafts of tiny-llama', () => {
  const target = getPreset('tiny-llama').config;

  it('tiny-llama-eagle3: keys, the encoder, one block reading 2 x n_embd, its own token_embd and output', () => {
    const c = getPreset('tiny-llama-eagle3').config as Eagle3Config;
    const { h } = write('tiny-llama-eagle3');
    const kv = (k: string) => h.kv.get(k)?.value;
    expect(kv('general.architecture')).toBe('eagle3');
    expect(kv('eagle3.block_count')).toBe(1);
    expect(Array.from(kv('eagle3.target_layers') as ArrayLike<number>)).toEqual([1, 2, 3]);
    expect(h.kv.get('eagle3.target_layers')!.elemType).toBe(5 /* INT32 */);
    expect(kv('eagle3.target_hidden_size')).toBe(target.dim);
    expect(kv('eagle3.norm_before_residual')).toBe(false);
    expect(kv('eagle3.norm_before_fc')).toBe(false);
    // The target's tokenizer.
    expect((kv('tokenizer.ggml.tokens') as string[]).length).toBe(target.vocabSize);
    expect(kv('tokenizer.ggml.model')).toBe(write('tiny-llama-eagle3-shared').h.kv.get('tokenizer.ggml.model')!.value);
    const D = c.dim;
    const shapes = new Map(h.tensors.map((t) => [t.name, t.shape]));
    expect(Object.fromEntries(shapes)).toEqual({
      'token_embd.weight': [D, target.vocabSize],
      'fc.weight': [3 * target.dim, D],
      'output_norm.weight': [D],
      'output.weight': [D, target.vocabSize],
      'blk.0.attn_norm.weight': [D],
      'blk.0.attn_norm_2.weight': [D],
      'blk.0.attn_q.weight': [2 * D, D],
      'blk.0.attn_k.weight': [2 * D, D / 2],
      'blk.0.attn_v.weight': [2 * D, D / 2],
      'blk.0.attn_output.weight': [D, D],
      'blk.0.ffn_norm.weight': [D],
      'blk.0.ffn_gate.weight': [D, c.ff],
      'blk.0.ffn_up.weight': [D, c.ff],
      'blk.0.ffn_down.weight': [c.ff, D],
    });
  });

  it('tiny-llama-eagle3-d2t: a 512-token head, d2t as I64 absolute target ids (distinct, in range), enc.output_norm and the norm flags', () => {
    const { out, h } = write('tiny-llama-eagle3-d2t');
    expect(h.kv.get('eagle3.norm_before_residual')!.value).toBe(true);
    expect(h.kv.get('eagle3.norm_before_fc')!.value).toBe(true);
    const t = new Map(h.tensors.map((x) => [x.name, x]));
    expect(t.get('output.weight')!.shape).toEqual([256, 512]);
    expect(t.get('enc.output_norm.weight')!.shape).toEqual([3 * 256]);
    const d2t = t.get('d2t')!;
    expect(d2t.shape).toEqual([512]);
    expect(d2t.type).toBe(GgmlType.I64);
    const bytes = readGgufTensorBytes(out, d2t);
    const ids = new BigInt64Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    const want = BigInt64Array.from(eagle3D2t(target.vocabSize, 512), (x) => BigInt(x));
    expect(Buffer.from(ids.buffer).equals(Buffer.from(want.buffer))).toBe(true);
    expect(new Set(Array.from(ids, Number)).size).toBe(512);
    expect(Array.from(ids).every((x) => x >= 0n && x < BigInt(target.vocabSize))).toBe(true);
  });

  it("tiny-llama-eagle3-shared: no token_embd or output (llama.cpp takes the target's)", () => {
    const names = write('tiny-llama-eagle3-shared').h.tensors.map((t) => t.name);
    expect(names).not.toContain('token_embd.weight');
    expect(names).not.toContain('output.weight');
    expect(names).toContain('fc.weight');
  });

  it('refuses configs llama.cpp cannot load', () => {
    const c = getPreset('tiny-llama-eagle3').config as Eagle3Config;
    const bad = (x: Partial<Eagle3Config>) => () => writeModel({ config: { ...c, ...x } as Eagle3Config, fileType: 'F32', seed: 1, out: path.join(dir, 'bad.gguf') });
    expect(bad({ nLayers: 2 })).toThrow(/exactly one decoder block/);
    expect(bad({ targetLayers: [1, 2] as unknown as [number, number, number] })).toThrow(/three block indices/);
    expect(bad({ draftVocab: 2048 })).toThrow(/draftVocab must be in/);
  });
});
