import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { ProgramBuilder } from '../program-builder';
import { tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `enc.blk.${i}.${name}`;

/** ggml's FLT_MAX: ReLU as a clamp to [0, FLT_MAX]. */
const FLT_MAX = 3.4028234663852886e38;

/**
 * T5's encoder (llama.cpp's t5encoder: t5.cpp's encoder graph), an embedding model: token
 * embeddings unscaled and without positions; per block RMS attn_norm -> q/k/v (no biases, heads of
 * attention.key_length, which need not divide the width) -> non-causal attention with scale 1 and
 * the relative position bias of enc.blk.N.attn_rel_b (block 0's where a block has none, as
 * llama.cpp and Hugging Face share it) -> attn_o -> residual; RMS ffn_norm -> flan-T5's
 * GELU(ffn_gate) x ffn_up or T5's ReLU(ffn_up) -> ffn_down -> residual -> control vector;
 * enc.output_norm last. The hidden rows are pooled by the file's pooling_type.
 */
export function buildT5Encoder(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const p = new ProgramBuilder();
  const x = t5Encoder(p, hp, tensors, {});
  p.hidden(x);
  const hOut = p.buf('h_out', hp.nEmbd, true);
  p.op('gather_out', hOut, { a: x });
  return p.build(hOut);
}

/** An op's params when it has none but its pass tag (none at all in buildT5Encoder's program). */
const tagOnly = (tag: Record<string, number>) => (Object.keys(tag).length ? { ...tag } : undefined);

/** T5's feed-forward: RMS ffn_norm of x into h, flan-T5's GELU(gate) x up or T5's ReLU(up), down, added to x. */
function t5Ffn(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, lk: ReturnType<typeof tensorLookup>, name: (n: string) => string, x: number, h: number, out: number, tag: Record<string, number>): void {
  const { need, maybe } = lk;
  p.op('rms_norm', h, { a: x, weights: { weight: need(name('ffn_norm.weight')) }, params: { eps: hp.rmsEps, ...tag } });
  const up = need(name('ffn_up.weight'));
  const ff = tensors.get(up)!.dims[1];
  const u = p.buf(`ffn_up${ff}`, ff);
  p.op('matmul', u, { a: h, weights: { weight: up }, params: tagOnly(tag) });
  const gate = maybe(name('ffn_gate.weight'));
  if (gate) {
    const g = p.buf(`ffn_gate${ff}`, ff);
    p.op('matmul', g, { a: h, weights: { weight: gate }, params: tagOnly(tag) });
    p.op('gelu', g, { a: g, params: tagOnly(tag) });
    p.op('mul', u, { a: g, b: u, params: tagOnly(tag) });
  } else {
    p.op('clamp', u, { a: u, params: { min: 0, max: FLT_MAX, ...tag } });
  }
  p.op('matmul', out, { a: u, weights: { weight: need(name('ffn_down.weight')) }, params: tagOnly(tag) });
  p.op('add', x, { a: x, b: out, params: tagOnly(tag) });
}

/** The relative position bias table of a block (block 0's where the block has none), checked against the bucket count. */
function relBias(tensors: Map<string, GgufTensorInfo>, lk: ReturnType<typeof tensorLookup>, name: (i: number, n: string) => string, il: number, H: number, buckets: number): string {
  const rel = lk.maybe(name(il, 'attn_rel_b.weight')) ?? lk.maybe(name(0, 'attn_rel_b.weight'));
  if (!rel) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: no relative position bias (${name(il, 'attn_rel_b.weight')}, nor block 0's to share)`);
  const rt = tensors.get(rel)!;
  if (rt.dims.length !== 2 || rt.dims[0] !== H || rt.dims[1] !== buckets)
    throw new EngineError('KAIL_E_BAD_MODEL', `tensor '${rel}' [${rt.dims.join(', ')}] is not [${H} heads, ${buckets} buckets] (attention.relative_buckets_count)`);
  return rel;
}

/** The encoder's ops (each tagged with `tag`), ending in enc.output_norm of x; returns x. */
function t5Encoder(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, tag: Record<string, number>): number {
  const lk = tensorLookup(hp, tensors);
  const { need } = lk;
  const buckets = hp.meta.int('attention.relative_buckets_count', undefined, 4, 1 << 16);
  // Required, as llama.cpp's loader reads it (hp.rmsEps would default it).
  hp.meta.num('attention.layer_norm_rms_epsilon');
  const d = hp.nEmbd;
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key and value heads differ (${hd} / ${hp.headDimV})`);
  const x = p.buf('x', d);
  const h = p.buf('h', d);
  const out = p.buf('blk_out', d);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') }, params: tagOnly(tag) });
  for (let il = 0; il < hp.nLayer; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H !== Hkv) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: head_count ${H} differs from head_count_kv ${Hkv} (T5 has no grouped-query attention)`);
    const rel = relBias(tensors, lk, t, il, H, buckets);
    const q = p.buf(`q${H * hd}`, H * hd);
    const k = p.buf(`k${H * hd}`, H * hd);
    const v = p.buf(`v${H * hd}`, H * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps, ...tag } });
    for (const [buf, w] of [[q, 'attn_q'], [k, 'attn_k'], [v, 'attn_v']] as const) p.op('matmul', buf, { a: h, weights: { weight: need(t(il, `${w}.weight`)) }, params: tagOnly(tag) });
    const layer = p.kvLayer(H * hd, H * hd);
    p.op('attention', attn, { a: q, b: k, c: v, weights: { rel_b: rel }, params: { layer, n_head: H, n_head_kv: H, head_dim: hd, head_dim_v: hd, scale: 1, causal: false, rel_bidir: true, ...tag } });
    p.op('matmul', out, { a: attn, weights: { weight: need(t(il, 'attn_o.weight')) }, params: tagOnly(tag) });
    p.op('add', x, { a: x, b: out, params: tagOnly(tag) });
    t5Ffn(p, hp, tensors, lk, (n) => t(il, n), x, h, out, tag);
    p.op('cvec', x, { a: x, params: { layer: il, ...tag } });
  }
  p.op('rms_norm', x, { a: x, weights: { weight: need('enc.output_norm.weight') }, params: { eps: hp.rmsEps, ...tag } });
  return x;
}

