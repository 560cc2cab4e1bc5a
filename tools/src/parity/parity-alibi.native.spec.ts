// Parity with llama.cpp (node-llama-cpp 3.22.1) for the ALiBi decoders on models the project writes
// itself: bloom (LayerNorm of the embedding, fused q/k/v with bias, GELU), mpt (max_alibi_bias from
// the file, clamp_kqv, learned positions besides ALiBi; -plain without norm biases), refact (Llama's
// block with ALiBi, one KV head) and baichuan (32 blocks: RoPE; -13b, 40 blocks: ALiBi with 6 heads,
// two of them on the slopes past the largest power of two). Same rules as the dense cases of
// parity-moe-families: F32 over 64 tokens against llama.cpp's exact run (F32 KV, no flash
// attention), every top-1; quantized files against llama.cpp's own spread; and a context shift of
// an ALiBi model (the kept rows' distances to later tokens shrink by the dropped count) against
// llama.cpp's shift. The GELU models' F32 distance is set by ggml's F16 GELU table (an input one
// float ulp off across an F16 rounding boundary takes the neighbouring entry: scattered positions,
// as tiny-starcoder2's 3.8e-11); their one-block variants are 2e-14 at every other position, and the
// SwiGLU ones (refact, baichuan) are 1e-13 everywhere (measured).
import fs from 'node:fs';
import { EngineModel } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { denseParitySuite } from './dense-parity.suite';
import { llamaLogitsBatch, type LlamaLogits } from './llama-ref';
import { medianNmse, tokenIds } from './metrics';

// [preset, F32 bound]: GELU's F16 table (bloom, mpt) vs SwiGLU (refact, baichuan).
const { file, kailLogits, table } = denseParitySuite({
  name: 'ALiBi: bloom/mpt/refact/baichuan',
  f32: [
    ['tiny-bloom', 1e-7],
    ['tiny-mpt', 1e-7],
    ['tiny-mpt-plain', 1e-7],
    ['tiny-refact', 1e-11],
    ['tiny-baichuan', 1e-11],
    ['tiny-baichuan-13b', 1e-11],
  ],
  quant: [
    ['tiny-bloom', 'Q4_K_M'],
    ['tiny-mpt', 'Q4_K_M'],
    ['tiny-refact', 'Q4_K_M'],
    ['tiny-baichuan-13b', 'Q8_0'],
  ],
});
const SHIFT_PRESETS = ['tiny-refact', 'tiny-baichuan-13b'];
// llama.cpp turns every cached key by RoPE on a shift when the architecture's rope type is not
// NONE, and Baichuan's is NORM whatever the variant, so it rotates the 13B's unrotated (ALiBi)
// keys: a llama.cpp bug. kail moves them only. The reference for tiny-baichuan-13b is therefore its
// twin written as refact (the same block: RMS norms, SwiGLU, ALiBi 8, no RoPE; the same weights),
// whose rope type is NONE; llama.cpp's own baichuan shift is printed beside it.
const twin = (p: string) => (p === 'tiny-baichuan-13b' ? `${p}-as-refact` : p);
const SHIFT = { at: 48, keep: 4, discard: 20 };

// A context shift of ALiBi blocks moves the kept rows down (no rotation to turn): the 16 tokens
// after it see them at the shifted distances, as llama.cpp's seq_add positions do. The shifted
// logits differ from a fresh run of the kept tokens (the kept rows saw the dropped ones), so
// agreeing with llama.cpp's says the distances after the shift are its.
describe("context shift of ALiBi models against llama.cpp's", () => {
  let refs: LlamaLogits[];
  let fresh: LlamaLogits[];
  const toks: Record<string, number[]> = {};
  beforeAll(async () => {
    for (const p of SHIFT_PRESETS) {
      if (!fs.existsSync(file(p, 'F32'))) writeModel({ config: getPreset(p).config, fileType: 'F32', seed: 7, out: file(p, 'F32') });
      if (twin(p) !== p) writeModel({ config: { ...getPreset(p).config, arch: 'refact' }, fileType: 'F32', seed: 7, out: file(twin(p), 'F32') });
      toks[p] = tokenIds(64, getPreset(p).config.vocabSize, 29);
    }
    const jobs = SHIFT_PRESETS.map((p) => ({ model: file(twin(p), 'F32'), tokens: toks[p], shift: SHIFT }));
    refs = await llamaLogitsBatch([...jobs, { model: file('tiny-baichuan-13b', 'F32'), tokens: toks['tiny-baichuan-13b'], shift: SHIFT }], { kv: 'f32', flashAttention: 'off', ctx: 128, timeoutMs: 300_000 });
    const kept = (t: number[]) => [...t.slice(0, SHIFT.keep), ...t.slice(SHIFT.keep + SHIFT.discard)];
    fresh = await llamaLogitsBatch(SHIFT_PRESETS.map((p) => ({ model: file(twin(p), 'F32'), tokens: kept(toks[p]) })), { kv: 'f32', flashAttention: 'off', ctx: 128, timeoutMs: 300_000 });
  }, 400_000);

  it('tiny-baichuan-13b and its refact twin are one model (kail, the same logits)', async () => {
    const t = toks['tiny-baichuan-13b'];
    const [a, b] = [await kailLogits(file('tiny-baichuan-13b', 'F32'), t), await kailLogits(file(twin('tiny-baichuan-13b'), 'F32'), t)];
    expect(Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength))).toBe(0);
  });

  it.each(SHIFT_PRESETS)('%s: the logits after a shift are llama.cpp’s', async (p) => {
    const i = SHIFT_PRESETS.indexOf(p);
    const nv = refs[i].nVocab;
    const m = EngineModel.load(file(p, 'F32'), { kvType: 'f32', threads: 2, nCtx: 72 });
    let ours: Float32Array;
    try {
      await m.evaluate(0, toks[p].slice(0, SHIFT.at), 'last', 16);
      expect(m.shiftContext(0, SHIFT.keep, SHIFT.discard)).toBe(SHIFT.at - SHIFT.discard);
      ours = await m.evaluate(0, toks[p].slice(SHIFT.at), 'all', 16);
    } finally {
      m.close();
    }
    const err = medianNmse(ours, refs[i].logits, nv);
    const vsFresh = medianNmse(refs[i].logits, fresh[i].logits.subarray((SHIFT.at - SHIFT.discard) * nv), nv);
    // (llama.cpp's baichuan shift, which turns the ALiBi keys by RoPE: printed, not asserted.)
    const own = twin(p) !== p ? `; llama.cpp's own baichuan shift (keys rotated) ${medianNmse(ours, refs[SHIFT_PRESETS.length].logits, nv).toExponential(2)} off` : '';
    table.push(`${p.padEnd(20)} shift   kail vs llama.cpp${twin(p) !== p ? ' (refact twin)' : ''} ${err.toExponential(2)}; llama.cpp's shifted vs a fresh run of the kept tokens ${vsFresh.toExponential(2)}${own}`);
    expect(vsFresh).toBeGreaterThan(1e-4);
    expect(err).toBeLessThan(1e-10);
  });
});
