import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_HEADS, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart, withBias, type ProgramBuilder } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** PLaMo 2's Mamba mixer shape (llama.cpp's ssm_* hparams; group_count is 0: B and C shared by every head). */
interface Plamo2Ssm {
  dConv: number;
  dInner: number;
  dState: number;
  nHead: number;
  headDim: number;
  /** dt's width before ssm_dt: max(64, n_embd / 16). */
  dtDim: number;
}

function readSsm(hp: HParams): Plamo2Ssm {
  const md = hp.meta;
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  const dConv = md.int('ssm.conv_kernel', undefined, 2, 1024);
  const dInner = md.int('ssm.inner_size', undefined, 1, MAX_DIM);
  const dState = md.int('ssm.state_size', undefined, 1, 65536);
  const nHead = md.int('ssm.time_step_rank', undefined, 1, MAX_HEADS);
  const nGroup = md.int('ssm.group_count', undefined, 0, MAX_HEADS);
  // llama.cpp's graph asserts n_group == 0 (its B and C are one row for all heads).
  if (nGroup !== 0) throw bad(`ssm.group_count is ${nGroup}; PLaMo 2's B and C are shared by every head (llama.cpp requires 0)`);
  if (dInner % nHead !== 0) throw bad(`ssm.inner_size ${dInner} does not split into ${nHead} heads (ssm.time_step_rank)`);
  return { dConv, dInner, dState, nHead, headDim: dInner / nHead, dtDim: Math.max(64, Math.trunc(hp.nEmbd / 16)) };
}

/**
 * PLaMo 2's Mamba mixer (llama.cpp build_plamo2_mamba_layer) on the normed `h` into `out`: ssm_in
 * gives per head z then x (head_dim each, interleaved by head); x through the causal convolution
 * (no bias) and SiLU; ssm_x gives B | C | dt, each RMS-normed with its weight; dt = ssm_dt dt +
 * bias (one per head); the Mamba-2 scan (A, D per head, B and C shared) gives y + D x; times
 * SiLU(z); ssm_out.
 */
