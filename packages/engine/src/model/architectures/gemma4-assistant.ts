import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, type HParams } from '../hparams';
import { ProgramBuilder, denseGatedFfn } from '../program-builder';
import { tensorLookup } from './deepseek2';
import { gemma4Attention } from './gemma4';

const t = (i: number, name: string) => `blk.${i}.${name}`;
/** A float32 constant as llama.cpp computes it in C (sqrtf). */
const f32 = Math.fround;

/** What a Gemma 4 assistant draft binds to: its target's hyperparameters and program. */
export interface AssistantTarget {
  hparams: HParams;
  program: ModelProgram;
  path: string;
}

/** One target block's cache as its attention op reads it. */
interface TargetCache {
  layer: number;
  nHeadKv: number;
  headDim: number;
  window: number;
}

/**
 * The KV layer each target block's attention reads (a block that shares an earlier block's cache
 * resolves to the owner's layer, as llama.cpp's layer reuse), with its heads and window: each
 * attention op belongs to the block of the nearest earlier op naming a blk.N. weight.
 */
export function targetBlockCaches(program: ModelProgram): Map<number, TargetCache> {
  const out = new Map<number, TargetCache>();
  let block = -1;
  for (const op of program.ops) {
    for (const w of Object.values(op.weights ?? {})) {
      const m = /^blk\.(\d+)\./.exec(w);
      if (m) block = Number(m[1]);
    }
    if (op.op !== 'attention' || block < 0 || op.params?.ext_layer !== undefined) continue;
    const p = op.params ?? {};
    out.set(block, { layer: Number(p.layer), nHeadKv: Number(p.n_head_kv), headDim: Number(p.head_dim), window: Number(p.window ?? 0) });
  }
  return out;
}

/**
 * Google's Gemma 4 assistant drafts (`gemma4-assistant`, llama.cpp src/models/gemma4-assistant.cpp):
 * a small model that drafts for its Gemma 4 target over the TARGET's KV cache (llama.cpp's
 * ctx_other), keeping none of its own. Its row input is the target's post-output-norm hidden state
 * (`embedding_length_out` = the target's n_embd) of the position before, or its own previous h_next;
 * with the token embedded by the target's token_embd times sqrt(target n_embd), [embedding; h] goes
 * through nextn.pre_projection. Each block: attn_norm, q, per-head RMS attn_q_norm, NEOX RoPE
 * (sliding blocks: rope.freq_base_swa, dimension_count_swa; full blocks: rope_freqs as freq factors),
 * attention (scale 1) over the target's cache of its last sliding block (n_layer - 2) or last full
 * block (n_layer - 1) as the target's program maps them, positions before the row's (the row itself
 * is never cached; the sliding window counted with it), attn_output, post_attention_norm, residual;
 * ffn_norm, GeGLU, post_ffw_norm, residual; times layer_output_scale. Then output_norm; logits
 * through the draft's own token_embd (tied, no soft-capping); the hidden rows are
 * nextn.post_projection of the normed state (h_next, the next draft step's input).
 */
