// Parity with llama.cpp for the GPT-2-style decoders: gpt2 (learned absolute positions, LayerNorms
// with biases, one attn_qkv with its bias, every bias, a GELU FFN, tied head), starcoder (the same
// block, multi-query, untied head), codeshell (the GPT-2 block with NeoX RoPE instead of positions;
// -split: split q/k/v with biases and no token_embd, output.weight embedding the tokens) and qwen
// (Qwen v1: Llama's block with one attn_qkv and its bias, NeoX RoPE, feed_forward_length twice the
// FFN's width), on models the project writes itself. Same rules as parity-moe-families.native.spec.ts.
//
// F32 bounds: the GELU files match to 1e-11 to 1e-10 (measured 8e-12 to 9e-11), not 1e-13: GELU
// reads ggml's table of F16 inputs, where a last-bit difference before it (a LayerNorm's or a
// product's summation order) can flip an entry, as tiny-starcoder2's 3.8e-11 in
// parity-moe-families; tiny-qwen (SwiGLU, no table) matches to 4e-14.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';
import { quantSpread, quantSpreadRefs, type QuantSpreadRefs } from './quant-spread';

const F32_BOUNDS: [string, number][] = [
  ['tiny-gpt2', 1e-9],
  ['tiny-starcoder', 1e-9],
  ['tiny-codeshell', 1e-9],
  ['tiny-codeshell-split', 1e-9],
  ['tiny-qwen', 1e-12],
];
const QUANT_CASES: [string, FileTypeName][] = [
  ['tiny-gpt2', 'Q4_K_M'],
  ['tiny-starcoder', 'Q8_0'],
  ['tiny-codeshell', 'Q4_K_M'],
  ['tiny-qwen', 'Q4_K_M'],
];

let dir: string;
const table: string[] = [];
const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);

async function kailLogits(model: string, tokens: number[]): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: tokens.length + 8 });
  try {
    return await m.evaluate(0, tokens, 'all', 64);
  } finally {
    m.close();
  }
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-gpt2-'));
}, 60_000);
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nparity with llama.cpp (gpt2/starcoder/codeshell/qwen, measured):\n${table.join('\n')}\n`);
});

describe('F32 files', () => {
  let refs: LlamaLogits[];
  const tokens = new Map<string, number[]>();
  beforeAll(async () => {
    for (const [preset] of F32_BOUNDS) {
      const cfg = getPreset(preset).config;
      writeModel({ config: cfg, fileType: 'F32', seed: 7, out: file(preset, 'F32') });
      tokens.set(preset, tokenIds(64, cfg.vocabSize, 11));
    }
    refs = await llamaLogitsBatch(F32_BOUNDS.map(([p]) => ({ model: file(p, 'F32'), tokens: tokens.get(p)! })), { kv: 'f32', flashAttention: 'off', timeoutMs: 200_000 });
  }, 300_000);

  it.each(F32_BOUNDS)('%s F32 (bound %s)', async (preset, bound) => {
    const i = F32_BOUNDS.findIndex(([p]) => p === preset);
    const ours = await kailLogits(file(preset, 'F32'), tokens.get(preset)!);
    const e = nmse(ours, refs[i].logits);
    const { agree, total } = top1Agreement(ours, refs[i].logits, refs[i].nVocab);
    table.push(`${preset.padEnd(22)} F32     NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}  (bound ${bound})`);
    expect(e).toBeLessThanOrEqual(bound);
    expect(agree).toBe(total);
  });
});

describe('quantized files stay within llama.cpp’s own spread', () => {
  let refs: QuantSpreadRefs;
  beforeAll(async () => {
    refs = await quantSpreadRefs(QUANT_CASES, file, 200_000);
  }, 300_000);

  it.each(QUANT_CASES)('%s %s', async (p, t) => {
    const i = QUANT_CASES.findIndex(([a, b]) => a === p && b === t);
    const d = quantSpread(await kailLogits(file(p, t), refs.tokens[i]), refs, i);
    table.push(`${p.padEnd(22)} ${t.padEnd(7)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}`);
    expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
  });
});
