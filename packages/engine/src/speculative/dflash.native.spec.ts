// DFlash block-diffusion drafts (llama.cpp's dflash): the draft keeps a KV cache of the target's
// hidden states at its layers (the target loaded with extractLayers) and drafts a whole block per
// pass as llama.cpp's draft-dflash driver does; greedy speculation with it gives exactly the
// target's tokens (one sequence, k up to the block, and batched sequences); the variants kail does
// not run and files that do not fit are refused by name. (Logits against llama.cpp: tools'
// parity-dflash.)
import fs from 'node:fs';

import type { GgufTensorInfo } from '@kailstream/core-native';

import { generate } from '../generate';
import { EngineModel, draftLayersOf, openGgufMetadata } from '../model/model';
import { BatchEngine, type GenerationChunk } from '../runtime/batch-engine';
import { editedKv, programOfFile, tempDir, writeTestModel } from '../testing';
import { dflashRow } from '../model/architectures/dflash';
import { SpeculativeDecoder } from './speculative-decoder';

const dir = tempDir('kail-dflash-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function prompts(nVocab: number): number[][] {
  let s = 777;
  const r = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) % nVocab;
  return [[r()], ...Array.from({ length: 2 }, (_, i) => Array.from({ length: 3 + 9 * i }, r))];
}

const opts = { threads: 2, nCtx: 64, kvType: 'f32' as const, nSeqMax: 2 };
let targetFile: string;
let plain: EngineModel;
const want: number[][] = [];
beforeAll(async () => {
  targetFile = writeTestModel(dir, 'tiny-qwen3', 'F32');
  plain = EngineModel.load(targetFile, opts);
  for (const p of prompts(plain.nVocab)) want.push((await generate(plain, p, { maxTokens: 20, sampling: { temperature: 0 } })).tokens);
}, 60_000);
afterAll(() => plain?.close());

