// rwkv7, arwkv7 and rwkv6 (architectures/rwkv.ts): the tensor lists and keys llama.cpp's loaders (llama_model_rwkv7::
// / llama_model_arwkv7:: load_arch_tensors / load_arch_hparams) take, in conversion/rwkv.py's shapes, and the types the
// quantized files give them (llama-quant leaves the LoRA matrices, w0/a0/v0 and the lerps in F32).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Rwkv6Config, Rwkv7Config } from './architectures/rwkv';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const cfg = getPreset('tiny-rwkv7').config as Rwkv7Config;
const block = (plan: { name: string; shape: number[]; layer?: number }[], i: number) => plan.filter((t) => t.layer === i).map((t) => [t.name.slice(`blk.${i}.`.length), t.shape] as const);

const BLOCK = (i: number, d: number, ff: number, r: Rwkv7Config['rwkv']) => [
  ['attn_norm.weight', [d]],
  ['attn_norm.bias', [d]],
  ['attn_norm_2.weight', [d]],
  ['attn_norm_2.bias', [d]],
  ['time_mix_w0.weight', [d]],
  ['time_mix_w1.weight', [d, r.decayRank]],
  ['time_mix_w2.weight', [r.decayRank, d]],
  ['time_mix_a0.weight', [d]],
  ['time_mix_a1.weight', [d, r.iclrRank]],
  ['time_mix_a2.weight', [r.iclrRank, d]],
  ['time_mix_v0.weight', [d]],
  ['time_mix_v1.weight', [d, i === 0 ? r.iclrRank : r.valueRank]],
  ['time_mix_v2.weight', [i === 0 ? r.iclrRank : r.valueRank, d]],
  ['time_mix_g1.weight', [d, r.gateRank]],
  ['time_mix_g2.weight', [r.gateRank, d]],
  ['time_mix_lerp_fused.weight', [d, 1, 1, 6]],
  ['time_mix_k_k.weight', [d]],
  ['time_mix_k_a.weight', [d]],
  ['time_mix_r_k.weight', [d]],
  ['time_mix_key.weight', [d, d]],
  ['time_mix_value.weight', [d, d]],
  ['time_mix_receptance.weight', [d, d]],
  ['time_mix_ln.weight', [d]],
  ['time_mix_ln.bias', [d]],
  ['time_mix_output.weight', [d, d]],
  ['channel_mix_lerp_k.weight', [d, 1, 1]],
  ['channel_mix_key.weight', [d, ff]],
  ['channel_mix_value.weight', [ff, d]],
];

