import fs from 'node:fs';

import { EngineModel } from '../model/model';
import { JsonRecognizer } from '../sampling/json-constraint';
import { tempDir, writeTestModel } from '../testing';
import { BatchEngine, type GenerationChunk } from './batch-engine';
import { readSlotFile, writeSlotFile } from './slot-file';

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

async function collectAll(it: AsyncIterable<GenerationChunk>) {
  const tokens: number[] = [];
  const logprobs: unknown[] = [];
  let last!: GenerationChunk;
  for await (const c of it) {
    tokens.push(...c.tokens);
    logprobs.push(...(c.logprobs ?? []));
    last = c;
  }
  return { tokens, logprobs, last };
}

/**
 * Two loads of `file`: an engine that reuses cached prompt starts and a plain one that computes
 * every prompt (the reference), closed after `run`.
 */
async function withReuseAndPlain(file: string, nSeqMax: number, maxBatchTokens: number, run: (e: BatchEngine, plain: BatchEngine, mine: EngineModel) => Promise<void>): Promise<void> {
  const mine = EngineModel.load(file, { nSeqMax, kvType: 'f32', threads: 2, nCtx: 256 });
  const other = EngineModel.load(file, { nSeqMax, kvType: 'f32', threads: 2, nCtx: 256 });
  const e = new BatchEngine(mine, { maxBatchTokens });
  const plain = new BatchEngine(other, { maxBatchTokens, reusePrefix: false });
  try {
    await run(e, plain, mine);
  } finally {
    await e.close();
    await plain.close();
    mine.close();
    other.close();
  }
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

  it("starts a conversation's next turn from the slot that cached it, with the same bits as computing it", async () => {
    const sampling = { temperature: 0 };
    const ask = (e: BatchEngine, id: string, prompt: number[], maxTokens: number) =>
      collectAll(e.generate({ id, prompt, maxTokens, sampling, ignoreEog: true, logprobs: true, topLogprobs: 3 }));
    const tok = (t: string, addSpecial = false) => model.tokenizer.tokenize(t, { addSpecial });
    const a1 = tok('User: tell me about experts. Assistant:', true);
    const b1 = tok('User: what is a router? Assistant:', true);
    const ra = await ask(engine, 'a1', a1, 6);
    const rb = await ask(engine, 'b1', b1, 5);
    const a2 = [...a1, ...ra.tokens, ...tok(' User: and then? Assistant:')];
    const b2 = [...b1, ...rb.tokens, ...tok(' User: why? Assistant:')];
    const before = engine.stats().promptTokensReused;
    const [sa, sb] = await Promise.all([ask(engine, 'a2', a2, 8), ask(engine, 'b2', b2, 8)]);
    // Each turn found its own conversation: the earlier prompt and every generated token but the
    // last (sampled, never fed to the model) were cached.
    expect(sa.last.finish?.cachedPromptTokens).toBe(a1.length + ra.tokens.length - 1);
    expect(sb.last.finish?.cachedPromptTokens).toBe(b1.length + rb.tokens.length - 1);
    expect(engine.stats().promptTokensReused - before).toBe(a1.length + ra.tokens.length - 1 + b1.length + rb.tokens.length - 1);
    // The same prompts computed whole (another load of the model, prefix reuse off).
    const other = EngineModel.load(model.path, { nSeqMax: 4, kvType: 'f32', threads: 2, nCtx: 256 });
    const plain = new BatchEngine(other, { maxBatchTokens: 32, reusePrefix: false });
    try {
      for (const [r, p] of [[sa, a2], [sb, b2]] as const) {
        const ref = await ask(plain, 'ref', p, 8);
        expect(ref.last.finish?.cachedPromptTokens).toBe(0);
        expect(r.tokens).toEqual(ref.tokens);
        expect(r.logprobs).toEqual(ref.logprobs);
      }
    } finally {
      await plain.close();
      other.close();
    }
    // A prompt that is all cached still computes its last token (for the first new one's logits).
    const again = await ask(engine, 'a2-again', a2, 8);
    expect(again.last.finish?.cachedPromptTokens).toBe(a2.length - 1);
    expect(again.tokens).toEqual(sa.tokens);
  });

  it('copies a start another slot holds, free or running (a shared system prompt), instead of computing it, with the same bits', async () => {
    const sampling = { temperature: 0 };
    const tok = (t: string, addSpecial = false) => model.tokenizer.tokenize(t, { addSpecial });
    await withReuseAndPlain(model.path, 4, 32, async (e, plain, mine) => {
      const ask = (en: BatchEngine, id: string, prompt: number[], maxTokens: number) => collectAll(en.generate({ id, prompt, maxTokens, sampling, ignoreEog: true, logprobs: true, topLogprobs: 3 }));
      const sys = tok('System: you explain mixture of experts models: routers, experts, caches and their costs. ', true);
      expect(sys.length).toBeGreaterThan(20);
      const p1 = [...sys, ...tok('User: hi. Assistant:')];
      const p2 = [...sys, ...tok('User: what is routing? Assistant:')];
      await ask(e, 'c1', p1, 4);
      // p2 does not continue p1's conversation, so it takes an empty slot, and copies the shared start from p1's.
      const r2 = await ask(e, 'c2', p2, 6);
      const shared = (a: number[], b: number[]) => a.findIndex((t, i) => b[i] !== t);
      expect(r2.last.finish?.cachedPromptTokens).toBe(shared(p1, p2));
      expect(e.stats().promptTokensCopied).toBe(shared(p1, p2));
      const ref2 = await ask(plain, 'ref2', p2, 6);
      expect(r2.tokens).toEqual(ref2.tokens);
      expect(r2.logprobs).toEqual(ref2.logprobs);

      // From a slot whose request is still running: p4 shares more with p3 (running) than with the others.
      const p3 = [...sys, ...tok('User: tell me a long story about experts. Assistant:')];
      const p4 = [...sys, ...tok('User: tell me a long story about routers. Assistant:')];
      const running = e.generate({ id: 'c3', prompt: p3, maxTokens: 60, sampling, ignoreEog: true });
      const it3 = running[Symbol.asyncIterator]();
      await it3.next(); // p3 is in its slot and decoding
      const before = e.stats().promptTokensCopied;
      const r4 = await ask(e, 'c4', p4, 6);
      for (let c = await it3.next(); !c.done; c = await it3.next());
      expect(r4.last.finish?.cachedPromptTokens).toBe(shared(p3, p4));
      expect(shared(p3, p4)).toBeGreaterThan(shared(p1, p4));
      expect(e.stats().promptTokensCopied - before).toBe(shared(p3, p4));
      const ref4 = await ask(plain, 'ref4', p4, 6);
      expect(r4.tokens).toEqual(ref4.tokens);
      expect(r4.logprobs).toEqual(ref4.logprobs);
      // A start shorter than 16 tokens is computed, not copied.
      const q = await ask(e, 'c5', [...sys.slice(0, 10), ...tok(' unrelated text here')], 2);
      expect(e.stats().promptTokensCopied - before).toBe(shared(p3, p4));
      expect(q.last.finish?.cachedPromptTokens).toBeLessThan(16);
    });
  });

  it('scores a prompt (promptLogprobs) with the same bits as generating it, in chunks, next to other sequences', async () => {
    const sampling = { temperature: 0 };
    const p = model.tokenizer.tokenize('Mixture of experts models route every token to a few experts. '.repeat(6), { addSpecial: true });
    expect(p.length).toBeGreaterThan(64);  // more than one scoring chunk, and than maxBatchTokens
    const gen = await collectAll(engine.generate({ id: 'g', prompt: p, maxTokens: 6, sampling, ignoreEog: true, logprobs: true, topLogprobs: 3 }));
    const text = [...p, ...gen.tokens];
    const score = async (id: string) => {
      let promptLps: unknown[] | undefined;
      let chunks = 0;
      let last!: GenerationChunk;
      for await (const c of engine.generate({ id, prompt: text, maxTokens: 1, sampling, ignoreEog: true, promptLogprobs: true, topLogprobs: 3 })) {
        if (c.promptLogprobs) {
          expect(chunks).toBe(0);  // before any generated token
          promptLps = c.promptLogprobs;
        }
        chunks++;
        last = c;
      }
      return { promptLps: promptLps!, last };
    };
    const alone = await score('s1');
    // Alone, then while other sequences decode and prefill in the same passes.
    const others = prompts.slice(0, 3).map((q, i) => collect(engine.generate({ id: `o${i}`, prompt: model.tokenizer.tokenize(q, { addSpecial: true }), maxTokens: 10, sampling, ignoreEog: true })));
    const [together] = await Promise.all([score('s2'), ...others]);
    for (const r of [alone, together]) {
      expect(r.promptLps).toHaveLength(text.length - 1);
      // The generated tokens, scored as prompt, have the logprobs (and top alternatives) they had.
      expect(r.promptLps.slice(p.length - 1)).toEqual(gen.logprobs);
      expect((r.promptLps as { token: number }[]).map((l) => l.token)).toEqual(text.slice(1));
      // Scored whole: no prompt tokens taken from a slot's cache.
      expect(r.last.finish?.cachedPromptTokens).toBe(0);
    }
  });

  it('embeds a prompt (mean, last, cls of the normalized hidden rows), the same bits alone and next to other sequences', async () => {
    const prompt = model.tokenizer.tokenize('Mixture of experts models route every token to a few experts. '.repeat(4), { addSpecial: true });
    expect(prompt.length).toBeGreaterThan(32);  // several prompt chunks at maxBatchTokens 32
    // The reference: the same file loaded again, its hidden rows for the whole prompt.
    const other = EngineModel.load(model.path, { nSeqMax: 1, kvType: 'f32', threads: 2, nCtx: 256 });
    let ref: Float32Array;
    try {
      ref = (await other.evaluateWithHidden(0, prompt, 'last')).hidden;
    } finally {
      other.close();
    }
    const w = model.hiddenWidth;
    expect(w).toBe(model.hparams.nEmbd);
    const sum = new Float64Array(w);
    for (let i = 0; i < prompt.length; i++) for (let j = 0; j < w; j++) sum[j] += ref[i * w + j];
    const expected = {
      mean: Float32Array.from(sum, (v) => v / prompt.length),
      last: ref.slice((prompt.length - 1) * w, prompt.length * w),
      cls: ref.slice(0, w),
    };
    const embed = async (id: string, pooling: 'mean' | 'last' | 'cls') => {
      let emb: Float32Array | undefined;
      let last!: GenerationChunk;
      for await (const c of engine.generate({ id, prompt, maxTokens: 8, embed: pooling })) {
        if (c.embedding) emb = c.embedding;
        expect(c.tokens).toEqual([]);
        last = c;
      }
      expect(last.finish?.reason).toBe('stop');
      expect(last.finish?.completionTokens).toBe(0);
      return emb!;
    };
    for (const pooling of ['mean', 'last', 'cls'] as const) expect(await embed(`e-${pooling}`, pooling)).toEqual(expected[pooling]);
    const others = prompts.slice(0, 3).map((q, i) => collect(engine.generate({ id: `eo${i}`, prompt: model.tokenizer.tokenize(q, { addSpecial: true }), maxTokens: 10, sampling: { temperature: 0 }, ignoreEog: true })));
    const [together] = await Promise.all([embed('e-together', 'mean'), ...others]);
    expect(together).toEqual(expected.mean);
  });

  it('cuts a prompt that arrives while others decode into chunks that fit the stall limit', async () => {
    // Another load of the model: these engines must not touch the slots whose caches `engine` keeps.
    const other = EngineModel.load(model.path, { nSeqMax: 4, kvType: 'f32', threads: 2, nCtx: 256 });
    const long = Array.from({ length: 200 }, (_, i) => 5 + (i % 50));
    // Prompt passes while one stream decodes: the limit (far below one token's time) leaves the
    // 16-token minimum per pass; without it, the 64-token pass budget.
    const passes = async (maxDecodeStallMs: number) => {
      const e = new BatchEngine(other, { maxBatchTokens: 64, maxDecodeStallMs, reusePrefix: false });
      const ac = new AbortController();
      const running = collect(e.generate({ id: 'dec', prompt: long.slice(0, 40), maxTokens: 240, sampling: { temperature: 0 }, ignoreEog: true }, ac.signal));
      while (e.stats().tokensGenerated === 0) await new Promise((r) => setTimeout(r, 1));
      const s0 = e.stats().steps;
      const it = e.generate({ id: 'new', prompt: long, maxTokens: 1, sampling: { temperature: 0 }, ignoreEog: true })[Symbol.asyncIterator]();
      await it.next();
      const n = e.stats().steps - s0;
      ac.abort();
      await running;
      await e.close();
      return n;
    };
    try {
      expect(await passes(1e-9)).toBeGreaterThanOrEqual(Math.ceil(200 / 16));
      expect(await passes(0)).toBeLessThanOrEqual(Math.ceil(200 / 63) + 1);
    } finally {
      other.close();
    }
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
    expect(r.last.finish?.stopWord).toBeUndefined();
    const stopAt = r.text.slice(2, 4);
    if (stopAt.length === 2) {
      const s = await collect(engine.generate({ id: 's2', prompt: [7, 8, 9], maxTokens: 30, sampling: { temperature: 0 }, stop: [stopAt], ignoreEog: true }));
      expect(s.last.finish?.reason).toBe('stop');
      expect(s.last.finish?.stopWord).toBe(stopAt);
      expect(s.text).toBe(r.text.slice(0, r.text.indexOf(stopAt)));
      const kept = await collect(engine.generate({ id: 's3', prompt: [7, 8, 9], maxTokens: 30, sampling: { temperature: 0 }, stop: [stopAt], ignoreEog: true, includeStopString: true }));
      expect(kept.text).toBe(r.text.slice(0, r.text.indexOf(stopAt)) + stopAt);
    }
  });

  it('ends at a stop token id (also with EOG ignored), and draws no end token before min tokens', async () => {
    const base = { prompt: [7, 8, 9], maxTokens: 16, sampling: { temperature: 0 }, ignoreEog: true };
    const free = await collect(engine.generate({ ...base, id: 'st0' }));
    // The first token not seen before position 3 ends it there (its text left out, as an end token's).
    const at = free.tokens.findIndex((t, i) => i >= 3 && !free.tokens.slice(0, i).includes(t));
    expect(at).toBeGreaterThanOrEqual(3);
    const stopped = await collect(engine.generate({ ...base, id: 'st1', stopTokens: [free.tokens[at]] }));
    expect(stopped.tokens).toEqual(free.tokens.slice(0, at + 1));
    expect(stopped.last.finish?.reason).toBe('stop');
    // min tokens: the same token cannot end it before then; it is simply not drawn, so the output
    // differs from there on and runs on to the limit or a later stop.
    const held = await collect(engine.generate({ ...base, id: 'st2', stopTokens: [free.tokens[at]], minTokens: at + 2 }));
    expect(held.tokens.slice(0, at)).toEqual(free.tokens.slice(0, at));
    expect(held.tokens.slice(0, at + 2)).not.toContain(free.tokens[at]);
    expect(held.tokens.length).toBeGreaterThanOrEqual(at + 2);
    expect(() => engine.generate({ ...base, id: 'st3', stopTokens: [1e9] })).toThrow(/stop token id 1000000000 is outside the vocabulary/);
  });

  it('never draws an end-of-generation token when EOG is ignored (as llama-server bans them), even where it is the likeliest', async () => {
    const eog = [...Array(model.nVocab).keys()].filter((t) => model.tokenizer.isEog(t));
    expect(eog.length).toBeGreaterThan(0);
    const favour = Object.fromEntries(eog.map((t) => [t, 100]));
    const r = await collect(engine.generate({ id: 'ie0', prompt: [7, 8, 9], maxTokens: 12, sampling: { temperature: 0, logitBias: favour }, ignoreEog: true }));
    expect(r.tokens).toHaveLength(12);
    expect(r.tokens.some((t) => eog.includes(t))).toBe(false);
    // Not ignored: the favoured end comes first and ends it.
    const ended = await collect(engine.generate({ id: 'ie1', prompt: [7, 8, 9], maxTokens: 12, sampling: { temperature: 0, logitBias: favour } }));
    expect(ended.tokens).toHaveLength(1);
    expect(eog).toContain(ended.tokens[0]);
  });

  it("answers response format 'json_object' with one JSON object, then ends (constrained decoding)", async () => {
    const piece = (text: string) => {
      for (let id = 0; id < model.nVocab; id++) if (Buffer.from(model.tokenizer.tokenToPiece(id)).toString('latin1') === text) return id;
      throw new Error(`no token for ${text}`);
    };
    // Random weights wander; a bias toward closing quotes and braces lets most objects finish.
    const logitBias = { [piece('"')]: 4, [piece('}')]: 6 };
    const prompt = model.tokenizer.tokenize('Answer in JSON:', { addSpecial: true });
    const runs = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((seed) => collect(engine.generate({ id: `json${seed}`, prompt, maxTokens: 48, sampling: { temperature: 1, seed, logitBias }, responseFormat: 'json_object' }))),
    );
    let complete = 0;
    for (const r of runs) {
      if (r.last.finish?.reason === 'stop') {
        const v = JSON.parse(r.text);
        expect(v !== null && typeof v === 'object' && !Array.isArray(v)).toBe(true);
        complete++;
      } else {
        expect(r.last.finish?.reason).toBe('length');
        expect(new JsonRecognizer().feed(Buffer.from(r.text))).toBe(true);
      }
    }
    expect(complete).toBeGreaterThanOrEqual(3);
    // Unconstrained, the same requests are not JSON.
    const free = await collect(engine.generate({ id: 'json-free', prompt, maxTokens: 48, sampling: { temperature: 1, seed: 1, logitBias } }));
    expect(() => JSON.parse(free.text)).toThrow();
  });

  it('refuses bad requests with clear errors', () => {
    expect(() => engine.generate({ id: 'e', prompt: [], maxTokens: 1 })).toThrow(/prompt is empty/);
    expect(() => engine.generate({ id: 'e', prompt: [1e9], maxTokens: 1 })).toThrow(/outside the vocabulary/);
    expect(() => engine.generate({ id: 'e', prompt: new Array(300).fill(1), maxTokens: 1 })).toThrow(/context holds 256/);
  });
});

