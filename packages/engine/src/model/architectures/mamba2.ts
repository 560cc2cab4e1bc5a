import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_HEADS, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart, withBias, type ProgramBuilder } from '../program-builder';
import { moeBlockFfn, mtpAttentionStart, mtpHead, outputHead, readMoeRouting, tensorLookup, trunkLayers, type MoeRouting } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** The Mamba-2 mixer's shape (llama.cpp's ssm_* hparams). */
export interface Mamba2Dims {
  /** Convolution taps (ssm.conv_kernel). */
  dConv: number;
  /** ssm.inner_size: the heads' total width. */
  dInner: number;
  /** ssm.state_size: each state row's width (B and C per group). */
  dState: number;
  /** ssm.time_step_rank: the number of SSM heads (one dt, A and D each). */
  nHead: number;
  /** ssm.group_count: groups of heads sharing B and C. */
  nGroup: number;
}

export function readMamba2Dims(hp: HParams): Mamba2Dims {
  const md = hp.meta;
  const dims: Mamba2Dims = {
    dConv: md.int('ssm.conv_kernel', undefined, 2, 1024),
    dInner: md.int('ssm.inner_size', undefined, 1, MAX_DIM),
    dState: md.int('ssm.state_size', undefined, 1, 65536),
    nHead: md.int('ssm.time_step_rank', undefined, 1, MAX_HEADS),
    nGroup: md.int('ssm.group_count', undefined, 1, MAX_HEADS),
  };
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  if (dims.dInner % dims.nHead !== 0) throw bad(`ssm.inner_size ${dims.dInner} does not split into ${dims.nHead} heads (ssm.time_step_rank)`);
  if (dims.nHead % dims.nGroup !== 0) throw bad(`${dims.nHead} SSM heads (ssm.time_step_rank) do not split into ${dims.nGroup} groups (ssm.group_count)`);
  return dims;
}

/**
 * A Mamba-2 mixer (llama.cpp's build_mamba2_layer) on the normed input `h` into `out`: ssm_in gives
 * z | x B C | dt; x B C goes through the causal depthwise convolution (d_conv taps, + bias, SiLU;
 * its last d_conv - 1 inputs kept per sequence), then the selective scan (a state of
 * n_head x head_dim x d_state per sequence) gives y + D x; y times SiLU(z), RMS-normed per group
 * of heads (ssm_norm), then ssm_out.
 */
export function mamba2Mixer(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, dims: Mamba2Dims, h: number, out: number): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const { dConv, dInner, dState, nHead, nGroup } = dims;
  const convDim = dInner + 2 * nGroup * dState;
  const zxbcdt = p.buf(`m2_in${2 * dInner + 2 * nGroup * dState + nHead}`, 2 * dInner + 2 * nGroup * dState + nHead);
  const xbc = p.buf(`m2_xbc${convDim}`, convDim);
  const conv = p.buf(`m2_conv${convDim}`, convDim);
  const dt = p.buf(`m2_dt${nHead}`, nHead);
  const y = p.buf(`m2_y${dInner}`, dInner);
  p.op('matmul', zxbcdt, { a: h, weights: { weight: need(t(il, 'ssm_in.weight')) } });
  p.op('copy', xbc, { a: zxbcdt, params: { a_off: dInner, n: convDim } });
  p.op('copy', dt, { a: zxbcdt, params: { a_off: dInner + convDim, n: nHead } });
  const convBias = maybe(t(il, 'ssm_conv1d.bias'));
  p.op('ssm_conv', conv, {
    a: xbc,
    weights: { weight: need(t(il, 'ssm_conv1d.weight')), ...(convBias ? { bias: convBias } : {}) },
    params: { layer: p.rsLayer((dConv - 1) * convDim), d_conv: dConv, silu: 1 },
  });
  p.op('ssm_scan', y, {
    a: conv,
    b: dt,
    weights: { dt_bias: need(t(il, 'ssm_dt.bias')), a: need(t(il, 'ssm_a')), d: need(t(il, 'ssm_d')) },
    params: { layer: p.rsLayer(dInner * dState), n_head: nHead, head_dim: dInner / nHead, d_state: dState, n_group: nGroup },
  });
  // ggml_swiglu_split(z, y): SiLU(z) * y, z being ssm_in's first d_inner outputs.
  p.op('swiglu', y, { a: zxbcdt, b: y, params: { a_off: 0, n: dInner } });
  const norm = maybe(t(il, 'ssm_norm.weight'));
  if (norm) p.op('head_rms_norm', y, { a: y, weights: { weight: norm }, params: { eps: hp.rmsEps, head_dim: dInner / nGroup, n_head: nGroup } });
  p.op('matmul', out, { a: y, weights: { weight: need(t(il, 'ssm_out.weight')) } });
}

