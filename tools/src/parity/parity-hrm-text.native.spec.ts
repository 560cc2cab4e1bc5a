// Parity with llama.cpp (node-llama-cpp 3.22.1) for hrm_text (HRM-Text, DFM Mimir: a low and a high
// stack of parameterless-norm blocks with sigmoid-gated attention, run h_cycles x (l_cycles low
// passes + 1 high pass), every pass over KV cache slots of its own; z_L from hrm.z_l_init) on models
// the project writes itself (architectures/hrm-text.ts): tiny-hrm-text (12 slots over 4 blocks,
// embedding_scale, untied head) and tiny-hrm-text-tied (6 slots over 2 blocks, prefix_lm true,
// which llama.cpp and kail both ignore: causal attention). Same rules as the other dense parity
// specs (dense-parity.suite.ts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { writeControlVector } from '../models/control-vector';
import { getPreset } from '../models/presets';
import { llamaCvecLogits } from './cvec-ref';
import { denseParitySuite } from './dense-parity.suite';
import { nmse, tokenIds } from './metrics';

denseParitySuite({
  name: 'hrm_text',
  f32: [
    ['tiny-hrm-text', 1e-12],
    ['tiny-hrm-text-tied', 1e-12],
  ],
  quant: [
    ['tiny-hrm-text', 'Q4_K_M'],
    ['tiny-hrm-text-tied', 'Q8_0'],
  ],
});

// llama.cpp's build_cvec takes the cache slot (block_count counts slots), so a control vector has a
// row per slot, and its layer range picks slots: two vectors (0.8 and -0.5) on every slot, then on
// slot 5 only (tiny-hrm-text's first high pass, block 3).
it("tiny-hrm-text: control vectors index the cache slots as llama.cpp's", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-hrm-cvec-'));
  try {
    const config = getPreset('tiny-hrm-text').config;
    const model = path.join(dir, 'm.gguf');
    writeModel({ config, fileType: 'F32', seed: 4, out: model });
    const a = writeControlVector({ config, out: path.join(dir, 'a.gguf'), seed: 1 }).path;
    const b = writeControlVector({ config, out: path.join(dir, 'b.gguf'), seed: 2, layers: [5] }).path;
    const toks = tokenIds(24, config.vocabSize, 7);
    const cvecs = [{ path: a, scale: 0.8 }, { path: b, scale: -0.5 }];
    const plain = await llamaCvecLogits(model, toks, []);
    for (const range of [undefined, [5, 5] as [number, number]]) {
      const ref = await llamaCvecLogits(model, toks, cvecs, { layerRange: range });
      const m = EngineModel.load(model, { threads: 2, kvType: 'f32', nCtx: 64, controlVectors: cvecs, controlVectorLayerRange: range });
      let ours: Float32Array;
      try {
        ours = await m.evaluate(0, toks, 'all');
      } finally {
        m.close();
      }
      process.stdout.write(`tiny-hrm-text control vectors ${range ? `on slot ${range[0]}` : 'on every slot'}: NMSE ${nmse(ours, ref.logits).toExponential(2)}, llama.cpp moved by ${nmse(plain.logits, ref.logits).toExponential(2)}\n`);
      expect(nmse(plain.logits, ref.logits)).toBeGreaterThan(1e-3);
      expect(nmse(ours, ref.logits)).toBeLessThan(1e-12);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 300_000);