// The copy of another slot's cache start on the other cache layouts: MLA's latent cache and
// sliding-window rings (whose window here still holds the start; one that does not copies nothing).
describe.each(['tiny-deepseek2-lite', 'tiny-gpt-oss'])('BatchEngine: a start copied from another slot on %s', (preset) => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('gives the bits computing it gives', async () => {
    const file = writeTestModel(dir, preset, 'F32');
    await withReuseAndPlain(file, 3, 32, async (e, plain, mine) => {
      const ask = (en: BatchEngine, id: string, prompt: number[]) => collectAll(en.generate({ id, prompt, maxTokens: 8, sampling: { temperature: 0 }, ignoreEog: true, logprobs: true, topLogprobs: 2 }));
      const tok = (t: string) => mine.tokenizer.tokenize(t, { addSpecial: false });
      const sys = tok('System: answer about routers, experts and their caches, briefly and exactly. '.repeat(2));
      await ask(e, 'a', [...sys, ...tok('User: one long question about the first expert and its cache.')]);
      const p = [...sys, ...tok('User: two, three')];
      const r = await ask(e, 'b', p);
      expect(e.stats().promptTokensCopied).toBe(r.last.finish?.cachedPromptTokens);
      expect(r.last.finish?.cachedPromptTokens).toBeGreaterThanOrEqual(sys.length);
      const ref = await ask(plain, 'ref', p);
      expect(r.tokens).toEqual(ref.tokens);
      expect(r.logprobs).toEqual(ref.logprobs);
    });
  }, 60_000);
});

