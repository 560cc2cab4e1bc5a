// DeepSeek-V4's program (hyper-connection streams with Sinkhorn mixing, one shared key/value row
// over a sliding window plus CSA / HCA compressed rows, the CSA blocks' lightning indexer over
// compressed keys, grouped output LoRA, hash-routed and sqrt-softplus experts), the metadata its
// builder refuses as llama.cpp's loader refuses it, and its positional state: the compressors'
// rows live with the KV cache, so truncating and copying a sequence keep the logits. Its MTP block
// as a program of its own (the trunk's streams in, eh_proj per stream, one window-attention block)
// and the MTP blocks it refuses as llama.cpp's MTP graph does.
// Numerics are checked against llama.cpp in tools/src/parity/parity-deepseek4.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { native } from '../../native';
import { Metadata, readHParams } from '../hparams';
import { EngineModel, kvCacheReport, openGgufMetadata } from '../model';
import { BatchEngine } from '../../runtime/batch-engine';
import { buildMtpProgram, buildProgram } from '.';
import { opsOf, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('deepseek4 program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-deepseek4');
  }, 60_000);

  it('keeps 4 x n_embd streams: per sublayer pre coefficients and a Sinkhorn post, then the head collapses them', () => {
    const p = programOf(f.kv, f.tensors);
    const width = (name: string) => p.buffers.find((b) => b.name === name)!.width;
    expect([width('x'), width('h'), width('hc_pre'), width('hc_mix24'), width('hc_mix4')]).toEqual([512, 128, 512, 24, 4]);
    expect(opsOf(p, 'hc_gates').length).toBe(9);
    const post = opsOf(p, 'dsv4_hc_post');
    expect(post.map((o) => o.weights!.scale)).toEqual([0, 1, 2, 3].flatMap((i) => [`blk.${i}.hc_attn_scale.weight`, `blk.${i}.hc_ffn_scale.weight`]));
    expect(post.every((o) => o.params!.n === 4 && o.params!.iters === 3 && o.out === o.b)).toBe(true);
  });

  it('attention: a window of 8 with sinks, compressed rows by ratio, the indexer on the CSA blocks, the output rotated back and projected in 2 groups', () => {
    const p = programOf(f.kv, f.tensors);
    const att = opsOf(p, 'dsv4_attention');
    expect(att.map((o) => [o.params!.window, o.params!.ratio ?? 0, o.c !== undefined, o.params!.top_k ?? 0])).toEqual([
      [8, 4, true, 4],
      [8, 128, false, 0],
      [8, 0, false, 0],
      [8, 4, true, 4],
    ]);
    const comp = opsOf(p, 'dsv4_compress');
    // Blocks 0 and 3: the attention's compressor (96 wide, overlapping) and the indexer's (64); block 1: HCA (128).
    expect(comp.map((o) => [o.params!.ratio, o.params!.head_dim, o.params!.overlap, o.params!.freq_base])).toEqual([
      [4, 96, 1, 160000], [4, 64, 1, 160000], [128, 96, 0, 160000], [4, 96, 1, 160000], [4, 64, 1, 160000],
    ]);
    expect(opsOf(p, 'dsa_index').map((o) => [o.params!.ratio, o.params!.top_k])).toEqual([[4, 4], [4, 4]]);
    // The compressing blocks rotate with the compress base, block 2 with rope.freq_base; the output back (inverse).
    const back = opsOf(p, 'rope').filter((o) => o.params!.inverse);
    expect(back.map((o) => [o.params!.freq_base, o.params!.rot_off, o.params!.n_dims])).toEqual([[160000, 64, 32], [160000, 64, 32], [10000, 64, 32], [160000, 64, 32]]);
    expect(opsOf(p, 'matmul').filter((o) => o.params?.groups).map((o) => [o.weights!.weight, o.params!.groups])).toEqual([0, 1, 2, 3].map((i) => [`blk.${i}.attn_output_a.weight`, 2]));
    // Block 0 hash-routed (no selection bias), the others by sqrt-softplus + bias; experts and shared experts clamped as ggml_swiglu_clamp.
    expect(opsOf(p, 'moe').map((o) => [o.params!.gating, o.weights!.tid2eid !== undefined, o.weights!.exp_probs_b !== undefined, o.params!.act, o.params!.limit])).toEqual([
      [4, true, false, 7, 1.5], [4, false, true, 7, 1.5], [4, false, true, 7, 1.5], [4, false, true, 7, 1.5],
    ]);
    expect(opsOf(p, 'swiglu').map((o) => o.params)).toEqual(Array(4).fill({ limit: 1.5, clamp_gate: 1 }));
    // The MTP block (blk.4) is in the file, not in the trunk's program (it runs as a program of its own, below).
    expect(p.ops.some((o) => Object.values(o.weights ?? {}).some((w) => w.startsWith('blk.4.')))).toBe(false);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no compress ratios', (kv) => delete kv['deepseek4.attention.compress_ratios'], /lacks deepseek4\.attention\.compress_ratios, which llama\.cpp's loader requires/],
    ['compress ratios shorter than block_count', (kv) => (kv['deepseek4.attention.compress_ratios'] = [4, 128, 0, 4]), /compress_ratios has 4 entries, fewer than block_count 5/],
    ['a ratio llama.cpp does not take', (kv) => (kv['deepseek4.attention.compress_ratios'] = [4, 64, 0, 4, 0]), /block 1's compress ratio 64 is not 0, 4 or 128/],
    ['another gating function', (kv) => (kv['deepseek4.expert_gating_func'] = 2), /expert_gating_func 2 is not 4 \(sqrtsoftplus\)/],
    ['3 hyper-connection streams', (kv) => (kv['deepseek4.hyper_connection.count'] = 3), /hyper_connection\.count 3: llama\.cpp's graph runs 4 streams only/],
    ['no Sinkhorn iterations', (kv) => delete kv['deepseek4.hyper_connection.sinkhorn_iterations'], /lacks deepseek4\.hyper_connection\.sinkhorn_iterations/],
    ['no sliding window', (kv) => delete kv['deepseek4.attention.sliding_window'], /lacks deepseek4\.attention\.sliding_window/],
    ['an indexer key shorter than 64', (kv) => (kv['deepseek4.attention.indexer.key_length'] = 32), /indexer\.key_length 32 must be a power of two of at least 64/],
    ['output groups that do not split the heads', (kv) => (kv['deepseek4.attention.output_group_count'] = 3), /4 heads do not split into 3 output groups/],
    ['a clamp array of the wrong length', (kv) => (kv['deepseek4.swiglu_clamp_exp'] = [2, 2]), /'deepseek4\.swiglu_clamp_exp' has 2 entries for 5 layers/],
    ['a value length apart from the key length', (kv) => (kv['deepseek4.attention.value_length'] = 64), /value_length 64 differs from key_length 96/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(want);
  });

  it.each<[string, number[], RegExp]>([
    ['blk.1.hc_ffn_scale.weight', [2], /tensor 'blk\.1\.hc_ffn_scale\.weight' is \[2\], expected \[3\]/],
    ['output_hc_base.weight', [4, 2], /tensor 'output_hc_base\.weight' is \[4, 2\], expected \[4\]/],
    ['blk.0.ffn_gate_tid2eid.weight', [2, 1025], /tensor 'blk\.0\.ffn_gate_tid2eid\.weight' is \[2, 1025\], expected \[2, 1024\]/],
  ])('refuses %s of shape %j, as llama.cpp\'s loader', (name, dims, want) => {
    const tensors = new Map(f.tensors);
    tensors.set(name, { ...tensors.get(name)!, dims });
    expect(() => programOf(f.kv, tensors)).toThrow(want);
  });

  it.each([['blk.3.indexer_compressor_ape.weight'], ['blk.1.attn_compressor_norm.weight'], ['blk.0.ffn_gate_tid2eid.weight'], ['blk.2.attn_output_a.weight'], ['output_hc_fn.weight']])('refuses a file without %s', (name) => {
    const tensors = new Map(f.tensors);
    tensors.delete(name);
    expect(() => programOf(f.kv, tensors)).toThrow(new RegExp(`lacks tensor '${name.replace(/\./g, '\\.')}'`));
  });
});

