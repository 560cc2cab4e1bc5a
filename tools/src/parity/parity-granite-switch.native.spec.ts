// Parity with llama.cpp (node-llama-cpp 3.22.1) for graniteswitch (Granite Switch: dense Granite
// whose seven projections add a LoRA delta switched per token by a one-head router over the
// adapters' activation tokens) on models the project writes itself. Same rules as the other dense
// parity specs (dense-parity.suite.ts). The presets put activation tokens inside both token
// sequences (presets-granite-switch.ts), so the router's slot changes mid-sequence: 0 -> 1 -> 2
// over the F32 tests' 64 tokens, 0 -> 2 -> 3 over the quantized tests' 128 (the adapters really
// act: granite-switch.native.spec.ts compares with the same file's deltas zeroed). And a context
// shift (parity-context-shift's: 48 in, 20 dropped after the first 4, 16 more) that drops adapter
// 1's token at position 9: the router's rows go with it (llama.cpp's seq_rm covers its router
// layer; its K-shift skips that layer, as kail's rope-free layer is not turned), so the kept
// tokens after 919 switch from slot 2 to adapter 3's slot 3.
import fs from 'node:fs';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { writeLoraAdapter } from '../models/lora';
import { getPreset } from '../models/presets';
import { denseParitySuite } from './dense-parity.suite';
import { llamaLogitsBatch } from './llama-ref';
import { medianNmse, nmse, tokenIds } from './metrics';

const suite = denseParitySuite({
  name: 'graniteswitch',
  f32: [
    ['tiny-graniteswitch', 1e-12],
    ['tiny-graniteswitch-2', 1e-12],
  ],
  quant: [
    ['tiny-graniteswitch', 'Q4_K_M'],
    ['tiny-graniteswitch', 'Q8_0'],
  ],
});

it("tiny-graniteswitch: a context shift that drops an activation token gives llama.cpp's logits", async () => {
  const SHIFT = { at: 48, keep: 4, discard: 20 };
  const model = suite.file('tiny-graniteswitch', 'F32');
  // (The F32 tests wrote it, as the suite's does: the same preset and seed.)
  if (!fs.existsSync(model)) writeModel({ config: getPreset('tiny-graniteswitch').config, fileType: 'F32', seed: 7, out: model });
  const toks = tokenIds(64, 1024, 11);
  const kept = [...toks.slice(0, SHIFT.keep), ...toks.slice(SHIFT.keep + SHIFT.discard)];
  const [ref, fresh] = await llamaLogitsBatch(
    [
      { model, tokens: toks, shift: SHIFT },
      { model, tokens: kept },
    ],
    { kv: 'f32', flashAttention: 'off', ctx: 128, timeoutMs: 120_000 },
  );
  const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: 72 });
  let ours: Float32Array;
  try {
    await m.evaluate(0, toks.slice(0, SHIFT.at), 'last', 16);
    expect(m.shiftContext(0, SHIFT.keep, SHIFT.discard)).toBe(SHIFT.at - SHIFT.discard);
    ours = await m.evaluate(0, toks.slice(SHIFT.at), 'all', 16);
  } finally {
    m.close();
  }
  const nv = ref.nVocab;
  const err = medianNmse(ours, ref.logits, nv);
  const vsFresh = medianNmse(ref.logits, fresh.logits.subarray((SHIFT.at - SHIFT.discard) * nv), nv);
  suite.table.push(`tiny-graniteswitch     shift   kail vs llama.cpp ${err.toExponential(2)}; llama.cpp's shifted vs a fresh run of the kept tokens ${vsFresh.toExponential(2)}`);
  expect(vsFresh).toBeGreaterThan(1e-4);
  expect(err).toBeLessThan(1e-7);
}, 180_000);

// A LoRA adapter file (llama.cpp's --lora) with pairs on the token embedding, the fused qkv, the
// block projections and the output: llama.cpp's graniteswitch graph multiplies and embeds without
// build_lora_mm except for the output, so only that pair acts; kail checks the others and leaves
// them unused.
it("tiny-graniteswitch with a LoRA adapter file gives llama.cpp's logits (only the output's pair acts)", async () => {
  const model = suite.file('tiny-graniteswitch', 'F32');
  if (!fs.existsSync(model)) writeModel({ config: getPreset('tiny-graniteswitch').config, fileType: 'F32', seed: 7, out: model });
  const adapter = writeLoraAdapter({
    config: getPreset('tiny-graniteswitch').config,
    out: `${model}.lora.gguf`,
    rank: 4,
    targets: ['token_embd.weight', 'attn_qkv', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down', 'output.weight'],
  }).path;
  const toks = tokenIds(64, 1024, 11);
  const [plain, ref] = await llamaLogitsBatch(
    [
      { model, tokens: toks },
      { model, tokens: toks, lora: [{ path: adapter }] },
    ],
    { kv: 'f32', flashAttention: 'off', timeoutMs: 120_000 },
  );
  const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx: 72, lora: [{ path: adapter }] });
  let ours: Float32Array;
  try {
    ours = await m.evaluate(0, toks, 'all', 64);
  } finally {
    m.close();
  }
  const e = nmse(ours, ref.logits);
  suite.table.push(`tiny-graniteswitch     LoRA    NMSE ${e.toExponential(2)} (the adapter moves llama.cpp's logits by NMSE ${nmse(plain.logits, ref.logits).toExponential(2)})`);
  expect(nmse(plain.logits, ref.logits)).toBeGreaterThan(1e-4);
  expect(e).toBeLessThan(1e-12);
}, 180_000);
