// `kail imatrix` against llama.cpp's llama-imatrix statistics: llama.cpp's collect_imatrix on
// llama.cpp's own compute graph (the imatrix-ref program, through llama_context_params::cb_eval
// on node-llama-cpp's libllama) and kail's native collection must agree on which weights are
// collected, how many rows each expert saw (exactly: the same routing), and the sums of squared
// inputs (to float rounding: F32 models, the two engines' kernels sum in different orders).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EngineModel } from '@kailstream/engine';
import { computeImatrix, perplexityChunks } from '@kailstream/engine/core';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaImatrix } from './imatrix-ref';
import { tokenIds } from './metrics';

// Dense, top-k softmax MoE, Mixtral's 8 experts, gpt-oss (biased experts, clamped SwiGLU:
// the down projections see the activated rows), and DeepSeek-V2-Lite (MLA: attn_k_b and attn_v_b
// are per-head batched products inside the attention, kept as one flat entry each; shared experts).
const PRESETS = ['tiny-llama', 'tiny-qwen3moe', 'tiny-mixtral', 'tiny-gpt-oss', 'tiny-deepseek2-lite-split'];

describe("kail imatrix against llama.cpp's llama-imatrix", () => {
  let dir: string;
  const table: string[] = [];
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-imatrix-'));
  });
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(`\nimatrix parity (measured; 3 chunks of 64 random tokens, F32 models):\n${table.join('\n')}\n`);
  });

  it.each(PRESETS)('%s: the same entries, the same counts per expert, the same sums to float rounding', async (p) => {
    const config = getPreset(p).config;
    const model = path.join(dir, `${p}.gguf`);
    writeModel({ config, fileType: 'F32', seed: 9, out: model });
    const nCtx = 64;
    const m = EngineModel.load(model, { threads: 2, kvType: 'f32', nCtx });
    let ours: Awaited<ReturnType<typeof computeImatrix>>;
    let chunks: number[][];
    try {
      const v = m.tokenizer.vocab;
      const tokens = tokenIds(3 * nCtx, config.vocabSize, 21, 1);
      chunks = perplexityChunks(tokens, nCtx, v.addBos ? v.special.bos : null);
      ours = await computeImatrix(m, tokens, { nCtx, processOutput: true });
    } finally {
      m.close();
    }
    const theirs = await llamaImatrix(model, chunks, { processOutput: true });
    expect([...theirs.keys()].filter((k) => !ours.entries.has(k))).toEqual([]);
    expect([...ours.entries.keys()].filter((k) => !theirs.has(k))).toEqual([]);
    let worst = 0;
    let worstName = '';
    let experts = 0;
    for (const [name, e] of ours.entries) {
      const r = theirs.get(name)!;
      expect({ name, counts: e.counts }).toEqual({ name, counts: r.counts });
      if (e.counts.length > 1) experts++;
      let num = 0;
      let den = 0;
      for (let i = 0; i < r.sums.length; i++) {
        num += (e.sums[i] - r.sums[i]) ** 2;
        den += r.sums[i] ** 2;
      }
      const rel = Math.sqrt(num / Math.max(den, 1e-30));
      if (rel > worst) {
        worst = rel;
        worstName = name;
      }
    }
    table.push(
      `${p.padEnd(26)} ${ours.entries.size} entries (${experts} per-expert), counts identical; worst relative L2 difference of the sums ${worst.toExponential(2)} (${worstName})`,
    );
    expect(worst).toBeLessThan(1e-4);
  }, 300_000);

  it('with experts streaming under a RAM budget smaller than the model: the same statistics, bit for bit', async () => {
    const model = path.join(dir, 'stream.gguf');
    writeModel({ config: getPreset('tiny-qwen3moe').config, fileType: 'F16', seed: 9, out: model });
    const tokens = tokenIds(256, getPreset('tiny-qwen3moe').config.vocabSize, 5, 1);
    const run = async (opts: Parameters<typeof EngineModel.load>[1]) => {
      const m = EngineModel.load(model, { threads: 2, nCtx: 64, ...opts });
      try {
        return { r: await computeImatrix(m, tokens, { nCtx: 64 }), streaming: !!m.plan };
      } finally {
        m.close();
      }
    };
    const inRam = await run({});
    // 6 MB: the resident part, scratch and a few experts of the 12 MiB of experts.
    const streamed = await run({ ramBytes: 6_000_000, ramReserveBytes: 0, nBatch: 64 });
    expect(streamed.streaming).toBe(true);
    expect([...streamed.r.entries.keys()]).toEqual([...inRam.r.entries.keys()]);
    for (const [name, e] of inRam.r.entries) {
      const o = streamed.r.entries.get(name)!;
      expect({ name, counts: o.counts }).toEqual({ name, counts: e.counts });
      expect(Buffer.from(o.sums.buffer).equals(Buffer.from(e.sums.buffer))).toBe(true);
    }
  }, 120_000);
});
