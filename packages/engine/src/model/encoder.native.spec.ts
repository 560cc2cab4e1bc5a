// Encoder-only embedding models (bert, nomic-bert): non-causal attention over each sequence,
// whole sequences per pass, several sequences in one pass, and the refusals an embedding model
// gives (no text generation, no input past its context or learned positions). Parity with
// llama.cpp's numbers is tools/src/parity/parity-encoders.native.spec.ts.
import fs from 'node:fs';

import { generate } from '../generate';
import { BatchEngine, type GenerationRequest } from '../runtime/batch-engine';
import { tempDir, writeTestModel } from '../testing';
import { EngineModel, planModel } from './model';

async function embed(engine: BatchEngine, req: Omit<GenerationRequest, 'maxTokens'>): Promise<Float32Array> {
  let out: Float32Array | undefined;
  for await (const c of engine.generate({ maxTokens: 0, ...req })) if (c.embedding) out = c.embedding;
  if (!out) throw new Error('no embedding');
  return out;
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

describe.each(['tiny-bert', 'tiny-nomic-bert', 'tiny-nomic-bert-moe'])('%s (encoder)', (preset) => {
  const dir = tempDir();
  let model: EngineModel;
  let engine: BatchEngine;
  beforeAll(() => {
    model = EngineModel.load(writeTestModel(dir, preset, 'F32'), { nSeqMax: 3, threads: 2, nCtx: 128 });
    engine = new BatchEngine(model);
  }, 60_000);
  afterAll(async () => {
    await engine.close();
    model.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const texts = ['experts stream from storage', 'the router picks the top experts for each token, and the cache keeps the hot ones', 'a'];

  it('is an encoder: F32 K/V by default, one pass holds the whole context', () => {
    expect(model.encoder).toBe(true);
    expect(model.nBatch).toBe(128);
    expect(model.nVocab).toBe(model.tokenizer.nTokens);
  });

  it('attends both ways: the first token\'s (CLS) row changes when a later token does', async () => {
    const a = model.tokenizer.tokenize('experts stream from storage', { addSpecial: true });
    const b = [...a];
    b[b.length - 2] = model.tokenizer.tokenize('cache', { addSpecial: false })[0];
    expect(b).not.toEqual(a);
    const ca = await embed(engine, { id: 'cls-a', prompt: a, embed: 'cls' });
    const cb = await embed(engine, { id: 'cls-b', prompt: b, embed: 'cls' });
    // (With causal attention the first row would not see the change at all.)
    expect(maxAbsDiff(ca, cb)).toBeGreaterThan(1e-3);
  });

  it('several sequences in one pass each get the embedding they get alone', async () => {
    const reqs = texts.map((t, i) => ({ id: `e${i}`, prompt: model.tokenizer.tokenize(t, { addSpecial: true }), embed: 'mean' as const }));
    const alone: Float32Array[] = [];
    for (const r of reqs) alone.push(await embed(engine, r));
    const stepsBefore = engine.stats().steps;
    const together = await Promise.all(reqs.map((r) => embed(engine, { ...r, id: `${r.id}-b` })));
    expect(engine.stats().steps - stepsBefore).toBeLessThan(reqs.length);
    together.forEach((v, i) => expect(maxAbsDiff(v, alone[i])).toBeLessThan(1e-5));
    // A later request in the same slot sees nothing of an earlier, longer one.
    expect(maxAbsDiff(await embed(engine, { ...reqs[2], id: 'e2-again' }), alone[2])).toBe(0);
  });

  it("gives every token's row with pooling none: the first is CLS pooling's, their mean is mean pooling's", async () => {
    const prompt = model.tokenizer.tokenize(texts[1], { addSpecial: true });
    const rows = await embed(engine, { id: 'none', prompt, embed: 'none' });
    const w = model.hiddenWidth;
    expect(rows.length).toBe(prompt.length * w);
    expect(maxAbsDiff(rows.subarray(0, w), await embed(engine, { id: 'cls', prompt, embed: 'cls' }))).toBe(0);
    const mean = new Float32Array(w);
    for (let t = 0; t < prompt.length; t++) for (let j = 0; j < w; j++) mean[j] += rows[t * w + j] / prompt.length;
    expect(maxAbsDiff(mean, await embed(engine, { id: 'mean', prompt, embed: 'mean' }))).toBeLessThan(1e-5);
  });

  it('takes an input that fills the context, and refuses a longer one', async () => {
    const ids = Array.from({ length: 128 }, (_, i) => 10 + (i % 200));
    expect((await embed(engine, { id: 'full', prompt: ids, embed: 'mean' })).length).toBe(model.hparams.nEmbd);
    expect(() => engine.generate({ id: 'long', prompt: [...ids, 11], maxTokens: 0, embed: 'mean' })).toThrow(/the context holds 128/);
  });

  it('refuses to generate text, with an error that says it is an embedding model', async () => {
    const prompt = model.tokenizer.tokenize('hello', { addSpecial: true });
    expect(() => engine.generate({ id: 'gen', prompt, maxTokens: 4 })).toThrow(/embedding model .*not generated text/);
    await expect(generate(model, prompt, { maxTokens: 4 })).rejects.toThrow(/embedding model/);
  });

  it('evaluates a sequence only whole, from position 0', async () => {
    const m = EngineModel.load(model.path, { threads: 1, nCtx: 64 });
    try {
      const prompt = model.tokenizer.tokenize('hello there', { addSpecial: true });
      await expect(m.evaluate(0, prompt, 'last', 2)).rejects.toThrow(/in one pass of at most 2 tokens/);
      const rows = await m.evaluate(0, prompt, 'all');
      expect(rows.length).toBe(prompt.length * model.hparams.nEmbd);
      await expect(m.evaluate(0, prompt, 'last')).rejects.toThrow(/already holds 4 positions/);
    } finally {
      m.close();
    }
  });
});

describe('bert learned positions', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('refuses a context longer than the file has positions for', () => {
    const file = writeTestModel(dir, 'tiny-bert', 'F32');
    expect(() => EngineModel.load(file, { nCtx: 1024, threads: 1 })).toThrow(/longer than the model's 512 learned positions/);
    const m = EngineModel.load(file, { threads: 1 });
    try {
      expect(m.nCtx).toBe(512);
    } finally {
      m.close();
    }
  });
});

describe('nomic-bert-moe (gate-less GELU experts)', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('routes its odd layers to experts, which stream (up and down slices only) with the in-memory embedding', async () => {
    const file = writeTestModel(dir, 'tiny-nomic-bert-moe', 'F32');
    const embedWith = async (opts: Parameters<typeof EngineModel.load>[1]) => {
      const m = EngineModel.load(file, opts);
      const engine = new BatchEngine(m);
      try {
        const prompt = m.tokenizer.tokenize('the router picks the top experts for each token', { addSpecial: true });
        return { nMoe: m.program.nMoeLayers, e: await embed(engine, { id: 'x', prompt, embed: 'mean' }), stream: m.runtime.stats().stream, moeActs: m.program.ops.filter((op) => op.op === 'moe').map((op) => op.params?.act) };
      } finally {
        await engine.close();
        m.close();
      }
    };
    const mem = await embedWith({ threads: 1, nCtx: 64 });
    expect(mem.nMoe).toBe(1);
    expect(mem.moeActs).toEqual([2]);
    // A budget of 2 experts per layer; a cache entry is the up and down slices (no gate).
    const plan = planModel(file, { threads: 1, nCtx: 64, ramBytes: 2 ** 40, ramReserveBytes: 0 });
    const streamed = await embedWith({ threads: 1, nCtx: 64, ramBytes: plan.fixedBytes + 2 * plan.nMoeLayers * plan.expertEntryBytes, ramReserveBytes: 0 });
    expect(Array.from(streamed.e)).toEqual(Array.from(mem.e));
    expect(streamed.stream!.layers[0].misses).toBeGreaterThan(0);
  });
});
