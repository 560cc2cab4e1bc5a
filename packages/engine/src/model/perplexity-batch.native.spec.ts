// Chunks that share a forward pass, one sequence each (llama-perplexity's n_seq = n_batch / n_ctx):
// the same bits as one chunk per pass, for the perplexity, a base-logits file and a KL divergence,
// in memory and with experts streaming; and for an importance matrix (llama-imatrix's n_seq).
import fs from 'node:fs';
import path from 'node:path';

import { computeImatrix } from './imatrix';
import { klDivergence } from './kl-divergence';
import { EngineModel, planModel } from './model';
import { chunksPerPass, perplexity } from './perplexity';
import { tempDir, writeTestModel } from '../testing';

describe('chunks sharing a pass', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('gives the perplexity, the base file and the KL divergence of one chunk per pass, streamed or not', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    const nCtx = 32;
    let s = 7;
    const tokens = Array.from({ length: 7 * nCtx }, () => ((s = (s * 1103515245 + 12345) >>> 0) % 1000) + 3);
    const run = async (opts: { nSeqMax: number; nBatch: number; ramBytes?: number }, base: string) => {
      const m = EngineModel.load(file, { threads: 2, nCtx, ...opts, ...(opts.ramBytes ? { ramReserveBytes: 0 } : {}) });
      try {
        const ppl = await perplexity(m, tokens, { nCtx, nBatch: opts.nBatch, saveLogits: base });
        const kld = await klDivergence(m, base, { nBatch: opts.nBatch });
        return { ppl: ppl.ppl, perPass: chunksPerPass(m, nCtx, opts.nBatch), file: fs.readFileSync(base), kld: kld.stats };
      } finally {
        m.close();
      }
    };
    const one = await run({ nSeqMax: 1, nBatch: nCtx }, path.join(dir, 'one.kld'));
    // 7 chunks, 3 per pass: the last pass holds one.
    const three = await run({ nSeqMax: 3, nBatch: 3 * nCtx }, path.join(dir, 'three.kld'));
    expect(one.perPass).toBe(1);
    expect(three.perPass).toBe(3);
    expect(three.ppl).toBe(one.ppl);
    expect(three.file.equals(one.file)).toBe(true);
    expect(three.kld).toEqual(one.kld);
    const plan = planModel(file, { threads: 2, nCtx, nSeqMax: 3, nBatch: 3 * nCtx, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    const streamed = await run({ nSeqMax: 3, nBatch: 3 * nCtx, ramBytes: plan.fixedBytes + 3 * plan.nMoeLayers * plan.expertEntryBytes }, path.join(dir, 'streamed.kld'));
    expect(streamed.ppl).toBe(one.ppl);
    expect(streamed.file.equals(one.file)).toBe(true);
  }, 120_000);

  it('gives the importance matrix and its perplexity of one chunk per pass, streamed or not', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    const nCtx = 32;
    let s = 11;
    const tokens = Array.from({ length: 7 * nCtx }, () => ((s = (s * 1103515245 + 12345) >>> 0) % 1000) + 3);
    const run = async (opts: { nSeqMax: number; nBatch: number; ramBytes?: number }) => {
      const m = EngineModel.load(file, { threads: 2, nCtx, ...opts, ...(opts.ramBytes ? { ramReserveBytes: 0 } : {}) });
      try {
        const snapshots: number[] = [];
        const r = await computeImatrix(m, tokens, { nCtx, nBatch: opts.nBatch, processOutput: true, onChunk: (i) => snapshots.push(i) });
        expect(snapshots).toEqual([1, 2, 3, 4, 5, 6, 7]);
        return r;
      } finally {
        m.close();
      }
    };
    const one = await run({ nSeqMax: 1, nBatch: nCtx });
    const three = await run({ nSeqMax: 3, nBatch: 3 * nCtx });
    const plan = planModel(file, { threads: 2, nCtx, nSeqMax: 3, nBatch: 3 * nCtx, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    const streamed = await run({ nSeqMax: 3, nBatch: 3 * nCtx, ramBytes: plan.fixedBytes + 3 * plan.nMoeLayers * plan.expertEntryBytes });
    for (const r of [three, streamed]) {
      expect(r.ppl).toBe(one.ppl);
      expect([...r.entries.keys()]).toEqual([...one.entries.keys()]);
      for (const [name, e] of one.entries) {
        const o = r.entries.get(name)!;
        expect(o.counts).toEqual(e.counts);
        if (!Buffer.from(o.sums.buffer, o.sums.byteOffset, o.sums.byteLength).equals(Buffer.from(e.sums.buffer, e.sums.byteOffset, e.sums.byteLength))) throw new Error(`${name}: sums differ`);
      }
    }
    expect(one.entries.has('output.weight')).toBe(true);
    expect([...one.entries.keys()].some((k) => k.includes('_exps'))).toBe(true);
  }, 120_000);
});
