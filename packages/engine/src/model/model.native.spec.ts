import fs from 'node:fs';
import path from 'node:path';

import { generate } from '../generate';
import { patchedCopy, tempDir, writeTestModel } from '../testing';
import { EngineModel, type LoadModelOptions } from './model';

describe('EngineModel', () => {
  const dir = tempDir();
  let file: string;
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('loads a MoE model and evaluates batches the same as one token at a time', async () => {
    const m = EngineModel.load(file, { kvType: 'f32', threads: 2 });
    try {
      expect(m.hparams.arch).toBe('qwen3moe');
      expect(m.hparams.nExpert).toBeGreaterThan(1);
      const toks = [5, 17, 99, 3, 250, 7, 42, 8];
      const batched = await m.evaluate(0, toks, 'all');
      m.truncate(0, 0);
      const single: Float32Array[] = [];
      for (const t of toks) single.push(await m.evaluate(0, [t], 'last'));
      const nv = m.nVocab;
      let maxDiff = 0;
      single.forEach((row, p) => row.forEach((v, i) => (maxDiff = Math.max(maxDiff, Math.abs(v - batched[p * nv + i])))));
      expect(maxDiff).toBeLessThan(1e-3);
      expect(m.runtime.stats().expertCounts.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    } finally {
      m.close();
    }
  });

  it('computes the same logits from its copy of the weights (the default) and from the file\'s mapping (mmap)', async () => {
    const toks = [5, 17, 99, 3, 250, 7, 42, 8];
    const logits: Float32Array[] = [];
    // The third: a copy would not fit the memory available beside the KV cache, so the mapping is used.
    const cases: [LoadModelOptions, boolean][] = [[{ mmap: false }, false], [{ mmap: true }, true], [{ nCtx: 64, memoryAvailableBytes: 2 ** 20 }, true]];
    for (const [opts, mapped] of cases) {
      const m = EngineModel.load(file, { threads: 2, ...opts });
      try {
        expect(m.weightsMapped).toBe(mapped);
        logits.push(await m.evaluate(0, toks, 'all'));
      } finally {
        m.close();
      }
    }
    for (const l of logits.slice(1)) expect(Buffer.from(l.buffer).equals(Buffer.from(logits[0].buffer))).toBe(true);
  });

  it('greedy generation is deterministic and seeded sampling is reproducible', async () => {
    const m = EngineModel.load(file, { threads: 2 });
    try {
      const prompt = m.tokenizer.tokenize('The expert', { addSpecial: true });
      const g1 = await generate(m, prompt, { maxTokens: 12, sampling: { temperature: 0 } });
      const g2 = await generate(m, prompt, { maxTokens: 12, sampling: { temperature: 0 } });
      expect(g1.tokens).toEqual(g2.tokens);
      const s1 = await generate(m, prompt, { maxTokens: 12, sampling: { temperature: 1, seed: 7 } });
      const s2 = await generate(m, prompt, { maxTokens: 12, sampling: { temperature: 1, seed: 7 } });
      expect(s1.tokens).toEqual(s2.tokens);
    } finally {
      m.close();
    }
  });

  it('refuses a prompt longer than the context with a clear error', async () => {
    const m = EngineModel.load(file, { nCtx: 16 });
    try {
      await expect(m.evaluate(0, new Array(20).fill(3), 'last')).rejects.toMatchObject({ code: 'KAIL_E_CONTEXT_OVERFLOW' });
      await expect(generate(m, new Array(20).fill(3), { maxTokens: 4 })).rejects.toMatchObject({ code: 'KAIL_E_CONTEXT_OVERFLOW' });
      // The model still serves after the error.
      expect((await m.evaluate(0, [1, 2], 'last')).length).toBe(m.nVocab);
    } finally {
      m.close();
    }
  });

  it('refuses to load when the KV cache cannot fit, naming the numbers', () => {
    expect(() => EngineModel.load(file, { nCtx: 4096, memoryAvailableBytes: 1024 })).toThrow(/not enough memory: the KV cache .* needs .* GiB .* 0\.00 GiB is available/);
  });

  it('names an unknown architecture and lists the supported ones', () => {
    const bad = patchedCopy(file, path.join(dir, 'unknown-arch.gguf'), 'qwen3moe', 'qwen9moe');
    expect(() => EngineModel.load(bad)).toThrow(/architecture 'qwen9moe' is not supported; supported: .*llama.*qwen3moe/);
  });

  it('names a tensor the architecture needs but the file lacks', () => {
    const bad = patchedCopy(file, path.join(dir, 'missing-tensor.gguf'), 'output_norm.weight', 'output_morm.weight');
    expect(() => EngineModel.load(bad)).toThrow(/lacks tensor 'output_norm.weight'/);
  });

  it('rejects a truncated file without crashing', () => {
    const bad = path.join(dir, 'truncated.gguf');
    fs.writeFileSync(bad, fs.readFileSync(file).subarray(0, 5000));
    expect(() => EngineModel.load(bad)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL' }));
  });
});
