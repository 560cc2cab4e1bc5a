// DFlash block-diffusion drafts (llama.cpp's `dflash`: src/models/dflash.cpp's encoder and decoder
// graphs, and common/speculative.cpp's draft-dflash driver, common_speculative_impl_draft_dflash).
// The draft keeps its own KV cache. Its target's hidden states at the blocks of
// `dflash.target_layers` (each block's input, concatenated per position) go through the encoder,
// g = enc.output_norm(fc(features)), and every block stores K = RoPE(k_norm(wk g)) and V = wv g at
// the target's positions (llama.cpp's injection pass, an embd batch). A draft is one pass over the
// noise block [last token, mask x (B - 1)] at the positions after the target's cache: Qwen3 blocks
// (attn_norm, q/k/v, per-head q/k norms, NeoX RoPE, attention over the injected positions and the
// whole block - both ways unless `dflash.attention.causal` - attn_output, residual; ffn_norm, SwiGLU,
// residual), output_norm and the head; rows 1..B-1 predict the B-1 drafted tokens. The target's
// token_embd and output stand in when the draft has none (LoadModelOptions.embeddingsFrom); a draft
// with `d2t` (I64 target ids) has its own head over a smaller draft vocabulary that d2t maps back. As
// llama.cpp's plain DFlash graph, logit_scale and final_logit_softcapping are not applied (the draft
// picks its tokens by argmax or its sampler over the raw rows).
//
// kail runs both passes as one program: row input = [features (L x target n_embd) | m (n_embd) |
// c (n_embd)] (dflashRow writes it). An injected row passes its features, m = 0 and c = 1; a block
// row zero features, m = 1 and c = 0. g = enc.output_norm(fc(features) + m) * c, and every block's
// K/V/Q input is attn_norm(x) * m + g. For a block row g is a finite row (the norm of ones, never of
// zeros, which with a zero epsilon would be NaN) times 0 = 0, and the input attn_norm(x) exactly; for
// an injected row fc(features) + 0 and the input 0 + g are exactly llama.cpp's g (its own residual
// stream goes on but is never read: only its K and V stay in the cache). So one pass of [injected
// rows, block rows] leaves the cache and gives the logits llama.cpp's injection and block passes give.
import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { MAX_LAYERS } from '../hparams';
import { ProgramBuilder, denseGatedFfn, ropeFactorTensor, ropeParams } from '../program-builder';
import { tensorLookup } from './deepseek2';

/** A DFlash file's keys: what it reads from the target, and how it drafts. */
export interface DflashParams {
  /** The target blocks whose inputs the encoder reads (llama.cpp's extract layers), in order. */
  targetLayers: number[];
  /** Noise block length (dflash.block_size, default 16): at most blockSize - 1 drafted tokens. */
  blockSize: number;
  /** dflash.attention.causal (default false: the block attends both ways). */
  causal: boolean;
  /** tokenizer.ggml.mask_token_id: the token of the block's masked positions. */
  maskToken: number;
}

function intArray(v: unknown): number[] | null {
  if (typeof v !== 'object' || v === null || !('length' in (v as object))) return null;
  return Array.from(v as ArrayLike<unknown>, (x) => (typeof x === 'number' || typeof x === 'bigint' ? Number(x) : NaN));
}

/** The variants llama.cpp's dflash architecture also covers that kail does not run, refused by name. */
function refuseVariants(hp: HParams, tensors?: Map<string, GgufTensorInfo>): void {
  const md = hp.meta;
  const unsupported = (what: string) => new EngineError('KAIL_E_UNSUPPORTED', `this dflash file is ${what}; kail runs plain DFlash drafts only`);
  if (md.num('selector_top_k', 0) > 0 || md.num('selector_rank', 0) > 0 || tensors?.has('selector_hidden.weight'))
    throw unsupported('a DFlash2 draft (dflash.selector_top_k / selector_rank: the candidate selector)');
  if (md.num('conv_kernel_size', 0) > 0 || [...(tensors?.keys() ?? [])].some((n) => /^blk\.\d+\.(attn|ffn)_conv_/.test(n)))
    throw unsupported("a DFlash2 draft (dflash.conv_kernel_size / blk.N.*_conv_*: its dynamic convolutions)");
  if (md.num('hyper_connection.count', 0) > 0) throw unsupported('a DSpark draft on a DeepSeek-V4 backbone (dflash.hyper_connection.count)');
  if (tensors?.has('markov_w1.weight') || tensors?.has('conf_proj.weight')) throw unsupported('a DSpark draft (markov_w1 / conf_proj: its Markov and confidence heads)');
  if (md.num('attention.sliding_window', 0) > 0) throw unsupported('a sliding-window DFlash draft (dflash.attention.sliding_window)');
}

