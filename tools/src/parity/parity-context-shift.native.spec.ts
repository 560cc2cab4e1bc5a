// Context shift (llama-server's --context-shift: llama_memory_seq_rm of [keep, keep + discard),
// then seq_add of -discard to the positions after, the cached keys turned by RoPE) against
// llama.cpp's own, through node-llama-cpp's eraseContextTokenRanges: 48 tokens in, 20 dropped after
// the first 4, then 16 more tokens whose logits are compared. On float files of a dense model
// (normal RoPE), a MoE (NeoX RoPE), GLM-4.5's shape (partial NeoX RoPE, 64 of 128 dims) and
// DeepSeek-V2-Lite's (MLA: the latent cache's rope part turned, YaRN), with F32 and F16 caches
// against llama.cpp's, and a Q8_0 cache against the exact shifted logits (llama.cpp's CPU backend
// aborts shifting a quantized K cache: ggml-cpu's copy into the non-contiguous quantized view of
// the rotary dims is "not implemented"; kail dequantizes, turns and requantizes the rows). The logits after a shift differ from both the unshifted continuation and a fresh run of
// the tokens that remain (the kept rows were computed with the dropped tokens in view), so
// agreeing with llama.cpp's shifted logits says the rows moved and turned as llama.cpp's did.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel, type KvType } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { medianNmse, tokenIds } from './metrics';

const PRESETS = ['tiny-llama', 'tiny-qwen3moe', 'tiny-glm4moe', 'tiny-deepseek2-lite-split'];
const SHIFT = { at: 48, keep: 4, discard: 20 };
const N = 64;

let dir: string;
const table: string[] = [];
const file = (preset: string) => path.join(dir, `${preset}-F32.gguf`);

/** kail: tokens[0, at) in, the shift, then the logits of tokens[at, n). */
async function kailShifted(model: string, tokens: number[], kvType: KvType): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType, threads: 2, nCtx: N + 8 });
  try {
    await m.evaluate(0, tokens.slice(0, SHIFT.at), 'last', 16);
    expect(m.shiftContext(0, SHIFT.keep, SHIFT.discard)).toBe(SHIFT.at - SHIFT.discard);
    expect(m.seqLen(0)).toBe(SHIFT.at - SHIFT.discard);
    return await m.evaluate(0, tokens.slice(SHIFT.at), 'all', 16);
  } finally {
    m.close();
  }
}


