// qwen4exp's program (low-rank hyper-connection modules around Qwen3.5's delta nets with a sigmoid
// output gate and gated attention, the PLE n-gram embedding on its block), the metadata its builder
// refuses as llama.cpp's loader refuses it, and QSA (the qsa_index op and the attention's selection
// of single positions) at any context. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts, the PLE ops against references in
// packages/core-native/tests/test-ple.cpp, QSA against one in packages/core-native/tests/test-qsa.cpp.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { buildProgram, defaultContext } from '.';
import { Metadata, readHParams } from '../hparams';
import { EngineModel } from '../model';
import { editedKv, opsOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const programOf = (kv: Record<string, GgufValue>, tensors: Map<string, GgufTensorInfo>, nCtxSeq = 256) =>
  buildProgram(readHParams(new Metadata(kv, String(kv['general.architecture'])), tensors), tensors, { nCtxSeq });

describe('qwen4exp program', () => {
  let f: ReturnType<typeof testModelFile>;
  let layers: ReturnType<typeof testModelFile>;
  let qsa: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-qwen4exp');
    layers = testModelFile(dir, 'tiny-qwen4exp-layers');
    qsa = testModelFile(dir, 'tiny-qwen4exp-qsa');
  }, 60_000);
  const kv = (extra: Record<string, GgufValue | undefined>, base = f) => editedKv(base.kv, extra);

  it('keeps hc x n_embd streams mixed by low-rank modules: two per block and the head (no inject)', () => {
    const p = programOf(f.kv, f.tensors);
    const width = (name: string) => p.buffers.find((b) => b.name === name)!.width;
    expect([width('x'), width('h'), width('hc_xn'), width('hc_lo32'), width('hc_w')]).toEqual([1024, 256, 1024, 32, 1024]);
    // Grouped norms: 4 blocks x 2 modules + the head, one gamma row per stream.
    const norms = opsOf(p, 'head_rms_norm').filter((o) => String(o.weights!.weight).includes('hc_'));
    expect(norms.map((o) => o.weights!.weight)).toEqual([...[0, 1, 2, 3].flatMap((i) => [`blk.${i}.hc_attn_norm.weight`, `blk.${i}.hc_ffn_norm.weight`]), 'output_hc_norm.weight']);
    expect(norms.every((o) => o.params!.head_dim === 256 && o.params!.n_head === 4)).toBe(true);
    // The inject weights: 2 sigmoid(inject / hc), no weights, per block module (not the head).
    const g = opsOf(p, 'hc_gates');
    expect(g.length).toBe(8);
    expect(g.every((o) => o.weights === undefined && o.params!.gate_scale === 0.25 && o.params!.magnitude === 2 && o.params!.eps === 0 && o.params!.repeat === 256)).toBe(true);
    // The embedding goes into each stream.
    expect(p.ops.filter((o) => o.op === 'copy' && o.out === p.buffers.findIndex((b) => b.name === 'x')).map((o) => o.params!.out_off)).toEqual([0, 256, 512, 768]);
  });

  it('delta nets (sigmoid output gate) where the pattern says, gated attention elsewhere; the PLE n-gram state and its dilated convolution', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'gated_delta_net').length).toBe(3);
    expect(opsOf(p, 'swiglu').filter((o) => p.buffers[o.out].name.startsWith('lin_')).length).toBe(0);
    expect(opsOf(p, 'attention').length).toBe(1);
    const [ng] = opsOf(p, 'ple_ngram');
    expect([ng.params!.n_gram, ng.params!.per_gram, ng.params!.eos, ng.params!.image_token, ng.params!.off_3, ng.params!.voc_3]).toEqual([3, 2, 835, 835, 883, 269]);
    // 0x1f3a5c7e9b1d in 32-bit halves.
    expect([ng.params!.mult_lo_0, ng.params!.mult_hi_0]).toEqual([0x3a5c7e9b1d % 2 ** 32, 0x1f3a]);
    const conv = opsOf(p, 'ssm_conv');
    const pleConv = conv.find((o) => o.weights!.weight === 'blk.1.ple_conv1d.weight')!;
    expect([pleConv.params!.d_conv, pleConv.params!.dilation, pleConv.params!.silu]).toEqual([4, 3, 1]);
    // Recurrent layers: the n-gram state (2 tokens), then per delta-net block its conv window and
    // state, with the PLE convolution's 3 x 3 positions of 1024 on block 1.
    expect(p.rsWidth).toEqual([2, 3 * 512, 4 * 64 * 64, 9 * 1024, 3 * 512, 4 * 64 * 64, 3 * 512, 4 * 64 * 64]);
    expect(opsOf(p, 'ple_gate').map((o) => [o.params!.n, o.params!.n_group, o.params!.scale])).toEqual([[256, 4, 0.0625]]);
    // attention.recurrent_layers: attention on blocks 1 and 4; no PLE.
    const l = programOf(layers.kv, layers.tensors);
    expect([opsOf(l, 'gated_delta_net').length, opsOf(l, 'attention').length, opsOf(l, 'ple_ngram').length]).toEqual([3, 2, 0]);
  });

  it('QSA: the indexer’s queries and raw keys into qsa_index, whose top_k + ratio - 1 positions the attention sees, at any context', () => {
    const p = programOf(qsa.kv, qsa.tensors, 1 << 20);
    const q = opsOf(p, 'qsa_index');
    const att = opsOf(p, 'attention');
    expect(q.length).toBe(2);
    // top 8 in blocks of 4: 11 positions per KV head (2) after the 4 x 64 query values.
    expect(q.map((o) => [o.params!.top_k, o.params!.ratio, o.params!.n_head, o.params!.head_dim, o.params!.out_off, o.params!.repeat, o.params!.n_dims, o.params!.neox])).toEqual([
      [8, 4, 4, 32, 256, 2, 16, true],
      [8, 4, 4, 32, 256, 2, 16, true],
    ]);
    expect(q.map((o) => o.weights!.weight)).toEqual(['blk.1.indexer.k_norm.weight', 'blk.4.indexer.k_norm.weight']);
    expect(q.every((o, i) => o.out === att[i].a && p.buffers[o.out].width === 256 + 2 * 11)).toBe(true);
    expect(att.map((o) => [o.params!.sel_off, o.params!.top_k, o.params!.block])).toEqual([[256, 11, 1], [256, 11, 1]]);
    // The queries: q_proj, a per-head norm, the attention's RoPE over 4 heads of 32; the keys raw.
    const iq = q[0].a!;
    const writes = p.ops.filter((o) => o.out === iq).map((o) => [o.op, o.weights?.weight ?? o.params!.n_head]);
    expect(writes.slice(0, 3)).toEqual([['matmul', 'blk.1.indexer.q_proj.weight'], ['head_rms_norm', 'blk.1.indexer.q_norm.weight'], ['rope', 4]]);
    expect(p.ops.filter((o) => o.out === q[0].b).map((o) => [o.op, o.weights?.weight])).toEqual([['matmul', 'blk.1.indexer.k_proj.weight'], ['matmul', 'blk.4.indexer.k_proj.weight']]);
    // Without a compress ratio the block attends densely (the indexer's tensors still required).
    const dense = programOf({ ...qsa.kv, 'qwen4exp.attention.compress_ratios': [0, 0, 0, 0, 0] }, qsa.tensors);
    expect([opsOf(dense, 'qsa_index').length, opsOf(dense, 'attention').every((o) => o.params!.sel_off === undefined)]).toEqual([0, true]);
    // No context cap: a load without a context asked for gets the usual one.
    const hp = (k: Record<string, GgufValue>) => readHParams(new Metadata(k, 'qwen4exp'), f.tensors);
    expect(defaultContext(hp(kv({ 'qwen4exp.context_length': 32768 })))).toBe(4096);
    expect(defaultContext(hp(kv({ 'qwen4exp.context_length': 128 })))).toBe(128);
    // The indexer head must hold the rotary dimensions its queries and block keys turn.
    expect(() => programOf(kv({ 'qwen4exp.rope.dimension_count': 48 }), f.tensors)).toThrow(
      expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/indexer's key length 32 does not hold the 48 rotary dimensions/) }),
    );
  });

  it('refuses missing or malformed keys with the key named, as llama.cpp does', () => {
    const bad = (extra: Record<string, GgufValue | undefined>, want: RegExp) => expect(() => programOf(kv(extra), f.tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
    bad({ 'qwen4exp.hyper_connection.count': 1 }, /hyper_connection.count must be greater than one, got 1/);
    bad({ 'qwen4exp.hyper_connection.low_rank': undefined }, /lacks qwen4exp.hyper_connection.low_rank/);
    bad({ 'qwen4exp.attention.indexer.top_k': 0 }, /'qwen4exp.attention.indexer.top_k' is 0/);
    bad({ 'qwen4exp.attention.compress_ratios': [0, 4] }, /'qwen4exp.attention.compress_ratios' has 2 entries for 4 layers/);
    bad({ 'qwen4exp.ple.layers': [1, 2] }, /lists 2 layers, but only one PLE layer is supported/);
    bad({ 'qwen4exp.ple.layers': [3] }, /PLE layer 3 is not a linear attention layer/);
    bad({ 'qwen4exp.ple.layers': [9] }, /PLE layer 9 is out of range/);
    bad({ 'qwen4exp.ple.ngram_size': 9 }, /PLE n-gram size 9 is out of range/);
    bad({ 'qwen4exp.ple.conv_kernel': 0 }, /ple.conv_kernel must be greater than zero/);
    bad({ 'qwen4exp.embedding_length_per_layer_input': 32 }, /4 heads of 32\) is not n_embd 256 wide/);
    bad({ 'qwen4exp.ple.head_offsets': [0n, 1n] }, /'qwen4exp.ple.head_offsets' has 2 entries, but at least 4 are required/);
    bad({ 'qwen4exp.ple.head_vocab_sizes': [311n, 0n, 293n, 269n] }, /PLE head 1 range does not fit the int32 row index/);
    bad({ 'qwen4exp.ple.layer_multipliers': undefined }, /lacks metadata 'qwen4exp.ple.layer_multipliers'/);
    bad({ 'qwen4exp.ssm.state_size': undefined }, /lacks metadata 'qwen4exp.ssm.state_size'/);
    bad({ 'qwen4exp.expert_count': undefined, 'qwen4exp.expert_used_count': undefined }, /expert_count and expert_used_count must be > 0/);
  });

  it('a table too short for the heads or a missing PLE tensor is a clear error at load, not a crash', () => {
    const t = new Map(f.tensors);
    t.delete('blk.1.ple_conv1d.weight');
    expect(() => programOf(f.kv, t)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/blk\.1\.ple_conv1d\.weight/) }));
    // Head 3's vocabulary (269 rows from 883) patched to 3000: past the table's 1152 rows.
    const src = fs.readFileSync(writeTestModel(dir, 'tiny-qwen4exp'));
    const u64 = (xs: number[]) => Buffer.concat(xs.map((x) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(x)); return b; }));
    const at = src.indexOf(u64([311, 257, 293, 269]));
    expect(at).toBeGreaterThan(0);
    u64([311, 257, 293, 3000]).copy(src, at);
    const bad = `${dir}/short-table.gguf`;
    fs.writeFileSync(bad, src);
    expect(() => EngineModel.load(bad, { threads: 2, nCtx: 64 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/PLE n-gram table 'per_layer_token_embd.weight' .* must be \[64, at least 3883\]/) }));
  });

  it('loads at a context past the QSA budget and decodes there', async () => {
    const file = writeTestModel(dir, 'tiny-qwen4exp');
    const m = EngineModel.load(file, { threads: 2, nCtx: 1024 });
    try {
      expect(m.recurrent).toBe(true);
      const logits = await m.evaluate(0, [1, 835, 2, 3], 'last');
      expect(logits.every(Number.isFinite)).toBe(true);
    } finally {
      m.close();
    }
  });
});
