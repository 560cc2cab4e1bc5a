// The pure state-space models (mamba: Mamba-1 and Falcon-Mamba; mamba2) and Falcon-H1: their
// programs as llama.cpp's graphs (src/models/mamba.cpp, falcon-h1.cpp) build them, the KV
// accounting of a model without attention (no KV rows: plan, inspect and the load's budget count
// the recurrent states only, whatever the context), and the files the builders refuse with the key
// or tensor at fault. Numerics against llama.cpp: tools/src/parity/parity-ssm.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { EngineModel, kvCacheReport, openGgufMetadata, planModel } from '../model';
import { editedKv, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir('kail-ssm-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const without = (m: Map<string, GgufTensorInfo>, ...names: string[]) => new Map([...m].filter(([k]) => !names.includes(k)));
const badModel = (re: RegExp) => expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(re) });
const edit = editedKv;

describe('mamba and mamba2 programs', () => {
  it('one Mamba-1 mixer per block, no attention, no KV rows; Falcon-Mamba norms dt, B and C without weights', () => {
    const f = testModelFile(dir, 'tiny-mamba');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'attention' || o.op === 'rope')).toEqual([]);
    expect(p.kvKWidth).toEqual([]);
    // Per block the convolution window (3 taps x d_inner 512) and the scan's state (512 x 16).
    expect(p.rsWidth).toEqual([0, 1, 2, 3].flatMap(() => [3 * 512, 512 * 16]));
    expect(p.ops.filter((o) => o.op === 'ssm_scan').map((o) => [o.params!.n_head, o.params!.head_dim, o.params!.d_state])).toEqual(Array(4).fill([512, 1, 16]));
    expect(p.ops.filter((o) => o.op === 'head_rms_norm')).toEqual([]);
    const fm = testModelFile(dir, 'tiny-falcon-mamba');
    const q = programOf(fm.kv, fm.tensors);
    const norms = q.ops.filter((o) => o.op === 'head_rms_norm');
    expect(norms.map((o) => [o.params!.head_dim, o.params!.a_off, o.weights?.weight])).toEqual([0, 1, 2].flatMap(() => [[32, 0, undefined], [16, 512, undefined], [16, 528, undefined]]));
    // Without the key (as classic Mamba) and without norm weights: no norms.
    expect(programOf(edit(fm.kv, { 'mamba.ssm.dt_b_c_rms': undefined }), fm.tensors).ops.filter((o) => o.op === 'head_rms_norm')).toEqual([]);
  });

  it('one Mamba-2 mixer per block with its grouped norm', () => {
    const f = testModelFile(dir, 'tiny-mamba2');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'attention')).toEqual([]);
    expect(p.kvKWidth).toEqual([]);
    expect(p.rsWidth).toEqual([0, 1, 2, 3].flatMap(() => [3 * (512 + 2 * 2 * 64), 512 * 64]));
    expect(p.ops.filter((o) => o.op === 'head_rms_norm').map((o) => [o.params!.head_dim, o.params!.n_head])).toEqual(Array(4).fill([256, 2]));
  });

  it('refuse missing or malformed keys and tensors with what is wrong', () => {
    const m = testModelFile(dir, 'tiny-mamba');
    const bad = (f: typeof m, extra: Record<string, GgufValue | undefined>, tensors: Map<string, GgufTensorInfo>, re: RegExp) => expect(() => programOf(edit(f.kv, extra), tensors)).toThrow(badModel(re));
    for (const k of ['ssm.conv_kernel', 'ssm.inner_size', 'ssm.state_size', 'ssm.time_step_rank']) bad(m, { [`mamba.${k}`]: undefined }, m.tensors, new RegExp(`lacks metadata 'mamba\\.${k.replace('.', '\\.')}'`));
    bad(m, { 'mamba.ssm.inner_size': 768 }, m.tensors, /ssm\.inner_size must be twice embedding_length/);
    bad(m, { 'mamba.attention.head_count': 2 ** 20 }, m.tensors, /attention\.head_count/);
    for (const t of ['blk.1.ssm_conv1d.bias', 'blk.2.ssm_dt.bias', 'blk.3.ssm_x.weight', 'blk.0.attn_norm.weight', 'output_norm.weight']) bad(m, {}, without(m.tensors, t), new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}'`));
    const m2 = testModelFile(dir, 'tiny-mamba2');
    bad(m2, { 'mamba2.ssm.group_count': undefined }, m2.tensors, /lacks metadata 'mamba2\.ssm\.group_count'/);
    bad(m2, { 'mamba2.ssm.time_step_rank': 3 }, m2.tensors, /does not split into 3 heads/);
    bad(m2, {}, without(m2.tensors, 'blk.2.ssm_norm.weight'), /lacks tensor 'blk\.2\.ssm_norm\.weight'/);
    bad(m2, {}, without(m2.tensors, 'blk.0.ssm_a'), /lacks tensor 'blk\.0\.ssm_a'/);
  });
});

