// llama.cpp (node-llama-cpp's CPU build, in a child process) loads every tiny preset we write,
// tokenizes with the vocabulary we generated, and returns sane logits: proof that the files are
// what llama.cpp expects.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaGenerateGreedy, llamaLogitsBatch } from './llama-ref';
import type { LlamaLogits } from './llama-ref';

const PRESETS = ['tiny-llama', 'tiny-mixtral', 'tiny-qwen2moe', 'tiny-qwen3moe'];
const TEXT = 'The experts route every token.\nWhat is the capital of France? 42 ünï 🙂';

let dir: string;
const files: Record<string, string> = {};
let results: LlamaLogits[];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-llama-ref-'));
  for (const p of PRESETS) {
    files[p] = path.join(dir, `${p}.gguf`);
    writeModel({ config: getPreset(p).config, fileType: 'F32', seed: 5, out: files[p] });
  }
  results = await llamaLogitsBatch(
    PRESETS.map((p) => ({ model: files[p], text: TEXT, generate: p === 'tiny-qwen3moe' ? 4 : undefined })),
    { kv: 'f32', flashAttention: 'off', threads: 2, timeoutMs: 90_000 },
  );
}, 120_000);

afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('llama.cpp reference on generated models', () => {
  it.each(PRESETS.map((p, i) => [p, i] as const))('%s: loads, tokenizes and gives finite, position-dependent logits', (preset, i) => {
    const { config } = getPreset(preset);
    const r = results[i];
    const tokens = r.meta.tokens as number[];
    expect(r.nVocab).toBe(config.vocabSize);
    expect(r.nTokens).toBe(tokens.length);
    expect(r.nTokens).toBeGreaterThan(10);
    expect(r.logits.length).toBe(r.nTokens * r.nVocab);
    // The generated vocabulary is a working tokenizer: text survives the round trip.
    const detok = r.meta.detokenized as string;
    expect(config.vocabKind === 'spm' ? detok.replace(/^ /, '') : detok).toBe(TEXT);
    if (config.vocabKind !== 'qwen2') expect(tokens[0]).toBe(config.vocabKind === 'spm' ? 1 : config.vocabSize - 11);

    let nonFinite = 0;
    for (const x of r.logits) if (!Number.isFinite(x)) nonFinite++;
    expect(nonFinite).toBe(0);
    const rows = Array.from({ length: r.nTokens }, (_, t) => r.logits.subarray(t * r.nVocab, (t + 1) * r.nVocab));
    const argmaxes = new Set<number>();
    for (const [t, row] of rows.entries()) {
      let mean = 0;
      let max = -Infinity;
      let arg = -1;
      for (let v = 0; v < row.length; v++) {
        mean += row[v];
        if (row[v] > max) { max = row[v]; arg = v; }
      }
      mean /= row.length;
      let varSum = 0;
      let z = 0;
      for (const x of row) { varSum += (x - mean) ** 2; z += Math.exp(x - max); }
      const std = Math.sqrt(varSum / row.length);
      // Not degenerate: spread-out logits, and no position puts (almost) all mass on one token.
      expect([t, std > 0.5 && std < 10]).toEqual([t, true]);
      expect([t, 1 / z < 0.95]).toEqual([t, true]);
      argmaxes.add(arg);
      if (t > 0) {
        let diff = 0;
        for (let v = 0; v < row.length; v++) diff = Math.max(diff, Math.abs(row[v] - rows[t - 1][v]));
        expect([t, diff > 0.1]).toEqual([t, true]);
      }
    }
    expect(argmaxes.size).toBeGreaterThan(3);
  });

  it('greedy generation starts from the argmax of the last position', () => {
    const r = results[3];
    const generated = r.meta.generated as number[];
    expect(generated).toHaveLength(4);
    const last = Array.from(r.logits.subarray((r.nTokens - 1) * r.nVocab));
    expect(generated[0]).toBe(last.indexOf(Math.max(...last)));
  });

  it('the single-command path (generate) agrees with the batch path', async () => {
    const r = results[3];
    const g = await llamaGenerateGreedy(files['tiny-qwen3moe'], r.meta.tokens as number[], { maxTokens: 2, kv: 'f32', flashAttention: 'off' });
    expect(g.tokens).toEqual((r.meta.generated as number[]).slice(0, 2));
  }, 60_000);
});
