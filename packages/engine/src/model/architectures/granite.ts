import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { denseGatedFfn, type ProgramBuilder, qkvProjections, ropeFactorTensor, ropeParams, trunkStart, withBias } from '../program-builder';
import { hiddenOutput, moeBlockFfn, readMoeRouting, tensorLookup } from './deepseek2';
import { requiredSlidingWindowPattern } from './gpt-oss';
import { mamba2Mixer, readMamba2Dims } from './mamba2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** A positive finite scale from the file, or `def` when the key is absent. */
function scaleKey(hp: HParams, key: string, def: number | undefined): number {
  const v = hp.meta.num(key, def);
  if (!Number.isFinite(v) || v < 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${key} ${v} is not a non-negative finite number`);
  return v;
}

/**
 * IBM Granite 3.x (`granite`, dense) and Granite MoE (`granitemoe`, with or without a shared
 * expert), llama.cpp's src/models/granite.cpp: the Llama graph with Granite's multipliers: the
 * token embedding times `embedding_scale`, attention scaled by `attention.scale`, each block's
 * attention and FFN outputs times `residual_scale` before their residual adds, and the logits
 * divided by `logit_scale`. Routed blocks: softmax top-k renormalized, plus an ungated shared
 * expert when `expert_shared_feed_forward_length` is set. Dense Granite rotates only when
 * `rope.scaling.finetuned` is not false (llama.cpp's switch for it).
 *
 * Granite 4.0-H (`granitehybrid`, src/models/granite-hybrid.cpp) is the same with Mamba-2 mixers in
 * the blocks without KV heads, and rotates only when `rope.scaling.finetuned` is not false (its
 * converter writes false for the hybrids, which then use no positional encoding).
 *
 * Granite with sliding-window attention (`granite_swa`, src/models/granite-swa.cpp; Granite 4.1's
 * GraniteSWA / GraniteMoeSWA) is granite/granitemoe with: the blocks `attention.sliding_window_pattern`
 * flags (an array, required) attending through `attention.sliding_window`, a learned sink per head
 * in every block (attn_sinks), RoPE per block by the optional `attention.rope_pattern` array (0:
 * NoPE; default every block, rope.scaling.finetuned is not read), all blocks dense (optional FFN
 * biases) or all routed (expert_count), experts fused as ffn_gate_up_exps or split, and a shared
 * expert whose gate and up are one ffn_up_shexp of 2 x expert_shared_feed_forward_length (gate rows first).
 */
export function buildGranite(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  // MiniCPM (minicpm.cpp) runs this graph with defaults of its own for older files (embedding x12,
  // residual 1.4 / sqrt(block_count), logits / (256 / n_embd), in float), always rotates and
  // scores by 1/sqrt(head): its loader reads neither attention.scale nor rope.scaling.finetuned.
  const minicpm = hp.arch === 'minicpm';
  const logitScale = scaleKey(hp, 'logit_scale', minicpm ? Math.fround(256 / hp.nEmbd) : undefined);
  if (logitScale === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: logit_scale must not be 0`);
  const residualScale = scaleKey(hp, 'residual_scale', minicpm ? Math.fround(Math.fround(1.4) / Math.fround(Math.sqrt(hp.nLayer))) : 0);
  const embeddingScale = scaleKey(hp, 'embedding_scale', minicpm ? 12 : 0);
  if (hp.meta.has('deepstack_mapping')) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: Granite Vision's deepstack_mapping is not supported`);
  const swaArch = hp.arch === 'granite_swa';
  const useRope = hp.arch === 'granitemoe' || minicpm || hp.meta.bool('rope.scaling.finetuned', true);
  const swa = swaArch ? readGraniteSwa(hp) : undefined;
  const mamba = hp.arch === 'granitehybrid' ? readMamba2Dims(hp) : undefined;
  const hd = hp.headDimK;
  if (hp.headDimV !== hd || hp.ropeDims !== hd)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd}, value_length ${hp.headDimV} and rope.dimension_count ${hp.ropeDims} must match`);
  // Softmax, renormalized; its loader reads no expert_weights_scale.
  const routing = readMoeRouting(hp, 1, { gating: 1, normW: true, wScale: 0 });
  const shared = hp.meta.int('expert_shared_feed_forward_length', 0, 0, MAX_DIM) > 0 ? 'required' : 'none';
  const ropeFreqs = ropeFactorTensor(hp, tensors, nCtxSeq, 'typed');
  const rope = { ...ropeParams(hp, false), head_dim: hd };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  if (embeddingScale !== 0) p.op('scale', x, { a: x, params: { scale: embeddingScale } });
  const residual = (buf: number) => {
    if (residualScale !== 0) p.op('scale', buf, { a: buf, params: { scale: residualScale } });
    p.op('add', x, { a: x, b: buf });
  };
  const ffn = (il: number) => {
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (swaArch ? hp.nExpert > 0 : tensors.has(t(il, 'ffn_gate_inp.weight'))) {
      moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'none', shared: swaArch ? 'none' : shared });
      if (swaArch && shared === 'required') fusedSharedExpert(p, hp, tensors, il, h, ffnOut);
    } else denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    residual(ffnOut);
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  };
  for (let il = 0; il < hp.nLayer; il++) {
    if (mamba && hp.nHeadKv[il] === 0) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      mamba2Mixer(p, hp, tensors, il, mamba, h, attnOut);
      residual(attnOut);
      ffn(il);
      continue;
    }
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    if (swa ? swa.rope[il] : useRope) {
      const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
      p.op('rope', q, { a: q, weights: rw, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, weights: rw, params: { ...rope, n_head: Hkv } });
    }
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      ...(swa ? { weights: { sinks: need(t(il, 'attn_sinks.weight')) } } : {}),
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: (!minicpm && hp.attentionScale) || 1 / Math.sqrt(hd), ...(swa?.slide[il] ? { window: swa.window } : {}) },
    });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
    residual(attnOut);
    ffn(il);
  }
  const ho = hiddenOutput(p, hp, need, x);
  const head = maybe('output.weight') ?? need('token_embd.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  // ggml_scale(logits, 1.0f / f_logit_scale): the reciprocal in float.
  p.op('scale', logits, { a: logits, params: { scale: Math.fround(1 / Math.fround(logitScale)) } });
  return p.build(logits);
}

/** granite_swa's sliding blocks and window (both required) and its RoPE blocks (attention.rope_pattern, optional: every block). */
function readGraniteSwa(hp: HParams): { slide: boolean[]; window: number; rope: boolean[] } {
  const slide = requiredSlidingWindowPattern(hp);
  const window = hp.meta.int('attention.sliding_window', undefined, 1, 1 << 30);
  const raw = hp.meta.kv[`${hp.arch}.attention.rope_pattern`];
  // (llama.cpp reads it with get_arr: anything but an array would be ignored, so it is refused.)
  if (raw !== undefined && (typeof raw !== 'object' || raw === null || !('length' in raw)))
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: metadata attention.rope_pattern must be an array with one flag per block`);
  const rope = hp.meta.perLayer('attention.rope_pattern', hp.nLayer, 1, 0, 1 << 30).map((v) => v !== 0);
  return { slide, window, rope };
}

