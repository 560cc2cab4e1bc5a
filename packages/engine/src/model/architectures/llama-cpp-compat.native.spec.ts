// Metadata and tensors that files converted by llama.cpp's convert_hf_to_gguf.py (or older
// converters) carry differently from our writer's: each case starts from a written tiny model's
// metadata and tensor table, changes them as such a file would, and checks the program against
// what llama.cpp's load_hparams / load_arch_tensors / graph compute for it.
import fs from 'node:fs';

import type { GgufTensorInfo, GgufValue, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { native } from '../../native';
import { tempDir, writeTestModel } from '../../testing';
import { Metadata, readHParams } from '../hparams';
import { buildProgram } from '.';

interface FileView {
  arch: string;
  kv: Record<string, GgufValue>;
  tensors: Map<string, GgufTensorInfo>;
}

const dir = tempDir();
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function view(preset: string): FileView {
  const f = native().openGguf(writeTestModel(dir, preset, 'F32'), { mapData: false });
  try {
    return { arch: f.metadata['general.architecture'] as string, kv: { ...f.metadata }, tensors: new Map(f.tensors.map((t) => [t.name, t])) };
  } finally {
    f.close();
  }
}

/** The same file under another architecture name (`<from>.*` keys renamed). */
function asArch(v: FileView, arch: string): FileView {
  const kv = Object.fromEntries(Object.entries(v.kv).map(([k, x]) => [k.startsWith(`${v.arch}.`) ? `${arch}.${k.slice(v.arch.length + 1)}` : k, x]));
  return { arch, kv: { ...kv, 'general.architecture': arch }, tensors: v.tensors };
}

function addTensor(v: FileView, name: string, dims: number[]): void {
  v.tensors.set(name, { name, type: 0, typeName: 'F32', dims, offset: 0, split: 0, nbytes: 4 * dims.reduce((a, b) => a * b, 1) });
}

function program(v: FileView, nCtxSeq = 4096): ModelProgram {
  return buildProgram(readHParams(new Metadata(v.kv, v.arch), v.tensors), v.tensors, { nCtxSeq });
}

const ops = (p: ModelProgram, op: ProgramOp['op']) => p.ops.filter((o) => o.op === op);
const ropeParams = (p: ModelProgram) => ops(p, 'rope').map((o) => o.params!);

describe('RoPE scaling keys as llama.cpp reads them', () => {
  it('rope.scaling.factor without rope.scaling.type scales linearly (llama.cpp defaults the type to linear)', () => {
    const v = view('tiny-llama');
    v.kv['llama.rope.scaling.factor'] = 4;
    for (const r of ropeParams(program(v))) expect(r.freq_scale).toBe(0.25);
  });

  it('the legacy rope.scale_linear is a factor too (freq_scale = 1/scale), used only without rope.scaling.factor', () => {
    const v = view('tiny-llama');
    v.kv['llama.rope.scale_linear'] = 2;
    for (const r of ropeParams(program(v))) expect(r.freq_scale).toBe(0.5);
    v.kv['llama.rope.scaling.factor'] = 8;
    for (const r of ropeParams(program(v))) expect(r.freq_scale).toBe(0.125);
    v.kv['llama.rope.scaling.type'] = 'none';
    for (const r of ropeParams(program(v))) expect(r.freq_scale).toBe(1);
  });

  it('YaRN: the converter writes yarn_ext_factor/yarn_beta_* from the HF config, which llama.cpp ignores for these architectures (ext 1, beta 32/1)', () => {
    const v = view('tiny-qwen3moe');
    Object.assign(v.kv, {
      'qwen3moe.rope.scaling.type': 'yarn',
      'qwen3moe.rope.scaling.factor': 4,
      'qwen3moe.rope.scaling.original_context_length': 1024,
      'qwen3moe.rope.scaling.yarn_ext_factor': 0.5,
      'qwen3moe.rope.scaling.yarn_beta_fast': 1,
      'qwen3moe.rope.scaling.yarn_beta_slow': 0.5,
    });
    for (const r of ropeParams(program(v))) expect(r).toMatchObject({ freq_scale: 0.25, ext_factor: 1, beta_fast: 32, beta_slow: 1, n_ctx_orig: 1024, attn_factor: 1 });
  });

  it('deepseek2 YaRN (Kimi-K2 config: beta_fast 1): beta_fast stays 32 as in llama.cpp', () => {
    const v = view('tiny-deepseek3');
    const before = program(v);
    v.kv['deepseek2.rope.scaling.yarn_beta_fast'] = 1;
    v.kv['deepseek2.rope.scaling.yarn_beta_slow'] = 1;
    expect(program(v)).toEqual(before);
    for (const r of ropeParams(before)) expect(r).toMatchObject({ beta_fast: 32, beta_slow: 1, ext_factor: 1 });
  });

  it('deepseek2 without YaRN: kq_scale takes rope.scaling.attn_factor squared, as llama.cpp pre-scales it', () => {
    const v = view('tiny-deepseek2-lite');
    for (const k of ['type', 'factor', 'original_context_length', 'yarn_log_multiplier']) delete v.kv[`deepseek2.rope.scaling.${k}`];
    v.kv['deepseek2.rope.scaling.attn_factor'] = 1.5;
    const p = program(v);
    for (const o of ops(p, 'mla_attention')) expect(o.params!.scale).toBeCloseTo((1.5 * 1.5) / Math.sqrt(64 + 32), 6);
    for (const r of ropeParams(p)) expect(r).toMatchObject({ attn_factor: 1.5, ext_factor: 0, freq_scale: 1 });
  });
});

describe('LongRoPE factor tables (llama.cpp get_rope_factors)', () => {
  const factors = (p: ModelProgram) => [...new Set(ops(p, 'rope').map((o) => o.weights?.freq_factors ?? 'none'))];

  it('phi3: the long table above the original context (the context padded to 256 as llama.cpp pads it), else the short one', () => {
    const v = view('tiny-phi3'); // original context 256
    expect(factors(program(v, 256))).toEqual(['rope_factors_short.weight']);
    expect(factors(program(v, 100))).toEqual(['rope_factors_short.weight']);
    expect(factors(program(v, 257))).toEqual(['rope_factors_long.weight']);
    v.kv['phi3.rope.scaling.original_context_length'] = 300;
    // 290 pads to 512 > 300.
    expect(factors(program(v, 290))).toEqual(['rope_factors_long.weight']);
    for (const r of ropeParams(program(v, 290))) expect(r).toMatchObject({ ext_factor: 0, freq_scale: 1, neox: true, n_dims: 48 });
  });

  it('without a context given, the program is built for the default load context (the training context, at most 4096)', () => {
    const v = view('tiny-phi3'); // context_length 1024 > 256
    const p = buildProgram(readHParams(new Metadata(v.kv, v.arch), v.tensors), v.tensors);
    expect(factors(p)).toEqual(['rope_factors_long.weight']);
  });

  it('phi3: rope.scaling.attn_factor scales the rotation; files without tables rotate plainly; rope_freqs is not read', () => {
    const v = view('tiny-phi3');
    const want = Math.fround(Math.sqrt(1 + Math.log(4) / Math.log(256)));
    for (const r of ropeParams(program(v))) expect(r.attn_factor).toBeCloseTo(want, 6);
    v.tensors.delete('rope_factors_long.weight');
    expect(factors(program(v, 4096))).toEqual(['none']);
    expect(factors(program(v, 256))).toEqual(['rope_factors_short.weight']);
    addTensor(v, 'rope_freqs.weight', [24]);
    expect(factors(program(v, 4096))).toEqual(['none']);
  });

  it('llama reads the tables only when rope.scaling.type is longrope, rope_freqs otherwise', () => {
    const v = view('tiny-llama-longrope');
    expect(factors(program(v, 512))).toEqual(['rope_factors_long.weight']);
    delete v.kv['llama.rope.scaling.type'];
    expect(factors(program(v, 512))).toEqual(['none']);
    addTensor(v, 'rope_freqs.weight', [32]);
    expect(factors(program(v, 512))).toEqual(['rope_freqs.weight']);
  });
});

describe('deepseek32 (DSA)', () => {
  it('a context no longer than the indexer top-k (every position selected) runs dense MLA without the indexer', () => {
    const v = view('tiny-deepseek32'); // top_k 16
    expect(ops(program(v, 16), 'dsa_index')).toHaveLength(0);
    expect(ops(program(v, 17), 'dsa_index')).toHaveLength(3);
    for (const o of ops(program(v, 17), 'mla_attention')) expect(o.params!.top_k).toBe(16);
  });

  it('glm-dsa: blocks share the selection as attention.indexer.types says; without it GLM-5/5.1 (context < 1M) index every block, GLM-5.2 by its layout', () => {
    const v = view('tiny-glm-dsa'); // types [1, 0, 1, 0]
    const indexed = (p: ModelProgram) => ops(p, 'dsa_index').length;
    const sels = (p: ModelProgram) => ops(p, 'mla_attention').map((o) => o.c);
    let p = program(v);
    expect(indexed(p)).toBe(2);
    // Blocks 1 and 3 read the selection buffer blocks 0 and 2 wrote: one buffer throughout.
    expect(new Set(sels(p)).size).toBe(1);
    delete v.kv['glm-dsa.attention.indexer.types'];
    for (let il = 0; il < 4; il++) for (const n of ['k_norm.weight', 'k_norm.bias', 'proj.weight', 'attn_k.weight', 'attn_q_b.weight']) addTensor(v, `blk.${il}.indexer.${n}`, [1]);
    p = program(v);
    expect(indexed(p)).toBe(4);
    v.kv['glm-dsa.context_length'] = 1048576;
    // GLM-5.2's default: blocks 0, 1, 2, 6, 10, ... have their own indexer.
    expect(indexed(program(v))).toBe(3);
    v.kv['glm-dsa.attention.indexer.types'] = Uint32Array.of(0, 1, 1, 1);
    expect(() => program(v)).toThrow(/block 0 shares the indexer selection/);
  });

  it('glm-dsa: sigmoid routing when the file does not say; the YaRN log multiplier is not read', () => {
    const v = view('tiny-glm-dsa');
    delete v.kv['glm-dsa.expert_gating_func'];
    expect([...new Set(ops(program(v), 'moe').map((o) => o.params!.gating))]).toEqual([1]);
    const before = ops(program(v), 'mla_attention')[0].params!.scale;
    Object.assign(v.kv, { 'glm-dsa.rope.scaling.type': 'yarn', 'glm-dsa.rope.scaling.factor': 4, 'glm-dsa.rope.scaling.original_context_length': 1024 });
    const plain = ops(program(v), 'mla_attention')[0].params!.scale;
    v.kv['glm-dsa.rope.scaling.yarn_log_multiplier'] = 0.1;
    expect(ops(program(v), 'mla_attention')[0].params!.scale).toBe(plain);
    expect(plain).not.toBe(before);
  });

  it('refuses indexer heads its Hadamard rotation cannot take', () => {
    const v = view('tiny-deepseek32');
    v.kv['deepseek32.attention.indexer.key_length'] = 96;
    expect(() => program(v)).toThrow(/indexer.key_length 96 must be a power of two/);
  });
});

describe('mistral3 (Ministral 3)', () => {
  it("reads the YaRN betas and log multiplier llama.cpp's loader reads for it, and the query temperature over the original context", () => {
    const v = view('tiny-mistral3'); // factor 4, original 16, betas 16/2, mscale_all_dim 0.7, temperature 0.1
    const p = program(v);
    const ms = (m: number) => 0.1 * m * Math.log(4) + 1;
    for (const r of ropeParams(p)) {
      expect(r).toMatchObject({ beta_fast: 16, beta_slow: 2, ext_factor: 1, freq_scale: 0.25, n_ctx_orig: 16, neox: false });
      expect(r.attn_factor).toBeCloseTo(ms(1) / ms(Math.fround(0.7)) / (1 + 0.1 * Math.log(4)), 6);
    }
    for (const o of ops(p, 'attention')) expect(o.params).toMatchObject({ temp_scale: Math.fround(0.1), temp_floor: 16, temp_offset: 0 });
  });
});

describe('hy_v3 (Hunyuan v3)', () => {
  it('reads its selection bias blk.N.exp_probs_b (no suffix); blocks without a router are dense', () => {
    const moe = ops(program(view('tiny-hy-v3')), 'moe');
    expect(moe.map((o) => o.weights!.exp_probs_b)).toEqual(['blk.1.exp_probs_b', 'blk.2.exp_probs_b']);
    expect(moe.map((o) => o.params!.gating)).toEqual([1, 1]);
  });
});

describe('per-layer head counts', () => {
  it('head_count_kv absent: each layer takes its own head_count (llama.cpp copies the array)', () => {
    const v = view('tiny-llama');
    v.kv['llama.attention.head_count'] = Uint32Array.of(4, 2, 4, 2);
    delete v.kv['llama.attention.head_count_kv'];
    const att = ops(program(v), 'attention').map((o) => [o.params!.n_head, o.params!.n_head_kv]);
    expect(att).toEqual([[4, 4], [2, 2], [4, 4], [2, 2]]);
  });
});

describe('optional tensors llama.cpp loads', () => {
  it('qwen2: output.bias is added to the logits', () => {
    const v = asArch(view('tiny-llama'), 'qwen2');
    addTensor(v, 'output.bias', [1024]);
    const p = program(v);
    const head = p.ops.find((o) => o.op === 'matmul' && o.out === p.logits)!;
    expect(head.weights).toEqual({ weight: 'output.weight', bias: 'output.bias' });
  });

  it('llama: dense FFN biases (ffn_gate/ffn_up/ffn_down .bias) are applied', () => {
    const v = view('tiny-llama');
    addTensor(v, 'blk.1.ffn_gate.bias', [512]);
    addTensor(v, 'blk.1.ffn_up.bias', [512]);
    addTensor(v, 'blk.1.ffn_down.bias', [256]);
    const mm = ops(program(v), 'matmul').map((o) => o.weights!);
    for (const n of ['ffn_gate', 'ffn_up', 'ffn_down']) expect(mm).toContainEqual({ weight: `blk.1.${n}.weight`, bias: `blk.1.${n}.bias` });
    expect(mm).toContainEqual({ weight: 'blk.0.ffn_up.weight' });
  });
});

describe('deepseek2 expert gating default', () => {
  /** tiny-deepseek2-lite grown to `n` trunk blocks (copies of block 2's tensors), vocab_size `vocab`, no expert_gating_func. */
  function deepseekWithout(n: number, vocab: number, nextn = 0): FileView {
    const v = view('tiny-deepseek2-lite');
    for (const [name, t] of [...v.tensors]) {
      if (!name.startsWith('blk.2.')) continue;
      for (let il = 3; il < n; il++) addTensor(v, `blk.${il}.${name.slice(6)}`, [...t.dims]);
    }
    v.kv['deepseek2.block_count'] = n + nextn;
    v.kv['deepseek2.nextn_predict_layers'] = nextn;
    v.kv['deepseek2.vocab_size'] = vocab;
    delete v.kv['deepseek2.expert_gating_func'];
    return v;
  }
  const gating = (p: ModelProgram) => [...new Set(ops(p, 'moe').map((o) => o.params!.gating))];

  it('GLM-4.7-Flash files without expert_gating_func (47 trunk blocks, vocab 154880) route with sigmoid, as llama.cpp assumes', () => {
    expect(gating(program(deepseekWithout(47, 154880, 1)))).toEqual([1]);
    expect(gating(program(deepseekWithout(48, 154880)))).toEqual([1]);
  });

  it('other files without it (DeepSeek V2/V2.5) keep softmax', () => {
    expect(gating(program(deepseekWithout(47, 1024)))).toEqual([0]);
    expect(gating(program(deepseekWithout(3, 154880)))).toEqual([0]);
  });
});

describe('glm4moe rope.dimension_sections (GLM-4.5V/4.6V text model)', () => {
  it('M-RoPE sections without the 4th section rotate text tokens exactly as NeoX RoPE: the same program', () => {
    const v = view('tiny-glm4moe');
    const plain = program(v);
    v.kv['glm4moe.rope.dimension_sections'] = Int32Array.of(8, 12, 12, 0);
    expect(program(v)).toEqual(plain);
  });

  it('a 4th section (positions 0 for text in llama.cpp) is still refused', () => {
    const v = view('tiny-glm4moe');
    v.kv['glm4moe.rope.dimension_sections'] = Int32Array.of(8, 8, 8, 8);
    expect(() => program(v)).toThrow(/rope.dimension_sections/);
  });
});
