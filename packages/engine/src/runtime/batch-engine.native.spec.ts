import fs from 'node:fs';

import { EngineModel } from '../model/model';
import { tempDir, writeTestModel } from '../testing';
import { BatchEngine, type GenerationChunk } from './batch-engine';

async function collect(it: AsyncIterable<GenerationChunk>): Promise<{ tokens: number[]; text: string; last: GenerationChunk }> {
  const tokens: number[] = [];
  let text = '';
  let last!: GenerationChunk;
  for await (const c of it) {
    tokens.push(...c.tokens);
    text += c.text;
    last = c;
  }
  return { tokens, text, last };
}

describe('BatchEngine (continuous batching)', () => {
  const dir = tempDir();
  let model: EngineModel;
  let engine: BatchEngine;
  beforeAll(() => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    model = EngineModel.load(file, { nSeqMax: 4, kvType: 'f32', threads: 2, nCtx: 256 });
    engine = new BatchEngine(model, { maxBatchTokens: 32 });
  }, 60_000);
  afterAll(async () => {
    await engine.close();
    model.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const prompts = ['The expert router', 'Once upon a time in a land', 'What is 2+2?', 'Mixture of experts models route tokens', 'a b c d e f g h i j k l m n o p q r s t u v w x y z'];

  it('gives each request the tokens it gets alone, while many run together (more than the slots)', async () => {
    const reqs = prompts.map((p, i) => ({ id: `r${i}`, prompt: model.tokenizer.tokenize(p, { addSpecial: true }), maxTokens: 12, sampling: { temperature: 0 }, ignoreEog: true }));
    const alone: { tokens: number[] }[] = [];
    for (const r of reqs) alone.push(await collect(engine.generate(r)));
    const together = await Promise.all(reqs.map((r) => collect(engine.generate({ ...r, id: `${r.id}-b` }))));
    together.forEach((t, i) => {
      expect(t.tokens).toEqual(alone[i].tokens);
      expect(t.last.finish?.reason).toBe('length');
      expect(t.last.finish?.completionTokens).toBe(12);
    });
    // Steps were shared: fewer forward passes than tokens generated.
    expect(engine.stats().tokensGenerated).toBeGreaterThan(0);
  });

  it('cancels a running request within a step and frees its slot', async () => {
    const ac = new AbortController();
    const long = engine.generate({ id: 'long', prompt: [1, 2, 3], maxTokens: 200, sampling: { temperature: 0 }, ignoreEog: true }, ac.signal);
    let n = 0;
    let last: GenerationChunk | undefined;
    for await (const c of long) {
      n += c.tokens.length;
      last = c;
      if (n === 3) ac.abort();
    }
    expect(last?.finish?.reason).toBe('cancelled');
    expect(last?.finish?.completionTokens).toBeLessThan(10);
    expect(engine.stats().running).toBe(0);
    const after = await collect(engine.generate({ id: 'after', prompt: [4, 5], maxTokens: 2, sampling: { temperature: 0 }, ignoreEog: true }));
    expect(after.tokens).toHaveLength(2);
  });

  it('stops on a stop string and reports usage', async () => {
    const r = await collect(engine.generate({ id: 's', prompt: [7, 8, 9], maxTokens: 30, sampling: { temperature: 0 }, ignoreEog: true }));
    const stopAt = r.text.slice(2, 4);
    if (stopAt.length === 2) {
      const s = await collect(engine.generate({ id: 's2', prompt: [7, 8, 9], maxTokens: 30, sampling: { temperature: 0 }, stop: [stopAt], ignoreEog: true }));
      expect(s.last.finish?.reason).toBe('stop');
      expect(s.text).toBe(r.text.slice(0, r.text.indexOf(stopAt)));
    }
  });

  it('refuses bad requests with clear errors', () => {
    expect(() => engine.generate({ id: 'e', prompt: [], maxTokens: 1 })).toThrow(/prompt is empty/);
    expect(() => engine.generate({ id: 'e', prompt: [1e9], maxTokens: 1 })).toThrow(/outside the vocabulary/);
    expect(() => engine.generate({ id: 'e', prompt: new Array(300).fill(1), maxTokens: 1 })).toThrow(/context holds 256/);
  });
});