/** The Mamba-1 mixer's shape (llama.cpp's ssm_* hparams; time_step_rank is dt's projection rank here). */
export interface Mamba1Dims {
  dConv: number;
  dInner: number;
  dState: number;
  dtRank: number;
}

export function readMamba1Dims(hp: HParams): Mamba1Dims {
  const md = hp.meta;
  return {
    dConv: md.int('ssm.conv_kernel', undefined, 2, 1024),
    dInner: md.int('ssm.inner_size', undefined, 1, MAX_DIM),
    dState: md.int('ssm.state_size', undefined, 1, 65536),
    dtRank: md.int('ssm.time_step_rank', undefined, 1, MAX_DIM),
  };
}

/**
 * A Mamba-1 mixer (llama.cpp's build_mamba_layer, Jamba's blocks without KV heads) on the normed
 * input `h` into `out`: ssm_in gives x | z; x through the causal convolution (+ bias, SiLU); ssm_x
 * of that gives dt (ssm.time_step_rank wide) | B | C (d_state each), RMS-normed when the file
 * has ssm_dt_norm, ssm_b_norm and ssm_c_norm (Jamba); dt = ssm_dt dt + bias; the `ssm_scan` op with
 * one head per channel and A per state element; times SiLU(z); ssm_out.
 */
export function mamba1Mixer(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, dims: Mamba1Dims, h: number, out: number, opts: { dtBcRms?: boolean } = {}): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const { dConv, dInner, dState, dtRank } = dims;
  const xz = p.buf(`m1_xz${2 * dInner}`, 2 * dInner);
  const x = p.buf(`m1_x${dInner}`, dInner);
  // The scan's input: the convolution's output, then B and C.
  const xbc = p.buf(`m1_xbc${dInner + 2 * dState}`, dInner + 2 * dState);
  const xdb = p.buf(`m1_xdb${dtRank + 2 * dState}`, dtRank + 2 * dState);
  const dtr = p.buf(`m1_dtr${dtRank}`, dtRank);
  const dt = p.buf(`m1_dt${dInner}`, dInner);
  const y = p.buf(`m1_y${dInner}`, dInner);
  // dt, B and C are normed when the file has all three norms, or (Falcon-Mamba's ssm.dt_b_c_rms)
  // always, by the weights the file has and without the others (llama.cpp's condition).
  const norms = ['ssm_dt_norm', 'ssm_b_norm', 'ssm_c_norm'].map((n) => maybe(t(il, `${n}.weight`)));
  const normed = opts.dtBcRms === true || norms.every((w) => w !== undefined);
  const norm = (buf: number, i: number, off: number, width: number) => {
    const w = norms[i];
    if (normed) p.op('head_rms_norm', buf, { a: buf, weights: w ? { weight: w } : {}, params: { eps: hp.rmsEps, head_dim: width, n_head: 1, a_off: off } });
  };
  p.op('matmul', xz, { a: h, weights: { weight: need(t(il, 'ssm_in.weight')) } });
  p.op('copy', x, { a: xz, params: { n: dInner } });
  const convBias = maybe(t(il, 'ssm_conv1d.bias'));
  p.op('ssm_conv', xbc, {
    a: x,
    weights: { weight: need(t(il, 'ssm_conv1d.weight')), ...(convBias ? { bias: convBias } : {}) },
    params: { layer: p.rsLayer((dConv - 1) * dInner), d_conv: dConv, silu: 1 },
  });
  p.op('matmul', xdb, { a: xbc, weights: { weight: need(t(il, 'ssm_x.weight')) }, params: { n_in: dInner } });
  p.op('copy', dtr, { a: xdb, params: { n: dtRank } });
  p.op('copy', xbc, { a: xdb, params: { a_off: dtRank, out_off: dInner, n: 2 * dState } });
  norm(dtr, 0, 0, dtRank);
  norm(xbc, 1, dInner, dState);
  norm(xbc, 2, dInner + dState, dState);
  p.op('matmul', dt, { a: dtr, weights: withBias(need(t(il, 'ssm_dt.weight')), maybe(t(il, 'ssm_dt.bias'))) });
  p.op('ssm_scan', y, {
    a: xbc,
    b: dt,
    weights: { a: need(t(il, 'ssm_a')), d: need(t(il, 'ssm_d')) },
    params: { layer: p.rsLayer(dInner * dState), n_head: dInner, head_dim: 1, d_state: dState, n_group: 1 },
  });
  p.op('swiglu', y, { a: xz, b: y, params: { a_off: dInner, n: dInner } });
  p.op('matmul', out, { a: y, weights: { weight: need(t(il, 'ssm_out.weight')) } });
}

