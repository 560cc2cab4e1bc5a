// gpt-oss (llama.cpp src/models/openai-moe.cpp, conversion/gpt_oss.py): q/k/v/o with biases, NeoX
// RoPE with YaRN, one attention sink per head, sliding-window attention on every other layer
// (even layers), `post_attention_norm` as the FFN input norm, and routed experts only: a router
// with a bias and experts with gate/up/down biases (clamped SwiGLU in the decoder).
import { attention, checkHeads, embeddings, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export type GptOssConfig = ModelConfig & {
  /** attention.sliding_window: positions a sliding-window layer sees (its own included). */
  slidingWindow: number;
  /** rope.scaling yarn (gpt-oss: factor 32 over 4096 positions); omitted: no scaling keys. */
  yarn?: { factor: number; origCtx: number };
};

export const gptOss: ArchDefinition = {
  name: 'gpt-oss',
  ggufArch: 'gpt-oss',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as GptOssConfig;
    requirePositive(c, ['nLayers', 'dim', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'slidingWindow' as keyof ModelConfig]);
    checkHeads(c);
    checkExperts(c, true);
    if (g.yarn && !(g.yarn.factor > 1 && g.yarn.origCtx > 0)) throw new Error('gpt-oss: yarn needs factor > 1 and origCtx > 0');
    return c;
  },
  metadata(c: ModelConfig) {
    const g = c as GptOssConfig;
    const a = 'gpt-oss';
    const m: [string, GgufValue][] = [
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.feed_forward_length`),
      [`${a}.feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.attention.sliding_window`, kv.u32(g.slidingWindow)],
    ];
    if (g.yarn) {
      m.push(
        [`${a}.rope.scaling.type`, kv.str('yarn')],
        [`${a}.rope.scaling.factor`, kv.f32(g.yarn.factor)],
        [`${a}.rope.scaling.original_context_length`, kv.u32(g.yarn.origCtx)],
      );
    }
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    const e = c.nExperts;
    const ff = c.expertFf;
    // Biases (F32 at any shape, role 'bias'); the expert gate/up get a larger gain so some of their
    // outputs pass the SwiGLU clamp (|x| > 7) and the clamp is exercised.
    const bias = (name: string, shape: number[], i: number, std = 0.1): TensorSpec => ({ name, shape, init: { kind: 'normal', std }, role: 'bias', layer: i });
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(...attention(c, i, { qkvBias: true }));
      t.push(bias(`${p}.attn_output.bias`, [c.dim], i));
      t.push({ name: `${p}.attn_sinks.weight`, shape: [c.nHeads], init: { kind: 'normal', std: 1 }, role: 'bias', layer: i });
      t.push(
        norm(`${p}.post_attention_norm.weight`, c.dim, i),
        linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2),
        bias(`${p}.ffn_gate_inp.bias`, [e], i, 0.5),
        { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, ff, e], init: linearInit(c.dim, 3), role: 'ffn_gate', layer: i },
        bias(`${p}.ffn_gate_exps.bias`, [ff, e], i, 0.5),
        { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, ff, e], init: linearInit(c.dim, 3), role: 'ffn_up', layer: i },
        bias(`${p}.ffn_up_exps.bias`, [ff, e], i, 0.5),
        { name: `${p}.ffn_down_exps.weight`, shape: [ff, c.dim, e], init: linearInit(ff, residualGain(c) / 4), role: 'ffn_down', layer: i },
        bias(`${p}.ffn_down_exps.bias`, [c.dim, e], i),
      );
    }
    return t;
  },
};
