// Cohere's MoE decoder (`cohere2moe`; llama.cpp src/models/cohere2moe.cpp, converted by
// conversion/command_r.py Cohere2MoeModel): the 49-block 30B-A3B (one leading dense block, then 48
// routed ones).
//
// A block (llama.cpp's graph) is PARALLEL: one norm of the block input, attn_norm (weight only, no
// bias: a LayerNorm when the file has only attention.layer_norm_epsilon, an RMSNorm when it has
// attention.layer_norm_rms_epsilon, which wins when both are there), feeds both the attention and
// the FFN; the block output is ffn + block input + attention output. No ffn_norm. Attention: q, k,
// v (the loader takes optional q/k/v biases, or a fused attn_qkv; the converter drops HF's zero
// biases), no q/k norms, normal (non-NeoX: LLAMA_ROPE_TYPE_NORM) RoPE over the whole head
// (rope.dimension_count must be the head size: the graph asserts n_rot == head) at rope.freq_base,
// but only on the sliding-window blocks and on the leading dense blocks; the other blocks attend
// without positions (NoPE). Attention scale 1/sqrt(head); sliding blocks see the last
// attention.sliding_window positions (REQUIRED key). attention.sliding_window_pattern is a BOOL
// array per block (true = sliding), as the converter writes HF layer_types; a file without it gets
// load_swa_pattern(4, dense_first): block il slides iff il % 4 != 0 (blocks 0, 4, 8, ... full). The
// FFN over the same normed input: on the leading_dense_block_count (REQUIRED) first blocks a
// SwiGLU MLP ffn_gate/up/down of feed_forward_length; on the others routing over ffn_gate_inp
// (expert_gating_func: softmax 1 / sigmoid 2, sigmoid when absent; top-k weights renormalized when
// expert_weights_norm, scaled by expert_weights_scale when present and not 0 or 1), SwiGLU experts
// of expert_feed_forward_length (REQUIRED) as ffn_gate_exps + ffn_up_exps or one fused
// ffn_gate_up_exps ([n_embd, 2 x n_ff_exp, n_expert], gate rows first), ffn_down_exps; and with
// expert_shared_count > 0 a shared SwiGLU expert ffn_{gate,up,down}_shexp of
// expert_shared_feed_forward_length (default n_ff_exp x expert_shared_count), the FFN output then
// being (routed + shared) x 0.5. output_norm (same norm kind), output.weight optional (tied to
// token_embd when absent), logits times logit_scale (REQUIRED). NextN / MTP blocks are not written.
//
// Keys as the converter writes them: block_count, context_length, embedding_length,
// feed_forward_length, attention.head_count, attention.head_count_kv, rope.freq_base,
// attention.layer_norm_epsilon (HF layer_norm_eps) or attention.layer_norm_rms_epsilon,
// expert_count, expert_used_count, expert_gating_func (only when HF names a score function),
// attention.key_length / value_length (HF head_dim), logit_scale (FLOAT32), attention.sliding_window
// (UINT32), attention.sliding_window_pattern (BOOL array), vocab_size, expert_feed_forward_length,
// leading_dense_block_count, expert_weights_norm (BOOL, always: HF norm_topk_prob, default false),
// expert_shared_count and expert_shared_feed_forward_length (only with shared experts),
// rope.dimension_count (= head_dim), rope.scaling.type "none". The converter writes no
// expert_weights_scale; the writer can (wScale), as llama.cpp reads it.
// Checked against the bundled llama.cpp sources (src/models/cohere2moe.cpp, src/llama-model.cpp
// rope type / load_swa_pattern / create_tensor_qkv / create_tensor_gate_up_exps,
// src/llama-hparams.cpp set_swa_pattern, src/llama-graph.cpp build_moe_ffn, conversion/command_r.py,
// conversion/base.py, gguf-py constants.py).
import { embeddings, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/**
 * headDim: attention.key_length = value_length = rope.dimension_count (default dim / nHeads).
 * window: attention.sliding_window (required). swaPattern: attention.sliding_window_pattern, one
 * BOOL per block (true = sliding); absent: the converter's array for a dense-first period-4
 * layer_types (block i slides iff i % 4 != 0, llama.cpp's default too), which --layers N keeps.
 * The array is always written. logitScale: logit_scale (required). nDense:
 * leading_dense_block_count (cut to nLayers). normKind: 'layer' writes only
 * attention.layer_norm_epsilon (LayerNorm), 'rms' only attention.layer_norm_rms_epsilon (RMSNorm);
 * normEps is the value. nShared: expert_shared_count (0: no shared expert, neither shared key
 * written); sharedFf: expert_shared_feed_forward_length (0: expertFf x nShared, as the converter
 * writes). gating: expert_gating_func (softmax 1 / sigmoid 2; absent: key not written, llama.cpp
 * takes sigmoid). normW: expert_weights_norm (always written). wScale: expert_weights_scale
 * (absent: not written). fusedGateUp: ffn_gate_up_exps instead of ffn_gate_exps + ffn_up_exps.
 * qkvBias: attn_q/k/v.bias (the loader's optional biases).
 */
export type Cohere2MoeConfig = ModelConfig & {
  window: number;
  swaPattern?: boolean[];
  logitScale: number;
  nDense: number;
  normKind: 'layer' | 'rms';
  nShared: number;
  gating?: 'softmax' | 'sigmoid';
  normW: boolean;
  wScale?: number;
  fusedGateUp?: boolean;
  qkvBias?: boolean;
};

/** Whether block i slides (llama.cpp: the pattern array, else load_swa_pattern(4, dense_first)). */
export function cohere2moeIsSwa(c: Cohere2MoeConfig, i: number): boolean {
  return c.swaPattern ? c.swaPattern[i] : i % 4 !== 0;
}

/** Whether block i applies RoPE (sliding blocks and the leading dense blocks; the others are NoPE). */
export function cohere2moeUsesRope(c: Cohere2MoeConfig, i: number): boolean {
  return cohere2moeIsSwa(c, i) || i < c.nDense;
}

/** expert_gating_func values (llama.cpp LLAMA_EXPERT_GATING_FUNC_TYPE_*). */
const GATING = { softmax: 1, sigmoid: 2 } as const;

/** Std of the logits' matrix (tied: token_embd): logits of std ~2 after the logit_scale multiply. */
export const cohere2moeHeadStd = (c: Cohere2MoeConfig) => 2 / (Math.sqrt(c.dim) * c.logitScale);

const isPosInt = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x > 0;

// Scales. Every reader of the stream normalizes it first (attn_norm / output_norm, LayerNorm or
// RMSNorm, weights ~1), so the shared rules apply: q/k/v at unit gain over the normed input,
// attn_output and the FFN writers at residualGain (1/sqrt(2L)), routers at gain 2 (logits of std
// ~2: the top-k changes from token to token). With a shared expert the FFN output is
// (routed + shared) / 2, so both writers (ffn_down_exps and ffn_down_shexp) are at residualGain x
// sqrt(2): the average of the two joins the stream at residualGain. The routed mix is multiplied by
// expert_weights_scale when written, so ffn_down_exps is further divided by wScale (as step35 /
// laguna). The logits are multiplied by logit_scale: the head (or the tied token_embd) is at
// 2 / (sqrt(dim) x logitScale), logits of std ~2 after the multiply (tiny presets: dim 64 and
// logit_scale 0.25 give a tied token_embd of std 1, the untied presets' embedding scale).
export const cohere2moe: ArchDefinition = {
  name: 'cohere2moe',
  ggufArch: 'cohere2moe',
  normalize(c: ModelConfig): ModelConfig {
    const x = c as Cohere2MoeConfig;
    const a = 'cohere2moe';
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    // The loader throws without experts (n_expert / n_expert_used must be > 0).
    checkExperts(c, true);
    const hd = x.headDim ?? c.dim / c.nHeads;
    if (!isPosInt(hd)) throw new Error(`${a}: headDim must be a positive integer (dim ${c.dim} / heads ${c.nHeads} is not one; set headDim), got ${String(x.headDim ?? hd)}`);
    if (hd % 2 !== 0) throw new Error(`${a}: headDim ${hd} must be even (RoPE rotates pairs of the whole head)`);
    if (c.nHeads % c.nKvHeads !== 0) throw new Error(`${a}: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads}`);
    if (!(c.ropeBase > 0) || !Number.isFinite(c.ropeBase)) throw new Error(`${a}: ropeBase must be positive, got ${String(c.ropeBase)}`);
    if (!(c.normEps > 0) || !Number.isFinite(c.normEps)) throw new Error(`${a}: normEps must be positive, got ${String(c.normEps)}`);
    if (x.normKind !== 'layer' && x.normKind !== 'rms') {
      throw new Error(`${a}: normKind must be 'layer' (attention.layer_norm_epsilon: LayerNorm) or 'rms' (attention.layer_norm_rms_epsilon: RMSNorm), got ${String(x.normKind)}`);
    }
    if (!isPosInt(x.window)) throw new Error(`${a}: window must be a positive integer (attention.sliding_window is required), got ${String(x.window)}`);
    if (x.swaPattern !== undefined) {
      if (!Array.isArray(x.swaPattern) || x.swaPattern.length !== c.nLayers) {
        throw new Error(`${a}: swaPattern must have one flag per block (${c.nLayers}), got ${Array.isArray(x.swaPattern) ? `length ${x.swaPattern.length}` : String(x.swaPattern)}`);
      }
      x.swaPattern.forEach((f, i) => {
        if (typeof f !== 'boolean') throw new Error(`${a}: swaPattern[${i}] must be a boolean (true = sliding), got ${String(f)}`);
      });
    }
    if (typeof x.logitScale !== 'number' || !Number.isFinite(x.logitScale) || x.logitScale <= 0) {
      throw new Error(`${a}: logitScale must be a positive finite number (logit_scale is required), got ${String(x.logitScale)}`);
    }
    if (!Number.isInteger(x.nDense) || x.nDense < 0) throw new Error(`${a}: nDense must be a non-negative integer (leading_dense_block_count is required), got ${String(x.nDense)}`);
    const nShared = x.nShared ?? 0;
    if (!Number.isInteger(nShared) || nShared < 0) throw new Error(`${a}: nShared must be a non-negative integer (expert_shared_count), got ${String(x.nShared)}`);
    const sf = c.sharedFf ?? 0;
    if (!Number.isInteger(sf) || sf < 0) throw new Error(`${a}: sharedFf must be a non-negative integer (0: expertFf x nShared), got ${String(c.sharedFf)}`);
    if (nShared === 0 && sf > 0) throw new Error(`${a}: sharedFf ${sf} needs nShared > 0 (no shared expert is written without expert_shared_count)`);
    if (x.gating !== undefined && x.gating !== 'softmax' && x.gating !== 'sigmoid') {
      throw new Error(`${a}: gating must be 'softmax' or 'sigmoid' (or absent: no key, llama.cpp takes sigmoid), got ${String(x.gating)}`);
    }
    if (typeof x.normW !== 'boolean') throw new Error(`${a}: normW must be a boolean (expert_weights_norm is always written; use a preset), got ${String(x.normW)}`);
    if (x.wScale !== undefined && (!(x.wScale > 0) || !Number.isFinite(x.wScale))) throw new Error(`${a}: wScale must be a positive finite number (or absent: no expert_weights_scale), got ${String(x.wScale)}`);
    for (const f of ['fusedGateUp', 'qkvBias'] as const) {
      if (x[f] !== undefined && typeof x[f] !== 'boolean') throw new Error(`${a}: ${f} must be a boolean (or absent), got ${String(x[f])}`);
    }
    return {
      ...x,
      headDim: hd,
      nDense: Math.min(x.nDense, c.nLayers),
      nShared,
      sharedFf: nShared > 0 ? sf || c.expertFf * nShared : 0,
    } as Cohere2MoeConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const x = c as Cohere2MoeConfig;
    const a = 'cohere2moe';
    const eps = x.normKind === 'layer' ? `${a}.attention.layer_norm_epsilon` : `${a}.attention.layer_norm_rms_epsilon`;
    // baseMetadata writes the RMS eps: the norm kind's key in its place.
    const m: [string, GgufValue][] = baseMetadata(a, c).map(([k, v]): [string, GgufValue] => (k === `${a}.attention.layer_norm_rms_epsilon` ? [eps, v] : [k, v]));
    if (x.gating !== undefined) m.push([`${a}.expert_gating_func`, kv.u32(GATING[x.gating])]);
    m.push(
      [`${a}.logit_scale`, kv.f32(x.logitScale)],
      [`${a}.attention.sliding_window`, kv.u32(x.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, Array.from({ length: c.nLayers }, (_, i) => cohere2moeIsSwa(x, i)))],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.leading_dense_block_count`, kv.u32(x.nDense)],
      [`${a}.expert_weights_norm`, kv.bool(x.normW)],
    );
    if (x.nShared > 0) m.push([`${a}.expert_shared_count`, kv.u32(x.nShared)], [`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)]);
    if (x.wScale !== undefined) m.push([`${a}.expert_weights_scale`, kv.f32(x.wScale)]);
    m.push([`${a}.rope.scaling.type`, kv.str('none')]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const x = c as Cohere2MoeConfig;
    const e = c.nExperts;
    const xf = c.expertFf;
    const hd = x.headDim!;
    const nQ = hd * c.nHeads;
    const nKv = hd * c.nKvHeads;
    const rg = residualGain(c);
    const headStd = cohere2moeHeadStd(x);
    const t = embeddings(c).map((s): TensorSpec => {
      if (s.name === 'output.weight' || (s.name === 'token_embd.weight' && c.tiedEmbeddings)) return { ...s, init: { kind: 'normal', std: headStd } };
      return s;
    });
    const shared = x.nShared > 0;
    // (routed + shared) / 2: each at rg x sqrt(2); the routed mix is also multiplied by wScale.
    const routedGain = (shared ? rg * Math.SQRT2 : rg) / (x.wScale ?? 1);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i),
        linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i),
        linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i),
      );
      if (x.qkvBias) {
        const bias = (name: string, n: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
        t.push(bias(`${p}.attn_q.bias`, nQ), bias(`${p}.attn_k.bias`, nKv), bias(`${p}.attn_v.bias`, nKv));
      }
      t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, rg));
      if (i < x.nDense) {
        t.push(
          linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
          linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
          linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, rg),
        );
        continue;
      }
      t.push(linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2));
      if (x.fusedGateUp) {
        // Gate rows first, then up (the converter's torch.cat([gate, up], dim=1); build_moe_ffn's views).
        t.push({ name: `${p}.ffn_gate_up_exps.weight`, shape: [c.dim, 2 * xf, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i });
      } else {
        t.push(
          { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, xf, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i },
          { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, xf, e], init: linearInit(c.dim), role: 'ffn_up', layer: i },
        );
      }
      t.push({ name: `${p}.ffn_down_exps.weight`, shape: [xf, c.dim, e], init: linearInit(xf, routedGain), role: 'ffn_down', layer: i });
      if (shared) {
        t.push(
          linear(`${p}.ffn_gate_shexp.weight`, c.dim, c.sharedFf, 'ffn_gate', i),
          linear(`${p}.ffn_up_shexp.weight`, c.dim, c.sharedFf, 'ffn_up', i),
          linear(`${p}.ffn_down_shexp.weight`, c.sharedFf, c.dim, 'ffn_down', i, rg * Math.SQRT2),
        );
      }
    }
    return t;
  },
};
