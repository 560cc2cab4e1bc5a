// The embedding encoders added beside bert / nomic-bert: jina-bert-v2 (ALiBi, q/k LayerNorms,
// GEGLU or GELU-gated FFNs), modern-bert (symmetric windows on 2 of every 3 blocks at their own
// RoPE base), gemma-embedding (Gemma 3's block, symmetric windows, dense_2 / dense_3), eurobert,
// neo-bert and llama-embed (Llama's block without a head): their programs, the files they refuse,
// and as encoders (non-causal, whole sequences, several per pass). Parity with llama.cpp is
// tools/src/parity/parity-encoders2.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { BatchEngine, type GenerationRequest } from '../../runtime/batch-engine';
import { EngineModel } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-jina-bert-v2', 'tiny-jina-bert-v2-gated', 'tiny-modern-bert', 'tiny-modern-bert-swiglu', 'tiny-gemma-embedding', 'tiny-eurobert', 'tiny-neo-bert', 'tiny-llama-embed', 'tiny-llama-embed-causal'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);
const att = (p: ModelProgram) => opsOf(p, 'attention').map((o) => o.params!);

describe('encoder programs', () => {
  it('jina-bert-v2: ALiBi 8 both ways, no RoPE or positions, q/k LayerNorms, GEGLU over the fused up; -gated: GELU(gate) x up, attn_norm_2', () => {
    const p = prog('tiny-jina-bert-v2');
    expect(att(p).map((a) => [a.alibi, a.causal])).toEqual([[8, false], [8, false]]);
    expect([opsOf(p, 'rope').length, opsOf(p, 'embed').map((o) => o.params?.index ?? 0)]).toEqual([0, [0, 2]]);
    expect(opsOf(p, 'layer_norm').map((o) => o.weights!.weight.replace(/^blk\.\d+\./, '')).slice(0, 5)).toEqual(['token_embd_norm.weight', 'attn_q_norm.weight', 'attn_k_norm.weight', 'attn_output_norm.weight', 'layer_output_norm.weight']);
    expect(opsOf(p, 'mul').map((o) => o.params?.b_off ?? 0)).toEqual([0, 0]);
    const g = prog('tiny-jina-bert-v2-gated');
    expect(opsOf(g, 'layer_norm').filter((o) => o.weights!.weight.endsWith('attn_norm_2.weight'))).toHaveLength(2);
    expect(g.ops.find((o) => o.op === 'matmul' && o.weights!.weight === 'blk.0.ffn_gate.weight')).toBeDefined();
  });

  it('modern-bert: symmetric windows on blocks 1, 2, 4, 5 at rope.freq_base_swa, full blocks at the file base, no attn_norm on block 0, GEGLU; -swiglu: pattern 2, SwiGLU', () => {
    const p = prog('tiny-modern-bert');
    expect(att(p).map((a) => a.sym_window ?? 0)).toEqual([0, 8, 8, 0, 8, 8]);
    expect(att(p).every((a) => a.causal === false && a.window === undefined)).toBe(true);
    expect(opsOf(p, 'rope').filter((_, i) => i % 2 === 0).map((o) => [o.params!.freq_base, o.params!.neox])).toEqual([[160000, true], [10000, true], [10000, true], [160000, true], [10000, true], [10000, true]]);
    expect(opsOf(p, 'layer_norm').map((o) => o.weights!.weight).slice(0, 3)).toEqual(['token_embd_norm.weight', 'blk.0.ffn_norm.weight', 'blk.1.attn_norm.weight']);
    expect([opsOf(p, 'gelu').length, opsOf(p, 'swiglu').length]).toEqual([6, 0]);
    const s = prog('tiny-modern-bert-swiglu');
    expect(att(s).map((a) => a.sym_window ?? 0)).toEqual([0, 6, 0, 6, 0, 6]);
    expect(opsOf(s, 'rope')[2].params!.freq_base).toBe(10000);
    expect([opsOf(s, 'gelu').length, opsOf(s, 'swiglu').length]).toEqual([0, 6]);
  });

  it('gemma-embedding: symmetric windows of 8 on blocks 0-4, non-causal, queries times 1/sqrt(head), dense_2 then dense_3 after output_norm', () => {
    const p = prog('tiny-gemma-embedding');
    expect(att(p).map((a) => [a.sym_window ?? 0, a.causal, a.scale])).toEqual([...Array(5).fill([8, false, 1]), [0, false, 1]]);
    expect(opsOf(p, 'matmul').slice(-2).map((o) => o.weights!.weight)).toEqual(['dense_2.weight', 'dense_3.weight']);
  });

  it('eurobert, neo-bert, llama-embed: no head (the last op gathers the normed rows); neo-bert reads enc.output_norm, llama-embed attends causally only with attention.causal true', () => {
    for (const n of ['tiny-eurobert', 'tiny-neo-bert', 'tiny-llama-embed']) {
      const p = prog(n);
      expect(p.ops.at(-1)!.op).toBe('gather_out');
      expect(opsOf(p, 'matmul').some((o) => o.weights!.weight === 'token_embd.weight')).toBe(false);
      expect(att(p).every((a) => a.causal === false)).toBe(true);
    }
    expect(opsOf(prog('tiny-neo-bert'), 'rms_norm').at(-1)!.weights!.weight).toBe('enc.output_norm.weight');
    expect(opsOf(prog('tiny-neo-bert'), 'rope')[0].params!.neox).toBe(false);
    expect(opsOf(prog('tiny-eurobert'), 'rope')[0].params!.neox).toBe(true);
    expect(att(prog('tiny-llama-embed-causal')).every((a) => a.causal === undefined)).toBe(true);
  });

  const edited = (p: string, edit: (t: Map<string, GgufTensorInfo>) => void, kvEdit: (kv: Record<string, unknown>) => void = () => {}) => {
    const t = new Map(files[p].tensors);
    edit(t);
    const kv = { ...files[p].kv };
    kvEdit(kv);
    return () => programOf(kv as File['kv'], t);
  };
  const copyAs = (t: Map<string, GgufTensorInfo>, from: string, to: string) => t.set(to, { ...t.get(from)!, name: to });
  it.each<[string, string, (t: Map<string, GgufTensorInfo>) => void, ((kv: Record<string, unknown>) => void) | undefined, RegExp]>([
    ['a jina-bert-v2 file without ffn_down.bias', 'tiny-jina-bert-v2', (t) => t.delete('blk.1.ffn_down.bias'), undefined, /blk\.1\.ffn_down\.bias/],
    ['a jina-bert-v2 file without attn_output.bias', 'tiny-jina-bert-v2', (t) => t.delete('blk.0.attn_output.bias'), undefined, /blk\.0\.attn_output\.bias/],
    ['a jina-bert-v2 ffn_up neither the FFN nor twice it', 'tiny-jina-bert-v2', (t) => t.set('blk.1.ffn_up.weight', { ...t.get('blk.1.ffn_up.weight')!, dims: [256, 768] }), undefined, /layer 1: ffn_up gives 768 values for ffn_down's 512 inputs/],
    ['a modern-bert file without attn_norm on block 1', 'tiny-modern-bert', (t) => t.delete('blk.1.attn_norm.weight'), undefined, /blk\.1\.attn_norm\.weight/],
    ['a modern-bert file with hidden_activation relu', 'tiny-modern-bert', () => {}, (kv) => (kv['modern-bert.hidden_activation'] = 'relu'), /hidden_activation 'relu' is not supported/],
    ['a modern-bert file with a classifier head', 'tiny-modern-bert', (t) => copyAs(t, 'blk.0.attn_output.weight', 'cls.weight'), undefined, /classifier head .* is not supported/],
    ['a modern-bert file with a negative rope.freq_base_swa', 'tiny-modern-bert', () => {}, (kv) => (kv['modern-bert.rope.freq_base_swa'] = -1), /rope\.freq_base_swa -1 is not positive/],
    ['a gemma-embedding file without attention.sliding_window', 'tiny-gemma-embedding', () => {}, (kv) => delete kv['gemma-embedding.attention.sliding_window'], /lacks metadata 'gemma-embedding\.attention\.sliding_window'/],
    ['a gemma-embedding file with dense_2 alone', 'tiny-gemma-embedding', (t) => t.delete('dense_3.weight'), undefined, /need both dense_2\.weight and dense_3\.weight/],
    ['a gemma-embedding file whose dense_3 does not map back to n_embd', 'tiny-gemma-embedding', (t) => t.set('dense_3.weight', { ...t.get('dense_3.weight')!, dims: [512, 128] }), undefined, /dense_2 \[256, 512\] and dense_3 \[512, 128\] must map n_embd 256/],
    ['a neo-bert file without its fused attn_qkv', 'tiny-neo-bert', (t) => t.delete('blk.0.attn_qkv.weight'), undefined, /blk\.0\.attn_qkv\.weight/],
    ['a neo-bert file without enc.output_norm', 'tiny-neo-bert', (t) => t.delete('enc.output_norm.weight'), undefined, /'enc\.output_norm\.weight'/],
    ['a neo-bert file with a classifier head', 'tiny-neo-bert', (t) => copyAs(t, 'blk.0.attn_output.weight', 'cls.weight'), undefined, /classifier head .* is not supported/],
    ['a eurobert file without ffn_gate', 'tiny-eurobert', (t) => t.delete('blk.1.ffn_gate.weight'), undefined, /blk\.1\.ffn_gate\.weight/],
    ['a llama-embed file without output_norm', 'tiny-llama-embed', (t) => t.delete('output_norm.weight'), undefined, /'output_norm\.weight'/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it('EngineModel.load of a modern-bert file with ffn_up renamed away fails with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const file = writeTestModel(dir, 'tiny-modern-bert');
    const bad = patchedCopy(file, `${dir}/modern-bert-renamed.gguf`, 'blk.2.ffn_up.weight', 'blk.2.ffn_up.weighX');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/blk\.2\.ffn_up\.weight/) }));
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
  });
});

