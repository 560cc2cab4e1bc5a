// Parity with llama.cpp on shapes no preset has: the MoE families (mixtral, qwen2moe, qwen3moe,
// olmoe, glm4moe, deepseek2 with absorbed MLA) and dense llama with their sizes drawn at random
// (seeded, so a failure reproduces): hidden sizes that are no power of two, head counts and sizes,
// grouped KV heads down to one, 4 to 60 experts with 1 to 8 used, expert and shared FFN widths.
// F32 weights and KV: the logits must agree at every position (NMSE at rounding level, the same
// top token), as they do for the presets. Quantized files of such shapes agree within llama.cpp's
// own spread (measured while this was written; their bounds are the preset suites').
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import type { ModelConfig } from '../models/arch';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';

const N_SHAPES = 14;
const PRESETS = ['tiny-mixtral', 'tiny-qwen2moe', 'tiny-qwen3moe', 'tiny-olmoe', 'tiny-glm4moe', 'tiny-deepseek3', 'tiny-llama'];

/** N_SHAPES configurations, each preset's own constraints kept (what its converter would write). */
function drawShapes(seed: number): { name: string; config: ModelConfig }[] {
  let s = seed;
  const rnd = () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  const pick = <T,>(a: readonly T[]): T => a[Math.floor(rnd() * a.length)];
  return Array.from({ length: N_SHAPES }, (_, i) => {
    const preset = PRESETS[i % PRESETS.length];
    const base = getPreset(preset).config;
    const c: ModelConfig = { ...base, nLayers: pick([1, 2, 3]), dim: pick([64, 128, 192, 320, 512]) };
    if (preset === 'tiny-qwen3moe' || preset === 'tiny-glm4moe') {
      // Heads of their own size (not dim / heads), GQA.
      c.nHeads = pick([2, 4, 6, 8]);
      c.nKvHeads = pick([1, 2, c.nHeads].filter((k) => c.nHeads % k === 0));
      c.headDim = preset === 'tiny-glm4moe' ? pick([64, 128]) : pick([32, 64, 128]);
    } else if (preset === 'tiny-deepseek3') {
      // MLA: the head count alone (its sizes are the latent ranks').
      c.nHeads = pick([2, 4, 6, 8]);
      c.nKvHeads = c.nHeads;
      c.headDim = undefined;
    } else {
      c.nHeads = pick([2, 4, 8].filter((h) => c.dim % h === 0));
      c.headDim = undefined;
      // olmoe's q/k norms span the whole projection: no GQA.
      c.nKvHeads = preset === 'tiny-olmoe' ? c.nHeads : pick([1, 2, c.nHeads].filter((k) => c.nHeads % k === 0));
    }
    if (base.nExperts) {
      // (deepseek2's expert groups divide the experts and are fewer.)
      c.nExperts = preset === 'tiny-deepseek3' ? pick([16, 32, 64]) : pick([4, 8, 12, 32, 60]);
      c.nExpertsUsed = Math.min(c.nExperts, pick([1, 2, 4, 6, 8]));
      c.expertFf = pick([32, 64, 96, 128, 256]);
      c.ff = preset === 'tiny-mixtral' ? c.expertFf : pick([64, 128, 256]);
      if (base.sharedFf) c.sharedFf = pick([32, 64, 128]);
    } else c.ff = pick([64, 96, 256, 512]);
    const shape = `L${c.nLayers} d${c.dim} heads ${c.nHeads}/${c.nKvHeads}${c.headDim ? `x${c.headDim}` : ''} ff ${c.ff}` +
      (c.nExperts ? ` experts ${c.nExpertsUsed}/${c.nExperts}x${c.expertFf}${c.sharedFf ? ` shared ${c.sharedFf}` : ''}` : '');
    return { name: `${preset} ${shape}`, config: c };
  });
}

const SHAPES = drawShapes(5);

describe('random shapes of the MoE families against llama.cpp (F32)', () => {
  let dir: string;
  let pending: Promise<LlamaLogits[]>;
  let refs: LlamaLogits[];
  const table: string[] = [];
  const file = (i: number) => path.join(dir, `shape-${i}.gguf`);
  const tokens = (i: number) => tokenIds(48, SHAPES[i].config.vocabSize, 7 + i);
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-shapes-'));
    SHAPES.forEach((s, i) => writeModel({ config: s.config, fileType: 'F32', seed: 3 + i, out: file(i) }));
    pending = llamaLogitsBatch(SHAPES.map((_, i) => ({ model: file(i), tokens: tokens(i) })), { kv: 'f32', flashAttention: 'off', timeoutMs: 240_000 });
    pending.catch(() => undefined);
  }, 120_000);
  // (The reference runs while the other suites share the machine: its wait is not a test's.)
  beforeAll(async () => {
    refs = await pending;
  }, 300_000);
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nrandom shapes, kail vs llama.cpp (measured; 48 tokens, F32 weights and KV):\n${table.join('\n')}\n`);
  });

  it.each(SHAPES.map((s, i) => [s.name, i] as const))('%s', async (name, i) => {
    const ref = refs[i];
    const m = EngineModel.load(file(i), { threads: 2, nCtx: 64, kvType: 'f32' });
    let ours: Float32Array;
    try {
      ours = await m.evaluate(0, tokens(i), 'all');
    } finally {
      m.close();
    }
    const e = nmse(ours, ref.logits);
    const { agree, total } = top1Agreement(ours, ref.logits, ref.nVocab, 0);
    table.push(`${name.padEnd(70)} NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}`);
    expect(e).toBeLessThanOrEqual(1e-9);
    expect(agree).toBe(total);
  }, 60_000);
});
