// The writers of jina-bert-v3 (architectures/jina-bert-v3.ts) and T5's encoder (architectures/t5.ts,
// t5encoder, and the whole encoder-decoder t5): the tensors, shapes and keys llama.cpp's loaders
// take, and their refusals.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { ModelConfig } from './arch';
import { planModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { writtenKeys } from './writer-spec.suite';

const plan = (preset: string, over: Record<string, unknown> = {}) => planModel({ ...getPreset(preset).config, ...over } as ModelConfig, 'F32');
const names = (p: string, prefix: string, i?: number) =>
  plan(p).tensors.filter((x) => x.layer === i).map((x) => x.name.slice(i === undefined ? 0 : prefix.length)).sort();
const shape = (p: string, name: string) => plan(p).tensors.find((x) => x.name === name)!.shape;
const LN = (n: string) => [`${n}.weight`, `${n}.bias`];

describe('jina-bert-v3 and t5encoder writers', () => {
  it("each block's and the file's tensors as the loaders name them", () => {
    expect(names('tiny-jina-bert-v3', 'blk.1.', 1)).toEqual([...LN('attn_qkv'), ...LN('attn_output'), ...LN('attn_output_norm'), ...LN('ffn_up'), ...LN('ffn_down'), ...LN('layer_output_norm')].sort());
    expect(names('tiny-jina-bert-v3', '')).toEqual(['token_embd.weight', ...LN('token_embd_norm'), 'token_types.weight'].sort());
    const enc = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_o.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
    expect(names('tiny-t5encoder', 'enc.blk.0.', 0)).toEqual([...enc, 'attn_rel_b.weight'].sort());
    expect(names('tiny-t5encoder', 'enc.blk.2.', 2)).toEqual([...enc].sort());
    expect(names('tiny-t5encoder-relu', 'enc.blk.2.', 2)).toEqual([...enc.filter((n) => n !== 'ffn_gate.weight'), 'attn_rel_b.weight'].sort());
    expect(names('tiny-t5encoder', '')).toEqual(['enc.output_norm.weight', 'token_embd.weight']);
    // heads x d_kv (4 x 48) is not the width; the bias table is [n_head, buckets].
    expect([shape('tiny-t5encoder', 'enc.blk.0.attn_q.weight'), shape('tiny-t5encoder', 'enc.blk.0.attn_o.weight'), shape('tiny-t5encoder', 'enc.blk.0.attn_rel_b.weight'), shape('tiny-t5encoder-relu', 'enc.blk.1.attn_rel_b.weight')]).toEqual([[256, 192], [192, 256], [4, 32], [4, 8]]);
    expect([plan('tiny-t5encoder').tensors.find((x) => x.name === 'enc.blk.0.attn_rel_b.weight')!.type, planModel(getPreset('tiny-t5encoder').config, 'Q4_K').tensors.find((x) => x.name === 'enc.blk.0.attn_rel_b.weight')!.type]).toEqual([0, 0]); // (GGML F32: llama-quantize never quantizes attn_rel_b)
    expect([DEFAULT_PRESET_FOR_ARCH['jina-bert-v3'], DEFAULT_PRESET_FOR_ARCH.t5encoder]).toEqual(['tiny-jina-bert-v3', 'tiny-t5encoder']);
  });

  it('keys: rope.freq_base and mean pooling (jina-bert-v3); d_kv, buckets, RMS epsilon, attention.causal false (t5encoder)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 't5-writer-'));
    try {
      const keys = (preset: string, over: Record<string, unknown> = {}) => writtenKeys(dir, { ...getPreset(preset).config, ...over } as ModelConfig).get;
      const j = keys('tiny-jina-bert-v3');
      expect([j('rope.freq_base'), j('pooling_type'), j('attention.causal'), j('attention.layer_norm_epsilon')]).toEqual([20000, 1, false, Math.fround(1e-12)]);
      const t = keys('tiny-t5encoder');
      expect([t('attention.key_length'), t('attention.value_length'), t('attention.relative_buckets_count'), t('attention.layer_norm_rms_epsilon'), t('attention.causal'), t('pooling_type')]).toEqual([48, 48, 32, Math.fround(1e-6), false, 1]);
      expect(keys('tiny-t5encoder', { causal: undefined })('attention.causal')).toBeUndefined();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refusals', () => {
    expect(() => plan('tiny-jina-bert-v3', { vocabKind: 'llama3' })).toThrow(/needs the bert \(WordPiece\) vocabulary/);
    expect(() => plan('tiny-jina-bert-v3', { causal: true })).toThrow(/never attends causally/);
    expect(() => plan('tiny-jina-bert-v3', { headDim: 32 })).toThrow(/heads x head must be 256/);
    expect(() => plan('tiny-t5encoder', { causal: true })).toThrow(/never attends causally/);
    expect(() => plan('tiny-t5encoder', { relBuckets: 3 })).toThrow(/relBuckets must be an integer of at least 4/);
    expect(() => plan('tiny-t5encoder', { nKvHeads: 2 })).toThrow(/kv heads must equal heads/);
  });
});

describe('t5 writer (encoder-decoder)', () => {
  const dec = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_o.weight', 'cross_attn_norm.weight', 'cross_attn_q.weight', 'cross_attn_k.weight', 'cross_attn_v.weight', 'cross_attn_o.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
  const enc = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_o.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
  const blk = (p: string, prefix: string) => plan(p).tensors.filter((x) => x.name.startsWith(prefix)).map((x) => x.name.slice(prefix.length)).sort();

  it("the encoder's and decoder's blocks, the head, as llama.cpp's t5 loader names them", () => {
    expect(blk('tiny-t5', 'enc.blk.0.')).toEqual([...enc, 'attn_rel_b.weight'].sort());
    expect(blk('tiny-t5', 'enc.blk.2.')).toEqual([...enc].sort());
    expect(blk('tiny-t5', 'enc.blk.3.')).toEqual([]);
    expect(blk('tiny-t5', 'dec.blk.0.')).toEqual([...dec, 'attn_rel_b.weight'].sort());
    expect(blk('tiny-t5', 'dec.blk.1.')).toEqual([...dec].sort());
    expect(blk('tiny-t5', 'dec.blk.2.')).toEqual([]);
    expect(blk('tiny-t5-relu', 'dec.blk.1.')).toEqual([...dec.filter((n) => n !== 'ffn_gate.weight'), 'attn_rel_b.weight'].sort());
    expect(plan('tiny-t5').tensors.filter((x) => !/^(enc|dec)\.blk\./.test(x.name)).map((x) => x.name).sort()).toEqual(['dec.output_norm.weight', 'enc.output_norm.weight', 'output.weight', 'token_embd.weight']);
    expect(plan('tiny-t5-relu').tensors.filter((x) => !/^(enc|dec)\.blk\./.test(x.name)).map((x) => x.name).sort()).toEqual(['dec.output_norm.weight', 'enc.output_norm.weight', 'token_embd.weight']);
    expect([shape('tiny-t5', 'dec.blk.1.cross_attn_k.weight'), shape('tiny-t5', 'dec.blk.1.cross_attn_o.weight'), shape('tiny-t5', 'dec.blk.0.attn_rel_b.weight'), shape('tiny-t5', 'output.weight'), shape('tiny-t5-relu', 'dec.blk.1.attn_rel_b.weight')]).toEqual([[256, 192], [192, 256], [4, 32], [256, 1024], [4, 8]]);
    expect(planModel(getPreset('tiny-t5').config, 'Q4_K').tensors.find((x) => x.name === 'dec.blk.0.attn_rel_b.weight')!.type).toBe(0);
    expect(DEFAULT_PRESET_FOR_ARCH.t5).toBe('tiny-t5');
  });

  it('keys: decoder_block_count, decoder_start_token_id, buckets, d_kv, RMS epsilon; no pooling or causal key', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 't5-writer-'));
    try {
      const keys = (preset: string, over: Record<string, unknown> = {}) => writtenKeys(dir, { ...getPreset(preset).config, ...over } as ModelConfig).get;
      const t = keys('tiny-t5');
      expect([t('block_count'), t('decoder_block_count'), t('decoder_start_token_id'), t('attention.key_length'), t('attention.relative_buckets_count'), t('attention.layer_norm_rms_epsilon'), t('attention.causal'), t('pooling_type')]).toEqual([3, 2, 0, 48, 32, Math.fround(1e-6), undefined, undefined]);
      const r = keys('tiny-t5-relu');
      expect([r('decoder_block_count'), r('decoder_start_token_id'), r('attention.relative_buckets_count')]).toEqual([2, 3, 8]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refusals', () => {
    expect(() => plan('tiny-t5', { causal: true })).toThrow(/causal is not a t5 setting/);
    expect(() => plan('tiny-t5', { decLayers: 0 })).toThrow(/decLayers must be a positive integer/);
    expect(() => plan('tiny-t5', { decoderStart: 1024 })).toThrow(/decoderStart 1024 must be a token id below the vocabulary size 1024/);
    expect(() => plan('tiny-t5', { nKvHeads: 2 })).toThrow(/t5: kv heads must equal heads/);
    expect(() => plan('tiny-t5', { relBuckets: 2 })).toThrow(/t5: relBuckets must be an integer of at least 4/);
  });
});
