// gemma3n: the tensor list and keys llama.cpp's loader (src/models/gemma3n.cpp) takes, with the
// numbers it hard-codes (4 AltUp streams, active 0, 256 per-layer inputs, LAuReL rank 64, KV from
// block 20 on shared, sparsity on blocks 0-9) written as the converter writes them.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import type { Gemma3nConfig } from './architectures/gemma3n';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const BLOCK = [
  'attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_q_norm.weight', 'attn_k_norm.weight',
  'post_attention_norm.weight', 'ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', 'post_ffw_norm.weight',
  'inp_gate.weight', 'proj.weight', 'post_norm.weight', 'altup_correct_coef.weight', 'altup_correct_scale.weight', 'altup_predict_coef.weight',
  'altup_router.weight', 'altup_router_norm.weight', 'laurel_l.weight', 'laurel_r.weight', 'laurel_post_norm.weight',
];
const plan = (over: Partial<Gemma3nConfig> = {}, type: 'F32' | 'Q4_K_M' = 'F32') => planModel({ ...getPreset('tiny-gemma3n').config, ...over } as Gemma3nConfig, type);

describe('gemma3n', () => {
  it('tiny-gemma3n: every block with K/V (the shared ones unused), AltUp, LAuReL and per-layer tensors of llama.cpp shapes', () => {
    const { tensors } = plan();
    const s = new Map(tensors.map((t) => [t.name, t.shape]));
    for (const i of [0, 21]) expect(tensors.filter((t) => t.layer === i).map((t) => t.name.slice(`blk.${i}.`.length))).toEqual(BLOCK);
    expect([s.get('altup_proj.weight'), s.get('altup_unembd_proj.weight'), s.get('per_layer_token_embd.weight'), s.get('per_layer_model_proj.weight')]).toEqual([[64, 64, 3], [64, 64, 3], [256 * 22, 512], [64, 256 * 22]]);
    expect([s.get('blk.3.laurel_l.weight'), s.get('blk.3.altup_predict_coef.weight'), s.get('blk.3.altup_correct_coef.weight'), s.get('blk.3.altup_router.weight')]).toEqual([[64, 64], [4, 16], [4, 4], [64, 4]]);
    expect(s.has('output.weight')).toBe(false);
    expect(DEFAULT_PRESET_FOR_ARCH.gemma3n).toBe('tiny-gemma3n');
    // Q4_K_M: the 4-wide AltUp coefficient matrices, routers and the 3-D projections stay F32.
    const q = new Map(plan({}, 'Q4_K_M').tensors.map((t) => [t.name, t.type]));
    expect(['altup_proj.weight', 'blk.0.altup_predict_coef.weight', 'blk.0.altup_router.weight', 'per_layer_model_proj.weight'].map((n) => q.get(n))).toEqual(Array(4).fill(GgmlType.F32));
    expect(q.get('blk.0.attn_q.weight')).not.toBe(GgmlType.F32);
  });

  it('refuses what llama.cpp would read otherwise: a LAuReL rank other than 64, shared KV from blocks not sliding then full', () => {
    expect(() => plan({ laurelRank: 32 })).toThrow(/rank 64 only/);
    expect(() => plan({ swaPattern: Array(22).fill(true) })).toThrow(/blocks 18 and 19 must be sliding and full/);
    // 20 blocks or fewer: no shared KV (llama.cpp stores KV on blocks 0-19).
    expect((plan({ nLayers: 6 }).config as Gemma3nConfig).sharedKvLayers).toBe(0);
  });

  it('written keys: AltUp, per-layer width, shared KV, the sparsity scales and the sliding pattern', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gemma3n-'));
    try {
      const out = path.join(dir, 'g.gguf');
      writeModel({ config: { ...getPreset('tiny-gemma3n').config, nLayers: 6 } as Gemma3nConfig, fileType: 'F32', seed: 1, out });
      const kv = readGgufHeader(out).kv;
      const v = (k: string) => kv.get(`gemma3n.${k}`)?.value;
      expect(kv.get('general.architecture')!.value).toBe('gemma3n');
      expect([v('altup.num_inputs'), v('altup.active_idx'), v('embedding_length_per_layer_input'), v('attention.shared_kv_layers'), v('attention.sliding_window'), v('final_logit_softcapping')]).toEqual([4, 0, 256, 0, 8, 30]);
      expect(v('activation_sparsity_scale')).toEqual(Array(6).fill(Math.fround(1.6448533535003662)));
      expect(kv.get('gemma3n.attention.sliding_window_pattern')!.elemType).toBe(GgufType.BOOL);
      expect(v('attention.sliding_window_pattern')).toEqual([true, true, true, true, false, true]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
