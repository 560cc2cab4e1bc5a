// DeepSeek-V4 (tiny-deepseek4, and tiny-deepseek4-yarn: YaRN, HCA first, 20 Sinkhorn iterations) against llama.cpp (node-llama-cpp 3.22.1's prebuilt library): a
// prompt of 160 tokens in one pass (the HCA block's first compressed row lands at position 127,
// the CSA blocks' indexer picks 4 of up to 40 compressed rows), the same tokens decoded one at a
// time against llama.cpp decoding them one at a time (its compressor state then takes the decode
// path: state rows persisted between ubatches), and quantized files within llama.cpp's own
// spread (its default run, F16 KV and flash attention auto, against its exact run).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { EngineModel, type KvType } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';

const PRESETS = ['tiny-deepseek4', 'tiny-deepseek4-yarn'];
const QUANT: [string, FileTypeName][] = [['tiny-deepseek4', 'Q8_0'], ['tiny-deepseek4', 'Q4_K_M'], ['tiny-deepseek4-yarn', 'Q8_0']];
const N = 160;
let dir: string;
const table: string[] = [];
const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);
const tokens = tokenIds(N, getPreset(PRESETS[0]).config.vocabSize, 11);

async function kail(model: string, toks: number[], oneByOne = false, kv: KvType = 'f32'): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType: kv, threads: 2, nCtx: toks.length + 8 });
  try {
    if (!oneByOne) return await m.evaluate(0, toks, 'all', 64);
    const V = m.nVocab;
    const out = new Float32Array(toks.length * V);
    for (let i = 0; i < toks.length; i++) out.set(await m.evaluate(0, [toks[i]], 'last'), i * V);
    return out;
  } finally {
    m.close();
  }
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-dsv4-'));
  for (const [p, t] of [...PRESETS.map((p) => [p, 'F32'] as [string, FileTypeName]), ...QUANT]) writeModel({ config: getPreset(p).config, fileType: t, seed: 7, out: file(p, t) });
}, 60_000);
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nparity with llama.cpp (deepseek4, measured):\n${table.join('\n')}\n`);
});

describe.each(PRESETS)('%s F32: one pass and token by token', (preset) => {
  let batched: LlamaLogits;
  let decoded: LlamaLogits;
  beforeAll(async () => {
    [batched] = await llamaLogitsBatch([{ model: file(preset, 'F32'), tokens }], { kv: 'f32', flashAttention: 'off', timeoutMs: 120_000 });
    [decoded] = await llamaLogitsBatch([{ model: file(preset, 'F32'), tokens }], { kv: 'f32', flashAttention: 'off', batch: 1, timeoutMs: 120_000 });
  }, 300_000);

  it(`a ${N}-token prompt in one pass`, async () => {
    const ours = await kail(file(preset, 'F32'), tokens);
    const e = nmse(ours, batched.logits);
    const { agree, total } = top1Agreement(ours, batched.logits, batched.nVocab);
    table.push(`${preset.padEnd(20)} F32 one pass (${N})        NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}`);
    expect(e).toBeLessThanOrEqual(1e-10);
    expect(agree).toBe(total);
  }, 60_000);

  it(`${N} tokens decoded one at a time (llama.cpp with ubatches of 1)`, async () => {
    const ours = await kail(file(preset, 'F32'), tokens, true);
    const e = nmse(ours, decoded.logits);
    const { agree, total } = top1Agreement(ours, decoded.logits, decoded.nVocab);
    table.push(`${preset.padEnd(20)} F32 token by token (${N})  NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}  (llama.cpp batched vs decoded ${nmse(decoded.logits, batched.logits).toExponential(2)})`);
    expect(e).toBeLessThanOrEqual(1e-10);
    expect(agree).toBe(total);
  }, 120_000);
});

describe('quantized files stay within llama.cpp’s own spread', () => {
  let exact: LlamaLogits[];
  let runtime: LlamaLogits[];
  beforeAll(async () => {
    const jobs = QUANT.map(([p, t]) => ({ model: file(p, t), tokens }));
    exact = await llamaLogitsBatch(jobs, { kv: 'f32', flashAttention: 'off', timeoutMs: 200_000 });
    runtime = await llamaLogitsBatch(jobs, { kv: 'f16', flashAttention: 'auto', timeoutMs: 200_000 });
  }, 400_000);

  it.each(QUANT)('%s %s', async (p, t) => {
    const i = QUANT.findIndex(([a, b]) => a === p && b === t);
    const ours = await kail(file(p, t), tokens);
    const d = { kail: nmse(ours, exact[i].logits), llama: nmse(runtime[i].logits, exact[i].logits) };
    const { agree, total } = top1Agreement(ours, exact[i].logits, exact[i].nVocab, 0.1);
    table.push(`${p.padEnd(20)} ${t.padEnd(7)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}  top-1 ${agree}/${total}`);
    expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
    expect(agree).toBe(total);
  }, 60_000);
});