describe('BatchEngine on a recurrent model (tiny-qwen35moe)', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('runs requests together as alone, continues a conversation from its slot and recomputes a prompt that leaves the cached state', async () => {
    const file = writeTestModel(dir, 'tiny-qwen35moe', 'F32');
    await withReuseAndPlain(file, 3, 16, async (e, plain, mine) => {
      const ask = (en: BatchEngine, id: string, prompt: number[], maxTokens = 8) =>
        collectAll(en.generate({ id, prompt, maxTokens, sampling: { temperature: 0 }, ignoreEog: true, logprobs: true, topLogprobs: 2 }));
      const tok = (t: string, addSpecial = false) => mine.tokenizer.tokenize(t, { addSpecial });
      const ps = ['User: tell me about experts. Assistant:', 'The router of a mixture of experts', 'a b c d e f g h i j k l m n o p'].map((t) => tok(t, true));
      const alone: { tokens: number[] }[] = [];
      for (const [i, p] of ps.entries()) alone.push(await ask(plain, `alone${i}`, p));
      const together = await Promise.all(ps.map((p, i) => ask(plain, `together${i}`, p)));
      together.forEach((t, i) => expect(t.tokens).toEqual(alone[i].tokens));
      // A conversation's next turn continues the state its slot holds (every position of it).
      const a1 = ps[0];
      const r1 = await ask(e, 't1', a1, 6);
      const a2 = [...a1, ...r1.tokens, ...tok(' User: and then? Assistant:')];
      const r2 = await ask(e, 't2', a2);
      expect(r2.last.finish?.cachedPromptTokens).toBe(a1.length + r1.tokens.length - 1);
      const ref2 = await ask(plain, 'ref2', a2);
      expect(r2.tokens).toEqual(ref2.tokens);
      expect(r2.logprobs).toEqual(ref2.logprobs);
      // A prompt sharing only the start of a cached conversation cannot cut the state back: it is computed whole.
      const b = [...a1, ...tok(' something else entirely, a new question')];
      const rb = await ask(e, 'b', b);
      expect(rb.last.finish?.cachedPromptTokens).toBe(0);
      expect(e.stats().promptTokensCopied).toBe(0);
      const refb = await ask(plain, 'refb', b);
      expect(rb.tokens).toEqual(refb.tokens);
      expect(rb.logprobs).toEqual(refb.logprobs);
    });
  }, 60_000);
});

