// DeepSeek-V3's (and V4's, over hyper-connection streams) multi-token-prediction block as a built-in
// draft: the block runs as a model of its own over the target's hidden states; greedy speculation with it gives exactly the target's
// tokens (one sequence and batched), its incremental cache (catch-up, drafted positions rolled
// back) computes what one full pass computes, and files without the block are refused clearly.
import fs from 'node:fs';

import { generate } from '../generate';
import { EngineModel } from '../model/model';
import { BatchEngine, type GenerationChunk } from '../runtime/batch-engine';
import { tempDir, writeTestModel } from '../testing';
import { benchmarkSpeculative } from './spec-benchmark';
import { SpeculativeDecoder } from './speculative-decoder';

const dir = tempDir('kail-mtp-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function prompts(nVocab: number): number[][] {
  let s = 777;
  const r = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % nVocab;
  return [[r()], ...Array.from({ length: 4 }, (_, i) => Array.from({ length: 2 + 3 * i }, r))];
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

// DeepSeek-V3's block, Qwen3.5's and Nemotron 3's over a recurrent trunk (whose rejected
// drafts come back from the rollback checkpoint), and DeepSeek-V4's, which reads the target's 4
// hyper-connection streams (the target loaded with nextnHidden; the others ignore it).
describe.each([
  ['tiny-deepseek3-mtp', 'F32', 'f32', 1],
  ['tiny-deepseek3-mtp', 'Q8_0', 'f16', 1],
  ['tiny-qwen35moe-mtp', 'F32', 'f32', 1],
  ['tiny-qwen35moe-mtp', 'Q4_K', 'f16', 1],
  ['tiny-nemotron-h-moe-mtp', 'Q4_K', 'f16', 1],
  ['tiny-deepseek4', 'Q8_0', 'f16', 4],
] as const)('MTP draft on %s %s (KV %s)', (preset, type, kvType, streams) => {
  let target: EngineModel;
  let mtp: EngineModel;
  let want: number[][];
  const opts = { threads: 2, nCtx: 96, kvType, nSeqMax: 3 };
  beforeAll(async () => {
    const file = writeTestModel(dir, preset, type);
    target = EngineModel.load(file, { ...opts, nextnHidden: true });
    mtp = EngineModel.load(file, { ...opts, mtp: true });
    want = [];
    for (const p of prompts(target.nVocab)) want.push((await generate(target, p, { maxTokens: 16, sampling: { temperature: 0 } })).tokens);
  }, 120_000);
  afterAll(() => {
    target?.close();
    mtp?.close();
  });

  it('the MTP model reads the target hidden width and the target exposes it', () => {
    expect(target.hiddenWidth).toBe(streams * target.hparams.nEmbd);
    expect(mtp.runtime.inputWidth).toBe(streams * target.hparams.nEmbd);
    expect(mtp.nVocab).toBe(target.nVocab);
    // One block instead of the trunk: far fewer bytes per token than the target.
    expect(mtp.summary.bytesPerToken).toBeLessThan(target.summary.bytesPerToken);
  });

  it.each([1, 3, 6])('greedy with k = %i gives exactly the target tokens', async (k) => {
    const spec = new SpeculativeDecoder(target, { mtp, k, adaptive: false });
    expect(spec.mode).toBe('mtp');
    const ps = prompts(target.nVocab);
    for (let i = 0; i < ps.length; i++) {
      const r = await generate(target, ps[i], { maxTokens: 16, sampling: { temperature: 0 }, speculative: spec });
      expect(r.tokens).toEqual(want[i]);
    }
    const st = spec.stats();
    expect(st.mode).toBe('mtp');
    expect(st.draftedTokens).toBeGreaterThan(0);
    expect(st.committedTokens).toBe(st.acceptedTokens + st.targetPasses);
  }, 60_000);

  it("kail bench's speculative run (benchmarkSpeculative) records the prompt's hidden rows and gives the baseline's tokens", async () => {
    const prompt = prompts(target.nVocab)[3];
    const base = await benchmarkSpeculative(target, { prompt, genTokens: 12, sampling: { temperature: 0 } });
    const spec = new SpeculativeDecoder(target, { mtp, k: 3, adaptive: false });
    const sp = await benchmarkSpeculative(target, { prompt, genTokens: 12, sampling: { temperature: 0 }, speculative: spec });
    expect(sp.tokens).toEqual(base.tokens);
    expect(sp.speculative!.draftedTokens).toBeGreaterThan(0);
    target.truncate(0, 0);
    mtp.truncate(0, 0);
  }, 60_000);

  it('incremental drafting computes what one full MTP pass computes', async () => {
    // Target hidden states of a whole history in one pass, then the MTP block over every
    // (token, previous hidden) pair in one pass: the reference for each position's draft logits.
    const history = prompts(target.nVocab)[4];
    const n = history.length;
    target.truncate(2, 0);
    const { hidden } = await target.evaluateWithHidden(2, history, 'all');
    target.truncate(2, 0);
    const w = target.hiddenWidth;
    const embd = new Float32Array(n * w);
    embd.set(hidden.subarray(0, (n - 1) * w), w);
    mtp.truncate(2, 0);
    const full = await mtp.forwardBatch({
      tokens: Int32Array.from(history),
      pos: Int32Array.from(history.keys()),
      seq: new Int32Array(n).fill(2),
      output: new Uint8Array(n).fill(1),
      embd,
    });
    mtp.truncate(2, 0);
    // The same rows built the way speculation builds them: prefill, then one step at a time,
    // each step drafting (and rolling back) k positions past the history.
    const spec = new SpeculativeDecoder(target, { mtp, k: 3, adaptive: false });
    const seqA = spec.begin(2, { temperature: 0 }, 2);
    const pre = history.slice(0, 3);
    seqA.recordHidden(0, (await target.evaluateWithHidden(2, pre.slice(0, -1), 'last')).hidden, pre.length - 1);
    const nv = target.nVocab;
    for (let h = pre.length; h <= n; h++) {
      const ctx = history.slice(0, h);
      const d = await seqA.propose(ctx, 3);
      // The first drafted token is the argmax of the full pass's row for position h-1.
      const row = full.subarray((h - 1) * nv, h * nv);
      let best = 0;
      for (let j = 1; j < nv; j++) if (row[j] > row[best]) best = j;
      expect(d.tokens[0]).toBe(best);
      expect(mtp.runtime.seqLen(2)).toBe(h);
      // Feed the next history token as if the target accepted nothing and chose it.
      const r = await target.evaluateWithHidden(2, [ctx[h - 1]], 'all');
      seqA.recordHidden(h - 1, r.hidden, 1);
    }
    // Logits of position n-1 recomputed through the cache the steps left behind.
    mtp.truncate(2, n - 1);
    const last = await mtp.forwardBatch({ tokens: Int32Array.of(history[n - 1]), pos: Int32Array.of(n - 1), seq: Int32Array.of(2), output: Uint8Array.of(1), embd: embd.slice((n - 1) * w) });
    expect(maxAbsDiff(last, full.subarray((n - 1) * nv))).toBeLessThan(1e-4);
    target.truncate(2, 0);
    mtp.truncate(2, 0);
  }, 60_000);

  it('with a reasoning budget, MTP drafting gives the tokens plain decoding gives under it', async () => {
    const req = (p: number[], i: number) => ({ id: `b${i}`, prompt: p, maxTokens: 16, sampling: { temperature: 0 }, ignoreEog: true, reasoningBudget: { tokens: 4, forced: [5, 6], open: true } });
    const run = async (engine: BatchEngine) => {
      const out = await Promise.all(
        prompts(target.nVocab).slice(1, 4).map(async (p, i) => {
          const toks: number[] = [];
          for await (const c of engine.generate(req(p, i))) toks.push(...c.tokens);
          return toks;
        }),
      );
      await engine.close();
      return out;
    };
    const plain = await run(new BatchEngine(target));
    const spec = new SpeculativeDecoder(target, { mtp, k: 3 });
    expect(await run(new BatchEngine(target, { speculative: spec }))).toEqual(plain);
    expect(spec.stats().draftedTokens).toBeGreaterThan(0);
  }, 60_000);

  it('batched requests with MTP drafting give the target tokens', async () => {
    const spec = new SpeculativeDecoder(target, { mtp, k: 3 });
    const engine = new BatchEngine(target, { speculative: spec });
    const ps = prompts(target.nVocab).slice(1, 4);
    const runs = ps.map(async (p, i) => {
      const toks: number[] = [];
      const chunks: AsyncIterable<GenerationChunk> = engine.generate({ id: `r${i}`, prompt: p, maxTokens: 16, sampling: { temperature: 0 } });
      for await (const c of chunks) toks.push(...c.tokens);
      return toks;
    });
    const got = await Promise.all(runs);
    got.forEach((toks, i) => expect(toks).toEqual(want[i + 1]));
    expect(spec.stats().draftedTokens).toBeGreaterThan(0);
    await engine.close();
  }, 60_000);
});

describe('refusals', () => {
  it('a file without an MTP block cannot load one (its target still gives hidden rows, which embeddings read)', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek3', 'F32');
    expect(() => EngineModel.load(file, { threads: 1, nCtx: 32, mtp: true })).toThrow(/no multi-token-prediction block/);
    const m = EngineModel.load(file, { threads: 1, nCtx: 32 });
    try {
      expect(m.hiddenWidth).toBe(m.hparams.nEmbd);
      expect((await m.evaluateWithHidden(0, [1, 2], 'last')).hidden).toHaveLength(2 * m.hparams.nEmbd);
    } finally {
      m.close();
    }
  });

  it('an MTP model refuses a batch without hidden rows', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek3-mtp', 'F32');
    const m = EngineModel.load(file, { threads: 1, nCtx: 32, mtp: true });
    try {
      await expect(m.evaluate(0, [1, 2], 'last')).rejects.toThrow(/hidden-state row per token/);
    } finally {
      m.close();
    }
  });

  it("a deepseek4 target loaded without nextnHidden gives the head's normed rows, not the streams its MTP block reads: refused, naming the option", () => {
    const file = writeTestModel(dir, 'tiny-deepseek4', 'Q8_0');
    const target = EngineModel.load(file, { threads: 1, nCtx: 32 });
    const mtp = EngineModel.load(file, { threads: 1, nCtx: 32, mtp: true });
    try {
      expect(target.hiddenWidth).toBe(target.hparams.nEmbd);
      expect(() => new SpeculativeDecoder(target, { mtp })).toThrow(/the target gives 128 hidden floats per token, its MTP block reads 512 \(load the target with nextnHidden: true/);
    } finally {
      target.close();
      mtp.close();
    }
  });

  it('other architectures are refused', () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    expect(() => EngineModel.load(file, { threads: 1, nCtx: 32, mtp: true })).toThrow(/implemented for deepseek2/);
  });
});
