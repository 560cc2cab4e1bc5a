// EAGLE-3 draft models (llama.cpp's `eagle3`: src/models/eagle3.cpp, its encoder and decoder graphs,
// and common/speculative.cpp's draft-eagle3 driver). The draft reads the target's hidden states at
// three blocks (`eagle3.target_layers`: each block's input, concatenated per position): its encoder
// maps them to g = fc([enc.output_norm](features)); its decoder is one llama block over
// [attn_norm(embed(token)); attn_norm_2(g)] with residual g (or attn_norm_2(g) with
// `eagle3.norm_before_residual`), whose pre-norm output is both the next draft step's g and, through
// output_norm and the head, its logits (over a draft vocabulary mapped back by `d2t` when present).
//
// kail runs encoder and decoder as one program: row input = [features (3 x target n_embd) | g_prev
// (n_embd)] and g = fc(features) + g_prev, so a row built from the target's features passes zeros as
// g_prev and a drafted row (whose g is the step before's pre-norm output, llama.cpp's draft() rows)
// passes zeros as features: fc(0) = 0 and x + 0 = x exactly, so each row gets exactly llama.cpp's g.
import fs from 'node:fs';

import type { GgufTensorInfo, ModelProgram, ProgramOp } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { MAX_LAYERS } from '../hparams';
import { ProgramBuilder, denseGatedFfn, ropeFactorTensor, ropeParams } from '../program-builder';
import { tensorLookup } from './deepseek2';

/** An EAGLE-3 file's keys: what it reads from the target, and its options. */
export interface Eagle3Params {
  /** The three target blocks whose inputs the encoder reads (llama.cpp's extract_layers). */
  targetLayers: number[];
  /** The target's n_embd. */
  targetDim: number;
  normBeforeFc: boolean;
  normBeforeResidual: boolean;
}

export function eagle3Params(hp: HParams): Eagle3Params {
  const md = hp.meta;
  const key = 'eagle3.target_layers';
  const v = md.kv[key];
  if (v === undefined) throw new EngineError('KAIL_E_BAD_MODEL', `an EAGLE-3 draft needs metadata '${key}' (the three target layers it reads)`);
  const ids = typeof v === 'object' && v !== null && 'length' in (v as object) ? Array.from(v as ArrayLike<unknown>, (x) => (typeof x === 'number' || typeof x === 'bigint' ? Number(x) : NaN)) : [];
  if (ids.length !== 3 || !ids.every((x) => Number.isInteger(x) && x >= 0 && x < MAX_LAYERS))
    throw new EngineError('KAIL_E_BAD_MODEL', `metadata '${key}' must be an array of exactly three layer indices, is ${JSON.stringify(Array.isArray(v) || ArrayBuffer.isView(v) ? Array.from(v as ArrayLike<unknown>, String) : String(v))}`);
  return {
    targetLayers: ids,
    targetDim: md.int('target_hidden_size', undefined, 1, 1 << 20),
    normBeforeFc: md.bool('norm_before_fc', false),
    normBeforeResidual: md.bool('norm_before_residual', false),
  };
}

/** The floats of one input row of an EAGLE-3 program: the target's features, then g_prev. */
export function eagle3InputWidth(hp: HParams): number {
  return 3 * eagle3Params(hp).targetDim + hp.nEmbd;
}

