// The absorbed MLA path against the naive one (latents decompressed into per-head K/V) on whole
// deepseek2 models of both tensor layouts, and the latent cache's size.
import fs from 'node:fs';

import { native } from '../../native';
import { EngineModel } from '../model';
import { tempDir, writeTestModel } from '../../testing';
import { Metadata, readHParams } from '../hparams';
import { buildDeepseek2 } from './deepseek2';

async function logits(path: string, naiveMla: boolean, tokens: number[]): Promise<{ logits: Float32Array; kvPerToken: number }> {
  const file = native().openGguf(path, { mapData: false });
  const md = new Metadata(file.metadata, 'deepseek2');
  const tensors = new Map(file.tensors.map((t) => [t.name, t]));
  const program = buildDeepseek2(readHParams(md, tensors), tensors, { naiveMla });
  const m = new (native().Model)(path, program, { threads: 2, kvType: 0, nCtx: 64 });
  try {
    const n = tokens.length;
    const out = await m.forward({ tokens: Int32Array.from(tokens), pos: Int32Array.from(tokens, (_, i) => i), seq: new Int32Array(n), output: new Uint8Array(n).fill(1) });
    return { logits: out, kvPerToken: m.stats().kvBytes / 16 };
  } finally {
    m.close();
  }
}

describe('deepseek2 MLA', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each(['tiny-deepseek3', 'tiny-deepseek2-lite'])('%s: absorbed and naive attention agree (both layouts)', async (preset) => {
    const toks = [5, 17, 99, 3, 250, 7, 42, 8, 600, 1];
    const variants = [preset, preset === 'tiny-deepseek3' ? 'tiny-deepseek3-kvb' : 'tiny-deepseek2-lite-split'];
    for (const v of variants) {
      const file = writeTestModel(dir, v, 'F32');
      const a = await logits(file, false, toks);
      const b = await logits(file, true, toks);
      let num = 0;
      let den = 0;
      a.logits.forEach((x, i) => {
        num += (x - b.logits[i]) ** 2;
        den += b.logits[i] ** 2;
      });
      expect(num / den).toBeLessThan(1e-10);
    }
  }, 120_000);

  it('caches only the latent and the RoPE key', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek3', 'F32');
    const r = await logits(file, false, [1, 2, 3]);
    // 3 layers x (kv_lora 256 + rope 32) F32, 16-token minimum allocation per layer.
    expect(r.kvPerToken).toBe(3 * (256 + 32) * 4);
  }, 60_000);

  it('deepseek32 caches the indexer key beside the latent, and refuses a context shift (its keys are Hadamard-rotated)', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek32', 'F32');
    const m = EngineModel.load(file, { kvType: 'f32', threads: 2, nCtx: 64 });
    try {
      await m.evaluate(0, [5, 17, 99, 3, 250, 7, 42, 8], 'last');
      // 3 layers x ((kv_lora 256 + rope 32) + indexer key 64) F32 values, 16 rows allocated per layer at least.
      expect(m.runtime.stats().kvBytes / 16).toBe(3 * (256 + 32 + 64) * 4);
      expect(() => m.shiftContext(0, 0, 4)).toThrow(/rotated in a layout the shift cannot follow/);
    } finally {
      m.close();
    }
  }, 60_000);

  it('streams experts with exactly the logits of the mapped path', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek3', 'F32');
    const toks = [5, 17, 99, 3, 250, 7, 42, 8];
    const a = EngineModel.load(file, { kvType: 'f32', threads: 2, nCtx: 32 });
    const ref = await a.evaluate(0, toks, 'all');
    a.close();
    const b = EngineModel.load(file, { kvType: 'f32', threads: 2, nCtx: 32, ramBytes: 30 * 2 ** 20, ramReserveBytes: 1 });
    try {
      expect(Array.from(await b.evaluate(0, toks, 'all'))).toEqual(Array.from(ref));
    } finally {
      b.close();
    }
  }, 60_000);
});
