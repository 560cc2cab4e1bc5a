// Recurrent layers (Qwen3.5's gated delta nets, LFM2's short convolutions, Nemotron-H's Mamba-2
// scans): each sequence keeps a fixed-size state that holds
// its whole past. The state carries across passes (a prompt in chunks = in one pass), belongs to
// its sequence (two sequences in one pass = each alone), can be kept, copied, saved and restored
// or cleared, but not cut back: truncating below the length clears the sequence unless a rollback
// checkpoint was armed (speculative decoding arms it; then up to 40 positions come back exactly),
// context shifts are refused with a clear error, and a pass that fails halfway clears the
// sequences it touched instead of leaving them between states.
import fs from 'node:fs';

import { EngineModel } from './model';
import { native } from '../native';
import { tempDir, writeTestModel } from '../testing';

const dir = tempDir('kail-recurrent-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const toks = Array.from({ length: 24 }, (_, i) => ((i * 37 + 5) % 1000) + 3);

// Qwen3.5's delta nets (a conv window and a matrix per head), LFM2's short convolutions,
// Nemotron-H's Mamba-2 mixers (a conv window with a bias and a head_dim x d_state state per head)
// Jamba's Mamba-1 mixers (a d_state state per channel, A per state element) and MiniMax-01's
// lightning attention (a head_dim x head_dim state per head, no convolution), and Kimi-Linear's
// KDA (three convolution windows and a delta-rule matrix per head that decays per key channel;
// Ling 3's, bailingmoe3, with the lower-bounded gate). The pure state-space models (mamba, mamba2:
// no attention block at all) and Falcon-H1 (attention and Mamba-2 in every block). RWKV-7: per block
// two token shifts and a WKV-7 matrix per head, no attention (ARWKV-7: one token shift).
describe.each(['tiny-qwen35moe', 'tiny-lfm2moe', 'tiny-nemotron-h-moe', 'tiny-jamba', 'tiny-minimax-01-interval', 'tiny-kimi-linear', 'tiny-kimi-k3', 'tiny-bailingmoe3', 'tiny-qwen4exp', 'tiny-qwen4exp-qsa', 'tiny-mamba', 'tiny-mamba2', 'tiny-falcon-h1', 'tiny-rwkv7', 'tiny-arwkv7', 'tiny-rwkv6', 'tiny-rwkv6qwen2'])('%s: recurrent state', (preset) => {
  let file: string;
  let m: EngineModel;
  beforeAll(() => {
    file = writeTestModel(dir, preset, 'F32');
    m = EngineModel.load(file, { threads: 2, nCtx: 160, nSeqMax: 3, kvType: 'f32', nBatch: 8 });
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

  it('keeps or clears, never cuts back unarmed; copies and blobs continue with the same logits', async () => {
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
    expect(() => m.rollback(0, 21)).toThrow(/beyond its recurrent layers' checkpoint/);
  }, 60_000);

  it('states taken at a length and put back later continue the sequence exactly; bad states are refused', async () => {
    m.truncate(0, 0);
    await m.evaluate(0, toks.slice(0, 12), 'last');
    const states = m.recurrentStates(0);
    const want = await m.evaluate(0, toks.slice(12, 20), 'all');
    expect(m.seqLen(0)).toBe(20);
    expect(m.restoreStates(0, 12, states)).toBe(12);
    expect(m.seqLen(0)).toBe(12);
    expect(Array.from(await m.evaluate(0, toks.slice(12, 20), 'all'))).toEqual(Array.from(want));
    expect(() => m.restoreStates(0, 12, states.subarray(1))).toThrow(/recurrent states of \d+ floats; the model's are \d+/);
    expect(() => m.restoreStates(0, 21, states)).toThrow(/states for 21 positions: the sequence holds 20/);
    expect(() => m.restoreStates(0, 0, states)).toThrow(/states for 0 positions/);
    expect(m.seqLen(0)).toBe(20);
  }, 60_000);

  it('an armed sequence is taken back within its checkpoint window with the same logits as recomputing', async () => {
    m.truncate(0, 0);
    m.keepRollback(0, true);
    try {
      // Passes of 5, 3, 1, 1 tokens, then back into the first, the third or the second pass.
      for (const back of [3, 8, 6, 9]) {
        m.truncate(0, 0);
        for (const [a, b] of [[0, 5], [5, 8], [8, 9], [9, 10]]) await m.evaluate(0, toks.slice(a, b), 'all');
        expect(m.truncate(0, back)).toBe(back);
        const cont = await m.evaluate(0, toks.slice(back, back + 4), 'all');
        m.truncate(1, 0);
        const ref = await m.evaluate(1, toks.slice(0, back + 4), 'all');
        expect(Array.from(cont)).toEqual(Array.from(ref.subarray((ref.length / (back + 4)) * back)));
      }
      // A long run moves the checkpoint forward: 40 positions back still rewind, the start does not.
      m.truncate(0, 0);
      for (let i = 0; i < 120; i++) await m.evaluate(0, [toks[i % toks.length]], 'last');
      expect(m.truncate(0, 80)).toBe(80);
      const seqOf = (n: number) => Array.from({ length: n }, (_, i) => toks[i % toks.length]);
      const cont = await m.evaluate(0, seqOf(83).slice(80), 'all');
      m.truncate(1, 0);
      const ref = await m.evaluate(1, seqOf(83), 'all');
      expect(Array.from(cont)).toEqual(Array.from(ref.subarray((ref.length / 83) * 80)));
      expect(m.truncate(0, 10)).toBe(0);
      expect(() => m.rollback(0, 0)).not.toThrow();
      await m.evaluate(0, toks.slice(0, 3), 'all');
      // The checkpoint's memory shows in the stats (outside the KV budget) until disarmed.
      expect(m.runtime.stats().rollbackBytes).toBeGreaterThan(0);
    } finally {
      m.keepRollback(0, false);
    }
    expect(m.runtime.stats().rollbackBytes).toBe(0);
    // Disarmed: below the length clears again.
    await m.evaluate(0, toks.slice(0, 6), 'all');
    expect(m.truncate(0, 3)).toBe(0);
  }, 60_000);

  it('a pass longer than the rollback window (a prompt) keeps no checkpoint; the passes after it do', async () => {
    const rt = new (native().Model)(file, m.program, { threads: 2, nCtx: 64, nSeqMax: 1, kvType: 0, kvTypeV: 0, nBatch: 64 });
    const pass = (from: number, n: number) =>
      rt.forward({ tokens: Int32Array.from({ length: n }, (_, i) => toks[(from + i) % toks.length]), pos: Int32Array.from({ length: n }, (_, i) => from + i), seq: new Int32Array(n), output: new Uint8Array(n).fill(1) });
    try {
      rt.seqKeepRollback(0, true);
      await pass(0, 50);
      expect(rt.seqTruncate(0, 45)).toBe(0);
      await pass(0, 50);
      await pass(50, 1);
      await pass(51, 3);
      expect(rt.seqTruncate(0, 52)).toBe(52);
      expect(rt.seqTruncate(0, 50)).toBe(50);
      expect(rt.seqTruncate(0, 49)).toBe(0);
    } finally {
      rt.close();
    }
  }, 60_000);

  it('a pass that fails halfway clears the sequences in it', async () => {
    // A KV budget that holds the three recurrent blocks' states but not the attention block's
    // first rows: the pass fails there, after the blocks before it moved their states.
    const rs = m.program.rsWidth!.reduce((a, w) => a + w * 4, 0);
    if (m.program.kvKWidth.length === 0) {
      // Without attention (mamba, mamba2) the states are the whole cache: a budget of exactly them runs any length.
      const ssm = new (native().Model)(file, m.program, { threads: 2, nCtx: 64, nSeqMax: 1, kvType: 0, kvTypeV: 0, kvMaxBytes: rs });
      try {
        await ssm.forward({ tokens: Int32Array.from(toks), pos: Int32Array.from(toks.map((_, i) => i)), seq: new Int32Array(toks.length), output: new Uint8Array(toks.length).fill(1) });
        expect(ssm.seqLen(0)).toBe(toks.length);
        expect(ssm.stats().kvBytes).toBe(rs);
      } finally {
        ssm.close();
      }
      return;
    }
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
