import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { ProgramBuilder, ropeParams } from '../program-builder';
import { hiddenOutput, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** llama.cpp's bounds on the counts that size the adapters' tensors (load_arch_hparams), and LLAMA_MAX_LAYERS. */
const MAX_ADAPTERS = 4096;
const MAX_RANK = 4096;
const MAX_BLOCKS = 512;
/**
 * llama.cpp's graph multiplies the projections and embeds with plain ggml_mul_mat / get_rows, not
 * build_lora_mm: a LoRA adapter file's pairs there are checked and left unused, as there (only
 * output.weight takes one).
 */
const NO_LORA = { no_lora: 1 };

/** An integer array key (INT32 in the converter's files), required. */
function intArray(hp: HParams, key: string): number[] {
  const k = `${hp.arch}.${key}`;
  const v = hp.meta.kv[k];
  if (v === undefined) throw new EngineError('KAIL_E_BAD_MODEL', `model file lacks metadata '${k}'`);
  if (typeof v !== 'object' || v === null || !('length' in v)) throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' must be an array of token ids`);
  const out = Array.from(v as ArrayLike<unknown>, (x) => (typeof x === 'number' || typeof x === 'bigint' ? Number(x) : NaN));
  const bad = out.findIndex((x) => !Number.isInteger(x) || x < -(2 ** 31) || x >= 2 ** 31);
  if (bad >= 0) {
    const x = (v as ArrayLike<unknown>)[bad];
    throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${k}' entry ${bad} is ${typeof x === 'string' ? `the string ${JSON.stringify(x)}` : String(x)}, not a 32-bit token id`);
  }
  return out;
}

function scaleKey(hp: HParams, key: string, def: number | undefined): number {
  const v = hp.meta.num(key, def);
  if (!Number.isFinite(v) || v < 0) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${key} ${v} is not a non-negative finite number`);
  return v;
}

/**
 * IBM Granite Switch (`graniteswitch`, llama.cpp's src/models/granite-switch.cpp): dense Granite
 * (fused attn_qkv, Granite's embedding / attention / residual / logit multipliers) whose seven
 * projections (q, k, v, attn_output, ffn_gate, ffn_up, ffn_down) each add a LoRA delta
 * B_s (A_s x) from stacked adapters (`<proj>.lora_a` [n_in, rank, n_slots], `.lora_b`
 * [rank, n_out, n_slots], n_slots = adapters.count + 1, slot 0 the base model's). A token's slot
 * s comes from llama.cpp's router: one causal attention head over a KV layer of its own (after the
 * blocks there; first here, which changes nothing: it is rope-free, so context shifts leave it),
 * each row zero but its first value: q 1, k +router_gain for an adapter's activation token and
 * -gain for any other, v the adapter's slot or 0, at scale 1; s = round(clamp(out, 0,
 * adapters.count)). So a token after one activation token takes its adapter, after several their
 * average slot, rounded. Activation tokens are embedded as their substitutes
 * (adapters.token_ids_substitute). Of a LoRA adapter file (--lora) only output.weight's pair applies.
 */
export function buildGraniteSwitch(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const a = hp.arch;
  if (hp.nLayer >= MAX_BLOCKS) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: block count ${hp.nLayer} exceeds llama.cpp's LLAMA_MAX_LAYERS (${MAX_BLOCKS}) with the router's layer`);
  const nAdapters = hp.meta.int('adapters.count', undefined, 0, 2 ** 32 - 1);
  if (nAdapters > MAX_ADAPTERS) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: invalid adapter count ${nAdapters} (at most ${MAX_ADAPTERS})`);
  const rank = hp.meta.int('adapters.lora_rank', undefined, 0, 2 ** 32 - 1);
  if (rank > MAX_RANK) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: invalid lora rank ${rank} (at most ${MAX_RANK})`);
  if (rank === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: adapters.lora_rank is 0: the switched LoRA tensors would be empty`);
  const gain = hp.meta.num('adapters.router_gain', 15);
  const activate = intArray(hp, 'adapters.token_ids_activate');
  const substitute = intArray(hp, 'adapters.token_ids_substitute');
  if (activate.length !== nAdapters || substitute.length !== nAdapters)
    throw new EngineError('KAIL_E_BAD_MODEL', `${a}: adapter token id arrays (${activate.length} activate, ${substitute.length} substitute) do not match adapter count ${nAdapters}`);
  const embd = need('token_embd.weight');
  const nVocab = tensors.get(embd)!.dims[1];
  // (llama.cpp checks the substitutes of the tokens its map keeps: with a token listed twice, the last.)
  const kept = new Map(activate.map((id, i) => [id, substitute[i]]));
  for (const sub of kept.values())
    if (sub < 0 || sub >= nVocab) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: substitute token id ${sub} out of range [0, ${nVocab})`);

  const logitScale = scaleKey(hp, 'logit_scale', undefined);
  if (logitScale === 0) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: logit_scale must not be 0`);
  const residualScale = scaleKey(hp, 'residual_scale', 0);
  const embeddingScale = scaleKey(hp, 'embedding_scale', 0);
  const useRope = hp.meta.bool('rope.scaling.finetuned', true);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd || hp.ropeDims !== hd)
    throw new EngineError('KAIL_E_BAD_MODEL', `${a}: key_length ${hd}, value_length ${hp.headDimV} and rope.dimension_count ${hp.ropeDims} must match`);
  const rope = { ...ropeParams(hp, false), head_dim: hd };
  const slots = nAdapters + 1;

  const b = new ProgramBuilder();
  const x = b.buf('x', hp.nEmbd);
  const h = b.buf('h', hp.nEmbd);
  const attnOut = b.buf('attn_out', hp.nEmbd);
  // Router inputs: [embedding row | q | k | v], each lane hd wide, as llama.cpp pads them.
  const route = b.buf(`switch_route${1 + 3 * hd}`, 1 + 3 * hd);
  b.op('switch_route', route, { params: { head_dim: hd, gain }, ids: [...activate, ...substitute] });
  b.op('embed', x, { b: route, weights: { weight: embd }, params: { index: 3, b_off: 0, no_lora: 1 } });
  if (embeddingScale !== 0) b.op('scale', x, { a: x, params: { scale: embeddingScale } });
  const slot = b.buf(`switch_slot${hd}`, hd);
  const routerLayer = b.kvLayer(hd, hd);
  b.op('attention', slot, {
    a: route,
    b: route,
    c: route,
    params: { layer: routerLayer, n_head: 1, n_head_kv: 1, head_dim: hd, head_dim_v: hd, scale: 1, a_off: 1, b_off: 1 + hd, c_off: 1 + 2 * hd },
  });

  /** out = in · W (+ the token's adapter delta): W, and lora_a/lora_b of `proj`. */
  const lora = (il: number, proj: string, inBuf: number, out: number, nIn: number, nOut: number, outOff = 0) => {
    const la = need(t(il, `${proj}.lora_a`));
    const lb = need(t(il, `${proj}.lora_b`));
    const [da, db] = [tensors.get(la)!.dims, tensors.get(lb)!.dims];
    const want = [[nIn, rank, slots], [rank, nOut, slots]];
    if (da.join() !== want[0].join() || db.join() !== want[1].join())
      throw new EngineError('KAIL_E_BAD_MODEL', `${a}: block ${il}'s ${proj}.lora_a [${da.join(', ')}] and lora_b [${db.join(', ')}] must be [${want[0].join(', ')}] and [${want[1].join(', ')}] (adapters.lora_rank ${rank}, adapters.count ${nAdapters} + the base slot)`);
    b.op('switch_lora', out, { a: inBuf, b: slot, weights: { lora_a: la, lora_b: lb }, params: { b_off: 0, out_off: outOff } });
  };
  const residual = (buf: number) => {
    if (residualScale !== 0) b.op('scale', buf, { a: buf, params: { scale: residualScale } });
    b.op('add', x, { a: x, b: buf });
  };

  for (let il = 0; il < hp.nLayer; il++) {
    const H = hp.nHead[il];
    const Hkv = hp.nHeadKv[il];
    if (H < 1 || Hkv < 1 || H % Hkv !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `${a}: layer ${il}: head_count ${H} is not a positive multiple of head_count_kv ${Hkv}`);
    const [wq, wk] = [H * hd, Hkv * hd];
    b.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const qkv = b.buf(`qkv${wq + 2 * wk}`, wq + 2 * wk);
    b.op('matmul', qkv, { a: h, weights: { weight: need(t(il, 'attn_qkv.weight')) }, params: NO_LORA });
    const q = b.buf(`q${wq}`, wq);
    const k = b.buf(`k${wk}`, wk);
    const v = b.buf(`v${wk}`, wk);
    b.op('copy', q, { a: qkv, params: { a_off: 0, n: wq } });
    b.op('copy', k, { a: qkv, params: { a_off: wq, n: wk } });
    b.op('copy', v, { a: qkv, params: { a_off: wq + wk, n: wk } });
    lora(il, 'attn_q', h, q, hp.nEmbd, wq);
    lora(il, 'attn_k', h, k, hp.nEmbd, wk);
    lora(il, 'attn_v', h, v, hp.nEmbd, wk);
    if (useRope) {
      b.op('rope', q, { a: q, params: { ...rope, n_head: H } });
      b.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    }
    const attn = b.buf(`attn${wq}`, wq);
    b.op('attention', attn, {
      a: q,
      b: k,
      c: v,
      params: { layer: b.kvLayer(wk, wk), n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: hp.attentionScale || 1 / Math.sqrt(hd) },
    });
    b.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) }, params: NO_LORA });
    lora(il, 'attn_output', attn, attnOut, wq, hp.nEmbd);
    residual(attnOut);

    b.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ff = tensors.get(need(t(il, 'ffn_up.weight')))!.dims[1];
    const g = b.buf(`ffn_gate${ff}`, ff);
    const u = b.buf(`ffn_up${ff}`, ff);
    b.op('matmul', g, { a: h, weights: { weight: need(t(il, 'ffn_gate.weight')) }, params: NO_LORA });
    lora(il, 'ffn_gate', h, g, hp.nEmbd, ff);
    b.op('matmul', u, { a: h, weights: { weight: need(t(il, 'ffn_up.weight')) }, params: NO_LORA });
    lora(il, 'ffn_up', h, u, hp.nEmbd, ff);
    b.op('swiglu', g, { a: g, b: u });
    const ffnOut = b.buf('ffn_out', hp.nEmbd);
    b.op('matmul', ffnOut, { a: g, weights: { weight: need(t(il, 'ffn_down.weight')) }, params: NO_LORA });
    lora(il, 'ffn_down', g, ffnOut, ff, hp.nEmbd);
    residual(ffnOut);
    b.op('cvec', x, { a: x, params: { layer: il } });
  }
  const ho = hiddenOutput(b, hp, need, x);
  const head = maybe('output.weight') ?? embd;
  const logits = b.buf('logits', tensors.get(head)!.dims[1], true);
  b.op('matmul', logits, { a: ho, weights: { weight: head } });
  b.op('scale', logits, { a: logits, params: { scale: Math.fround(1 / Math.fround(logitScale)) } });
  return b.build(logits);
}
