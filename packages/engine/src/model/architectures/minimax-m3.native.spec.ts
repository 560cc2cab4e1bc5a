// MiniMax-M3's program (dense leading blocks, MSA on the routed ones, swigluoai everywhere) and
// the metadata and tensors its builder refuses, naming them; with a context no longer than top_k
// blocks the indexer is left out and the logits are the same bits. Numerics are checked against
// llama.cpp in tools/src/parity/parity-moe-families.native.spec.ts, the op in tests/test-msa.cpp.
import fs from 'node:fs';

import type { GgufValue } from '@kailstream/core-native';

import { buildProgram } from '.';
import { Metadata, readHParams } from '../hparams';
import { EngineModel } from '../model';
import { opsOf, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));


describe('minimax-m3 program', () => {
  let f: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    f = testModelFile(dir, 'tiny-minimax-m3');
  }, 60_000);

  it('block 0 dense with full attention, blocks 1-2 routed with MSA; swigluoai in the dense FFN, the experts and the shared expert', () => {
    const p = programOf(f.kv, f.tensors);
    expect(opsOf(p, 'msa_index').map((o) => [o.params!.n_head, o.params!.head_dim, o.params!.top_k, o.params!.block, o.params!.local])).toEqual([[2, 64, 4, 4, 2], [2, 64, 4, 4, 2]]);
    expect(opsOf(p, 'attention').map((o) => o.params!.sel_off ?? 0)).toEqual([0, 512, 512]);
    expect(opsOf(p, 'swiglu').map((o) => [o.params!.oai_alpha, o.params!.limit])).toEqual([[1.702, 7], [1.702, 7], [1.702, 7]]);
    expect(opsOf(p, 'moe').map((o) => [o.params!.act, o.params!.gating, o.params!.norm_w, o.params!.w_scale])).toEqual([[1, 1, true, 2], [1, 1, true, 2]]);
    // Per-head q/k norms (one head_dim vector for every head), NeoX RoPE on 32 of 64, on the indexer's heads too.
    expect(opsOf(p, 'head_rms_norm').length).toBe(3 * 2 + 2 * 2);
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true && o.params!.n_dims === 32)).toBe(true);
  });

  it('with a context no longer than top_k blocks, every visible block is selected: no indexer, the same logits', async () => {
    const hp = readHParams(new Metadata(f.kv, 'minimax-m3'), f.tensors);
    expect(opsOf(buildProgram(hp, f.tensors, { nCtxSeq: 16 }), 'msa_index')).toEqual([]);
    expect(opsOf(buildProgram(hp, f.tensors, { nCtxSeq: 17 }), 'msa_index').length).toBe(2);
    const file = writeTestModel(dir, 'tiny-minimax-m3', 'F32');
    const toks = Array.from({ length: 16 }, (_, i) => (i * 37 + 5) % 1000);
    const logits = async (nCtx: number) => {
      const m = EngineModel.load(file, { threads: 2, nCtx, kvType: 'f32' });
      try {
        return await m.evaluate(0, toks, 'all');
      } finally {
        m.close();
      }
    };
    const [a, b] = [await logits(16), await logits(64)];
    expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))).toBe(true);
  });

  it.each<[string, (kv: Record<string, GgufValue>) => void, RegExp]>([
    ['no indexer head count', (kv) => delete kv['minimax-m3.attention.indexer.head_count'], /lacks metadata 'minimax-m3\.attention\.indexer\.head_count'/],
    ['no indexer top_k', (kv) => delete kv['minimax-m3.attention.indexer.top_k'], /lacks metadata 'minimax-m3\.attention\.indexer\.top_k'/],
    ['no block size', (kv) => delete kv['minimax-m3.attention.indexer.block_size'], /lacks metadata 'minimax-m3\.attention\.indexer\.block_size'/],
    ['blocks of 0 positions', (kv) => (kv['minimax-m3.attention.indexer.block_size'] = 0), /block_size' is 0; expected an integer in 1\.\./],
    ['no local block count', (kv) => delete kv['minimax-m3.attention.indexer.local_blocks'], /lacks metadata 'minimax-m3\.attention\.indexer\.local_blocks'/],
    ['an indexer head narrower than the rotary dims', (kv) => (kv['minimax-m3.attention.indexer.key_length'] = 16), /indexer\.key_length 16 is smaller than the 32 rotary dimensions/],
    ['indexer heads that are not one per KV head', (kv) => (kv['minimax-m3.attention.indexer.head_count'] = 4), /indexer\.head_count 4 must equal head_count_kv 2/],
    ['no gating function', (kv) => delete kv['minimax-m3.expert_gating_func'], /no expert_gating_func/],
    ['no shared expert count', (kv) => delete kv['minimax-m3.expert_shared_count'], /lacks metadata 'minimax-m3\.expert_shared_count'/],
  ])('refuses %s, naming it', (_what, edit, want) => {
    const kv = { ...f.kv };
    edit(kv);
    expect(() => programOf(kv, f.tensors)).toThrow(want);
  });

  it('refuses a file without an indexer, shared expert, selection bias or q norm tensor, naming it', () => {
    for (const name of ['blk.1.indexer.k_proj.weight', 'blk.2.indexer.q_norm.weight', 'blk.1.ffn_up_shexp.weight', 'blk.2.exp_probs_b.bias', 'blk.0.attn_q_norm.weight', 'blk.0.ffn_down.weight']) {
      const ts = new Map(f.tensors);
      ts.delete(name);
      expect(() => programOf(f.kv, ts)).toThrow(new RegExp(`lacks tensor '${name.replace(/\./g, '\\.')}'`));
    }
  });
});