function plamo2Mamba(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, s: Plamo2Ssm, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const { dConv, dInner, dState, nHead, headDim, dtDim } = s;
  const shape = (name: string, dims: number[]) => {
    const ti = tensors.get(need(t(il, name)))!;
    const got = [...ti.dims];
    while (got.length > dims.length && got[got.length - 1] === 1) got.pop();
    if (got.length !== dims.length || got.some((d, i) => d !== dims[i]))
      throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: tensor '${t(il, name)}' has shape [${ti.dims.join(', ')}], expected [${dims.join(', ')}]`);
    return t(il, name);
  };
  const zx = p.buf(`p2_zx${2 * dInner}`, 2 * dInner);
  const x = p.buf(`p2_x${dInner}`, dInner);
  const z = p.buf(`p2_z${dInner}`, dInner);
  const xbc = p.buf(`p2_xbc${dInner + 2 * dState}`, dInner + 2 * dState);
  const bcdt = p.buf(`p2_bcdt${2 * dState + dtDim}`, 2 * dState + dtDim);
  const dtr = p.buf(`p2_dtr${dtDim}`, dtDim);
  const dt = p.buf(`p2_dt${nHead}`, nHead);
  const y = p.buf(`p2_y${dInner}`, dInner);
  p.op('matmul', zx, { a: h, weights: { weight: shape('ssm_in.weight', [hp.nEmbd, 2 * dInner]) } });
  // Head k's z at 2k head_dim, its x at (2k + 1) head_dim: one strided copy for each.
  const perHead = { n: headDim, blocks: nHead, a_stride: 2 * headDim, out_stride: headDim };
  p.op('copy', z, { a: zx, params: { ...perHead, a_off: 0 } });
  p.op('copy', x, { a: zx, params: { ...perHead, a_off: headDim } });
  p.op('ssm_conv', xbc, { a: x, weights: { weight: shape('ssm_conv1d.weight', [dConv, dInner]) }, params: { layer: p.rsLayer((dConv - 1) * dInner), d_conv: dConv, silu: 1 } });
  p.op('matmul', bcdt, { a: xbc, weights: { weight: shape('ssm_x.weight', [dInner, 2 * dState + dtDim]) }, params: { n_in: dInner } });
  p.op('copy', xbc, { a: bcdt, params: { a_off: 0, out_off: dInner, n: 2 * dState } });
  p.op('copy', dtr, { a: bcdt, params: { a_off: 2 * dState, n: dtDim } });
  const norm = (buf: number, name: string, off: number, width: number) =>
    p.op('head_rms_norm', buf, { a: buf, weights: { weight: shape(name, [width]) }, params: { eps: hp.rmsEps, head_dim: width, n_head: 1, a_off: off } });
  norm(xbc, 'ssm_b_norm', dInner, dState);
  norm(xbc, 'ssm_c_norm', dInner + dState, dState);
  norm(dtr, 'ssm_dt_norm', 0, dtDim);
  p.op('matmul', dt, { a: dtr, weights: withBias(shape('ssm_dt.weight', [dtDim, nHead]), shape('ssm_dt.bias', [nHead])) });
  p.op('ssm_scan', y, {
    a: xbc,
    b: dt,
    weights: { a: shape('ssm_a', [nHead]), d: shape('ssm_d', [nHead]) },
    params: { layer: p.rsLayer(dInner * dState), n_head: nHead, head_dim: headDim, d_state: dState, n_group: 1 },
  });
  // ggml_swiglu_split(z, y): SiLU(z) * y.
  p.op('swiglu', y, { a: z, b: y });
  p.op('matmul', out, { a: y, weights: { weight: shape('ssm_out.weight', [dInner, hp.nEmbd]) } });
}

/**
 * Preferred Networks PLaMo 2 (`plamo2`; llama.cpp src/models/plamo2.cpp): a block without KV heads
 * is a Mamba mixer, the others attention: one attn_qkv (no bias), q and k RMS-normed per head with
 * a weight row per head, NeoX RoPE over the head, scale 1/sqrt(head_dim). Every block: attn_norm,
 * mixer, post_attention_norm, residual; ffn_norm, SwiGLU of one fused ffn_up (gate half first),
 * post_ffw_norm, residual. The post norms, ssm_dt_norm, ssm_b_norm and ssm_c_norm are named without
 * '.weight' (what the converter writes and the loader reads); either name is taken.
 *
 * Where kail does not copy llama.cpp: llama.cpp sets n_rot (the rotated dimensions) to 0 when block
 * 0 has no attention heads (load_hparams' "non-transformer" branch), which every converted PLaMo 2
 * file has (block 0 is a Mamba block); ggml-cpu's rope then never finishes its copy of the
 * unrotated channels (i0 += n_dims - 2 steps back forever). kail rotates the whole head
 * (rope.dimension_count when given, else key_length), as the model (HF's PLaMo 2) does; parity is
 * shown on the same blocks behind an identity attention block 0 (tools/src/parity).
 */
export function buildPlamo2(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  if (hp.headDimV !== hd) throw bad(`key length ${hd} and value length ${hp.headDimV} differ`);
  const mamba = hp.nHeadKv.map((n) => n === 0);
  const ssm = mamba.includes(true) ? readSsm(hp) : undefined;
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const named = (il: number, name: string) => maybe(t(il, name)) ?? need(t(il, `${name}.weight`));
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    if (mamba[il]) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      plamo2Mamba(p, hp, tensors, il, ssm!, h, attnOut);
    } else {
      const [H, Hkv] = [hp.nHead[il], hp.nHeadKv[il]];
      if (H === 0 || H % Hkv !== 0) throw bad(`block ${il}: head_count ${H} is not a positive multiple of head_count_kv ${Hkv}`);
      for (const n of ['attn_q', 'attn_k', 'attn_v'])
        if (maybe(t(il, `${n}.weight`))) throw bad(`block ${il} has ${n}.weight; PLaMo 2's attention is one attn_qkv`);
      // (Asked first, so that a file without it is refused naming attn_qkv, not attn_q.)
      need(t(il, 'attn_qkv.weight'));
      // attn_norm into h, then attn_qkv's product split into Q|K|V.
      const { q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
      for (const [buf, name, n] of [[q, 'attn_q_norm.weight', H], [k, 'attn_k_norm.weight', Hkv]] as const) {
        const w = need(t(il, name));
        const dims = tensors.get(w)!.dims;
        if (dims[0] !== hd || (dims[1] ?? 1) !== n) throw bad(`tensor '${t(il, name)}' has shape [${dims.join(', ')}], expected [${hd}, ${n}] (a weight row per head)`);
        p.op('head_rms_norm', buf, { a: buf, weights: { weight: w }, params: { eps: hp.rmsEps, head_dim: hd, n_head: n } });
        p.op('rope', buf, { a: buf, params: { ...rope, n_head: n } });
      }
      const layer = p.kvLayer(Hkv * hd, Hkv * hd);
      p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
      p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    }
    p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: named(il, 'post_attention_norm') }, params: { eps: hp.rmsEps } });
    p.op('add', x, { a: attnOut, b: x });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const up = need(t(il, 'ffn_up.weight'));
    const down = need(t(il, 'ffn_down.weight'));
    const ff = tensors.get(down)!.dims[0];
    if (tensors.get(up)!.dims[1] !== 2 * ff) throw bad(`block ${il}: ffn_up gives ${tensors.get(up)!.dims[1]} values, not twice ffn_down's ${ff} inputs`);
    const u = p.buf(`ffn_up${2 * ff}`, 2 * ff);
    const g = p.buf(`ffn_gate${ff}`, ff);
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    p.op('matmul', u, { a: h, weights: { weight: up } });
    p.op('swiglu', g, { a: u, b: u, params: { a_off: 0, b_off: ff, n: ff } });
    p.op('matmul', ffnOut, { a: g, weights: { weight: down } });
    p.op('rms_norm', ffnOut, { a: ffnOut, weights: { weight: named(il, 'post_ffw_norm') }, params: { eps: hp.rmsEps } });
    // (llama.cpp's PLaMo 2 graph applies no control vector: no cvec op.)
    p.op('add', x, { a: ffnOut, b: x });
  }
  return outputHead(p, hp, tensors, x);
}
