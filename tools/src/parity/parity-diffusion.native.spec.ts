// Diffusion LMs (llama.cpp's llada, llada-moe, rnd1 and dream graphs: llama, OLMoE-like, qwen3moe
// and qwen2 trunks attending both ways, no KV memory) against llama.cpp through node-llama-cpp:
// 1. every position's logits of one non-causal pass over 64 tokens (llama.cpp's decode() of a
//    memoryless model runs encode(), one pass with every row's logits);
// 2. the diffusion loop (packages/engine's model/diffusion.ts) fed each step by llama.cpp's pass
//    (llama-ref.mjs `passes`: the canvas from a cleared sequence) and by kail's: the same tokens
//    for the deterministic settings (temperature 0; confidence, entropy, margin; block and timestep).
// Measured (node-llama-cpp's CPU build, flash attention off, 64 tokens, seed 7): F32 NMSE 2.4e-14
// (tiny-llada-moe) to 1.8e-13 (tiny-dream); Q8_0 8.6e-15 to 9.6e-5 (the largest tiny-dream's, whose
// head is its Q8_0 token embedding; untied, 1.1e-8), Q4_K_M 1.9e-5 (tiny-llada-moe) and 3.6e-5 (tiny-rnd1).
// llama.cpp's own spread (its default run, F16 KV and flash attention auto, against the exact one)
// is 0 for these files: without a KV cache its K and V stay F32 and the CPU build runs no flash
// attention; so the quantized bounds are fixed, as parity-encoders' are.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DIFFUSION_DEFAULTS, EngineModel, diffusionGenerate, diffusionModelSettings, modelCanvasLogits, type DiffusionParams } from '@kailstream/engine';

import { writeModel } from '../models/build';
import type { FileTypeName } from '../models/quant-plan';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch, llamaPasses } from './llama-ref';
import { nmse, tokenIds } from './metrics';

const PRESETS = ['tiny-llada', 'tiny-dream', 'tiny-llada-moe', 'tiny-rnd1'];
const BOUND: Partial<Record<FileTypeName, number>> = { F32: 1e-11, Q8_0: 5e-4, Q4_K_M: 5e-4 };
// Q8_0 for every preset, Q4_K_M for the MoE ones (their experts' K-quants).
const CASES = PRESETS.flatMap((p) => (p.endsWith('moe') || p === 'tiny-rnd1' ? ['F32', 'Q8_0', 'Q4_K_M'] as const : ['F32', 'Q8_0'] as const).map((t) => [p, t] as [string, FileTypeName]));

let dir: string;
const file = (p: string, t: string) => path.join(dir, `${p}-${t}.gguf`);
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-diffusion-'));
  for (const [p, t] of CASES) writeModel({ config: getPreset(p).config, fileType: t, seed: 7, out: file(p, t) });
}, 120_000);
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('one non-causal pass: every position against llama.cpp', () => {
  const lines: string[] = [];
  afterAll(() => lines.length && console.log(lines.join('\n')));

  it('64 tokens, each preset and type within its bound', async () => {
    const tokens = CASES.map(([p]) => tokenIds(64, getPreset(p).config.vocabSize, 11));
    const refs = await llamaLogitsBatch(CASES.map(([p, t], i) => ({ model: file(p, t), tokens: tokens[i] })), { kv: 'f32', flashAttention: 'off', timeoutMs: 300_000 });
    for (const [i, [p, t]] of CASES.entries()) {
      const m = EngineModel.load(file(p, t), { threads: 2, nCtx: 64 });
      try {
        expect(m.diffusion).toBe(true);
        const ours = await m.evaluate(0, tokens[i], 'all');
        const e = nmse(ours, refs[i].logits);
        lines.push(`${p.padEnd(15)} ${t.padEnd(6)} NMSE ${e.toExponential(2)} (bound ${BOUND[t]})`);
        expect(e).toBeLessThan(BOUND[t]!);
        // Non-causal: the first row sees the last token (a causal pass's first row would not).
        const changed = tokens[i].slice();
        changed[63] = (changed[63] + 1) % 1000;
        m.truncate(0, 0);
        const other = await m.evaluate(0, changed, 'all');
        expect(nmse(other.subarray(0, m.nVocab), ours.subarray(0, m.nVocab))).toBeGreaterThan(1e-6);
      } finally {
        m.close();
      }
    }
  }, 300_000);
});

describe("the diffusion loop on llama.cpp's passes and on kail's", () => {
  const RUNS: [string, DiffusionParams['algorithm'], DiffusionParams['schedule']][] = [
    ['tiny-llada', 'confidence', { kind: 'block', blockLength: 8 }],
    ['tiny-llada', 'entropy', { kind: 'timestep', eps: 0.001 }],
    ['tiny-llada', 'margin', { kind: 'block', blockLength: 8 }],
    ['tiny-dream', 'confidence', { kind: 'timestep', eps: 0.001 }],
  ];

  it.each(['tiny-llada', 'tiny-dream'])('%s F32: identical tokens at temperature 0', async (preset) => {
    const f = file(preset, 'F32');
    const m = EngineModel.load(f, { threads: 2, nCtx: 64 });
    const ll = await llamaPasses(f, { kv: 'f32', flashAttention: 'off', timeoutMs: 120_000 });
    try {
      const s = diffusionModelSettings(m);
      expect(s).toEqual({ maskTokenId: 1021, shiftLogits: preset === 'tiny-dream' });
      const prompt = tokenIds(8, 1000, 3);
      for (const [, algorithm, schedule] of RUNS.filter(([p]) => p === preset)) {
        const params: DiffusionParams = { ...DIFFUSION_DEFAULTS, ...s, steps: 4, algorithm, schedule };
        const ours = await diffusionGenerate(prompt, 16, m.nVocab, modelCanvasLogits(m), params);
        const theirs = await diffusionGenerate(prompt, 16, m.nVocab, ll.logits, params);
        expect([ours.steps, Array.from(ours.generated).includes(s.maskTokenId)]).toEqual([4, false]);
        expect(Array.from(ours.generated)).toEqual(Array.from(theirs.generated));
      }
    } finally {
      await ll.close();
      m.close();
    }
  }, 180_000);
});
