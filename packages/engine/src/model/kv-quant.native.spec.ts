// Quantized KV caches (LoadModelOptions.kvType 'q8_0': 34 bytes per 32 values instead of 64; 'q4_0'
// 18, and q4_1, iq4_nl, q5_0, q5_1, bf16): results close to an F16 cache's and the same bits in any
// batch, for attention and MLA's latent cache; refused, naming why, where it cannot be.
// Parity with llama.cpp's own caches of each type: tools/src/parity/parity-kv-quant.native.spec.ts.
import fs from 'node:fs';

import { tempDir, writeTestModel } from '../testing';
import { EngineModel, kvBytesPerValue, kvCacheReport, openGgufMetadata, planModel, type KvType } from './model';

describe('a Q8_0 KV cache', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const tokens = Array.from({ length: 80 }, (_, i) => (i * 37 + 11) % 1000);

  /** Loads `file` with an F16 and a `type` cache: sizes in proportion, logits close, batch-invariant. */
  async function againstF16(file: string, type: KvType = 'q8_0', most = 1e-3, typeV: KvType = type): Promise<void> {
    const f16 = EngineModel.load(file, { threads: 2, nCtx: 128, kvType: 'f16' });
    const q8 = EngineModel.load(file, { threads: 2, nCtx: 128, kvType: type, kvTypeV: typeV });
    // K and V rows of one width (the models here): the mean of the two types' sizes.
    const ratio = (kvBytesPerValue(type) + kvBytesPerValue(typeV)) / 4;
    try {
      expect(q8.runtime.kvCapacityBytes / f16.runtime.kvCapacityBytes).toBeCloseTo(ratio, 6);
      expect(q8.runtime.kvBytesPerToken / f16.runtime.kvBytesPerToken).toBeCloseTo(ratio, 6);
      const a = await f16.evaluate(0, tokens, 'all', 16);
      const b = await q8.evaluate(0, tokens, 'all', 16);
      let num = 0;
      let den = 0;
      for (let i = 0; i < a.length; i++) {
        num += (a[i] - b[i]) ** 2;
        den += a[i] ** 2;
      }
      expect(num / den).toBeGreaterThan(1e-9);
      expect(num / den).toBeLessThan(most);
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

  it.each([
    ['q4_0', 1e-2],
    ['q4_1', 1e-2],
    ['iq4_nl', 1e-2],
    ['q5_0', 3e-3],
    ['q5_1', 3e-3],
    ['bf16', 1e-4],
  ] as const)('a %s cache: its bytes per value, close to F16, batch-invariant (a MoE, and MLA)', async (type, most) => {
    await againstF16(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), type, most);
    await againstF16(writeTestModel(dir, 'tiny-deepseek2-lite', 'F32'), type, most);
    const p = planModel(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), { ramBytes: 2 ** 34, nCtx: 4096, kvType: type });
    const p16 = planModel(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), { ramBytes: 2 ** 34, nCtx: 4096, kvType: 'f16' });
    expect(p.kvBytes / p16.kvBytes).toBeCloseTo(kvBytesPerValue(type) / 2, 6);
  }, 60_000);

  it('past 256 cached rows (the values are summed 256 rows at a time): still batch-invariant and close to F16', async () => {
    const file = writeTestModel(dir, 'tiny-llama', 'F32');
    const long = Array.from({ length: 300 }, (_, i) => (i * 53 + 7) % 1000);
    const f16 = EngineModel.load(file, { threads: 2, nCtx: 320, kvType: 'f16' });
    const q4 = EngineModel.load(file, { threads: 2, nCtx: 320, kvType: 'q4_0' });
    try {
      const a = await f16.evaluate(0, long, 'all', 64);
      const b = await q4.evaluate(0, long, 'all', 64);
      q4.truncate(0, 0);
      const c = await q4.evaluate(0, long, 'all', 7);
      expect(Buffer.from(c.buffer).equals(Buffer.from(b.buffer))).toBe(true);
      const n = f16.nVocab;
      const last = (x: Float32Array) => x.subarray(299 * n, 300 * n);
      let num = 0;
      let den = 0;
      last(a).forEach((v, i) => {
        num += (v - last(b)[i]) ** 2;
        den += v * v;
      });
      // Measured 7.5e-5; summing the second 256 rows with the first rows' probabilities gave 1.4e-3.
      expect(num / den).toBeGreaterThan(1e-9);
      expect(num / den).toBeLessThan(5e-4);
    } finally {
      f16.close();
      q4.close();
    }
  }, 60_000);

  it("K's and V's types apart (-ctk q8_0 -ctv q4_0, and a quantized V under an F16 K): each row in its type, in the runtime, the plan and inspect", async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    await againstF16(file, 'q8_0', 1e-2, 'q4_0');
    await againstF16(file, 'f16', 1e-2, 'q5_1');
    const meta = openGgufMetadata(file);
    try {
      const r = kvCacheReport(meta, 'q8_0', 'q4_0');
      expect([r.kvType, r.kvTypeV]).toEqual(['q8_0', 'q4_0']);
      expect(r.bytesPerToken / kvCacheReport(meta, 'f16').bytesPerToken).toBeCloseTo((34 + 18) / 128, 6);
    } finally {
      meta.close();
    }
    const p16 = planModel(file, { ramBytes: 2 ** 34, nCtx: 4096, kvType: 'f16' });
    const split = planModel(file, { ramBytes: 2 ** 34, nCtx: 4096, kvType: 'q8_0', kvTypeV: 'q4_0' });
    expect(split.kvBytes / p16.kvBytes).toBeCloseTo((34 + 18) / 128, 6);
  }, 60_000);

  it('is refused for head dims that are not multiples of 32, and for an unknown type', () => {
    const odd = writeTestModel(dir, 'tiny-qwen3moe', 'F32', 1, ['--head-dim', '48']);
    expect(() => EngineModel.load(odd, { kvType: 'q8_0', nCtx: 64 })).toThrow(/a Q8_0 K cache needs a key head dim that is a multiple of 32, this model's is 48/);
    expect(() => EngineModel.load(odd, { kvType: 'q4_0', nCtx: 64 })).toThrow(/a Q4_0 K cache needs a key head dim that is a multiple of 32/);
    expect(() => EngineModel.load(odd, { kvType: 'f16', kvTypeV: 'q5_0', nCtx: 64 })).toThrow(/a Q5_0 V cache needs a value head dim that is a multiple of 32, this model's is 48/);
    expect(() => EngineModel.load(odd, { kvType: 'q2_k' as never, nCtx: 64 })).toThrow(/KV cache type must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q2_k'/);
    // BF16 and F16 still load it.
    EngineModel.load(odd, { nCtx: 64, kvType: 'bf16' }).close();
    // F16 still loads it.
    EngineModel.load(odd, { nCtx: 64 }).close();
  }, 60_000);
});
