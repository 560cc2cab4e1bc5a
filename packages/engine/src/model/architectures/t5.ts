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
  const { need, maybe } = tensorLookup(hp, tensors);
  const buckets = hp.meta.int('attention.relative_buckets_count', undefined, 4, 1 << 16);
  // Required, as llama.cpp's loader reads it (hp.rmsEps would default it).
  hp.meta.num('attention.layer_norm_rms_epsilon');
  const d = hp.nEmbd;
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key and value heads differ (${hd} / ${hp.headDimV})`);
  const rel0 = maybe(t(0, 'attn_rel_b.weight'));
  const p = new ProgramBuilder();
  const x = p.buf('x', d);
  const h = p.buf('h', d);
  const out = p.buf('blk_out', d);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  for (let il = 0; il < hp.nLayer; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H !== Hkv) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: head_count ${H} differs from head_count_kv ${Hkv} (T5 has no grouped-query attention)`);
    const rel = maybe(t(il, 'attn_rel_b.weight')) ?? rel0;
    if (!rel) throw new EngineError('KAIL_E_BAD_MODEL', `layer ${il}: no relative position bias (${t(il, 'attn_rel_b.weight')}, nor block 0's to share)`);
    const rt = tensors.get(rel)!;
    if (rt.dims.length !== 2 || rt.dims[0] !== H || rt.dims[1] !== buckets)
      throw new EngineError('KAIL_E_BAD_MODEL', `tensor '${rel}' [${rt.dims.join(', ')}] is not [${H} heads, ${buckets} buckets] (attention.relative_buckets_count)`);
    const q = p.buf(`q${H * hd}`, H * hd);
    const k = p.buf(`k${H * hd}`, H * hd);
    const v = p.buf(`v${H * hd}`, H * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    for (const [buf, w] of [[q, 'attn_q'], [k, 'attn_k'], [v, 'attn_v']] as const) p.op('matmul', buf, { a: h, weights: { weight: need(t(il, `${w}.weight`)) } });
    const layer = p.kvLayer(H * hd, H * hd);
    p.op('attention', attn, { a: q, b: k, c: v, weights: { rel_b: rel }, params: { layer, n_head: H, n_head_kv: H, head_dim: hd, head_dim_v: hd, scale: 1, causal: false, rel_bidir: true } });
    p.op('matmul', out, { a: attn, weights: { weight: need(t(il, 'attn_o.weight')) } });
    p.op('add', x, { a: x, b: out });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const up = need(t(il, 'ffn_up.weight'));
    const ff = tensors.get(up)!.dims[1];
    const u = p.buf(`ffn_up${ff}`, ff);
    p.op('matmul', u, { a: h, weights: { weight: up } });
    const gate = maybe(t(il, 'ffn_gate.weight'));
    if (gate) {
      const g = p.buf(`ffn_gate${ff}`, ff);
      p.op('matmul', g, { a: h, weights: { weight: gate } });
      p.op('gelu', g, { a: g });
      p.op('mul', u, { a: g, b: u });
    } else {
      p.op('clamp', u, { a: u, params: { min: 0, max: FLT_MAX } });
    }
    p.op('matmul', out, { a: u, weights: { weight: need(t(il, 'ffn_down.weight')) } });
    p.op('add', x, { a: x, b: out });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  p.op('rms_norm', x, { a: x, weights: { weight: need('enc.output_norm.weight') }, params: { eps: hp.rmsEps } });
  p.hidden(x);
  const hOut = p.buf('h_out', d, true);
  p.op('gather_out', hOut, { a: x });
  return p.build(hOut);
}
