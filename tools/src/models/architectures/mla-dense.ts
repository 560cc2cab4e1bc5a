// Dense decoders with DeepSeek's multi-head latent attention, as llama.cpp's converters write them
// (conversion/minicpm.py MiniCPM3Model, conversion/plm.py) and src/models/minicpm3.cpp / plm.cpp
// load them: attn_kv_a_mqa (latent + shared RoPE key), attn_kv_a_norm, one attn_kv_b, attn_output,
// no experts.
// - minicpm3 (MiniCPM3): q LoRA (attn_q_a, attn_q_a_norm, attn_q_b), SwiGLU FFN, an optional
//   output.weight, LongRoPE's rope_factors_long/short ([qk_rope / 2], F32) when the model has them;
//   the converter writes no rope.freq_base (10000) and no value_length (n_embd / head_count: vHead
//   must be that). The graph's embedding x12, residual 1.4/sqrt(L) and head 256/n_embd scales are
//   hard-coded in llama.cpp, so the file carries none; the writer draws token_embd at std 1/12 (the
//   scaled stream starts at unit scale) and the residual writers' gains divided by 1.4/sqrt(L).
// - plm (PLM): a plain attn_q, an ungated FFN (ffn_up, squared ReLU, ffn_down), the head tied to
//   token_embd (the loader never reads output.weight); key_length, value_length written.
import { embeddings, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { sizeMetadata } from './common';
import { longRopeTensors } from './phi3';

export interface MlaDenseOptions {
  /** q LoRA rank (minicpm3: required; plm: 0, a plain attn_q). */
  qLora: number;
  kvLora: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
}

export type MlaDenseConfig = ModelConfig & {
  mla: MlaDenseOptions;
  /** minicpm3: write LongRoPE's factor tables. */
  longRope?: boolean;
};

/** MiniCPM3's residual scale as llama.cpp's graph computes it: 1.4 / sqrt(block_count). */
export const minicpm3ResidualScale = (nLayers: number) => 1.4 / Math.sqrt(nLayers);

function mlaDenseArch(a: 'minicpm3' | 'plm'): ArchDefinition {
  const minicpm3 = a === 'minicpm3';
  return {
    name: a,
    ggufArch: a,
    normalize(c: ModelConfig): ModelConfig {
      const d = c as MlaDenseConfig;
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx']);
      const m = d.mla;
      if (!m) throw new Error(`${a}: needs mla options (use a preset)`);
      if (c.nExperts !== 0) throw new Error(`${a}: a dense model (no experts)`);
      if (m.qkRope % 2 !== 0 || m.qkRope < 2 || m.qkNope < 1 || m.kvLora < 1 || m.vHead < 1) throw new Error(`${a}: bad MLA sizes`);
      if (minicpm3) {
        if (m.qLora < 1) throw new Error('minicpm3: the loader requires q LoRA (qLora >= 1)');
        if (m.vHead * c.nHeads !== c.dim) throw new Error('minicpm3: the converter writes no value_length, so vHead must be dim / nHeads');
        if (c.ropeBase !== 10000) throw new Error('minicpm3: the converter writes no rope.freq_base (10000)');
      } else {
        if (m.qLora !== 0) throw new Error('plm: no q LoRA (a plain attn_q)');
        if (!c.tiedEmbeddings) throw new Error('plm: the head is token_embd (tiedEmbeddings)');
        if (d.longRope) throw new Error('plm: no LongRoPE tables');
      }
      return c;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const { mla: m } = c as MlaDenseConfig;
      const out: [string, GgufValue][] = [
        ...sizeMetadata(a, c),
        [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
        [`${a}.attention.kv_lora_rank`, kv.u32(m.kvLora)],
        [`${a}.attention.key_length`, kv.u32(m.qkNope + m.qkRope)],
        [`${a}.rope.dimension_count`, kv.u32(m.qkRope)],
      ];
      if (minicpm3) out.push([`${a}.attention.q_lora_rank`, kv.u32(m.qLora)]);
      else out.push([`${a}.attention.value_length`, kv.u32(m.vHead)], [`${a}.rope.freq_base`, kv.f32(c.ropeBase)]);
      return out;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const d = c as MlaDenseConfig;
      const m = d.mla;
      const H = c.nHeads;
      // MiniCPM3's x12 embedding scale: token_embd at 1/12 of the usual std when untied.
      const t = embeddings(c).map((s) => (minicpm3 && s.name === 'token_embd.weight' && !c.tiedEmbeddings ? { ...s, init: { kind: 'normal' as const, std: 1 / 12 } } : s));
      // Residual writers at the usual gain once the graph's residual scale multiplies them.
      const gain = residualGain(c) / (minicpm3 ? minicpm3ResidualScale(c.nLayers) : 1);
      if (d.longRope) t.push(...longRopeTensors(m.qkRope, { origCtx: c.ctx }));
      for (let i = 0; i < c.nLayers; i++) {
        const p = `blk.${i}`;
        t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
        if (minicpm3)
          t.push(
            linear(`${p}.attn_q_a.weight`, c.dim, m.qLora, 'attn_q', i),
            norm(`${p}.attn_q_a_norm.weight`, m.qLora, i),
            linear(`${p}.attn_q_b.weight`, m.qLora, H * (m.qkNope + m.qkRope), 'attn_q', i),
          );
        else t.push(linear(`${p}.attn_q.weight`, c.dim, H * (m.qkNope + m.qkRope), 'attn_q', i));
        t.push(
          linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + m.qkRope, 'attn_k', i),
          norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i),
          linear(`${p}.attn_kv_b.weight`, m.kvLora, H * (m.qkNope + m.vHead), 'attn_v', i),
          linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, gain),
          norm(`${p}.ffn_norm.weight`, c.dim, i),
        );
        if (minicpm3) t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i));
        t.push(linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i), linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, gain));
      }
      return t;
    },
  };
}

export const minicpm3 = mlaDenseArch('minicpm3');
export const plm = mlaDenseArch('plm');
