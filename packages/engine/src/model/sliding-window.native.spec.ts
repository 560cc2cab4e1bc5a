// Sliding-window layers (gpt-oss: every other layer sees its last 8 positions in tiny-gpt-oss)
// keep a ring of window + nBatch - 1 positions instead of the whole context: the logits are the
// same bits as with every position kept, the KV cache is smaller, and taking positions back is
// exact while the ring still holds the window before them (else the cache is cleared and says so).
import fs from 'node:fs';

import { tempDir, writeTestModel } from '../testing';
import { native } from '../native';
import { EngineModel } from './model';

const dir = tempDir('kail-swa-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function same(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

describe('sliding-window KV rings', () => {
  let file: string;
  const toks = Array.from({ length: 60 }, (_, i) => ((i * 53 + 11) % 1000) + 3);
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-gpt-oss', 'Q8_0');
  }, 60_000);

  it('give the logits of a full cache in less memory, in any batching', async () => {
    // nBatch 4: rings of 8 + 3 = 11 positions (22 rows) against 256; nBatch 512: no ring (2R > nCtx).
    const ring = EngineModel.load(file, { threads: 2, nCtx: 256, nBatch: 4 });
    const full = EngineModel.load(file, { threads: 2, nCtx: 256, nBatch: 512 });
    try {
      const want = await full.evaluate(0, toks, 'all');
      const got = await ring.evaluate(0, toks, 'all');
      expect(same(got, want)).toBe(true);
      // One token at a time (decode) through the ring: the same bits.
      ring.truncate(0, 0);
      const V = ring.nVocab;
      for (let i = 0; i < toks.length; i++) {
        const one = await ring.evaluate(0, [toks[i]], 'last');
        if (!same(one, want.subarray(i * V, (i + 1) * V))) throw new Error(`position ${i} differs`);
      }
      // Capacity: 3 layers, 2 of them (0 and 2) sliding; K and V of 2 kv heads x 64, f16.
      const row = 2 * 2 * 64 * 2;
      expect(ring.runtime.kvCapacityBytes).toBe(row * (22 + 256 + 22));
      expect(full.runtime.kvCapacityBytes).toBe(row * 256 * 3);
      expect(native().kvCacheBytes(ring.program, { nCtx: 256, nBatch: 4, kvType: 1 })).toBe(ring.runtime.kvCapacityBytes);
      expect(ring.runtime.stats().kvBytes).toBeLessThanOrEqual(ring.runtime.kvCapacityBytes);
      expect(ring.runtime.stats().kvBytes).toBeLessThan(full.runtime.stats().kvBytes);
    } finally {
      ring.close();
      full.close();
    }
  }, 60_000);

  it('takes back fewer than nBatch positions exactly, and clears when the window is gone', async () => {
    const m = EngineModel.load(file, { threads: 2, nCtx: 256, nBatch: 4 });
    try {
      const V = m.nVocab;
      const all = await m.evaluate(0, toks, 'all');
      // 60 written, ring of 11: back to 57 keeps [49, 57) for the window.
      expect(m.truncate(0, 57)).toBe(57);
      const again = await m.evaluate(0, toks.slice(57), 'all');
      expect(same(again, all.subarray(57 * V))).toBe(true);
      m.rollback(0, 58);
      expect(m.seqLen(0)).toBe(58);
      // Back to 40: positions 32..39 were overwritten by 43..50; the cache is cleared.
      expect(m.truncate(0, 40)).toBe(0);
      expect(m.seqLen(0)).toBe(0);
      const fresh = await m.evaluate(0, toks, 'all');
      expect(same(fresh, all)).toBe(true);
      // A pass with more than nBatch positions of one sequence is refused, and the model serves on.
      m.truncate(0, 0);
      const five = { tokens: Int32Array.from(toks.slice(0, 5)), pos: Int32Array.from([0, 1, 2, 3, 4]), seq: new Int32Array(5), output: new Uint8Array(5).fill(1) };
      await expect(m.forwardBatch(five)).rejects.toThrow(/more than n_batch \(4\) apart/);
      m.truncate(0, 0);
      expect(same(await m.evaluate(0, toks.slice(0, 5), 'all'), all.subarray(0, 5 * V))).toBe(true);
    } finally {
      m.close();
    }
  }, 60_000);
});

