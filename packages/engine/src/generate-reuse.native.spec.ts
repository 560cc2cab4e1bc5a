// A chat's next turn through generate's `cachedTokens` (kail run --conversation): the start the
// sequence's cache shares with the new prompt is kept, only the rest computed, and the tokens are
// those of the whole prompt computed from an empty cache. Caches that cannot be cut back
// (recurrent layers) or that do not hold what the caller says are cleared and computed whole.
import fs from 'node:fs';

import { generate } from './generate';
import { EngineModel } from './model/model';
import { tempDir, writeTestModel } from './testing';

describe('generate: keeping the start a sequence shares with the next prompt', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each([
    ['tiny-qwen3moe', true],
    ['tiny-deepseek2-lite', true],
    ['tiny-gpt-oss', null],
    ['tiny-qwen35moe', false],
  ] as const)('%s: the next turn computes only what is new, with the tokens of the whole prompt', async (preset, cuts) => {
    const file = writeTestModel(dir, preset, 'F32');
    const m = EngineModel.load(file, { threads: 2, nCtx: 96, nBatch: 16 });
    const fresh = EngineModel.load(file, { threads: 2, nCtx: 96, nBatch: 16 });
    try {
      const opts = { maxTokens: 6, sampling: { temperature: 0 } };
      const first = Array.from({ length: 20 }, (_, i) => (i * 37 + 5) % 500);
      const r1 = await generate(m, first, opts);
      // (The last generated token is never fed back, nor an end-of-generation token.)
      expect(r1.cacheTokens).toEqual([...first, ...r1.tokens].slice(0, m.seqLen(0)));
      expect(r1.cacheTokens.length).toBeGreaterThanOrEqual(first.length);

      const next = [...r1.cacheTokens, 11, 12, 13, 14, 15];
      const r2 = await generate(m, next, { ...opts, cachedTokens: r1.cacheTokens });
      const whole = await generate(fresh, next, opts);
      expect(r2.tokens).toEqual(whole.tokens);
      expect(whole.promptCached).toBe(0);
      // (A recurrent state goes on where the new prompt extends what it holds.)
      if (cuts !== null) expect(r2.promptCached).toBe(r1.cacheTokens.length);

      // A prompt that leaves the cache's tokens at position 10 (an edited earlier turn).
      const edited = [...next.slice(0, 10), 499, ...next.slice(11)];
      const r3 = await generate(m, edited, { ...opts, cachedTokens: r2.cacheTokens });
      expect(r3.tokens).toEqual((await generate(fresh, edited, opts)).tokens);
      if (cuts === true) expect(r3.promptCached).toBe(10);
      // A recurrent state cannot be cut back: computed whole.
      if (cuts === false) expect(r3.promptCached).toBe(0);

      // Tokens the cache does not hold (another length) are not trusted: the cache is cleared.
      const r4 = await generate(m, next, { ...opts, cachedTokens: r3.cacheTokens.slice(0, 5) });
      expect(r4.promptCached).toBe(0);
      expect(r4.tokens).toEqual(r2.tokens);
      // The same prompt again keeps all of it but its last token, whose logits choose the first.
      const r5 = await generate(m, next, { ...opts, cachedTokens: r4.cacheTokens });
      expect(r5.tokens).toEqual(r2.tokens);
      if (cuts === true) expect(r5.promptCached).toBe(next.length - 1);
      if (cuts === false) expect(r5.promptCached).toBe(0);
    } finally {
      m.close();
      fresh.close();
    }
  }, 120_000);

  it('refuses cached tokens together with a prompt cache file', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), { threads: 2, nCtx: 64 });
    try {
      await expect(generate(m, [1, 2, 3], { maxTokens: 2, cachedTokens: [], promptCache: { file: `${dir}/pc.bin` } })).rejects.toThrow(/prompt cache file and the tokens a sequence holds/);
    } finally {
      m.close();
    }
  });
});
