// LoRA adapters (llama.cpp's --lora / --lora-scaled; GGUF adapter files from this project's
// writer, tools/src/models/lora.ts) against llama.cpp with the same adapters: on float files, kail's
// logits with adapters match llama.cpp's as closely as without, and the adapters do change them.
// Dense projections (attention, dense FFN, output), the token embedding (its flipped pair), a MoE's
// routed experts (a pair per expert), F32 and F16 pairs, alpha / rank scaling, two adapters with
// their own scales.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { writeLoraAdapter } from '../models/lora';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch } from './llama-ref';
import { nmse, tokenIds } from './metrics';

type Lora = { path: string; scale?: number }[];


async function kailLogits(model: string, tokens: number[], lora: Lora): Promise<Float32Array> {
  const m = EngineModel.load(model, { threads: 2, nCtx: tokens.length + 8, kvType: 'f32', lora });
  try {
    return await m.evaluate(0, tokens, 'all', 16);
  } finally {
    m.close();
  }
}

describe("LoRA adapters against llama.cpp's", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-lora-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const f = (n: string) => path.join(dir, n);
  const llama = getPreset('tiny-llama').config;
  const moe = getPreset('tiny-qwen3moe').config;
  const untied = { ...llama, tiedEmbeddings: false };

  const cases: { name: string; model: string; lora: Lora }[] = [];
  beforeAll(() => {
    writeModel({ config: untied, fileType: 'F32', seed: 3, out: f('llama.gguf') });
    writeModel({ config: moe, fileType: 'F32', seed: 3, out: f('moe.gguf') });
    writeLoraAdapter({ config: untied, out: f('llama-a.gguf'), rank: 8, alpha: 16, seed: 1 });
    writeLoraAdapter({ config: untied, out: f('llama-b.gguf'), rank: 4, alpha: 0, type: 'F16', seed: 2, targets: ['attn_v', 'ffn_down', 'token_embd.weight'] });
    writeLoraAdapter({ config: moe, out: f('moe-a.gguf'), rank: 16, alpha: 32, type: 'F16', seed: 3 });
    writeLoraAdapter({ config: moe, out: f('moe-exps.gguf'), rank: 4, alpha: 8, seed: 4, bStd: 0.2, targets: ['attn_v', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'] });
    cases.push(
      { name: 'dense projections and output, F32, alpha 16 / rank 8', model: f('llama.gguf'), lora: [{ path: f('llama-a.gguf') }] },
      { name: 'the same at scale 0.5', model: f('llama.gguf'), lora: [{ path: f('llama-a.gguf'), scale: 0.5 }] },
      { name: 'V, FFN down and the token embedding, F16, no alpha, with the first at scale 0.75', model: f('llama.gguf'), lora: [{ path: f('llama-b.gguf') }, { path: f('llama-a.gguf'), scale: 0.75 }] },
      { name: "a MoE's attention and output, F16, alpha 32 / rank 16", model: f('moe.gguf'), lora: [{ path: f('moe-a.gguf') }] },
      { name: "a MoE's routed experts (gate, up, down per expert) and V, F32, alpha 8 / rank 4, with the first at scale 0.5", model: f('moe.gguf'), lora: [{ path: f('moe-exps.gguf') }, { path: f('moe-a.gguf'), scale: 0.5 }] },
    );
  }, 120_000);

  it('logits match llama.cpp with the same adapters; the adapters change them', async () => {
    const tokens = (model: string) => tokenIds(48, (model.includes('moe') ? moe : llama).vocabSize, 11);
    const jobs = [
      { model: f('llama.gguf'), tokens: tokens('llama') },
      { model: f('moe.gguf'), tokens: tokens('moe') },
      ...cases.map((c) => ({ model: c.model, tokens: tokens(c.model), lora: c.lora })),
    ];
    const ref = await llamaLogitsBatch(jobs, { kv: 'f32', timeoutMs: 300_000 });
    const lines: string[] = [];
    for (const [i, c] of cases.entries()) {
      const ours = await kailLogits(c.model, tokens(c.model), c.lora);
      const base = ref[c.model.includes('moe') ? 1 : 0].logits;
      const theirs = ref[2 + i].logits;
      const err = nmse(ours, theirs);
      const effect = nmse(base, theirs);
      lines.push(`${c.name}: NMSE kail vs llama.cpp ${err.toExponential(2)}; the adapters move llama.cpp's logits by ${effect.toExponential(2)}`);
      expect(effect).toBeGreaterThan(1e-3);
      expect(err).toBeLessThan(1e-7);
    }
    process.stdout.write(`\nLoRA parity (measured):\n${lines.join('\n')}\n`);
  }, 300_000);

  it('refuses, saying why: a model file as an adapter, another architecture, routed experts, a tied embedding, a pair that does not fit', () => {
    const load = (model: string, lora: Lora) => () => EngineModel.load(model, { nCtx: 16, lora }).close();
    expect(load(f('llama.gguf'), [{ path: f('moe.gguf') }])).toThrow(/general.type is 'model', expected 'adapter'/);
    expect(load(f('llama.gguf'), [{ path: f('moe-a.gguf') }])).toThrow(/made for architecture 'qwen3moe', the model is 'llama'/);
    writeLoraAdapter({ config: moe, out: f('moe-router.gguf'), targets: ['ffn_gate_inp'] });
    expect(load(f('moe.gguf'), [{ path: f('moe-router.gguf') }])).toThrow(/kail applies LoRA to projections, routed experts and the token embedding; this tensor is computed inside a fused op \(gate_inp\)/);
    writeModel({ config: { ...llama, tiedEmbeddings: true }, fileType: 'F32', seed: 3, out: f('tied.gguf') });
    writeLoraAdapter({ config: { ...llama, tiedEmbeddings: true }, out: f('tied-a.gguf'), targets: ['token_embd.weight'] });
    expect(load(f('tied.gguf'), [{ path: f('tied-a.gguf') }])).toThrow(/the token embedding is also this model's output projection \(tied\)/);
    writeLoraAdapter({ config: { ...untied, dim: untied.dim * 2 }, out: f('wide.gguf') });
    expect(load(f('llama.gguf'), [{ path: f('wide.gguf') }])).toThrow(/do not fit .* \(a different base model\?\)/);
    expect(load(f('llama.gguf'), [{ path: f('nope.gguf') }])).toThrow(/LoRA adapter .*nope\.gguf: .*cannot open/);
    // Still loads and runs after all that.
    EngineModel.load(f('llama.gguf'), { nCtx: 16, lora: [{ path: f('llama-a.gguf') }] }).close();
  }, 120_000);
});