export function buildGemma4Assistant(hp: HParams, tensors: Map<string, GgufTensorInfo>, target: AssistantTarget | undefined): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const refuse = (msg: string): never => {
    throw new EngineError('KAIL_E_INVALID_ARG', `${hp.arch}: ${msg}`);
  };
  if (!target) return refuse('a Gemma 4 assistant draft attends over its target\'s KV cache: load it with kvSource (its target model), or give it with --draft beside its target');
  const th = target.hparams;
  if (th.arch !== 'gemma4') refuse(`the draft's target must be a gemma4 model; ${target.path} is '${th.arch}'`);
  const nL = hp.nLayer;
  const { swa, window, hdFull, hdSwa, ropeFull, ropeSwa } = gemma4Attention(hp, bad);
  const T = md.int('embedding_length_out', undefined, 1, MAX_DIM);
  const d = hp.nEmbd;
  if (T === d) bad(`embedding_length_out ${T} must carry the target's hidden size, not the draft's own (${d})`);
  if (T !== th.nEmbd) refuse(`the draft reads target hidden states of ${T} floats (embedding_length_out); the target ${target.path} has n_embd ${th.nEmbd}`);
  const ropeFreqs = swa.every(Boolean) ? undefined : need('rope_freqs.weight');

  // Which target caches the blocks read: sliding ones the target's block n_layer - 2's, full ones n_layer - 1's.
  const caches = targetBlockCaches(target.program);
  const tl = th.nLayer;
  const cacheOf = (sliding: boolean): TargetCache => {
    const blk = tl - (sliding ? 2 : 1);
    const c = blk >= 0 ? caches.get(blk) : undefined;
    if (!c) return refuse(`the target ${target.path} has no attention in block ${blk} for the draft's ${sliding ? 'sliding' : 'full'} blocks to read`);
    if (sliding !== c.window > 0)
      refuse(`the draft's ${sliding ? 'sliding' : 'full'} blocks read the target's block ${blk}, which attends ${c.window > 0 ? `through a sliding window of ${c.window}` : 'in full'}`);
    return c;
  };

  const p = new ProgramBuilder();
  // Input: the target's (or the draft's own) hidden row; the token through the target's embedding.
  const inp = p.buf('assistant_h', T);
  p.op('input', inp);
  const emb = p.buf('assistant_embd', T);
  p.op('embed', emb, { weights: { weight: 'target:token_embd.weight' } });
  p.op('scale', emb, { a: emb, params: { scale: f32(Math.sqrt(T)) } });
  const xh = p.buf('assistant_xh', 2 * T);
  p.op('copy', xh, { a: emb, params: { n: T } });
  p.op('copy', xh, { a: inp, params: { n: T, out_off: T } });
  const pre = need('nextn.pre_projection.weight');
  const pd = tensors.get(pre)!.dims;
  if (pd[0] !== 2 * T || pd[1] !== d) bad(`nextn.pre_projection.weight is [${pd.join(', ')}]; it needs [${2 * T}, ${d}]`);
  const x = p.buf('x', d);
  p.op('matmul', x, { a: xh, weights: { weight: pre } });

  const h = p.buf('h', d);
  const attnOut = p.buf('attn_out', d);
  const ao = p.buf('attn_res', d);
  const ffnOut = p.buf('ffn_out', d);
  for (let il = 0; il < nL; il++) {
    const hd = swa[il] ? hdSwa : hdFull;
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    const c = cacheOf(swa[il]);
    if (c.headDim !== hd || c.nHeadKv !== Hkv)
      refuse(`block ${il} reads the target's cache of ${c.nHeadKv} KV heads of ${c.headDim}, but has ${Hkv} KV heads of ${hd}`);
    if (H % Hkv !== 0) bad(`layer ${il}: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
    if (swa[il] && window > c.window) refuse(`the draft's sliding window ${window} is wider than its target's ${c.window}`);
    const rope = swa[il] ? ropeSwa : ropeFull;
    const ropeW = !swa[il] && ropeFreqs ? { weights: { freq_factors: ropeFreqs } } : {};
    const q = p.buf(`q${H * hd}`, H * hd);
    const attn = p.buf(`attn${H * hd}`, H * hd);
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('matmul', q, { a: h, weights: { weight: need(t(il, 'attn_q.weight')) } });
    p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    p.op('rope', q, { a: q, ...ropeW, params: { ...rope, n_head: H } });
    p.op('attention', attn, { a: q, params: { ext_layer: c.layer, exclusive: 1, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1, ...(swa[il] ? { window } : {}) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('rms_norm', attnOut, { a: attnOut, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', ao, { a: attnOut, b: x });
    p.op('rms_norm', h, { a: ao, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut, 'geglu');
    p.op('rms_norm', ffnOut, { a: ffnOut, weights: { weight: need(t(il, 'post_ffw_norm.weight')) }, params: { eps: hp.rmsEps } });
    p.op('add', x, { a: ffnOut, b: ao });
    p.op('mul', x, { a: x, weights: { weight: need(t(il, 'layer_output_scale.weight')) } });
  }
  // output_norm per row: the logits (tied head) of the output rows, h_next of every row.
  const xn = p.buf('x_norm', d);
  p.op('rms_norm', xn, { a: x, weights: { weight: need('output_norm.weight') }, params: { eps: hp.rmsEps } });
  const post = need('nextn.post_projection.weight');
  const qd = tensors.get(post)!.dims;
  if (qd[0] !== d || qd[1] !== T) bad(`nextn.post_projection.weight is [${qd.join(', ')}]; it needs [${d}, ${T}]`);
  const hNext = p.buf('h_next', T);
  p.op('matmul', hNext, { a: xn, weights: { weight: post } });
  p.hidden(hNext);
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: xn });
  const head = need('token_embd.weight');
  const logits = p.buf('logits', tensors.get(head)!.dims[1], true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}