export function dflashParams(hp: HParams): DflashParams {
  const md = hp.meta;
  refuseVariants(hp);
  const key = 'dflash.target_layers';
  const v = md.kv[key];
  if (v === undefined) throw new EngineError('KAIL_E_BAD_MODEL', `a DFlash draft needs metadata '${key}' (the target layers it reads)`);
  const ids = intArray(v);
  if (!ids || ids.length < 1 || ids.length > MAX_LAYERS || !ids.every((x) => Number.isInteger(x) && x >= 0 && x < MAX_LAYERS))
    throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${key}' must be a non-empty array of layer indices, is ${ids ? JSON.stringify(ids.map(String)) : String(v)}`);
  const mask = md.kv['tokenizer.ggml.mask_token_id'];
  if (mask === undefined) throw new EngineError('KAIL_E_BAD_MODEL', "a DFlash draft needs metadata 'tokenizer.ggml.mask_token_id' (the token of its noise block's masked positions)");
  const maskToken = md.int('tokenizer.ggml.mask_token_id', undefined, 0, hp.nVocab - 1);
  return {
    targetLayers: ids,
    blockSize: md.int('block_size', 16, 2, 1024),
    causal: md.bool('attention.causal', false),
    maskToken,
  };
}

/**
 * Writes row `row` of a DFlash program's input (`width` floats per row, the draft's n_embd `d`): an
 * injected row (`features`: the target's feature row, m = 0, c = 1) or a block row (null: zero
 * features, m = 1, c = 0). The rows start zeroed.
 */
export function dflashRow(embd: Float32Array, row: number, width: number, d: number, features: Float32Array | null): void {
  const at = row * width;
  if (features) {
    embd.set(features, at);
    embd.fill(1, at + width - d, at + width);
  } else embd.fill(1, at + width - 2 * d, at + width - d);
}

const KNOWN = /^(d2t|token_embd\.weight|output\.weight|fc\.weight|enc\.output_norm\.weight|output_norm\.weight|rope_freqs\.weight|blk\.\d+\.(attn_norm|attn_q|attn_k|attn_v|attn_output|attn_q_norm|attn_k_norm|ffn_norm|ffn_gate|ffn_up|ffn_down)\.weight)$/;