export function buildEagle3(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const e = eagle3Params(hp);
  if (hp.nLayer !== 1) throw new EngineError('KAIL_E_BAD_MODEL', `an EAGLE-3 draft has exactly one decoder block; block_count is ${hp.nLayer}`);
  if (hp.headDimK !== hp.headDimV) throw new EngineError('KAIL_E_BAD_MODEL', `eagle3: key_length ${hp.headDimK} and value_length ${hp.headDimV} must match`);
  // (Without its own, the target's: LoadModelOptions.embeddingsFrom puts them among the tensors.)
  if (!maybe('token_embd.weight') || !maybe('output.weight'))
    throw new EngineError('KAIL_E_INVALID_ARG', "this EAGLE-3 draft has no token_embd.weight or output.weight of its own: it takes its target's (load it with embeddingsFrom: the target's file)");
  const d = hp.nEmbd;
  const nIn = 3 * e.targetDim;
  const dims = (name: string) => tensors.get(need(name))!.dims;
  const te = dims('token_embd.weight');
  if (te.length !== 2 || te[0] !== d) throw new EngineError('KAIL_E_BAD_MODEL', `eagle3: token_embd.weight is [${te.join(', ')}]; it needs [${d}, n_vocab]`);
  const fc = dims('fc.weight');
  if (fc[0] !== nIn || fc[1] !== d) throw new EngineError('KAIL_E_BAD_MODEL', `eagle3: fc.weight is [${fc.join(', ')}]; 3 target layers of ${e.targetDim} into ${d} need [${nIn}, ${d}]`);
  const p = new ProgramBuilder();
  const rms = (out: number, a: number, weight: string) => p.op('rms_norm', out, { a, weights: { weight }, params: { eps: hp.rmsEps } });
  // Encoder: g = fc([enc.output_norm](features)) + g_prev.
  const inp = p.buf('eagle3_in', nIn + d);
  p.op('input', inp);
  const feat = p.buf('eagle3_features', nIn);
  p.op('copy', feat, { a: inp, params: { a_off: 0, n: nIn } });
  if (e.normBeforeFc) rms(feat, feat, need('enc.output_norm.weight'));
  const g = p.buf('g', d);
  p.op('matmul', g, { a: feat, weights: { weight: need('fc.weight') } });
  const gPrev = p.buf('g_prev', d);
  p.op('copy', gPrev, { a: inp, params: { a_off: nIn, n: d } });
  p.op('add', g, { a: g, b: gPrev });
  // Decoder block over [attn_norm(embed(token)); attn_norm_2(g)].
  const emb = p.buf('eagle3_embd', d);
  p.op('embed', emb, { weights: { weight: need('token_embd.weight') } });
  rms(emb, emb, need('blk.0.attn_norm.weight'));
  const gn = p.buf('g_norm', d);
  rms(gn, g, need('blk.0.attn_norm_2.weight'));
  const cat = p.buf('eagle3_concat', 2 * d);
  p.op('copy', cat, { a: emb, params: { n: d } });
  p.op('copy', cat, { a: gn, params: { n: d, out_off: d } });
  const H = hp.nHead[0];
  const Hkv = hp.nHeadKv[0];
  const hd = hp.headDimK;
  if (H % Hkv !== 0) throw new EngineError('KAIL_E_BAD_MODEL', `eagle3: head_count ${H} is not a multiple of head_count_kv ${Hkv}`);
  const q = p.buf('q', H * hd);
  const k = p.buf('k', Hkv * hd);
  const v = p.buf('v', Hkv * hd);
  const attn = p.buf('attn', H * hd);
  for (const [buf, w] of [[q, 'attn_q'], [k, 'attn_k'], [v, 'attn_v']] as const) p.op('matmul', buf, { a: cat, weights: { weight: need(`blk.0.${w}.weight`) } });
  const ropeFreqs = ropeFactorTensor(hp, tensors, nCtxSeq, 'freqs');
  const rw = ropeFreqs ? { freq_factors: ropeFreqs } : undefined;
  const rp = ropeParams(hp, false);
  p.op('rope', q, { a: q, weights: rw, params: { ...rp, head_dim: hd, n_head: H } });
  p.op('rope', k, { a: k, weights: rw, params: { ...rp, head_dim: hd, n_head: Hkv } });
  const layer = p.kvLayer(Hkv * hd, Hkv * hd);
  p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
  const attnOut = p.buf('attn_out', d);
  p.op('matmul', attnOut, { a: attn, weights: { weight: need('blk.0.attn_output.weight') } });
  const x = p.buf('x', d);
  p.op('add', x, { a: attnOut, b: e.normBeforeResidual ? gn : g });
  const h = p.buf('h', d);
  rms(h, x, need('blk.0.ffn_norm.weight'));
  const ffnOut = p.buf('ffn_out', d);
  denseGatedFfn(p, tensors, 0, { need, maybe }, h, ffnOut);
  p.op('add', x, { a: x, b: ffnOut });
  // The pre-norm output is the program's hidden row (the next step's g); output_norm and the head
  // make the logits.
  p.hidden(x);
  const ho = p.buf('h_out', d, true);
  p.op('gather_out', ho, { a: x });
  rms(ho, ho, need('output_norm.weight'));
  const head = need('output.weight');
  const nOut = tensors.get(head)!.dims[1];
  const d2t = tensors.get('d2t');
  if (d2t && (d2t.dims.length !== 1 || d2t.dims[0] !== nOut))
    throw new EngineError('KAIL_E_BAD_MODEL', `eagle3: d2t is [${d2t.dims.join(', ')}]; the head's ${nOut} draft tokens need [${nOut}]`);
  if (!d2t && nOut !== hp.nVocab) throw new EngineError('KAIL_E_BAD_MODEL', `eagle3: output.weight has ${nOut} rows for a vocabulary of ${hp.nVocab} and there is no d2t map`);
  const logits = p.buf('logits', nOut, true);
  p.op('matmul', logits, { a: ho, weights: { weight: head } });
  return p.build(logits);
}

