// EAGLE-3 drafts (llama.cpp's eagle3): the draft reads the target's hidden states at three layers
// (the target loaded with extractLayers), drafts as llama.cpp's draft-eagle3 driver does, and greedy
// speculation with it gives exactly the target's tokens (one sequence and batched); its incremental
// cache (catch-up rows, drafted positions rolled back) computes what one full pass computes; files
// and bindings that do not fit are refused clearly. (Logits against llama.cpp: tools' parity-eagle3.)
import fs from 'node:fs';

import { generate } from '../generate';
import { EngineModel, eagle3LayersOf, openGgufMetadata } from '../model/model';
import { BatchEngine, type GenerationChunk } from '../runtime/batch-engine';
import { editedKv, patchedCopy, programOfFile, tempDir, writeTestModel } from '../testing';
import { SpeculativeDecoder } from './speculative-decoder';

const dir = tempDir('kail-eagle3-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function prompts(nVocab: number): number[][] {
  let s = 4242;
  const r = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % nVocab;
  return [[r()], ...Array.from({ length: 3 }, (_, i) => Array.from({ length: 2 + 3 * i }, r))];
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const opts = { threads: 2, nCtx: 64, kvType: 'f32' as const, nSeqMax: 3 };
let targetFile: string;
let plain: EngineModel;
const want = new Map<string, number[][]>();
beforeAll(async () => {
  targetFile = writeTestModel(dir, 'tiny-llama', 'F32');
  plain = EngineModel.load(targetFile, opts);
  const ps = prompts(plain.nVocab);
  const w: number[][] = [];
  for (const p of ps) w.push((await generate(plain, p, { maxTokens: 12, sampling: { temperature: 0 } })).tokens);
  want.set('greedy', w);
}, 60_000);
afterAll(() => plain?.close());

// Its own head over the whole vocabulary; a 512-token draft vocabulary with d2t, norm_before_fc and
// norm_before_residual; no token_embd / output of its own (the target's, through embeddingsFrom).
describe.each(['tiny-llama-eagle3', 'tiny-llama-eagle3-d2t', 'tiny-llama-eagle3-shared'])('%s', (preset) => {
  let target: EngineModel;
  let draft: EngineModel;
  beforeAll(() => {
    const file = writeTestModel(dir, preset, 'F32');
    const layers = eagle3LayersOf(file)!;
    target = EngineModel.load(targetFile, { ...opts, extractLayers: layers });
    draft = EngineModel.load(file, { ...opts, embeddingsFrom: targetFile });
  });
  afterAll(() => {
    target?.close();
    draft?.close();
  });

  it('binds to the target: the target gives its three layers, the draft reads them', () => {
    expect(target.hiddenWidth).toBe(3 * target.hparams.nEmbd);
    expect(draft.runtime.inputWidth).toBe(3 * target.hparams.nEmbd + draft.hparams.nEmbd);
    expect(draft.nVocab).toBe(preset.endsWith('d2t') ? 512 : target.nVocab);
    expect(draft.summary.bytesPerToken).toBeLessThan(target.summary.bytesPerToken);
  });

  it.each([1, 4])('greedy with k = %i gives exactly the target tokens', async (k) => {
    const spec = new SpeculativeDecoder(target, { draft, k, adaptive: false });
    expect(spec.mode).toBe('eagle3');
    const ps = prompts(target.nVocab);
    for (let i = 0; i < ps.length; i++) expect((await generate(target, ps[i], { maxTokens: 12, sampling: { temperature: 0 }, speculative: spec })).tokens).toEqual(want.get('greedy')![i]);
    const st = spec.stats();
    expect(st.mode).toBe('eagle3');
    expect(st.draftedTokens).toBeGreaterThan(0);
    expect(st.committedTokens).toBe(st.acceptedTokens + st.targetPasses);
    process.stdout.write(`${preset} k=${k}: ${st.draftedTokens} drafted, ${st.acceptedTokens} accepted, ${st.targetPasses} target passes\n`);
  }, 60_000);

  it('greedy with drafts accepted (a logit bias narrows both models to three tokens) gives exactly the target tokens', async () => {
    // The bias goes through both samplers alike; which of the three wins is each model's own choice,
    // so drafts are accepted at some positions and rejected at others.
    const sampling = { temperature: 0, logitBias: { 11: 60, 500: 60, 1001: 60 } };
    const spec = new SpeculativeDecoder(target, { draft, k: 3, adaptive: false });
    for (const p of prompts(target.nVocab).slice(1)) {
      const plainTokens = (await generate(plain, p, { maxTokens: 16, sampling })).tokens;
      expect((await generate(target, p, { maxTokens: 16, sampling, speculative: spec })).tokens).toEqual(plainTokens);
    }
    const st = spec.stats();
    expect(st.acceptedTokens).toBeGreaterThan(0);
    expect(st.acceptedTokens).toBeLessThan(st.draftedTokens);
    process.stdout.write(`${preset} greedy, biased to 3 tokens, k=3: ${st.draftedTokens} drafted, ${st.acceptedTokens} accepted, ${st.targetPasses} target passes\n`);
  }, 60_000);

  it('sampled drafting keeps its bookkeeping when drafts are accepted, and a seed reproduces it', async () => {
    const run = async () => {
      const spec = new SpeculativeDecoder(target, { draft, k: 3, adaptive: false });
      const r = await generate(target, [5, 6, 7], { maxTokens: 24, sampling: { temperature: 3, seed: 11 }, speculative: spec });
      return { tokens: r.tokens, st: spec.stats() };
    };
    const a = await run();
    const b = await run();
    expect(b.tokens).toEqual(a.tokens);
    expect(a.st.acceptedTokens).toBeGreaterThan(0);
    expect(a.st.committedTokens).toBe(a.st.acceptedTokens + a.st.targetPasses);
    process.stdout.write(`${preset} sampled (temperature 3) k=3: ${a.st.draftedTokens} drafted, ${a.st.acceptedTokens} accepted, ${a.st.targetPasses} target passes\n`);
  }, 60_000);

  it('incremental drafting computes what one full draft pass computes', async () => {
    // The target's features of a whole history in one pass, then the draft over every
    // (token p+1, features p) row at position p in one pass: each row's reference logits.
    const history = prompts(target.nVocab)[3];
    const n = history.length;
    const W = draft.runtime.inputWidth;
    const F = target.hiddenWidth;
    target.truncate(2, 0);
    const { hidden } = await target.evaluateWithHidden(2, history, 'all');
    target.truncate(2, 0);
    const embd = new Float32Array((n - 1) * W);
    for (let p = 0; p < n - 1; p++) embd.set(hidden.subarray(p * F, (p + 1) * F), p * W);
    draft.truncate(2, 0);
    const full = await draft.forwardBatch({ tokens: Int32Array.from(history.slice(1)), pos: Int32Array.from({ length: n - 1 }, (_, i) => i), seq: new Int32Array(n - 1).fill(2), output: new Uint8Array(n - 1).fill(1), embd });
    draft.truncate(2, 0);
    // The same rows built as speculation builds them: prefill, then one step at a time, each step
    // drafting (and rolling back) k positions past the history.
    const spec = new SpeculativeDecoder(target, { draft, k: 3, adaptive: false });
    const s = spec.begin(2, { temperature: 0 }, 2);
    const pre = history.slice(0, 3);
    s.recordHidden(0, (await target.evaluateWithHidden(2, pre.slice(0, -1), 'last')).hidden, pre.length - 1);
    const nv = draft.nVocab;
    const d2t = draft.eagle3!.d2t;
    for (let h = pre.length; h <= n; h++) {
      const ctx = history.slice(0, h);
      const d = await s.propose(ctx, 3);
      // The first drafted token is the argmax of the full pass's row for position h-2 (through d2t).
      const row = full.subarray((h - 2) * nv, (h - 1) * nv);
      let best = 0;
      for (let j = 1; j < nv; j++) if (row[j] > row[best]) best = j;
      expect(d.tokens[0]).toBe(d2t ? d2t[best] : best);
      expect(draft.runtime.seqLen(2)).toBe(h - 1);
      const r = await target.evaluateWithHidden(2, [ctx[h - 1]], 'all');
      s.recordHidden(h - 1, r.hidden, 1);
    }
    // The last row recomputed through the cache the steps left behind.
    draft.truncate(2, n - 2);
    const last = await draft.forwardBatch({ tokens: Int32Array.of(history[n - 1]), pos: Int32Array.of(n - 2), seq: Int32Array.of(2), output: Uint8Array.of(1), embd: embd.slice((n - 2) * W) });
    expect(maxAbsDiff(last, full.subarray((n - 2) * nv))).toBeLessThan(1e-4);
    target.truncate(2, 0);
    draft.truncate(2, 0);
  }, 60_000);

  it('batched requests with the EAGLE-3 draft give the target tokens', async () => {
    const spec = new SpeculativeDecoder(target, { draft, k: 3 });
    const engine = new BatchEngine(target, { speculative: spec });
    const ps = prompts(target.nVocab).slice(1);
    const got = await Promise.all(
      ps.map(async (p, i) => {
        const toks: number[] = [];
        const chunks: AsyncIterable<GenerationChunk> = engine.generate({ id: `r${i}`, prompt: p, maxTokens: 12, sampling: { temperature: 0 } });
        for await (const c of chunks) toks.push(...c.tokens);
        return toks;
      }),
    );
    got.forEach((toks, i) => expect(toks).toEqual(want.get('greedy')![i + 1]));
    expect(spec.stats().draftedTokens).toBeGreaterThan(0);
    await engine.close();
  }, 60_000);

  it("refuses to embed with a target whose hidden rows are the draft's layer inputs", async () => {
    const engine = new BatchEngine(target, {});
    expect(() => engine.generate({ id: 'e', prompt: [1, 2, 3], maxTokens: 1, embed: 'mean' })).toThrow(/loaded for an EAGLE-3 or DFlash draft, its hidden rows are the inputs of layers \[\d+, \d+, \d+\], not embeddings/);
    await engine.close();
  });
});

describe('refusals', () => {
  it('a target loaded without the draft layers, or with layers outside it', () => {
    const file = writeTestModel(dir, 'tiny-llama-eagle3', 'F32');
    const draft = EngineModel.load(file, opts);
    try {
      expect(() => new SpeculativeDecoder(plain, { draft })).toThrow(/load the target with extractLayers \[1, 2, 3\]/);
      expect(() => SpeculativeDecoder.fromConfig(plain, { draftPath: file })).toThrow(/EAGLE-3 draft reading target layers \[1, 2, 3\]/);
      expect(() => EngineModel.load(targetFile, { ...opts, extractLayers: [1, 2, 4] })).toThrow(/reads target layer 4; the target has layers 0..3/);
      const other = EngineModel.load(targetFile, { ...opts, extractLayers: [0, 2, 3] });
      try {
        expect(() => new SpeculativeDecoder(other, { draft })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG' }));
      } finally {
        other.close();
      }
    } finally {
      draft.close();
    }
  });

  it("a draft without its own token_embd / output needs its target's, and that target", () => {
    const file = writeTestModel(dir, 'tiny-llama-eagle3-shared', 'F32');
    expect(() => EngineModel.load(file, opts)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/no token_embd.weight or output.weight of its own/) }));
    const other = writeTestModel(dir, 'tiny-llama', 'F32', 2);
    const draft = EngineModel.load(file, { ...opts, embeddingsFrom: other });
    const target = EngineModel.load(targetFile, { ...opts, extractLayers: [1, 2, 3] });
    try {
      expect(() => new SpeculativeDecoder(target, { draft })).toThrow(/takes token_embd \/ output from .*, not from the target/);
    } finally {
      draft.close();
      target.close();
    }
  });

  it('a draft without its target layers, or with a target width its fc does not take', () => {
    const file = writeTestModel(dir, 'tiny-llama-eagle3', 'F32');
    const noLayers = patchedCopy(file, `${dir}/no-layers.gguf`, 'eagle3.target_layers', 'eagle3.target_layerz');
    expect(() => EngineModel.load(noLayers, opts)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/needs metadata 'eagle3.target_layers'/) }));
    expect(eagle3LayersOf(targetFile)).toBeNull();
    const meta = openGgufMetadata(file);
    try {
      const tensors = new Map(meta.tensors.map((t) => [t.name, t]));
      const program = (extra: Parameters<typeof editedKv>[1]) => () => programOfFile(editedKv(meta.metadata, extra), tensors);
      expect(program({})).not.toThrow();
      expect(program({ 'eagle3.target_hidden_size': 128 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/fc.weight is \[768, 256\]; 3 target layers of 128 into 256 need \[384, 256\]/) }));
      expect(program({ 'eagle3.target_layers': [1, 2] })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/exactly three layer indices/) }));
      expect(program({ 'eagle3.block_count': 2 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL' }));
    } finally {
      meta.close();
    }
  });
});
