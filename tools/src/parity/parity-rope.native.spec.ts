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

const CASES: [string, RopeOptions][] = [
  // Qwen3's recipe for a longer context: YaRN over the trained one.
  ['tiny-qwen3moe', { scaling: 'yarn', freqScale: 0.25, yarnOrigCtx: 32 }],
  ['tiny-qwen3moe', { scaling: 'linear', freqScale: 0.5, freqBase: 5e4 }],
  ['tiny-qwen3moe', { scaling: 'yarn', freqScale: 0.125, yarnOrigCtx: 16, yarnExtFactor: 0.5, yarnBetaFast: 16, yarnBetaSlow: 2 }],
  // MLA with the file's YaRN: a new scale changes its attention factor too.
  ['tiny-deepseek2-lite', { freqScale: 0.1, yarnOrigCtx: 24 }],
  ['tiny-mixtral', { freqBase: 1e5 }],
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

  it.each(CASES)('%s %j', async (preset, rope) => {
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
    expect(effect).toBeGreaterThan(100 * Math.max(err, 1e-9));
  }, 240_000);
});
