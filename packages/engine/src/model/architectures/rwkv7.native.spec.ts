// RWKV-7 (`rwkv7`), ARWKV-7 (`arwkv7`) and RWKV-6 (`rwkv6`): their programs as llama.cpp's graph builds it (src/models/rwkv7-base.cpp,
// rwkv7.cpp): no attention, per block two token shifts and a WKV-7 state of n_head x head_size^2,
// the fused lerp read in slices, block 0's v kept for the value residual mix of the others; and
// the files the builder or the loader refuses with the key or tensor at fault. Numerics against
// llama.cpp: tools/src/parity/parity-ssm.native.spec.ts; states: recurrent.native.spec.ts.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue } from '@kailstream/core-native';

import { EngineModel } from '../model';
import { editedKv, patchedCopy, programOfFile as programOf, tempDir, testModelFile, writeTestModel } from '../../testing';

const dir = tempDir('kail-rwkv7-');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const without = (m: Map<string, GgufTensorInfo>, ...names: string[]) => new Map([...m].filter(([k]) => !names.includes(k)));
const badModel = (re: RegExp) => expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringMatching(re) });
const edit = editedKv;

describe('rwkv7 program', () => {
  it('time mix and channel mix per block, no attention; the lerps read six slices of the fused weight', () => {
    const f = testModelFile(dir, 'tiny-rwkv7');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'attention' || o.op === 'rope')).toEqual([]);
    expect(p.kvKWidth).toEqual([]);
    expect(p.rsWidth).toEqual([0, 1, 2].flatMap(() => [256, 4 * 64 * 64, 256]));
    expect(p.ops.filter((o) => o.op === 'rwkv_wkv7').map((o) => [o.params!.n_head, o.params!.head_dim])).toEqual(Array(3).fill([4, 64]));
    const lerps = p.ops.filter((o) => o.op === 'mul' && o.params?.w_off !== undefined);
    expect(lerps.map((o) => o.params!.w_off)).toEqual([0, 1, 2].flatMap(() => [0, 1, 2, 3, 4, 5].map((i) => i * 256)));
    // Block 0 has no value residual mix (its v0/v1/v2 are the converter's dummies).
    expect(p.ops.filter((o) => o.op === 'matmul' && o.weights?.weight?.endsWith('time_mix_v2.weight')).map((o) => o.weights!.weight)).toEqual(['blk.1.time_mix_v2.weight', 'blk.2.time_mix_v2.weight']);
    expect(p.ops.filter((o) => o.op === 'sigmoid' && o.params?.decay !== undefined).map((o) => o.params!.decay)).toEqual(Array(3).fill(0.606531));
    // LN0, the six block LayerNorms and the output norm, each with its bias.
    expect(p.ops.filter((o) => o.op === 'layer_norm').map((o) => o.weights!.bias)).toEqual([
      'token_embd_norm.bias',
      ...[0, 1, 2].flatMap((i) => [`blk.${i}.attn_norm.bias`, `blk.${i}.attn_norm_2.bias`]),
      'output_norm.bias',
    ]);
  });

  it('refuses missing or malformed keys and tensors with what is wrong', () => {
    const f = testModelFile(dir, 'tiny-rwkv7');
    const bad = (extra: Record<string, GgufValue | undefined>, tensors: Map<string, GgufTensorInfo>, re: RegExp) => expect(() => programOf(edit(f.kv, extra), tensors)).toThrow(badModel(re));
    for (const k of ['wkv.head_size', 'attention.decay_lora_rank', 'attention.iclr_lora_rank', 'attention.value_residual_mix_lora_rank'])
      bad({ [`rwkv7.${k}`]: undefined }, f.tensors, new RegExp(`lacks metadata 'rwkv7\\.${k.replace(/\./g, '\\.')}'`));
    bad({ 'rwkv7.wkv.head_size': 48 }, f.tensors, /wkv\.head_size 48 does not divide embedding_length 256/);
    bad({ 'rwkv7.token_shift_count': 1 }, f.tensors, /token_shift_count 1 is not 2/);
    bad({ 'rwkv7.attention.layer_norm_epsilon': -1 }, f.tensors, /layer_norm_epsilon -1 is not in \[0, 1\)/);
    for (const t of ['token_embd_norm.bias', 'blk.1.time_mix_lerp_fused.weight', 'blk.2.time_mix_v0.weight', 'blk.0.time_mix_r_k.weight', 'blk.1.time_mix_ln.bias', 'blk.2.time_mix_ln.weight', 'blk.0.time_mix_v1.weight', 'blk.2.channel_mix_lerp_k.weight', 'output_norm.bias', 'output.weight'])
      bad({}, without(f.tensors, t), new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}'`));
    const reshaped = (name: string, dims: number[]) => new Map([...f.tensors].map(([k, v]) => [k, k === name ? { ...v, dims } : v]));
    bad({}, reshaped('blk.1.time_mix_lerp_fused.weight', [257, 1, 1, 6]), /tensor 'blk\.1\.time_mix_lerp_fused\.weight' is \[257, 1, 1, 6\], expected \[256, 1, 1, 6\]/);
    bad({}, reshaped('blk.0.time_mix_lerp_fused.weight', [256, 1, 1, 7]), /is \[256, 1, 1, 7\], expected \[256, 1, 1, 6\]/);
    bad({}, reshaped('blk.2.time_mix_r_k.weight', [1, 256]), /tensor 'blk\.2\.time_mix_r_k\.weight' is \[1, 256\], expected 256 values/);
    bad({}, reshaped('blk.0.channel_mix_lerp_k.weight', [128, 1, 2]), /channel_mix_lerp_k\.weight' is \[128, 1, 2\]/);
  });

  it('arwkv7: RMS norms, one token shift, SwiGLU FFNs; the group norm where the file has it; gate-less blocks read five lerps', () => {
    const f = testModelFile(dir, 'tiny-arwkv7');
    const p = programOf(f.kv, f.tensors);
    expect(p.kvKWidth).toEqual([]);
    expect(p.rsWidth).toEqual([0, 1, 2].flatMap(() => [256, 4 * 64 * 64]));
    expect(p.ops.filter((o) => o.op === 'layer_norm')).toEqual([]);
    expect(p.ops.filter((o) => o.op === 'rms_norm').map((o) => o.weights!.weight)).toEqual([...[0, 1, 2].flatMap((i) => [`blk.${i}.attn_norm.weight`, `blk.${i}.ffn_norm.weight`]), 'output_norm.weight']);
    expect(p.ops.filter((o) => o.op === 'head_rms_norm' && o.params!.layer_norm === 1).map((o) => o.weights!.weight)).toEqual(['blk.1.time_mix_ln.weight', 'blk.2.time_mix_ln.weight']);
    expect(p.ops.filter((o) => o.op === 'swiglu').length).toBe(3);
    // A gate-less block (llama.cpp's has_gating false: no g1/g2, lerp_fused [n_embd, 1, 1, 5]): five
    // lerps and no gate. (llama.cpp's graph asserts on such a file (measured, ggml_mul's
    // ggml_can_repeat), so no parity against it: the block is the gated one's ops without the gate.)
    const gateless = new Map([...f.tensors].filter(([k]) => !/^blk\.1\.time_mix_g[12]\./.test(k)).map(([k, v]) => [k, k === 'blk.1.time_mix_lerp_fused.weight' ? { ...v, dims: [256, 1, 1, 5] } : v]));
    const q = programOf(f.kv, gateless);
    const lerpsOf = (prog: typeof p) => prog.ops.filter((o) => o.op === 'mul' && o.weights?.weight === 'blk.1.time_mix_lerp_fused.weight').map((o) => o.params!.w_off);
    expect(lerpsOf(p)).toEqual([0, 1, 2, 3, 4, 5].map((i) => i * 256));
    expect(lerpsOf(q)).toEqual([0, 1, 2, 3, 4].map((i) => i * 256));
    const ops = (prog: typeof p) => prog.ops.filter((o) => !(o.op === 'mul' && o.weights?.weight === 'blk.1.time_mix_lerp_fused.weight')).map((o) => o.op);
    expect(ops(p).length - ops(q).length).toBe(1 + 3 + 1); // the sixth lerp's add; g1, sigmoid, g2; the gate's mul
    // A gate with five lerps (none for it) is refused; rwkv7 requires its gate.
    const noLerp = new Map([...f.tensors].map(([k, v]) => [k, k === 'blk.2.time_mix_lerp_fused.weight' ? { ...v, dims: [256, 1, 1, 5] } : v]));
    expect(() => programOf(f.kv, noLerp)).toThrow(badModel(/block 2 has a gate \(time_mix_g1, time_mix_g2\) but five lerps/));
    const r = testModelFile(dir, 'tiny-rwkv7');
    expect(() => programOf(r.kv, without(r.tensors, 'blk.1.time_mix_g2.weight'))).toThrow(badModel(/lacks tensor 'blk\.1\.time_mix_g2\.weight'/));
    expect(() => programOf(edit(f.kv, { 'arwkv7.token_shift_count': 2 }), f.tensors)).toThrow(badModel(/token_shift_count 2 is not 1/));
  });

  it('the loader refuses a LoRA matrix of the wrong rank', () => {
    // blk.1's decay LoRA (rank 32) and value-mix LoRA (rank 16) down-projections swapped by name.
    const src = writeTestModel(dir, 'tiny-rwkv7', 'F32');
    const a = patchedCopy(src, `${dir}/swap1.gguf`, 'blk.1.time_mix_w1.weight', 'blk.1.time_mix_x1.weight');
    const b = patchedCopy(a, `${dir}/swap2.gguf`, 'blk.1.time_mix_v1.weight', 'blk.1.time_mix_w1.weight');
    const c = patchedCopy(b, `${dir}/swap3.gguf`, 'blk.1.time_mix_x1.weight', 'blk.1.time_mix_v1.weight');
    expect(() => EngineModel.load(c, { threads: 1, nCtx: 16 })).toThrow(badModel(/tensor 'blk\.1\.time_mix_w2\.weight' \[32, 256\]: expected 16 inputs/));
  });
});

