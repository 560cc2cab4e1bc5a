// The programs of jais, jais2 and bitnet (buildLlamaFamily with a DenseLayout): jais's ALiBi from
// attention.max_alibi_bias, 1/head scores, fused q/k/v and every bias; jais2's LayerNorms, NeoX RoPE
// and ReLU²; bitnet's sub-norms and per-tensor scales; and the files the builder refuses, naming
// the tensor or key. Numerics are checked against llama.cpp in
// tools/src/parity/parity-jais-bitnet.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { opsOf, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-jais', 'tiny-jais2', 'tiny-bitnet'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);
const mm = (p: ModelProgram, w: string) => p.ops.find((o) => o.op === 'matmul' && o.weights!.weight === w)!;

describe('jais, jais2 and bitnet layouts', () => {
  it('jais: LayerNorms, one attn_qkv with its bias, no RoPE, ALiBi from max_alibi_bias (absent: none), 1/head scores, SwiGLU with every bias, output.weight', () => {
    const p = prog('tiny-jais');
    const att = opsOf(p, 'attention');
    expect(att.map((o) => [o.params!.alibi, o.params!.scale])).toEqual(Array(4).fill([8, 1 / 64]));
    expect([opsOf(p, 'rope').length, opsOf(p, 'rms_norm').length, opsOf(p, 'layer_norm').length]).toEqual([0, 0, 9]);
    for (const w of ['attn_qkv', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down']) expect(mm(p, `blk.2.${w}.weight`).weights!.bias).toBe(`blk.2.${w}.bias`);
    expect(opsOf(p, 'swiglu')).toHaveLength(4);
    expect(opsOf(p, 'matmul').at(-1)!.weights!.weight).toBe('output.weight');
    const kv = { ...files['tiny-jais'].kv };
    delete kv['jais.attention.max_alibi_bias'];
    expect(opsOf(programOf(kv, files['tiny-jais'].tensors), 'attention').map((o) => o.params!.alibi ?? 0)).toEqual([0, 0, 0, 0]);
  });

  it('jais2: LayerNorms, q/k/v biases, NeoX RoPE, attn_output / ffn_up / ffn_down biases, ReLU², tied head', () => {
    const p = prog('tiny-jais2');
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true)).toBe(true);
    expect(opsOf(p, 'rope')).toHaveLength(8);
    expect(opsOf(p, 'attention').every((o) => o.params!.alibi === undefined && o.params!.scale === 1 / 8)).toBe(true);
    for (const w of ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_up', 'ffn_down']) expect(mm(p, `blk.0.${w}.weight`).weights!.bias).toBe(`blk.0.${w}.bias`);
    expect([opsOf(p, 'relu_sqr').length, opsOf(p, 'swiglu').length]).toEqual([4, 0]);
    expect(opsOf(p, 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
  });

  it('bitnet: attn_sub_norm before attn_output, ffn_sub_norm before ffn_down, every projection times its scale, head token_embd', () => {
    const p = prog('tiny-bitnet');
    const norms = opsOf(p, 'rms_norm').slice(0, 4).map((o) => o.weights!.weight);
    expect(norms).toEqual(['blk.0.attn_norm.weight', 'blk.0.attn_sub_norm.weight', 'blk.0.ffn_norm.weight', 'blk.0.ffn_sub_norm.weight']);
    expect(opsOf(p, 'mul').filter((o) => o.weights?.weight.startsWith('blk.1.')).map((o) => o.weights!.weight.replace('blk.1.', ''))).toEqual(
      ['attn_q.scale', 'attn_k.scale', 'attn_v.scale', 'attn_output.scale', 'ffn_gate.scale', 'ffn_up.scale', 'ffn_down.scale'],
    );
    const i = p.ops.indexOf(mm(p, 'blk.1.attn_output.weight'));
    expect([p.ops[i - 1].op, p.ops[i + 1].op]).toEqual(['rms_norm', 'mul']);
    expect(opsOf(p, 'matmul').at(-1)!.weights!.weight).toBe('token_embd.weight');
    // Without the (optional) scales: plain products.
    const t = new Map([...files['tiny-bitnet'].tensors].filter(([k]) => !k.endsWith('.scale')));
    expect(opsOf(programOf(files['tiny-bitnet'].kv, t), 'mul')).toHaveLength(0);
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
    ['a jais file without attn_qkv.bias', 'tiny-jais', (t) => t.delete('blk.2.attn_qkv.bias'), undefined, /blk\.2\.attn_qkv\.bias/],
    ['a jais file without ffn_gate.bias', 'tiny-jais', (t) => t.delete('blk.1.ffn_gate.bias'), undefined, /blk\.1\.ffn_gate\.bias/],
    ['a jais file without output.weight', 'tiny-jais', (t) => t.delete('output.weight'), undefined, /'output\.weight'/],
    ['a jais file with a negative max_alibi_bias', 'tiny-jais', () => {}, (kv) => (kv['jais.attention.max_alibi_bias'] = -8), /jais: ALiBi's maximum bias -8 is not a non-negative number/],
    ['a jais file without attention.layer_norm_epsilon', 'tiny-jais', () => {}, (kv) => delete kv['jais.attention.layer_norm_epsilon'], /lacks metadata 'jais\.attention\.layer_norm_epsilon'/],
    ['a jais2 file without ffn_up.bias', 'tiny-jais2', (t) => t.delete('blk.3.ffn_up.bias'), undefined, /blk\.3\.ffn_up\.bias/],
    ['a jais2 file without attn_output.bias', 'tiny-jais2', (t) => t.delete('blk.0.attn_output.bias'), undefined, /blk\.0\.attn_output\.bias/],
    ['a jais2 file rotating part of the head', 'tiny-jais2', () => {}, (kv) => (kv['jais2.rope.dimension_count'] = 32), /jais2: rope\.dimension_count 32 must equal the head dimension 64/],
    ['a bitnet file without attn_sub_norm', 'tiny-bitnet', (t) => t.delete('blk.2.attn_sub_norm.weight'), undefined, /blk\.2\.attn_sub_norm\.weight/],
    ['a bitnet file without ffn_sub_norm', 'tiny-bitnet', (t) => t.delete('blk.0.ffn_sub_norm.weight'), undefined, /blk\.0\.ffn_sub_norm\.weight/],
    ['a bitnet file with a two-value scale', 'tiny-bitnet', (t) => t.set('blk.1.ffn_up.scale', { ...t.get('blk.1.ffn_up.scale')!, dims: [2] }), undefined, /layer 1: ffn_up\.scale is \[2\], not one value/],
    ['a bitnet file with an output.weight', 'tiny-bitnet', (t) => copyAs(t, 'token_embd.weight', 'output.weight'), undefined, /bitnet: the head is token_embd/],
    ['a bitnet file with a fused attn_qkv', 'tiny-bitnet', (t) => copyAs(t, 'blk.0.attn_q.weight', 'blk.0.attn_qkv.weight'), undefined, /layer 0: bitnet takes split attn_q/],
  ])('refuses %s, naming it', (_what, p, edit, kvEdit, want) => {
    expect(edited(p, edit, kvEdit)).toThrow(want);
  });

  it('EngineModel.load of a bitnet file with ffn_sub_norm renamed away fails with KAIL_E_BAD_MODEL; the file itself loads', () => {
    const file = writeTestModel(dir, 'tiny-bitnet');
    const bad = patchedCopy(file, `${dir}/bitnet-renamed.gguf`, 'blk.1.ffn_sub_norm.weight', 'blk.1.ffn_sub_norm.weighX');
    expect(() => EngineModel.load(bad, { threads: 1, nCtx: 32 })).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(/ffn_sub_norm\.weight/) }));
    EngineModel.load(file, { threads: 1, nCtx: 32 }).close();
  });
});