// Gemma 4's shared KV blocks (tiny-gemma4-e: blocks 4 and 5 attend over the caches of blocks 2,
// sliding, and 3, full) store nothing: they read the rings and rows their source blocks wrote in
// the same pass, so every cache operation on the source layers is theirs too.
describe('shared KV layers (tiny-gemma4-e)', () => {
  let file: string;
  const toks = Array.from({ length: 60 }, (_, i) => ((i * 53 + 11) % 1000) + 3);
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-gemma4-e', 'Q8_0');
  }, 60_000);

  it('read rings and full caches in any batching, take positions back and copy sequences exactly', async () => {
    const ring = EngineModel.load(file, { threads: 2, nCtx: 256, nBatch: 4, nSeqMax: 2 });
    const full = EngineModel.load(file, { threads: 2, nCtx: 256, nBatch: 512 });
    try {
      // 6 blocks, 4 caches: the readers add none.
      expect(ring.program.kvKWidth.length).toBe(4);
      const want = await full.evaluate(0, toks, 'all');
      const V = ring.nVocab;
      for (let i = 0; i < toks.length; i++) {
        const one = await ring.evaluate(0, [toks[i]], 'last');
        if (!same(one, want.subarray(i * V, (i + 1) * V))) throw new Error(`position ${i} differs`);
      }
      expect(ring.truncate(0, 57)).toBe(57);
      ring.copySequence(0, 1);
      const again = await ring.evaluate(0, toks.slice(57), 'all');
      const copied = await ring.evaluate(1, toks.slice(57), 'all');
      expect(same(again, want.subarray(57 * V))).toBe(true);
      expect(same(copied, want.subarray(57 * V))).toBe(true);
      // Gone from the rings: cleared, then recomputed the same.
      expect(ring.truncate(0, 40)).toBe(0);
      expect(same(await ring.evaluate(0, toks, 'all'), want)).toBe(true);
    } finally {
      ring.close();
      full.close();
    }
  }, 60_000);
});

describe('sliding MLA blocks (tiny-dots3note)', () => {
  let file: string;
  const toks = Array.from({ length: 128 }, (_, i) => ((i * 53 + 11) % 1000) + 3);
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-dots3note');
  }, 60_000);

  it('ring their latent rows: the bits of every position kept, the plan the allocation, exact rollback, copy and save/restore', async () => {
    // nBatch 4: the sliding blocks (1, 2, 4; window 8) keep 8 + 3 = 11 latent rows (22 stored)
    // against 128; nBatch 512: no ring (2R > nCtx), every position kept.
    const ring = EngineModel.load(file, { threads: 2, nCtx: 128, nBatch: 4, nSeqMax: 2 });
    const full = EngineModel.load(file, { threads: 2, nCtx: 128, nBatch: 512 });
    try {
      const V = ring.nVocab;
      const want = await full.evaluate(0, toks.slice(0, 60), 'all');
      expect(same(await ring.evaluate(0, toks.slice(0, 60), 'all'), want)).toBe(true);
      ring.truncate(0, 0);
      for (let i = 0; i < 60; i++) {
        const one = await ring.evaluate(0, [toks[i]], 'last');
        if (!same(one, want.subarray(i * V, (i + 1) * V))) throw new Error(`position ${i} differs`);
      }
      // Sliding latent rows of 64 + 32, F16: the ring saves 3 blocks x (128 - 22) rows per sequence.
      expect(full.runtime.kvCapacityBytes - ring.runtime.kvCapacityBytes / 2).toBe(3 * 96 * 2 * (128 - 22));
      expect(native().kvCacheBytes(ring.program, { nCtx: 128, nBatch: 4, kvType: 1 }) * 2).toBe(ring.runtime.kvCapacityBytes);
      // Back 3 positions: the ring still holds the window; copied and restored sequences go on the same.
      expect(ring.truncate(0, 57)).toBe(57);
      ring.copySequence(0, 1);
      const saved = ring.saveSequence(1);
      expect(same(await ring.evaluate(0, toks.slice(57, 60), 'all'), want.subarray(57 * V))).toBe(true);
      expect(same(await ring.evaluate(1, toks.slice(57, 60), 'all'), want.subarray(57 * V))).toBe(true);
      ring.restoreSequence(1, saved);
      expect(ring.seqLen(1)).toBe(57);
      expect(same(await ring.evaluate(1, toks.slice(57, 60), 'all'), want.subarray(57 * V))).toBe(true);
      // Back to 40: positions 32..39 were overwritten; the sequence is cleared.
      expect(ring.truncate(0, 40)).toBe(0);
      ring.truncate(1, 0);
      expect(same(await ring.evaluate(0, toks.slice(0, 60), 'all'), want)).toBe(true);
      // Filled to the context, the cache allocates what the plan says (one sequence of two).
      await ring.evaluate(0, toks.slice(60), 'last');
      expect(ring.runtime.stats().kvBytes).toBe(ring.runtime.kvCapacityBytes / 2);
    } finally {
      ring.close();
      full.close();
    }
  }, 120_000);
});
