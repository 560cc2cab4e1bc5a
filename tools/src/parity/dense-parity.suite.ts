// The dense-decoder parity suite the per-family specs share (parity-gpt2, -parallel, -alibi,
// -misc-dense, -jais-bitnet), with the rules of parity-moe-families' dense cases: each preset
// written in F32 (seed 7) and run over 64 tokens against llama.cpp's exact run (F32 KV, no flash
// attention), every top-1 the same and the NMSE within the preset's bound; each quantized
// (preset, type) within llama.cpp's own spread (quant-spread.ts), every top-1 the same where the
// logits are not within 0.1 of a tie. Registers its jest hooks and tests when called from a spec
// file's top level; the spec adds its own tests with what it returns. (Test-only: jest globals,
// left out of the tools build by tsconfig.lib.json's *.suite.ts.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';
import { quantSpread, quantSpreadRefs, type QuantSpreadRefs } from './quant-spread';

export interface DenseParityOptions {
  /** Names the temp directory and the printed table. */
  name: string;
  /** [preset, F32 NMSE bound]. */
  f32: readonly [string, number][];
  /** [preset, quantized file type]. */
  quant: readonly [string, FileTypeName][];
  /** llama.cpp's reference timeout per batch (default 300 s). */
  timeoutMs?: number;
}

export interface DenseParity {
  /** The file a (preset, type) is written to (the temp directory exists from the spec's first hook). */
  file(preset: string, type: string): string;
  /** kail's logits for every token, one model load with an F32 KV cache, passes of 64. */
  kailLogits(model: string, tokens: readonly number[]): Promise<Float32Array>;
  /** The 64 F32 input tokens of a preset of `f32`. */
  tokens(preset: string): number[];
  /** Lines printed with the table after the spec. */
  table: string[];
}

export function denseParitySuite(o: DenseParityOptions): DenseParity {
  const timeoutMs = o.timeoutMs ?? 300_000;
  let dir = '';
  const table: string[] = [];
  const toks = new Map<string, number[]>();
  const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);
  const kailLogits = async (model: string, tokens: readonly number[]): Promise<Float32Array> => {
    const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: tokens.length + 8 });
    try {
      return await m.evaluate(0, [...tokens], 'all', 64);
    } finally {
      m.close();
    }
  };
  const pad = Math.max(20, ...o.f32.map(([p]) => p.length + 2), ...o.quant.map(([p]) => p.length + 2));

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), `kail-parity-${o.name.replace(/[^a-z0-9]+/gi, '-')}-`));
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nparity with llama.cpp (${o.name}, measured):\n${table.join('\n')}\n`);
  });

  describe('F32 files', () => {
    let refs: Awaited<ReturnType<typeof llamaLogitsBatch>>;
    beforeAll(async () => {
      for (const [preset] of o.f32) {
        const cfg = getPreset(preset).config;
        writeModel({ config: cfg, fileType: 'F32', seed: 7, out: file(preset, 'F32') });
        toks.set(preset, tokenIds(64, cfg.vocabSize, 11));
      }
      refs = await llamaLogitsBatch(o.f32.map(([p]) => ({ model: file(p, 'F32'), tokens: toks.get(p)! })), { kv: 'f32', flashAttention: 'off', timeoutMs });
    }, timeoutMs + 100_000);

    it.each(o.f32)('%s F32 (bound %s)', async (preset, bound) => {
      const i = o.f32.findIndex(([p]) => p === preset);
      const ours = await kailLogits(file(preset, 'F32'), toks.get(preset)!);
      const e = nmse(ours, refs[i].logits);
      const { agree, total } = top1Agreement(ours, refs[i].logits, refs[i].nVocab);
      table.push(`${preset.padEnd(pad)} F32     NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}  (bound ${bound})`);
      expect(e).toBeLessThanOrEqual(bound);
      expect(agree).toBe(total);
    });
  });

  if (o.quant.length)
    describe('quantized files stay within llama.cpp’s own spread', () => {
      let refs: QuantSpreadRefs;
      beforeAll(async () => {
        refs = await quantSpreadRefs(o.quant, file, timeoutMs);
      }, timeoutMs + 100_000);

      it.each(o.quant)('%s %s', async (p, t) => {
        const i = o.quant.findIndex(([a, b]) => a === p && b === t);
        const ours = await kailLogits(file(p, t), refs.tokens[i]);
        const d = quantSpread(ours, refs, i);
        const { agree, total } = top1Agreement(ours, refs.exact[i].logits, refs.exact[i].nVocab, 0.1);
        table.push(`${p.padEnd(pad)} ${t.padEnd(7)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}  top-1 ${agree}/${total}`);
        expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
        expect(agree).toBe(total);
      });
    });

  return { file, kailLogits, tokens: (p) => toks.get(p)!, table };
}