// A recurrent state cannot be cut back, so a prompt that shares only a start with the cache is
// computed whole, unless a context checkpoint (the states one token before an earlier prompt's
// end) lies within what it shares: a regenerated answer, or a next turn whose template drops the
// last answer's reasoning, computes only what follows the checkpoint, with the same bits.
describe.each(['tiny-qwen35moe', 'tiny-nemotron-h-moe'])('BatchEngine context checkpoints on %s', (preset) => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('a regenerated prompt and a turn that rewrites the last answer go on from the checkpoint, as computing them whole', async () => {
    const file = writeTestModel(dir, preset, 'F32');
    await withReuseAndPlain(file, 2, 32, async (e, plain, mine) => {
      const ask = (en: BatchEngine, id: string, prompt: number[]) =>
        collectAll(en.generate({ id, prompt, maxTokens: 6, sampling: { temperature: 0 }, ignoreEog: true, logprobs: true, topLogprobs: 2 }));
      const tok = (t: string, addSpecial = false) => mine.tokenizer.tokenize(t, { addSpecial });
      const p1 = tok('System: you answer questions about experts, routers and caches, briefly and exactly, in plain words. User: which experts does the router pick for a token, and why those? Assistant:', true);
      expect(p1.length).toBeGreaterThanOrEqual(64);
      const r1 = await ask(e, 'r1', p1);
      expect(r1.last.finish?.cachedPromptTokens).toBe(0);
      expect(e.stats().contextCheckpoints.count).toBe(1);
      expect(e.stats().contextCheckpoints.bytes).toBe(mine.recurrentStates(0).byteLength);
      // Regenerate: the same prompt again (its slot holds prompt + answer, which the state cannot drop).
      const again = await ask(e, 'again', p1);
      expect(again.last.finish?.cachedPromptTokens).toBe(p1.length - 1);
      expect(again.tokens).toEqual(r1.tokens);
      expect(again.logprobs).toEqual(r1.logprobs);
      // The next turn with the answer rewritten (a template that strips reasoning).
      const p2 = [...p1, ...tok(' the top ones.'), ...tok(' User: and how many of them? Assistant:')];
      const r2 = await ask(e, 'r2', p2);
      expect(r2.last.finish?.cachedPromptTokens).toBe(p1.length - 1);
      const ref2 = await ask(plain, 'ref2', p2);
      expect(r2.tokens).toEqual(ref2.tokens);
      expect(r2.logprobs).toEqual(ref2.logprobs);
      expect(e.stats().promptTokensFromCheckpoints).toBe(2 * (p1.length - 1));
      // Two per slot, the newest kept: p1's and p2's.
      expect(e.stats().contextCheckpoints.count).toBe(2);
      // A prompt that leaves p1 before the checkpoint starts over.
      const p3 = [...p1.slice(0, 20), ...tok(' something else entirely: a question about the cache and its policies, in detail')];
      const r3 = await ask(e, 'r3', p3);
      expect(r3.last.finish?.cachedPromptTokens).toBe(0);
      const ref3 = await ask(plain, 'ref3', p3);
      expect(r3.logprobs).toEqual(ref3.logprobs);
    });
  }, 120_000);

  it('a prompt whose every token the slot holds (the last answer was empty) goes on from the checkpoint', async () => {
    const file = writeTestModel(dir, preset, 'F32');
    await withReuseAndPlain(file, 1, 32, async (e, plain, mine) => {
      const p = mine.tokenizer.tokenize('a long prompt about experts, routers and caches '.repeat(6), { addSpecial: true });
      const req = (id: string, maxTokens: number) => ({ id, prompt: p, maxTokens, sampling: { temperature: 0 }, ignoreEog: true, logprobs: true });
      await collectAll(e.generate(req('prefill-only', 0)));
      expect(mine.seqLen(0)).toBe(p.length);
      const r = await collectAll(e.generate(req('again', 4)));
      expect(r.last.finish?.cachedPromptTokens).toBe(p.length - 1);
      const ref = await collectAll(plain.generate(req('ref', 4)));
      expect(r.logprobs).toEqual(ref.logprobs);
    });
  }, 60_000);

  it('contextCheckpoints 0 keeps none; a bad count is refused', async () => {
    const file = writeTestModel(dir, preset, 'F32');
    const m = EngineModel.load(file, { nSeqMax: 1, kvType: 'f32', threads: 2, nCtx: 256 });
    const e = new BatchEngine(m, { contextCheckpoints: 0 });
    try {
      const p = m.tokenizer.tokenize('a long prompt about experts, routers and caches '.repeat(6), { addSpecial: true });
      for (const id of ['x', 'y']) {
        const r = await collectAll(e.generate({ id, prompt: p, maxTokens: 3, sampling: { temperature: 0 }, ignoreEog: true }));
        expect(r.last.finish?.cachedPromptTokens).toBe(0);
      }
      expect(e.stats().contextCheckpoints).toEqual({ count: 0, bytes: 0 });
      expect(() => new BatchEngine(m, { contextCheckpoints: -1 })).toThrow(/contextCheckpoints must be a non-negative integer/);
    } finally {
      await e.close();
      m.close();
    }
  }, 60_000);
});