async function embed(engine: BatchEngine, req: Omit<GenerationRequest, 'maxTokens'>): Promise<Float32Array> {
  let out: Float32Array | undefined;
  for await (const c of engine.generate({ maxTokens: 0, ...req })) if (c.embedding) out = c.embedding;
  if (!out) throw new Error('no embedding');
  return out;
}

// As encoders: the first row sees a later token (not llama-embed-causal), and sequences in one
// pass embed exactly as alone (the symmetric windows, ALiBi and T5's relative positions per sequence).
describe.each(['tiny-jina-bert-v2', 'tiny-modern-bert', 'tiny-gemma-embedding', 'tiny-neo-bert', 'tiny-llama-embed', 'tiny-llama-embed-causal', 'tiny-jina-bert-v3', 'tiny-t5encoder'])('%s as an encoder', (preset) => {
  let model: EngineModel;
  let engine: BatchEngine;
  beforeAll(() => {
    model = EngineModel.load(writeTestModel(dir, preset, 'F32'), { nSeqMax: 3, threads: 2, nCtx: 128 });
    engine = new BatchEngine(model);
  }, 60_000);
  afterAll(async () => {
    await engine.close();
    model.close();
  });

  it('the first row sees a later token exactly when attention is non-causal; sequences in one pass embed as alone', async () => {
    expect(model.encoder).toBe(true);
    const texts = ['experts stream from storage', 'the router picks the top experts for each token, and the cache keeps the hot ones', 'a'];
    const a = model.tokenizer.tokenize(texts[0], { addSpecial: true });
    const b = [...a];
    b[b.length - 1] = (b[b.length - 1] + 7) % model.nVocab;
    const diff = (x: Float32Array, y: Float32Array) => x.reduce((m, v, i) => Math.max(m, Math.abs(v - y[i])), 0);
    const d = diff(await embed(engine, { id: 'c-a', prompt: a, embed: 'cls' }), await embed(engine, { id: 'c-b', prompt: b, embed: 'cls' }));
    if (preset === 'tiny-llama-embed-causal') expect(d).toBe(0);
    else expect(d).toBeGreaterThan(1e-4);
    const reqs = texts.map((t, i) => ({ id: `e${i}`, prompt: model.tokenizer.tokenize(t, { addSpecial: true }), embed: 'mean' as const }));
    const alone: Float32Array[] = [];
    for (const r of reqs) alone.push(await embed(engine, r));
    const together = await Promise.all(reqs.map((r) => embed(engine, { ...r, id: `${r.id}-b` })));
    together.forEach((v, i) => expect(diff(v, alone[i])).toBeLessThan(1e-5));
  });
});