export function buildDflash(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  refuseVariants(hp, tensors);
  const e = dflashParams(hp);
  for (const name of tensors.keys())
    if (!KNOWN.test(name)) throw new EngineError('KAIL_E_UNSUPPORTED', `dflash: tensor '${name}' belongs to a DFlash variant kail does not run (plain DFlash has fc, enc.output_norm, output_norm, the Qwen3 blocks' tensors and optionally token_embd / output)`);
  if (hp.headDimK !== hp.headDimV) throw new EngineError('KAIL_E_BAD_MODEL', `dflash: key_length ${hp.headDimK} and value_length ${hp.headDimV} must match`);
  if (!maybe('token_embd.weight'))
    throw new EngineError('KAIL_E_INVALID_ARG', "this DFlash draft has no token_embd.weight of its own: it takes its target's (load it with embeddingsFrom: the target's file)");
  const md = hp.meta;
  const act = md.str('hidden_activation', 'silu');
  if (act !== 'silu' && act !== 'gelu' && act !== 'gelu_pytorch_tanh') throw new EngineError('KAIL_E_UNSUPPORTED', `dflash: hidden_activation '${act}' (llama.cpp takes silu, gelu and gelu_pytorch_tanh)`);
  const sections = md.kv[`dflash.rope.dimension_sections`];
  const sec = sections === undefined ? null : intArray(sections);
  // (Drafts for M-RoPE targets carry [n_rot / 2, 0, 0, 0]: every pair on the temporal position, NeoX RoPE.)
  if (sections !== undefined && (!sec || sec.length < 1 || sec[0] * 2 !== hp.ropeDims || sec.slice(1).some((x) => x !== 0)))
    throw new EngineError('KAIL_E_UNSUPPORTED', `dflash: rope.dimension_sections ${JSON.stringify(sec?.map(String) ?? String(sections))}: kail takes only a draft's degenerate sections [n_rot / 2, 0, 0, 0]`);
  const d = hp.nEmbd;
  const dims = (name: string) => tensors.get(need(name))!.dims;
  const te = dims('token_embd.weight');
  if (te.length !== 2 || te[0] !== d) throw new EngineError('KAIL_E_BAD_MODEL', `dflash: token_embd.weight is [${te.join(', ')}]; it needs [${d}, n_vocab]`);
  const fc = dims('fc.weight');
  const L = e.targetLayers.length;
  if (fc.length !== 2 || fc[1] !== d || fc[0] % L !== 0)
    throw new EngineError('KAIL_E_BAD_MODEL', `dflash: fc.weight is [${fc.join(', ')}]; ${L} target layers into ${d} need [${L} x target n_embd, ${d}]`);
  const nIn = fc[0];
  const p = new ProgramBuilder();
  const rms = (out: number, a: number, weight: string) => p.op('rms_norm', out, { a, weights: { weight }, params: { eps: hp.rmsEps } });
  // Encoder: g = enc.output_norm(fc(features) + m) * c; zero for a block row.
  const inp = p.buf('dflash_in', nIn + 2 * d);
  p.op('input', inp);
  const feat = p.buf('dflash_features', nIn);
  p.op('copy', feat, { a: inp, params: { a_off: 0, n: nIn } });
  const g = p.buf('g', d);
  p.op('matmul', g, { a: feat, weights: { weight: need('fc.weight') } });
  p.op('add', g, { a: g, b: inp, params: { b_off: nIn, n: d } });
  rms(g, g, need('enc.output_norm.weight'));
  p.op('mul', g, { a: g, b: inp, params: { b_off: nIn + d, n: d } });
  // The noise block's embeddings (an injected row's are never read).
  const x = p.buf('x', d);
  p.op('embed', x, { weights: { weight: need('token_embd.weight') } });
  const embScale = md.num('embedding_scale', 0);
  if (embScale !== 0) p.op('scale', x, { a: x, params: { scale: embScale } });
  const H = hp.nHead[0];
  const Hkv = hp.nHeadKv[0];
  const hd = hp.headDimK;
  if (H % Hkv !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `dflash: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
  const attnScale = md.num('attention.scale', 0);
  const ropeFreqs = ropeFactorTensor(hp, tensors, nCtxSeq, 'freqs');
  const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
  const rp = ropeParams(hp, true);
  const xn = p.buf('attn_in', d);
  const q = p.buf('q', H * hd);
  const k = p.buf('k', Hkv * hd);
  const v = p.buf('v', Hkv * hd);
  const attn = p.buf('attn', H * hd);
  const attnOut = p.buf('attn_out', d);
  const h = p.buf('h', d);
  const ffnOut = p.buf('ffn_out', d);
  const t = (il: number, name: string) => `blk.${il}.${name}`;
  for (let il = 0; il < hp.nLayer; il++) {
    if (hp.nHead[il] !== H || hp.nHeadKv[il] !== Hkv) throw new EngineError('KAIL_E_BAD_MODEL', 'dflash: every block has the same head counts');
    if (!maybe(t(il, 'attn_v.weight'))) throw new EngineError('KAIL_E_UNSUPPORTED', `dflash: block ${il} has no attn_v (a shared K/V draft); kail runs drafts with their own V projection`);
    rms(xn, x, need(t(il, 'attn_norm.weight')));
    // attn_norm(x) * m + g: the block row's normed state, or the injected row's g.
    p.op('mul', xn, { a: xn, b: inp, params: { b_off: nIn, n: d } });
    p.op('add', xn, { a: xn, b: g });
    p.op('matmul', q, { a: xn, weights: { weight: need(t(il, 'attn_q.weight')) } });
    p.op('matmul', k, { a: xn, weights: { weight: need(t(il, 'attn_k.weight')) } });
    p.op('matmul', v, { a: xn, weights: { weight: need(t(il, 'attn_v.weight')) } });
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    p.op('rope', q, { a: q, weights: rw, params: { ...rp, head_dim: hd, n_head: H } });
    p.op('rope', k, { a: k, weights: rw, params: { ...rp, head_dim: hd, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: attnScale !== 0 ? attnScale : 1 / Math.sqrt(hd), ...(e.causal ? {} : { causal: false }) },
    });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });
    rms(h, x, need(t(il, 'ffn_norm.weight')));
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut, act === 'silu' ? 'swiglu' : 'geglu');
    p.op('add', x, { a: x, b: ffnOut });
  }
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: x });
  rms(ho, ho, need('output_norm.weight'));
  // The head: the draft's output, else the target's (embeddingsFrom), else a tied token_embd; with
  // d2t, the draft's own output over its draft vocabulary.
  const head = maybe('output.weight') ?? need('token_embd.weight');
  const hdims = tensors.get(head)!.dims;
  const d2t = tensors.get('d2t');
  const nOut = d2t ? d2t.dims[0] : hp.nVocab;
  if (d2t && (d2t.dims.length !== 1 || !(nOut >= 1 && nOut <= hp.nVocab)))
    throw new EngineError('KAIL_E_BAD_MODEL', `dflash: d2t is [${d2t.dims.join(', ')}]; it must be one row of at most ${hp.nVocab} target ids`);
  if (hdims.length !== 2 || hdims[0] !== d || hdims[1] !== nOut)
    throw new EngineError('KAIL_E_BAD_MODEL', `dflash: ${head} is [${hdims.join(', ')}]; the head needs [${d}, ${nOut}]${d2t ? " (d2t's draft vocabulary)" : ''}`);
  const logits = p.buf('logits', nOut, true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}
