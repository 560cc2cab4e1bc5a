// Parity with llama.cpp for DeepSeek-V3's, Qwen3.5's, Nemotron 3's and DeepSeek-V4's multi-token-prediction blocks (the built-in draft of
// speculative decoding): the trunk's normalized hidden states, the block's logits and hidden
// states for every (token, previous hidden state) row, and chained draft steps, against
// llama.cpp's MTP graph (mtp-ref.ts). The engine side runs exactly what speculation runs:
// EngineModel.load(path, { mtp: true }) fed the target's hidden rows (the target loaded with
// nextnHidden: DeepSeek-V4's are its 4 hyper-connection streams, hc x n_embd).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch } from './llama-ref';
import { llamaMtpRef, type MtpRef } from './mtp-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';

const N = 24;
const STEPS = 3;
// F32 certifies the semantics (every top-1 matches); F16 weights round differently in the two
// programs' summation orders, within the bound the other parity specs use.
const CASES: [FileTypeName, number, number][] = [
  ['F32', 1e-6, 0],
  ['F16', 1e-5, 0.1],
];
// DeepSeek-V4's: F32 at the deepseek4 parity spec's bound; Q8_0 within llama.cpp's own spread
// (its default run, F16 KV and flash attention auto, against its exact run, over the same tokens;
// 'spread' below), every top-1 the same.
const DSV4: [string, FileTypeName, number | 'spread', number][] = [
  ['tiny-deepseek4', 'F32', 1e-10, 0],
  ['tiny-deepseek4', 'Q8_0', 'spread', 0.1],
];

let dir: string;
const table: string[] = [];


beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-mtp-'));
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nMTP parity with llama.cpp (${N} tokens, ${STEPS} chained steps, measured):\n${table.join('\n')}\n`);
});

// DeepSeek-V3's block (MLA, MoE + shared experts), Qwen3.5's and Qwen3-Next's (gated full
// attention over a trunk of delta nets, softmax experts + a gated shared expert), Nemotron 3's
// (GQA without positions over a Mamba-2 trunk, gate-less squared-ReLU experts, a LayerNorm head).
// DeepSeek-V4's (hyper-connection streams in and out, a window-attention block, sqrt-softplus experts).
describe.each([...['tiny-deepseek3-mtp', 'tiny-qwen35moe-mtp', 'tiny-qwen3next-mtp', 'tiny-nemotron-h-moe-mtp'].flatMap((preset) => CASES.map((c) => [preset, ...c] as const)), ...DSV4])('%s %s', (preset, type, given, margin) => {
  let bound = 0;
  let ref: MtpRef;
  let file: string;
  let tokens: number[];
  let target: EngineModel;
  let mtp: EngineModel;
  beforeAll(async () => {
    const cfg = getPreset(preset).config;
    file = path.join(dir, `${preset}-${type}.gguf`);
    writeModel({ config: cfg, fileType: type, seed: 5, out: file });
    tokens = tokenIds(N, cfg.vocabSize, 23);
    ref = await llamaMtpRef(file, tokens, { draftSteps: STEPS, threads: 2 });
    if (given === 'spread') {
      const [exact] = await llamaLogitsBatch([{ model: file, tokens }], { kv: 'f32', flashAttention: 'off', timeoutMs: 120_000 });
      const [runtime] = await llamaLogitsBatch([{ model: file, tokens }], { kv: 'f16', flashAttention: 'auto', timeoutMs: 120_000 });
      const spread = nmse(runtime.logits, exact.logits);
      bound = Math.max(2 * spread, 1e-6);
      table.push(`${preset.padEnd(19)} ${type.padEnd(4)} llama.cpp default↔exact trunk logits NMSE ${spread.toExponential(2)}: bound ${bound.toExponential(2)}`);
    } else bound = given;
    const opts = { threads: 2, nCtx: N + STEPS + 8, kvType: 'f32' as const };
    target = EngineModel.load(file, { ...opts, nextnHidden: true });
    mtp = EngineModel.load(file, { ...opts, mtp: true });
  }, 300_000);
  afterAll(() => {
    target?.close();
    mtp?.close();
  });

  it("trunk logits and hidden states (llama.cpp's h_nextn)", async () => {
    const { logits, hidden } = await target.evaluateWithHidden(0, tokens, 'all');
    const eL = nmse(logits, ref.targetLogits);
    const eH = nmse(hidden, ref.targetH);
    table.push(`${preset.padEnd(19)} ${type.padEnd(4)} trunk logits NMSE ${eL.toExponential(2)}, hidden NMSE ${eH.toExponential(2)}`);
    expect(eL).toBeLessThanOrEqual(bound);
    expect(eH).toBeLessThanOrEqual(bound);
  });

  it('MTP rows (token at p, target hidden state of p-1) and chained draft steps', async () => {
    const w = ref.nEmbd;
    // The MTP rows with llama.cpp's own target hidden states, so this checks the block alone.
    const embd = new Float32Array(N * w);
    embd.set(ref.targetH.subarray(0, (N - 1) * w), w);
    mtp.truncate(0, 0);
    const r = await mtp.forwardBatchWithHidden({
      tokens: Int32Array.from(tokens),
      pos: Int32Array.from(tokens.keys()),
      seq: new Int32Array(N),
      output: new Uint8Array(N).fill(1),
      embd,
    });
    const eL = nmse(r.logits, ref.mtpLogits);
    const eH = nmse(r.hidden, ref.mtpH);
    const top = top1Agreement(r.logits, ref.mtpLogits, ref.nVocab, margin);
    // Chained steps: llama.cpp's draft tokens, each with the block's own previous hidden row.
    const steps = new Float32Array(STEPS * ref.nVocab);
    let h: Float32Array = r.hidden.slice((N - 1) * w);
    for (let j = 0; j < STEPS; j++) {
      const s = await mtp.forwardBatchWithHidden({
        tokens: Int32Array.of(ref.draftTokens[j]),
        pos: Int32Array.of(ref.draftPos + j),
        seq: Int32Array.of(0),
        output: Uint8Array.of(1),
        embd: h,
      });
      steps.set(s.logits, j * ref.nVocab);
      h = s.hidden;
    }
    const eS = nmse(steps, ref.draftLogits);
    table.push(
      `${preset.padEnd(19)} ${type.padEnd(4)} MTP logits NMSE ${eL.toExponential(2)} (top-1 ${top.agree}/${top.total}), MTP hidden NMSE ${eH.toExponential(2)}, ` +
        `${STEPS} chained steps NMSE ${eS.toExponential(2)}  (bound ${bound.toExponential(2)})`,
    );
    expect(eL).toBeLessThanOrEqual(bound);
    expect(eH).toBeLessThanOrEqual(bound);
    expect(eS).toBeLessThanOrEqual(bound);
    expect(top.agree).toBe(top.total);
  });
});