describe('rwkv7 (tiny-rwkv7)', () => {
  it("writes LN0, the output norm's bias and every block tensor in the loader's shapes (block 0's v LoRA of the iclr rank)", () => {
    const plan = planModel(cfg, 'F32').tensors;
    expect(plan.filter((t) => t.layer === undefined).map((t) => [t.name, t.shape])).toEqual([
      ['token_embd.weight', [256, 1024]],
      ['token_embd_norm.weight', [256]],
      ['token_embd_norm.bias', [256]],
      ['output_norm.weight', [256]],
      ['output_norm.bias', [256]],
      ['output.weight', [256, 1024]],
    ]);
    for (let i = 0; i < 3; i++) expect(block(plan, i)).toEqual(BLOCK(i, 256, 512, cfg.rwkv));
    expect(DEFAULT_PRESET_FOR_ARCH.rwkv7).toBe('tiny-rwkv7');
  });

  it('writes the keys conversion/rwkv.py writes: head_count 0, wkv.head_size, the four LoRA ranks, layer_norm_epsilon', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-rwkv-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: cfg, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('rwkv7');
      const k = new Map([...kv].filter(([n]) => n.startsWith('rwkv7.')).map(([n, x]) => [n.slice(6), x]));
      expect([...k.keys()].sort()).toEqual(
        ['vocab_size', 'context_length', 'embedding_length', 'block_count', 'attention.layer_norm_epsilon', 'wkv.head_size', 'attention.decay_lora_rank', 'attention.iclr_lora_rank', 'attention.value_residual_mix_lora_rank', 'attention.gate_lora_rank', 'feed_forward_length', 'attention.head_count'].sort(),
      );
      const v = (n: string) => k.get(n)!.value;
      expect([v('attention.head_count'), v('wkv.head_size'), v('attention.decay_lora_rank'), v('attention.iclr_lora_rank'), v('attention.value_residual_mix_lora_rank'), v('attention.gate_lora_rank'), v('feed_forward_length')]).toEqual([0, 64, 32, 32, 16, 32, 512]);
      expect([k.get('wkv.head_size')!.type, k.get('attention.layer_norm_epsilon')!.type]).toEqual([GgufType.UINT32, GgufType.FLOAT32]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('quantizes the projections and the channel mix; the LoRA matrices, vectors and lerps stay F32', () => {
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(cfg, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['time_mix_key', 'time_mix_value', 'time_mix_receptance', 'time_mix_output', 'channel_mix_key']) expect([n, t.get(`blk.1.${n}.weight`) === GgmlType.F32]).toEqual([n, false]);
      for (const n of ['time_mix_w1', 'time_mix_w2', 'time_mix_a1', 'time_mix_v2', 'time_mix_g1', 'time_mix_lerp_fused', 'channel_mix_lerp_k', 'time_mix_w0', 'time_mix_r_k', 'time_mix_ln'])
        expect([n, t.get(`blk.1.${n}.weight`)]).toEqual([n, GgmlType.F32]);
      expect(t.get('token_embd_norm.bias')).toBe(GgmlType.F32);
    }
  });

  it('refuses configs llama.cpp cannot load', () => {
    expect(() => planModel({ ...cfg, rwkv: { ...cfg.rwkv, headSize: 48 } } as Rwkv7Config, 'F32')).toThrow(/head size 48 does not divide dim 256/);
    expect(() => planModel({ ...cfg, rwkv: { ...cfg.rwkv, gateRank: 0 } } as Rwkv7Config, 'F32')).toThrow(/rwkv\.gateRank 0 is not a positive integer/);
    expect(() => planModel({ ...cfg, tiedEmbeddings: true }, 'F32')).toThrow(/requires output\.weight/);
    expect(() => planModel({ ...cfg, nExperts: 4, nExpertsUsed: 2 }, 'F32')).toThrow(/no experts/);
  });
});

describe('arwkv7 (tiny-arwkv7)', () => {
  const a = getPreset('tiny-arwkv7').config as Rwkv7Config;
  it('RMS norms without bias, the gate where gateBlocks say (six lerps, else five), time_mix_ln where groupNormBlocks say, a SwiGLU FFN', () => {
    const plan = planModel({ ...a, gateBlocks: [0, 2] } as Rwkv7Config, 'F32').tensors;
    expect(plan.filter((t) => t.layer === undefined).map((t) => t.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const b = (i: number) => new Map(block(plan, i));
    expect(block(plan, 1).map(([n]) => n)).toEqual([
      'attn_norm.weight', ...['w', 'a', 'v'].flatMap((n) => [0, 1, 2].map((k) => `time_mix_${n}${k}.weight`)), 'time_mix_lerp_fused.weight', 'time_mix_k_k.weight', 'time_mix_k_a.weight', 'time_mix_r_k.weight',
      'time_mix_key.weight', 'time_mix_value.weight', 'time_mix_receptance.weight', 'time_mix_ln.weight', 'time_mix_ln.bias', 'time_mix_output.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight',
    ]);
    expect([b(0).get('time_mix_lerp_fused.weight'), b(1).get('time_mix_lerp_fused.weight'), b(2).get('time_mix_g2.weight')]).toEqual([[256, 1, 1, 6], [256, 1, 1, 5], [32, 256]]);
    expect([b(0).has('time_mix_ln.weight'), b(1).has('time_mix_g1.weight'), b(0).has('time_mix_v1.weight')]).toEqual([false, false, true]);
  });

  it('writes token_shift_count 1, layer_norm_rms_epsilon and gate_lora_rank (0 without gates)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-arwkv-'));
    try {
      const read = (c: Rwkv7Config) => {
        const out = path.join(dir, 'm.gguf');
        writeModel({ config: c, fileType: 'F32', seed: 1, out });
        return readGgufHeader(out).kv;
      };
      const kv = read(a);
      expect([kv.get('general.architecture')!.value, kv.get('arwkv7.token_shift_count')!.value, kv.get('arwkv7.attention.gate_lora_rank')!.value, kv.get('arwkv7.attention.head_count')!.value]).toEqual(['arwkv7', 1, 32, 0]);
      expect(kv.get('arwkv7.attention.layer_norm_rms_epsilon')!.type).toBe(GgufType.FLOAT32);
      expect(kv.has('arwkv7.attention.layer_norm_epsilon')).toBe(false);
      expect(read({ ...a, gateBlocks: [] } as Rwkv7Config).get('arwkv7.attention.gate_lora_rank')!.value).toBe(0);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(DEFAULT_PRESET_FOR_ARCH.arwkv7).toBe('tiny-arwkv7');
    expect(() => planModel({ ...cfg, gateBlocks: [0] } as Rwkv7Config, 'F32')).toThrow(/gateBlocks \/ groupNormBlocks are arwkv7's/);
  });
});

describe('rwkv6 (tiny-rwkv6)', () => {
  const c6 = getPreset('tiny-rwkv6').config as Rwkv6Config;
  it("writes LN0, the output norm's bias and every block tensor in the loader's shapes", () => {
    const plan = planModel(c6, 'F32').tensors;
    expect(plan.filter((t) => t.layer === undefined).map((t) => t.name)).toEqual(['token_embd.weight', 'token_embd_norm.weight', 'token_embd_norm.bias', 'output_norm.weight', 'output_norm.bias', 'output.weight']);
    for (let i = 0; i < 3; i++)
      expect(block(plan, i)).toEqual([
        ['attn_norm.weight', [256]], ['attn_norm.bias', [256]], ['attn_norm_2.weight', [256]], ['attn_norm_2.bias', [256]],
        ['time_mix_lerp_x.weight', [256, 1, 1]], ['time_mix_w1.weight', [256, 80]], ['time_mix_w2.weight', [16, 256, 5]], ['time_mix_lerp_fused.weight', [256, 1, 1, 5]],
        ['time_mix_first.weight', [64, 4]], ['time_mix_decay.weight', [256]], ['time_mix_decay_w1.weight', [256, 32]], ['time_mix_decay_w2.weight', [32, 256]],
        ['time_mix_key.weight', [256, 256]], ['time_mix_value.weight', [256, 256]], ['time_mix_receptance.weight', [256, 256]], ['time_mix_gate.weight', [256, 256]],
        ['time_mix_ln.weight', [256]], ['time_mix_ln.bias', [256]], ['time_mix_output.weight', [256, 256]],
        ['channel_mix_lerp_k.weight', [256, 1, 1]], ['channel_mix_lerp_r.weight', [256, 1, 1]], ['channel_mix_key.weight', [256, 512]], ['channel_mix_value.weight', [512, 256]], ['channel_mix_receptance.weight', [256, 256]],
      ]);
    expect(DEFAULT_PRESET_FOR_ARCH.rwkv6).toBe('tiny-rwkv6');
  });

  it("writes conversion/rwkv.py's keys (no token_shift_count: llama.cpp's default 2) and scales the residual outputs as it does", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-rwkv6-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: c6, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('rwkv6');
      const k = new Map([...kv].filter(([n]) => n.startsWith('rwkv6.')).map(([n, x]) => [n.slice(6), x]));
      expect([...k.keys()].sort()).toEqual(['vocab_size', 'context_length', 'embedding_length', 'block_count', 'attention.layer_norm_epsilon', 'rescale_every_n_layers', 'wkv.head_size', 'time_mix_extra_dim', 'time_decay_extra_dim', 'feed_forward_length', 'attention.head_count'].sort());
      const v = (n: string) => k.get(n)!.value;
      expect([v('attention.head_count'), v('wkv.head_size'), v('time_mix_extra_dim'), v('time_decay_extra_dim'), v('rescale_every_n_layers'), v('feed_forward_length')]).toEqual([0, 64, 16, 32, 2, 512]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    // rescale_every 2: block 2's time_mix_output and channel_mix_value at half the std of blocks 0 and 1.
    const std = (n: string) => {
      const t = planModel(c6, 'F32').tensors.find((x) => x.name === n)!;
      return t.init.kind === 'normal' ? t.init.std : NaN;
    };
    for (const n of ['time_mix_output', 'channel_mix_value']) expect([std(`blk.1.${n}.weight`) / std(`blk.2.${n}.weight`), std(`blk.0.${n}.weight`)]).toEqual([2, std(`blk.1.${n}.weight`)]);
  });

  it('quantizes the projections; the LoRA matrices, lerps, time_first and decay stay F32', () => {
    for (const ft of ['Q8_0', 'Q4_K_M'] as const) {
      const t = new Map(planModel(c6, ft).tensors.map((x) => [x.name, x.type]));
      for (const n of ['time_mix_key', 'time_mix_value', 'time_mix_receptance', 'time_mix_gate', 'time_mix_output', 'channel_mix_key', 'channel_mix_receptance']) expect([n, t.get(`blk.1.${n}.weight`) === GgmlType.F32]).toEqual([n, false]);
      for (const n of ['time_mix_w1', 'time_mix_w2', 'time_mix_decay_w1', 'time_mix_decay_w2', 'time_mix_lerp_x', 'time_mix_lerp_fused', 'time_mix_first', 'time_mix_decay', 'channel_mix_lerp_r', 'time_mix_ln'])
        expect([n, t.get(`blk.1.${n}.weight`)]).toEqual([n, GgmlType.F32]);
    }
  });

  it('refuses configs llama.cpp cannot load', () => {
    expect(() => planModel({ ...c6, rwkv6: { ...c6.rwkv6, headSize: 48 } } as Rwkv6Config, 'F32')).toThrow(/head size 48 does not divide dim 256/);
    expect(() => planModel({ ...c6, rwkv6: { ...c6.rwkv6, mixExtra: 0 } } as Rwkv6Config, 'F32')).toThrow(/rwkv6\.mixExtra 0 is not a positive integer/);
    expect(() => planModel({ ...c6, rwkv6: { ...c6.rwkv6, rescaleEvery: -1 } } as Rwkv6Config, 'F32')).toThrow(/rwkv6\.rescaleEvery -1 is not a non-negative integer/);
    expect(() => planModel({ ...c6, tiedEmbeddings: true }, 'F32')).toThrow(/requires output\.weight/);
    expect(() => planModel({ ...c6, nExperts: 4, nExpertsUsed: 2 }, 'F32')).toThrow(/no experts/);
  });
});

describe('rwkv6qwen2 (tiny-rwkv6qwen2)', () => {
  const q = getPreset('tiny-rwkv6qwen2').config as Rwkv6Config;
  it('RMS norms, no LN0 / time_first / group norm / channel mix; k and v of head_count_kv heads with biases; a SwiGLU FFN; its keys', () => {
    const plan = planModel(q, 'F32').tensors;
    expect(plan.filter((t) => t.layer === undefined).map((t) => t.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const b = new Map(block(plan, 1));
    expect([...b.keys()]).toEqual([
      'attn_norm.weight', 'time_mix_lerp_x.weight', 'time_mix_w1.weight', 'time_mix_w2.weight', 'time_mix_lerp_fused.weight', 'time_mix_decay.weight', 'time_mix_decay_w1.weight', 'time_mix_decay_w2.weight',
      'time_mix_key.weight', 'time_mix_value.weight', 'time_mix_receptance.weight', 'time_mix_gate.weight', 'time_mix_key.bias', 'time_mix_value.bias', 'time_mix_receptance.bias', 'time_mix_output.weight',
      'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight',
    ]);
    expect([b.get('time_mix_key.weight'), b.get('time_mix_value.bias'), b.get('time_mix_receptance.bias')]).toEqual([[256, 128], [128], [256]]);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-rwkv6q-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: q, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const v = (n: string) => kv.get(`rwkv6qwen2.${n}`)?.value;
      expect([kv.get('general.architecture')!.value, v('token_shift_count'), v('attention.head_count_kv'), v('attention.head_count'), v('time_mix_extra_dim')]).toEqual(['rwkv6qwen2', 1, 2, 0, 16]);
      expect(kv.get('rwkv6qwen2.attention.layer_norm_rms_epsilon')!.type).toBe(GgufType.FLOAT32);
      expect([kv.has('rwkv6qwen2.attention.layer_norm_epsilon'), kv.has('rwkv6qwen2.rescale_every_n_layers')]).toEqual([false, false]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(DEFAULT_PRESET_FOR_ARCH.rwkv6qwen2).toBe('tiny-rwkv6qwen2');
    expect(() => planModel({ ...q, kvHeads: 3 } as Rwkv6Config, 'F32')).toThrow(/kvHeads 3 does not divide the 4 WKV heads/);
    expect(() => planModel({ ...getPreset('tiny-rwkv6').config, kvHeads: 2 } as Rwkv6Config, 'F32')).toThrow(/kvHeads \/ qkvBias are rwkv6qwen2's/);
  });
});
