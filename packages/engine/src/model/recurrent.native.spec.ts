// Recurrent layers (Qwen3.5's gated delta nets, LFM2's short convolutions): each sequence keeps a fixed-size state that holds
// its whole past. The state carries across passes (a prompt in chunks = in one pass), belongs to
// its sequence (two sequences in one pass = each alone), can be kept, copied, saved and restored
// or cleared, but never cut back: truncating below the length clears the sequence, context shifts
// and speculative decoding (which rolls back rejected drafts) are refused with clear errors, and a
// pass that fails halfway clears the sequences it touched instead of leaving them between states.
import fs from 'node:fs';

import { EngineModel } from './model';
import { native } from '../native';
import { SpeculativeDecoder } from '../speculative/speculative-decoder';
import { tempDir, writeTestModel } from '../testing';

const dir = tempDir('kail-recurrent-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const toks = Array.from({ length: 24 }, (_, i) => ((i * 37 + 5) % 1000) + 3);

// Qwen3.5's delta nets (a conv window and a matrix per head) and LFM2's short convolutions.
describe.each(['tiny-qwen35moe', 'tiny-lfm2moe'])('%s: recurrent state', (preset) => {
  let file: string;
  let m: EngineModel;
  beforeAll(() => {
    file = writeTestModel(dir, preset, 'F32');
    m = EngineModel.load(file, { threads: 2, nCtx: 64, nSeqMax: 3, kvType: 'f32', nBatch: 8 });
  }, 60_000);
  afterAll(() => m.close());

  it('is recurrent; the state carries across passes and stays with its sequence', async () => {
    expect(m.recurrent).toBe(true);
    const V = m.nVocab;
    m.truncate(0, 0);
    const all = await m.evaluate(0, toks, 'all');
    // One token at a time, and in uneven chunks, on another sequence.
    m.truncate(1, 0);
    const chunked: Float32Array[] = [];
    for (const [a, b] of [[0, 5], [5, 6], [6, 17], [17, 24]]) chunked.push(await m.evaluate(1, toks.slice(a, b), 'all'));
    const joined = new Float32Array(all.length);
    let off = 0;
    for (const c of chunked) {
      joined.set(c, off);
      off += c.length;
    }
    expect(Array.from(joined)).toEqual(Array.from(all));
    // Two sequences in one pass: each gets what it gets alone.
    m.truncate(0, 0);
    m.truncate(1, 0);
    await m.evaluate(1, toks.slice(0, 3), 'all');
    const mixed = await m.forwardBatch({ tokens: Int32Array.from([toks[0], toks[3]]), pos: Int32Array.from([0, 3]), seq: Int32Array.from([0, 1]), output: Uint8Array.from([1, 1]) });
    expect(Array.from(mixed.subarray(0, V))).toEqual(Array.from(all.subarray(0, V)));
    expect(Array.from(mixed.subarray(V, 2 * V))).toEqual(Array.from(all.subarray(3 * V, 4 * V)));
  }, 60_000);

  it('keeps or clears, never cuts back; copies and blobs continue with the same logits', async () => {
    m.truncate(0, 0);
    await m.evaluate(0, toks.slice(0, 20), 'last');
    expect(m.truncate(0, 25)).toBe(20);
    expect(m.truncate(0, 20)).toBe(20);
    m.copySequence(0, 2);
    const blob = m.saveSequence(0);
    const next = await m.evaluate(0, [7, 8], 'all');
    // A copy and a restored blob continue exactly as the original did.
    expect(Array.from(await m.evaluate(2, [7, 8], 'all'))).toEqual(Array.from(next));
    m.restoreSequence(1, blob);
    expect(m.seqLen(1)).toBe(20);
    expect(Array.from(await m.evaluate(1, [7, 8], 'all'))).toEqual(Array.from(next));
    // Below the length: cleared (the state holds no earlier position), and recomputing is exact.
    expect(m.truncate(0, 10)).toBe(0);
    expect(m.seqLen(0)).toBe(0);
    await m.evaluate(0, toks.slice(0, 20), 'last');
    expect(Array.from(await m.evaluate(0, [7, 8], 'all'))).toEqual(Array.from(next));
    expect(() => m.shiftContext(0, 4, 4)).toThrow(/recurrent/);
    expect(() => m.rollback(0, 21)).toThrow(/lost/);
  }, 60_000);

  it('refuses speculative decoding with the model as target or draft', () => {
    expect(() => new SpeculativeDecoder(m, { lookup: true })).toThrow(/roll back rejected drafts.*target/);
  });

  it('a pass that fails halfway clears the sequences in it', async () => {
    // A KV budget that holds the three recurrent blocks' states but not the attention block's
    // first rows: the pass fails there, after the blocks before it moved their states.
    const rs = m.program.rsWidth!.reduce((a, w) => a + w * 4, 0);
    const rt = new (native().Model)(file, m.program, { threads: 2, nCtx: 64, nSeqMax: 1, kvType: 0, kvTypeV: 0, kvMaxBytes: rs + 1024 });
    try {
      await expect(rt.forward({ tokens: Int32Array.from(toks.slice(0, 4)), pos: Int32Array.from([0, 1, 2, 3]), seq: Int32Array.from([0, 0, 0, 0]), output: Uint8Array.from([0, 0, 0, 1]) })).rejects.toThrow(
        /KV cache budget/,
      );
      expect(rt.seqLen(0)).toBe(0);
      expect(rt.stats().kvBytes).toBe(0);
    } finally {
      rt.close();
    }
  }, 60_000);
});
