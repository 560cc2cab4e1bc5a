// The GPT-2-style decoders buildLlamaFamily runs with a DenseLayout (gpt2, starcoder, codeshell,
// qwen): learned absolute positions and the context they bound, the fused attn_qkv with its bias,
// LayerNorm / GELU blocks with every bias, CodeShell's embedding from output.weight, Qwen's doubled
// feed_forward_length; and the files the builder refuses, naming the tensor or key. Numerics are
// checked against llama.cpp in tools/src/parity/parity-gpt2.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const biasesOf = (p: ModelProgram, il: number) => opsOf(p, 'matmul').filter((o) => o.weights!.bias?.startsWith(`blk.${il}.`)).map((o) => o.weights!.bias!.slice(`blk.${il}.`.length));
type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-gpt2', 'tiny-starcoder', 'tiny-codeshell', 'tiny-codeshell-split', 'tiny-qwen'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 120_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);

describe('GPT-2-style programs', () => {
  it("gpt2 and starcoder: position_embd's row added to the embedding, no RoPE, LayerNorms, one attn_qkv with its bias, GELU, every bias", () => {
    for (const preset of ['tiny-gpt2', 'tiny-starcoder']) {
      const p = prog(preset);
      const emb = opsOf(p, 'embed');
      expect(emb.map((o) => [o.weights!.weight, o.params?.index ?? 0, o.params?.accumulate ?? false])).toEqual([['token_embd.weight', 0, false], ['position_embd.weight', 1, true]]);
      expect([opsOf(p, 'rope').length, opsOf(p, 'rms_norm').length, opsOf(p, 'layer_norm').length, opsOf(p, 'gelu').length, opsOf(p, 'swiglu').length]).toEqual([0, 0, 2 * 4 + 1, 4, 0]);
      expect(biasesOf(p, 2)).toEqual(['attn_qkv.bias', 'attn_output.bias', 'ffn_up.bias', 'ffn_down.bias']);
    }
    // GPT-2 ties its head to token_embd; StarCoder's file has output.weight and one KV head.
    expect(opsOf(prog('tiny-gpt2'), 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
    const s = prog('tiny-starcoder');
    expect(opsOf(s, 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    expect(opsOf(s, 'attention').every((o) => o.params!.n_head === 4 && o.params!.n_head_kv === 1)).toBe(true);
    expect(opsOf(s, 'copy').filter((o) => o.params?.n !== undefined).map((o) => [o.params!.a_off, o.params!.n]).slice(0, 3)).toEqual([[0, 256], [256, 64], [320, 64]]);
  });

  it('codeshell: NeoX RoPE over the whole head instead of positions; fused or split q/k/v; output.weight embeds when token_embd is absent', () => {
    const c = prog('tiny-codeshell');
    expect(opsOf(c, 'embed').map((o) => o.weights!.weight)).toEqual(['token_embd.weight']);
    expect(opsOf(c, 'rope').every((o) => o.params!.neox === true && o.params!.n_dims === 64)).toBe(true);
    expect(opsOf(c, 'rope')).toHaveLength(2 * 4);
    expect(biasesOf(c, 0)).toEqual(['attn_qkv.bias', 'attn_output.bias', 'ffn_up.bias', 'ffn_down.bias']);
    const s = prog('tiny-codeshell-split');
    expect(opsOf(s, 'embed').map((o) => o.weights!.weight)).toEqual(['output.weight']);
    expect(biasesOf(s, 1)).toEqual(['attn_q.bias', 'attn_k.bias', 'attn_v.bias', 'attn_output.bias', 'ffn_up.bias', 'ffn_down.bias']);
  });

  it("qwen: Llama's block with one attn_qkv and its bias, NeoX RoPE, no attn_output bias; the FFN half of feed_forward_length", () => {
    const f = files['tiny-qwen'];
    expect(f.kv['qwen.feed_forward_length']).toBe(1024);
    const p = prog('tiny-qwen');
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true)).toBe(true);
    expect([opsOf(p, 'layer_norm').length, opsOf(p, 'rms_norm').length, opsOf(p, 'swiglu').length]).toEqual([0, 2 * 4 + 1, 4]);
    expect(biasesOf(p, 3)).toEqual(['attn_qkv.bias']);
    expect(opsOf(p, 'swiglu').every((o) => p.buffers[o.out].width === 512)).toBe(true);
  });
});

describe('GPT-2-style refusals', () => {
  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(files[p].tensors);
    edit(t);
    const kv = { ...files[p].kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a gpt2 file without position_embd', 'tiny-gpt2', (t) => t.delete('position_embd.weight'), undefined, /'position_embd\.weight'/],
    ['a gpt2 file without attn_qkv.bias', 'tiny-gpt2', (t) => t.delete('blk.1.attn_qkv.bias'), undefined, /blk\.1\.attn_qkv\.bias/],
    ['a gpt2 file without output_norm.bias', 'tiny-gpt2', (t) => t.delete('output_norm.bias'), undefined, /'output_norm\.bias'/],
    ['a gpt2 file without attention.layer_norm_epsilon', 'tiny-gpt2', () => {}, (kv) => delete kv['gpt2.attention.layer_norm_epsilon'], /lacks metadata 'gpt2\.attention\.layer_norm_epsilon'/],
    ['a starcoder file without attn_qkv (split q/k/v are not its loader’s)', 'tiny-starcoder', (t) => t.delete('blk.0.attn_qkv.weight'), undefined, /blk\.0\.attn_qkv\.weight/],
    ['a starcoder file without ffn_down.bias', 'tiny-starcoder', (t) => t.delete('blk.3.ffn_down.bias'), undefined, /blk\.3\.ffn_down\.bias/],
    ['a codeshell file without output.weight', 'tiny-codeshell', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
    ['a codeshell file rotating part of the head', 'tiny-codeshell', () => {}, (kv) => (kv['codeshell.rope.dimension_count'] = 32), /codeshell: rope\.dimension_count 32 must equal the head dimension 64/],
    ['a qwen file whose feed_forward_length is the FFN width', 'tiny-qwen', () => {}, (kv) => (kv['qwen.feed_forward_length'] = 512), /qwen: layer 0: feed_forward_length 512 is not twice ffn_up's 512 outputs/],
    ['a qwen file without attn_qkv.bias', 'tiny-qwen', (t) => t.delete('blk.2.attn_qkv.bias'), undefined, /blk\.2\.attn_qkv\.bias/],
    ['a qwen file without output.weight', 'tiny-qwen', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it('EngineModel.load of a gpt2 file with position_embd renamed away fails with KAIL_E_BAD_MODEL', () => {
    const bad = patchedCopy(writeTestModel(dir, 'tiny-gpt2'), `${dir}/gpt2-renamed.gguf`, 'position_embd.weight', 'position_embX.weight');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/'position_embd\.weight'/) }));
  });
});

describe('learned positions bound the context', () => {
  it('a context past position_embd’s 256 rows is refused; 256 (the default: context_length) loads and runs to its last position', async () => {
    const f = writeTestModel(dir, 'tiny-gpt2');
    expect(() => EngineModel.load(f, { threads: 1, nCtx: 257 })).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/a context of 257 is longer than the model's 256 learned positions/) }));
    const m = EngineModel.load(f, { threads: 1 });
    try {
      expect(m.nCtx).toBe(256);
      const tokens = Array.from({ length: 256 }, (_, i) => (i * 37) % 1024);
      const logits = await m.evaluate(0, tokens, 'last');
      expect(logits.every(Number.isFinite)).toBe(true);
      // One more token is a full context, never a read past the table.
      await expect(m.evaluate(0, [1], 'last')).rejects.toMatchObject({ code: 'KAIL_E_CONTEXT_OVERFLOW' });
    } finally {
      m.close();
    }
  });

  it('a batch cannot place a token past the table: positions follow the sequence (and the native embedding refuses a row past it too)', async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-gpt2'), { threads: 1, nCtx: 64 });
    try {
      const batch = (pos: number) => m.forwardBatch({ tokens: Int32Array.from([5]), pos: Int32Array.from([pos]), seq: Int32Array.from([0]), output: Uint8Array.from([1]) });
      await expect(batch(256)).rejects.toMatchObject({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/position 256 of sequence 0 is not the next one \(0\)/) });
    } finally {
      m.close();
    }
  });

  it("a context shift moves the rows down (keys keep their positions' rows, as llama.cpp's shift without RoPE), and later tokens stay within the table", async () => {
    const m = EngineModel.load(writeTestModel(dir, 'tiny-starcoder'), { threads: 1, nCtx: 16 });
    try {
      await m.evaluate(0, Array.from({ length: 16 }, (_, i) => i + 5), 'last');
      expect(m.shiftContext(0, 2, 6)).toBe(10);
      const logits = await m.evaluate(0, [7, 8, 9, 10, 11, 12], 'all');
      expect(logits.length).toBe(6 * 1024);
      expect(logits.every(Number.isFinite)).toBe(true);
    } finally {
      m.close();
    }
  });
});
