// Expert streaming end to end: with a RAM budget that holds two or three experts per MoE layer,
// greedy generation gives exactly the tokens (and logits) of the in-memory run while reading
// experts from the file; a file truncated while open fails one request with KAIL_E_IO naming the
// file and offset, and the model serves the next; budgets too small are refused with numbers.
import fs from 'node:fs';
import path from 'node:path';

import { generate } from '../generate';
import { greedyTokens, tempDir, writeTestModel, writeTestModels } from '../testing';
import { summarizeStream } from './stream-summary';
import { EngineModel, openGgufMetadata, planModel, type LoadModelOptions } from './model';

const CASES: [preset: string, type: string][] = [
  ['tiny-qwen3moe', 'F32'],
  ['tiny-qwen3moe', 'Q4_K'],
  ['tiny-mixtral', 'Q8_0'],
  ['tiny-qwen2moe', 'Q4_K'],
  ['tiny-deepseek3', 'Q8_0'],
  ['tiny-glm4moe', 'Q4_K'],
  ['tiny-olmoe', 'F32'],
  ['tiny-gpt-oss', 'MXFP4'],
  ['tiny-ernie4_5-moe', 'Q4_K'],
  ['tiny-minimax-m2', 'Q8_0'],
  ['tiny-llama4', 'Q4_K'],
  ['tiny-llama4-maverick', 'Q8_0'],
  ['tiny-phimoe', 'Q4_K'],
  ['tiny-deepseek32', 'Q8_0'],
  // Sigmoid + bias experts with a shared one after MLA on sliding and DSA full blocks (dots.llm3).
  ['tiny-dots3note', 'Q8_0'],
  // Sigmoid + bias experts (clamped) beside a shared one, routed on a normed mix of 4
  // hyper-connection streams after MLA with DSA (Hunyuan v4).
  ['tiny-hy-v4', 'Q8_0'],
  // Hash-routed (token id table) and sqrt-softplus + bias experts beside a shared one, routed on a
  // normed mix of 4 Sinkhorn-mixed streams (DeepSeek-V4).
  ['tiny-deepseek4', 'Q8_0'],
  ['tiny-qwen4exp', 'Q4_K'],
  ['tiny-mimo2', 'Q4_K'],
  ['tiny-qwen35moe', 'Q4_K'],
  ['tiny-lfm2moe', 'Q8_0'],
  // Gate-less experts (up and down, squared ReLU) between Mamba-2 blocks.
  ['tiny-nemotron-h-moe', 'Q4_K'],
  // Latent experts (Nemotron 3 Super): routed on the full-width input, run on its projection.
  ['tiny-nemotron-h-moe-latent', 'Q8_0'],
  ['tiny-granitehybrid', 'Q8_0'],
  // Fused gate/up experts beside a fused shared expert after sliding blocks with sinks (granite_swa).
  ['tiny-granite-swa-moe', 'Q4_K'],
  // Softmax experts with two shared ones after plain multi-head attention (DeepSeek-OCR).
  ['tiny-deepseek2-ocr', 'Q8_0'],
  ['tiny-jamba', 'Q4_K'],
  ['tiny-minimax-01-interval', 'Q4_K'],
  // swigluoai experts (sigmoid + bias, scaled) beside a shared one after a dense block and MSA blocks (MiniMax-M3).
  ['tiny-minimax-m3', 'Q4_K'],
  // Sigmoid + bias experts with a shared one after KDA and NoPE MLA blocks (Kimi-Linear).
  ['tiny-kimi-linear', 'Q4_K'],
  // Sigmoid + bias experts (clamped) with a shared one of its own width after KDA (safe gate) and RoPE MLA blocks (Ling 3).
  ['tiny-bailingmoe3', 'Q4_K'],
  // Latent situ experts (routed on the full-width input) with a shared one, behind residual attention (Kimi-K3).
  ['tiny-kimi-k3', 'Q4_K'],
  // GeGLU experts with gate and up fused in one tensor (one gate|up slice), per-expert output
  // scales, routed on a scaled norm of the stream beside a dense MLP (Gemma 4); and separate.
  ['tiny-gemma4', 'Q4_K'],
  ['tiny-gemma4-split', 'Q8_0'],
  // ReGLU experts routed from the block's input before attention (SmallThinker), read ahead then.
  ['tiny-smallthinker', 'Q4_K'],
  ['tiny-smallthinker-swa', 'Q8_0'],
  // Sigmoid experts with a selection bias beside a shared expert, per-block SwiGLU limits (Step 3.5).
  ['tiny-step35-clamp', 'Q4_K'],
  // GeGLU experts beside a dense GeGLU, post-FFN norm (Grok-2).
  ['tiny-grok2', 'Q8_0'],
  // 16 experts top-4 after a LayerNorm (DBRX).
  ['tiny-dbrx', 'Q4_K'],
  // Experts on the block's input beside a dense MLP of the post-attention stream (Arctic).
  ['tiny-arctic', 'Q8_0'],
  // Chunk experts after the routed ones, streamed as a MoE layer of their own (GroveMoE).
  ['tiny-grovemoe', 'Q4_K'],
  // ggml_swiglu_clamp experts between sliding and NoPE full blocks (Maple).
  ['tiny-maple', 'Q8_0'],
  // Sigmoid + bias experts beside a shared expert after softplus-gated attention (Laguna).
  ['tiny-laguna', 'Q8_0'],
  // Fused gate|up experts of parallel blocks (Cohere's MoE).
  ['tiny-cohere2moe-rms', 'Q4_K'],
];

