// llama.cpp's RoPE context flags: a run with them computes exactly as a file whose metadata holds
// the same values (llama_context takes the trained hparams where no flag is given), they change
// the logits, and on a model with sliding-window layers they reach the layers llama.cpp gives them.
import fs from 'node:fs';

import { EngineModel } from './model';
import { applyRopeOptions, type RopeOptions } from './rope-options';
import { Metadata, readHParams } from './hparams';
import { tempDir, testModelFile, writeTestModel } from '../testing';
import type { KvOverride } from './kv-override';

const dir = tempDir('kail-rope-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function logits(file: string, opts: { rope?: RopeOptions; kvOverrides?: KvOverride[] }): Promise<Float32Array> {
  const m = EngineModel.load(file, { threads: 2, nCtx: 96, kvType: 'f32', ...opts });
  try {
    const tokens = Array.from({ length: 80 }, (_, i) => (i * 37 + 11) % m.nVocab);
    return await m.evaluate(0, tokens, 'all');
  } finally {
    m.close();
  }
}
const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe("llama.cpp's --rope-* / --yarn-* flags", () => {
  it.each(['tiny-qwen3moe', 'tiny-deepseek2-lite'])('%s: YaRN by flags computes as YaRN in the metadata, and changes the logits', async (preset) => {
    const file = writeTestModel(dir, preset, 'F32');
    const arch = preset === 'tiny-qwen3moe' ? 'qwen3moe' : 'deepseek2';
    const plain = await logits(file, {});
    const flags = await logits(file, { rope: { scaling: 'yarn', freqScale: 0.25, yarnOrigCtx: 32, freqBase: 20000 } });
    const meta = await logits(file, {
      kvOverrides: [
        { key: `${arch}.rope.scaling.type`, type: 'str', value: 'yarn' },
        { key: `${arch}.rope.scaling.factor`, type: 'float', value: 4 },
        { key: `${arch}.rope.scaling.original_context_length`, type: 'int', value: 32 },
        { key: `${arch}.rope.freq_base`, type: 'float', value: 20000 },
      ],
    });
    expect(same(flags, meta)).toBe(true);
    expect(same(flags, plain)).toBe(false);
  }, 120_000);

  it('follows llama_context: none never scales, the type keeps the file\'s factor, YaRN extrapolates by default, a custom scale sets the training context', () => {
    const { kv, tensors } = testModelFile(dir, 'tiny-qwen3moe');
    kv['qwen3moe.rope.scaling.type'] = 'none';
    kv['qwen3moe.rope.scaling.factor'] = 8;
    const hp = readHParams(new Metadata(kv, 'qwen3moe'), tensors);
    expect(hp.ropeFreqScale).toBe(1);
    // The file's factor comes back with a type that scales.
    expect(applyRopeOptions(hp, { scaling: 'linear' })).toMatchObject({ ropeFreqScale: 0.125, ropeYarn: { extFactor: 0 } });
    const y = applyRopeOptions(hp, { scaling: 'yarn', freqScale: 0.25, yarnOrigCtx: 1000 });
    expect(y).toMatchObject({ ropeScalingType: 'yarn', ropeFreqScale: 0.25, nCtxTrain: 4000, ropeYarn: { extFactor: 1, nCtxOrig: 1000, betaFast: 32, betaSlow: 1 } });
    expect(applyRopeOptions(hp, { scaling: 'none', freqScale: 0.5 }).ropeFreqScale).toBe(1);
    expect(applyRopeOptions(hp, { scaling: 'yarn', yarnExtFactor: 0.5, yarnBetaFast: 16 }).ropeYarn).toMatchObject({ extFactor: 0.5, betaFast: 16 });
    // No options: the same object.
    expect(applyRopeOptions(hp, {})).toBe(hp);
    expect(() => applyRopeOptions(hp, { freqBase: -1 })).toThrow('--rope-freq-base must be a positive number, got -1');
    expect(() => applyRopeOptions(hp, { scaling: 'ntk' as never })).toThrow("--rope-scaling must be none, linear, yarn, got 'ntk'");
    expect(() => applyRopeOptions(hp, { yarnOrigCtx: 1.5 })).toThrow('--yarn-orig-ctx must be a positive integer, got 1.5');
  });

  it("reach a sliding-window model's other layers, its sliding ones keeping the file's RoPE as llama.cpp's do (gpt-oss); the load says so in its key", async () => {
    const gptOss = writeTestModel(dir, 'tiny-gpt-oss', 'MXFP4');
    const { kv } = testModelFile(dir, 'tiny-gpt-oss', 'MXFP4');
    const fileBase = Number(kv['gpt-oss.rope.freq_base'] ?? 10000);
    const flags = await logits(gptOss, { rope: { freqBase: 5e5 } });
    // As the file with that base for its full layers and its own written out for the sliding ones.
    const meta = await logits(gptOss, {
      kvOverrides: [
        { key: 'gpt-oss.rope.freq_base', type: 'float', value: 5e5 },
        { key: 'gpt-oss.rope.freq_base_swa', type: 'float', value: fileBase },
      ],
    });
    expect(same(flags, meta)).toBe(true);
    // (Not as the base everywhere.)
    expect(same(flags, await logits(gptOss, { kvOverrides: [{ key: 'gpt-oss.rope.freq_base', type: 'float', value: 5e5 }] }))).toBe(false);
  }, 120_000);

  it('a load with them has its own key (a saved cache of a load without is refused)', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), { threads: 2, nCtx: 64, rope: { scaling: 'yarn', freqScale: 0.5 } });
    try {
      expect(m.computeKey).toBe('--rope-scaling yarn --rope-freq-scale 0.5');
    } finally {
      m.close();
    }
  });
});
