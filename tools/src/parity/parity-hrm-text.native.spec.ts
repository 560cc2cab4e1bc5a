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

import { controlVectorParity } from './control-vector.suite';
import { denseParitySuite } from './dense-parity.suite';

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
    for (const { layers, err, moved } of await controlVectorParity(dir, 'tiny-hrm-text', 5)) {
      process.stdout.write(`tiny-hrm-text control vectors on slots ${layers}: NMSE ${err.toExponential(2)}, llama.cpp moved by ${moved.toExponential(2)}\n`);
      expect(moved).toBeGreaterThan(1e-3);
      expect(err).toBeLessThan(1e-12);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 300_000);