// The target's token_embd / output, target blocks 0 and 1, a block of 8, both ways; its own
// token_embd / output, block 1 alone, a block of 4, causal.
// Its own token_embd and a 512-token draft vocabulary (d2t), a block of 6.
describe.each([
  ['tiny-dflash', [0, 1], 8],
  ['tiny-dflash-own', [1], 4],
  ['tiny-dflash-d2t', [0, 1], 6],
] as const)('%s', (preset, layers, blockSize) => {
  let target: EngineModel;
  let draft: EngineModel;
  beforeAll(() => {
    const file = writeTestModel(dir, preset, 'F32');
    expect(draftLayersOf(file)).toEqual(layers);
    target = EngineModel.load(targetFile, { ...opts, extractLayers: layers });
    draft = EngineModel.load(file, { ...opts, embeddingsFrom: targetFile });
  });
  afterAll(() => {
    target?.close();
    draft?.close();
  });

  it('binds to the target: the target gives its layers, the draft reads them with its row masks', () => {
    expect(target.hiddenWidth).toBe(layers.length * target.hparams.nEmbd);
    expect(draft.runtime.inputWidth).toBe(layers.length * target.hparams.nEmbd + 2 * draft.hparams.nEmbd);
    expect(draft.dflash).toMatchObject({ targetLayers: layers, blockSize, maskToken: target.nVocab - 3, causal: preset === 'tiny-dflash-own' });
    expect(draft.nVocab).toBe(preset === 'tiny-dflash-d2t' ? 512 : target.nVocab);
    expect(draft.dflash!.d2t?.length ?? 0).toBe(preset === 'tiny-dflash-d2t' ? 512 : 0);
    expect(draft.generationRefusal()?.message).toMatch(/is a DFlash draft: it drafts blocks from a target model's hidden states/);
  });

  it.each([1, 4, 7])('greedy with k = %i (at most the block less one) gives exactly the target tokens', async (k) => {
    const spec = new SpeculativeDecoder(target, { draft, k, adaptive: false });
    expect(spec.mode).toBe('dflash');
    const ps = prompts(target.nVocab);
    for (let i = 0; i < ps.length; i++) expect((await generate(target, ps[i], { maxTokens: 20, sampling: { temperature: 0 }, speculative: spec })).tokens).toEqual(want[i]);
    const st = spec.stats();
    expect(st.mode).toBe('dflash');
    // One block of min(k, block - 1) per target pass (fewer when fewer tokens are left to make):
    // with nothing accepted (random weights), pass r of a prompt (r tokens left) drafts min(kk, r - 1).
    const kk = Math.min(k, blockSize - 1);
    expect(st.draftedTokens).toBeLessThanOrEqual(st.targetPasses * kk);
    if (st.acceptedTokens === 0) expect(st.draftedTokens).toBe(ps.length * Array.from({ length: 20 }, (_, r) => Math.min(kk, r)).reduce((x, y) => x + y, 0));
    expect(st.committedTokens).toBe(st.acceptedTokens + st.targetPasses);
    // The draft's cache holds the target's positions only: each block left it.
    expect(draft.runtime.seqLen(0)).toBeLessThan(target.runtime.seqLen(0) + 1);
    process.stdout.write(`${preset} k=${k}: ${st.draftedTokens} drafted, ${st.acceptedTokens} accepted, ${st.targetPasses} target passes\n`);
  }, 60_000);

  it('greedy with drafts accepted (a logit bias narrows both models to three tokens) gives exactly the target tokens', async () => {
    const sampling = { temperature: 0, logitBias: { 11: 60, 500: 60, 1001: 60 } };
    const spec = new SpeculativeDecoder(target, { draft, k: 3, adaptive: false });
    for (const p of prompts(target.nVocab)) {
      const plainTokens = (await generate(plain, p, { maxTokens: 20, sampling })).tokens;
      expect((await generate(target, p, { maxTokens: 20, sampling, speculative: spec })).tokens).toEqual(plainTokens);
    }
    const st = spec.stats();
    expect(st.acceptedTokens).toBeGreaterThan(0);
    expect(st.acceptedTokens).toBeLessThan(st.draftedTokens);
    process.stdout.write(`${preset} greedy, biased to 3 tokens, k=3: ${st.draftedTokens} drafted, ${st.acceptedTokens} accepted, ${st.targetPasses} target passes\n`);
  }, 60_000);

  it('sampled drafting keeps its bookkeeping, and a seed reproduces it', async () => {
    const run = async () => {
      const spec = new SpeculativeDecoder(target, { draft, k: 3, adaptive: false });
      const r = await generate(target, [5, 6, 7], { maxTokens: 16, sampling: { temperature: 3, seed: 11 }, speculative: spec });
      return { tokens: r.tokens, st: spec.stats() };
    };
    const a = await run();
    const b = await run();
    expect(b.tokens).toEqual(a.tokens);
    expect(a.st.committedTokens).toBe(a.st.acceptedTokens + a.st.targetPasses);
  }, 60_000);

  it('a block is batch-invariant bit for bit: alone, or in one pass with another sequence\'s rows', async () => {
    const W = draft.runtime.inputWidth;
    const D = draft.hparams.nEmbd;
    const F = target.hiddenWidth;
    const B = blockSize;
    const rowsOf = async (seq: number, history: number[]) => {
      target.truncate(seq, 0);
      const { hidden } = await target.evaluateWithHidden(seq, history.slice(0, -1), 'all');
      target.truncate(seq, 0);
      const n = history.length - 1;
      const embd = new Float32Array((n + B) * W);
      for (let i = 0; i < n + B; i++) dflashRow(embd, i, W, D, i < n ? hidden.subarray(i * F, (i + 1) * F) : null);
      return {
        tokens: Array.from({ length: n + B }, (_, i) => (i === n ? history[n] : draft.dflash!.maskToken)),
        pos: Array.from({ length: n + B }, (_, i) => i),
        seq: new Array<number>(n + B).fill(seq),
        output: Array.from({ length: n + B }, (_, i) => (i > n ? 1 : 0)),
        embd,
      };
    };
    const [, a, b] = prompts(target.nVocab);
    const ra = await rowsOf(0, a);
    const rb = await rowsOf(1, b);
    const run = (parts: (typeof ra)[]) => {
      const embd = new Float32Array(parts.reduce((x, p) => x + p.embd.length, 0));
      let o = 0;
      for (const p of parts) {
        embd.set(p.embd, o);
        o += p.embd.length;
      }
      return draft.forwardBatch({ tokens: Int32Array.from(parts.flatMap((p) => p.tokens)), pos: Int32Array.from(parts.flatMap((p) => p.pos)), seq: Int32Array.from(parts.flatMap((p) => p.seq)), output: Uint8Array.from(parts.flatMap((p) => p.output)), embd });
    };
    draft.truncate(0, 0);
    const alone = await run([ra]);
    draft.truncate(0, 0);
    const both = await run([rb, ra]);
    draft.truncate(0, 0);
    draft.truncate(1, 0);
    expect(Buffer.from(both.buffer, both.byteOffset + (B - 1) * 4 * draft.nVocab, alone.byteLength).equals(Buffer.from(alone.buffer, alone.byteOffset, alone.byteLength))).toBe(true);
  });

  it('two sequences batched with the DFlash draft give the target tokens', async () => {
    const spec = new SpeculativeDecoder(target, { draft, k: 4 });
    const engine = new BatchEngine(target, { speculative: spec });
    const ps = prompts(target.nVocab).slice(1);
    const got = await Promise.all(
      ps.map(async (p, i) => {
        const toks: number[] = [];
        const chunks: AsyncIterable<GenerationChunk> = engine.generate({ id: `r${i}`, prompt: p, maxTokens: 20, sampling: { temperature: 0 } });
        for await (const c of chunks) toks.push(...c.tokens);
        return toks;
      }),
    );
    got.forEach((toks, i) => expect(toks).toEqual(want[i + 1]));
    expect(spec.stats().draftedTokens).toBeGreaterThan(0);
    await engine.close();
  }, 60_000);
});

describe('fromConfig (serve and the CLI): the draft file loads bound to its target', () => {
  it('loads the draft with the target embeddings; a target without the layers is refused', async () => {
    const file = writeTestModel(dir, 'tiny-dflash', 'F32');
    expect(() => SpeculativeDecoder.fromConfig(plain, { draftPath: file })).toThrow(/is a DFlash draft reading target layers \[0, 1\]: load the target with extractLayers \[0, 1\]/);
    const target = EngineModel.load(targetFile, { ...opts, extractLayers: [0, 1] });
    const spec = SpeculativeDecoder.fromConfig(target, { draftPath: file, k: 5 }, { kvType: 'f32' })!;
    try {
      expect(spec.mode).toBe('dflash');
      const p = prompts(target.nVocab)[2];
      expect((await generate(target, p, { maxTokens: 20, sampling: { temperature: 0 }, speculative: spec })).tokens).toEqual(want[2]);
    } finally {
      spec.close();
      target.close();
    }
  }, 60_000);
});

describe('a draft batch smaller than the catch-up rows', () => {
  it('injects them in passes of nBatch first, then the block: the target tokens', async () => {
    const file = writeTestModel(dir, 'tiny-dflash', 'F32');
    const target = EngineModel.load(targetFile, { ...opts, extractLayers: [0, 1] });
    const draft = EngineModel.load(file, { ...opts, embeddingsFrom: targetFile, nBatch: 4 });
    try {
      // A 12-token prompt: 11 rows to inject at the first draft, then blocks of min(k, nBatch - 1) + 1 rows.
      const spec = new SpeculativeDecoder(target, { draft, k: 6, adaptive: false });
      expect((await generate(target, prompts(target.nVocab)[2], { maxTokens: 20, sampling: { temperature: 0 }, speculative: spec })).tokens).toEqual(want[2]);
      const st = spec.stats();
      expect(st.draftedTokens).toBeLessThanOrEqual(3 * st.targetPasses);
      expect(st.draftedTokens).toBeGreaterThan(0);
    } finally {
      draft.close();
      target.close();
    }
  });
});

describe('refusals', () => {
  it('a target loaded without the draft layers, or with other layers', () => {
    const file = writeTestModel(dir, 'tiny-dflash', 'F32');
    const draft = EngineModel.load(file, { ...opts, embeddingsFrom: targetFile });
    const other = EngineModel.load(targetFile, { ...opts, extractLayers: [1] });
    try {
      expect(() => new SpeculativeDecoder(plain, { draft })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/load the target with extractLayers \[0, 1\]/) }));
      expect(() => new SpeculativeDecoder(other, { draft })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG' }));
      expect(() => EngineModel.load(file, opts)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/no token_embd.weight of its own: it takes its target's/) }));
    } finally {
      draft.close();
      other.close();
    }
  });

  it('the variants kail does not run, by name, and malformed keys and tensors', () => {
    const file = writeTestModel(dir, 'tiny-dflash', 'F32');
    const meta = openGgufMetadata(file);
    const tm = openGgufMetadata(targetFile);
    try {
      const base = new Map<string, GgufTensorInfo>(meta.tensors.map((t) => [t.name, t]));
      for (const t of tm.tensors) if (t.name === 'token_embd.weight' || t.name === 'output.weight') base.set(t.name, t);
      const program = (extra: Parameters<typeof editedKv>[1], edit?: (m: Map<string, GgufTensorInfo>) => void) => () => {
        const ts = new Map(base);
        edit?.(ts);
        return programOfFile(editedKv(meta.metadata, extra), ts);
      };
      const fake = (name: string, like = 'output_norm.weight') => (m: Map<string, GgufTensorInfo>) => m.set(name, { ...base.get(like)!, name });
      const refused = (code: string, re: RegExp) => expect.objectContaining({ code, message: expect.stringMatching(re) });
      expect(program({})).not.toThrow();
      expect(program({ 'dflash.selector_top_k': 4, 'dflash.selector_rank': 8 })).toThrow(refused('KAIL_E_UNSUPPORTED', /DFlash2 draft \(dflash.selector_top_k/));
      expect(program({ 'dflash.conv_kernel_size': 3 })).toThrow(refused('KAIL_E_UNSUPPORTED', /DFlash2 draft \(dflash.conv_kernel_size/));
      expect(program({ 'dflash.hyper_connection.count': 4 })).toThrow(refused('KAIL_E_UNSUPPORTED', /DSpark draft on a DeepSeek-V4 backbone/));
      expect(program({}, fake('markov_w1.weight'))).toThrow(refused('KAIL_E_UNSUPPORTED', /DSpark draft \(markov_w1/));
      expect(program({}, fake('blk.0.attn_conv_base'))).toThrow(refused('KAIL_E_UNSUPPORTED', /DFlash2 draft/));
      expect(program({ 'dflash.attention.sliding_window': 16 })).toThrow(refused('KAIL_E_UNSUPPORTED', /sliding-window DFlash draft/));
      // (A d2t map of 256 ids wants a head of 256 rows of its own.)
      expect(program({}, fake('d2t'))).toThrow(refused('KAIL_E_BAD_MODEL', /output.weight is \[256, 1024\]; the head needs \[256, 256\] \(d2t's draft vocabulary\)/));
      expect(program({}, fake('blk.0.attn_sinks.weight'))).toThrow(refused('KAIL_E_UNSUPPORTED', /tensor 'blk.0.attn_sinks.weight' belongs to a DFlash variant/));
      expect(program({}, (m) => m.delete('blk.1.attn_v.weight'))).toThrow(refused('KAIL_E_UNSUPPORTED', /block 1 has no attn_v/));
      expect(program({ 'dflash.hidden_activation': 'relu' })).toThrow(refused('KAIL_E_UNSUPPORTED', /hidden_activation 'relu'/));
      expect(program({ 'dflash.rope.dimension_sections': [16, 8, 8, 0] })).toThrow(refused('KAIL_E_UNSUPPORTED', /degenerate sections/));
      expect(program({ 'dflash.rope.dimension_sections': [32, 0, 0, 0] })).not.toThrow();
      expect(program({ 'dflash.target_layers': undefined })).toThrow(refused('KAIL_E_BAD_MODEL', /needs metadata 'dflash.target_layers'/));
      expect(program({ 'dflash.target_layers': [] })).toThrow(refused('KAIL_E_BAD_MODEL', /non-empty array of layer indices/));
      expect(program({ 'dflash.target_layers': [0, -1] })).toThrow(refused('KAIL_E_BAD_MODEL', /non-empty array of layer indices/));
      expect(program({ 'dflash.target_layers': [0, 1, 1] })).toThrow(refused('KAIL_E_BAD_MODEL', /fc.weight is \[512, 256\]; 3 target layers into 256/));
      expect(program({ 'tokenizer.ggml.mask_token_id': undefined })).toThrow(refused('KAIL_E_BAD_MODEL', /needs metadata 'tokenizer.ggml.mask_token_id'/));
      expect(program({ 'tokenizer.ggml.mask_token_id': 5000 })).toThrow(refused('KAIL_E_BAD_MODEL', /mask_token_id' is 5000/));
      expect(program({ 'dflash.block_size': 1 })).toThrow(refused('KAIL_E_BAD_MODEL', /dflash.block_size' is 1/));
      expect(program({ 'dflash.attention.key_length': 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL' }));
    } finally {
      meta.close();
      tm.close();
    }
  });
});
