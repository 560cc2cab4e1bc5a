// A sequence's KV cache as bytes (EngineModel.saveSequence / restoreSequence, behind slot save and
// the prompt cache): a restored blob continues the sequence with the same bits as the original,
// and a damaged one (cut, bytes changed anywhere) is refused with an error or taken whole, never a
// crash, leaving the model serving.
import fs from 'node:fs';

import { EngineModel } from './model';
import { tempDir, writeTestModel } from '../testing';

describe('sequence state blobs', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each(['tiny-qwen3moe', 'tiny-deepseek2-lite', 'tiny-gpt-oss', 'tiny-qwen35moe', 'tiny-gemma4-e'])('%s: save, restore elsewhere, continue with the same logits; damaged blobs never crash', async (preset) => {
    const file = writeTestModel(dir, preset, 'F32');
    const m = EngineModel.load(file, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 64, nBatch: 8 });
    try {
      const toks = Array.from({ length: 30 }, (_, i) => (i * 37 + 5) % 1000);
      await m.evaluate(0, toks, 'last', 8);
      const blob = m.saveSequence(0);
      m.restoreSequence(1, blob);
      expect(m.seqLen(1)).toBe(30);
      const a = await m.evaluate(0, [7, 8], 'all');
      const b = await m.evaluate(1, [7, 8], 'all');
      expect(b).toEqual(a);
      // Damage: cuts, then single bytes changed at random places (header and data alike).
      let s = 12345;
      const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32);
      let refused = 0;
      for (let k = 0; k < 120; k++) {
        const bad = Uint8Array.from(blob);
        if (k < 20) {
          const cut = bad.subarray(0, Math.floor(rnd() * bad.length));
          expect(() => m.restoreSequence(1, cut)).toThrow(/sequence state/);
          refused++;
          continue;
        }
        const at = k < 70 ? Math.floor(rnd() * Math.min(bad.length, 200)) : Math.floor(rnd() * bad.length);
        bad[at] ^= 1 + Math.floor(rnd() * 255);
        try {
          m.restoreSequence(1, bad);
        } catch (e) {
          expect((e as Error).message).toMatch(/sequence state|KV cache budget/);
          refused++;
        }
      }
      expect(refused).toBeGreaterThan(20);
      // Still serving.
      m.truncate(1, 0);
      expect((await m.evaluate(1, [1, 2, 3], 'last')).length).toBe(m.nVocab);
    } finally {
      m.close();
    }
  }, 60_000);
});
