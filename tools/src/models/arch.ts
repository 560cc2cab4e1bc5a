// An architecture is a small declarative description: the GGUF metadata it needs and the list of
// tensors (name, ggml shape, how to initialize, what role it plays for quantization). Everything
// else (weight generation, type selection, writing) is shared. Names and shapes follow
// llama.cpp's src/llama-arch.cpp (LLM_TENSOR_* names) and src/models/<arch>.cpp (load_arch_tensors).
import type { GgufValue } from '../gguf/writer';
import type { VocabKind } from './vocab';

/** Shape of a generated model. Fields an architecture does not use are ignored by it. */
export interface ModelConfig {
  /** Builder name (`--arch`): llama, mixtral, qwen2moe, qwen3moe, ... */
  arch: string;
  name: string;
  nLayers: number;
  /** Hidden size (n_embd). */
  dim: number;
  /** Dense FFN size; for llama-style MoE (mixtral) also the expert FFN size. */
  ff: number;
  nHeads: number;
  nKvHeads: number;
  /** Per-head size; defaults to dim / nHeads. */
  headDim?: number;
  nExperts: number;
  nExpertsUsed: number;
  /** Expert FFN size (qwen2moe/qwen3moe `expert_feed_forward_length`). */
  expertFf: number;
  /** Shared-expert FFN size (qwen2moe). */
  sharedFf: number;
  vocabSize: number;
  vocabKind: VocabKind;
  /** Replaces the vocabulary's chat template (tokenizer.chat_template) when set. */
  chatTemplate?: string;
  /** Training context length written to the file. */
  ctx: number;
  ropeBase: number;
  normEps: number;
  /** No `output.weight`; llama.cpp reuses token_embd. */
  tiedEmbeddings: boolean;
  /**
   * A reranker's classification head (qwen3): `cls.output.weight` with one row per label,
   * `<arch>.classifier.output_labels` and `<arch>.pooling_type` 4 (rank), as convert_hf_to_gguf
   * writes Qwen3-Reranker files.
   */
  clsLabels?: string[];
  /** An encoder's `<arch>.pooling_type` (1 mean, 2 CLS; default 1). */
  pooling?: number;
  /** An encoder's `<arch>.attention.causal` (default false, as converted encoders). */
  causal?: boolean;
  /** `tokenizer.chat_template.rerank`: the reranker's prompt with {query} and {document}. */
  rerankTemplate?: string;
}

/** How a tensor's values are drawn (always in F32, before any conversion). */
export type WeightInit =
  /**
   * Approximately normal with this mean and standard deviation; with zeroLead the first zeroLead
   * values are 0 instead (Granite Switch's stacked LoRA tensors: slot 0, the base model, is zero).
   */
  | { kind: 'normal'; std: number; mean?: number; zeroLead?: number }
  | { kind: 'const'; value: number }
  /**
   * The same ramp in every row (along shape[0]): start, start + step, ... (Mamba's S4D-real
   * A = 1..d_state per channel, stored as ssm_a = -A: start -1, step -1).
   */
  | { kind: 'ramp'; start: number; step: number }
  /**
   * Every row (along shape[0]) holds `head` in its first `n` entries and `tail` in the rest
   * (Gemma 4's proportional-RoPE rope_freqs: factor 1 on the rotated pairs, 1e30 on the others).
   */
  | { kind: 'step'; n: number; head: number; tail: number }
  /**
   * Every row (along shape[0], which must be values.length) holds these values (step35's llama3
   * rope_freqs factors, computed as its converter does).
   */
  | { kind: 'values'; values: readonly number[] }
  /**
   * An MLA attn_kv_b ([kv_lora, n_head x (qk_nope + v_head)]) that is the fold of the attn_k_b
   * ([qk_nope, kv_lora, n_head]) and attn_v_b ([kv_lora, v_head, n_head]) a split file of the same
   * seed holds under the names kB and vB (each a normal draw of mean 0 and this std): the inverse of
   * the converters' split (conversion/deepseek.py, kimi_linear.py), so the two files are one model.
   */
  | { kind: 'mla_kv_b_fold'; kB: string; vB: string; std: number; qkNope: number; vHead: number }
  /**
   * Expert ids (written as I32): every row (along shape[0], the experts a token uses) holds
   * shape[0] distinct ids in [0, nExpert), drawn per row (DeepSeek-V4's hash routing table).
   */
  | { kind: 'expert_ids'; nExpert: number };

