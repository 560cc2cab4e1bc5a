// Usage history end to end: a first streaming run writes the model's expert counts; a second start
// warms the cache from them and hits more often over its first tokens (measured from the stream's
// own counters) while producing exactly the same tokens.
import fs from 'node:fs';
import path from 'node:path';

import { generate } from '../generate';
import { summarizeStream } from '../model/stream-summary';
import { tempDir, writeTestModel } from '../testing';
import { EngineModel, planModel, type LoadModelOptions } from '../model/model';
import { modelIdentity, readUsageHistory, usageHistoryPath } from './usage-history';

const PROMPT = [1, 17, 99, 3, 250, 7, 42, 8, 310, 77, 5, 600];

describe('usage history', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('warms the next start: higher hit rate over the first tokens, same tokens', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q4_K');
    const hist = path.join(dir, 'usage');
    // (Without speculative prefetch the hits and misses are the routing's alone: with it, whether a
    // prefetched expert lands before its layer runs depends on the machine's load, and a loaded CI
    // machine once gave the cold run the warm run's hit rate.)
    const base: LoadModelOptions = { threads: 2, nCtx: 128, nBatch: 32, prefetch: false };
    const p = planModel(file, { ...base, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    // Room for 8 of 16 experts per MoE layer.
    const opts: LoadModelOptions = { ...base, ramReserveBytes: 0, ramBytes: p.fixedBytes + 8 * p.nMoeLayers * p.expertEntryBytes, usageHistoryDir: hist };

    const runs: { tokens: number[]; hitRate: number; stall: number; firstMisses: number; firstStall: number; warmUsed: number; note: string }[] = [];
    for (let i = 0; i < 2; i++) {
      const m = EngineModel.load(file, opts);
      try {
        if (i === 1) expect(await m.warmed(10_000)).toBe(true);
        // Before the first token: the prompt's forward pass and the reads it waited for.
        await m.evaluate(0, PROMPT, 'last');
        const first = summarizeStream(m.runtime.stats().stream!);
        m.truncate(0, 0);
        const r = await generate(m, PROMPT, { maxTokens: 8, sampling: { temperature: 0 } });
        const st = m.runtime.stats().stream!;
        const s = summarizeStream(st);
        runs.push({ tokens: r.tokens, hitRate: s.hitRate, stall: s.stallSeconds, firstMisses: first.misses, firstStall: first.stallSeconds, warmUsed: st.warmUsed, note: m.usageHistoryNote });
        expect(st.peakBytes).toBeLessThanOrEqual(st.capacityBytes);
        if (i === 1) {
          expect(st.warmReads).toBeGreaterThan(0);
          expect(st.warmBytes).toBeLessThanOrEqual(st.capacityBytes);
        }
      } finally {
        m.close();
      }
      if (i === 0) {
        const h = readUsageHistory(hist, modelIdentity(file), p.nMoeLayers, p.nExpert)!;
        expect(h.runs).toBe(1);
        expect(h.tokens).toBe(2 * PROMPT.length + 7); // the prompt twice; the last sampled token is never fed back
        expect(h.counts.reduce((a, b) => a + b, 0)).toBe(h.tokens * p.nMoeLayers * p.nExpertUsed);
      }
    }
    // eslint-disable-next-line no-console
    console.log(
      `usage history: before the first token cold ${runs[0].firstMisses} misses, stalled ${runs[0].firstStall.toFixed(4)} s; warm ${runs[1].firstMisses} misses, ` +
        `stalled ${runs[1].firstStall.toFixed(4)} s | whole run: cold hit rate ${runs[0].hitRate.toFixed(3)}, warm ${runs[1].hitRate.toFixed(3)}`,
    );
    expect(runs[0].note).toMatch(/no usage history yet/);
    expect(runs[1].note).toMatch(/^warming \d+ of \d+ experts used in 1 earlier run/);
    expect(runs[1].tokens).toEqual(runs[0].tokens);
    expect(runs[1].warmUsed).toBeGreaterThan(0);
    expect(runs[1].hitRate).toBeGreaterThan(runs[0].hitRate);
    // Fewer reads to wait for before the first token (stall time itself is printed, not asserted: it is wall time on a shared machine).
    expect(runs[1].firstMisses).toBeLessThan(runs[0].firstMisses);
    const h2 = readUsageHistory(hist, modelIdentity(file), p.nMoeLayers, p.nExpert)!;
    expect(h2.runs).toBe(2);
    expect(h2.tokens).toBeCloseTo((2 * PROMPT.length + 7) * 1.5, 6); // decay 0.5
  }, 120_000);

  it('warms the stream layers the counted MoE layers are (GroveMoE: chunk experts stream between them, uncounted)', async () => {
    const file = writeTestModel(dir, 'tiny-grovemoe', 'Q4_K');
    const hist = path.join(dir, 'grove');
    const base: LoadModelOptions = { threads: 2, nCtx: 128, nBatch: 32 };
    const p = planModel(file, { ...base, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    // 4 blocks: 4 counted MoE layers of 8 experts, 8 stream layers (routed, chunk, routed, ...).
    expect(p.nMoeLayers).toBe(8);
    const opts: LoadModelOptions = { ...base, ramReserveBytes: 0, ramBytes: p.fixedBytes + 3 * p.nMoeLayers * p.expertEntryBytes, usageHistoryDir: hist };
    const runs: { tokens: number[]; note: string; warmUsed: number; warmReads: number }[] = [];
    for (let i = 0; i < 2; i++) {
      const m = EngineModel.load(file, opts);
      try {
        if (i === 1) expect(await m.warmed(10_000)).toBe(true);
        const r = await generate(m, PROMPT, { maxTokens: 8, sampling: { temperature: 0 } });
        const st = m.runtime.stats().stream!;
        runs.push({ tokens: r.tokens, note: m.usageHistoryNote, warmUsed: st.warmUsed, warmReads: st.warmReads });
      } finally {
        m.close();
      }
    }
    expect(runs[1].note).toMatch(/^warming \d+ of \d+ experts used in 1 earlier run/);
    expect(runs[1].warmReads).toBeGreaterThan(0);
    expect(runs[1].warmUsed).toBeGreaterThan(0);
    expect(runs[1].tokens).toEqual(runs[0].tokens);
  }, 120_000);

  it('ignores a broken history file (says why) and still runs', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q4_K');
    const hist = path.join(dir, 'broken');
    fs.mkdirSync(hist, { recursive: true });
    fs.writeFileSync(usageHistoryPath(hist, modelIdentity(file)), '{"format":"something else"}');
    const p = planModel(file, { nCtx: 64, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    const m = EngineModel.load(file, { threads: 2, nCtx: 64, ramReserveBytes: 0, ramBytes: p.fixedBytes + 4 * p.nMoeLayers * p.expertEntryBytes, usageHistoryDir: hist });
    try {
      expect(m.usageHistoryNote).toMatch(/usage history ignored: .*not a kailstream-usage-history v1 file/);
      await m.evaluate(0, [1, 2, 3], 'last');
    } finally {
      m.close();
    }
    // close() replaced it with a valid history of this run.
    expect(readUsageHistory(hist, modelIdentity(file), p.nMoeLayers, p.nExpert)!.runs).toBe(1);
  }, 60_000);
});