// RWKV-6 (`rwkv6`, src/models/rwkv6-base.cpp and rwkv6.cpp): the same trunk with the data-dependent
// lerps (time_mix_w2's five slices in one grouped product, the fused lerp as its bias), the decay
// exp(-exp(.)), the WKV-6 recurrence with time_first and the residual halved every
// rescale_every_n_layers blocks.
describe('rwkv6 program', () => {
  it('two token shifts and a WKV-6 state per block; five lerp slices in one grouped product; the residual halved after block 1', () => {
    const f = testModelFile(dir, 'tiny-rwkv6');
    const p = programOf(f.kv, f.tensors);
    expect(p.ops.filter((o) => o.op === 'attention' || o.op === 'rope')).toEqual([]);
    expect(p.kvKWidth).toEqual([]);
    expect(p.rsWidth).toEqual([0, 1, 2].flatMap(() => [256, 4 * 64 * 64, 256]));
    expect(p.ops.filter((o) => o.op === 'rwkv_wkv6').map((o) => [o.params!.n_head, o.params!.head_dim, o.weights!.u])).toEqual([0, 1, 2].map((i) => [4, 64, `blk.${i}.time_mix_first.weight`]));
    expect(p.ops.filter((o) => o.op === 'matmul' && o.params?.groups === 5).map((o) => o.weights!.bias)).toEqual([0, 1, 2].map((i) => `blk.${i}.time_mix_lerp_fused.weight`));
    expect(p.ops.filter((o) => o.op === 'sigmoid' && o.params?.exp_decay === 1).length).toBe(3);
    expect(p.ops.filter((o) => o.op === 'scale' && o.params?.scale === 0.5).length).toBe(1);
    expect(p.ops.filter((o) => o.op === 'layer_norm').map((o) => o.weights!.bias)).toEqual([
      'token_embd_norm.bias',
      ...[0, 1, 2].flatMap((i) => [`blk.${i}.attn_norm.bias`, `blk.${i}.attn_norm_2.bias`]),
      'output_norm.bias',
    ]);
    // rescale_every_n_layers 0 (or absent): no halving; 1: after every block.
    expect(programOf(edit(f.kv, { 'rwkv6.rescale_every_n_layers': undefined }), f.tensors).ops.filter((o) => o.op === 'scale' && o.params?.scale === 0.5).length).toBe(0);
    expect(programOf(edit(f.kv, { 'rwkv6.rescale_every_n_layers': 1 }), f.tensors).ops.filter((o) => o.op === 'scale' && o.params?.scale === 0.5).length).toBe(3);
  });

  it('refuses missing or malformed keys and tensors with what is wrong', () => {
    const f = testModelFile(dir, 'tiny-rwkv6');
    const bad = (extra: Record<string, GgufValue | undefined>, tensors: Map<string, GgufTensorInfo>, re: RegExp) => expect(() => programOf(edit(f.kv, extra), tensors)).toThrow(badModel(re));
    for (const k of ['wkv.head_size', 'time_mix_extra_dim', 'time_decay_extra_dim'])
      bad({ [`rwkv6.${k}`]: undefined }, f.tensors, new RegExp(`lacks metadata 'rwkv6\\.${k.replace(/\./g, '\\.')}'`));
    bad({ 'rwkv6.wkv.head_size': 48 }, f.tensors, /wkv\.head_size 48 does not divide embedding_length 256/);
    bad({ 'rwkv6.token_shift_count': 1 }, f.tensors, /token_shift_count 1 is not 2/);
    bad({ 'rwkv6.time_mix_extra_dim': 32 }, f.tensors, /tensor 'blk\.0\.time_mix_w1\.weight' is \[256, 80\], expected \[256, 160\]/);
    bad({ 'rwkv6.time_decay_extra_dim': 16 }, f.tensors, /tensor 'blk\.0\.time_mix_decay_w1\.weight' is \[256, 32\], expected \[256, 16\]/);
    for (const t of ['token_embd_norm.bias', 'blk.0.time_mix_lerp_x.weight', 'blk.1.time_mix_lerp_fused.weight', 'blk.2.time_mix_first.weight', 'blk.1.time_mix_decay.weight', 'blk.0.time_mix_gate.weight', 'blk.1.time_mix_ln.bias', 'blk.2.channel_mix_lerp_r.weight', 'blk.0.channel_mix_receptance.weight', 'output_norm.bias'])
      bad({}, without(f.tensors, t), new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}'`));
    const reshaped = (name: string, dims: number[]) => new Map([...f.tensors].map(([k, v]) => [k, k === name ? { ...v, dims } : v]));
    bad({}, reshaped('blk.1.time_mix_w2.weight', [16, 256, 4]), /tensor 'blk\.1\.time_mix_w2\.weight' is \[16, 256, 4\], expected \[16, 256, 5\]/);
    bad({}, reshaped('blk.1.time_mix_lerp_fused.weight', [256, 1, 1, 6]), /is \[256, 1, 1, 6\], expected \[256, 1, 1, 5\]/);
    bad({}, reshaped('blk.0.time_mix_first.weight', [32, 8]), /tensor 'blk\.0\.time_mix_first\.weight' is \[32, 8\], expected \[64, 4\]/);
    bad({}, reshaped('blk.2.time_mix_decay.weight', [1, 256]), /tensor 'blk\.2\.time_mix_decay\.weight' is \[1, 256\], expected 256 values/);
  });

  it('the loader refuses a projection of the wrong shape', () => {
    // blk.1's time_mix_output [256, 256] and channel_mix_key [256, 512] swapped by name.
    const src = writeTestModel(dir, 'tiny-rwkv6', 'F32');
    const a = patchedCopy(src, `${dir}/r6swap1.gguf`, 'blk.1.time_mix_output.weight', 'blk.1.time_mix_outpux.weight');
    const b = patchedCopy(a, `${dir}/r6swap2.gguf`, 'blk.1.channel_mix_key.weight', 'blk.1.time_mix_output.weight');
    const c = patchedCopy(b, `${dir}/r6swap3.gguf`, 'blk.1.time_mix_outpux.weight', 'blk.1.channel_mix_key.weight');
    expect(() => EngineModel.load(c, { threads: 1, nCtx: 16 })).toThrow(badModel(/tensor 'blk\.1\.time_mix_output\.weight' \[256, 512\]: expected 256 outputs/));
  });

  it('rwkv6qwen2: RMS norms, one token shift, gated linear attention over k/v of 2 heads repeated, SwiGLU FFNs', () => {
    const f = testModelFile(dir, 'tiny-rwkv6qwen2');
    const p = programOf(f.kv, f.tensors);
    expect(p.kvKWidth).toEqual([]);
    expect(p.rsWidth).toEqual([0, 1, 2].flatMap(() => [256, 4 * 64 * 64]));
    expect(p.ops.filter((o) => o.op === 'layer_norm' || o.op === 'head_rms_norm')).toEqual([]);
    expect(p.ops.filter((o) => o.op === 'rwkv_wkv6').map((o) => [o.params!.gla_scale, o.weights])).toEqual(Array(3).fill([0.125, undefined]));
    // WKV heads 0, 1 read k/v head 0; heads 2, 3 k/v head 1 (ggml_repeat's layout), through strided
    // copies: [a_off, out_off] per 64-value block, in out_off order, for block 0's ops.
    const headCopies = (q: typeof p) => {
      const ops = q.ops.filter((o) => o.op === 'copy' && o.params?.n === 64);
      const perBlock = ops.slice(0, ops.length / 3).flatMap((o) => {
        const v = (k: string) => Number(o.params![k] ?? 0);
        return Array.from({ length: v('blocks') || 1 }, (_, j) => [v('a_off') + j * v('a_stride'), v('out_off') + j * v('out_stride')]);
      });
      return { n: ops.length / 3, pairs: perBlock.sort((a, b) => a[1] - b[1]) };
    };
    expect(headCopies(p)).toEqual({ n: 4, pairs: [[0, 256], [0, 320], [64, 384], [64, 448], [128, 512], [128, 576], [192, 640], [192, 704]] });
    // One k/v head for all four (a group larger than the group count): one copy per k and v.
    const oneKv = programOf(edit(f.kv, { 'rwkv6qwen2.attention.head_count_kv': 1 }), new Map([...f.tensors].map(([k, v]) => [k, /time_mix_(key|value)\.(weight|bias)/.test(k) ? { ...v, dims: k.endsWith('weight') ? [256, 64] : [64] } : v])));
    expect(headCopies(oneKv)).toEqual({ n: 2, pairs: [[0, 256], [0, 320], [0, 384], [0, 448], [64, 512], [64, 576], [64, 640], [64, 704]] });
    expect(p.ops.filter((o) => o.op === 'matmul' && o.weights?.bias?.includes('time_mix_')).map((o) => o.weights!.bias).slice(0, 4)).toEqual(['blk.0.time_mix_lerp_fused.weight', 'blk.0.time_mix_receptance.bias', 'blk.0.time_mix_key.bias', 'blk.0.time_mix_value.bias']);
    expect(p.ops.filter((o) => o.op === 'scale' && o.params?.scale === 0.5)).toEqual([]);
    const bad = (kv: Record<string, GgufValue | undefined>, tensors: Map<string, GgufTensorInfo>, re: RegExp) => expect(() => programOf(edit(f.kv, kv), tensors)).toThrow(badModel(re));
    bad({ 'rwkv6qwen2.attention.head_count_kv': 3 }, f.tensors, /head_count_kv 3 does not divide the 4 WKV heads/);
    bad({ 'rwkv6qwen2.token_shift_count': 2 }, f.tensors, /token_shift_count 2 is not 1/);
    const withFirst = new Map([...f.tensors, ['blk.1.time_mix_first.weight', { ...f.tensors.get('blk.1.time_mix_decay.weight')!, name: 'blk.1.time_mix_first.weight', dims: [64, 4] }]]);
    bad({}, withFirst, /block 1 has time_mix_first, whose WKV-6 needs the group norm/);
    for (const t of ['blk.0.ffn_norm.weight', 'blk.2.ffn_up.weight', 'blk.1.time_mix_gate.weight']) bad({}, without(f.tensors, t), new RegExp(`lacks tensor '${t.replace(/\./g, '\\.')}'`));
    // k/v of the WKV heads' width (head_count_kv 4): no repeat.
    expect(programOf(edit(f.kv, { 'rwkv6qwen2.attention.head_count_kv': 4 }), new Map([...f.tensors].map(([k, v]) => [k, /time_mix_(key|value)\.weight/.test(k) ? { ...v, dims: [256, 256] } : v]))).ops.filter((o) => o.op === 'copy' && o.params?.n === 64)).toEqual([]);
  });
});
