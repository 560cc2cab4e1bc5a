// The dense MLA decoders (minicpm3, plm): deepseek2's MLA block over the latent cache with a dense
// FFN, as llama.cpp's minicpm3 and plm graphs compute them, and the metadata and tensors their
// builder refuses, naming it. Numerics are checked against llama.cpp in
// tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue, ModelProgram } from '@kailstream/core-native';

import { native } from '../../native';
import { EngineModel } from '../model';
import { buildProgram } from '.';
import { Metadata, readHParams } from '../hparams';
import { opsOf, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const programAt = (f: { kv: Record<string, GgufValue>; tensors: Map<string, GgufTensorInfo> }, nCtxSeq: number) =>
  buildProgram(readHParams(new Metadata(f.kv, String(f.kv['general.architecture'])), f.tensors), f.tensors, { nCtxSeq });

describe('dense MLA programs (minicpm3, plm)', () => {
  let cpm: ReturnType<typeof testModelFile>;
  let cpmLong: ReturnType<typeof testModelFile>;
  let plm: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    cpm = testModelFile(dir, 'tiny-minicpm3');
    cpmLong = testModelFile(dir, 'tiny-minicpm3-long');
    plm = testModelFile(dir, 'tiny-plm');
  }, 60_000);

  it('minicpm3: absorbed MLA over a latent cache (64 + 16), scale 1/sqrt(48), value heads of n_embd / heads; NeoX RoPE with the LongRoPE table the context picks', () => {
    const p = programOf(cpm.kv, cpm.tensors);
    const mla = opsOf(p, 'mla_attention');
    expect(mla.map((o) => [o.params!.n_head, o.params!.kv_lora, o.params!.qk_nope, o.params!.qk_rope, o.params!.v_head, o.params!.scale, o.weights!.kv_b])).toEqual(
      [0, 1, 2, 3].map((i) => [4, 64, 32, 16, 32, Math.fround(1 / Math.sqrt(48)), `blk.${i}.attn_kv_b.weight`]),
    );
    expect([p.kvKWidth, p.kvVWidth]).toEqual([Array(4).fill(80), Array(4).fill(0)]);
    const rope = opsOf(p, 'rope');
    expect(rope.map((o) => [o.params!.neox, o.params!.n_dims, o.params!.rot_off, o.weights!.freq_factors])).toEqual(
      Array(4).fill([[true, 16, 64, 'rope_factors_short.weight'], [true, 16, 32, 'rope_factors_short.weight']]).flat(),
    );
    // A context past the training one (padded to 256) takes the long table, as -long's 128 does at any context.
    expect(opsOf(programAt(cpm, 8192), 'rope').every((o) => o.weights!.freq_factors === 'rope_factors_long.weight')).toBe(true);
    expect(opsOf(programAt(cpmLong, 72), 'rope').every((o) => o.weights!.freq_factors === 'rope_factors_long.weight')).toBe(true);
    // Without the tables: plain RoPE.
    const t = new Map(cpm.tensors);
    t.delete('rope_factors_long.weight');
    t.delete('rope_factors_short.weight');
    expect(opsOf(programOf(cpm.kv, t), 'rope').every((o) => o.weights === undefined)).toBe(true);
  });

  it('minicpm3: embedding x12, each sub-layer x1.4/sqrt(4) before its residual add, the normed hidden state x256/128 before the untied head; SwiGLU FFNs', () => {
    const p = opsOf(programOf(cpm.kv, cpm.tensors), 'scale').map((o) => o.params!.scale);
    expect(p).toEqual([12, ...Array(8).fill(Math.fround(Math.fround(1.4) / 2)), 2]);
    const prog = programOf(cpm.kv, cpm.tensors);
    expect(opsOf(prog, 'swiglu')).toHaveLength(4);
    expect(opsOf(prog, 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    const tied = new Map(cpm.tensors);
    tied.delete('output.weight');
    expect(opsOf(programOf(cpm.kv, tied), 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
  });

  it('plm: a plain attn_q, RoPE over adjacent pairs without factors, squared-ReLU FFNs, no scales, the head tied to token_embd whatever the file has', () => {
    const p = programOf(plm.kv, plm.tensors);
    expect(opsOf(p, 'mla_attention').map((o) => [o.params!.kv_lora, o.params!.qk_nope, o.params!.qk_rope, o.params!.v_head])).toEqual(Array(4).fill([128, 64, 32, 48]));
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === false && o.weights === undefined)).toBe(true);
    expect(opsOf(p, 'relu_sqr')).toHaveLength(4);
    expect(opsOf(p, 'swiglu')).toEqual([]);
    expect(opsOf(p, 'scale')).toEqual([]);
    expect(opsOf(p, 'matmul').filter((o) => /attn_q/.test(o.weights!.weight)).map((o) => o.weights!.weight)).toEqual([0, 1, 2, 3].map((i) => `blk.${i}.attn_q.weight`));
    const t = new Map(plm.tensors);
    t.set('output.weight', { ...t.get('token_embd.weight')!, name: 'output.weight' });
    expect(opsOf(programOf(plm.kv, t), 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
  });

  it.each<[string, 'cpm' | 'plm', (kv: Record<string, GgufValue>) => void, string, RegExp]>([
    ['a minicpm3 file without q_lora_rank', 'cpm', (kv) => delete kv['minicpm3.attention.q_lora_rank'], 'KAIL_E_BAD_MODEL', /minicpm3: attention.q_lora_rank is required/],
    ['a plm file without kv_lora_rank', 'plm', (kv) => delete kv['plm.attention.kv_lora_rank'], 'KAIL_E_BAD_MODEL', /kv_lora_rank/],
    ['a key no longer than its rotary part', 'plm', (kv) => (kv['plm.attention.key_length'] = 32), 'KAIL_E_BAD_MODEL', /plm: inconsistent MLA sizes \(key 32, rope 32/],
    ['an attention temperature scale', 'cpm', (kv) => (kv['minicpm3.attention.temperature_scale'] = 0.1), 'KAIL_E_UNSUPPORTED', /attention temperature scaling/],
  ])('refuses %s, naming it', (_what, which, edit, code, want) => {
    const f = which === 'cpm' ? cpm : plm;
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(expect.objectContaining({ code, message: expect.stringMatching(want) }));
  });

  it.each<[string, 'cpm' | 'plm']>([
    ['blk.1.attn_q_a.weight', 'cpm'],
    ['blk.2.attn_q_a_norm.weight', 'cpm'],
    ['blk.3.attn_kv_b.weight', 'cpm'],
    ['blk.0.ffn_gate.weight', 'cpm'],
    ['blk.2.attn_q.weight', 'plm'],
    ['blk.1.attn_kv_a_norm.weight', 'plm'],
    ['blk.3.ffn_up.weight', 'plm'],
  ])('refuses a file without %s (%s), naming it', (name, which) => {
    const f = which === 'cpm' ? cpm : plm;
    const t = new Map(f.tensors);
    t.delete(name);
    expect(() => programOf(f.kv, t)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining(`'${name}'`) }));
  });

  it('loads; a misshaped latent up-projection fails with KAIL_E_BAD_MODEL naming it', () => {
    const file = writeTestModel(dir, 'tiny-minicpm3');
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
    const p = programOf(cpm.kv, cpm.tensors);
    const load = (q: ModelProgram) => new (native().Model)(file, q, { threads: 1, nCtx: 16 }).close();
    const kvb: ModelProgram = JSON.parse(JSON.stringify(p));
    kvb.ops.find((o) => o.op === 'mla_attention')!.weights!.kv_b = 'blk.0.attn_q_b.weight';
    expect(() => load(kvb)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining('blk.0.attn_q_b.weight') }));
  });
});
