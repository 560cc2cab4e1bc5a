// dots3note (rednote dots.llm3): the tensors and keys llama.cpp's loader (src/models/dots3note.cpp)
// takes, as conversion/dots3.py Dots3NoteModel writes them: absorbed MLA of two geometries (full
// and sliding blocks), the RoPE-key norm and head gate on every block, the DSA indexer on full
// ones, leading dense blocks then routed blocks with a selection bias and a shared expert, and the
// MTP block after the trunk.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Dots3noteConfig } from './architectures/dots3note';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const MLA = ['attn_norm', 'attn_q_a', 'attn_q_a_norm', 'attn_q_b', 'attn_kv_a_mqa', 'attn_kv_a_norm', 'attn_k_norm', 'attn_k_b', 'attn_v_b', 'attn_output', 'attn_gate'].map((n) => `${n}.weight`);
const INDEXER = ['indexer.k_norm.weight', 'indexer.k_norm.bias', 'indexer.proj.weight', 'indexer.attn_k.weight', 'indexer.attn_q_b.weight'];
const DENSE = ['ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = ['ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight', 'exp_probs_b.bias', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'];
const NEXTN = ['nextn.eh_proj.weight', 'nextn.enorm.weight', 'nextn.hnorm.weight', 'nextn.shared_head_norm.weight', 'nextn.embed_tokens.weight'];

const config = (over: Partial<Dots3noteConfig> = {}) => ({ ...getPreset('tiny-dots3note').config, ...over }) as Dots3noteConfig;
const plan = (over: Partial<Dots3noteConfig> = {}) => planModel(config(over), 'F32');

describe('dots3note', () => {
  it('tensors: MLA + k norm + gate everywhere, the indexer on full blocks (0, 3), block 0 dense, an MTP block as blk.5', () => {
    const t = plan().tensors;
    const block = (i: number) => t.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
    expect(block(0)).toEqual([...MLA, ...INDEXER, ...DENSE].sort());
    expect(block(3)).toEqual([...MLA, ...INDEXER, ...MOE].sort());
    for (const i of [1, 2, 4]) expect(block(i)).toEqual([...MLA, ...MOE].sort());
    expect(block(5)).toEqual([...MLA, ...DENSE, ...NEXTN].sort());
    expect(t.filter((x) => x.layer === undefined).map((x) => x.name)).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    expect(plan({ nextn: 0 }).tensors.some((x) => x.layer === 5)).toBe(false);
    expect(DEFAULT_PRESET_FOR_ARCH.dots3note).toBe('tiny-dots3note');
  });

  it('shapes: each kind its own latent, heads and head sizes (the MTP block the sliding kind\'s)', () => {
    const s = new Map(plan().tensors.map((t) => [t.name, t.shape]));
    const attn = (i: number) => ['attn_q_b', 'attn_kv_a_mqa', 'attn_kv_a_norm', 'attn_k_norm', 'attn_k_b', 'attn_v_b', 'attn_output', 'attn_gate'].map((n) => s.get(`blk.${i}.${n}.weight`));
    const full = [[128, 4 * 96], [256, 160], [128], [32], [64, 128, 4], [128, 64, 4], [256, 256], [256, 4]];
    const swa = [[128, 6 * 64], [256, 96], [64], [32], [32, 64, 6], [64, 32, 6], [192, 256], [256, 6]];
    expect([0, 1, 2, 3, 4, 5].map(attn)).toEqual([full, swa, swa, full, swa, swa]);
    expect(['indexer.k_norm.weight', 'indexer.proj.weight', 'indexer.attn_k.weight', 'indexer.attn_q_b.weight'].map((n) => s.get(`blk.3.${n}`))).toEqual([[64], [256, 16], [256, 64], [128, 1024]]);
    expect(['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'exp_probs_b.bias', 'ffn_up_shexp.weight'].map((n) => s.get(`blk.1.${n}`))).toEqual([[256, 16], [256, 128, 16], [16], [256, 128]]);
    expect(s.get('blk.5.ffn_up.weight')).toEqual([256, 512]);
  });

  it('rejects configs the loader cannot take, naming the field', () => {
    expect(() => plan({ window: 0 })).toThrow(/window/);
    expect(() => plan({ fullEvery: 0 })).toThrow(/fullEvery/);
    expect(() => plan({ ropeBaseSwa: 0 })).toThrow(/ropeBaseSwa/);
    expect(() => plan({ qkRope: 31 })).toThrow(/qkRope 31 must be even/);
    expect(() => plan({ swa: { nHeads: 6, kvLora: 0, qkNope: 32, vHead: 32 } })).toThrow(/swa needs positive/);
    expect(() => plan({ dsa: { nHead: 16, headDim: 48, topK: 16 } })).toThrow(/indexer head/);
    expect(() => plan({ moe: { ...config().moe, gating: 'softmax' } })).toThrow(/sigmoid/);
    expect(() => plan({ nextn: 2 })).toThrow(/nextn must be 0 or 1/);
  });

  it('the file: the converter\'s keys and types', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-dots3note-'));
    try {
      const out = path.join(dir, 'm.gguf');
      writeModel({ config: config(), fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      expect(kv.get('general.architecture')!.value).toBe('dots3note');
      const keys = Object.fromEntries([...kv.keys()].filter((k) => k.startsWith('dots3note.')).map((k) => [k.slice('dots3note.'.length), kv.get(k)!.value]));
      expect(keys).toEqual({
        vocab_size: 1024, context_length: 4096, embedding_length: 256, block_count: 6, feed_forward_length: 512,
        'attention.head_count': [4, 6, 6, 4, 6, 6], 'attention.head_count_kv': 1, 'rope.freq_base': 1e6, 'rope.freq_base_swa': 1e4,
        'attention.layer_norm_rms_epsilon': Math.fround(1e-6), expert_count: 16, expert_used_count: 4,
        'attention.q_lora_rank': 128, 'attention.kv_lora_rank': 128, 'attention.key_length': 160, 'attention.value_length': 128,
        'attention.key_length_mla': 96, 'attention.value_length_mla': 64, 'rope.dimension_count': 32,
        leading_dense_block_count: 1, expert_feed_forward_length: 128, expert_shared_count: 1, expert_weights_norm: true, expert_gating_func: 2, expert_weights_scale: 2.5,
        'attention.sliding_window': 8, 'attention.sliding_window_pattern': [false, true, true, false, true],
        'attention.kv_lora_rank_swa': 64, 'attention.key_length_swa': 96, 'attention.value_length_swa': 64,
        'attention.key_length_mla_swa': 64, 'attention.value_length_mla_swa': 32,
        'attention.indexer.head_count': 16, 'attention.indexer.key_length': 64, 'attention.indexer.top_k': 16,
        'attention.indexer.types': [true, false, false, true, false], nextn_predict_layers: 1,
      });
      expect(['attention.head_count', 'attention.sliding_window_pattern', 'attention.indexer.types'].map((k) => kv.get(`dots3note.${k}`)!.elemType)).toEqual([GgufType.INT32, GgufType.BOOL, GgufType.BOOL]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