/**
 * AI21 Jamba (`jamba`; llama.cpp src/models/jamba.cpp): blocks without KV heads are Mamba-1 mixers,
 * the others GQA without RoPE; each then ffn_norm and routed experts (softmax top-k, not
 * renormalized) or a dense SwiGLU FFN.
 */
export function buildJamba(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const lookup = tensorLookup(hp, tensors);
  const { need, maybe } = lookup;
  const dims = readMamba1Dims(hp);
  if (2 * hp.nEmbd !== dims.dInner) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ssm.inner_size must be twice embedding_length (llama.cpp's loader asserts it)`);
  // Its loader reads no gating function, weight norm or scale.
  const routing = hp.nExpert > 0 ? readMoeRouting(hp, 1, { gating: 1, normW: false, wScale: 0 }) : undefined;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    if (hp.nHeadKv[il] !== 0) nopeAttention(p, hp, tensors, il, { x, h }, attnOut);
    else {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      mamba1Mixer(p, hp, tensors, il, dims, h, attnOut);
    }
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing!, false, { probsBias: 'none', shared: 'none' });
    else denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}

/**
 * The pure state-space models (llama.cpp src/models/mamba.cpp): `mamba` (Mamba-1, Falcon-Mamba)
 * and `mamba2` (Mamba-2, Mamba-Codestral). Every block is attn_norm, one mixer (Mamba-1 or Mamba-2)
 * and a residual add; no attention (so no KV cache, only the recurrent states), no FFN. Mamba-1's
 * ssm.dt_b_c_rms (Falcon-Mamba) RMS-norms dt, B and C without weights. The tensors llama.cpp's
 * loaders require and the mixers would take as optional are required here too.
 */
