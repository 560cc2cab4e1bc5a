// Hunyuan v4's program (hyper-connection streams, MLA with sinks and a gate, the indexer on the
// blocks attention.indexer.types flags, clamped experts), the metadata its builder refuses as
// llama.cpp's loader refuses it, and the indexer left out where it selects every position.
// Numerics are checked against llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { buildProgram } from '.';
import { Metadata, readHParams } from '../hparams';
import { EngineModel } from '../model';
import { opsOf, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('hy_v4 program', () => {
  let dsa: ReturnType<typeof testModelFile>;
  let full: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    dsa = testModelFile(dir, 'tiny-hy-v4');
    full = testModelFile(dir, 'tiny-hy-v4-full');
  }, 60_000);

  it('keeps hc x n_embd streams: per block two pre/post coefficient pairs, then the head collapses them (pre only)', () => {
    const p = programOf(dsa.kv, dsa.tensors);
    const width = (name: string) => p.buffers.find((b) => b.name === name)!.width;
    expect([width('x'), width('h'), width('hc_pre'), width('hc_post')]).toEqual([512, 128, 512, 512]);
    const g = opsOf(p, 'hc_gates');
    // 4 blocks x (attention, FFN) x (pre, post), then the head's pre.
    expect(g.length).toBe(17);
    expect(g.slice(0, 2).map((o) => [o.weights!.scale, o.params!.a_off ?? 0, o.params!.scale_index ?? 0, o.params!.base_off ?? 0, o.params!.magnitude ?? 1])).toEqual([
      ['blk.0.hc_attn_scale.weight', 0, 0, 0, 1],
      ['blk.0.hc_attn_scale.weight', 4, 1, 4, 2],
    ]);
    expect(g[16].weights).toEqual({ scale: 'output_hc_scale.weight', base: 'output_hc_base.weight' });
    // The embedding goes into each stream; no control vector ops (llama.cpp's graph applies none).
    expect(p.ops.filter((o) => o.op === 'copy' && o.out === p.buffers.findIndex((b) => b.name === 'x')).map((o) => o.params!.out_off)).toEqual([0, 128, 256, 384]);
    expect(opsOf(p, 'cvec')).toEqual([]);
    // The routers read n_embd-wide normed mixes (the stream's next-layer guess compares like with like).
    expect(opsOf(p, 'moe').every((o) => p.buffers[o.a!].width === 128 && o.b === undefined)).toBe(true);
  });

  it('attention: sinks per head, a sigmoid gate per value; the indexer on blocks 0 and 2, blocks 1 and 3 reading their selection', () => {
    const p = programOf(dsa.kv, dsa.tensors);
    const mla = opsOf(p, 'mla_attention');
    expect(mla.map((o) => o.weights!.sinks)).toEqual([0, 1, 2, 3].map((i) => `blk.${i}.attn_sinks.weight`));
    expect(new Set(mla.map((o) => o.c)).size).toBe(1);
    expect(mla.map((o) => o.params!.top_k)).toEqual([16, 16, 16, 16]);
    expect(opsOf(p, 'dsa_index').length).toBe(2);
    // Both indexer RoPEs rotate the last 16 of 64 dimensions (adjacent pairs); no Hadamard rotation.
    const ropes = opsOf(p, 'rope').filter((o) => o.params!.head_dim === 64);
    expect(ropes.map((o) => [o.params!.rot_off, o.params!.n_dims, o.params!.neox])).toEqual(Array(4).fill([48, 16, false]));
    expect(opsOf(p, 'hadamard')).toEqual([]);
    expect(opsOf(p, 'sigmoid_mul').map((o) => o.params)).toEqual(Array(4).fill({ per_element: 1 }));
    // Block 0 dense; the routed blocks' experts clamped as ggml_swiglu_clamp (act 7).
    expect(opsOf(p, 'moe').map((o) => [o.params!.act, o.params!.limit])).toEqual(Array(3).fill([7, 2]));
    // Without an indexer (the full-attention checkpoints): no selection, no clamp, 3 streams.
    const f = programOf(full.kv, full.tensors);
    expect(opsOf(f, 'dsa_index')).toEqual([]);
    expect(opsOf(f, 'mla_attention').every((o) => o.c === undefined)).toBe(true);
    expect(opsOf(f, 'moe').map((o) => o.params!.act ?? 0)).toEqual([0, 0, 0]);
    expect(f.buffers.find((b) => b.name === 'x')!.width).toBe(384);
  });

  it('leaves the indexer out for a context within top_k, with the same logits', async () => {
    const hp = readHParams(new Metadata(dsa.kv, 'hy_v4'), dsa.tensors);
    expect(opsOf(buildProgram(hp, dsa.tensors, { nCtxSeq: 16 }), 'dsa_index')).toEqual([]);
    const file = writeTestModel(dir, 'tiny-hy-v4', 'F32');
    const toks = Array.from({ length: 14 }, (_, i) => ((i * 53 + 7) % 1000) + 3);
    const run = async (nCtx: number) => {
      const m = EngineModel.load(file, { threads: 2, nCtx, kvType: 'f32' });
      try {
        return await m.evaluate(0, toks, 'all');
      } finally {
        m.close();
      }
    };
    expect(Buffer.from((await run(16)).buffer).equals(Buffer.from((await run(64)).buffer))).toBe(true);
  }, 30_000);

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no hyper-connection count', (kv) => delete kv['hy_v4.hyper_connection.count'], /lacks hy_v4\.hyper_connection\.count, which llama\.cpp's loader requires/],
    ['no hyper-connection magnitude', (kv) => delete kv['hy_v4.hyper_connection.magnitude'], /lacks hy_v4\.hyper_connection\.magnitude/],
    ['no shared expert count', (kv) => delete kv['hy_v4.expert_shared_count'], /lacks hy_v4\.expert_shared_count/],
    ['no MLA head sizes (not an MLA file)', (kv) => delete kv['hy_v4.attention.value_length_mla'], /lacks hy_v4\.attention\.value_length_mla/],
    ['an indexer key no longer than the rotary dims', (kv) => (kv['hy_v4.attention.indexer.key_length'] = 16), /bad indexer head count \/ key length .*key_length 16/],
    ['an indexer without heads', (kv) => (kv['hy_v4.attention.indexer.head_count'] = 0), /bad indexer head count \/ key length \(attention\.indexer\.head_count 0/],
    ['block 0 sharing a selection', (kv) => (kv['hy_v4.attention.indexer.types'] = [false, true, true, false]), /block 0 must own an indexer/],
    ['a top_k without indexer types', (kv) => delete kv['hy_v4.attention.indexer.types'], /block 0 must own an indexer/],
    ['no gating function', (kv) => delete kv['hy_v4.expert_gating_func'], /has no expert_gating_func/],
    ['a clamp array of the wrong length', (kv) => (kv['hy_v4.swiglu_clamp_exp'] = [2, 2]), /'hy_v4\.swiglu_clamp_exp' has 2 entries for 4 layers/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...dsa.kv };
    edit(kv);
    expect(() => programOf(kv, dsa.tensors)).toThrow(want);
  });

  it('refuses an indexing block without its indexer tensors, even where the context leaves the indexer out', () => {
    const tensors = new Map(dsa.tensors);
    tensors.delete('blk.2.indexer.proj.weight');
    expect(() => programOf(dsa.kv, tensors)).toThrow(/lacks tensor 'blk\.2\.indexer\.proj\.weight'/);
    const hp = readHParams(new Metadata(dsa.kv, 'hy_v4'), tensors);
    expect(() => buildProgram(hp, tensors, { nCtxSeq: 16 })).toThrow(/lacks tensor 'blk\.2\.indexer\.proj\.weight'/);
  });
});
