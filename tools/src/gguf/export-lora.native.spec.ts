// kail export-lora (llama-export-lora): a model with its LoRA adapters merged in computes what the
// base model computes with them: in kail and in llama.cpp (llama.cpp's logits on the merged file
// against llama.cpp's logits with the adapters applied at run time), for projections, the token
// embedding, the output and a MoE's routed experts (a pair per expert), several adapters with
// their scales. An F16 base gives F16 merged tensors and F16's file type; the rest is copied.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeLoraAdapter } from '../models/lora';
import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaLogitsBatch } from '../parity/llama-ref';
import { nmse, tokenIds } from '../parity/metrics';
import { GgmlType } from './constants';
import { exportLora } from './export-lora';
import { readGgufHeader } from './reader';
import { splitGguf } from './split';

type Lora = { path: string; scale: number }[];

describe('kail export-lora', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-export-lora-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const f = (n: string) => path.join(dir, n);
  const moe = getPreset('tiny-qwen3moe').config;
  const llama = { ...getPreset('tiny-llama').config, tiedEmbeddings: false };

  beforeAll(() => {
    writeModel({ config: moe, fileType: 'F32', seed: 3, out: f('moe.gguf') });
    writeModel({ config: moe, fileType: 'F16', seed: 3, out: f('moe-f16.gguf') });
    writeModel({ config: llama, fileType: 'F32', seed: 3, out: f('llama.gguf') });
    writeLoraAdapter({ config: moe, out: f('moe-exps.gguf'), rank: 4, alpha: 8, seed: 4, bStd: 0.2, targets: ['attn_v', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', 'output.weight'] });
    writeLoraAdapter({ config: moe, out: f('moe-exps-2.gguf'), rank: 8, alpha: 0, type: 'F16', seed: 5, bStd: 0.1, targets: ['attn_v', 'ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', 'output.weight'] });
    writeLoraAdapter({ config: llama, out: f('llama-embd.gguf'), rank: 4, alpha: 16, seed: 6, targets: ['attn_q', 'ffn_down', 'token_embd.weight'] });
  }, 120_000);

  async function kailLogits(model: string, tokens: number[], lora: Lora = []): Promise<Float32Array> {
    const m = EngineModel.load(model, { threads: 2, nCtx: tokens.length + 8, kvType: 'f32', lora });
    try {
      return await m.evaluate(0, tokens, 'all');
    } finally {
      m.close();
    }
  }

  it('the merged model computes as the base with its adapters, in kail and in llama.cpp', async () => {
    const cases: { name: string; model: string; lora: Lora; out: string }[] = [
      { name: "a MoE's routed experts, V and output, two adapters (scale 1 and 0.5)", model: f('moe.gguf'), lora: [{ path: f('moe-exps.gguf'), scale: 1 }, { path: f('moe-exps-2.gguf'), scale: 0.5 }], out: f('moe-merged.gguf') },
      { name: 'projections and the token embedding at scale 0.75', model: f('llama.gguf'), lora: [{ path: f('llama-embd.gguf'), scale: 0.75 }], out: f('llama-merged.gguf') },
    ];
    const lines: string[] = [];
    for (const c of cases) {
      const r = exportLora(c.model, c.out, { lora: c.lora, threads: 2 });
      expect(r.merged).toBeGreaterThan(0);
      expect(r.unused).toEqual([]);
      const tokens = tokenIds(40, c.model.includes('moe') ? moe.vocabSize : llama.vocabSize, 9);
      const [withLora, merged, base] = await llamaLogitsBatch(
        [
          { model: c.model, tokens, lora: c.lora },
          { model: c.out, tokens },
          { model: c.model, tokens },
        ],
        { kv: 'f32', timeoutMs: 240_000 },
      );
      const oursLora = await kailLogits(c.model, tokens, c.lora);
      const oursMerged = await kailLogits(c.out, tokens);
      const errLlama = nmse(merged.logits, withLora.logits);
      const errKail = nmse(oursMerged, oursLora);
      const effect = nmse(base.logits, withLora.logits);
      lines.push(`${c.name}: merged vs at run time, NMSE llama.cpp ${errLlama.toExponential(2)}, kail ${errKail.toExponential(2)}; the adapters move the logits by ${effect.toExponential(2)}`);
      expect(effect).toBeGreaterThan(1e-3);
      // (Float rounding: at run time the adapter multiplies the input by A then B; merged, by W + BA.)
      expect(errLlama).toBeLessThan(1e-7);
      expect(errKail).toBeLessThan(1e-7);
    }
    process.stdout.write(`\nexport-lora (measured; F32 bases, 40 random tokens):\n${lines.join('\n')}\n`);
  }, 300_000);

  it('an F16 base: merged tensors F16, file type F16 (last), the other tensors copied byte for byte', async () => {
    const out = f('f16-merged.gguf');
    exportLora(f('moe-f16.gguf'), out, { lora: [{ path: f('moe-exps.gguf'), scale: 1 }] });
    const a = readGgufHeader(f('moe-f16.gguf'));
    const b = readGgufHeader(out);
    expect([...b.kv.keys()]).toEqual([...[...a.kv.keys()].filter((k) => k !== 'general.file_type'), 'general.file_type']);
    expect(b.kv.get('general.file_type')?.value).toBe(1);
    const fa = fs.readFileSync(f('moe-f16.gguf'));
    const fb = fs.readFileSync(out);
    for (const t of b.tensors) {
      const src = a.tensors.find((x) => x.name === t.name)!;
      const adapted = /attn_v\.weight$|_exps\.weight$|^output\.weight$/.test(t.name);
      expect(t.type).toBe(src.type === GgmlType.F32 ? GgmlType.F32 : adapted ? GgmlType.F16 : src.type);
      const same = fa.subarray(src.fileOffset, src.fileOffset + src.bytes).equals(fb.subarray(t.fileOffset, t.fileOffset + t.bytes));
      expect(same).toBe(!adapted);
    }
    // It runs, and computes as the base with the adapter (to F16 rounding of the merged weights).
    const tokens = tokenIds(24, moe.vocabSize, 3);
    const err = nmse(await kailLogits(out, tokens), await kailLogits(f('moe-f16.gguf'), tokens, [{ path: f('moe-exps.gguf'), scale: 1 }]));
    expect(err).toBeLessThan(1e-5);
  }, 120_000);

  it('refuses what cannot be merged, naming it; nothing is left behind', () => {
    const out = f('bad.gguf');
    expect(() => exportLora(f('moe.gguf'), out, { lora: [] })).toThrow(/at least one adapter/);
    expect(() => exportLora(f('moe.gguf'), out, { lora: [{ path: f('llama-embd.gguf'), scale: 1 }] })).toThrow(/made for architecture 'llama', the model is 'qwen3moe'/);
    expect(() => exportLora(f('moe.gguf'), out, { lora: [{ path: f('llama.gguf'), scale: 1 }] })).toThrow(/general.type is '.*', expected 'adapter' \(is this a model rather than an adapter\?\)/);
    expect(() => exportLora(f('moe.gguf'), out, { lora: [{ path: f('moe-exps.gguf'), scale: NaN }] })).toThrow(/scale must be a finite number/);
    expect(() => exportLora(f('moe.gguf'), f('moe.gguf'), { lora: [{ path: f('moe-exps.gguf'), scale: 1 }] })).toThrow(/is the base model/);
    const splits = splitGguf(f('moe.gguf'), f('moe-split'), 10);
    expect(() => exportLora(splits[0], out, { lora: [{ path: f('moe-exps.gguf'), scale: 1 }] })).toThrow(/is a split model; merge it first/);
    // An adapter for a model of another size.
    const big = f('moe-big-lora.gguf');
    writeLoraAdapter({ config: { ...moe, dim: 512 }, out: big, rank: 4, targets: ['attn_v'] });
    expect(() => exportLora(f('moe.gguf'), out, { lora: [{ path: big, scale: 1 }] })).toThrow(/lora_a \[512,4\] \/ lora_b \[4,\d+\] do not fit blk\.0\.attn_v\.weight \[256,\d+\] \(a different base model\?\)/);
    expect(fs.readdirSync(dir).filter((n) => n.startsWith('bad.gguf'))).toEqual([]);
  });
});