export function buildMamba(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const v2 = hp.arch === 'mamba2';
  const dims1 = v2 ? undefined : readMamba1Dims(hp);
  const dims2 = v2 ? readMamba2Dims(hp) : undefined;
  if (dims1 && 2 * hp.nEmbd !== dims1.dInner) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ssm.inner_size must be twice embedding_length (llama.cpp's loader asserts it)`);
  const dtBcRms = hp.meta.bool('ssm.dt_b_c_rms', false);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    for (const n of ['ssm_conv1d.bias', 'ssm_dt.bias', ...(v2 ? ['ssm_norm.weight'] : [])]) need(t(il, n));
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    if (dims2) mamba2Mixer(p, hp, tensors, il, dims2, h, attnOut);
    else mamba1Mixer(p, hp, tensors, il, dims1!, h, attnOut, { dtBcRms });
    p.op('add', x, { a: x, b: attnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}

/**
 * TII Falcon-H1 (`falcon-h1`; llama.cpp src/models/falcon-h1.cpp): in every block GQA attention
 * (NeoX RoPE, scale 1/sqrt(head_dim): the loader reads no attention.scale) and a Mamba-2 mixer
 * read the same attn_norm output; both outputs go to the residual, then ffn_norm (loaded as
 * `blk.N.ffn_norm`, without the .weight suffix; either name is taken) and a SwiGLU FFN. The
 * converter folds Falcon-H1's multipliers into the weights: none is read here. The convolution
 * bias and ssm_norm are optional (llama.cpp's loader takes them so; its graph adds the bias
 * unconditionally and aborts without one, where kail adds none). The attn_output.bias and
 * rope_freqs its loader takes are not used by its graph; kail applies the bias (HF's o_proj) and
 * refuses rope_freqs rather than run another model.
 */
export function buildFalconH1(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const dims = readMamba2Dims(hp);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key length ${hd} and value length ${hp.headDimV} differ`);
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const ssmOut = p.buf('ssm_out', hp.nEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    if (hp.nHeadKv[il] === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has no KV heads; every Falcon-H1 block has attention`);
    if (maybe(t(il, 'rope_freqs.weight'))) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: block ${il} has rope_freqs, which llama.cpp's Falcon-H1 graph ignores; kail does not guess which rotation the file means`);
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
    mamba2Mixer(p, hp, tensors, il, dims, h, ssmOut);
    // llama.cpp's order: (attention + SSM) + residual.
    p.op('add', attnOut, { a: attnOut, b: ssmOut });
    p.op('add', x, { a: attnOut, b: x });
    const ffnNorm = maybe(t(il, 'ffn_norm')) ?? need(t(il, 'ffn_norm.weight'));
    p.op('rms_norm', h, { a: x, weights: { weight: ffnNorm }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    p.op('add', x, { a: ffnOut, b: x });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}

/** up (+ bias), squared ReLU, down (+ bias): llama.cpp's build_ffn with LLM_FFN_RELU_SQR and no gate. */
function relu2Ffn(p: ProgramBuilder, tensors: Map<string, GgufTensorInfo>, lookup: ReturnType<typeof tensorLookup>, up: string, down: string, h: number, out: number): void {
  const ff = tensors.get(lookup.need(`${up}.weight`))!.dims[1];
  const u = p.buf(`ffn_up${ff}`, ff);
  p.op('matmul', u, { a: h, weights: withBias(lookup.need(`${up}.weight`), lookup.maybe(`${up}.bias`)) });
  p.op('relu_sqr', u, { a: u });
  p.op('matmul', out, { a: u, weights: withBias(lookup.need(`${down}.weight`), lookup.maybe(`${down}.bias`)) });
}

/**
 * NVIDIA Nemotron-H (`nemotron_h`: Nemotron-H, Nemotron-Nano-9B-v2) and its MoE form
 * (`nemotron_h_moe`: Nemotron-3-Nano-30B-A3B; llama.cpp src/models/nemotron-h.cpp,
 * nemotron-h-moe.cpp): every block is attn_norm, one mixer, a residual add. A block with neither KV
 * heads nor a feed_forward_length is a Mamba-2 mixer, one with KV heads and no feed_forward_length
 * is GQA without RoPE, the others are FFNs: squared-ReLU up/down, or routed experts (up and down
 * only, squared ReLU; sigmoid scores with the selection bias exp_probs_b, expert_weights_norm and
 * expert_weights_scale) plus a squared-ReLU shared expert. NextN (MTP) blocks past the trunk are
 * left out.
 */
/** Nemotron-H's epsilons: RMS norms take layer_norm_rms_epsilon, else layer_norm_epsilon; the MTP head's LayerNorm the latter. */
function nemotronHParams(hp: HParams): HParams & { lnEps: number } {
  const md = hp.meta;
  const lnEps = md.num('attention.layer_norm_epsilon');
  return { ...hp, rmsEps: md.has('attention.layer_norm_rms_epsilon') ? hp.rmsEps : lnEps, lnEps };
}

/** GQA without positions (Nemotron-H's attention blocks) on the residual stream io.x into out. */
function nopeAttention(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, io: { x: number; h: number }, out: number): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key length ${hd} and value length ${hp.headDimV} differ`);
  const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, io, { need, maybe }, hd, hd);
  const layer = p.kvLayer(Hkv * hd, Hkv * hd);
  p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: hp.attentionScale || 1 / Math.sqrt(hd) } });
  p.op('matmul', out, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
}

/**
 * Nemotron-H's expert FFN on the normed h into out: gate-less experts (squared ReLU) after sigmoid
 * + bias routing, plus the squared-ReLU shared expert; a latent MoE (Nemotron 3 Super) routes on h
 * and runs its experts on ffn_latent_down h, their sum through ffn_latent_up.
 */
function nemotronMoe(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, routing: MoeRouting | undefined, h: number, out: number): void {
  const lookup = tensorLookup(hp, tensors);
  const { need, maybe } = lookup;
  if (!routing) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has a router but expert_count is missing`);
  const down = maybe(t(il, 'ffn_latent_down.weight'));
  const up = maybe(t(il, 'ffn_latent_up.weight'));
  if (!down !== !up) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has ${down ? 'ffn_latent_down without ffn_latent_up' : 'ffn_latent_up without ffn_latent_down'}`);
  const opt = { probsBias: 'required', shared: 'none', gateless: true, moeParams: { act: 3 } } as const;
  if (down) {
    const L = tensors.get(down)!.dims[1];
    const lat = p.buf(`moe_latent${L}`, L);
    const latOut = p.buf(`moe_latent_out${L}`, L);
    p.op('matmul', lat, { a: h, weights: { weight: down } });
    moeBlockFfn(p, hp, tensors, il, lat, latOut, routing, false, { ...opt, routerInput: h });
    p.op('matmul', out, { a: latOut, weights: { weight: need(up!) } });
  } else moeBlockFfn(p, hp, tensors, il, h, out, routing, false, opt);
  const shared = p.buf('ffn_shexp', hp.nEmbd);
  relu2Ffn(p, tensors, lookup, t(il, 'ffn_up_shexp'), t(il, 'ffn_down_shexp'), h, shared);
  p.op('add', out, { a: out, b: shared });
}

const nemotronRouting = (hp: HParams): MoeRouting | undefined => (hp.nExpert > 0 ? readMoeRouting(hp, 2, { gating: 2 }) : undefined);

export function buildNemotronH(hp0: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const hp = nemotronHParams(hp0);
  const lookup = tensorLookup(hp, tensors);
  const { need } = lookup;
  const dims = readMamba2Dims(hp);
  const routing = nemotronRouting(hp);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < trunkLayers(hp); il++) {
    if (hp.nHeadKv[il] !== 0 && hp.nFf[il] === 0) nopeAttention(p, hp, tensors, il, { x, h }, attnOut);
    else {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      if (hp.nFf[il] === 0) mamba2Mixer(p, hp, tensors, il, dims, h, attnOut);
      else if (tensors.has(t(il, 'ffn_gate_inp.weight'))) nemotronMoe(p, hp, tensors, il, routing, h, attnOut);
      else relu2Ffn(p, tensors, lookup, t(il, 'ffn_up'), t(il, 'ffn_down'), h, attnOut);
      // llama.cpp's build_cvec, on the FFN blocks' output.
      if (hp.nFf[il] !== 0) p.op('cvec', attnOut, { a: attnOut, params: { layer: il } });
    }
    p.op('add', x, { a: x, b: attnOut });
  }
  return outputHead(p, hp, tensors, x);
}

/**
 * Nemotron 3's multi-token-prediction block as a model of its own (llama.cpp's nemotron_h_moe
 * graph_mtp): eh_proj of [enorm(embed(x_t)); hnorm(the target's hidden state before)], a GQA
 * block without positions over its own KV cache, post_attention_norm and the expert FFN (latent when
 * the trunk's is), then shared_head_norm as a LayerNorm (layer_norm_epsilon) and the head.
 */
export function buildNemotronHMtp(hp0: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const hp = nemotronHParams(hp0);
  const { need } = tensorLookup(hp, tensors);
  const { il, p, x, h, attnOut } = mtpAttentionStart(hp, tensors);
  nopeAttention(p, hp, tensors, il, { x, h }, attnOut);
  p.op('add', x, { a: x, b: attnOut });
  p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
  nemotronMoe(p, hp, tensors, il, nemotronRouting(hp), h, attnOut);
  p.op('add', x, { a: x, b: attnOut });
  return mtpHead(p, hp, tensors, il, x, { layerNorm: hp.lnEps });
}