/**
 * granite_swa's shared expert (llama.cpp's LLM_FFN_SWIGLU over the fused ffn_up_shexp): one product
 * of 2 x f, SiLU of its first f times its last f, ffn_down_shexp; added to `out`.
 */
function fusedSharedExpert(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const f = hp.nFfShexp;
  const up = need(t(il, 'ffn_up_shexp.weight'));
  const down = need(t(il, 'ffn_down_shexp.weight'));
  const [ud, dd] = [tensors.get(up)!.dims, tensors.get(down)!.dims];
  if (ud[0] !== hp.nEmbd || ud[1] !== 2 * f || dd[0] !== f || dd[1] !== hp.nEmbd)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il}'s shared expert is ffn_up_shexp [${ud.join(', ')}] and ffn_down_shexp [${dd.join(', ')}]; expected [${hp.nEmbd}, ${2 * f}] and [${f}, ${hp.nEmbd}] (expert_shared_feed_forward_length ${f})`);
  const gu = p.buf(`shexp_gate_up${2 * f}`, 2 * f);
  const g = p.buf(`shexp_act${f}`, f);
  const so = p.buf('sh_out', hp.nEmbd);
  p.op('matmul', gu, { a: h, weights: { weight: up } });
  p.op('swiglu', g, { a: gu, b: gu, params: { a_off: 0, b_off: f, n: f } });
  p.op('matmul', so, { a: g, weights: { weight: down } });
  p.op('add', out, { a: out, b: so });
}
