// benchmarkParallel (kail bench --parallel): N sequences decoded together, one token each per pass.
import fs from 'node:fs';

import { benchmark, benchmarkParallel } from './bench';
import { EngineModel } from './model/model';
import { tempDir, writeTestModel } from './testing';

describe('benchmarkParallel', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('decodes N sequences per pass, counts the experts a pass shares, and sequence 0 decodes as it does alone', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0', 1, ['--experts', '16', '--experts-used', '4']);
    const m = EngineModel.load(file, { threads: 2, nCtx: 32, nSeqMax: 6 });
    try {
      const r = await benchmarkParallel(m, { parallel: [1, 3, 6], promptTokens: 8, genTokens: 12 });
      expect(r.rows.map((x) => x.sequences)).toEqual([1, 3, 6]);
      const [one, three, six] = r.rows;
      // One sequence runs exactly its k experts per layer; more sequences share some, not all.
      expect(one.experts_per_layer).toBe(4);
      expect(three.experts_per_layer).toBeGreaterThan(4);
      expect(three.experts_per_layer).toBeLessThanOrEqual(12);
      expect(six.experts_per_layer).toBeGreaterThanOrEqual(three.experts_per_layer);
      expect(six.experts_per_layer).toBeLessThanOrEqual(16);
      // Sharing lowers the weight bytes per generated token.
      expect(six.weight_bytes_per_token).toBeLessThan(one.weight_bytes_per_token);
      expect(one.speedup).toBe(1);
      for (const row of r.rows) {
        expect(row.gen_tps).toBeGreaterThan(0);
        expect(row.seq0_tokens).toHaveLength(12);
        expect(row.stream_bytes_read_per_token).toBeNull();
        // Greedy feed: sequence 0 has the same prompt in every row and decodes the same tokens.
        expect(row.seq0_tokens).toEqual(one.seq0_tokens);
      }
    } finally {
      m.close();
    }
  }, 120_000);

  it('refuses more sequences than the model holds and prompts past its context', async () => {
    const file = writeTestModel(dir, 'tiny-llama', 'F32', 1);
    const m = EngineModel.load(file, { threads: 1, nCtx: 16, nSeqMax: 2 });
    try {
      await expect(benchmarkParallel(m, { parallel: [1, 4] })).rejects.toThrow(/4 sequences, but the model was loaded for 2/);
      await expect(benchmarkParallel(m, { parallel: [0] })).rejects.toThrow(/integers >= 1/);
      await expect(benchmarkParallel(m, { parallel: [2], promptTokens: 8, genTokens: 9 })).rejects.toThrow(/do not fit the context of 16/);
      const r = await benchmarkParallel(m, { parallel: [2], promptTokens: 4, genTokens: 3, feed: 'random' });
      // A dense model: no experts, and no one-sequence row to compare with.
      expect(r.rows[0].experts_per_layer).toBe(0);
      expect(r.rows[0].speedup).toBeNull();
    } finally {
      m.close();
    }
  }, 60_000);
});

describe('benchmark at a depth (llama-bench -d)', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('fills the cache with the depth first, then times pp and tg on top; refuses a depth past the context', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    const m = EngineModel.load(file, { threads: 2, nCtx: 64 });
    try {
      const r = await benchmark(m, { promptTokens: 8, genTokens: 4, depth: 40, reps: 2 });
      expect(r).toMatchObject({ depth: 40, prompt_tokens: 8, gen_tokens: 4, reps: 2 });
      expect(r.prompt_tps).toBeGreaterThan(0);
      expect(r.gen_tps).toBeGreaterThan(0);
      // The last rep's cache: the depth, the prompt and the tokens generated after it.
      expect(m.seqLen(0)).toBe(40 + 8 + 4);
      await expect(benchmark(m, { promptTokens: 8, genTokens: 4, depth: 60 })).rejects.toThrow(/depth 60 \+ 8 prompt \+ 4 generated tokens do not fit the model's context of 64/);
      await expect(benchmark(m, { promptTokens: 8, genTokens: 4, depth: -1 })).rejects.toThrow(/depth must be a non-negative integer/);
      // Two reps: a spread of their rates (llama-bench's stddev_ts).
      expect(r.prompt_tps_stddev).toBeGreaterThanOrEqual(0);
      expect(r.gen_tps_stddev).toBeGreaterThan(0);
      // No prompt (llama-bench's tg test): one untimed token, then the generation.
      const g = await benchmark(m, { promptTokens: 0, genTokens: 4, depth: 10 });
      expect(g).toMatchObject({ prompt_tokens: 0, prompt_tps: 0, prompt_ms: 0, prompt_tps_stddev: 0 });
      expect(g.gen_tps).toBeGreaterThan(0);
      expect(m.seqLen(0)).toBe(10 + 1 + 4);
      await expect(benchmark(m, { promptTokens: 0, genTokens: 0 })).rejects.toThrow(/not both 0/);
    } finally {
      m.close();
    }
  }, 120_000);
});