/** What a tensor is, for the type rules of mixed quantizations (llama.cpp's tensor categories). */
export type TensorRole =
  | 'token_embd'
  | 'output'
  | 'norm'
  | 'attn_q'
  | 'attn_k'
  | 'attn_v'
  | 'attn_output'
  | 'attn_bias'
  | 'ffn_gate'
  | 'ffn_up'
  | 'ffn_down'
  | 'router'
  | 'shexp_gate'
  /** A bias of any shape (gpt-oss's per-expert [ff, n_expert] biases, attention sinks): always F32. */
  | 'bias'
  /** NextN (MTP) eh_proj: a plain 2*dim -> dim linear, typed like attn_q / ffn_gate (the default rule). */
  | 'nextn_eh_proj'
  /** An integer table (DeepSeek-V4's ffn_gate_tid2eid): always I32. */
  | 'index'
  /** A 64-bit integer table (EAGLE-3's d2t): always I64. */
  | 'index64';

export interface TensorSpec {
  name: string;
  /** ggml order: shape[0] is the row length (input features for a weight matrix). */
  shape: number[];
  init: WeightInit;
  role: TensorRole;
  /** Block index for per-layer tensors. */
  layer?: number;
}

export interface ArchDefinition {
  /** The `--arch` name. */
  name: string;
  /** `general.architecture`. */
  ggufArch: string;
  /** Checks the config and fills derived defaults; throws on shapes the architecture cannot take. */
  normalize(config: ModelConfig): ModelConfig;
  /** Architecture keys (`<arch>.*`); general.* and tokenizer.* are written by the builder. */
  metadata(config: ModelConfig): [string, GgufValue][];
  tensors(config: ModelConfig): TensorSpec[];
}

// ---- shared helpers -------------------------------------------------------------------------

export function headDim(c: ModelConfig): number {
  return c.headDim ?? c.dim / c.nHeads;
}

/** Norm gains near 1 so normalized activations keep unit scale. */
export const NORM_INIT: WeightInit = { kind: 'normal', mean: 1, std: 0.1 };

/** A projection with `nIn` inputs: std 1/sqrt(nIn) keeps outputs at the scale of the inputs. */
export function linearInit(nIn: number, gain = 1): WeightInit {
  return { kind: 'normal', std: gain / Math.sqrt(nIn) };
}

/**
 * Gain for projections that write into the residual stream (attn_output, ffn_down*): 1/sqrt(2L),
 * as GPT-2 initializes them. The stream's variance then stays O(1) at any depth and remains
 * dominated by the token embedding, so deep layers still see token-specific inputs (without it,
 * attention averaging builds a shared direction and deep routers send every token to one expert).
 */
export function residualGain(c: ModelConfig): number {
  return 1 / Math.sqrt(2 * c.nLayers);
}

export function norm(name: string, n: number, layer?: number): TensorSpec {
  return { name, shape: [n], init: NORM_INIT, role: 'norm', layer };
}

/** A tensor every file keeps in F32 whatever its shape (role 'bias': convolution taps, SSM parameters). */
export function f32Tensor(name: string, shape: number[], init: WeightInit, layer?: number): TensorSpec {
  return { name, shape, init, role: 'bias', layer };
}

export function linear(name: string, nIn: number, nOut: number, role: TensorRole, layer?: number, gain = 1): TensorSpec {
  return { name, shape: [nIn, nOut], init: linearInit(nIn, gain), role, layer };
}

/** token_embd, output_norm and (unless tied) output. */
export function embeddings(c: ModelConfig): TensorSpec[] {
  // Logits end up with std ~2: peaked enough that greedy choices are stable, not one-hot.
  const out: TensorSpec[] = [
    {
      name: 'token_embd.weight',
      shape: [c.dim, c.vocabSize],
      // Tied: the same matrix makes the logits, so it gets the output scale.
      init: c.tiedEmbeddings ? linearInit(c.dim, 2) : { kind: 'normal', std: 1 },
      role: 'token_embd',
    },
    norm('output_norm.weight', c.dim),
  ];
  if (!c.tiedEmbeddings) out.push(linear('output.weight', c.dim, c.vocabSize, 'output', undefined, 2));
  return out;
}

