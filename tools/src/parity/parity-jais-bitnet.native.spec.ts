// Parity with llama.cpp (node-llama-cpp 3.22.1) for jais (ALiBi from attention.max_alibi_bias,
// LayerNorms, one attn_qkv with its bias, 1/head scores, SwiGLU with gate / up / down biases),
// jais2 (LayerNorms, q/k/v biases, NeoX RoPE, ungated ReLU² with biases) and bitnet (sub-norms,
// per-tensor scales, tied head) on models the project writes itself. Same rules as the dense
// cases of parity-moe-families: F32 over 64 tokens against llama.cpp's exact run (F32 KV, no flash
// attention), every top-1; quantized files (bitnet in the ternary TQ2_0 / TQ1_0 it ships in)
// against llama.cpp's own spread.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';
import { quantSpread, quantSpreadRefs, type QuantSpreadRefs } from './quant-spread';

const PRESETS: [string, number][] = [
  ['tiny-jais', 1e-11],
  ['tiny-jais2', 1e-11],
  ['tiny-bitnet', 1e-11],
];
const QUANT_CASES: [string, FileTypeName][] = [
  ['tiny-jais', 'Q4_K_M'],
  ['tiny-jais2', 'Q8_0'],
  ['tiny-bitnet', 'TQ2_0'],
  ['tiny-bitnet', 'TQ1_0'],
];

let dir: string;
const table: string[] = [];
const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);

async function kailLogits(model: string, tokens: number[]): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: tokens.length + 8 });
  try {
    return await m.evaluate(0, tokens, 'all', 64);
  } finally {
    m.close();
  }
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-jais-'));
}, 60_000);
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nparity with llama.cpp (jais/jais2/bitnet, measured):\n${table.join('\n')}\n`);
});

describe('F32 files', () => {
  let refs: LlamaLogits[];
  const toks: Record<string, number[]> = {};
  beforeAll(async () => {
    for (const [preset] of PRESETS) {
      const cfg = getPreset(preset).config;
      writeModel({ config: cfg, fileType: 'F32', seed: 7, out: file(preset, 'F32') });
      toks[preset] = tokenIds(64, cfg.vocabSize, 11);
    }
    refs = await llamaLogitsBatch(PRESETS.map(([p]) => ({ model: file(p, 'F32'), tokens: toks[p] })), { kv: 'f32', flashAttention: 'off', timeoutMs: 300_000 });
  }, 400_000);

  it.each(PRESETS)('%s F32', async (preset, bound) => {
    const i = PRESETS.findIndex(([p]) => p === preset);
    const ours = await kailLogits(file(preset, 'F32'), toks[preset]);
    const e = nmse(ours, refs[i].logits);
    const { agree, total } = top1Agreement(ours, refs[i].logits, refs[i].nVocab);
    table.push(`${preset.padEnd(14)} F32     NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}  (bound ${bound})`);
    expect(e).toBeLessThanOrEqual(bound);
    expect(agree).toBe(total);
  });
});

describe('quantized files stay within llama.cpp’s own spread', () => {
  let refs: QuantSpreadRefs;
  beforeAll(async () => {
    refs = await quantSpreadRefs(QUANT_CASES, file, 300_000);
  }, 400_000);

  it.each(QUANT_CASES)('%s %s', async (p, t) => {
    const i = QUANT_CASES.findIndex(([a, b]) => a === p && b === t);
    const ours = await kailLogits(file(p, t), refs.tokens[i]);
    const d = quantSpread(ours, refs, i);
    const { agree, total } = top1Agreement(ours, refs.exact[i].logits, refs.exact[i].nVocab, 0.1);
    table.push(`${p.padEnd(14)} ${t.padEnd(7)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}  top-1 ${agree}/${total}`);
    expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
    expect(agree).toBe(total);
  });
});
