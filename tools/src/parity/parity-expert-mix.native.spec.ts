// MoE files whose gate and up experts are of types that take different activation types, as a
// quant mix writes them (llama-quantize --tensor-type ffn_gate_exps=…): llama.cpp runs the two
// products apart, each quantizing the input its own way, and so does kail (the input once more in
// the up experts' activation type). Before, kail loaded such a file and failed every evaluation.
// A float mix (F16 gate, F32 up) must match llama.cpp's exact logits to float rounding; a quantized
// one stays within llama.cpp's own spread (its default run against its exact run).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { GgmlType } from '../gguf/constants';
import { quantizeModel } from '../gguf/quantize';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';

const CASES: [name: string, fileType: string, tensorTypes: { pattern: string; type: GgmlType }[]][] = [
  ['F32, gate experts F16 (F16 and F32 activations)', 'F32', [{ pattern: 'ffn_gate_exps', type: GgmlType.F16 }]],
  ['Q4_K_M, gate experts Q8_0 (Q8_0 and Q8_K activations)', 'Q4_K_M', [{ pattern: 'ffn_gate_exps', type: GgmlType.Q8_0 }]],
  ['Q8_0, up experts BF16 (Q8_0 and BF16 activations)', 'Q8_0', [{ pattern: 'ffn_up_exps', type: GgmlType.BF16 }]],
];

describe('MoE gate and up experts of different activation types (tiny-qwen3moe), against llama.cpp', () => {
  let dir: string;
  let refs: LlamaLogits[];
  const cfg = getPreset('tiny-qwen3moe').config;
  const tokens = tokenIds(64, cfg.vocabSize, 5);
  const file = (i: number) => path.join(dir, `mix-${i}.gguf`);
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-expert-mix-'));
    const f32 = path.join(dir, 'f32.gguf');
    writeModel({ config: cfg, fileType: 'F32', seed: 7, out: f32 });
    CASES.forEach(([, type, tensorTypes], i) => quantizeModel(f32, file(i), { type, tensorTypes, threads: 2 }));
    // Per file: llama.cpp's exact run (F32 KV, no flash attention), then its default one.
    refs = await llamaLogitsBatch(
      CASES.flatMap((_, i) => [
        { model: file(i), tokens, kv: 'f32' as const, flashAttention: 'off' as const },
        { model: file(i), tokens, kv: 'f16' as const, flashAttention: 'auto' as const },
      ]),
      { timeoutMs: 240_000 },
    );
  }, 300_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each(CASES.map(([name], i) => [name, i] as const))('%s', async (_name, i) => {
    const m = EngineModel.load(file(i), { kvType: 'f32', threads: 2, nCtx: tokens.length + 8 });
    let ours: Float32Array;
    try {
      ours = await m.evaluate(0, tokens, 'all', 32);
    } finally {
      m.close();
    }
    const exact = refs[2 * i];
    const e = nmse(ours, exact.logits);
    const spread = nmse(refs[2 * i + 1].logits, exact.logits);
    process.stdout.write(`${CASES[i][0]}: kail↔llama.cpp exact NMSE ${e.toExponential(2)}, llama.cpp default↔exact ${spread.toExponential(2)} (measured)\n`);
    if (CASES[i][1] === 'F32') {
      expect(e).toBeLessThanOrEqual(1e-10);
      const { agree, total } = top1Agreement(ours, exact.logits, exact.nVocab);
      expect(agree).toBe(total);
    } else {
      expect(e).toBeLessThanOrEqual(Math.max(spread * 2, 1e-6));
    }
  });
});