describe('deepseek4 MTP block', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-deepseek4');
  }, 60_000);
  const hpOf = (kv: Record<string, GgufValue>, tensors: typeof f.tensors) => readHParams(new Metadata(kv, 'deepseek4'), tensors);
  const mtpOf = (kv: Record<string, GgufValue>, tensors: typeof f.tensors) => buildMtpProgram(hpOf(kv, tensors), tensors);

  it('reads the 4 x 128 streams, projects each with eh_proj, runs block 4 with the window only and collapses its streams for the shared head', () => {
    const p = mtpOf(f.kv, f.tensors);
    const buf = (i: number) => p.buffers[i];
    const input = opsOf(p, 'input');
    expect(input.map((o) => buf(o.out).width)).toEqual([512]);
    expect(opsOf(p, 'embed').map((o) => o.weights!.weight)).toEqual(['token_embd.weight']);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.weight === 'blk.4.nextn.eh_proj.weight')).toHaveLength(4);
    expect(opsOf(p, 'rms_norm').filter((o) => o.weights?.weight === 'blk.4.nextn.hnorm.weight')).toHaveLength(4);
    // Every block weight is the MTP block's; the attention sees the window of 8 only; routed by sqrt-softplus + bias.
    const blockWeights = p.ops.flatMap((o) => Object.values(o.weights ?? {})).filter((w) => w.startsWith('blk.'));
    expect(blockWeights.every((w) => w.startsWith('blk.4.'))).toBe(true);
    expect(opsOf(p, 'dsv4_attention').map((o) => [o.params!.window, o.params!.ratio ?? 0, o.c])).toEqual([[8, 0, undefined]]);
    expect(opsOf(p, 'dsv4_compress')).toHaveLength(0);
    expect(opsOf(p, 'moe').map((o) => [o.weights!.tid2eid, o.weights!.exp_probs_b])).toEqual([[undefined, 'blk.4.exp_probs_b.bias']]);
    expect(opsOf(p, 'dsv4_hc_post')).toHaveLength(2);
    expect(opsOf(p, 'rms_norm').filter((o) => o.weights?.weight === 'blk.4.nextn.shared_head_norm.weight')).toHaveLength(1);
    expect(opsOf(p, 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    // Its hidden rows are its final streams (the next chained step's input).
    expect([buf(p.hidden!).name, buf(p.hidden!).width]).toEqual(['x', 512]);
    // The trunk gives its streams as hidden rows with nextnHidden, else the head's normed input; the logits' ops the same.
    const hp = hpOf(f.kv, f.tensors);
    const plain = buildProgram(hp, f.tensors, { nCtxSeq: 4096 });
    const nextn = buildProgram(hp, f.tensors, { nCtxSeq: 4096, nextnHidden: true });
    expect([plain.buffers[plain.hidden!].name, nextn.buffers[nextn.hidden!].name, nextn.buffers[nextn.hidden!].width]).toEqual(['h_norm', 'x', 512]);
    expect(nextn.ops).toEqual(plain.ops);
  });

  it('MTP rows in one pass = one at a time = split passes, bit for bit (Q4_K, f16 KV)', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek4', 'Q4_K');
    const opts = { threads: 2, nCtx: 64, nSeqMax: 1 };
    const target = EngineModel.load(file, { ...opts, nextnHidden: true });
    const mtp = EngineModel.load(file, { ...opts, mtp: true });
    try {
      const n = 20;
      const toks = Array.from({ length: n }, (_, i) => ((i * 37 + 5) % (target.nVocab - 10)) + 3);
      const { hidden } = await target.evaluateWithHidden(0, toks, 'all');
      const w = mtp.runtime.inputWidth;
      expect(w).toBe(512);
      const embd = new Float32Array(n * w);
      embd.set(hidden.subarray(0, (n - 1) * w), w);
      const pass = (from: number, to: number) =>
        mtp.forwardBatch({ tokens: Int32Array.from(toks.slice(from, to)), pos: Int32Array.from({ length: to - from }, (_, i) => from + i), seq: new Int32Array(to - from), output: new Uint8Array(to - from).fill(1), embd: embd.slice(from * w, to * w) });
      const all = await pass(0, n);
      const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
      mtp.truncate(0, 0);
      const one = new Float32Array(all.length);
      for (let i = 0; i < n; i++) one.set(await pass(i, i + 1), i * mtp.nVocab);
      mtp.truncate(0, 0);
      const split = new Float32Array(all.length);
      split.set(await pass(0, 7));
      split.set(await pass(7, n), 7 * mtp.nVocab);
      expect(bytes(one).equals(bytes(all))).toBe(true);
      expect(bytes(split).equals(bytes(all))).toBe(true);
      // The target's hidden rows are the MTP block's streams: an embedding request on it is refused.
      const engine = new BatchEngine(target, {});
      expect(() => engine.generate({ id: 'e', prompt: [1, 2, 3], maxTokens: 1, embed: 'mean' })).toThrow(/loaded for its MTP block, its hidden rows are the 512 floats per position that block reads, not embeddings/);
      await engine.close();
    } finally {
      target.close();
      mtp.close();
    }
  }, 60_000);

  it.each<[string, (kv: Record<string, GgufValue>, ts: Map<string, import('@kailstream/core-native').GgufTensorInfo>) => void, RegExp]>([
    ['a compressing MTP block', (kv) => (kv['deepseek4.attention.compress_ratios'] = [4, 128, 0, 4, 4]), /the MTP block \(block 4\) has compress ratio 4: llama\.cpp's deepseek4 MTP graph runs window attention only/],
    ['a hash-routed MTP block', (kv) => (kv['deepseek4.hash_layer_count'] = 5), /the MTP block \(block 4\) is hash-routed \(hash_layer_count 5\)/],
    ['two MTP blocks (blocks 3 and 4)', (kv, ts) => {
      kv['deepseek4.nextn_predict_layers'] = 2;
      ts.set('blk.3.nextn.eh_proj.weight', { ...ts.get('blk.4.nextn.eh_proj.weight')!, name: 'blk.3.nextn.eh_proj.weight' });
    }, /nextn_predict_layers 2: llama\.cpp's deepseek4 MTP graph runs a single MTP block/],
    ['an eh_proj of the wrong shape', (_kv, ts) => ts.set('blk.4.nextn.eh_proj.weight', { ...ts.get('blk.4.nextn.eh_proj.weight')!, dims: [128, 128] }), /tensor 'blk\.4\.nextn\.eh_proj\.weight' is \[128, 128\], expected \[256, 128\]/],
    ['an hnorm of the wrong width', (_kv, ts) => ts.set('blk.4.nextn.hnorm.weight', { ...ts.get('blk.4.nextn.hnorm.weight')!, dims: [512] }), /tensor 'blk\.4\.nextn\.hnorm\.weight' is \[512\], expected \[128\]/],
    ['no enorm', (_kv, ts) => ts.delete('blk.4.nextn.enorm.weight'), /lacks tensor 'blk\.4\.nextn\.enorm\.weight'/],
    ["no MTP block's hc_ffn_base", (_kv, ts) => ts.delete('blk.4.hc_ffn_base.weight'), /lacks tensor 'blk\.4\.hc_ffn_base\.weight'/],
    ['an RMS epsilon of 0 (the zero hidden state of position 0 would norm to 0/0)', (kv) => (kv['deepseek4.attention.layer_norm_rms_epsilon'] = 0), /layer_norm_rms_epsilon 0: the MTP block norms the zero hidden state of position 0, which needs an epsilon > 0/],
    ['no eh_proj (a trunk-only file)', (_kv, ts) => ts.delete('blk.4.nextn.eh_proj.weight'), /no multi-token-prediction block/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    const tensors = new Map(f.tensors);
    edit(kv, tensors);
    expect(() => mtpOf(kv, tensors)).toThrow(want);
  });
});

describe('deepseek4 state', () => {
  it('truncating and copying a sequence keep the compressors consistent: the logits are the full pass\'s, bit for bit', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-deepseek4', 'F32'), { threads: 2, nCtx: 192, nSeqMax: 2, kvType: 'f32' });
    try {
      const V = m.nVocab;
      const toks = Array.from({ length: 150 }, (_, i) => ((i * 37 + 5) % (V - 10)) + 3);
      const all = await m.evaluate(0, toks, 'all');
      // Back to 21 (mid-block for both ratios) after a wrong continuation, then the rest again.
      m.truncate(0, 21);
      await m.evaluate(0, toks.slice(30, 60).reverse(), 'all');
      m.truncate(0, 21);
      const rest = await m.evaluate(0, toks.slice(21), 'all');
      expect(Buffer.from(rest.buffer).equals(Buffer.from(all.subarray(21 * V).buffer.slice(all.byteOffset + 21 * V * 4, all.byteOffset + all.byteLength)))).toBe(true);
      // A copy of the sequence at 130 (past one HCA block) continues as the original.
      m.truncate(0, 130);
      m.copySequence(0, 1);
      const tail = await m.evaluate(1, toks.slice(130), 'all');
      expect(Buffer.from(tail.buffer).equals(Buffer.from(all.buffer.slice(all.byteOffset + 130 * V * 4, all.byteOffset + all.byteLength)))).toBe(true);
      // A context shift would misalign the compressors' blocks of absolute positions: refused.
      expect(() => m.shiftContext(0, 4, 8)).toThrow(expect.objectContaining({ code: 'KAIL_E_UNSUPPORTED', message: expect.stringMatching(/context shift: KV layer \d+'s keys are rotated in a layout the shift cannot follow/) }));
    } finally {
      m.close();
    }
  }, 60_000);

  it('keeps the raw and compressor rows in rings and the compressed rows per block: the same logits, rollback within the reach, copies, the bytes planned', async () => {
    const file = writeTestModel(dir, 'tiny-deepseek4', 'F32');
    // Reference: every ring larger than the context (one row per position, as without them).
    const full = EngineModel.load(file, { threads: 2, nCtx: 512, nBatch: 512, kvType: 'f32' });
    // Rings: raw rows window 8 - 1 + 65, CSA compressor rows 2 x 4 + 64, HCA 128 + 64 (nBatch 16: a reach of 65).
    const ring = EngineModel.load(file, { threads: 2, nCtx: 512, nBatch: 16, nSeqMax: 2, kvType: 'f32' });
    const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
    try {
      const V = full.nVocab;
      const toks = Array.from({ length: 420 }, (_, i) => ((i * 53 + 11) % (V - 10)) + 3);
      const all = await full.evaluate(0, toks, 'all');
      const at = (from: number, to = toks.length) => all.subarray(from * V, to * V);
      const chunks = async (m: EngineModel, seq: number, from: number, to: number) => {
        const out = new Float32Array((to - from) * V);
        for (let p = from; p < to; p += 16) out.set(await m.evaluate(seq, toks.slice(p, Math.min(to, p + 16)), 'all'), (p - from) * V);
        return out;
      };
      expect(same(await chunks(ring, 0, 0, 400), at(0, 400))).toBe(true);
      // Speculative decoding's rollback (mid-block for both ratios): 38 positions taken back, 40
      // drafted ones taken back, then the real ones.
      expect(ring.truncate(0, 362)).toBe(362);
      await ring.evaluate(0, toks.slice(300, 340).reverse(), 'all');
      expect(ring.truncate(0, 362)).toBe(362);
      expect(same(await chunks(ring, 0, 362, 420), at(362))).toBe(true);
      // A copy continues as the original.
      expect(ring.truncate(0, 410)).toBe(410);
      ring.copySequence(0, 1);
      expect(same(await ring.evaluate(1, toks.slice(410), 'all'), at(410))).toBe(true);
      // A saved sequence (mid-block, rings wrapped) loads back and continues as the original.
      expect(ring.truncate(1, 405)).toBe(405);
      const blob = ring.saveSequence(1);
      ring.truncate(1, 0);
      ring.restoreSequence(1, blob);
      expect(same(await ring.evaluate(1, toks.slice(405), 'all'), at(405))).toBe(true);
      // Past the rings' reach only a clear is exact: the positions kept are 0.
      expect(ring.truncate(0, 200)).toBe(0);
      // The bytes: what the rings and per-block rows hold, within what the plan counts, far below one row per position.
      const stats = ring.runtime.stats() as { kvBytes: number };
      expect(stats.kvBytes).toBeGreaterThan(0);
      expect(stats.kvBytes).toBeLessThanOrEqual(ring.runtime.kvCapacityBytes / 2);
      expect(ring.runtime.kvCapacityBytes).toBeLessThan(full.runtime.kvCapacityBytes);
      // Per sequence, F32: 4 raw rings of 8 - 1 + 65 rows of 96; the CSA blocks (2) a compressor
      // ring of 2 x 4 + 64 rows of 2 x 192, 128 compressed rows of 96, the indexer's compressor ring
      // of 72 rows of 2 x 128 and 128 keys of 64; the HCA block a ring of 128 + 64 rows of 2 x 96
      // and 4 compressed rows. The plan counts the same.
      const perSeq = 4 * 72 * 96 * 4 + 2 * (72 * 384 * 4 + 128 * 96 * 4 + 72 * 256 * 4 + 128 * 64 * 4) + (192 * 192 * 4 + 4 * 96 * 4);
      expect(ring.runtime.kvCapacityBytes).toBe(2 * perSeq);
      expect(native().kvCacheBytes(ring.program, { nCtx: 512, nBatch: 16, nSeqMax: 2, kvType: 0 })).toBe(2 * perSeq);
      // `kail inspect`: per token the compressed rows and indexer keys (a row per block of 4 or
      // 128), the rings apart (at the default nBatch of 512: raw rows 8 - 1 + 512, compressor
      // rows 2 x 4 + 511 and 128 + 511).
      const meta = openGgufMetadata(file);
      try {
        const rep = kvCacheReport(meta, 'f32');
        expect(rep.bytesPerToken).toBe((2 * (96 + 64) * 4) / 4 + (96 * 4) / 128);
        expect(rep.ringBytesPerSequence).toBe(4 * 519 * 96 * 4 + 2 * 519 * (384 + 256) * 4 + 639 * 192 * 4);
      } finally {
        meta.close();
      }
    } finally {
      full.close();
      ring.close();
    }
  }, 60_000);
});
