// The writers of the embedding encoders beside bert / nomic-bert (architectures/encoders-llama.ts:
// eurobert, neo-bert, llama-embed, modern-bert; jina-bert.ts; gemma.ts's gemma-embedding): the
// tensors, shapes and keys each llama.cpp loader takes, no head, and their refusals.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { ModelConfig } from './arch';
import { planModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';
import { writtenKeys } from './writer-spec.suite';

const plan = (preset: string, over: Record<string, unknown> = {}) => planModel({ ...getPreset(preset).config, ...over } as ModelConfig, 'F32');
const block = (preset: string, i: number) =>
  plan(preset).tensors.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
const top = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name).sort();
const shape = (p: string, name: string) => plan(p).tensors.find((x) => x.name === name)!.shape;
const LN = (n: string) => [`${n}.weight`, `${n}.bias`];

describe('encoder writers', () => {
  it("each block's and the file's tensors as the loaders name them (no output.weight)", () => {
    expect(block('tiny-eurobert', 1)).toEqual(['attn_norm.weight', ...LN('attn_q'), ...LN('attn_k'), ...LN('attn_v'), 'attn_output.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'].sort());
    expect(block('tiny-neo-bert', 0)).toEqual(['attn_norm.weight', 'attn_qkv.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_up.weight', 'ffn_down.weight'].sort());
    expect(top('tiny-neo-bert')).toEqual(['enc.output_norm.weight', 'token_embd.weight']);
    expect(top('tiny-llama-embed')).toEqual(['output_norm.weight', 'token_embd.weight']);
    expect(block('tiny-modern-bert', 0)).toEqual(['attn_qkv.weight', 'attn_output.weight', 'ffn_norm.weight', 'ffn_up.weight', 'ffn_down.weight'].sort());
    expect(block('tiny-modern-bert-swiglu', 0)).toContain('attn_norm.weight');
    expect(top('tiny-modern-bert')).toEqual(['output_norm.weight', 'token_embd.weight', 'token_embd_norm.weight']);
    expect(block('tiny-jina-bert-v2', 1)).toEqual([...LN('attn_q'), ...LN('attn_k'), ...LN('attn_v'), ...LN('attn_q_norm'), ...LN('attn_k_norm'), ...LN('attn_output'), ...LN('attn_output_norm'), ...LN('ffn_up'), ...LN('ffn_down'), ...LN('layer_output_norm')].sort());
    expect(block('tiny-jina-bert-v2-gated', 0)).toEqual([...LN('attn_qkv'), ...LN('attn_output'), ...LN('attn_output_norm'), ...LN('attn_norm_2'), ...LN('ffn_up'), 'ffn_gate.weight', ...LN('ffn_down'), ...LN('layer_output_norm')].sort());
    expect(top('tiny-jina-bert-v2')).toEqual(['token_embd.weight', ...LN('token_embd_norm'), 'token_types.weight'].sort());
    expect(top('tiny-gemma-embedding')).toEqual(['dense_2.weight', 'dense_3.weight', 'output_norm.weight', 'token_embd.weight']);
    expect(top('tiny-gemma-embedding-plain')).toEqual(['output_norm.weight', 'token_embd.weight']);
    expect([shape('tiny-neo-bert', 'blk.0.ffn_up.weight'), shape('tiny-modern-bert', 'blk.0.attn_qkv.weight'), shape('tiny-jina-bert-v2', 'blk.0.ffn_up.weight'), shape('tiny-jina-bert-v2-gated', 'blk.0.ffn_up.weight')]).toEqual([[256, 1024], [256, 768], [256, 1024], [256, 512]]);
    expect([shape('tiny-gemma-embedding', 'dense_2.weight'), shape('tiny-gemma-embedding', 'dense_3.weight')]).toEqual([[256, 512], [512, 256]]);
    const d = DEFAULT_PRESET_FOR_ARCH;
    expect([d.eurobert, d['neo-bert'], d['llama-embed'], d['modern-bert'], d['jina-bert-v2'], d['gemma-embedding']]).toEqual(['tiny-eurobert', 'tiny-neo-bert', 'tiny-llama-embed', 'tiny-modern-bert', 'tiny-jina-bert-v2', 'tiny-gemma-embedding']);
  });

  it('keys: pooling types, llama-embed and jina causal false, modern-bert windows and LayerNorm epsilon, gemma-embedding windows, rope.freq_base_swa and dense widths', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'encoders2-'));
    try {
      const keys = (preset: string) => writtenKeys(dir, getPreset(preset).config).get;
      const e = keys('tiny-llama-embed');
      expect([e('pooling_type'), e('attention.causal')]).toEqual([3, false]);
      expect(keys('tiny-llama-embed-causal')('attention.causal')).toBe(true);
      const m = keys('tiny-modern-bert');
      expect([m('attention.sliding_window'), m('attention.sliding_window_pattern'), m('rope.freq_base_swa'), m('attention.layer_norm_epsilon'), m('attention.layer_norm_rms_epsilon'), m('pooling_type')]).toEqual([8, undefined, 10000, Math.fround(1e-5), undefined, 2]);
      const s = keys('tiny-modern-bert-swiglu');
      expect([s('attention.sliding_window_pattern'), s('hidden_activation'), s('rope.freq_base_swa')]).toEqual([2, 'silu', undefined]);
      const g = keys('tiny-gemma-embedding');
      expect([g('attention.sliding_window'), g('rope.freq_base_swa'), g('dense_2_feat_out'), g('dense_3_feat_in'), g('pooling_type')]).toEqual([8, 10000, 512, 512, 1]);
      const j = keys('tiny-jina-bert-v2');
      expect([j('attention.causal'), j('pooling_type'), j('rope.freq_base')]).toEqual([false, 1, undefined]);
      expect(keys('tiny-neo-bert')('pooling_type')).toBe(2);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refusals', () => {
    expect(() => plan('tiny-eurobert', { tiedEmbeddings: false })).toThrow(/an encoder has no output.weight/);
    expect(() => plan('tiny-neo-bert', { qkvBias: true })).toThrow(/qkvBias is eurobert's/);
    expect(() => plan('tiny-eurobert', { causal: true })).toThrow(/causal is llama-embed's/);
    expect(() => plan('tiny-eurobert', { window: 8 })).toThrow(/modern-bert's/);
    expect(() => plan('tiny-llama-embed', { pooling: 4 })).toThrow(/pooling must be 1 \(mean\), 2 \(CLS\) or 3 \(last\)/);
    expect(() => plan('tiny-jina-bert-v2', { vocabKind: 'llama3' })).toThrow(/needs the bert \(WordPiece\) vocabulary/);
    expect(() => plan('tiny-jina-bert-v2', { causal: true })).toThrow(/never attends causally/);
    expect(() => plan('tiny-gemma-embedding', { window: 0 })).toThrow(/gemma-embedding: window must be positive/);
    expect(() => plan('tiny-gemma-embedding', { denseWidth: 0 })).toThrow(/denseWidth must be a positive integer/);
    expect(() => plan('tiny-gemma3', { ropeBaseSwa: 1e4 })).toThrow(/ropeBaseSwa \/ denseWidth are gemma-embedding's/);
  });
});