/**
 * The draft vocabulary's target ids (d2t, absolute ids as conversion/llama.py writes them), read
 * from the file; null when the draft's head is the target's vocabulary. (A DFlash draft's too: `arch`
 * names the file in the errors.)
 */
export function readEagle3D2t(path: string, tensors: Map<string, GgufTensorInfo>, nTargetVocab: number, splits: readonly string[] = [path], arch = 'eagle3'): Int32Array | null {
  const t = tensors.get('d2t');
  if (!t) return null;
  if (t.typeName !== 'I64') throw new EngineError('KAIL_E_BAD_MODEL', `${arch}: d2t must be I64, is ${t.typeName}`);
  if (!Number.isInteger(nTargetVocab) || nTargetVocab < 1) throw new EngineError('KAIL_E_BAD_MODEL', `${arch}: a d2t map needs the vocabulary size of token_embd.weight`);
  if (t.dims.length !== 1) throw new EngineError('KAIL_E_BAD_MODEL', `${arch}: d2t is [${t.dims.join(', ')}]; it must be one row of target ids`);
  const n = t.dims[0];
  const buf = Buffer.alloc(n * 8);
  const fd = fs.openSync(splits[t.split] ?? path, 'r');
  try {
    if (fs.readSync(fd, buf, 0, buf.length, t.offset) !== buf.length) throw new EngineError('KAIL_E_BAD_MODEL', `${arch}: d2t's data is cut short in ${path}`);
  } finally {
    fs.closeSync(fd);
  }
  const out = new Int32Array(n);
  const seen = new Uint8Array(nTargetVocab);
  for (let i = 0; i < n; i++) {
    const id = buf.readBigInt64LE(i * 8);
    if (id < 0n || id >= BigInt(nTargetVocab)) throw new EngineError('KAIL_E_BAD_MODEL', `${arch}: d2t[${i}] = ${id} is outside the target's vocabulary of ${nTargetVocab}`);
    const j = Number(id);
    if (seen[j]) throw new EngineError('KAIL_E_BAD_MODEL', `${arch}: d2t maps two draft tokens to target token ${j}`);
    seen[j] = 1;
    out[i] = j;
  }
  return out;
}

/**
 * A target program whose hidden rows are the inputs of blocks `layers` (each n_embd wide, in that
 * order, concatenated per position): what an EAGLE-3 draft reads (llama.cpp's
 * llama_set_embeddings_layer_inp). The residual stream `x` is copied into the rows just before the
 * first op of each block (the first op naming a blk.<il>. tensor), replacing the program's hidden
 * output (the normalized final state an MTP block or pooling reads) rather than adding a second one.
 */
export function withLayerInputs(prog: ModelProgram, layers: readonly number[], nLayer: number, nEmbd: number, arch: string): ModelProgram {
  const xi = prog.buffers.findIndex((b) => b.name === 'x' && !b.outRows);
  if (xi < 0 || prog.buffers[xi].width !== nEmbd)
    throw new EngineError('KAIL_E_UNSUPPORTED', `${arch}: this architecture's program has no residual stream of n_embd ${nEmbd} to read an EAGLE-3 draft's features from`);
  for (const il of layers)
    if (!Number.isInteger(il) || il < 0 || il >= nLayer) throw new EngineError('KAIL_E_INVALID_ARG', `an EAGLE-3 draft reads target layer ${il}; the target has layers 0..${nLayer - 1}`);
  const buffers = [...prog.buffers, { name: 'eagle3_target_features', width: layers.length * nEmbd, outRows: false }];
  const feat = buffers.length - 1;
  const at = layers.map((il) => {
    const prefix = `blk.${il}.`;
    const i = prog.ops.findIndex((o) => Object.values(o.weights ?? {}).some((w) => w.startsWith(prefix)));
    if (i < 0) throw new EngineError('KAIL_E_UNSUPPORTED', `${arch}: no op of block ${il} in the program to read its input before`);
    return i;
  });
  const ops: ProgramOp[] = [];
  prog.ops.forEach((o, i) => {
    at.forEach((a, j) => {
      if (a === i) ops.push({ op: 'copy', out: feat, a: xi, params: { n: nEmbd, out_off: j * nEmbd } });
    });
    ops.push(o);
  });
  return { ...prog, buffers, ops, hidden: feat };
}
