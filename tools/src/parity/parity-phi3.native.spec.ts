// Parity with llama.cpp for phi3 (Phi-3, Phi-3.5, Phi-4: fused attn_qkv and gate/up, partial RoPE)
// and phimoe (Phi-3.5-MoE: biased RMS norms, attention and head; softmax top-2 experts), and for
// LongRoPE: the factor tables llama.cpp picks by the context it is loaded with (short at or below
// rope.scaling.original_context_length, long above), with rope.scaling.attn_factor, in phi3,
// phimoe and a llama file typed longrope. Each file runs at a context of 256 (short factors) and
// 512 (long), in kail and in llama.cpp. Same rules as parity.native.spec.ts. And Phi-3's
// vocabulary: a file named like Phi-3 strips the whitespace after its control tokens (llama.cpp's
// RSTRIP by model name), which changes how a chat prompt tokenizes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ChatTemplate, EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import type { FileTypeName } from '../models/quant-plan';
import { llamaLogitsBatch, llamaTokenize, type LlamaLogits } from './llama-ref';
import { nmse, tokenIds, top1Agreement } from './metrics';
import { quantSpread, quantSpreadRefs, type QuantSpreadRefs } from './quant-spread';

const PRESETS = ['tiny-phi3', 'tiny-phi3-4k', 'tiny-phimoe', 'tiny-llama-longrope'];
const LONGROPE = new Set(['tiny-phi3', 'tiny-phimoe', 'tiny-llama-longrope']);
const TYPES: [FileTypeName, number][] = [['F32', 1e-6], ['F16', 1e-5]];
const CTXS = [256, 512];
const QUANT_CASES: [string, FileTypeName][] = [
  ['tiny-phimoe', 'Q4_K_M'],
  ['tiny-phi3', 'Q8_0'],
];

let dir: string;
const table: string[] = [];
const file = (preset: string, type: string) => path.join(dir, `${preset}-${type}.gguf`);


async function kailLogits(model: string, tokens: number[], nCtx: number): Promise<Float32Array> {
  const m = EngineModel.load(model, { kvType: 'f32', threads: 2, nCtx });
  try {
    return await m.evaluate(0, tokens, 'all', 64);
  } finally {
    m.close();
  }
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-phi3-'));
}, 60_000);
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`\nparity with llama.cpp (phi3/phimoe/LongRoPE, measured):\n${table.join('\n')}\n`);
});

describe('float files at a short and a long context', () => {
  const refs = new Map<number, LlamaLogits[]>();
  const jobs: { preset: string; type: FileTypeName; bound: number; tokens: number[] }[] = [];
  beforeAll(async () => {
    for (const preset of PRESETS) {
      const cfg = getPreset(preset).config;
      for (const [type, bound] of TYPES) {
        writeModel({ config: cfg, fileType: type, seed: 7, out: file(preset, type) });
        jobs.push({ preset, type, bound, tokens: tokenIds(64, cfg.vocabSize, 11) });
      }
    }
    for (const ctx of CTXS)
      refs.set(ctx, await llamaLogitsBatch(jobs.map((j) => ({ model: file(j.preset, j.type), tokens: j.tokens })), { kv: 'f32', flashAttention: 'off', ctx, timeoutMs: 300_000 }));
  }, 400_000);

  it.each(PRESETS.flatMap((a) => TYPES.flatMap(([t]) => CTXS.map((c) => [a, t, c] as const))))('%s %s ctx %d', async (preset, type, ctx) => {
    const i = jobs.findIndex((j) => j.preset === preset && j.type === type);
    const ref = refs.get(ctx)![i];
    const ours = await kailLogits(file(preset, type), jobs[i].tokens, ctx);
    const e = nmse(ours, ref.logits);
    // F32 certifies the semantics (every top-1); F16 allows llama.cpp's top token to lead ours by 0.1.
    const { agree, total } = top1Agreement(ours, ref.logits, ref.nVocab, type === 'F32' ? 0 : 0.1);
    table.push(`${preset.padEnd(20)} ${type.padEnd(4)} ctx ${ctx}  NMSE ${e.toExponential(2)}  top-1 ${agree}/${total}  (bound ${jobs[i].bound})`);
    expect(e).toBeLessThanOrEqual(jobs[i].bound);
    expect(agree).toBe(total);
  });

  it.each([...LONGROPE])('%s: the long and short factor tables give different logits (the switch is exercised)', (preset) => {
    const i = jobs.findIndex((j) => j.preset === preset && j.type === 'F32');
    const apart = nmse(refs.get(256)![i].logits, refs.get(512)![i].logits);
    table.push(`${preset.padEnd(20)} llama.cpp ctx 256 vs 512: NMSE ${apart.toExponential(2)}`);
    expect(apart).toBeGreaterThan(1e-3);
  });
});

describe('Phi-3 chat prompts tokenize as in llama.cpp', () => {
  it('the rendered template, control tokens with the whitespace after them stripped; <|end|> ends a turn', async () => {
    const model = path.join(dir, 'tiny-phi3-vocab.gguf');
    writeModel({ config: { ...getPreset('tiny-phi3').config, nLayers: 1 }, fileType: 'F32', seed: 3, out: model });
    const m = EngineModel.load(model, { threads: 1, nCtx: 256 });
    try {
      const messages = [
        { role: 'system', content: 'Be terse.' },
        { role: 'user', content: '  What routes\n the experts? ' },
        { role: 'assistant', content: 'The router.' },
        { role: 'user', content: '\n\tTabs and </s> spaces  ' },
      ];
      const text = ChatTemplate.fromTokenizer(m.tokenizer).render(messages, { addGenerationPrompt: true });
      expect(text).toBe('<|system|>\nBe terse.<|end|>\n<|user|>\n  What routes\n the experts? <|end|>\n<|assistant|>\nThe router.<|end|>\n<|user|>\n\n\tTabs and </s> spaces  <|end|>\n<|assistant|>\n');
      const ours = m.tokenizer.tokenize(text, { parseSpecial: true });
      const ref = await llamaTokenize(model, text, { special: true, bos: true });
      expect(ours).toEqual(ref);
      // The stripping is what makes them agree: without it the newline after <|system|> would be a token.
      const nl = m.tokenizer.tokenize('\n', { addSpecial: false });
      expect(ours.slice(1, 1 + 1 + nl.length)).not.toEqual([ours[1], ...nl]);
      const end = m.tokenizer.tokenize('<|end|>', { parseSpecial: true, addSpecial: false });
      expect(end).toHaveLength(1);
      expect(m.tokenizer.isEog(end[0])).toBe(true);
    } finally {
      m.close();
    }
  }, 60_000);
});

describe('quantized files stay within llama.cpp’s own spread', () => {
  let refs: QuantSpreadRefs;
  beforeAll(async () => {
    refs = await quantSpreadRefs(QUANT_CASES, file, 300_000);
  }, 400_000);

  it.each(QUANT_CASES)('%s %s', async (p, t) => {
    const i = QUANT_CASES.findIndex(([a, b]) => a === p && b === t);
    const d = quantSpread(await kailLogits(file(p, t), refs.tokens[i], 512), refs, i);
    table.push(`${p.padEnd(20)} ${t.padEnd(6)} kail↔llama.cpp exact ${d.kail.toExponential(2)}  llama.cpp default↔exact ${d.llama.toExponential(2)}`);
    expect(d.kail).toBeLessThanOrEqual(Math.max(d.llama * 2, 1e-6));
  });
});
