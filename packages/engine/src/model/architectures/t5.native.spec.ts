// jina-bert-v3 (BERT's post-norm block with NeoX RoPE, one attn_qkv, GELU FFNs) and T5's encoder
// (t5encoder: RMS norms, unscaled attention with the relative position bias shared from block 0 or
// per block, gated GELU or ReLU FFNs): their programs and the files they refuse (as encoders:
// encoders2.native.spec.ts). Parity with llama.cpp is
// tools/src/parity/parity-t5encoder.native.spec.ts; the bias itself core-native's test-rel-bias.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { generate } from '../../generate';
import { native } from '../../native';
import { BatchEngine } from '../../runtime/batch-engine';
import { EngineModel, kvCacheReport, planModel, summarize } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-jina-bert-v3', 'tiny-t5encoder', 'tiny-t5encoder-relu', 'tiny-t5', 'tiny-t5-relu'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);
const att = (p: ModelProgram) => opsOf(p, 'attention');

describe('jina-bert-v3 and t5encoder programs', () => {
  it('jina-bert-v3: NeoX RoPE at the file base on q and k, non-causal, no ALiBi, token types, GELU FFN, no head', () => {
    const p = prog('tiny-jina-bert-v3');
    expect(att(p).map((o) => [o.params!.causal, o.params!.alibi, o.params!.scale])).toEqual([[false, undefined, 1 / Math.sqrt(64)], [false, undefined, 1 / Math.sqrt(64)]]);
    expect(opsOf(p, 'rope').map((o) => [o.params!.neox, o.params!.freq_base])).toEqual(Array(4).fill([true, 20000]));
    expect(opsOf(p, 'embed').map((o) => o.params?.index ?? 0)).toEqual([0, 2]);
    expect([opsOf(p, 'gelu').length, opsOf(p, 'swiglu').length]).toEqual([2, 0]);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.weight.endsWith('attn_qkv.weight')).map((o) => o.weights!.bias)).toEqual(['blk.0.attn_qkv.bias', 'blk.1.attn_qkv.bias']);
    expect(p.ops.at(-1)!.op).toBe('gather_out');
  });

  it("t5encoder: scale 1, both ways, block 0's bias table in every block (or each block's own), d_kv heads, gated GELU or ReLU, enc.output_norm, no head", () => {
    const p = prog('tiny-t5encoder');
    expect(att(p).map((o) => [o.params!.scale, o.params!.causal, o.params!.rel_bidir, o.params!.head_dim, o.weights!.rel_b])).toEqual(Array(3).fill([1, false, true, 48, 'enc.blk.0.attn_rel_b.weight']));
    expect([opsOf(p, 'rope').length, opsOf(p, 'gelu').length, opsOf(p, 'mul').length, opsOf(p, 'clamp').length]).toEqual([0, 3, 3, 0]);
    expect(opsOf(p, 'rms_norm').at(-1)!.weights!.weight).toBe('enc.output_norm.weight');
    expect(opsOf(p, 'matmul').some((o) => o.weights!.weight === 'token_embd.weight')).toBe(false);
    expect(opsOf(p, 'cvec').map((o) => o.params!.layer)).toEqual([0, 1, 2]);
    const r = prog('tiny-t5encoder-relu');
    expect(att(r).map((o) => o.weights!.rel_b)).toEqual([0, 1, 2].map((i) => `enc.blk.${i}.attn_rel_b.weight`));
    expect([opsOf(r, 'gelu').length, opsOf(r, 'clamp').map((o) => o.params!.min)]).toEqual([0, [0, 0, 0]]);
  });

  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(files[p].tensors);
    edit(t);
    const kv = { ...files[p].kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a jina-bert-v3 file without attn_qkv (or q/k/v)', 'tiny-jina-bert-v3', (t) => t.delete('blk.1.attn_qkv.weight'), undefined, /blk\.1\.attn_q\.weight/],
    ['a jina-bert-v3 file without layer_output_norm.bias', 'tiny-jina-bert-v3', (t) => t.delete('blk.0.layer_output_norm.bias'), undefined, /blk\.0\.layer_output_norm\.bias/],
    ['a t5encoder file without block 0\'s relative bias', 'tiny-t5encoder', (t) => t.delete('enc.blk.0.attn_rel_b.weight'), undefined, /layer 0: no relative position bias \(enc\.blk\.0\.attn_rel_b\.weight, nor block 0's to share\)/],
    ['a t5encoder bias table of the wrong bucket count', 'tiny-t5encoder', () => {}, (kv) => (kv['t5encoder.attention.relative_buckets_count'] = 16), /'enc\.blk\.0\.attn_rel_b\.weight' \[4, 32\] is not \[4 heads, 16 buckets\]/],
    ['a t5encoder file without relative_buckets_count', 'tiny-t5encoder', () => {}, (kv) => delete kv['t5encoder.attention.relative_buckets_count'], /relative_buckets_count/],
    ['a t5encoder file without layer_norm_rms_epsilon', 'tiny-t5encoder', () => {}, (kv) => delete kv['t5encoder.attention.layer_norm_rms_epsilon'], /attention\.layer_norm_rms_epsilon/],
    ['a t5encoder file with grouped kv heads', 'tiny-t5encoder', () => {}, (kv) => (kv['t5encoder.attention.head_count_kv'] = 2), /head_count 4 differs from head_count_kv 2/],
    ['a t5encoder file without enc.output_norm', 'tiny-t5encoder', (t) => t.delete('enc.output_norm.weight'), undefined, /'enc\.output_norm\.weight'/],
    ['a t5encoder file without ffn_up', 'tiny-t5encoder-relu', (t) => t.delete('enc.blk.2.ffn_up.weight'), undefined, /enc\.blk\.2\.ffn_up\.weight/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it("jina-bert-v3 takes a task adapter's token_types pair (a projection's layout, left unused as llama.cpp does) and refuses one of another width", () => {
    const file = writeTestModel(dir, 'tiny-jina-bert-v3');
    const good = writeTestModel(dir, 'tiny-jina-bert-v3', 'F32', 1, ['--lora-rank', '4', '--lora-targets', 'attn_qkv,token_types.weight']);
    EngineModel.load(file, { threads: 1, nCtx: 32, lora: [{ path: good }] }).close();
    const other = writeTestModel(dir, 'tiny-jina-bert-v3', 'F32', 1, ['--dim', '128', '--lora-rank', '4', '--lora-targets', 'token_types.weight']);
    expect(() => EngineModel.load(file, { threads: 1, nCtx: 32, lora: [{ path: other }] })).toThrow(
      expect.objectContaining({ code: 'KAIL_E_INVALID_ARG', message: expect.stringMatching(/tensor 'token_types\.weight': lora_a \[128, 4\] \/ lora_b \[4, 2\] do not fit \[256, 2\]/) }),
    );
  });

  it('EngineModel.load of a t5encoder file whose only bias table is renamed away fails with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const file = writeTestModel(dir, 'tiny-t5encoder');
    const bad = patchedCopy(file, `${dir}/t5-renamed.gguf`, 'enc.blk.0.attn_rel_b.weight', 'enc.blk.0.attn_rel_X.weight');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/no relative position bias/) }));
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
  });
});

