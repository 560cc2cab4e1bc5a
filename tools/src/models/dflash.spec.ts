// DFlash draft files (arch dflash) as llama.cpp's converter (conversion/qwen.py, DFlashModel) writes
// them and its dflash loader reads them: dflash.target_layers (INT32, the target's layer inputs),
// dflash.block_size, the target's tokenizer with tokenizer.ggml.mask_token_id, fc over L x target
// width, enc.output_norm (the checkpoint's hidden_norm), Qwen3 blocks with q/k norms, output_norm,
// no token_embd / output of its own unless asked (llama.cpp takes the target's), and
// dflash.attention.causal only when set.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { readGgufHeader } from '../gguf/reader';
import { dflashMaskId, type DflashConfig } from './architectures/dflash';
import { writeModel } from './build';
import { getPreset } from './presets';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-dflash-writer-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function write(preset: string) {
  const out = path.join(dir, `${preset}.gguf`);
  writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 3, out });
  return readGgufHeader(out);
}

describe('dflash drafts of tiny-qwen3', () => {
  const target = getPreset('tiny-qwen3').config;

  it('tiny-dflash: keys, the encoder, two Qwen3 blocks, the target\'s token_embd and output', () => {
    const c = getPreset('tiny-dflash').config as DflashConfig;
    const h = write('tiny-dflash');
    const kv = (k: string) => h.kv.get(k)?.value;
    expect(kv('general.architecture')).toBe('dflash');
    expect(kv('dflash.block_count')).toBe(2);
    expect(Array.from(kv('dflash.target_layers') as ArrayLike<number>)).toEqual([0, 1]);
    expect(h.kv.get('dflash.target_layers')!.elemType).toBe(5 /* INT32 */);
    expect(kv('dflash.block_size')).toBe(8);
    expect(kv('dflash.attention.causal')).toBeUndefined();
    expect(kv('dflash.attention.key_length')).toBe(64);
    expect(kv('tokenizer.ggml.mask_token_id')).toBe(dflashMaskId(c));
    expect((kv('tokenizer.ggml.tokens') as string[])[dflashMaskId(c)]).toBe('<|fim_pad|>');
    expect((kv('tokenizer.ggml.tokens') as string[]).length).toBe(target.vocabSize);
    const D = c.dim;
    const shapes = Object.fromEntries(h.tensors.map((t) => [t.name, t.shape]));
    expect(shapes['token_embd.weight']).toBeUndefined();
    expect(shapes['output.weight']).toBeUndefined();
    expect(shapes['fc.weight']).toEqual([2 * target.dim, D]);
    expect(shapes['enc.output_norm.weight']).toEqual([D]);
    expect(shapes['output_norm.weight']).toEqual([D]);
    for (const i of [0, 1]) {
      expect(shapes[`blk.${i}.attn_q.weight`]).toEqual([D, 4 * 64]);
      expect(shapes[`blk.${i}.attn_k.weight`]).toEqual([D, 2 * 64]);
      expect(shapes[`blk.${i}.attn_q_norm.weight`]).toEqual([64]);
      expect(shapes[`blk.${i}.attn_k_norm.weight`]).toEqual([64]);
      expect(shapes[`blk.${i}.ffn_down.weight`]).toEqual([c.ff, D]);
    }
    expect(h.tensors).toHaveLength(5 + 2 * 11 - 2);
  });

  it('tiny-dflash-own: its own token_embd and output, one target layer, causal', () => {
    const h = write('tiny-dflash-own');
    expect(h.kv.get('dflash.attention.causal')!.value).toBe(true);
    expect(Array.from(h.kv.get('dflash.target_layers')!.value as ArrayLike<number>)).toEqual([1]);
    const shapes = Object.fromEntries(h.tensors.map((t) => [t.name, t.shape]));
    expect(shapes['token_embd.weight']).toEqual([256, 1024]);
    expect(shapes['output.weight']).toEqual([256, 1024]);
    expect(shapes['fc.weight']).toEqual([256, 256]);
  });
});
