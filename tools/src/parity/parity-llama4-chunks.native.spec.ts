// Llama 4 past its attention chunk: llama.cpp's llama4 graph attends within chunks of 8192
// positions on three of every four blocks and scales the NoPE blocks' queries by a temperature
// that first changes at position 8191. 8,256 tokens through a small llama4 file, compared with
// llama.cpp on the positions around the boundary (F32 file and cache: the exact reference).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import type { Llama4Config } from '../models/architectures/llama-moe';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogits } from './llama-ref';
import { nmse, top1Agreement } from './metrics';

const N = 8192 + 64;
const FROM = 8192 - 64;

it('llama4 logits match llama.cpp across the 8192-position chunk boundary', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-llama4-chunks-'));
  try {
    const base = getPreset('tiny-llama4').config as Llama4Config;
    const config: Llama4Config = { ...base, name: 'llama4-chunks', dim: 128, nHeads: 2, nKvHeads: 1, headDim: 64, ff: 128, expertFf: 64, ctx: 16384 };
    const file = path.join(dir, 'llama4-chunks-F32.gguf');
    writeModel({ config, fileType: 'F32', seed: 3, out: file });
    let s = 12345;
    const tokens = Array.from({ length: N }, () => {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      return (s >>> 8) % config.vocabSize;
    });
    const ref = await llamaLogits(file, tokens, { kv: 'f32', flashAttention: 'off', ctx: N + 64, batch: 2048, timeoutMs: 300_000 });
    const m = EngineModel.load(file, { kvType: 'f32', threads: 2, nCtx: N + 64 });
    let ours: Float32Array;
    try {
      ours = await m.evaluate(0, tokens, 'all', 2048);
    } finally {
      m.close();
    }
    const V = config.vocabSize;
    const tail = (l: Float32Array) => l.subarray(FROM * V, N * V);
    const before = nmse(ours.subarray(FROM * V, 8192 * V), ref.logits.subarray(FROM * V, 8192 * V));
    const after = nmse(ours.subarray(8192 * V, N * V), ref.logits.subarray(8192 * V, N * V));
    const { agree, total } = top1Agreement(tail(ours), tail(ref.logits), V);
    process.stdout.write(`\nllama4 across the chunk boundary (measured): NMSE positions ${FROM}-8191 ${before.toExponential(2)}, 8192-${N - 1} ${after.toExponential(2)}, top-1 ${agree}/${total}\n`);
    expect(before).toBeLessThanOrEqual(1e-6);
    expect(after).toBeLessThanOrEqual(1e-6);
    expect(agree).toBe(total);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 600_000);
