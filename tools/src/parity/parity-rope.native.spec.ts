// llama.cpp's RoPE context flags (--rope-scaling, --rope-freq-base, --rope-freq-scale,
// --yarn-orig-ctx, --yarn-ext-factor, --yarn-beta-*) against llama.cpp itself: the same values in
// llama_context_params (cvec-ref, with no control vectors) and in kail's load options must give
// the same logits, while differing from a run without them.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel, type RopeOptions } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaCvecLogits } from './cvec-ref';
import { nmse } from './metrics';

// [preset, options, whether they change the logits]
const SWA: RopeOptions = { freqBase: 5e4, scaling: 'linear', freqScale: 0.5 };
const CASES: [string, RopeOptions, boolean][] = [
  // Qwen3's recipe for a longer context: YaRN over the trained one.
  ['tiny-qwen3moe', { scaling: 'yarn', freqScale: 0.25, yarnOrigCtx: 32 }, true],
  ['tiny-qwen3moe', { scaling: 'linear', freqScale: 0.5, freqBase: 5e4 }, true],
  ['tiny-qwen3moe', { scaling: 'yarn', freqScale: 0.125, yarnOrigCtx: 16, yarnExtFactor: 0.5, yarnBetaFast: 16, yarnBetaSlow: 2 }, true],
  // MLA with the file's YaRN: a new scale changes its attention factor too.
  ['tiny-deepseek2-lite', { freqScale: 0.1, yarnOrigCtx: 24 }, true],
  ['tiny-mixtral', { freqBase: 1e5 }, true],
  // Sliding-window (or chunked) layers. Those of gemma2/3/4, gpt-oss, mimo2, step35 and laguna keep
  // the file's base and scale (llama.cpp's get_rope_freq_base); llama4's, maple's and afmoe's too,
  // and as only those layers rotate there, the options change nothing, in llama.cpp as here.
  // cohere2's, cohere2moe's, exaone-moe's and mellum's take them as every other layer does.
  ['tiny-gemma2', SWA, true],
  ['tiny-gpt-oss', { freqBase: 5e4 }, true],
  ...(['tiny-gemma3', 'tiny-gemma4', 'tiny-mimo2', 'tiny-step35', 'tiny-laguna'] as const).map((p): [string, RopeOptions, boolean] => [p, SWA, true]),
  ...(['tiny-llama4', 'tiny-maple', 'tiny-afmoe'] as const).map((p): [string, RopeOptions, boolean] => [p, SWA, false]),
  ...(['tiny-cohere2', 'tiny-cohere2moe', 'tiny-exaone-moe', 'tiny-mellum'] as const).map((p): [string, RopeOptions, boolean] => [p, SWA, true]),
];

describe("RoPE context flags against llama.cpp's llama_context_params", () => {
  let dir: string;
  const table: string[] = [];
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-rope-'));
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nRoPE flags, kail vs llama.cpp (measured; 48 tokens, F32 weights and KV):\n${table.join('\n')}\n`);
  });

  it.each(CASES)('%s %j (changes the logits: %s)', async (preset, rope, changes) => {
    const file = path.join(dir, `${preset}.gguf`);
    if (!fs.existsSync(file)) writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 3, out: file });
    const tokens = Array.from({ length: 48 }, (_, i) => 3 + ((i * 53 + 7) % 200));
    const run = async (r?: RopeOptions) => {
      const m = EngineModel.load(file, { threads: 2, nCtx: 64, kvType: 'f32', ...(r ? { rope: r } : {}) });
      try {
        return await m.evaluate(0, tokens, 'all');
      } finally {
        m.close();
      }
    };
    const ours = await run(rope);
    const plain = await run();
    const ref = await llamaCvecLogits(file, tokens, [], { rope, timeoutMs: 240_000 });
    const err = nmse(ours, ref.logits);
    const effect = nmse(plain, ref.logits);
    table.push(`  ${preset.padEnd(20)} ${JSON.stringify(rope).padEnd(110)} NMSE ${err.toExponential(2)}  (without the flags: ${effect.toExponential(2)})`);
    expect(err).toBeLessThan(1e-6);
    if (changes) expect(effect).toBeGreaterThan(100 * Math.max(err, 1e-9));
    else expect(effect).toBeLessThan(1e-9);
  }, 240_000);
});
