// NVIDIA Nemotron-H (`nemotron_h`: Nemotron-H, Nemotron-Nano-9B-v2) and Nemotron-H MoE
// (`nemotron_h_moe`: Nemotron-3-Nano-30B-A3B; llama.cpp src/models/nemotron-h.cpp, whose loader
// nemotron-h-moe.cpp reuses; converted by conversion/nemotron.py NemotronHModel on top of
// GraniteHybridModel): a block is one of three kinds, told apart by the per-block arrays
// `attention.head_count_kv` and `feed_forward_length`: a Mamba2 mixer (both 0; architectures/
// mamba2.ts), GQA attention without positions (kv heads > 0, ff 0) or an FFN (ff > 0): relu² up/down
// without a gate (nemotron_h), or sigmoid-routed experts with a selection bias (exp_probs_b),
// renormalized and scaled, whose up/down are relu² without a gate too, plus a relu² shared expert
// (nemotron_h_moe; the gating is fixed in llama.cpp's graph and the converter writes no
// expert_gating_func). Every block has only attn_norm (its input norm) and a plain residual; there
// is no ffn_norm. The pattern is HF's hybrid_override_pattern: 'M' Mamba2, '*' attention, '-' an
// FFN (nemotron_h), 'E' experts (nemotron_h_moe).
// MTP (Nemotron 3 Super; HF num_nextn_predict_layers, option `nextn`, nemotron_h_moe only): one
// trailing block blk.<nLayers> after the trunk, counted in block_count with nextn_predict_layers 1
// (llama.cpp: n_layer = block_count - nextn_predict_layers). The converter folds HF's two MTP
// layers into it and registers it as both an attention and an expert block, so both per-block
// arrays cover it (head_count_kv = the KV heads, feed_forward_length = moe_intermediate_size).
// mtp.layers.0 gives nextn.enorm / hnorm / eh_proj {2*dim, dim} and a NoPE attention sub-layer
// (attn_norm, attn_q/k/v, attn_output); mtp.layers.1 its norm as post_attention_norm (llama.cpp's
// attn_post_norm: the experts' input RMS norm), the trunk's expert layout (router, exp_probs_b,
// optional latent projections, relu² experts, relu² shared expert) and final_layernorm as
// nextn.shared_head_norm, which llama.cpp applies as a LayerNorm (LLM_NORM: mean-subtracted, eps
// layer_norm_epsilon, no bias) before the shared output head. The block reads [enorm(embedding);
// hnorm(h)] with h the trunk's output_norm'd state, and uses token_embd / output (the loader creates
// no nextn.embed_tokens or shared_head_head). The trunk's KV and recurrent caches skip the block.
// Latent MoE (Nemotron 3 Super; HF moe_latent_size, key `moe_latent_size`): the router still reads
// the full-width normed input, but the routed experts run in a narrower latent width, between
// ffn_latent_down {n_embd, latent} (HF fc1_latent_proj) and ffn_latent_up {latent, n_embd}
// (fc2_latent_proj); the shared expert stays full width.
import { attention, checkHeads, denseFfn, embeddings, headDim, linear, moeFfn, norm, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { nextnTensors, ungatedSharedExpert } from './deepseek2';
import { probsBias } from './llama-moe';
import { checkMamba2, mamba2Metadata, mamba2Mixer, type Mamba2Shape } from './mamba2';

/**
 * pattern: one character per block (see above), repeated to --layers N; ssm: the Mamba2 mixer;
 * ff: the FFN blocks' width (nemotron_h); moe (nemotron_h_moe): expert_weights_norm and
 * expert_weights_scale (HF norm_topk_prob, routed_scaling_factor), with experts of expertFf and one
 * shared expert of sharedFf; biasStd: exp_probs_b's std (default probsBias's 0.05). The bias is
 * added to sigmoid probabilities, which near the top of many experts saturate close to 1: with
 * 128 experts top-6 a bias of 0.05 outweighs the router (a few experts take 3-4x their share and
 * some are never chosen), so the bench preset takes 0.002, near the unbiased balance while still
 * changing some tokens' choices. latent (nemotron_h_moe only): the routed experts' width (HF
 * moe_latent_size), with ffn_latent_down / ffn_latent_up around them; unset: full width (dim).
 * nextn (nemotron_h_moe only): 1 writes the MTP block after the trunk (see above); 0 or unset: none.
 */
export type NemotronHConfig = ModelConfig & {
  headDim: number;
  pattern: string;
  ssm: Mamba2Shape;
  moe?: { normW: boolean; wScale: number; biasStd?: number };
  latent?: number;
  nextn?: 0 | 1;
};

/** Drops the tensors whose names end with one of `suffixes` (the helpers' parts these blocks lack). */
const without = (t: TensorSpec[], ...suffixes: string[]) => t.filter((s) => !suffixes.some((x) => s.name.endsWith(x)));

/**
 * An 'E' block's router, selection bias and relu² experts (no gates, no ffn_norm). With a latent
 * width they are in llama.cpp's load order (router, exp_probs_b, ffn_latent_down, ffn_latent_up,
 * then the experts; without one, the order these files had before the latent option). The router
 * keeps the full-width input; the experts are moeFfn's for a model of width `latent` (up std
 * 1/sqrt(latent), down with the residual gain over expertFf). latent_down (std 1/sqrt(dim)) keeps
 * the normed input's unit scale and latent_up (std 1/sqrt(latent)) passes the experts' sum on at
 * the scale moeFfn's down projection gave it, so the block writes to the residual stream at the
 * same scale as without a latent. The two have no llama-quant category (their names hold neither
 * `ffn_up` nor `ffn_down`), so both take the default rule, as ffn_up does.
 */
function routedBlock(c: NemotronHConfig, i: number): TensorSpec[] {
  const drop = ['.ffn_norm.weight', '.ffn_gate_exps.weight'];
  const [router, ...experts] = without(moeFfn(c, i, c.expertFf), ...drop);
  const bias = probsBias(c, i);
  const biasStd = c.moe?.biasStd;
  if (biasStd !== undefined) bias.init = { kind: 'normal', std: biasStd };
  const latent = c.latent;
  if (latent === undefined) return [router, ...experts, bias];
  const p = `blk.${i}`;
  return [
    router,
    bias,
    linear(`${p}.ffn_latent_down.weight`, c.dim, latent, 'ffn_up', i),
    linear(`${p}.ffn_latent_up.weight`, latent, c.dim, 'ffn_up', i),
    ...without(moeFfn({ ...c, dim: latent }, i, c.expertFf), ...drop, '.ffn_gate_inp.weight'),
  ];
}

/** An 'E' block's experts and its relu² shared expert (no gate). */
const expertBlock = (c: NemotronHConfig, i: number): TensorSpec[] => [...routedBlock(c, i), ...without(ungatedSharedExpert(c, i, c.sharedFf), '.ffn_gate_shexp.weight')];

/**
 * The MTP block blk.<nLayers>: the NextN inputs and head norm (nextnTensors: eh_proj std
 * 1/sqrt(2*dim) over the two RMS-normed halves starts its stream at unit scale; shared_head_norm a
 * LayerNorm weight around 1, which with output's std 2/sqrt(dim) gives logits of the trunk's
 * spread), then attention as a '*' block (attn_norm first) and the experts as an 'E' block behind
 * post_attention_norm. The writers keep the trunk's residual gain, so both sub-layers add to the
 * eh_proj stream at the scale they add to the trunk's.
 */
function mtpBlock(c: NemotronHConfig, i: number): TensorSpec[] {
  return [...nextnTensors(c, i), ...attention(c, i), norm(`blk.${i}.post_attention_norm.weight`, c.dim, i), ...expertBlock(c, i)];
}

function nemotronHArch(name: 'nemotron_h' | 'nemotron_h_moe'): ArchDefinition {
  const moe = name === 'nemotron_h_moe';
  const ffnChar = moe ? 'E' : '-';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      const n = c as NemotronHConfig;
      requirePositive(c, ['nLayers', 'dim', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', ...(moe ? (['expertFf', 'sharedFf'] as const) : (['ff'] as const))]);
      checkHeads(c);
      checkExperts(c, moe);
      if (!moe && c.nExperts > 0) throw new Error('nemotron_h: dense; use nemotron_h_moe for experts');
      if (moe && (!n.moe || !(n.moe.wScale >= 0))) throw new Error('nemotron_h_moe: needs moe { normW, wScale } (use a preset)');
      if (n.moe?.biasStd !== undefined && !(n.moe.biasStd >= 0)) throw new Error(`${name}: moe.biasStd must be >= 0`);
      checkMamba2(name, n.ssm);
      if (n.latent !== undefined) {
        if (!moe) throw new Error('nemotron_h: latent is for the experts of nemotron_h_moe');
        if (!Number.isInteger(n.latent) || n.latent <= 0) throw new Error(`nemotron_h_moe: latent must be a positive integer, got ${String(n.latent)}`);
      }
      if (n.nextn !== undefined && n.nextn !== 0 && n.nextn !== 1) throw new Error(`${name}: nextn must be 0 or 1 (llama.cpp runs a single MTP block), got ${String(n.nextn)}`);
      if (n.nextn && !moe) throw new Error('nemotron_h: the MTP block (nextn) is nemotron_h_moe\'s');
      if (typeof n.pattern !== 'string' || n.pattern.length === 0 || [...n.pattern].some((b) => !['M', '*', ffnChar].includes(b))) throw new Error(`${name}: pattern needs one of M, * and ${ffnChar} per block (use a preset)`);
      // --layers N: the preset's pattern, cut or repeated to N blocks.
      const pattern = Array.from({ length: c.nLayers }, (_, i) => n.pattern[i % n.pattern.length]).join('');
      return { ...c, headDim: headDim(c), pattern } as NemotronHConfig;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const n = c as NemotronHConfig;
      const a = name;
      const blocks = [...n.pattern];
      const nextn = n.nextn ?? 0;
      const m: [string, GgufValue][] = [
        ...baseMetadata(a, c)
          .filter(([k]) => k !== `${a}.attention.head_count_kv` && k !== `${a}.feed_forward_length`)
          // The converter counts the MTP block in block_count (llama.cpp: n_layer = block_count - nextn_predict_layers).
          .map(([k, v]): [string, GgufValue] => (k === `${a}.block_count` ? [k, kv.u32(c.nLayers + nextn)] : [k, v])),
        // Per-block arrays, as the converter (gguf-py add_array of Python ints): INT32. The MTP
        // block is both an attention and an expert block (the converter's _attn_layers and _mlp_layers).
        [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, [...blocks.map((b) => (b === '*' ? c.nKvHeads : 0)), ...Array<number>(nextn).fill(c.nKvHeads)])],
        [`${a}.feed_forward_length`, kv.arr(GgufType.INT32, [...blocks.map((b) => (b === ffnChar ? (moe ? c.expertFf : c.ff) : 0)), ...Array<number>(nextn).fill(c.expertFf)])],
        // HF layer_norm_epsilon, which the loader requires (the MTP head's LayerNorm); layer_norm_rms_epsilon above is HF norm_eps.
        [`${a}.attention.layer_norm_epsilon`, kv.f32(c.normEps)],
        // GraniteHybridModel's switch: no RoPE for a hybrid (llama.cpp runs these blocks without positions regardless).
        [`${a}.rope.scaling.finetuned`, kv.bool(false)],
        ...mamba2Metadata(a, n.ssm),
      ];
      if (moe)
        m.push(
          [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
          [`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)],
          [`${a}.expert_shared_count`, kv.u32(1)],
          [`${a}.expert_weights_norm`, kv.bool(n.moe!.normW)],
          [`${a}.expert_weights_scale`, kv.f32(n.moe!.wScale)],
          // HF n_group / topk_group of 1: no group-limited routing.
          [`${a}.expert_group_count`, kv.u32(1)],
          [`${a}.expert_group_used_count`, kv.u32(1)],
        );
      // gguf-py add_moe_latent_size: UINT32, only when the HF config has moe_latent_size.
      if (moe && n.latent !== undefined) m.push([`${a}.moe_latent_size`, kv.u32(n.latent)]);
      // gguf-py add_nextn_predict_layers: UINT32, last (the converter's set_gguf_parameters ends with it).
      if (nextn) m.push([`${a}.nextn_predict_layers`, kv.u32(nextn)]);
      return m;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const n = c as NemotronHConfig;
      const t = embeddings(c);
      for (let i = 0; i < c.nLayers; i++) {
        const b = n.pattern[i];
        // attention() starts with the block's attn_norm; the other kinds add it themselves.
        if (b === '*') t.push(...attention(c, i));
        else {
          t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i));
          if (b === 'M') t.push(...mamba2Mixer(c, i, n.ssm));
          else if (!moe) t.push(...without(denseFfn(c, i), '.ffn_norm.weight', '.ffn_gate.weight'));
          else t.push(...expertBlock(n, i));
        }
      }
      if (n.nextn) t.push(...mtpBlock(n, c.nLayers));
      return t;
    },
  };
}

export const nemotronH = nemotronHArch('nemotron_h');
export const nemotronHMoe = nemotronHArch('nemotron_h_moe');
