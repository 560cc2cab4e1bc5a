// A Q8_0 KV cache (LoadModelOptions.kvType 'q8_0'): 34 bytes per 32 values instead of 64, results
// close to an F16 cache's and the same bits in any batch, for attention and MLA's latent cache;
// refused, naming why, where it cannot be.
// Parity with llama.cpp's own Q8_0 cache: tools/src/parity/parity-kv-q8.native.spec.ts.
import fs from 'node:fs';

import { tempDir, writeTestModel } from '../testing';
import { EngineModel, kvCacheReport, openGgufMetadata, planModel } from './model';

describe('a Q8_0 KV cache', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const tokens = Array.from({ length: 80 }, (_, i) => (i * 37 + 11) % 1000);

  /** Loads `file` with an F16 and a Q8_0 cache: sizes 34/64, logits close, Q8_0 batch-invariant. */
  async function againstF16(file: string): Promise<void> {
    const f16 = EngineModel.load(file, { threads: 2, nCtx: 128, kvType: 'f16' });
    const q8 = EngineModel.load(file, { threads: 2, nCtx: 128, kvType: 'q8_0' });
    try {
      expect(q8.runtime.kvCapacityBytes / f16.runtime.kvCapacityBytes).toBeCloseTo(34 / 64, 6);
      expect(q8.runtime.kvBytesPerToken / f16.runtime.kvBytesPerToken).toBeCloseTo(34 / 64, 6);
      const a = await f16.evaluate(0, tokens, 'all', 16);
      const b = await q8.evaluate(0, tokens, 'all', 16);
      let num = 0;
      let den = 0;
      for (let i = 0; i < a.length; i++) {
        num += (a[i] - b[i]) ** 2;
        den += a[i] ** 2;
      }
      expect(num / den).toBeGreaterThan(1e-9);
      expect(num / den).toBeLessThan(1e-3);
      // One token at a time, or 16 per pass: the same bits.
      q8.truncate(0, 0);
      const one = await q8.evaluate(0, tokens, 'all', 1);
      expect(Buffer.from(one.buffer).equals(Buffer.from(b.buffer))).toBe(true);
    } finally {
      f16.close();
      q8.close();
    }
  }

  it('holds 34 bytes per 32 values, answers as an F16 cache nearly does, and is batch-invariant; plan and inspect count it', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    await againstF16(file);
    const meta = openGgufMetadata(file);
    try {
      expect(kvCacheReport(meta, 'q8_0').bytesPerToken / kvCacheReport(meta, 'f16').bytesPerToken).toBeCloseTo(34 / 64, 6);
    } finally {
      meta.close();
    }
    const p16 = planModel(file, { ramBytes: 2 ** 34, nCtx: 4096, kvType: 'f16' });
    const p8 = planModel(file, { ramBytes: 2 ** 34, nCtx: 4096, kvType: 'q8_0' });
    expect(p8.kvBytes / p16.kvBytes).toBeCloseTo(34 / 64, 6);
  }, 60_000);

  it("holds MLA's latent rows too (DeepSeek)", async () => {
    await againstF16(writeTestModel(dir, 'tiny-deepseek2-lite', 'F32'));
  }, 60_000);

  it('is refused for head dims that are not multiples of 32, and for an unknown type', () => {
    const odd = writeTestModel(dir, 'tiny-qwen3moe', 'F32', 1, ['--head-dim', '48']);
    expect(() => EngineModel.load(odd, { kvType: 'q8_0', nCtx: 64 })).toThrow(/head dims that are multiples of 32, this model's are 48\/48/);
    expect(() => EngineModel.load(odd, { kvType: 'q4_0' as never, nCtx: 64 })).toThrow(/KV cache type must be f16, f32, q8_0, got 'q4_0'/);
    // F16 still loads it.
    EngineModel.load(odd, { nCtx: 64 }).close();
  }, 60_000);
});