describe("context shift against llama.cpp's", () => {
  const toks: Record<string, number[]> = {};
  let f32: LlamaLogits[];
  let f16: LlamaLogits[];
  let fresh: LlamaLogits[];
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-shift-'));
    for (const p of PRESETS) {
      writeModel({ config: getPreset(p).config, fileType: 'F32', seed: 5, out: file(p) });
      toks[p] = tokenIds(N, getPreset(p).config.vocabSize, 29);
    }
    const jobs = PRESETS.map((p) => ({ model: file(p), tokens: toks[p], shift: SHIFT }));
    f32 = await llamaLogitsBatch(jobs, { kv: 'f32', flashAttention: 'off', ctx: 128, timeoutMs: 300_000 });
    f16 = await llamaLogitsBatch(jobs, { kv: 'f16', flashAttention: 'off', ctx: 128, timeoutMs: 300_000 });
    // The tokens that remain after the shift, computed from scratch (what a re-evaluation gives).
    const kept = (t: number[]) => [...t.slice(0, SHIFT.keep), ...t.slice(SHIFT.keep + SHIFT.discard)];
    fresh = await llamaLogitsBatch(PRESETS.map((p) => ({ model: file(p), tokens: kept(toks[p]) })), { kv: 'f32', flashAttention: 'off', ctx: 128, timeoutMs: 300_000 });
  }, 900_000);

  afterAll(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nContext shift parity (measured; median per-position NMSE of the 16 logits rows after the shift):\n${table.join('\n')}\n`);
  });

  it.each(PRESETS)('%s, F32 cache: the logits after a shift are llama.cpp\'s', async (p) => {
    const i = PRESETS.indexOf(p);
    const nv = f32[i].nVocab;
    const ours = await kailShifted(file(p), toks[p], 'f32');
    const err = medianNmse(ours, f32[i].logits, nv);
    // llama.cpp really shifted (a failed shift re-evaluates the remaining tokens from scratch).
    const tail = fresh[i].logits.subarray((SHIFT.at - SHIFT.discard) * nv);
    const vsFresh = medianNmse(f32[i].logits, tail, nv);
    table.push(`f32  ${p.padEnd(26)} kail vs llama.cpp ${err.toExponential(2)}; llama.cpp's shifted vs a fresh run of the kept tokens ${vsFresh.toExponential(2)}`);
    expect(vsFresh).toBeGreaterThan(1e-4);
    expect(err).toBeLessThan(1e-7);
  });

  it.each(PRESETS)("%s, F16 cache: as close to the exact shifted logits as llama.cpp's", async (p) => {
    const i = PRESETS.indexOf(p);
    const nv = f32[i].nVocab;
    const ours = await kailShifted(file(p), toks[p], 'f16');
    const oursErr = medianNmse(ours, f32[i].logits, nv);
    const theirsErr = medianNmse(f16[i].logits, f32[i].logits, nv);
    table.push(`f16  ${p.padEnd(26)} vs the exact shifted logits: kail ${oursErr.toExponential(2)}, llama.cpp ${theirsErr.toExponential(2)}`);
    expect(oursErr).toBeGreaterThan(0);
    expect(oursErr).toBeLessThanOrEqual(Math.max(2 * theirsErr, 1e-9));
  });

  it.each(PRESETS)('%s, Q8_0 cache: a shift costs about what the cache type costs without one', async (p) => {
    const i = PRESETS.indexOf(p);
    const nv = f32[i].nVocab;
    const shifted = medianNmse(await kailShifted(file(p), toks[p], 'q8_0'), f32[i].logits, nv);
    // The same positions without a shift: the Q8_0 cache's own error there.
    const plain = async (t: KvType) => {
      const m = EngineModel.load(file(p), { kvType: t, threads: 2, nCtx: N + 8 });
      try {
        return (await m.evaluate(0, toks[p], 'all', 16)).subarray(SHIFT.at * nv);
      } finally {
        m.close();
      }
    };
    const unshifted = medianNmse(await plain('q8_0'), await plain('f32'), nv);
    table.push(`q8_0 ${p.padEnd(26)} vs the exact shifted logits: kail ${shifted.toExponential(2)} (the Q8_0 cache without a shift: ${unshifted.toExponential(2)})`);
    expect(shifted).toBeGreaterThan(0);
    expect(shifted).toBeLessThanOrEqual(3 * unshifted);
  });

  // Without YaRN: with it llama.cpp's K-shift multiplies the rows by YaRN's magnitude factor again
  // (its build_rope_shift passes the attention factor the rows already carry; 1.35 for gpt-oss's
  // factor 32), where kail turns them only, so they equal rows computed at the new positions. On
  // tiny-gpt-oss as written (YaRN) the two shifted logits differ by NMSE 1.0e-2 (measured); the
  // DeepSeek files above cancel the factor, so both are a pure rotation there.
  /** A file of `config` shifted with --swa-full by kail and by llama.cpp: the median NMSE of the logits after the shift. */
  async function swaFullShiftError(name: string, config: ReturnType<typeof getPreset>['config'], tokenSeed: number): Promise<number> {
    const file = path.join(dir, `${name}-F32.gguf`);
    writeModel({ config, fileType: 'F32', seed: 5, out: file });
    const t = tokenIds(N, 1024, tokenSeed);
    const [ref] = await llamaLogitsBatch([{ model: file, tokens: t, shift: SHIFT }], { kv: 'f32', flashAttention: 'off', ctx: 128, swaFull: true, timeoutMs: 300_000 });
    const m = EngineModel.load(file, { kvType: 'f32', threads: 2, nCtx: N + 8, nBatch: 16, swaFull: true });
    try {
      await m.evaluate(0, t.slice(0, SHIFT.at), 'last', 16);
      m.shiftContext(0, SHIFT.keep, SHIFT.discard);
      return medianNmse(await m.evaluate(0, t.slice(SHIFT.at), 'all', 16), ref.logits, ref.nVocab);
    } finally {
      m.close();
    }
  }

  it("tiny-gpt-oss's shape with --swa-full (every position cached, window 8), no YaRN: the logits after a shift are llama.cpp's with its --swa-full", async () => {
    const err = await swaFullShiftError('tiny-gpt-oss-noyarn', { ...getPreset('tiny-gpt-oss').config, yarn: undefined } as ReturnType<typeof getPreset>['config'], 31);
    table.push(`f32  ${'tiny-gpt-oss (no YaRN), --swa-full'.padEnd(26)} kail vs llama.cpp ${err.toExponential(2)}`);
    expect(err).toBeLessThan(1e-7);
  }, 300_000);

  // Gemma 4's shared KV blocks read the shifted rows of the blocks they share from; its full blocks
  // rotate a quarter of each head (rope_freqs), which the shift turns the same way.
  it('tiny-gemma4-e with --swa-full (shared KV blocks, proportional RoPE): the logits after a shift are llama.cpp\'s with its --swa-full', async () => {
    const err = await swaFullShiftError('tiny-gemma4-e', getPreset('tiny-gemma4-e').config, 37);
    table.push(`f32  ${'tiny-gemma4-e, --swa-full'.padEnd(26)} kail vs llama.cpp ${err.toExponential(2)}`);
    expect(err).toBeLessThan(1e-7);
  }, 300_000);

  it('refuses a model whose sliding-window layers keep a ring smaller than the context, and the sequence stays usable', async () => {
    const gptOss = path.join(dir, 'tiny-gpt-oss-F32.gguf');
    writeModel({ config: getPreset('tiny-gpt-oss').config, fileType: 'F32', seed: 5, out: gptOss });
    const m = EngineModel.load(gptOss, { threads: 2, nCtx: 64, nBatch: 16 });
    try {
      await m.evaluate(0, tokenIds(40, 1024, 3), 'last', 16);
      expect(() => m.shiftContext(0, 4, 10)).toThrow(/context shift: KV layer \d+ keeps a sliding window in a ring of \d+ positions/);
      expect(m.seqLen(0)).toBe(40);
      expect((await m.evaluate(0, [1, 2], 'last')).length).toBe(m.nVocab);
    } finally {
      m.close();
    }
  });

  // MiniCPM3: the latent cache's rope part turned NeoX-style with LongRoPE's short factors (the
  // shift's rotation takes the rope op's factor table); llama.cpp turns the rope part of its
  // per-head keys (offset by qk_nope) with the same table.
  it('tiny-minicpm3 (MLA latent, NeoX, LongRoPE factors): the logits after a shift are llama.cpp\'s', async () => {
    const f = path.join(dir, 'tiny-minicpm3-F32.gguf');
    writeModel({ config: getPreset('tiny-minicpm3').config, fileType: 'F32', seed: 5, out: f });
    const t = tokenIds(N, 1024, 29);
    const [ref] = await llamaLogitsBatch([{ model: f, tokens: t, shift: SHIFT }], { kv: 'f32', flashAttention: 'off', ctx: 128, timeoutMs: 120_000 });
    const err = medianNmse(await kailShifted(f, t, 'f32'), ref.logits, ref.nVocab);
    table.push(`f32  ${'tiny-minicpm3'.padEnd(26)} kail vs llama.cpp ${err.toExponential(2)}`);
    expect(err).toBeLessThan(1e-7);
  }, 120_000);

  it('refuses a range outside the cache, naming it', async () => {
    const m = EngineModel.load(file('tiny-llama'), { threads: 2, nCtx: 32 });
    try {
      await m.evaluate(0, tokenIds(10, 1024, 3), 'last');
      expect(() => m.shiftContext(0, 4, 7)).toThrow('context shift: cannot discard 7 positions after the first 4 of 10');
      expect(() => m.shiftContext(0, -1, 2)).toThrow('context shift: cannot discard 2 positions after the first -1 of 10');
      expect(m.shiftContext(0, 4, 0)).toBe(10);
      expect(m.shiftContext(0, 0, 10)).toBe(0);
    } finally {
      m.close();
    }
  });
});