describe('BatchEngine with LoRA adapters (per-request scales, as llama-server takes them)', () => {
  const dir = tempDir();
  let model: EngineModel;
  let engine: BatchEngine;
  beforeAll(() => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const adapter = writeTestModel(dir, 'tiny-qwen3moe', 'F32', 7, ['--lora-rank', '8', '--lora-alpha', '32', '--lora-targets', 'attn_q,attn_v,ffn_gate_exps,ffn_up_exps,ffn_down_exps']);
    model = EngineModel.load(file, { nSeqMax: 3, kvType: 'f32', threads: 2, nCtx: 256, lora: [{ path: adapter, scale: 1 }] });
    engine = new BatchEngine(model, { maxBatchTokens: 32 });
  }, 60_000);
  afterAll(async () => {
    await engine.close();
    model.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('runs sequences with different scales in one pass, each as it runs alone; a cache is reused only at the same scales', async () => {
    const prompt = model.tokenizer.tokenize('Adapters change what the model says', { addSpecial: true });
    const req = (id: string, loraScales?: number[]) => ({ id, prompt, maxTokens: 10, sampling: { temperature: 0 }, ignoreEog: true, logprobs: true, loraScales });
    expect(model.loraScales).toEqual([1]);
    const on = await collectAll(engine.generate(req('on')));
    const off = await collectAll(engine.generate(req('off', [0])));
    const half = await collectAll(engine.generate(req('half', [0.5])));
    // The adapter changes the output, and the model's default is its load scale.
    expect(off.logprobs).not.toEqual(on.logprobs);
    expect(half.logprobs).not.toEqual(on.logprobs);
    expect(off.last.finish?.cachedPromptTokens).toBe(0);
    expect(half.last.finish?.cachedPromptTokens).toBe(0);
    const again = await collectAll(engine.generate(req('on-again', [1])));
    expect(again.logprobs).toEqual(on.logprobs);
    expect(again.last.finish?.cachedPromptTokens).toBeGreaterThan(0);
    // Together in one batch (three slots, three scales): each as alone.
    const together = await Promise.all([req('t-on'), req('t-off', [0]), req('t-half', [0.5])].map((r) => collectAll(engine.generate(r))));
    expect(together.map((t) => t.logprobs)).toEqual([on.logprobs, off.logprobs, half.logprobs]);
    expect(() => engine.generate(req('bad', [1, 2]))).toThrow('LoRA scales: 2 given, the model has 1 adapter');
    expect(() => engine.generate(req('nan', [NaN]))).toThrow('LoRA scales must be finite numbers');
  }, 60_000);
});

describe("BatchEngine with context shift (llama-server's --context-shift)", () => {
  const dir = tempDir();
  let model: EngineModel;
  let ref: EngineModel;
  const N_CTX = 40;
  beforeAll(() => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    model = EngineModel.load(file, { nSeqMax: 3, kvType: 'f32', threads: 2, nCtx: N_CTX });
    ref = EngineModel.load(file, { nSeqMax: 1, kvType: 'f32', threads: 2, nCtx: N_CTX });
  }, 60_000);
  afterAll(() => {
    model.close();
    ref.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /**
   * Greedy generation with llama-server's shift done by hand on the model: the cache fills, then
   * `discard` (default half the rest) of the positions after `keep` go, and the pending token is fed
   * after what stays.
   */
  async function byHand(prompt: number[], maxTokens: number, keep: number, discard = 0, window = N_CTX): Promise<{ tokens: number[]; shifted: number }> {
    ref.truncate(0, 0);
    // (End-of-generation tokens are never drawn: the requests ignore them, as llama-server bans them.)
    const argmax = (row: Float32Array) => row.reduce((b, v, i) => (v > row[b] && !ref.tokenizer.isEog(i) ? i : b), ref.tokenizer.isEog(0) ? 1 : 0);
    const out: number[] = [];
    let row = await ref.evaluate(0, prompt, 'last');
    let shifted = 0;
    for (;;) {
      const t = argmax(row);
      out.push(t);
      if (out.length >= maxTokens) break;
      if (prompt.length + out.length - shifted >= window) {
        const len = ref.seqLen(0);
        const k = Math.min(window - 4, keep, len);
        const d = Math.min(discard || Math.floor((len - k) / 2), len - k - 1);
        ref.shiftContext(0, k, d);
        shifted += d;
      }
      row = await ref.evaluate(0, [t], 'last');
    }
    return { tokens: out, shifted };
  }

  it('generates past the context, each sequence of a shared batch as it runs alone, shifting as llama-server does', async () => {
    const engine = new BatchEngine(model, { maxBatchTokens: 16 });
    try {
      const tok = (t: string) => model.tokenizer.tokenize(t, { addSpecial: true });
      const cases = [
        { prompt: tok('The expert router picks'), maxTokens: 70, keep: 0, discard: 0 },
        { prompt: tok('Once upon a time in a land far away'), maxTokens: 55, keep: -1, discard: 0 },
        { prompt: tok('a b c d'), maxTokens: 90, keep: 2, discard: 7 },
      ];
      const addBos = model.tokenizer.vocab.addBos ? 1 : 0;
      const results = await Promise.all(
        cases.map((c, i) =>
          collect(engine.generate({ id: `s${i}`, prompt: c.prompt, maxTokens: c.maxTokens, sampling: { temperature: 0 }, ignoreEog: true, contextShift: { keep: c.keep, discard: c.discard } })),
        ),
      );
      for (let i = 0; i < cases.length; i++) {
        const c = cases[i];
        const want = await byHand(c.prompt, c.maxTokens, (c.keep < 0 ? c.prompt.length : c.keep) + addBos, c.discard);
        expect(results[i].tokens.length).toBe(c.maxTokens);
        expect(results[i].tokens).toEqual(want.tokens);
        expect(results[i].last.finish?.reason).toBe('length');
        expect(want.shifted).toBeGreaterThan(0);
        expect(results[i].last.finish?.contextShifted).toBe(want.shifted);
      }
      // Without a shift the same request stops when prompt and output fill the context.
      const plain = await collect(engine.generate({ id: 'plain', prompt: cases[0].prompt, maxTokens: 70, sampling: { temperature: 0 }, ignoreEog: true }));
      expect(plain.tokens.length).toBe(N_CTX - cases[0].prompt.length);
      expect(plain.tokens).toEqual(results[0].tokens.slice(0, plain.tokens.length));
      expect(plain.last.finish?.contextShifted).toBe(0);
      // A request's own smaller window (Ollama's num_ctx) shifts there.
      const win = await collect(engine.generate({ id: 'win', prompt: cases[0].prompt, maxTokens: 40, sampling: { temperature: 0 }, ignoreEog: true, contextWindow: 24, contextShift: { keep: 0 } }));
      expect(win.tokens).toEqual((await byHand(cases[0].prompt, 40, addBos, 0, 24)).tokens);
      const winPlain = await collect(engine.generate({ id: 'win2', prompt: cases[0].prompt, maxTokens: 40, sampling: { temperature: 0 }, ignoreEog: true, contextWindow: 24 }));
      expect(winPlain.tokens.length).toBe(24 - cases[0].prompt.length);
      // The next turn of a shifted conversation reuses only what the cache still holds in order.
      const again = await collect(engine.generate({ id: 'again', prompt: cases[2].prompt, maxTokens: 5, sampling: { temperature: 0 }, ignoreEog: true }));
      expect(again.tokens).toEqual(results[2].tokens.slice(0, 5));
      expect(again.last.finish?.cachedPromptTokens).toBeLessThan(cases[2].prompt.length);
      expect(() => engine.generate({ id: 'bad', prompt: cases[0].prompt, maxTokens: 4, contextShift: { keep: -2 } })).toThrow('n_keep must be an integer >= -1, got -2');
      expect(() => engine.generate({ id: 'bad2', prompt: cases[0].prompt, maxTokens: 4, contextShift: { keep: 0, discard: 1.5 } })).toThrow('n_discard must be a non-negative integer, got 1.5');
      expect(() => engine.generate({ id: 'bad3', prompt: cases[0].prompt, maxTokens: 4, contextWindow: 3 })).toThrow("the request's context window (num_ctx) holds 3");
    } finally {
      await engine.close();
    }
  }, 120_000);

  it('ends a sequence with a clear error where the model cannot shift (a sliding-window ring), the others unharmed', async () => {
    const file = writeTestModel(dir, 'tiny-gpt-oss', 'F32');
    const m = EngineModel.load(file, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 48, nBatch: 16 });
    const engine = new BatchEngine(m, { maxBatchTokens: 16 });
    try {
      const prompt = m.tokenizer.tokenize('hello there', { addSpecial: true });
      const [shifting, other] = await Promise.all([
        collect(engine.generate({ id: 'x', prompt, maxTokens: 60, sampling: { temperature: 0 }, ignoreEog: true, contextShift: { keep: 0 } })),
        collect(engine.generate({ id: 'y', prompt, maxTokens: 20, sampling: { temperature: 0 }, ignoreEog: true })),
      ]);
      expect(shifting.last.finish?.reason).toBe('error');
      expect(shifting.last.finish?.error?.message).toMatch(/context shift: KV layer \d+ keeps a sliding window in a ring/);
      expect(shifting.tokens.length).toBe(48 - prompt.length);
      expect(other.last.finish?.reason).toBe('length');
      expect(other.tokens).toEqual(shifting.tokens.slice(0, 20));
    } finally {
      await engine.close();
      m.close();
    }
  }, 120_000);
});

describe("BatchEngine slot save / restore / erase (llama-server's /slots actions)", () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each(['tiny-qwen3moe', 'tiny-deepseek2-lite', 'tiny-gpt-oss', 'tiny-deepseek32', 'tiny-qwen35moe'])('%s: a restored slot serves the next turn from the file, the same bits as computing it', async (preset) => {
    const file = writeTestModel(dir, preset, 'F32');
    // nBatch 8: gpt-oss's ring (window 8 + a batch) is 15 rows, which the prompt passes (mirrored).
    const load = () => EngineModel.load(file, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 256, nBatch: 8 });
    const ask = (e: BatchEngine, id: string, prompt: number[], maxTokens: number) =>
      collectAll(e.generate({ id, prompt, maxTokens, sampling: { temperature: 0 }, ignoreEog: true, logprobs: true, topLogprobs: 2 }));
    const a = load(), b = load(), c = load();
    const ea = new BatchEngine(a), eb = new BatchEngine(b), ec = new BatchEngine(c);
    try {
      // gpt-oss's 8-position window: a prompt long enough that its ring turned mirrored.
      const p1 = a.tokenizer.tokenize('User: tell me about the experts and the router. Assistant: the router picks', { addSpecial: true });
      const r1 = await ask(ea, 't1', p1, 6);
      const slot = ea.slotStates().find((s) => s.cachedTokens > 0)!.id;
      const saved = ea.saveSlot(slot);
      expect(saved.tokens).toEqual([...p1, ...r1.tokens.slice(0, -1)]);
      const path = `${dir}/${preset}.slot`;
      const bytes = writeSlotFile(path, a, saved.tokens, saved.lora, saved.state);
      // Another engine (another process, in practice) restores it into its slot 1.
      const { header, state } = readSlotFile(path, b);
      expect(header.tokens).toEqual(saved.tokens);
      eb.restoreSlot(1, header.tokens, header.lora, state);
      expect(eb.slotStates()[1].cachedTokens).toBe(saved.tokens.length);
      const p2 = [...p1, ...r1.tokens, ...a.tokenizer.tokenize(' User: and then? Assistant:')];
      const restored = await ask(eb, 't2', p2, 8);
      const fresh = await ask(ec, 't2', p2, 8);
      expect(restored.last.finish?.cachedPromptTokens).toBe(saved.tokens.length);
      expect(fresh.last.finish?.cachedPromptTokens).toBe(0);
      expect(restored.tokens).toEqual(fresh.tokens);
      expect(restored.logprobs).toEqual(fresh.logprobs);
      expect(bytes).toBeGreaterThan(0);
      // Erase: the slot holds nothing, the next request computes everything.
      expect(eb.eraseSlot(1)).toBeGreaterThan(0);
      expect(eb.slotStates()[1].cachedTokens).toBe(0);
    } finally {
      await Promise.all([ea.close(), eb.close(), ec.close()]);
      a.close();
      b.close();
      c.close();
    }
  }, 120_000);

  it("runs a request pinned to a slot there (llama-server's id_slot), waiting for it while the others go past, and says which slot ran each", async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const m = EngineModel.load(file, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 128 });
    const e = new BatchEngine(m);
    try {
      const prompt = m.tokenizer.tokenize('pinned', { addSpecial: true });
      const order: string[] = [];
      const run = (id: string, maxTokens: number, slot?: number) =>
        collect(e.generate({ id, prompt, maxTokens, sampling: { temperature: 0 }, ignoreEog: true, slot })).then((r) => {
          order.push(id);
          return r;
        });
      // Two pinned to slot 1: the second waits for the first; the unpinned one takes slot 0 meanwhile.
      const [a, b, c] = await Promise.all([run('a', 12, 1), run('b', 2, 1), run('c', 2)]);
      expect(a.last.finish?.slot).toBe(1);
      expect(b.last.finish?.slot).toBe(1);
      expect(c.last.finish?.slot).toBe(0);
      expect(order.indexOf('c')).toBeLessThan(order.indexOf('b'));
      expect(order.indexOf('a')).toBeLessThan(order.indexOf('b'));
      expect(b.tokens).toEqual(a.tokens.slice(0, 2));
      expect(() => e.generate({ id: 'x', prompt, maxTokens: 1, slot: 2 })).toThrow('slot 2 does not exist (0..1)');
    } finally {
      await e.close();
      m.close();
    }
  }, 60_000);

  it('refuses a file of another model or cache type, a damaged one and a busy or missing slot, naming why; the slot stays usable', async () => {
    const f1 = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const f2 = writeTestModel(dir, 'tiny-llama', 'F32');
    const m1 = EngineModel.load(f1, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 64 });
    const m1q = EngineModel.load(f1, { nSeqMax: 2, kvType: 'q8_0', threads: 2, nCtx: 64 });
    const m2 = EngineModel.load(f2, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 64 });
    const e1 = new BatchEngine(m1), e1q = new BatchEngine(m1q);
    try {
      const prompt = m1.tokenizer.tokenize('hello experts', { addSpecial: true });
      await collect(e1.generate({ id: 'x', prompt, maxTokens: 3, sampling: { temperature: 0 } }));
      const slot = e1.slotStates().find((s) => s.cachedTokens > 0)!.id;
      const s = e1.saveSlot(slot);
      const path = `${dir}/x.slot`;
      writeSlotFile(path, m1, s.tokens, s.lora, s.state);
      expect(() => readSlotFile(path, m2)).toThrow(/slot file .*x\.slot: saved for another model \(qwen3moe, 2 layers/);
      // The same file under an override computes other rows: refused, naming both loads.
      const m1o = EngineModel.load(f1, { nSeqMax: 2, kvType: 'f32', threads: 2, nCtx: 64, kvOverrides: [{ key: 'qwen3moe.expert_used_count', type: 'int', value: 1 }] });
      try {
        expect(() => readSlotFile(path, m1o)).toThrow(/x\.slot: saved from the model loaded with no overrides, control vectors or adapters; this load has override-kv qwen3moe\.expert_used_count=int:1/);
        const s2 = `${dir}/o.slot`;
        writeSlotFile(s2, m1o, s.tokens, s.lora, s.state);
        expect(readSlotFile(s2, m1o).header.model.compute).toBe('override-kv qwen3moe.expert_used_count=int:1');
        expect(() => readSlotFile(s2, m1)).toThrow(/o\.slot: saved from the model loaded with override-kv qwen3moe\.expert_used_count=int:1; this load has none/);
      } finally {
        m1o.close();
      }
      const { header, state } = readSlotFile(path, m1q);
      expect(() => e1q.restoreSlot(0, header.tokens, header.lora, state)).toThrow('sequence state does not fit this model: cache types K F32 / V F32, the model\'s are Q8_0 / Q8_0');
      fs.writeFileSync(`${dir}/bad.slot`, Buffer.concat([fs.readFileSync(path).subarray(0, 60)]));
      expect(() => readSlotFile(`${dir}/bad.slot`, m1)).toThrow(/bad\.slot: (truncated header|damaged header)/);
      const cut = fs.readFileSync(path);
      fs.writeFileSync(`${dir}/cut.slot`, cut.subarray(0, cut.length - 10));
      const c = readSlotFile(`${dir}/cut.slot`, m1);
      expect(() => e1.restoreSlot(0, c.header.tokens, c.header.lora, c.state)).toThrow('sequence state: truncated');
      expect(() => readSlotFile(`${dir}/none.slot`, m1)).toThrow(/no such file/i);
      expect(() => e1.saveSlot(7)).toThrow('slot 7 does not exist (0..1)');
      const running = collect(e1.generate({ id: 'busy', prompt, maxTokens: 200, sampling: { temperature: 0 }, ignoreEog: true }));
      // (Polled: on a loaded machine the request may take more than a few ms to get its slot.)
      for (let i = 0; i < 500 && !e1.slotStates().some((st) => st.processing); i++) await new Promise((r) => setTimeout(r, 10));
      const busy = e1.slotStates().find((st) => st.processing)!.id;
      expect(() => e1.saveSlot(busy)).toThrow(`slot ${busy} is busy with a request`);
      e1.cancel('busy');
      await running;
      // The refused restores left slot 0 working.
      const after = await collect(e1q.generate({ id: 'y', prompt, maxTokens: 3, sampling: { temperature: 0 } }));
      expect(after.last.finish?.reason).not.toBe('error');
    } finally {
      await Promise.all([e1.close(), e1q.close()]);
      m1.close();
      m1q.close();
      m2.close();
    }
  }, 120_000);
});