/**
 * A budget whose expert cache holds `perLayer` experts of every MoE layer (no reserve): the plan's
 * experts per layer are the cache over one expert of each layer (whose sizes may differ: GroveMoE's
 * chunk experts are narrower than its routed ones).
 */
function budgetFor(file: string, perLayer: number, opts: LoadModelOptions = {}): number {
  const p = planModel(file, { ...opts, ramBytes: 2 ** 40, ramReserveBytes: 0 });
  return p.fixedBytes + Math.round(perLayer * (p.cacheBytes / p.cacheExpertsPerLayer));
}

const PROMPT = [1, 17, 99, 3, 250, 7, 42, 8];
/** A byte count as the plan's messages print it. */
const B = '[\\d.]+ (?:B|KiB|MiB|GiB)';

describe('expert streaming', () => {
  const dir = tempDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  // Every model the tests below write, in one gen-model process (each test still asks writeTestModel
  // for its file, then in dir): with a cold model cache, one process per model cost ~0.4 s of start each.
  beforeAll(() => {
    writeTestModels(dir, [...CASES, ['tiny-qwen3moe', 'F32'], ['tiny-qwen3moe', 'Q4_K'], ['tiny-smallthinker', 'Q4_K'], ['tiny-arctic', 'Q4_K'], ['tiny-grovemoe', 'Q4_K']]);
  }, 600_000);

  describe.each(CASES)('%s %s', (preset, type) => {
    let file: string;
    beforeAll(() => {
      file = writeTestModel(dir, preset, type);
    }, 120_000);

    it('generates exactly the in-memory tokens with ~2.5 experts per layer cached', async () => {
      const opts: LoadModelOptions = { threads: 2, nCtx: 256 };
      const mem = EngineModel.load(file, opts);
      let want: number[];
      let wantLogits: Float32Array;
      try {
        wantLogits = await mem.evaluate(0, PROMPT, 'all');
        mem.truncate(0, 0);
        want = (await generate(mem, PROMPT, { maxTokens: 16, sampling: { temperature: 0 } })).tokens;
        expect(mem.runtime.stats().stream).toBeNull();
        expect(mem.plan).toBeNull();
      } finally {
        mem.close();
      }

      const ramBytes = budgetFor(file, 2.5, opts);
      const m = EngineModel.load(file, { ...opts, ramBytes, ramReserveBytes: 0 });
      try {
        expect(m.plan!.fits).toBe(true);
        expect(m.plan!.cacheExpertsPerLayer).toBeGreaterThanOrEqual(2);
        expect(m.plan!.cacheExpertsPerLayer).toBeLessThan(3);
        const logits = await m.evaluate(0, PROMPT, 'all');
        expect(Buffer.from(logits.buffer).equals(Buffer.from(wantLogits.buffer))).toBe(true);
        m.truncate(0, 0);
        const got = (await generate(m, PROMPT, { maxTokens: 16, sampling: { temperature: 0 } })).tokens;
        expect(got).toEqual(want);

        const st = m.runtime.stats().stream!;
        expect(st.layers).toHaveLength(m.plan!.nMoeLayers);
        for (const l of st.layers) {
          expect(l.hits + l.misses).toBe(l.accesses);
          expect(l.bytesRead).toBeGreaterThan(0);
        }
        const s = summarizeStream(st);
        expect(s.bytesRead).toBeGreaterThan(0);
        expect(st.peakBytes).toBeLessThanOrEqual(st.capacityBytes);
        expect(st.capacityBytes).toBe(m.plan!.cacheBytes);
        expect(st.pinnedBytes).toBe(0);
        expect(st.readErrors).toBe(0);
        expect(st.residentBytes).toBe(m.plan!.residentBytes);
      } finally {
        m.close();
      }
    }, 120_000);
  });

  it('streams its experts by itself when the model does not fit the memory available, with the in-memory tokens', async () => {
    // ~110 MB: 2 MoE layers x 64 experts of 3 x 512 x 512 in Q8_0 (memory-cap.native.spec.ts's file).
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0', 1, ['--layers', '2', '--experts', '64', '--expert-ff', '512', '--dim', '512']);
    const opts: LoadModelOptions = { threads: 2, nCtx: 64, nBatch: 16, ramReserveBytes: 0 };
    const want = await greedyTokens(file, opts, PROMPT, 16);
    // Available: what makes 80% of it a budget caching 8.5 experts per layer, less than the file.
    const budget = budgetFor(file, 8.5, opts);
    const available = Math.ceil(budget / 0.8) + 2 ** 20;
    expect(available).toBeLessThan(fs.statSync(file).size);
    const m = EngineModel.load(file, { ...opts, memoryAvailableBytes: available });
    try {
      expect(m.autoRamBytes).toBe(Math.floor((0.8 * available) / 2 ** 20) * 2 ** 20);
      expect(m.weightsMapped).toBe(false);
      expect(m.plan!.ramBytes).toBe(m.autoRamBytes);
      expect(m.plan!.cacheExpertsPerLayer).toBeGreaterThanOrEqual(8);
      expect((await generate(m, PROMPT, { maxTokens: 16, sampling: { temperature: 0 } })).tokens).toEqual(want);
      expect(summarizeStream(m.runtime.stats().stream!).bytesRead).toBeGreaterThan(0);
    } finally {
      m.close();
    }
    // autoStream off, or a budget that cannot hold the resident part: computed from the mapping.
    for (const o of [{ autoStream: false, memoryAvailableBytes: available }, { memoryAvailableBytes: 2 ** 20 }]) {
      const mapped = EngineModel.load(file, { ...opts, ...o });
      try {
        expect([mapped.autoRamBytes, mapped.weightsMapped, mapped.plan]).toEqual([0, true, null]);
      } finally {
        mapped.close();
      }
    }
  }, 120_000);

  it.each(['tiny-smallthinker', 'tiny-arctic'])('reads a block\'s experts ahead exactly when its router reads the block\'s input (%s), and not without prefetch', async (preset) => {
    const file = writeTestModel(dir, preset, 'Q4_K');
    const opts: LoadModelOptions = { threads: 2, nCtx: 256 };
    const ramBytes = budgetFor(file, 2.5, opts);
    const run = async (prefetch: boolean) => {
      const m = EngineModel.load(file, { ...opts, ramBytes, ramReserveBytes: 0, prefetch });
      try {
        const tokens = (await generate(m, PROMPT, { maxTokens: 12, sampling: { temperature: 0 } })).tokens;
        return { tokens, layers: m.runtime.stats().stream!.layers };
      } finally {
        m.close();
      }
    };
    const on = await run(true);
    const off = await run(false);
    expect(on.tokens).toEqual(off.tokens);
    // Every block's prediction is its router's own choice, made before its attention: what it
    // predicted is exactly what it asked for (block 0 included, which no earlier block predicts),
    // and the previous block guesses nothing for it, so no read ahead is wasted.
    for (const l of on.layers) {
      expect(l.predicted).toBeGreaterThan(0);
      expect(l.predictedCorrect).toBe(l.predicted);
      expect(l.predictedActual).toBe(l.predicted);
      expect(l.prefetchReads).toBeGreaterThan(0);
      expect(l.prefetchWasted).toBe(0);
    }
    for (const l of off.layers) {
      expect(l.predicted).toBe(0);
      expect(l.prefetchReads).toBe(0);
    }
  }, 120_000);

  it('predicts GroveMoE\'s chunk experts exactly: the routed layer before them applies their router to their routing input', async () => {
    const file = writeTestModel(dir, 'tiny-grovemoe', 'Q4_K');
    const opts: LoadModelOptions = { threads: 2, nCtx: 256 };
    const m = EngineModel.load(file, { ...opts, ramBytes: budgetFor(file, 1.5, opts), ramReserveBytes: 0 });
    try {
      await generate(m, PROMPT, { maxTokens: 12, sampling: { temperature: 0 } });
      const layers = m.runtime.stats().stream!.layers;
      // Stream layers alternate: block il's routed experts (8), then its chunk experts (4).
      expect(layers).toHaveLength(8);
      for (const l of layers.filter((_, i) => i % 2 === 1)) {
        expect(l.predicted).toBeGreaterThan(0);
        expect(l.predictedCorrect).toBe(l.predicted);
      }
    } finally {
      m.close();
    }
  }, 120_000);

  it('gives the same tokens with buffered reads, without prefetch and with another policy, and says why reads are buffered', async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'Q4_K');
    const opts: LoadModelOptions = { threads: 2, nCtx: 256 };
    const runs: number[][] = [];
    for (const extra of [{}, { directIo: false, prefetch: false, ioThreads: 1, cachePolicy: 'lru' }] as LoadModelOptions[]) {
      const m = EngineModel.load(file, { ...opts, ...extra, ramBytes: budgetFor(file, 2, opts), ramReserveBytes: 0 });
      try {
        runs.push((await generate(m, PROMPT, { maxTokens: 12, sampling: { temperature: 0 } })).tokens);
        const st = m.runtime.stats().stream!;
        if (extra.directIo === false) {
          expect(st.directIo).toBe(false);
          expect(st.ioNote).toMatch(/buffered reads/);
          expect(st.layers.every((l) => l.prefetchReads === 0 && l.predicted === 0)).toBe(true);
          expect(st.ioThreads).toBe(1);
          expect(st.policy).toBe('lru');
        } else {
          expect(st.layers.some((l) => l.predicted > 0)).toBe(true);
          expect(st.policy).toBe('context');
        }
      } finally {
        m.close();
      }
    }
    expect(runs[1]).toEqual(runs[0]);
  }, 120_000);

  it('fails a request on a file truncated while open with KAIL_E_IO naming file and offset, then serves the next', async () => {
    const src = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const file = path.join(dir, 'truncate-me.gguf');
    const original = fs.readFileSync(src);
    fs.writeFileSync(file, original);
    const opts: LoadModelOptions = { threads: 2, nCtx: 256 };
    const want = await greedyTokens(src, opts, PROMPT, 8);
    const meta = openGgufMetadata(file);
    const firstExpert = Math.min(...meta.tensors.filter((t) => /_exps\./.test(t.name)).map((t) => t.offset));
    meta.close();

    const m = EngineModel.load(file, { ...opts, ramBytes: budgetFor(file, 2, opts), ramReserveBytes: 0 });
    try {
      await m.evaluate(0, [5, 6], 'last');
      m.truncate(0, 0);
      // Cut the file where the experts begin: eight prompt tokens need more experts than are cached.
      fs.truncateSync(file, firstExpert);
      const err = await m.evaluate(0, PROMPT, 'last').then(
        () => null,
        (e: unknown) => e as { code: string; message: string },
      );
      expect(err).not.toBeNull();
      expect(err!.code).toBe('KAIL_E_IO');
      expect(err!.message).toContain(file);
      expect(err!.message).toMatch(/bytes at offset \d+\) .*the file ends at \d+ bytes/);
      expect(m.runtime.stats().stream!.readErrors).toBeGreaterThan(0);
      expect(m.runtime.stats().stream!.pinnedBytes).toBe(0);

      // The same file (same inode) gets its bytes back: the model serves again, exactly.
      fs.writeFileSync(file, original);
      m.truncate(0, 0);
      const got = (await generate(m, PROMPT, { maxTokens: 8, sampling: { temperature: 0 } })).tokens;
      expect(got).toEqual(want);
    } finally {
      m.close();
    }
  }, 120_000);

  it('refuses a budget below the resident part before loading, naming the numbers', () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const opts: LoadModelOptions = { nCtx: 256, ramReserveBytes: 0 };
    const need = budgetFor(file, 0, opts);
    const p = planModel(file, { ...opts, ramBytes: need - 1 });
    // need covers resident + KV + scratch; the cache must hold one token's experts of a layer too.
    expect(p.fits).toBe(false);
    expect(p.shortfallBytes).toBe(p.fixedBytes + p.minCacheBytes - (need - 1));
    expect(p.minCacheBytes).toBe(p.nExpertUsed * p.expertEntryBytes);
    expect(() => EngineModel.load(file, { ...opts, ramBytes: need - 1 })).toThrow(
      expect.objectContaining({
        code: 'KAIL_E_BUDGET',
        message: expect.stringMatching(
          new RegExp(
            `RAM budget ${B} \\(\\d+ bytes\\) is ${B} short: resident weights ${B} \\+ KV cache ${B} \\(256 tokens x 1 sequence\\(s\\)\\) ` +
              `\\+ scratch ${B} \\(batch of 512\\) \\+ reserve 0 B = ${B}, and the expert cache needs at least ${B} \\(4 experts of ${B}\\); ` +
              `the budget must be at least ${B} \\(\\d+ bytes\\)`,
          ),
        ),
      }),
    );
    // Exactly the minimum loads.
    const min = p.fixedBytes + p.minCacheBytes;
    const m = EngineModel.load(file, { ...opts, ramBytes: min });
    try {
      expect(m.plan!.cacheBytes).toBe(p.minCacheBytes);
    } finally {
      m.close();
    }
  });
});
