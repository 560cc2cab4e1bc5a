// The programs of paddleocr, cogvlm and chameleon (DenseLayout members of llama-family.ts, the
// language models of vision-language architectures, text input only): M-RoPE as NeoX for text and
// attn_output.bias, cogvlm's fused q|k|v at base 10000 and its unread vision expert, chameleon's
// per-head q/k LayerNorms, swin norms and suppressed image-token logits; and the files the builders
// refuse, naming the tensor or key; and Muse Glimmer (muse-glimmer.ts, afmoe's dense sibling). Numerics are checked against llama.cpp in
// tools/src/parity/parity-text-vl.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, ProgramOp } from '@kailstream/core-native';

import { editedKv, opsOf, programOfFile as programOf, reshaped, tempDir, testModelFile, without } from '../../testing';

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type File = ReturnType<typeof testModelFile>;
const files: Record<string, File> = {};
const PRESETS = ['tiny-paddleocr', 'tiny-cogvlm', 'tiny-chameleon', 'tiny-chameleon-swin', 'tiny-muse-glimmer', 'tiny-muse-glimmer-pattern'];
beforeAll(() => {
  for (const p of PRESETS) files[p] = testModelFile(dir, p);
}, 300_000);
const prog = (p: string) => programOf(files[p].kv, files[p].tensors);
const weightOf = (o: ProgramOp) => o.weights?.weight ?? '';

describe('programs', () => {
  it('paddleocr: NeoX RoPE over the whole head (M-RoPE on text), q/k/v and attn_output biases', () => {
    const p = prog('tiny-paddleocr');
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true && o.params!.n_dims === 64 && o.params!.freq_base === 5e5)).toBe(true);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.bias?.endsWith('attn_output.bias'))).toHaveLength(4);
    expect(opsOf(p, 'matmul').filter((o) => o.weights!.bias?.endsWith('attn_q.bias'))).toHaveLength(4);
  });

  it("cogvlm: one attn_qkv in thirds, NeoX RoPE at 10000 (the file says 5e5), the vision expert unread", () => {
    const p = prog('tiny-cogvlm');
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === true && o.params!.freq_base === 10000)).toBe(true);
    expect(opsOf(p, 'copy').filter((o) => o.a === opsOf(p, 'matmul')[0].out).map((o) => o.params!.a_off)).toEqual([0, 256, 512, 0, 256, 512, 0, 256, 512, 0, 256, 512]);
    const read = new Set(p.ops.flatMap((o) => Object.values(o.weights ?? {})));
    expect([...read].filter((n) => n.includes('.vis_'))).toEqual([]);
  });

  it('chameleon: per-head q/k LayerNorms (eps 1e-5, biases) before RoPE over pairs; the image logits clamped to -FLT_MAX', () => {
    const p = prog('tiny-chameleon');
    const hn = opsOf(p, 'head_rms_norm');
    expect(hn.slice(0, 2).map((o) => [o.weights, o.params])).toEqual([
      [{ weight: 'blk.0.attn_q_norm.weight', bias: 'blk.0.attn_q_norm.bias' }, { eps: 1e-5, head_dim: 64, n_head: 4, layer_norm: 1 }],
      [{ weight: 'blk.0.attn_k_norm.weight', bias: 'blk.0.attn_k_norm.bias' }, { eps: 1e-5, head_dim: 64, n_head: 2, layer_norm: 1 }],
    ]);
    expect(p.ops.indexOf(hn[1])).toBeLessThan(p.ops.findIndex((o) => o.op === 'rope'));
    expect(opsOf(p, 'rope').every((o) => o.params!.neox === false)).toBe(true);
    expect(opsOf(p, 'rms_norm').map(weightOf).filter((n) => n.startsWith('blk.0.'))).toEqual(['blk.0.attn_norm.weight', 'blk.0.ffn_norm.weight']);
    const last = p.ops.at(-1)!;
    expect([last.op, last.out, last.params]).toEqual(['clamp', p.logits, { a_off: 4, out_off: 4, n: 8192, min: -3.4028234663852886e38, max: -3.4028234663852886e38 }]);
  });

  it("chameleon with swin_norm: attn_norm / ffn_norm on the sub-layers' outputs, the FFN on the stream", () => {
    const p = prog('tiny-chameleon-swin');
    const qkv = opsOf(p, 'matmul').find((o) => weightOf(o) === 'blk.0.attn_q.weight')!;
    const attnOut = opsOf(p, 'matmul').find((o) => weightOf(o) === 'blk.0.attn_output.weight')!;
    const norms = opsOf(p, 'rms_norm').filter((o) => weightOf(o).startsWith('blk.0.'));
    expect(norms.map((o) => [weightOf(o), o.a === o.out])).toEqual([['blk.0.attn_norm.weight', true], ['blk.0.ffn_norm.weight', true]]);
    expect(norms[0].a).toBe(attnOut.out);
    // The projections read the stream itself; so does the FFN (a copy of it after the attention's add).
    const stream = opsOf(p, 'add')[0].out;
    expect(p.ops.find((o) => o.op === 'copy' && o.out === qkv.a)!.a).toBe(stream);
    const gate = opsOf(p, 'matmul').find((o) => weightOf(o) === 'blk.0.ffn_gate.weight')!;
    const feed = p.ops.find((o) => o.op === 'copy' && o.out === gate.a)!;
    expect(feed.a).toBe(stream);
    expect(opsOf(p, 'head_rms_norm')[0].weights).toEqual({ weight: 'blk.0.attn_q_norm.weight' });
  });

  it('muse-glimmer: unweighted embedding norm, RoPE on sliding blocks only at freq_base_swa, gated attention, post norms at 1e-8, scale and softcap', () => {
    const p = prog('tiny-muse-glimmer');
    expect([p.ops[1].op, p.ops[1].weights, p.ops[1].params]).toEqual(['head_rms_norm', undefined, { eps: Math.fround(1e-5), head_dim: 256, n_head: 1 }]);
    expect(opsOf(p, 'attention').map((o) => o.params!.window ?? 0)).toEqual([8, 8, 8, 0]);
    expect(opsOf(p, 'rope').map((o) => [o.params!.freq_base, o.params!.neox])).toEqual(Array(6).fill([5e4, false]));
    expect(opsOf(p, 'sigmoid_mul')).toHaveLength(4);
    expect(opsOf(p, 'rms_norm').filter((o) => weightOf(o).includes('.post_')).map((o) => o.params!.eps)).toEqual(Array(8).fill(1e-8));
    expect(p.ops.slice(-2).map((o) => [o.op, o.params])).toEqual([['scale', { scale: 0.5 }], ['softcap', { cap: 3 }]]);
    const q = prog('tiny-muse-glimmer-pattern');
    expect(opsOf(q, 'attention').map((o) => o.params!.window ?? 0)).toEqual([6, 0, 6, 0]);
    expect(opsOf(q, 'rope').map((o) => o.params!.freq_base)).toEqual(Array(4).fill(1e4));
    expect(q.ops.at(-1)!.params).toEqual({ cap: 30 });
  });
});

