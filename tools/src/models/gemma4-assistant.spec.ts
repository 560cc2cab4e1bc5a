// Gemma 4 assistant drafts (arch gemma4-assistant) as llama.cpp's converter (conversion/gemma.py
// Gemma4AssistantModel) writes them and its gemma4-assistant loader reads them: every block a
// nextn block, embedding_length_out the target's width, no K/V projections (the blocks attend over
// the target's caches, so their heads are the target's last sliding / full blocks'), the
// pre/post projections, the tied head; the tokenizer is the target's.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Gemma4AssistantConfig } from './architectures/gemma4-assistant';
import { writeModel } from './build';
import { getPreset } from './presets';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gemma4-assistant-writer-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('gemma4-assistant draft of tiny-gemma4', () => {
  const c = getPreset('tiny-gemma4-assistant').config as Gemma4AssistantConfig;
  const target = getPreset('tiny-gemma4').config as Gemma4AssistantConfig;

  it("keys, tensors and shapes: the target's heads, width and tokenizer; no K/V projections", () => {
    const out = path.join(dir, 'a.gguf');
    writeModel({ config: c, fileType: 'F32', seed: 3, out });
    const h = readGgufHeader(out);
    const kv = (k: string) => h.kv.get(`gemma4-assistant.${k}`)?.value;
    expect(h.kv.get('general.architecture')!.value).toBe('gemma4-assistant');
    expect([kv('embedding_length'), kv('embedding_length_out'), kv('block_count'), kv('nextn_predict_layers')]).toEqual([32, target.dim, 2, 2]);
    expect(Array.from(kv('attention.sliding_window_pattern') as ArrayLike<boolean>)).toEqual([true, false]);
    // Block 0 slides over the target's sliding cache (2 KV heads of 16), block 1 over its full one (1 of 32).
    expect(Array.from(kv('attention.head_count_kv') as ArrayLike<number>)).toEqual([target.nKvHeads, target.nKvHeadsFull]);
    expect([kv('attention.key_length_swa'), kv('attention.key_length'), kv('attention.sliding_window')]).toEqual([target.headDim, target.headDimFull, target.window]);
    expect((h.kv.get('tokenizer.ggml.tokens')!.value as string[]).length).toBe(target.vocabSize);
    const D = 32;
    const T = target.dim;
    const shapes = Object.fromEntries(h.tensors.map((t) => [t.name, t.shape]));
    const block = (i: number, hd: number) => ({
      [`blk.${i}.attn_norm.weight`]: [D],
      [`blk.${i}.attn_q.weight`]: [D, 4 * hd],
      [`blk.${i}.attn_q_norm.weight`]: [hd],
      [`blk.${i}.attn_output.weight`]: [4 * hd, D],
      [`blk.${i}.post_attention_norm.weight`]: [D],
      [`blk.${i}.ffn_norm.weight`]: [D],
      [`blk.${i}.ffn_gate.weight`]: [D, c.ff],
      [`blk.${i}.ffn_up.weight`]: [D, c.ff],
      [`blk.${i}.ffn_down.weight`]: [c.ff, D],
      [`blk.${i}.post_ffw_norm.weight`]: [D],
      [`blk.${i}.layer_output_scale.weight`]: [1],
    });
    expect(shapes).toEqual({
      'token_embd.weight': [D, target.vocabSize],
      'output_norm.weight': [D],
      'nextn.pre_projection.weight': [2 * T, D],
      'nextn.post_projection.weight': [D, T],
      'rope_freqs.weight': [target.headDimFull / 2],
      ...block(0, target.headDim),
      ...block(1, target.headDimFull),
    });
  });

  it('Q8_0: the matrices quantized, norms, scales and rope_freqs F32', () => {
    const out = path.join(dir, 'q.gguf');
    writeModel({ config: c, fileType: 'Q8_0', seed: 3, out });
    const types = new Map(readGgufHeader(out).tensors.map((t) => [t.name, t.type]));
    for (const n of ['token_embd.weight', 'nextn.pre_projection.weight', 'nextn.post_projection.weight', 'blk.1.attn_q.weight', 'blk.1.ffn_down.weight']) expect([n, types.get(n)]).toEqual([n, GgmlType.Q8_0]);
    for (const n of ['output_norm.weight', 'rope_freqs.weight', 'blk.0.attn_q_norm.weight', 'blk.0.layer_output_scale.weight']) expect([n, types.get(n)]).toEqual([n, GgmlType.F32]);
  });

  it('refuses configs llama.cpp cannot load', () => {
    const bad = (x: Partial<Gemma4AssistantConfig>) => () => writeModel({ config: { ...c, ...x } as Gemma4AssistantConfig, fileType: 'F32', seed: 1, out: path.join(dir, 'bad.gguf') });
    expect(bad({ targetDim: 32 })).toThrow(/targetDim must differ from dim/);
    expect(bad({ swaPattern: [true] })).toThrow(/one entry per block/);
    expect(bad({ nKvHeadsFull: 3 })).toThrow(/not divisible by kv heads/);
  });
});