describe('t5 program (encoder and decoder in two passes)', () => {
  const pass = (p: ModelProgram, n: number) => p.ops.filter((o) => o.params?.pass === n);
  it("encoder ops in pass 1 ending in each decoder block's cross k/v (store only); the decoder in pass 2: one-way bias, cross readers, the head", () => {
    const p = prog('tiny-t5');
    expect(p.ops.every((o) => o.params?.pass === 1 || o.params?.pass === 2)).toBe(true);
    expect(att({ ...p, ops: pass(p, 1) }).map((o) => [!!o.params!.store_only, o.params!.causal, o.params!.rel_bidir])).toEqual([
      [false, false, true], [false, false, true], [false, false, true], [true, undefined, undefined], [true, undefined, undefined],
    ]);
    expect(opsOf({ ...p, ops: pass(p, 1) }, 'matmul').slice(-4).map((o) => o.weights!.weight)).toEqual(['dec.blk.0.cross_attn_k.weight', 'dec.blk.0.cross_attn_v.weight', 'dec.blk.1.cross_attn_k.weight', 'dec.blk.1.cross_attn_v.weight']);
    const dec = att({ ...p, ops: pass(p, 2) });
    expect(dec.map((o) => [o.params!.cross ?? 0, o.params!.rel_bidir, o.weights?.rel_b, o.params!.scale])).toEqual([
      [0, false, 'dec.blk.0.attn_rel_b.weight', 1], [1, undefined, undefined, 1], [0, false, 'dec.blk.0.attn_rel_b.weight', 1], [1, undefined, undefined, 1],
    ]);
    // Each cross reader reads the layer its block's store-only op writes.
    expect(dec.filter((o) => o.params!.cross).map((o) => o.params!.layer)).toEqual(att(p).filter((o) => o.params!.store_only).map((o) => o.params!.layer));
    expect([p.ops.at(-1)!.weights!.weight, prog('tiny-t5-relu').ops.at(-1)!.weights!.weight]).toEqual(['output.weight', 'token_embd.weight']);
  });

  const editedT5 = (edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(files['tiny-t5'].tensors);
    edit(t);
    const kv = { ...files['tiny-t5'].kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  it.each<[string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a file without a cross-attention key projection', (t) => t.delete('dec.blk.1.cross_attn_k.weight'), undefined, /dec\.blk\.1\.cross_attn_k\.weight/],
    ['a file without dec.output_norm', (t) => t.delete('dec.output_norm.weight'), undefined, /dec\.output_norm\.weight/],
    ['a decoder without any relative bias', (t) => t.delete('dec.blk.0.attn_rel_b.weight'), undefined, /layer 0: no relative position bias \(dec\.blk\.0\.attn_rel_b\.weight/],
    ['more decoder than encoder blocks', () => {}, (kv) => (kv['t5.decoder_block_count'] = 4), /4 decoder blocks \(decoder_block_count\) but 3 encoder blocks/],
  ])('refuses %s, naming it', (_what, edit, kvEdit, want) => {
    expect(editedT5(edit, kvEdit)).toThrow(want);
  });

  it("the KV cache and its budget count each row once: the encoder's own rows for its pass, the prompt's cross rows, the decoder's rows from 0", async () => {
    const file = writeTestModel(dir, 'tiny-t5-relu');
    const nCtx = 64;
    const m = EngineModel.load(file, { threads: 1, nCtx, kvType: 'f32' });
    try {
      // Bytes per position of the encoder's self-attention layers, the cross layers and the decoder's own.
      const row = [0, 0, 0];
      const seen = new Set<number>();
      for (const o of att(m.program)) {
        const l = o.params!.layer as number;
        if (seen.has(l)) continue;
        seen.add(l);
        row[o.params!.pass === 1 ? (o.params!.store_only ? 1 : 0) : o.params!.cross ? 1 : 2] += 4 * (m.program.kvKWidth[l] + m.program.kvVWidth[l]);
      }
      const [E, C, D] = row;
      expect([E > 0, C > 0, D > 0]).toEqual([true, true, true]);
      // The most one sequence holds: a whole context encoding, or one prompt row and the rest decoded.
      expect(native().kvCacheBytes(m.program, { nCtx, nSeqMax: 1, kvType: 0 })).toBe(Math.max(nCtx * (E + C), C + (nCtx - 1) * D));
      // The prompt encoded and the decoder's start token, then four decoder steps.
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 389 + 17) % 1024);
      await m.evaluate(0, prompt, 'last');
      for (const tok of [5, 6, 7, 8]) await m.evaluate(0, [tok], 'last');
      expect(m.runtime.seqLen(0)).toBe(45);
      // 40 cross rows and the decoder's first 16 (its cache's first growth), nothing of the encoder's own.
      expect(m.runtime.stats().kvBytes).toBe(40 * C + 16 * D);
    } finally {
      m.close();
    }
  });

  // The prompt and the generated tokens share the context as a decoder-only model's do: the decoder's
  // start token takes the row the last generated token (never fed back) leaves, so a prompt of P
  // tokens generates nCtx - P tokens and then ends on 'length' with the cache full (llama.cpp keeps
  // the encoder's output outside its cache: its decoder alone takes n_ctx, the prompt one ubatch).
  it('the context bound: prompt + generated tokens = nCtx fits exactly (generate() and a BatchEngine), a prompt of nCtx tokens is refused', async () => {
    const nCtx = 16;
    const m = EngineModel.load(writeTestModel(dir, 'tiny-t5-relu'), { threads: 1, nCtx, kvType: 'f32' });
    try {
      const noEog = Object.fromEntries(m.tokenizer.vocab.eogIds.map((t) => [t, -Infinity]));
      const prompt = (n: number) => Array.from({ length: n }, (_, i) => (i * 389 + 17) % 1024);
      for (const [p, max] of [[10, 6], [15, 1], [10, 7], [15, 2]]) {
        const g = await generate(m, prompt(p), { maxTokens: max, sampling: { temperature: 0, logitBias: noEog } });
        // Exactly fits: every token asked for; one more: nCtx - P and 'length' with the cache full.
        expect([p, max, g.tokens.length, g.finishReason]).toEqual([p, max, Math.min(max, nCtx - p), 'length']);
        expect(m.runtime.seqLen(0)).toBe(p + Math.min(max, nCtx - p));
      }
      await expect(generate(m, prompt(nCtx), { maxTokens: 1 })).rejects.toMatchObject({ code: 'KAIL_E_CONTEXT_OVERFLOW', message: 'the prompt has 16 tokens; the context holds 16' });
      const engine = new BatchEngine(m);
      try {
        for (const [p, max] of [[10, 6], [15, 1], [10, 7], [15, 2]]) {
          const out: number[] = [];
          let finish = '';
          for await (const c of engine.generate({ id: `ctx-${p}-${max}`, prompt: prompt(p), maxTokens: max, sampling: { temperature: 0 }, ignoreEog: true })) {
            out.push(...c.tokens);
            if (c.finish) finish = `${c.finish.reason} ${c.finish.promptTokens}+${c.finish.completionTokens}`;
          }
          expect([p, max, finish, out.length]).toEqual([p, max, `length ${p}+${Math.min(max, nCtx - p)}`, Math.min(max, nCtx - p)]);
        }
        expect(() => engine.generate({ id: 'full', prompt: prompt(nCtx), maxTokens: 1 })).toThrow(
          expect.objectContaining({ code: 'KAIL_E_CONTEXT_OVERFLOW', message: "the prompt has 16 tokens (and the decoder's start token after them); the context holds 16" }),
        );
        expect(() => engine.generate({ id: 'window', prompt: prompt(10), maxTokens: 1, contextWindow: 10 })).toThrow(
          expect.objectContaining({ code: 'KAIL_E_CONTEXT_OVERFLOW', message: "the prompt has 10 tokens (and the decoder's start token after them); the request's context window (num_ctx) holds 10" }),
        );
      } finally {
        await engine.close();
      }
    } finally {
      m.close();
    }
  }, 30_000);

  // kail inspect and kail plan: per generated token only the decoder runs and its own KV rows grow;
  // the encoder runs once per prompt, its rows held while it encodes, the cross rows kept.
  it("inspect's and plan's figures by role: the decoder's weights and KV rows per generated token, the encoder's and the cross rows per prompt token", () => {
    const path = writeTestModel(dir, 'tiny-t5');
    const f = native().openGguf(path, { mapData: false });
    try {
      const bytes = (pick: (name: string) => boolean) => f.tensors.filter((t) => pick(t.name)).reduce((a, t) => a + t.nbytes, 0);
      const crossKv = (n: string) => /^dec\.blk\.\d+\.cross_attn_[kv]\.weight$/.test(n);
      const perToken = bytes((n) => n === 'token_embd.weight' || n === 'output.weight' || (n.startsWith('dec.') && !crossKv(n)));
      const perPrompt = bytes((n) => n === 'token_embd.weight' || n.startsWith('enc.') || crossKv(n));
      const s = summarize(f);
      expect(perPrompt + perToken).toBe(s.residentBytes + bytes((n) => n === 'token_embd.weight'));
      expect(s.bytesPerToken).toBe(perToken);
      expect(s.encoderDecoder).toEqual({ encoderLayers: 3, decoderLayers: 2, promptWeightBytes: perPrompt, tokenWeightBytes: perToken });
      // A K and a V row of 4 heads x 48 per layer, F16 by default: 2 decoder layers per generated
      // token, 2 cross layers per prompt token, 3 encoder layers per prompt token while it encodes.
      const row = 2 * 4 * 48 * 2;
      const kv = kvCacheReport(f);
      expect(kv.bytesPerToken).toBe(2 * row);
      expect(kv.encoderDecoder).toEqual({ crossBytesPerPromptToken: 2 * row, encoderBytesPerPromptToken: 3 * row, encoderLayers: 3, crossLayers: 2, decoderLayers: 2 });
      expect(kvCacheReport(f, 'f32').bytesPerToken).toBe(2 * 2 * row);
      // The plan's KV bytes: per sequence the most it holds, a whole context encoding (or one prompt row and the rest decoded).
      const nCtx = 64;
      const p = planModel(path, { ramBytes: 1 << 30, nCtx, nSeqMax: 2 });
      expect(p.kvBytes).toBe(2 * Math.max(nCtx * (3 + 2) * row, 2 * row + (nCtx - 1) * 2 * row));
      expect(p.encoderDecoder).toEqual({ ...s.encoderDecoder, kvEncoderBytesPerToken: 3 * row, kvCrossBytesPerToken: 2 * row, kvDecoderBytesPerToken: 2 * row });
    } finally {
      f.close();
    }
    // Another model's summary has no split: every weight per token.
    const g = native().openGguf(writeTestModel(dir, 'tiny-t5encoder'), { mapData: false });
    try {
      const s = summarize(g);
      expect([s.bytesPerToken, s.encoderDecoder, kvCacheReport(g).encoderDecoder]).toEqual([s.residentBytes, undefined, undefined]);
    } finally {
      g.close();
    }
  });
});
