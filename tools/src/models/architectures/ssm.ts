// Pure state-space models and Falcon-H1.
//
// `mamba` (Mamba-1: state-spaces/mamba-*, Falcon-Mamba; llama.cpp src/models/mamba.cpp, converted
// by conversion/mamba.py MambaModel): every block is attn_norm, a Mamba-1 mixer (jamba.ts's
// mamba1Mixer without the dt/B/C norm weights) and a residual add; no attention, no FFN. The
// converter writes head_count 0 and feed_forward_length 0, and `ssm.dt_b_c_rms` (true for
// Falcon-Mamba, HF model_type falcon_mamba): then dt, B and C are RMS-normed without weights
// (build_norm with a NULL weight) before dt's projection and the scan.
//
// `mamba2` (Mamba-2: state-spaces/mamba2-*, Mamba-Codestral; src/models/mamba.cpp with
// build_mamba2_layer, loaded by mamba2.cpp, converted by Mamba2Model): every block is attn_norm, a
// Mamba-2 mixer (mamba2.ts; the grouped ssm_norm is required by this loader) and a residual add.
//
// `falcon-h1` (TII Falcon-H1; src/models/falcon-h1.cpp, converted by conversion/falcon_h1.py
// FalconH1Model on top of Mamba2Model): every block runs GQA attention (NeoX RoPE over the whole
// head, scale 1/sqrt(head_dim): the loader reads no attention.scale) and a Mamba-2 mixer side by
// side on the same attn_norm output, adds both to the residual, then ffn_norm and a SwiGLU FFN.
// Falcon-H1's many multipliers (attention_in/out, key, ssm_in/out, the five zxBCdt ones, mlp,
// embedding, lm_head) are folded into the weights by the converter, so the file carries none and
// the graph applies none. The loader takes ssm_norm as optional (`plain` leaves it out) and
// ssm_conv1d.bias too, but the graph adds the bias unconditionally and aborts without it (node-llama-cpp
// 3.22.1, measured), so every file here has one. It loads an attn_output.bias and rope_freqs the
// graph never reads (not written here). Its ffn_norm is loaded as `blk.N.ffn_norm` (tn without a
// suffix), which this writer names it.
import { attention, checkHeads, denseFfn, embeddings, headDim, norm, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { sizeMetadata } from './common';
import { checkMamba1, mamba1Metadata, mamba1Mixer, type Mamba1Shape } from './jamba';
import { checkMamba2, mamba2Metadata, mamba2Mixer, type Mamba2Shape } from './mamba2';

/** dtBcRms: Falcon-Mamba's weightless RMS norms of dt, B and C (ssm.dt_b_c_rms). */
export type MambaConfig = ModelConfig & { ssm: Mamba1Shape; dtBcRms?: boolean };
/** plain: no ssm_norm (falcon-h1 only; optional in its loader). */
export type Mamba2Config = ModelConfig & { ssm: Mamba2Shape; plain?: boolean };
export type FalconH1Config = Mamba2Config & { headDim: number };

/** The keys Mamba's converters write for a model without attention or FFN (head_count 0, feed_forward_length 0). */
function ssmBaseMetadata(a: string, c: ModelConfig): [string, GgufValue][] {
  return [
    [`${a}.vocab_size`, kv.u32(c.vocabSize)],
    [`${a}.context_length`, kv.u32(c.ctx)],
    [`${a}.embedding_length`, kv.u32(c.dim)],
    [`${a}.feed_forward_length`, kv.u32(0)],
    [`${a}.attention.head_count`, kv.u32(0)],
    [`${a}.block_count`, kv.u32(c.nLayers)],
  ];
}

const withoutOptional = (t: TensorSpec[], plain: boolean | undefined) => (plain ? t.filter((s) => !/\.ssm_norm\.weight$/.test(s.name)) : t);

export const mamba: ArchDefinition = {
  name: 'mamba',
  ggufArch: 'mamba',
  normalize(c: ModelConfig): ModelConfig {
    const m = c as MambaConfig;
    requirePositive(c, ['nLayers', 'dim', 'vocabSize', 'ctx']);
    checkMamba1('mamba', m.ssm);
    if (c.nExperts > 0) throw new Error('mamba: no experts');
    return { ...c, nHeads: 0, nKvHeads: 0, ff: 0 };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as MambaConfig;
    return [
      ...ssmBaseMetadata('mamba', c),
      ...mamba1Metadata('mamba', c, m.ssm),
      ['mamba.attention.layer_norm_rms_epsilon', kv.f32(c.normEps)],
      // gguf-py add_ssm_dt_b_c_rms: BOOL, written for every Mamba-1 file.
      ['mamba.ssm.dt_b_c_rms', kv.bool(m.dtBcRms === true)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const m = c as MambaConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...mamba1Mixer(c, i, m.ssm, false));
    return t;
  },
};

export const mamba2: ArchDefinition = {
  name: 'mamba2',
  ggufArch: 'mamba2',
  normalize(c: ModelConfig): ModelConfig {
    const m = c as Mamba2Config;
    requirePositive(c, ['nLayers', 'dim', 'vocabSize', 'ctx']);
    checkMamba2('mamba2', m.ssm);
    if (c.nExperts > 0) throw new Error('mamba2: no experts');
    if (m.plain) throw new Error('mamba2: the loader requires ssm_norm and ssm_conv1d.bias (plain is falcon-h1\'s)');
    return { ...c, nHeads: 0, nKvHeads: 0, ff: 0 };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as Mamba2Config;
    return [...ssmBaseMetadata('mamba2', c), ...mamba2Metadata('mamba2', m.ssm), ['mamba2.attention.layer_norm_rms_epsilon', kv.f32(c.normEps)]];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const m = c as Mamba2Config;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...mamba2Mixer(c, i, m.ssm));
    return t;
  },
};

export const falconH1: ArchDefinition = {
  name: 'falcon-h1',
  ggufArch: 'falcon-h1',
  normalize(c: ModelConfig): ModelConfig {
    const f = c as FalconH1Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkMamba2('falcon-h1', f.ssm);
    if (c.nExperts > 0) throw new Error('falcon-h1: no experts');
    return { ...c, headDim: headDim(c) } as FalconH1Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const f = c as FalconH1Config;
    const a = 'falcon-h1';
    return [
      ...sizeMetadata(a, c),
      [`${a}.attention.key_length`, kv.u32(f.headDim)],
      [`${a}.attention.value_length`, kv.u32(f.headDim)],
      // No rope.dimension_count: llama.cpp rotates the whole head (n_rot = key_length).
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      ...mamba2Metadata(a, f.ssm),
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const f = c as FalconH1Config;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...withoutOptional(mamba2Mixer(c, i, f.ssm), f.plain));
      // attention() starts with attn_norm, which both mixers read.
      t.push(...attention(c, i));
      const [ffnNorm, ...ffn] = denseFfn(c, i);
      t.push({ ...ffnNorm, name: `blk.${i}.ffn_norm` }, ...ffn);
    }
    return t;
  },
};
