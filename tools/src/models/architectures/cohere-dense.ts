// Cohere's dense decoders: `cohere2` (Command R7B, Command A; llama.cpp src/models/cohere2.cpp,
// converted by conversion/command_r.py Cohere2Model) and `command-r` (Command R 35B, Command R+
// 104B, Aya 23; src/models/command-r.cpp, CommandR2Model). The dense relatives of cohere2moe
// (architectures/cohere2moe.ts).
//
// A block (both graphs) is PARALLEL: one LayerNorm of the block input (attn_norm, weight only, no
// bias; LLM_NORM is hard-coded, eps from attention.layer_norm_epsilon, REQUIRED: there is no RMS
// variant, unlike cohere2moe) feeds both the attention and a SwiGLU MLP ffn_gate/up/down of
// feed_forward_length; the block output is ffn + block input + attention output. No ffn_norm.
// Attention: q, k, v through create_tensor_qkv (separate q/k/v with optional biases, or a fused
// attn_qkv: not written here), attn_output without bias. The loader sizes attn_q and attn_output
// as [n_embd, n_embd]: heads x head size must be n_embd. Scale 1/sqrt(head). RoPE is normal
// (LLAMA_ROPE_TYPE_NORM, adjacent pairs) over rope.dimension_count (default: the head size) at
// rope.freq_base.
//   cohere2: sliding-window attention (LLAMA_SWA_TYPE_STANDARD, attention.sliding_window
//   REQUIRED) on the blocks load_swa_pattern(ml, 4) marks: attention.sliding_window_pattern as an
//   array (BOOL per block, true = sliding) when the key is an array; else as a period p (UINT32;
//   default 4, dense_first false): block il slides iff p == 0 or il % p < p - 1, so by default
//   blocks 0, 1, 2 slide and block 3 is full (HF's (i + 1) % 4 != 0). At least one block must
//   slide: the model always gets llama_kv_cache_iswa, which asserts is_swa_any() (period 1 or an
//   all-false array abort at context creation; refused here). RoPE ONLY on the sliding
//   blocks: full blocks attend without positions (NoPE). The loader reads rope.freq_base_swa but
//   the graph never uses it (its per-layer freq base is commented out): the sliding blocks rotate
//   at rope.freq_base. logit_scale REQUIRED. The converter writes no pattern key (llama.cpp's
//   default applies), writes vocab_size and rope.dimension_count (rotary_pct x head size).
//   command-r: every block full attention with RoPE (no window keys read). logit_scale optional
//   (absent: hparams.f_logit_scale stays 0 and the graph skips the multiply, i.e. x 1). When
//   block_count >= 64 (Command R+) every block has per-head LayerNorms on q and k after the
//   projections and before RoPE: attn_q_norm [head, n_head] and attn_k_norm [head, n_head_kv]
//   (one weight row per head, no bias, the same eps); below 64 blocks the loader takes none (a
//   file with them fails the tensor count). The converter writes neither vocab_size nor
//   rope.dimension_count nor key_length (CohereConfig has no head_dim).
// Both: output_norm (LayerNorm, weight only), and the head is ALWAYS token_embd: the loader
// creates output from token_embd (TENSOR_DUPLICATED) and never looks for output.weight (a file
// with one fails the tensor count); logits times logit_scale.
//
// Keys as the converters write them: block_count, context_length, embedding_length,
// feed_forward_length, attention.head_count, attention.head_count_kv, rope.freq_base,
// attention.layer_norm_epsilon (FLOAT32), logit_scale (FLOAT32), rope.scaling.type "none";
// cohere2 also attention.sliding_window (UINT32), vocab_size, rope.dimension_count. The writer
// adds attention.sliding_window_pattern (BOOL array or UINT32 period) only when the config has
// one, and attention.key_length / value_length only when headDim is set explicitly.
// Checked against the bundled llama.cpp sources (src/models/cohere2.cpp, src/models/command-r.cpp,
// src/llama-model.cpp rope type / load_swa_pattern / create_tensor_qkv / the n_rot defaults,
// src/llama-hparams.cpp set_swa_pattern, src/llama-model-loader.cpp get_arr, src/llama-quant.cpp
// (norm weights never quantized), conversion/command_r.py, conversion/base.py, gguf-py constants.py).
import { checkFullWidthHeads, embeddings, f32Tensor, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

/**
 * logitScale: logit_scale (cohere2: required; command-r: optional, absent = key not written,
 * llama.cpp then does not scale). qkvBias: attn_q/k/v.bias (the loader's optional biases; the
 * converters write none). tiedEmbeddings must be true (the loader's head is token_embd).
 * normEps: attention.layer_norm_epsilon. headDim: must be dim / nHeads; when set, written as
 * attention.key_length / value_length.
 */
export type CohereDenseConfig = ModelConfig & {
  logitScale?: number;
  qkvBias?: boolean;
};

/**
 * window: attention.sliding_window (required). swaPattern: attention.sliding_window_pattern,
 * either one BOOL per block (true = sliding) or a UINT32 period p (block i slides iff p == 0 or
 * i % p < p - 1); absent: no key, llama.cpp's default period 4 (blocks 0-2 slide, 3 full, ...),
 * which --layers N keeps. At least one block must slide.
 */
export type Cohere2Config = CohereDenseConfig & {
  window: number;
  swaPattern?: boolean[] | number;
  logitScale: number;
};

/**
 * qkNormStd: the std of the per-head q/k LayerNorm weights around 1 (written only when nLayers >=
 * 64, llama.cpp's Command R+ rule; default 0.5: a reader that shares one row across heads is
 * off by ~2e-2 NMSE in the logits of tiny-command-r-plus).
 */
export type CommandRConfig = CohereDenseConfig & {
  qkNormStd?: number;
};

/** The block count from which llama.cpp's command-r loader takes per-head q/k norms. */
export const COMMAND_R_QK_NORM_LAYERS = 64;

/** Whether command-r block tensors include attn_q_norm / attn_k_norm (llama.cpp: n_layer >= 64). */
export const commandRHasQkNorm = (c: ModelConfig) => c.nLayers >= COMMAND_R_QK_NORM_LAYERS;

/** Whether cohere2 block i slides (the pattern array, else load_swa_pattern's period rule, default 4, dense_first false). */
export function cohere2IsSwa(c: Cohere2Config, i: number): boolean {
  const p = c.swaPattern ?? 4;
  if (Array.isArray(p)) return p[i];
  return p === 0 || i % p < p - 1;
}

/** Whether cohere2 block i applies RoPE (only the sliding blocks; the full ones are NoPE). */
export const cohere2UsesRope = (c: Cohere2Config, i: number) => cohere2IsSwa(c, i);

/** Std of the tied token_embd (the head): logits of std ~2 after the logit_scale multiply (x 1 when absent). */
export const cohereDenseHeadStd = (c: CohereDenseConfig) => 2 / (Math.sqrt(c.dim) * (c.logitScale ?? 1));

const isPosInt = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x > 0;
const isPosFinite = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;

/** The checks both loaders share; returns the config with its defaults. */
function normalizeCommon(c: ModelConfig, a: string, logitScaleRequired: boolean): CohereDenseConfig {
  const x = c as CohereDenseConfig;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error(`${a}: a dense architecture (nExperts / nExpertsUsed must be 0, got ${c.nExperts} / ${c.nExpertsUsed}; use cohere2moe for experts)`);
  // The loader sizes attn_q and attn_output as n_embd x n_embd.
  checkFullWidthHeads(c, 'attn_q and attn_output');
  if (!(c.ropeBase > 0) || !Number.isFinite(c.ropeBase)) throw new Error(`${a}: ropeBase must be positive, got ${String(c.ropeBase)}`);
  if (!isPosFinite(c.normEps)) throw new Error(`${a}: normEps must be positive (attention.layer_norm_epsilon is required), got ${String(c.normEps)}`);
  if (c.tiedEmbeddings !== true) throw new Error(`${a}: tiedEmbeddings must be true (the loader's head is always token_embd; it never reads output.weight), got ${String(c.tiedEmbeddings)}`);
  if (logitScaleRequired ? !isPosFinite(x.logitScale) : x.logitScale !== undefined && !isPosFinite(x.logitScale)) {
    throw new Error(`${a}: logitScale must be a positive finite number (logit_scale ${logitScaleRequired ? 'is required' : 'or absent: no key, no scaling'}), got ${String(x.logitScale)}`);
  }
  if (x.qkvBias !== undefined && typeof x.qkvBias !== 'boolean') throw new Error(`${a}: qkvBias must be a boolean (or absent), got ${String(x.qkvBias)}`);
  return x;
}

/** baseMetadata with attention.layer_norm_epsilon in place of the RMS eps, less the keys `drop` names. */
function commonMetadata(a: string, c: CohereDenseConfig, drop: string[]): [string, GgufValue][] {
  const m = baseMetadata(a, c)
    .filter(([k]) => !drop.includes(k.slice(a.length + 1)))
    .map(([k, v]): [string, GgufValue] => (k === `${a}.attention.layer_norm_rms_epsilon` ? [`${a}.attention.layer_norm_epsilon`, v] : [k, v]));
  if (c.logitScale !== undefined) m.push([`${a}.logit_scale`, kv.f32(c.logitScale)]);
  return m;
}

// Scales. Every reader of the stream normalizes it first (attn_norm / output_norm LayerNorms,
// weights ~1), so the shared rules apply: q/k/v at unit gain over the normed input. The head is
// the tied token_embd, at 2 / (sqrt(dim) x logitScale) so the logits have std ~2 after the multiply
// (as cohere2moe); it is the input embedding too, so its std (4 at logit_scale 0.0625, 0.3 at
// 0.8333) is the stream's start. attn_output and ffn_down (the two join the stream side by side)
// are at residualGain (1/sqrt(2L)) times that std: the blocks then weigh against the embedding as
// in the untied presets (embedding std 1, writers at residualGain); at std 4 and plain
// residualGain the stream would be 94% embedding and the blocks barely move the logits.
// (logit_scale 0.25 at n_embd 64 gives std 1: cohere2moe's scales exactly.)
function blockTensors(c: CohereDenseConfig, i: number, qkNorm?: number): TensorSpec[] {
  const hd = c.dim / c.nHeads;
  const nKv = hd * c.nKvHeads;
  const rg = residualGain(c) * cohereDenseHeadStd(c);
  const p = `blk.${i}`;
  const t: TensorSpec[] = [norm(`${p}.attn_norm.weight`, c.dim, i)];
  if (qkNorm !== undefined) {
    // One LayerNorm weight row per head (ggml [head, n_head]); norm weights stay F32 (llama-quant
    // never quantizes *_norm.weight): role 'bias'. Values around 1, every head its own row.
    t.push(
      f32Tensor(`${p}.attn_q_norm.weight`, [hd, c.nHeads], { kind: 'normal', mean: 1, std: qkNorm }, i),
      f32Tensor(`${p}.attn_k_norm.weight`, [hd, c.nKvHeads], { kind: 'normal', mean: 1, std: qkNorm }, i),
    );
  }
  t.push(
    linear(`${p}.attn_q.weight`, c.dim, c.dim, 'attn_q', i),
    linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i),
    linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i),
  );
  if (c.qkvBias) {
    const bias = (name: string, n: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
    t.push(bias(`${p}.attn_q.bias`, c.dim), bias(`${p}.attn_k.bias`, nKv), bias(`${p}.attn_v.bias`, nKv));
  }
  t.push(
    linear(`${p}.attn_output.weight`, c.dim, c.dim, 'attn_output', i, rg),
    linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
    linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
    linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, rg),
  );
  return t;
}