const dt = (i: number, name: string) => `dec.blk.${i}.${name}`;
const ENCODE = { pass: 1 };
const DECODE = { pass: 2 };

/**
 * T5's encoder-decoder (llama.cpp's t5: t5.cpp's two graphs), one program in two passes
 * (core-native's `pass` tags): a sequence's first pass runs the encoder over its whole prompt and
 * stores each decoder block's cross_attn_k/v of enc.output_norm's rows (store_only) in a KV layer
 * of the block's; its later passes run the decoder from the decoder start token at the positions
 * after the prompt's. Per decoder block: RMS attn_norm -> q/k/v -> causal attention, scale 1, with
 * the one-way relative bias of dec.blk.N.attn_rel_b (block 0's where a block has none) over the
 * decoder's own positions -> attn_o -> residual; RMS cross_attn_norm -> cross_attn_q -> attention
 * over every encoder position (cross: no bias, no mask), scale 1 -> cross_attn_o -> residual; the
 * encoder's FFN shape -> residual -> control vector; dec.output_norm, then `output` (token_embd
 * as it is where the file has none: llama.cpp does not rescale a tied head as Hugging Face does).
 */
export function buildT5(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const lk = tensorLookup(hp, tensors);
  const { need, maybe } = lk;
  const nDec = hp.meta.int('decoder_block_count', hp.nLayer, 1, 1 << 12);
  if (nDec > hp.nLayer)
    throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: ${nDec} decoder blocks (decoder_block_count) but ${hp.nLayer} encoder blocks: per-block head counts come from the encoder's, and llama.cpp cannot load such a file either`);
  const buckets = hp.meta.int('attention.relative_buckets_count', undefined, 4, 1 << 16);
  const p = new ProgramBuilder();
  const x = t5Encoder(p, hp, tensors, ENCODE);
  const d = hp.nEmbd;
  const hd = hp.headDimK;
  const cross: number[] = [];
  for (let il = 0; il < nDec; il++) {
    const H = hp.nHead[il];
    const k = p.buf(`k${H * hd}`, H * hd);
    const v = p.buf(`v${H * hd}`, H * hd);
    p.op('matmul', k, { a: x, weights: { weight: need(dt(il, 'cross_attn_k.weight')) }, params: { ...ENCODE } });
    p.op('matmul', v, { a: x, weights: { weight: need(dt(il, 'cross_attn_v.weight')) }, params: { ...ENCODE } });
    const layer = p.kvLayer(H * hd, H * hd);
    cross.push(layer);
    // (Its a and out are unused: the op stores k and v and computes nothing.)
    p.op('attention', p.buf(`attn${H * hd}`, H * hd), { a: k, b: k, c: v, params: { layer, n_head: H, n_head_kv: H, head_dim: hd, head_dim_v: hd, store_only: 1, ...ENCODE } });
  }
  const h = p.buf('h', d);
  const out = p.buf('blk_out', d);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') }, params: { ...DECODE } });
  for (let il = 0; il < nDec; il++) {
    const H = hp.nHead[il];
    const rel = relBias(tensors, lk, dt, il, H, buckets);
    const q = p.buf(`q${H * hd}`, H * hd);
    const k = p.buf(`k${H * hd}`, H * hd);
    const v = p.buf(`v${H * hd}`, H * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    p.op('rms_norm', h, { a: x, weights: { weight: need(dt(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps, ...DECODE } });
    for (const [buf, w] of [[q, 'attn_q'], [k, 'attn_k'], [v, 'attn_v']] as const) p.op('matmul', buf, { a: h, weights: { weight: need(dt(il, `${w}.weight`)) }, params: { ...DECODE } });
    const layer = p.kvLayer(H * hd, H * hd);
    p.op('attention', attn, { a: q, b: k, c: v, weights: { rel_b: rel }, params: { layer, n_head: H, n_head_kv: H, head_dim: hd, head_dim_v: hd, scale: 1, rel_bidir: false, ...DECODE } });
    p.op('matmul', out, { a: attn, weights: { weight: need(dt(il, 'attn_o.weight')) }, params: { ...DECODE } });
    p.op('add', x, { a: x, b: out, params: { ...DECODE } });
    p.op('rms_norm', h, { a: x, weights: { weight: need(dt(il, 'cross_attn_norm.weight')) }, params: { eps: hp.rmsEps, ...DECODE } });
    p.op('matmul', q, { a: h, weights: { weight: need(dt(il, 'cross_attn_q.weight')) }, params: { ...DECODE } });
    p.op('attention', attn, { a: q, params: { layer: cross[il], n_head: H, n_head_kv: H, head_dim: hd, head_dim_v: hd, scale: 1, cross: 1, ...DECODE } });
    p.op('matmul', out, { a: attn, weights: { weight: need(dt(il, 'cross_attn_o.weight')) }, params: { ...DECODE } });
    p.op('add', x, { a: x, b: out, params: { ...DECODE } });
    t5Ffn(p, hp, tensors, lk, (n) => dt(il, n), x, h, out, DECODE);
    p.op('cvec', x, { a: x, params: { layer: il, ...DECODE } });
  }
  p.op('rms_norm', x, { a: x, weights: { weight: need('dec.output_norm.weight') }, params: { eps: hp.rmsEps, ...DECODE } });
  p.hidden(x);
  const hOut = p.buf('h_out', d, true);
  p.op('gather_out', hOut, { a: x, params: { ...DECODE } });
  const logits = p.buf('logits', hp.nVocab, true);
  p.op('matmul', logits, { a: hOut, weights: { weight: maybe('output.weight') ?? need('token_embd.weight') }, params: { ...DECODE } });
  return p.build(logits);
}
