// The diffusion LMs of architectures/diffusion.ts (llada, dream, llada-moe, rnd1): the tensors
// their llama.cpp loaders (src/models/<arch>.cpp) take, the mask token and diffusion.shift_logits.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from '../gguf/constants';
import { readGgufHeader } from '../gguf/reader';
import { planModel, writeModel } from './build';
import { DEFAULT_PRESET_FOR_ARCH, getPreset } from './presets';

const plan = (preset: string, type: 'F32' | 'Q4_K_M' | 'Q8_0' = 'F32') => planModel(getPreset(preset).config, type);
const block = (preset: string, i: number) => plan(preset).tensors.filter((x) => x.layer === i).map((x) => x.name.slice(`blk.${i}.`.length)).sort();
const ATTN = ['attn_norm.weight', 'attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight'];
const DENSE = ['ffn_norm.weight', 'ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight'];
const MOE = ['ffn_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];
const QK_NORM = ['attn_q_norm.weight', 'attn_k_norm.weight'];

describe('diffusion writer', () => {
  it("each block's tensors as its loader names them; dream's head tied", () => {
    expect(block('tiny-llada', 1)).toEqual([...ATTN, ...DENSE].sort());
    expect(block('tiny-dream', 0)).toEqual([...ATTN, ...DENSE, 'attn_q.bias', 'attn_k.bias', 'attn_v.bias'].sort());
    expect(block('tiny-llada-moe', 1)).toEqual([...ATTN, ...MOE, ...QK_NORM].sort());
    expect(block('tiny-rnd1', 0)).toEqual([...ATTN, ...MOE, ...QK_NORM].sort());
    const heads = (p: string) => plan(p).tensors.filter((x) => x.layer === undefined).map((x) => x.name);
    expect(heads('tiny-dream')).toEqual(['token_embd.weight', 'output_norm.weight']);
    expect(heads('tiny-llada')).toEqual(['token_embd.weight', 'output_norm.weight', 'output.weight']);
    const s = new Map(plan('tiny-rnd1').tensors.map((x) => [x.name, x.shape]));
    expect([s.get('blk.0.attn_q.weight'), s.get('blk.0.attn_q_norm.weight'), s.get('blk.0.ffn_down_exps.weight')]).toEqual([[256, 512], [128], [256, 256, 16]]);
    const q = new Map(plan('tiny-llada-moe', 'Q4_K_M').tensors.map((x) => [x.name, x.type]));
    expect([q.get('blk.0.attn_q_norm.weight'), q.get('blk.0.ffn_gate_inp.weight')]).toEqual([GgmlType.F32, GgmlType.F32]);
    expect(q.get('blk.0.ffn_up_exps.weight')).not.toBe(GgmlType.F32);
    expect([DEFAULT_PRESET_FOR_ARCH.llada, DEFAULT_PRESET_FOR_ARCH['llada-moe'], DEFAULT_PRESET_FOR_ARCH.rnd1, DEFAULT_PRESET_FOR_ARCH.dream]).toEqual(['tiny-llada', 'tiny-llada-moe', 'tiny-rnd1', 'tiny-dream']);
  });

  it('writes the mask token (a control token) and shift_logits false for LLaDA, true for RND1, none for Dream', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-diffusion-writer-'));
    try {
      const keys = (preset: string) => {
        const out = path.join(dir, `${preset}.gguf`);
        writeModel({ config: getPreset(preset).config, fileType: 'F32', seed: 1, out });
        return readGgufHeader(out).kv;
      };
      const want: Record<string, boolean | undefined> = { 'tiny-llada': false, 'tiny-llada-moe': false, 'tiny-rnd1': true, 'tiny-dream': undefined };
      for (const [preset, shift] of Object.entries(want)) {
        const kv = keys(preset);
        expect(kv.get('tokenizer.ggml.mask_token_id')!.value).toBe(1021);
        expect((kv.get('tokenizer.ggml.tokens')!.value as string[])[1021]).toBe('<|fim_pad|>');
        expect((kv.get('tokenizer.ggml.token_type')!.value as ArrayLike<number>)[1021]).toBe(3);
        const s = kv.get('diffusion.shift_logits');
        expect(s?.value).toBe(shift);
        if (s) expect(s.type).toBe(GgufType.BOOL);
      }
      expect(keys('tiny-llada-moe').get('llada-moe.expert_feed_forward_length')!.value).toBe(128);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