describe('refusals', () => {
  const refuses = (kv: Record<string, unknown>, tensors: Map<string, GgufTensorInfo>, msg: RegExp) => {
    expect(() => programOf(kv as File['kv'], tensors)).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(msg) }));
  };
  it('paddleocr needs its sections and RoPE over the whole head', () => {
    const f = files['tiny-paddleocr'];
    refuses(editedKv(f.kv, { 'paddleocr.rope.dimension_sections': undefined }), f.tensors, /paddleocr\.rope\.dimension_sections/);
    refuses(editedKv(f.kv, { 'paddleocr.rope.dimension_count': 32 }), f.tensors, /rope\.dimension_count 32 must equal the head dimension 64/);
    refuses(f.kv, without(f.tensors, 'blk.2.ffn_up.weight'), /blk\.2\.ffn_up\.weight/);
  });
  it('cogvlm needs its vision expert, attn_qkv, and KV heads = heads covering n_embd', () => {
    const f = files['tiny-cogvlm'];
    refuses(f.kv, without(f.tensors, 'blk.3.vis_gate.weight'), /blk\.3\.vis_gate\.weight/);
    refuses(f.kv, without(f.tensors, 'blk.1.attn_qkv.weight'), /blk\.1\.attn_qkv\.weight/);
    refuses(editedKv(f.kv, { 'cogvlm.attention.head_count_kv': 2 }), f.tensors, /head_count_kv 2 must equal head_count 4/);
  });
  it('chameleon needs its q/k norms, a row per head, and a vocabulary past the image tokens', () => {
    const f = files['tiny-chameleon'];
    refuses(f.kv, without(f.tensors, 'blk.0.attn_k_norm.weight'), /blk\.0\.attn_k_norm\.weight/);
    refuses(f.kv, reshaped(f.tensors, 'blk.1.attn_q_norm.weight', [64, 2]), /attn_q_norm\.weight is \[64, 2\]; chameleon takes one row of 64 per head \(4\)/);
    refuses(f.kv, reshaped(f.tensors, 'blk.1.attn_q_norm.bias', [64]), /attn_q_norm\.bias is \[64\]/);
    refuses(f.kv, reshaped(f.tensors, 'output.weight', [256, 8000]), /vocabulary of 8000 does not pass the image tokens 4\.\.8195/);
  });
  it('muse-glimmer needs its window, logit_scale, output.weight, attn_gate and post norms', () => {
    const f = files['tiny-muse-glimmer'];
    refuses(editedKv(f.kv, { 'muse-glimmer.attention.sliding_window': undefined }), f.tensors, /muse-glimmer\.attention\.sliding_window/);
    refuses(editedKv(f.kv, { 'muse-glimmer.logit_scale': undefined }), f.tensors, /muse-glimmer\.logit_scale/);
    refuses(editedKv(f.kv, { 'muse-glimmer.final_logit_softcapping': -1 }), f.tensors, /final_logit_softcapping -1/);
    refuses(f.kv, without(f.tensors, 'output.weight'), /'output\.weight'/);
    refuses(f.kv, without(f.tensors, 'blk.2.attn_gate.weight'), /blk\.2\.attn_gate\.weight/);
    refuses(f.kv, without(f.tensors, 'blk.1.post_ffw_norm.weight'), /blk\.1\.post_ffw_norm\.weight/);
  });
});
