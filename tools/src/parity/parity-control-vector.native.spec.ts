// Control vectors (llama.cpp's --control-vector, --control-vector-scaled, --control-vector-layer-range)
// against llama.cpp's, through the cvec-ref program (llama_set_adapter_cvec on node-llama-cpp's
// libllama): a dense model, a MoE and DeepSeek-V2-Lite's shape (MLA), each with two control
// vector files from the project's writer, one at scale 0.8 and one at -0.5, on every layer or on
// a range. The vectors move llama.cpp's logits by far more than kail differs from them.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { writeControlVector } from '../models/control-vector';
import { getPreset } from '../models/presets';
import { controlVectorParity } from './control-vector.suite';

const PRESETS = ['tiny-llama', 'tiny-qwen3moe', 'tiny-deepseek2-lite-split'];

describe("control vectors against llama.cpp's", () => {
  let dir: string;
  const table: string[] = [];
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-cvec-'));
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nControl vector parity (measured; NMSE of the logits over 24 tokens):\n${table.join('\n')}\n`);
  });

  it.each(PRESETS)('%s: two scaled vectors on every layer, then on a range, give llama.cpp\'s logits', async (p) => {
    for (const { layers, err, moved } of await controlVectorParity(dir, p, 1)) {
      table.push(`${p.padEnd(26)} layers ${layers}: kail vs llama.cpp ${err.toExponential(2)}; the vectors move llama.cpp's logits by ${moved.toExponential(2)}`);
      expect(moved).toBeGreaterThan(1e-3);
      expect(err).toBeLessThan(1e-10);
    }
  }, 300_000);

  it('refuses a vector of another size, a file that is not one and a missing file, naming each; the model loads after', () => {
    const llama = getPreset('tiny-llama').config;
    const model = path.join(dir, 'tl.gguf');
    writeModel({ config: llama, fileType: 'F32', seed: 4, out: model });
    const other = writeControlVector({ config: getPreset('tiny-qwen3moe').config, out: path.join(dir, 'other.gguf') }).path;
    const wide = { ...llama, dim: 128 };
    const narrow = writeControlVector({ config: wide, out: path.join(dir, 'narrow.gguf') }).path;
    expect(() => EngineModel.load(model, { nCtx: 16, controlVectors: [{ path: narrow }] })).toThrow("control vector n_embd 128 does not match the model's 256");
    expect(() => EngineModel.load(model, { nCtx: 16, controlVectors: [{ path: model }] })).toThrow(/control vector .*tl\.gguf: tensor 'token_embd\.weight' is not direction\.<layer>/);
    expect(() => EngineModel.load(model, { nCtx: 16, controlVectors: [{ path: path.join(dir, 'none.gguf') }] })).toThrow(/control vector .*none\.gguf: /);
    expect(() => EngineModel.load(model, { nCtx: 16, controlVectors: [{ path: other }, { path: narrow }] })).toThrow(/has 128 values, other directions 256/);
    // A direction for layer 10^9 (llama.cpp would try to allocate 10^9 x n_embd floats).
    const huge = writeControlVector({ config: llama, out: path.join(dir, 'huge.gguf'), layers: [1_000_000_000] }).path;
    expect(() => EngineModel.load(model, { nCtx: 16, controlVectors: [{ path: huge }] })).toThrow('direction.1000000000: no model has 1000000000 layers (at most 4096)');
    EngineModel.load(model, { nCtx: 16, controlVectors: [{ path: other, scale: 2 }] }).close();
  });
});