export interface AttentionOptions {
  /** q/k/v biases (qwen2 family). */
  qkvBias?: boolean;
  /** Per-head RMS norms on q and k (qwen3 family). */
  qkNorm?: boolean;
}

/** attn_norm, q/k/v/o projections and their optional extras for block `i`. */
export function attention(c: ModelConfig, i: number, opts: AttentionOptions = {}): TensorSpec[] {
  const hd = headDim(c);
  const nQ = hd * c.nHeads;
  const nKv = hd * c.nKvHeads;
  const p = `blk.${i}`;
  const t: TensorSpec[] = [
    norm(`${p}.attn_norm.weight`, c.dim, i),
    linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i),
    linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i),
    linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i),
  ];
  if (opts.qkvBias) {
    const bias = (name: string, n: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
    t.push(bias(`${p}.attn_q.bias`, nQ), bias(`${p}.attn_k.bias`, nKv), bias(`${p}.attn_v.bias`, nKv));
  }
  if (opts.qkNorm) t.push(norm(`${p}.attn_q_norm.weight`, hd, i), norm(`${p}.attn_k_norm.weight`, hd, i));
  t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)));
  return t;
}

/** Dense SwiGLU FFN with its norm. */
export function denseFfn(c: ModelConfig, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  return [
    norm(`${p}.ffn_norm.weight`, c.dim, i),
    linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
    linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
    linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)),
  ];
}

/**
 * Router and merged expert tensors (`ffn_*_exps`, shape [in, out, n_expert]). Router logits get
 * std ~2 so the top-k choice changes from token to token without collapsing onto one expert.
 */
export function moeFfn(c: ModelConfig, i: number, expertFf: number): TensorSpec[] {
  const p = `blk.${i}`;
  const e = c.nExperts;
  return [
    norm(`${p}.ffn_norm.weight`, c.dim, i),
    linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2),
    { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, expertFf, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i },
    { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, expertFf, e], init: linearInit(c.dim), role: 'ffn_up', layer: i },
    { name: `${p}.ffn_down_exps.weight`, shape: [expertFf, c.dim, e], init: linearInit(expertFf, residualGain(c)), role: 'ffn_down', layer: i },
  ];
}

/** Shared expert with its sigmoid gate (qwen2moe). */
export function sharedExpert(c: ModelConfig, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  return [
    { name: `${p}.ffn_gate_inp_shexp.weight`, shape: [c.dim], init: linearInit(c.dim), role: 'shexp_gate', layer: i },
    linear(`${p}.ffn_gate_shexp.weight`, c.dim, c.sharedFf, 'ffn_gate', i),
    linear(`${p}.ffn_up_shexp.weight`, c.dim, c.sharedFf, 'ffn_up', i),
    linear(`${p}.ffn_down_shexp.weight`, c.sharedFf, c.dim, 'ffn_down', i, residualGain(c)),
  ];
}

export function requirePositive(c: ModelConfig, fields: (keyof ModelConfig)[]): void {
  for (const f of fields) {
    const v = c[f];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) throw new Error(`${c.arch}: ${String(f)} must be a positive integer, got ${String(v)}`);
  }
}

export function checkHeads(c: ModelConfig): void {
  if (c.headDim === undefined && c.dim % c.nHeads !== 0) throw new Error(`${c.arch}: dim ${c.dim} not divisible by heads ${c.nHeads}`);
  if (c.nHeads % c.nKvHeads !== 0) throw new Error(`${c.arch}: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads}`);
  if (headDim(c) % 2 !== 0) throw new Error(`${c.arch}: head size ${headDim(c)} must be even for RoPE`);
}

/**
 * checkHeads for loaders that size the query and attention output as n_embd (grok, dbrx, arctic):
 * heads x head size must be dim; `what` names those tensors in the error.
 */
export function checkFullWidthHeads(c: ModelConfig, what: string): void {
  const hd = c.headDim ?? c.dim / c.nHeads;
  if (!Number.isInteger(hd) || hd * c.nHeads !== c.dim) throw new Error(`${c.arch}: heads ${c.nHeads} x head size ${hd} must be dim ${c.dim} (the loader sizes ${what} as n_embd)`);
  checkHeads(c);
}
