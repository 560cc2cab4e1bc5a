import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { denseGatedFfn, type ProgramBuilder, ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { slidingWindowLayers } from './gpt-oss';

const t = (i: number, name: string) => `blk.${i}.${name}`;
/** A float32 constant as llama.cpp computes it in C (sqrtf, 1.0f / x). */
const f32 = Math.fround;

/**
 * Gemma 4's attention geometry, as llama.cpp's loader requires it (its assistant drafts' too): the
 * sliding pattern as one flag per block, the window, the full and sliding head sizes (keys as wide
 * as values), and the RoPE parameters of full and sliding blocks (the sliding ones with their own
 * rotary dimensions and base).
 */
export function gemma4Attention(hp: HParams, bad: (msg: string) => never) {
  const md = hp.meta;
  const pattern = md.kv[`${hp.arch}.attention.sliding_window_pattern`];
  if (pattern === undefined || typeof pattern !== 'object' || pattern === null || !('length' in pattern))
    bad('metadata attention.sliding_window_pattern must be an array with one flag per block');
  const swa = slidingWindowLayers(hp, 0);
  const window = md.int('attention.sliding_window', undefined, 1, 1 << 30);
  const hdFull = hp.headDimK;
  if (hp.headDimV !== hdFull) bad(`key_length ${hdFull} and value_length ${hp.headDimV} must match`);
  const hdSwa = md.int('attention.key_length_swa', undefined, 1, MAX_DIM);
  if (md.int('attention.value_length_swa', undefined, 1, MAX_DIM) !== hdSwa) bad(`key_length_swa ${hdSwa} and value_length_swa must match`);
  const rotSwa = md.int('rope.dimension_count_swa', hp.ropeDims, 0, MAX_DIM);
  if (rotSwa % 2 !== 0 || rotSwa > hdSwa) bad(`rope.dimension_count_swa ${rotSwa} is not an even number of dimensions within the sliding head (${hdSwa})`);
  const baseSwa = md.num('rope.freq_base_swa', 10000);
  if (!(baseSwa > 0)) bad(`rope.freq_base_swa ${baseSwa} is not positive`);
  const ropeFull = { ...ropeParams(hp, true), head_dim: hdFull };
  const ropeSwa = { ...ropeParams(hp, true, { n_dims: rotSwa }), head_dim: hdSwa, freq_base: baseSwa, freq_scale: 1 };
  return { swa, window, hdFull, hdSwa, ropeFull, ropeSwa };
}

/**
 * Google Gemma 4 (`gemma4`, llama.cpp src/models/gemma4.cpp): 26B-A4B (experts), 31B (dense) and
 * E2B/E4B (dense with per-layer embeddings and shared KV layers).
 *
 * The embedding times sqrt(n_embd). Sliding-window blocks (`attention.sliding_window_pattern`)
 * and full blocks have their own head size (`attention.key_length_swa` / `key_length`), KV head
 * count (per-block `head_count_kv`), RoPE dimensions and base (`rope.freq_base_swa`, scale 1);
 * full blocks rotate with `rope_freqs` ("proportional" RoPE: factors of 1e30 leave the tail of
 * each head unrotated). Queries and keys are RMS-normed per head with weights, values without; a
 * block without attn_v uses its key projection (before the norms) as values; attention scale 1.
 * The last `attention.shared_kv_layers` blocks store nothing and attend over the cache of the last
 * storing block of their kind. Post-attention norm, residual. The FFN: a dense GeGLU (norm, post
 * norm), and on expert blocks also routed GeGLU experts (gate and up fused in ffn_gate_up_exps or
 * separate) on `pre_ffw_norm_2` of the stream, routed by softmax over ffn_gate_inp applied to
 * rms_norm(stream) / sqrt(n_embd) * ffn_gate_inp.scale, top-k renormalized, each expert's output
 * times its ffn_down_exps.scale; the two summed after their post norms, then `post_ffw_norm`,
 * residual. With per-layer embeddings (`embedding_length_per_layer_input` n > 0) each block then
 * adds post_norm(proj(gelu(inp_gate x) * its n-wide slice of the per-layer input)), where the
 * per-layer input is (per_layer_token_embd[token] sqrt(n) + norm(per_layer_model_proj x0 /
 * sqrt(n_embd))) / sqrt(2). A block's output times layer_output_scale when present. The head is
 * tied to the embedding unless output.weight exists, then tanh soft-capped by
 * `final_logit_softcapping`.
 */
export function buildGemma4(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const nL = hp.nLayer;
  // (llama.cpp's loader requires these: the pattern as one flag per block, the sliding head size,
  // the per-layer embedding width, and rope_freqs when a block attends in full.)
  const { swa, window, hdFull, hdSwa, ropeFull, ropeSwa } = gemma4Attention(hp, bad);
  const shared = md.int('attention.shared_kv_layers', 0, 0, nL - 1);
  const kvFrom = nL - shared;
  // llama.cpp's reuse callback: a shared block reads block kvFrom - 2 if it slides, kvFrom - 1 if not.
  if (shared > 0 && (kvFrom < 2 || !swa[kvFrom - 2] || swa[kvFrom - 1]))
    bad(`attention.shared_kv_layers ${shared} leaves blocks ${kvFrom - 2} and ${kvFrom - 1} to share from, which must be a sliding-window and a full-attention block`);
  const nEpl = md.int('embedding_length_per_layer_input', undefined, 0, MAX_DIM);
  // (llama.cpp's default when the key is absent: 30.)
  const softcap = md.num('final_logit_softcapping', 30);
  if (!(softcap >= 0) || !Number.isFinite(softcap)) bad(`final_logit_softcapping ${softcap} is not a non-negative number`);
  const ropeFreqs = swa.every(Boolean) ? undefined : need('rope_freqs.weight');
  const d = hp.nEmbd;

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  p.op('scale', x, { a: x, params: { scale: f32(Math.sqrt(d)) } });
  const ple = nEpl > 0 ? perLayerInputs(p, hp, need, x, nEpl) : -1;

  const kvOf: number[] = [];
  const ao = p.buf('attn_res', d);
  const ffnOut = p.buf('ffn_out', d);
  for (let il = 0; il < nL; il++) {
    const hd = swa[il] ? hdSwa : hdFull;
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H % Hkv !== 0) bad(`layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
    const rope = swa[il] ? ropeSwa : ropeFull;
    const ropeW = !swa[il] && ropeFreqs ? { weights: { freq_factors: ropeFreqs } } : {};
    const q = p.buf(`q${H * hd}`, H * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const fused = maybe(t(il, 'attn_qkv.weight'));
    const kvW = Hkv * hd;
    let k = -1;
    let v = -1;
    if (fused) {
      const qkv = p.buf(`qkv${H * hd + 2 * kvW}`, H * hd + 2 * kvW);
      p.op('matmul', qkv, { a: h, weights: { weight: fused } });
      p.op('copy', q, { a: qkv, params: { a_off: 0, n: H * hd } });
      if (il < kvFrom) {
        k = p.buf(`k${kvW}`, kvW);
        v = p.buf(`v${kvW}`, kvW);
        p.op('copy', k, { a: qkv, params: { a_off: H * hd, n: kvW } });
        p.op('copy', v, { a: qkv, params: { a_off: H * hd + kvW, n: kvW } });
      }
    } else {
      p.op('matmul', q, { a: h, weights: { weight: need(t(il, 'attn_q.weight')) } });
      if (il < kvFrom) {
        k = p.buf(`k${kvW}`, kvW);
        v = p.buf(`v${kvW}`, kvW);
        p.op('matmul', k, { a: h, weights: { weight: need(t(il, 'attn_k.weight')) } });
        // Without v_proj the values are the key projection (Gemma 4's attention_k_eq_v).
        const wv = maybe(t(il, 'attn_v.weight'));
        if (wv) p.op('matmul', v, { a: h, weights: { weight: wv } });
        else p.op('copy', v, { a: k });
      }
    }
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('rope', q, { a: q, ...ropeW, params: { ...rope, n_head: H } });
    sharedKvAttention(p, hp, il, { q, k, v, attn, attnOut, H, Hkv, hd, kvFrom, kvOf, window: swa[il] ? window : 0, rope: { ...ropeW, params: rope }, need, bad });
    p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', ao, { a: attnOut, b: x });

    p.op('rms_norm', h, { a: ao, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut, 'geglu');
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) moeBranch(p, hp, tensors, il, ao, ffnOut);
    p.op('rms_norm', ffnOut, { a: ffnOut, weights: { weight: need(t(il, 'post_ffw_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', x, { a: ffnOut, b: ao });

    if (nEpl > 0) {
      const g = p.buf('ple_gate', nEpl);
      p.op('matmul', g, { a: x, weights: { weight: need(t(il, 'inp_gate.weight')) } });
      p.op('gelu', g, { a: g });
      p.op('mul', g, { a: g, b: ple, params: { b_off: il * nEpl, n: nEpl } });
      p.op('matmul', attnOut, { a: g, weights: { weight: need(t(il, 'proj.weight')) } });
      p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: need(t(il, 'post_norm.weight')) }, params: { eps: hp.rmsEps } });
      p.op('add', x, { a: x, b: attnOut });
    }
    const outScale = maybe(t(il, 'layer_output_scale.weight'));
    if (outScale) p.op('mul', x, { a: x, weights: { weight: outScale } });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { softcap });
}

/**
 * Gemma 4's and Gemma 3n's attention once q is projected, normed and rotated (and, on blocks with
 * a cache of their own, k and v projected): k's and v's per-head RMS norms (v's without weight) and
 * k's RoPE into a KV layer of the block's own (kvOf records it); from block kvFrom on, the cache of
 * the last block of the same kind before kvFrom (sliding: kvFrom - 2, full: kvFrom - 1), whose KV
 * heads must match. Then attention (scale 1; `window` > 0 on sliding blocks) and attn_output.
 */
export function sharedKvAttention(
  p: ProgramBuilder,
  hp: HParams,
  il: number,
  o: {
    q: number; k: number; v: number; attn: number; attnOut: number; H: number; Hkv: number; hd: number; kvFrom: number; kvOf: number[]; window: number;
    rope: { weights?: Record<string, string>; params: Record<string, number> };
    need: (name: string) => string;
    bad: (msg: string) => never;
  },
): void {
  const { q, k, v, H, Hkv, hd, kvFrom, kvOf } = o;
  let layer: number;
  if (il < kvFrom) {
    p.op('head_rms_norm', k, { a: k, weights: { weight: o.need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    p.op('head_rms_norm', v, { a: v, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    p.op('rope', k, { a: k, ...(o.rope.weights ? { weights: o.rope.weights } : {}), params: { ...o.rope.params, n_head: Hkv } });
    layer = p.kvLayer(Hkv * hd, Hkv * hd);
    kvOf.push(layer);
  } else {
    const src = kvFrom - (o.window ? 2 : 1);
    if (hp.nHeadKv[src] !== Hkv) o.bad(`layer ${il} shares the cache of layer ${src} but has ${Hkv} KV heads to its ${hp.nHeadKv[src]}`);
    layer = kvOf[src];
  }
  const params = { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1, ...(o.window ? { window: o.window } : {}) };
  p.op('attention', o.attn, il < kvFrom ? { a: q, b: k, c: v, params } : { a: q, params });
  p.op('matmul', o.attnOut, { a: o.attn, weights: { weight: o.need(t(il, 'attn_output.weight')) } });
}

/**
 * Gemma 4's and Gemma 3n's per-layer inputs, n floats per block and token (block il's at il * n):
 * (per_layer_token_embd[token] sqrt(n) + norm(per_layer_model_proj x0 / sqrt(n_embd))) / sqrt(2),
 * x0 the scaled embedding. Returns the buffer.
 */
export function perLayerInputs(p: ProgramBuilder, hp: HParams, need: (n: string) => string, x: number, nEpl: number): number {
  const w = nEpl * hp.nLayer;
  const ple = p.buf('ple', w);
  const proj = p.buf('ple_proj', w);
  p.op('embed', ple, { weights: { weight: need('per_layer_token_embd.weight') } });
  p.op('scale', ple, { a: ple, params: { scale: f32(Math.sqrt(nEpl)) } });
  p.op('matmul', proj, { a: x, weights: { weight: need('per_layer_model_proj.weight') } });
  p.op('scale', proj, { a: proj, params: { scale: f32(1 / f32(Math.sqrt(hp.nEmbd))) } });
  p.op('head_rms_norm', proj, { a: proj, weights: { weight: need('per_layer_proj_norm.weight') }, params: { eps: hp.rmsEps, head_dim: nEpl, n_head: hp.nLayer } });
  p.op('add', ple, { a: proj, b: ple });
  p.op('scale', ple, { a: ple, params: { scale: f32(1 / f32(Math.sqrt(2))) } });
  return ple;
}

/**
 * A Gemma 4 expert block's routed half, added to `out` (which holds the dense MLP's output): the
 * MLP's post norm, the experts on pre_ffw_norm_2 of the stream `res` routed from its scaled RMS
 * norm, their post norm, the sum.
 */
function moeBranch(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, res: number, out: number): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: layer ${il} has a router but expert_count/expert_used_count are missing`);
  const d = hp.nEmbd;
  const hm = p.buf('moe_in', d);
  const r = p.buf('router_in', d);
  const mo = p.buf('moe_out', d);
  p.op('rms_norm', out, { a: out, weights: { weight: need(t(il, 'post_ffw_norm_1.weight')) }, params: { eps: hp.rmsEps } });
  p.op('rms_norm', hm, { a: res, weights: { weight: need(t(il, 'pre_ffw_norm_2.weight')) }, params: { eps: hp.rmsEps } });
  p.op('rms_norm', r, { a: res, params: { eps: hp.rmsEps } });
  p.op('scale', r, { a: r, params: { scale: f32(1 / f32(Math.sqrt(d))) } });
  p.op('mul', r, { a: r, weights: { weight: need(t(il, 'ffn_gate_inp.scale')) } });
  const gateUp = maybe(t(il, 'ffn_gate_up_exps.weight'));
  const downScale = maybe(t(il, 'ffn_down_exps.scale'));
  p.op('moe', mo, {
    a: hm,
    b: r,
    weights: {
      gate_inp: need(t(il, 'ffn_gate_inp.weight')),
      ...(gateUp ? { gate_exps: gateUp, up_exps: gateUp } : { gate_exps: need(t(il, 'ffn_gate_exps.weight')), up_exps: need(t(il, 'ffn_up_exps.weight')) }),
      down_exps: need(t(il, 'ffn_down_exps.weight')),
      ...(downScale ? { down_exps_s: downScale } : {}),
    },
    // Softmax over the logits, top-k renormalized (llama.cpp hard-codes both for gemma4), GeGLU.
    params: { n_expert: hp.nExpert, n_expert_used: hp.nExpertUsed, gating: 0, norm_w: 1, w_scale: 0, act: 4, ...(gateUp ? { fused_gate_up: 1 } : {}), moe_layer: p.moeLayer(hp.nExpert) },
  });
  p.op('rms_norm', mo, { a: mo, weights: { weight: need(t(il, 'post_ffw_norm_2.weight')) }, params: { eps: hp.rmsEps } });
  p.op('add', out, { a: out, b: mo });
}
