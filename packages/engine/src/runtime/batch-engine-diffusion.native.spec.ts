// A diffusion model's requests in the batch engine (tiny-llada): each runs its loop as one job
// alone on the model, with the loop's own output (diffusionGenerateWith), streamed as the canvas
// settles (a piece after each pass that unmasks more of its start); requests behind it wait
// for it and are admitted once it is done; cancellation stops it between steps; settings that
// cannot apply are refused at once.
import fs from 'node:fs';

import { diffusionGenerateWith, diffusionModelSettings } from '../model/diffusion';
import { EngineModel } from '../model/model';
import { tempDir, writeTestModel } from '../testing';
import { BatchEngine, type GenerationChunk, type GenerationRequest } from './batch-engine';

async function collect(it: AsyncIterable<GenerationChunk>): Promise<GenerationChunk[]> {
  const out: GenerationChunk[] = [];
  for await (const c of it) out.push(c);
  return out;
}

describe('BatchEngine with a diffusion model', () => {
  const dir = tempDir();
  let model: EngineModel;
  let engine: BatchEngine;
  let prompt: number[];
  beforeAll(() => {
    model = EngineModel.load(writeTestModel(dir, 'tiny-llada', 'F32'), { threads: 2, nCtx: 128, nSeqMax: 2 });
    engine = new BatchEngine(model);
    prompt = model.tokenizer.tokenize('Experts stream', { addSpecial: true, parseSpecial: true });
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
    model?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const req = (id: string, o: Partial<GenerationRequest> = {}): GenerationRequest => ({ id, prompt, maxTokens: 8, sampling: { temperature: 0, seed: 1 }, diffusion: { steps: 4 }, ...o });

  it("gives the loop's text; two requests at once run one after the other, never together", async () => {
    const mask = diffusionModelSettings(model).maskTokenId;
    let together = 0;
    const poll = setInterval(() => (together = Math.max(together, engine.slotStates().filter((s) => s.processing).length)), 0);
    const [a, b] = await Promise.all([collect(engine.generate(req('a'))), collect(engine.generate(req('b', { sampling: { temperature: 0.8, topP: 0.9, seed: 5 }, diffusion: { steps: 8, algorithm: 2 } })))]);
    clearInterval(poll);
    expect(together).toBe(1);
    for (const [chunks, params] of [
      [a, { steps: 4, algorithm: 'confidence', temperature: 0, topP: 1, seed: 1 }],
      [b, { steps: 8, algorithm: 'margin', temperature: 0.8, topP: 0.9, seed: 5 }],
    ] as const) {
      const r = await diffusionGenerateWith(model, prompt, 8, { ...params, topK: 0, schedule: { kind: 'block', blockLength: 32 } });
      const tokens = Array.from(r.generated).filter((t) => t !== mask);
      expect(chunks.flatMap((c) => c.tokens)).toEqual(tokens);
      expect(chunks.map((c) => c.text).join('')).toBe(model.tokenizer.detokenize(tokens));
      const fin = chunks[chunks.length - 1].finish!;
      expect(fin).toEqual(expect.objectContaining({ reason: 'length', promptTokens: prompt.length, completionTokens: 8 }));
    }
  }, 60_000);

  it('streams the canvas as it settles: each piece after the pass that unmasked its tokens, together the whole text, cut by stop strings as whole, the loop ended there', async () => {
    const mask = diffusionModelSettings(model).maskTokenId;
    // Three blocks of 8, two passes each: the settled start grows at least block by block.
    const nGen = 24;
    const settings = { steps: 6, algorithm: 'confidence', temperature: 0, topP: 1, topK: 0, seed: 1, schedule: { kind: 'block', blockLength: 8 } } as const;
    // The loop's canvas before each pass (onStep: after the passes before it), then at the end: how
    // much of the generated part had settled (no mask from its start) after each pass.
    const settledAfter: number[] = [];
    const settledOf = (c: Int32Array) => {
      let n = 0;
      while (n < nGen && c[prompt.length + n] !== mask) n++;
      return n;
    };
    const r = await diffusionGenerateWith(model, prompt, nGen, settings, { onStep: (s) => void (settledAfter[s.step] = settledOf(s.canvas)) });
    settledAfter[r.steps] = settledOf(r.canvas);
    expect(r.steps).toBe(6);
    const tokens = Array.from(r.generated).filter((t) => t !== mask);
    const whole = model.tokenizer.detokenize(tokens);

    const chunks = await collect(engine.generate(req('s', { maxTokens: nGen, diffusion: { steps: 6, blockLength: 8 } })));
    const pieces = chunks.filter((c) => c.tokens.length);
    expect(pieces.length).toBeGreaterThan(1);
    expect(new Set(pieces.map((c) => c.diffusionPass)).size).toBe(pieces.length);
    // Each piece: what had settled after its pass and not before, sent after that pass.
    let at = 0;
    for (const c of pieces) {
      const pass = c.diffusionPass!;
      expect(at).toBe(settledAfter[pass - 1]);
      at += c.tokens.length;
      expect(at).toBe(settledAfter[pass]);
    }
    // Every pass that settled more sent it then.
    expect(pieces.map((c) => c.diffusionPass)).toEqual(settledAfter.flatMap((n, pass) => (pass > 0 && n > settledAfter[pass - 1] ? [pass] : [])));
    expect(chunks.flatMap((c) => c.tokens)).toEqual(tokens);
    expect(chunks.map((c) => c.text).join('')).toBe(whole);
    expect(chunks[chunks.length - 1].finish).toEqual(expect.objectContaining({ reason: 'length', promptTokens: prompt.length, completionTokens: nGen }));

    // A stop string across two pieces: the text before it, as the whole text cut there, finish stop.
    const texts = pieces.map((c) => c.text);
    const k = texts.findIndex((t, i) => i + 1 < texts.length && [...t].length >= 2 && texts[i + 1].length >= 1);
    expect(k).toBeGreaterThanOrEqual(0);
    const stop = [...texts[k]].slice(-2).join('') + [...texts[k + 1]][0];
    const stepsBefore = engine.stats().steps;
    const cut = await collect(engine.generate(req('c', { maxTokens: nGen, stop: [stop], diffusion: { steps: 6, blockLength: 8 } })));
    expect(cut.map((c) => c.text).join('')).toBe(whole.slice(0, whole.indexOf(stop)));
    // The stop string ends in the piece of pass `cutPass`: the loop stops before its next pass,
    // and the tokens settled then are what it generated.
    const cutPass = pieces[k + 1].diffusionPass!;
    expect(cutPass).toBeLessThan(r.steps);
    expect(engine.stats().steps - stepsBefore).toBe(cutPass);
    expect(cut[cut.length - 1].finish).toEqual(expect.objectContaining({ reason: 'stop', stopWord: stop, completionTokens: settledAfter[cutPass] }));
    expect(cut.flatMap((c) => c.tokens)).toEqual(tokens.slice(0, settledAfter[cutPass]));
  }, 60_000);

  it('a request behind a running loop waits for it; cancelling the loop stops it before its next step and admits the next', async () => {
    // (The timestep schedule over a million passes unmasks nothing until near the end.)
    const long = collect(engine.generate(req('long', { diffusion: { steps: 1_000_000, eps: 0 } })));
    await new Promise((r) => setTimeout(r, 50));
    let nextDone = false;
    const next = collect(engine.generate(req('next'))).then((c) => ((nextDone = true), c));
    await new Promise((r) => setTimeout(r, 200));
    expect(nextDone).toBe(false);
    expect(engine.stats()).toEqual(expect.objectContaining({ running: 1, waiting: 1 }));
    const steps = engine.stats().steps;
    expect(engine.cancel('long')).toBe(true);
    const l = await long;
    expect(l[l.length - 1].finish).toEqual(expect.objectContaining({ reason: 'cancelled' }));
    // (Stopped before the next pass: the engine counts a job's passes when it ends.)
    expect(engine.stats().steps - steps).toBeGreaterThan(0);
    const n = await next;
    expect(n[n.length - 1].finish?.reason).toBe('length');
  }, 60_000);

  it('refuses settings that cannot apply to it, and diffusion settings for other models, at once', () => {
    expect(() => engine.generate(req('x', { diffusion: { steps: 5, blockLength: 4 } }))).toThrow(/diffusion steps \(5\) must be a multiple of the block count \(2/);
    expect(() => engine.generate(req('x', { diffusion: { algorithm: 'fastest' } }))).toThrow(/unknown diffusion algorithm 'fastest'/);
    expect(() => engine.generate(req('x', { logprobs: true }))).toThrow(/whole output at once: logprobs cannot apply/);
    expect(() => engine.generate(req('x', { maxTokens: 200 }))).toThrow(/does not fit the context of 128/);
    expect(() => engine.generate(req('x', { diffusion: undefined }))).toThrow(/is a diffusion language model \(llada\)/);
  });
});