/** token_embd (the head: at the logits' scale) and output_norm; never output.weight. */
function globalTensors(c: CohereDenseConfig): TensorSpec[] {
  const std = cohereDenseHeadStd(c);
  return embeddings(c).map((s): TensorSpec => (s.name === 'token_embd.weight' ? { ...s, init: { kind: 'normal', std } } : s));
}

export const cohere2: ArchDefinition = {
  name: 'cohere2',
  ggufArch: 'cohere2',
  normalize(c: ModelConfig): ModelConfig {
    const a = 'cohere2';
    const x = normalizeCommon(c, a, true) as Cohere2Config;
    if (!isPosInt(x.window)) throw new Error(`${a}: window must be a positive integer (attention.sliding_window is required), got ${String(x.window)}`);
    const p = x.swaPattern;
    if (Array.isArray(p)) {
      if (p.length !== c.nLayers) throw new Error(`${a}: swaPattern must have one flag per block (${c.nLayers}), got length ${p.length}`);
      p.forEach((f, i) => {
        if (typeof f !== 'boolean') throw new Error(`${a}: swaPattern[${i}] must be a boolean (true = sliding), got ${String(f)}`);
      });
    } else if (p !== undefined && !(typeof p === 'number' && Number.isInteger(p) && p >= 0)) {
      throw new Error(`${a}: swaPattern must be a boolean array (one flag per block) or a non-negative integer period (0: every block slides), got ${String(p)}`);
    }
    // llama.cpp builds cohere2's cache as llama_kv_cache_iswa and asserts is_swa_any() there (a
    // file whose pattern has no sliding block aborts at context creation).
    if (!Array.from({ length: c.nLayers }, (_, i) => cohere2IsSwa(x, i)).some(Boolean)) {
      throw new Error(`${a}: swaPattern ${JSON.stringify(p)} leaves no sliding block in ${c.nLayers}; llama.cpp's cohere2 cache needs at least one (it asserts is_swa_any())`);
    }
    if ((x as CommandRConfig).qkNormStd !== undefined) throw new Error(`${a}: qkNormStd is command-r's (cohere2 has no q/k norms)`);
    return { ...x };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const x = c as Cohere2Config;
    const a = 'cohere2';
    const m = commonMetadata(a, x, []);
    m.push([`${a}.attention.sliding_window`, kv.u32(x.window)]);
    if (Array.isArray(x.swaPattern)) m.push([`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, x.swaPattern)]);
    else if (x.swaPattern !== undefined) m.push([`${a}.attention.sliding_window_pattern`, kv.u32(x.swaPattern)]);
    m.push([`${a}.rope.scaling.type`, kv.str('none')]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const x = c as Cohere2Config;
    const t = globalTensors(x);
    for (let i = 0; i < c.nLayers; i++) t.push(...blockTensors(x, i));
    return t;
  },
};

export const commandR: ArchDefinition = {
  name: 'command-r',
  ggufArch: 'command-r',
  normalize(c: ModelConfig): ModelConfig {
    const a = 'command-r';
    const x = normalizeCommon(c, a, false) as CommandRConfig & Partial<Cohere2Config>;
    for (const f of ['window', 'swaPattern'] as const) {
      if (x[f] !== undefined) throw new Error(`${a}: ${f} is cohere2's (command-r attends over the whole context in every block)`);
    }
    if (x.qkNormStd !== undefined && (typeof x.qkNormStd !== 'number' || !Number.isFinite(x.qkNormStd) || x.qkNormStd < 0)) {
      throw new Error(`${a}: qkNormStd must be a non-negative finite number (the per-head q/k norm weights' std around 1), got ${String(x.qkNormStd)}`);
    }
    return { ...x, qkNormStd: x.qkNormStd ?? 0.5 } as CommandRConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const a = 'command-r';
    // The converter writes no vocab_size and no rope.dimension_count (llama.cpp: the head size).
    const m = commonMetadata(a, c as CommandRConfig, ['vocab_size', 'rope.dimension_count']);
    m.push([`${a}.rope.scaling.type`, kv.str('none')]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const x = c as CommandRConfig;
    const t = globalTensors(x);
    const qk = commandRHasQkNorm(c) ? x.qkNormStd ?? 0.5 : undefined;
    for (let i = 0; i < c.nLayers; i++) t.push(...blockTensors(x, i, qk));
    return t;
  },
};
