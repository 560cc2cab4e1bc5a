// Gemma 4 assistant drafts (llama.cpp's gemma4-assistant): the draft attends over its target's KV
// cache (LoadModelOptions.kvSource) and keeps none of its own; greedy speculation with it gives
// exactly the target's tokens over more than 48 tokens (the target's sliding rings wrap), for one
// sequence and for two batched, with drafts accepted (a logit bias) and not; its rows are
// batch-invariant; bindings that do not fit are refused clearly. (Logits against llama.cpp: tools'
// parity-gemma4-assistant.)
import fs from 'node:fs';

import { generate } from '../generate';
import { EngineModel, openGgufMetadata } from '../model/model';
import { buildGemma4Assistant } from '../model/architectures/gemma4-assistant';
import { Metadata, readHParams } from '../model/hparams';
import { BatchEngine, type GenerationChunk } from '../runtime/batch-engine';
import { editedKv, tempDir, writeTestModel } from '../testing';
import { SpeculativeDecoder } from './speculative-decoder';

const dir = tempDir('kail-g4a-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

// (A batch of 8: the target's sliding layers keep a ring of window + 7 rows, which 56 tokens wrap.)
const opts = { threads: 2, nCtx: 96, nBatch: 8, kvType: 'f32' as const, nSeqMax: 2 };
const MAX = 56;
const prompts = [[7], [5, 17, 99, 230, 11, 7]];
// Both samplers narrowed to three tokens: which wins is each model's choice, so drafts are accepted
// at some positions and rejected at others.
const biased = { temperature: 0, logitBias: { 11: 60, 500: 60, 1001: 60 } };
let targetFile: string;
let draftFile: string;
let plain: EngineModel;
let target: EngineModel;
let draft: EngineModel;
const want = new Map<string, number[][]>();
beforeAll(async () => {
  targetFile = writeTestModel(dir, 'tiny-gemma4', 'F32');
  draftFile = writeTestModel(dir, 'tiny-gemma4-assistant', 'F32', 2);
  plain = EngineModel.load(targetFile, opts);
  for (const [name, sampling] of [['greedy', { temperature: 0 }], ['biased', biased]] as const) {
    const w: number[][] = [];
    for (const p of prompts) w.push((await generate(plain, p, { maxTokens: MAX, sampling })).tokens);
    want.set(name, w);
  }
  target = EngineModel.load(targetFile, opts);
  draft = EngineModel.load(draftFile, { ...opts, kvSource: target });
}, 120_000);
afterAll(() => {
  plain?.close();
  draft?.close();
  target?.close();
});

describe('tiny-gemma4 + tiny-gemma4-assistant', () => {
  it('binds to the target: it reads the target hidden rows and keeps no cache', () => {
    expect(draft.runtime.inputWidth).toBe(target.hparams.nEmbd);
    expect(draft.hiddenWidth).toBe(target.hparams.nEmbd);
    expect(draft.nVocab).toBe(target.nVocab);
    expect(draft.program.kvKWidth).toEqual([]);
    expect(draft.generationRefusal()?.message).toMatch(/Gemma 4 assistant draft/);
  });

  it.each([
    ['greedy', 4],
    ['greedy', 1],
    ['biased', 4],
  ] as const)('%s with k = %i gives exactly the target tokens', async (name, k) => {
    const spec = new SpeculativeDecoder(target, { draft, k, adaptive: false });
    expect(spec.mode).toBe('assistant');
    for (let i = 0; i < prompts.length; i++) expect((await generate(target, prompts[i], { maxTokens: MAX, sampling: name === 'biased' ? biased : { temperature: 0 }, speculative: spec })).tokens).toEqual(want.get(name)![i]);
    const st = spec.stats();
    expect(st.draftedTokens).toBeGreaterThan(0);
    expect(st.committedTokens).toBe(st.acceptedTokens + st.targetPasses);
    if (name === 'biased') {
      expect(st.acceptedTokens).toBeGreaterThan(0);
      expect(st.acceptedTokens).toBeLessThan(st.draftedTokens);
    }
    process.stdout.write(`gemma4-assistant ${name} k=${k}: ${st.draftedTokens} drafted, ${st.acceptedTokens} accepted, ${st.targetPasses} target passes\n`);
  }, 120_000);

  it('fromConfig (what kail serve loads) binds a draft file to the target', async () => {
    const spec = SpeculativeDecoder.fromConfig(target, { draftPath: draftFile, k: 4 })!;
    try {
      expect(spec.mode).toBe('assistant');
      expect(spec.drafter!.kvSource).toBe(target);
      expect((await generate(target, prompts[1], { maxTokens: MAX, sampling: biased, speculative: spec })).tokens).toEqual(want.get('biased')![1]);
    } finally {
      spec.close();
    }
  }, 120_000);

  it('two sequences batched give the target tokens', async () => {
    const spec = new SpeculativeDecoder(target, { draft, k: 4, adaptive: false });
    const engine = new BatchEngine(target, { speculative: spec });
    try {
      const got = await Promise.all(
        prompts.map(async (p, i) => {
          const toks: number[] = [];
          const chunks: AsyncIterable<GenerationChunk> = engine.generate({ id: `r${i}`, prompt: p, maxTokens: MAX, sampling: biased });
          for await (const c of chunks) toks.push(...c.tokens);
          return toks;
        }),
      );
      got.forEach((toks, i) => expect(toks).toEqual(want.get('biased')![i]));
      expect(spec.stats().acceptedTokens).toBeGreaterThan(0);
    } finally {
      await engine.close();
    }
  }, 120_000);

  it('draft rows are batch-invariant: alone or beside other rows and sequences, the same bits', async () => {
    target.truncate(0, 0);
    target.truncate(1, 0);
    const T = target.hiddenWidth;
    const a = await target.evaluateWithHidden(0, [3, 9, 27, 81, 243, 729, 5, 15, 45, 135, 405], 'all');
    await target.evaluate(1, [8, 6, 4], 'all');
    const h0 = a.hidden.slice(10 * T, 11 * T);
    const h1 = a.hidden.slice(9 * T, 10 * T);
    const row = (tok: number, pos: number, seq: number, h: Float32Array) => ({ tok, pos, seq, h });
    const run = async (rows: ReturnType<typeof row>[]) => {
      const embd = new Float32Array(rows.length * T);
      rows.forEach((r, i) => embd.set(r.h, i * T));
      return draft.forwardBatchWithHidden({
        tokens: Int32Array.from(rows.map((r) => r.tok)),
        pos: Int32Array.from(rows.map((r) => r.pos)),
        seq: Int32Array.from(rows.map((r) => r.seq)),
        output: new Uint8Array(rows.length).fill(1),
        embd,
      });
    };
    const alone = await run([row(12, 11, 0, h0)]);
    const mixed = await run([row(40, 3, 1, h1), row(7, 11, 0, h1), row(12, 11, 0, h0), row(2, 3, 1, h0)]);
    const V = draft.nVocab;
    expect(Buffer.from(mixed.logits.buffer, 2 * V * 4, V * 4).equals(Buffer.from(alone.logits.buffer, 0, V * 4))).toBe(true);
    expect(Buffer.from(mixed.hidden.buffer, 2 * T * 4, T * 4).equals(Buffer.from(alone.hidden.buffer, 0, T * 4))).toBe(true);
    expect(target.seqLen(0)).toBe(11);
    expect(draft.seqLen(0)).toBe(0);
    target.truncate(0, 0);
    target.truncate(1, 0);
  });
});

describe('refusals', () => {
  it('a draft without its target, or a target that is not gemma4, or kvSource on another model', () => {
    expect(() => EngineModel.load(draftFile, opts)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/load it with kvSource \(its target model\)/) }));
    const llama = EngineModel.load(writeTestModel(dir, 'tiny-llama', 'F32'), opts);
    try {
      expect(() => EngineModel.load(draftFile, { ...opts, kvSource: llama })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/target must be a gemma4 model/) }));
      expect(() => EngineModel.load(targetFile, { ...opts, kvSource: llama })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/kvSource .* is for a Gemma 4 assistant draft/) }));
    } finally {
      llama.close();
    }
    expect(() => EngineModel.load(draftFile, { ...opts, nSeqMax: 3, kvSource: target })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/n_seq_max <= 2/) }));
  });

  it('a draft row not at its target length, over an empty target, or after its target closed', async () => {
    const t = EngineModel.load(targetFile, opts);
    const d = EngineModel.load(draftFile, { ...opts, kvSource: t });
    const embd = new Float32Array(t.hiddenWidth);
    const one = (pos: number) => d.forwardBatchWithHidden({ tokens: Int32Array.of(1), pos: Int32Array.of(pos), seq: Int32Array.of(0), output: Uint8Array.of(1), embd });
    try {
      await expect(one(0)).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/source model \(kv_source\) is empty/) });
      await t.evaluate(0, [1, 2, 3], 'last');
      await expect(one(2)).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/not its source model's length \(3\)/) });
      // While a draft pass reads the target's cache, the target's cache changes and passes wait.
      const pass = d.runtime.forward({ tokens: Int32Array.of(1), pos: Int32Array.of(3), seq: Int32Array.of(0), output: Uint8Array.of(1), embd });
      expect(() => t.runtime.seqTruncate(0, 1)).toThrow(/while a draft model reads it/);
      expect(() => t.runtime.forward({ tokens: Int32Array.of(1), pos: Int32Array.of(3), seq: Int32Array.of(0), output: Uint8Array.of(1) })).toThrow(/a draft model is reading this model's KV cache/);
      await pass;
      expect(t.truncate(0, 2)).toBe(2);
      await t.evaluate(0, [3], 'last');
      expect(() => new SpeculativeDecoder(target, { draft: d })).toThrow(/loaded over the KV cache of .*, not of this target/);
      t.close();
      await expect(one(3)).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/its target was closed/) });
    } finally {
      d.close();
      t.close();
    }
  });

  it("a draft whose heads or window do not fit the target's caches", () => {
    const meta = openGgufMetadata(draftFile);
    try {
      const tensors = new Map(meta.tensors.map((x) => [x.name, x]));
      const build = (extra: Parameters<typeof editedKv>[1]) => () =>
        buildGemma4Assistant(readHParams(new Metadata(editedKv(meta.metadata, extra), 'gemma4-assistant'), tensors), tensors, { hparams: target.hparams, program: target.program, path: targetFile });
      expect(build({})).not.toThrow();
      expect(build({ 'gemma4-assistant.attention.sliding_window': 16 })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/sliding window 16 is wider than its target's 8/) }));
      expect(build({ 'gemma4-assistant.embedding_length_out': 48 })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/target hidden states of 48 floats/) }));
      expect(build({ 'gemma4-assistant.attention.sliding_window_pattern': [false, false] })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG' }));
    } finally {
      meta.close();
    }
  });
});
