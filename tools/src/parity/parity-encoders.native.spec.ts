// Encoder-only embedding models (llama.cpp's bert, nomic-bert and nomic-bert-moe graphs:
// non-causal attention, layer norms, GELU or SwiGLU, gate-less GELU experts, learned or rotary
// positions, mean or CLS pooling) against
// llama.cpp's embedding context (node-llama-cpp, flash attention off; it keeps no KV cache for
// these), files from the project's writer in several types. kail's embedding is what the engine
// service returns for /v1/embeddings before normalization: LocalModelHost, EMBED_MODEL (the file's
// pooling type), the prompt tokenized with the vocabulary's [CLS] ... [SEP].
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { writeModel } from '../models/build';
import type { FileTypeName } from '../models/quant-plan';
import { getPreset } from '../models/presets';
import { embeddingParity } from './encoder-parity.suite';

/** NMSE bounds per file type: the measured values are 10-1000x below (a last-bit difference that flips one of GELU's F16 table entries or an 8-bit activation rounding moves a text by up to ~1e-9 in F32 and ~5e-6 in Q4_K). */
const BOUND: Partial<Record<FileTypeName, number>> = { F32: 1e-8, F16: 1e-6, Q8_0: 1e-5, Q4_K: 1e-4 };
const TYPES: Record<string, FileTypeName[]> = {
  'tiny-bert': ['F32', 'F16', 'Q8_0', 'Q4_K'],
  'tiny-nomic-bert': ['F32', 'F16', 'Q8_0', 'Q4_K'],
  'tiny-nomic-bert-moe': ['F32', 'Q8_0'],
  'tiny-bert-cls': ['F32'],
  'tiny-bert-causal': ['F32'],
};
const CASES = Object.entries(TYPES).flatMap(([preset, types]) => types.map((t) => [preset, t, BOUND[t]!] as [string, FileTypeName, number]));

describe("encoder embeddings against llama.cpp's embedding context", () => {
  let dir: string;
  const lines: string[] = [];
  afterAll(() => {
    if (lines.length) console.log(lines.join('\n'));
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it.each(CASES)('%s %s: each text embeds as llama.cpp embeds its tokens (NMSE ≤ %s)', async (preset, type, bound) => {
    dir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-enc-'));
    const file = path.join(dir, `${preset}-${type}.gguf`);
    // tiny-bert-cls: tiny-bert with CLS pooling (pooling_type 2, as bge files); tiny-bert-causal:
    // with attention.causal true, which llama.cpp ignores for a model without a KV cache (its
    // encode() always attends both ways), and so does kail.
    const variants: Record<string, object> = { 'tiny-bert-cls': { pooling: 2 }, 'tiny-bert-causal': { causal: true } };
    const config = variants[preset] ? { ...getPreset('tiny-bert').config, name: preset, ...variants[preset] } : getPreset(preset).config;
    writeModel({ config, fileType: type, seed: 5, out: file });
    const { prompts, errs } = await embeddingParity(file);
    // [CLS] first and [SEP] last, as llama.cpp's WordPiece tokenizer adds them.
    for (const p of prompts) expect([p[0], p[p.length - 1]]).toEqual([2, 3]);
    lines.push(`${preset.padEnd(16)} ${type.padEnd(5)} NMSE ${errs.map((e) => e.toExponential(2)).join(' ')} (bound ${bound})`);
    for (const e of errs) expect(e).toBeLessThan(bound);
  }, 180_000);
});
