// Granite Switch (graniteswitch): its program as llama.cpp's granite-switch graph builds it (the
// router's inputs and its one-head attention over a KV layer of its own, activation tokens embedded
// as their substitutes, a switched LoRA delta on each of the seven projections), the adapters
// really switching mid-sequence (against the same file with every delta zero), the router reading
// earlier passes' rows from its cache, and the metadata and tensors its builder refuses as
// llama.cpp's loader does, naming them. Numerics against llama.cpp: tools/src/parity/parity-granite-switch.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { EngineModel, kvCacheReport, openGgufMetadata } from '../model';
import { editedKv, opsOf, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

// The 64 parity tokens' first 48 (metrics.ts tokenIds(64, 1024, 11)): adapter 1's token 426 at 9, adapter 3's 919 at 40.
const TOKENS = [363, 523, 622, 51, 327, 767, 959, 211, 509, 426, 417, 645, 839, 984, 782, 1008, 835, 978, 685, 841, 812, 82, 252, 757, 307, 856, 847, 764, 518, 82, 447, 390, 712, 428, 953, 997, 746, 60, 347, 312, 919, 361, 849, 713, 772, 115, 573, 686];

describe('graniteswitch program', () => {
  let gs: ReturnType<typeof testModelFile>;
  beforeAll(() => {
    gs = testModelFile(dir, 'tiny-graniteswitch');
  }, 60_000);

  it('routes on a one-head KV layer of its own, embeds substitutes and switches all seven projections', () => {
    const p = programOf(gs.kv, gs.tensors);
    const [route] = opsOf(p, 'switch_route');
    expect(route.ids).toEqual([426, 561, 919, 306, 100, 101, 102, 103]);
    expect(route.params).toEqual({ head_dim: 64, gain: 15 });
    expect(p.buffers[route.out].width).toBe(1 + 3 * 64);
    expect(opsOf(p, 'embed').map((o) => [o.b, o.params])).toEqual([[route.out, { index: 3, b_off: 0, no_lora: 1 }]]);
    const att = opsOf(p, 'attention');
    expect(att[0].params).toEqual({ layer: 0, n_head: 1, n_head_kv: 1, head_dim: 64, head_dim_v: 64, scale: 1, a_off: 1, b_off: 65, c_off: 129 });
    // The router's cache is one more KV layer, head_dim wide (as llama.cpp's padded router layer).
    expect([p.kvKWidth, p.kvVWidth]).toEqual([[64, 128, 128, 128], [64, 128, 128, 128]]);
    expect(att.slice(1).map((o) => o.params!.scale)).toEqual([0.015625, 0.015625, 0.015625]);
    const lora = opsOf(p, 'switch_lora');
    expect(lora.every((o) => o.b === att[0].out)).toBe(true);
    expect(lora.map((o) => o.weights!.lora_a)).toEqual([0, 1, 2].flatMap((i) => ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'].map((n) => `blk.${i}.${n}.lora_a`)));
    expect(p.ops.findIndex((o) => o.op === 'rope')).toBeGreaterThan(p.ops.findIndex((o) => o.op === 'switch_lora' && o.weights!.lora_a === 'blk.0.attn_k.lora_a'));
  });

  it("counts the router's rows in the KV cache (inspect and plan): 64 K and 64 V values per position beside the blocks'", () => {
    const meta = openGgufMetadata(writeTestModel(dir, 'tiny-graniteswitch'));
    try {
      // f16: 3 blocks x (128 + 128) and the router's 64 + 64, 2 bytes each; q8_0 in blocks of 32.
      expect(kvCacheReport(meta, 'f16').bytesPerToken).toBe((3 * 256 + 128) * 2);
      expect(kvCacheReport(meta, 'q8_0').bytesPerToken).toBe(((3 * 256 + 128) / 32) * 34);
    } finally {
      meta.close();
    }
  });

  it('switches adapters mid-sequence and reads the router rows of earlier passes from its cache', async () => {
    const run = async (preset: string, nBatch: number) => {
      const m = EngineModel.load(writeTestModel(dir, preset), { kvType: 'f32', threads: 2, nCtx: 64 });
      try {
        return { logits: await m.evaluate(0, TOKENS, 'all', nBatch), nVocab: m.nVocab };
      } finally {
        m.close();
      }
    };
    const on = await run('tiny-graniteswitch', 48);
    const off = await run('tiny-graniteswitch-zero', 48);
    const V = on.nVocab;
    const rowDiff = (a: Float32Array, b: Float32Array, t: number) => Math.max(...Array.from({ length: V }, (_, j) => Math.abs(a[t * V + j] - b[t * V + j])));
    const diffs = TOKENS.map((_, t) => rowDiff(on.logits, off.logits, t));
    // Slot 0 (no activation token yet) is the base model exactly; from 426 on every row moves.
    expect(diffs.slice(0, 9).every((d) => d === 0)).toBe(true);
    expect(Math.min(...diffs.slice(9))).toBeGreaterThan(0.01);
    // In passes of 8 the router of every later pass reads 426's row from the cache.
    const split = await run('tiny-graniteswitch', 8);
    expect(Math.max(...TOKENS.map((_, t) => rowDiff(split.logits, on.logits, t)))).toBeLessThan(1e-4);
  }, 60_000);

  it("applies a LoRA adapter file's output.weight pair only, leaving the others unused as llama.cpp's graph does", async () => {
    const model = writeTestModel(dir, 'tiny-graniteswitch');
    const lora = (targets: string) => [{ path: writeTestModel(dir, 'tiny-graniteswitch', 'F32', 3, ['--lora-rank', '4', '--lora-targets', targets]) }];
    const run = async (l: { path: string }[]) => {
      const m = EngineModel.load(model, { threads: 2, nCtx: 16, kvType: 'f32', lora: l });
      try {
        return await m.evaluate(0, TOKENS.slice(0, 12), 'all');
      } finally {
        m.close();
      }
    };
    const plain = await run([]);
    const head = await run(lora('output.weight'));
    // (The pairs are seeded per tensor name: output.weight's is the same in both files.)
    const all = await run(lora('token_embd.weight,attn_qkv,attn_output,ffn_gate,ffn_up,ffn_down,output.weight'));
    expect(Math.max(...plain.map((v, j) => Math.abs(v - head[j])))).toBeGreaterThan(1e-3);
    expect(Array.from(all)).toEqual(Array.from(head));
  }, 60_000);

  it.each<[string, Record<string, GgufValue | undefined>, RegExp]>([
    ['fewer activation tokens than adapters', { 'graniteswitch.adapters.token_ids_activate': [426, 561, 919] }, /adapter token id arrays \(3 activate, 4 substitute\) do not match adapter count 4/],
    ['an adapter count the arrays do not have', { 'graniteswitch.adapters.count': 5 }, /\(4 activate, 4 substitute\) do not match adapter count 5/],
    ['a substitute outside the vocabulary', { 'graniteswitch.adapters.token_ids_substitute': [100, 101, 1024, 103] }, /substitute token id 1024 out of range \[0, 1024\)/],
    ['a negative substitute', { 'graniteswitch.adapters.token_ids_substitute': [100, -1, 102, 103] }, /substitute token id -1 out of range/],
    ['more than 4096 adapters', { 'graniteswitch.adapters.count': 4097 }, /invalid adapter count 4097/],
    ['a rank above 4096', { 'graniteswitch.adapters.lora_rank': 4097 }, /invalid lora rank 4097/],
    ['a rank the tensors do not have', { 'graniteswitch.adapters.lora_rank': 8 }, /block 0's attn_q.lora_a \[256, 4, 5\] and lora_b \[4, 256, 5\] must be \[256, 8, 5\] and \[8, 256, 5\]/],
    ['no activation tokens', { 'graniteswitch.adapters.token_ids_activate': undefined }, /lacks metadata 'graniteswitch.adapters.token_ids_activate'/],
    ['activation tokens that are not an array', { 'graniteswitch.adapters.token_ids_activate': 426 }, /token_ids_activate' must be an array of token ids/],
    ['no adapter count', { 'graniteswitch.adapters.count': undefined }, /lacks metadata 'graniteswitch.adapters.count'/],
    ['no logit scale', { 'graniteswitch.logit_scale': undefined }, /logit_scale/],
  ])('refuses %s, naming it', (_what, extra, want) => {
    expect(() => programOf(editedKv(gs.kv, extra), gs.tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(want) }));
  });

  it('refuses a block without its switched LoRA, naming the tensor', () => {
    const tensors = new Map<string, GgufTensorInfo>(gs.tensors);
    tensors.delete('blk.2.ffn_down.lora_b');
    expect(() => programOf(gs.kv, tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining("lacks tensor 'blk.2.ffn_down.lora_b'") }));
  });
});