describe('falcon-h1 program', () => {
  it('attention and a Mamba-2 mixer on the same attn_norm output, both added to the residual, then ffn_norm and SwiGLU', () => {
    const f = testModelFile(dir, 'tiny-falcon-h1');
    const p = programOf(f.kv, f.tensors);
    const attn = p.ops.filter((o) => o.op === 'attention');
    expect(attn.map((o) => [o.params!.n_head, o.params!.n_head_kv, o.params!.head_dim, o.params!.scale])).toEqual(Array(4).fill([4, 2, 64, Math.fround(1 / 8)]));
    expect(p.ops.filter((o) => o.op === 'rope').every((o) => o.params!.neox === true && o.params!.n_dims === 64)).toBe(true);
    expect(p.kvKWidth).toEqual([128, 128, 128, 128]);
    expect(p.rsWidth).toEqual([0, 1, 2, 3].flatMap(() => [3 * (512 + 2 * 2 * 32), 512 * 32]));
    // The mixer reads the attention's normed input: one attn_norm per block, none for the mixer.
    const norms = p.ops.filter((o) => o.op === 'rms_norm').map((o) => o.weights!.weight);
    expect(norms).toEqual([...[0, 1, 2, 3].flatMap((i) => [`blk.${i}.attn_norm.weight`, `blk.${i}.ffn_norm`]), 'output_norm.weight']);
    // attention.scale is not read by llama.cpp's Falcon-H1 loader.
    expect(programOf(edit(f.kv, { 'falcon-h1.attention.scale': 0.5 }), f.tensors).ops.filter((o) => o.op === 'attention').map((o) => o.params!.scale)).toEqual(Array(4).fill(Math.fround(1 / 8)));
    // Optional parts: no ssm_norm (the plain preset), no convolution bias.
    const g = testModelFile(dir, 'tiny-falcon-h1-plain');
    expect(programOf(g.kv, g.tensors).ops.filter((o) => o.op === 'head_rms_norm')).toEqual([]);
    // ffn_norm under the name converters give it (blk.N.ffn_norm.weight) is taken too.
    const renamed = new Map([...f.tensors].map(([k, v]) => (k === 'blk.3.ffn_norm' ? ['blk.3.ffn_norm.weight', { ...v, name: 'blk.3.ffn_norm.weight' }] : [k, v])));
    expect(programOf(f.kv, renamed).ops.filter((o) => o.op === 'rms_norm').map((o) => o.weights!.weight)).toContain('blk.3.ffn_norm.weight');
    const noBias = programOf(f.kv, without(f.tensors, 'blk.1.ssm_conv1d.bias')).ops.filter((o) => o.op === 'ssm_conv');
    expect(noBias.map((o) => o.weights!.bias)).toEqual(['blk.0.ssm_conv1d.bias', undefined, 'blk.2.ssm_conv1d.bias', 'blk.3.ssm_conv1d.bias']);
  });

  it('refuses missing or malformed keys and tensors with what is wrong', () => {
    const f = testModelFile(dir, 'tiny-falcon-h1');
    const bad = (extra: Record<string, GgufValue | undefined>, tensors: Map<string, GgufTensorInfo>, re: RegExp) => expect(() => programOf(edit(f.kv, extra), tensors)).toThrow(badModel(re));
    for (const k of ['ssm.conv_kernel', 'ssm.group_count', 'ssm.state_size', 'attention.head_count']) bad({ [`falcon-h1.${k}`]: undefined }, f.tensors, new RegExp(`lacks metadata 'falcon-h1\\.${k.replace('.', '\\.')}'`));
    bad({ 'falcon-h1.attention.value_length': 32 }, f.tensors, /key length 64 and value length 32 differ/);
    bad({ 'falcon-h1.attention.head_count_kv': 0 }, f.tensors, /head_count_kv/);
    for (const t of ['blk.2.ffn_norm', 'blk.0.ssm_in.weight', 'blk.1.attn_k.weight', 'blk.3.ffn_gate.weight', 'blk.1.ssm_dt.bias']) bad({}, without(f.tensors, t), new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}`));
    const rf = new Map(f.tensors);
    rf.set('blk.0.rope_freqs.weight', { ...f.tensors.get('blk.0.ffn_norm')!, name: 'blk.0.rope_freqs.weight' });
    expect(() => programOf(f.kv, rf)).toThrow(expect.objectContaining({ code: 'KAIL_E_UNSUPPORTED', message: expect.stringMatching(/rope_freqs/) }));
  });
});

describe('a model without attention keeps no KV cache', () => {
  it('inspect, plan and the load count only the recurrent states, whatever the context', async () => {
    const file = writeTestModel(dir, 'tiny-mamba2', 'F32');
    const perSeq = 4 * 4 * (3 * 768 + 512 * 64);
    const meta = openGgufMetadata(file);
    try {
      const r = kvCacheReport(meta, 'f16');
      expect(r.bytesPerToken).toBe(0);
      expect(r.recurrentBytesPerSequence).toBe(perSeq);
    } finally {
      meta.close();
    }
    const small = planModel(file, { ramBytes: 2 ** 30, nCtx: 256, nSeqMax: 1 });
    const large = planModel(file, { ramBytes: 2 ** 30, nCtx: 65536, nSeqMax: 3 });
    expect(small.kvBytes).toBe(perSeq);
    expect(large.kvBytes).toBe(3 * perSeq);
    expect(large.fits).toBe(true);
    // A long context loads and runs; the runtime's cache holds the states and nothing per token.
    const m = EngineModel.load(file, { threads: 2, nCtx: 65536, nSeqMax: 2, kvType: 'f16' });
    try {
      expect(m.recurrent).toBe(true);
      await m.evaluate(0, [5, 6, 7, 8], 'last');
      const a = m.runtime.stats().kvBytes;
      await m.evaluate(0, [9, 10, 11, 12, 13, 14], 'last');
      expect(m.runtime.stats().kvBytes).toBe(a);
      expect(m.seqLen(0)).toBe(10);
    } finally {
      m.close();
    }
  }, 60_000);
});
