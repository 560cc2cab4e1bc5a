// `kail quantize`: llama-quantize's job on a GGUF file. An F32/F16/BF16 model (or, with
// allowRequantize, a quantized one) becomes a file of llama.cpp's file types (Q4_K_M, Q8_0, ...),
// with the tensor types llama.cpp chooses for that file type (its "mixes": more bits for attn_v
// and some ffn_down layers, the output in Q6_K, ...), the same tensor order and metadata, and
// the same bytes: ggml's quantizers through the native core, weighted by an importance matrix
// (imatrix.ts) when one is given, as llama-quantize --imatrix does.
// The rules are those of llama.cpp's src/llama-quant.cpp (llama_tensor_get_type and what it
// calls), read from the source bundled in node-llama-cpp and written again here.
//
// The file streams through: each tensor is read in slabs of rows, converted and written, so a
// model larger than memory quantizes in a bounded buffer. Nothing is written until every tensor's
// type is known to be producible; the output goes to OUT.tmp-PID and is renamed at the end.
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { GgmlType, ggmlTypeTraits, GGUF_DEFAULT_ALIGNMENT, GgufType, LlamaFileType } from './constants';
import { useMoreBits } from '../models/quant-plan';
import { readGgufHeader, type GgufHeader, type GgufReadKv, type GgufReadTensor } from './reader';
import { loadImatrix, type Imatrix } from './imatrix';
import { ggufSplitPath } from './split';
import { GgufWriter, kv, type GgufValue, type RawGgufValue } from './writer';
import { checkOutputFile, type KvOverride } from '@kailstream/engine/core';

const LLAMA_FTYPE_GUESSED = 1024;
/** GGML_QNT_VERSION, written as general.quantization_version. */
const QNT_VERSION = 2;

/** llama-quantize's type names (tools/quantize/quantize.cpp), with their llama_ftype and default tensor type. */
export const QUANT_FILE_TYPES: readonly { name: string; ftype: number; type: GgmlType; copy?: true }[] = [
  { name: 'Q1_0', ftype: LlamaFileType.MOSTLY_Q1_0, type: GgmlType.Q1_0 },
  { name: 'Q2_0', ftype: LlamaFileType.MOSTLY_Q2_0, type: GgmlType.Q2_0 },
  { name: 'Q4_0', ftype: LlamaFileType.MOSTLY_Q4_0, type: GgmlType.Q4_0 },
  { name: 'Q4_1', ftype: LlamaFileType.MOSTLY_Q4_1, type: GgmlType.Q4_1 },
  { name: 'MXFP4_MOE', ftype: LlamaFileType.MOSTLY_MXFP4_MOE, type: GgmlType.MXFP4 },
  // kail's own: llama.cpp has the file type (general.file_type 39) but llama-quantize has no default
  // tensor type for it (llama_ftype_get_default_type: "invalid output file type"); here every
  // weight llama.cpp's mix leaves at the default type is NVFP4 (the output Q6_K, as for any type).
  { name: 'NVFP4', ftype: LlamaFileType.MOSTLY_NVFP4, type: GgmlType.NVFP4 },
  { name: 'Q5_0', ftype: LlamaFileType.MOSTLY_Q5_0, type: GgmlType.Q5_0 },
  { name: 'Q5_1', ftype: LlamaFileType.MOSTLY_Q5_1, type: GgmlType.Q5_1 },
  { name: 'IQ2_XXS', ftype: LlamaFileType.MOSTLY_IQ2_XXS, type: GgmlType.IQ2_XXS },
  { name: 'IQ2_XS', ftype: LlamaFileType.MOSTLY_IQ2_XS, type: GgmlType.IQ2_XS },
  { name: 'IQ2_S', ftype: LlamaFileType.MOSTLY_IQ2_S, type: GgmlType.IQ2_XS },
  { name: 'IQ2_M', ftype: LlamaFileType.MOSTLY_IQ2_M, type: GgmlType.IQ2_S },
  { name: 'IQ1_S', ftype: LlamaFileType.MOSTLY_IQ1_S, type: GgmlType.IQ1_S },
  { name: 'IQ1_M', ftype: LlamaFileType.MOSTLY_IQ1_M, type: GgmlType.IQ1_M },
  { name: 'TQ1_0', ftype: LlamaFileType.MOSTLY_TQ1_0, type: GgmlType.TQ1_0 },
  { name: 'TQ2_0', ftype: LlamaFileType.MOSTLY_TQ2_0, type: GgmlType.TQ2_0 },
  { name: 'Q2_K', ftype: LlamaFileType.MOSTLY_Q2_K, type: GgmlType.Q2_K },
  { name: 'Q2_K_S', ftype: LlamaFileType.MOSTLY_Q2_K_S, type: GgmlType.Q2_K },
  { name: 'IQ3_XXS', ftype: LlamaFileType.MOSTLY_IQ3_XXS, type: GgmlType.IQ3_XXS },
  { name: 'IQ3_S', ftype: LlamaFileType.MOSTLY_IQ3_S, type: GgmlType.IQ3_S },
  { name: 'IQ3_M', ftype: LlamaFileType.MOSTLY_IQ3_M, type: GgmlType.IQ3_S },
  { name: 'Q3_K', ftype: LlamaFileType.MOSTLY_Q3_K_M, type: GgmlType.Q3_K },
  { name: 'IQ3_XS', ftype: LlamaFileType.MOSTLY_IQ3_XS, type: GgmlType.IQ3_S },
  { name: 'Q3_K_S', ftype: LlamaFileType.MOSTLY_Q3_K_S, type: GgmlType.Q3_K },
  { name: 'Q3_K_M', ftype: LlamaFileType.MOSTLY_Q3_K_M, type: GgmlType.Q3_K },
  { name: 'Q3_K_L', ftype: LlamaFileType.MOSTLY_Q3_K_L, type: GgmlType.Q3_K },
  { name: 'IQ4_NL', ftype: LlamaFileType.MOSTLY_IQ4_NL, type: GgmlType.IQ4_NL },
  { name: 'IQ4_XS', ftype: LlamaFileType.MOSTLY_IQ4_XS, type: GgmlType.IQ4_XS },
  { name: 'Q4_K', ftype: LlamaFileType.MOSTLY_Q4_K_M, type: GgmlType.Q4_K },
  { name: 'Q4_K_S', ftype: LlamaFileType.MOSTLY_Q4_K_S, type: GgmlType.Q4_K },
  { name: 'Q4_K_M', ftype: LlamaFileType.MOSTLY_Q4_K_M, type: GgmlType.Q4_K },
  { name: 'Q5_K', ftype: LlamaFileType.MOSTLY_Q5_K_M, type: GgmlType.Q5_K },
  { name: 'Q5_K_S', ftype: LlamaFileType.MOSTLY_Q5_K_S, type: GgmlType.Q5_K },
  { name: 'Q5_K_M', ftype: LlamaFileType.MOSTLY_Q5_K_M, type: GgmlType.Q5_K },
  { name: 'Q6_K', ftype: LlamaFileType.MOSTLY_Q6_K, type: GgmlType.Q6_K },
  { name: 'Q8_0', ftype: LlamaFileType.MOSTLY_Q8_0, type: GgmlType.Q8_0 },
  { name: 'F16', ftype: LlamaFileType.MOSTLY_F16, type: GgmlType.F16 },
  { name: 'BF16', ftype: LlamaFileType.MOSTLY_BF16, type: GgmlType.BF16 },
  { name: 'F32', ftype: LlamaFileType.ALL_F32, type: GgmlType.F32 },
  { name: 'COPY', ftype: LlamaFileType.ALL_F32, type: GgmlType.F32, copy: true },
];

/**
 * Tensor types kail writes as ggml_quantize_chunk does, with or without an importance matrix (the
 * native core's quantize_rows_file): every type a llama-quantize file type uses.
 */
const QUANTIZABLE = new Set<GgmlType>([
  GgmlType.F32, GgmlType.F16, GgmlType.BF16, GgmlType.Q4_0, GgmlType.Q4_1, GgmlType.Q5_0, GgmlType.Q5_1, GgmlType.Q8_0,
  GgmlType.Q2_K, GgmlType.Q3_K, GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.IQ4_NL, GgmlType.IQ4_XS, GgmlType.MXFP4,
  GgmlType.IQ2_XXS, GgmlType.IQ2_XS, GgmlType.IQ2_S, GgmlType.IQ3_XXS, GgmlType.IQ3_S, GgmlType.IQ1_S, GgmlType.IQ1_M,
  GgmlType.TQ1_0, GgmlType.TQ2_0, GgmlType.NVFP4, GgmlType.Q1_0, GgmlType.Q2_0,
]);
/** Types ggml cannot quantize at all without importance values (it asserts): whatever the tensor, an imatrix entry is needed. */
const NEEDS_WEIGHTS = new Set<GgmlType>([GgmlType.IQ2_XXS, GgmlType.IQ2_XS, GgmlType.IQ1_S]);
/** Source types the native core expands to F32 (dequantize_row), for requantizing. */
const DEQUANTIZABLE = new Set<GgmlType>([...QUANTIZABLE]);

/** A file type by llama-quantize's name (any case) or llama_ftype number; throws listing the names. */
export function parseQuantFileType(s: string): (typeof QUANT_FILE_TYPES)[number] {
  const u = s.trim().toUpperCase();
  const byName = QUANT_FILE_TYPES.find((t) => t.name === u);
  if (byName) return byName;
  if (/^\d+$/.test(u)) {
    const byNumber = QUANT_FILE_TYPES.find((t) => t.ftype === Number(u) && !t.copy);
    if (byNumber) return byNumber;
  }
  throw new Error(`unknown quantization type '${s}'; known: ${QUANT_FILE_TYPES.map((t) => t.name).join(', ')}`);
}

/** A ggml tensor type by name (any case), for --output-tensor-type and the like. */
export function parseTensorType(s: string): GgmlType {
  const u = s.trim().toUpperCase();
  for (const id of Object.values(GgmlType)) {
    if (typeof id !== 'number') continue;
    if (ggmlTypeTraits(id).name === u) return id;
  }
  throw new Error(`unknown tensor type '${s}'`);
}

export interface QuantizeOptions {
  /** A QUANT_FILE_TYPES name or llama_ftype number. */
  type: string;
  /** Threads for the quantizer (default: the CPUs this process may use). */
  threads?: number;
  /** Quantize tensors already quantized (llama-quantize --allow-requantize). */
  allowRequantize?: boolean;
  /** Keep output.weight as it is (--leave-output-tensor). */
  leaveOutputTensor?: boolean;
  /** Every quantizable tensor in the file type's default type, no mix (--pure). */
  pure?: boolean;
  /** Type of output.weight (and of token_embd.weight when the two are tied) (--output-tensor-type). */
  outputTensorType?: GgmlType;
  /** Type of token_embd.weight (--token-embedding-type). */
  tokenEmbeddingType?: GgmlType;
  /** --tensor-type REGEX=TYPE: the first regex found in a tensor's name sets its type. */
  tensorTypes?: { pattern: string; type: GgmlType }[];
  /** Plan and report sizes without writing (--dry-run). */
  dryRun?: boolean;
  /**
   * Write as many files as the input has (--keep-split): OUT less .gguf becomes the prefix of
   * PREFIX-0000i-of-0000N.gguf, each split's tensors in its own file, in file order.
   */
  keepSplit?: boolean;
  /**
   * An importance matrix file (--imatrix: llama-imatrix's GGUF or legacy .dat format), recorded in
   * the output as given. Its values weight each column's rounding error (ggml's weighted
   * quantizers) and turn on llama.cpp's imatrix rules (Q2_K_S writable, IQ4_NL/IQ4_XS keep their
   * type in the first ffn_down layers, Q4_0/Q5_0 guard them with Q4_1/Q5_1).
   */
  imatrix?: string;
  /** Only the imatrix entries whose names contain one of these (--include-weights). */
  includeWeights?: string[];
  /** Drop the imatrix entries whose names contain one of these (--exclude-weights). */
  excludeWeights?: string[];
  /**
   * Metadata overrides (--override-kv KEY=TYPE:VALUE): read in place of the file's values where the
   * mix reads hyperparameters (block and expert counts, heads), and written into the output after
   * the file type, as llama-quantize writes them (an int as u32, a float as f32).
   */
  kvOverrides?: KvOverride[];
  /**
   * Blocks to leave out (--prune-layers): their tensors are dropped, the blocks after them
   * renumbered down, and block_count set to what remains, as llama-quantize does. The mix still
   * counts the input's layers (llama.cpp's n_layer), and the imatrix is read by the input's names.
   * Per-layer metadata arrays are copied as they are (as llama.cpp copies them).
   */
  pruneLayers?: number[];
  /** Bytes of rows converted at once per tensor (default 256 MiB). */
  slabBytes?: number;
  /** Progress lines, one per tensor (and fallback warnings). */
  log?: (line: string) => void;
  /** Called after each slab: input bytes done of the total, and the tensor. */
  progress?: (doneBytes: number, totalBytes: number, tensor: string) => void;
}

export interface QuantizedTensor {
  name: string;
  shape: number[];
  from: string;
  to: string;
  bytesIn: number;
  bytesOut: number;
}

export interface QuantizeReport {
  output?: string;
  /** Every file written (one, or with keepSplit one per input split). */
  outputs: string[];
  ftype: number;
  typeName: string;
  tensors: QuantizedTensor[];
  bytesIn: number;
  bytesOut: number;
  /** Elements over all tensors (for bits per weight). */
  elements: number;
  /** Tensors whose row length the chosen type's block does not divide, and that took a fallback type. */
  fallbacks: number;
  /** A dry run's plan needs an importance matrix that kail cannot use. */
  needsImatrix: boolean;
}

// --- what llama.cpp reads of the model ---

interface ModelInfo {
  arch: string;
  nLayerAll: number;
  nLayer: number;
  nExpert: number;
  nHead: number;
  nHeadKv: number;
  is70B: boolean;
}

/** A header's metadata values by key (what llama.cpp's loader reads; overrides put in by readValues). */
type KvValues = Readonly<Record<string, unknown>>;

const valuesOf = (h: GgufHeader): KvValues => Object.fromEntries([...h.kv].map(([k, v]) => [k, v.value]));

function kvNumber(values: KvValues, key: string): number | undefined {
  const v = values[key];
  const x = Array.isArray(v) ? v[0] : v;
  return typeof x === 'number' ? x : typeof x === 'bigint' ? Number(x) : undefined;
}

function modelInfo(values: KvValues, file: string): ModelInfo {
  const arch = values['general.architecture'];
  if (typeof arch !== 'string') throw new Error(`${file}: no general.architecture; not a model file`);
  const nLayerAll = kvNumber(values, `${arch}.block_count`);
  if (nLayerAll === undefined || nLayerAll < 1) throw new Error(`${file}: ${arch}.block_count is missing or not positive`);
  const nLayer = nLayerAll - (kvNumber(values, `${arch}.nextn_predict_layers`) ?? 0);
  const e = kvNumber(values, `${arch}.expert_count`) ?? 0;
  const nHead = kvNumber(values, `${arch}.attention.head_count`) ?? 0;
  const nHeadKv = kvNumber(values, `${arch}.attention.head_count_kv`) ?? nHead;
  const nExpert = e <= 1 ? 0 : e;
  // The model types llama.cpp calls LLM_TYPE_70B (it gives their attn_v more bits).
  const is70B =
    (arch === 'llama' && nExpert !== 8 && nLayer === 80 && nHead !== nHeadKv) ||
    (['qwen2', 'olmo', 'deci'].includes(arch) && nLayer === 80) ||
    (arch === 'jais2' && nLayer === 68);
  return { arch, nLayerAll, nLayer, nExpert, nHead, nHeadKv, is70B };
}

// --- llama.cpp's type choice (src/llama-quant.cpp) ---

type Category = 'token_embd' | 'attn_q' | 'attn_v' | 'attn_k' | 'attn_qkv' | 'attn_kv_b' | 'attn_output' | 'ffn_up' | 'ffn_gate' | 'ffn_down' | 'output' | 'other';

function category(name: string): Category {
  if (name === 'output.weight') return 'output';
  if (name === 'token_embd.weight' || name === 'per_layer_token_embd.weight') return 'token_embd';
  const has = (s: string) => name.includes(s);
  if (has('attn_qkv.weight')) return 'attn_qkv';
  if (has('attn_kv_b.weight')) return 'attn_kv_b';
  if (has('attn_v.weight')) return 'attn_v';
  if (has('attn_k.weight')) return 'attn_k';
  if (has('attn_q.weight')) return 'attn_q';
  if (has('attn_output.weight')) return 'attn_output';
  if (has('ffn_up')) return 'ffn_up';
  if (has('ffn_gate')) return 'ffn_gate';
  if (has('ffn_down')) return 'ffn_down';
  return 'other';
}

const isAttnV = (c: Category) => c === 'attn_v' || c === 'attn_qkv' || c === 'attn_kv_b';

/** ggml_n_dims: dimensions up to the last one above 1. */
function nDims(shape: readonly number[]): number {
  for (let i = shape.length - 1; i >= 1; i--) if (shape[i] > 1) return i + 1;
  return 1;
}

/** The block index llama.cpp's sscanf("blk.%d.") reads from a name, or -1. */
function blockOf(name: string): number {
  const m = /^blk\.\s*([+-]?\d+)/.exec(name);
  return m ? Number(m[1]) : -1;
}

const NOT_QUANTIZED = [
  '_norm.weight', 'ffn_gate_inp.weight', 'ffn_gate_tid2eid.weight', 'altup', 'laurel', 'per_layer_model_proj',
  'ssm_conv1d', 'shortconv.conv.weight', 'indexer.k_proj.weight', 'indexer.q_proj.weight',
  'time_mix_first.weight', 'time_mix_w0.weight', 'time_mix_w1.weight', 'time_mix_w2.weight', 'time_mix_v0.weight',
  'time_mix_v1.weight', 'time_mix_v2.weight', 'time_mix_a0.weight', 'time_mix_a1.weight', 'time_mix_a2.weight',
  'time_mix_g1.weight', 'time_mix_g2.weight', 'time_mix_decay_w1.weight', 'time_mix_decay_w2.weight',
  'time_mix_lerp_fused.weight', 'attn_rel_b.weight', '.position_embd', 'sam.pos_embd', 'sam.neck.', 'sam.net_',
  '.rel_pos', '.patch_embd', '.patch_merger', 'a.rvq.codebook', 'mm.a.code_embd',
];

/** tensor_allows_quantization: 2-D and 3-D weights, less norms, routers, small tables and the like. */
function allowsQuantization(t: GgufReadTensor, opts: QuantizeOptions, copy: boolean): boolean {
  if (copy || nDims(t.shape) < 2) return false;
  const n = t.name;
  if (!n.endsWith('weight')) return false;
  if (n === 'output.weight' && opts.leaveOutputTensor) return false;
  if (n === 'position_embd.weight' || n === 'token_types.weight') return false;
  return !NOT_QUANTIZED.some((s) => n.includes(s));
}

const blockSize = (t: GgmlType) => ggmlTypeTraits(t).blockSize;
const isQuantized = (t: GgmlType) => ggmlTypeTraits(t).quantized;

class TypeChooser {
  private nAttnV = 0;
  private iAttnV = 0;
  private iFfnDown = 0;
  private iFfnGate = 0;
  private iFfnUp = 0;
  private readonly tiedEmbeddings: boolean;
  private readonly patterns: { re: RegExp; type: GgmlType }[];
  fallbacks = 0;

  constructor(
    private readonly m: ModelInfo,
    names: readonly string[],
    private readonly ftype: number,
    private readonly opts: QuantizeOptions,
    private readonly warn: (line: string) => void,
    private readonly hasImatrix: boolean,
  ) {
    for (const n of names) if (isAttnV(category(n))) this.nAttnV++;
    this.tiedEmbeddings = !names.includes('output.weight');
    this.patterns = (opts.tensorTypes ?? []).map((p) => ({ re: new RegExp(p.pattern), type: p.type }));
  }

  private get nGqa(): number {
    return this.m.nHeadKv === 0 ? 0 : Math.floor(this.m.nHead / this.m.nHeadKv);
  }

  /** llama_tensor_get_type: the type of a tensor that allows quantization. */
  choose(t: GgufReadTensor, defaultType: GgmlType): GgmlType {
    const cat = category(t.name);
    const o = this.opts;
    if (o.tokenEmbeddingType !== undefined && cat === 'token_embd') {
      // per_layer_token_embd follows it unless a --tensor-type names it.
      const named = t.name === 'per_layer_token_embd.weight' && this.patterns.some((p) => p.re.test(t.name));
      if (!named) return o.tokenEmbeddingType;
    }
    if (o.outputTensorType !== undefined && cat === 'output') return o.outputTensorType;
    let type = defaultType;
    if (!isQuantized(defaultType)) return type;
    let manual = false;
    for (const p of this.patterns) {
      if (p.re.test(t.name)) {
        type = p.type;
        manual = true;
        break;
      }
    }
    if (!manual && !o.pure) type = this.mix(t, type, cat);
    return this.fallback(t, type);
  }

  /** tensor_type_fallback: a row length the type's block does not divide takes a type with a smaller block. */
  private fallback(t: GgufReadTensor, target: GgmlType): GgmlType {
    const ncols = t.shape[0];
    if (ncols % blockSize(target) === 0) return target;
    this.fallbacks++;
    let type: GgmlType;
    switch (target) {
      case GgmlType.IQ1_S: case GgmlType.IQ1_M: case GgmlType.IQ2_XXS: case GgmlType.IQ2_XS: case GgmlType.IQ2_S:
      case GgmlType.IQ3_XXS: case GgmlType.IQ3_S: case GgmlType.IQ4_XS:
        type = GgmlType.IQ4_NL; break;
      case GgmlType.Q2_0: case GgmlType.Q2_K: case GgmlType.Q3_K: case GgmlType.TQ1_0: case GgmlType.TQ2_0: type = GgmlType.Q4_0; break;
      case GgmlType.Q4_K: type = GgmlType.Q5_0; break;
      case GgmlType.Q5_K: type = GgmlType.Q5_1; break;
      case GgmlType.Q6_K: type = GgmlType.Q8_0; break;
      default:
        if (blockSize(target) > 32) throw new Error(`no tensor type fallback is defined for type ${ggmlTypeTraits(target).name}`);
        type = target;
    }
    if (ncols % blockSize(type) !== 0) type = GgmlType.F16;
    this.warn(`${t.name}: row length ${ncols} is not a multiple of ${blockSize(target)} (${ggmlTypeTraits(target).name}); falling back to ${ggmlTypeTraits(type).name}`);
    return type;
  }

  /** The block a per-layer FFN tensor belongs to, and the block count (layer_info). */
  private layer(counter: number, name: string): [number, number] {
    const n = this.m.nLayerAll;
    if (this.m.nExpert > 1) {
      const il = blockOf(name);
      if (!/^blk\.\s*[+-]?\d/.test(name)) throw new Error(`failed to determine the block of tensor ${name}`);
      if (il < 0 || il >= n) throw new Error(`bad block ${il} for tensor ${name}: must be in [0, ${n})`);
      return [il, n];
    }
    return [counter, n];
  }

  /** llama_tensor_get_type_impl: the file type's mix. */
  private mix(t: GgufReadTensor, type: GgmlType, cat: Category): GgmlType {
    const F = LlamaFileType;
    const ft = this.ftype;
    const m = this.m;
    const arch = m.arch;
    const falcon = arch === 'falcon';
    const moreBits = useMoreBits;
    const div = (a: number, b: number) => Math.trunc(a / b);
    const is = (...fts: number[]) => fts.includes(ft);
    const Q = GgmlType;
    if (cat === 'output' || (this.tiedEmbeddings && cat === 'token_embd')) {
      if (this.opts.outputTensorType !== undefined) return this.opts.outputTensorType;
      if (ft === F.MOSTLY_MXFP4_MOE) return Q.Q8_0;
      if (falcon || t.shape[0] % blockSize(type) !== 0) return Q.Q8_0;
      if (is(F.MOSTLY_IQ2_XXS, F.MOSTLY_IQ2_XS, F.MOSTLY_IQ3_XXS, F.MOSTLY_IQ1_S, F.MOSTLY_IQ2_S, F.MOSTLY_IQ2_M, F.MOSTLY_IQ1_M)) return Q.Q5_K;
      if (type !== Q.Q8_0) return Q.Q6_K;
      return type;
    }
    if (ft === F.MOSTLY_MXFP4_MOE) {
      const bailing3Expert = arch === 'bailingmoe3' && (cat === 'ffn_up' || cat === 'ffn_gate' || cat === 'ffn_down');
      return (t.shape[2] ?? 1) > 1 && (arch !== 'bailingmoe3' || bailing3Expert) ? Q.MXFP4 : Q.Q8_0;
    }
    if (cat === 'token_embd') {
      if (this.opts.tokenEmbeddingType !== undefined) return this.opts.tokenEmbeddingType;
      if (is(F.MOSTLY_IQ2_XXS, F.MOSTLY_IQ2_XS, F.MOSTLY_IQ1_S, F.MOSTLY_IQ1_M)) return Q.Q2_K;
      if (is(F.MOSTLY_IQ2_S, F.MOSTLY_IQ2_M, F.MOSTLY_IQ3_XXS)) return Q.IQ3_S;
      if (is(F.MOSTLY_TQ1_0, F.MOSTLY_TQ2_0, F.MOSTLY_Q2_0)) return Q.Q4_K;
      return type;
    }
    if (is(F.MOSTLY_IQ2_XXS, F.MOSTLY_IQ2_XS, F.MOSTLY_IQ1_S, F.MOSTLY_IQ2_S, F.MOSTLY_IQ2_M, F.MOSTLY_IQ1_M)) {
      const s2 = is(F.MOSTLY_IQ2_S, F.MOSTLY_IQ2_M);
      if (isAttnV(cat)) {
        type = this.nGqa >= 4 || m.nExpert >= 4 ? Q.Q4_K : s2 ? Q.IQ3_S : Q.Q2_K;
        this.iAttnV++;
      } else if (m.nExpert === 8 && cat === 'attn_k') {
        type = Q.Q4_K;
      } else if (cat === 'ffn_down') {
        if (this.iFfnDown < div(m.nLayerAll, 8)) type = s2 ? Q.IQ3_S : Q.Q2_K;
        this.iFfnDown++;
      } else if (cat === 'attn_output') {
        if (m.nExpert === 8) type = Q.Q5_K;
        else if (is(F.MOSTLY_IQ1_S, F.MOSTLY_IQ1_M)) type = Q.IQ2_XXS;
        else if (s2) type = Q.IQ3_S;
      }
      return type;
    }
    if (isAttnV(cat)) {
      const gqa4 = this.nGqa >= 4;
      if (ft === F.MOSTLY_Q2_K) type = gqa4 ? Q.Q4_K : Q.Q3_K;
      else if (ft === F.MOSTLY_Q2_K_S && gqa4) type = Q.Q4_K;
      else if (ft === F.MOSTLY_IQ3_XXS) type = gqa4 ? Q.Q4_K : !this.hasImatrix ? Q.IQ3_S : Q.IQ3_XXS;
      else if (is(F.MOSTLY_IQ3_XS, F.MOSTLY_IQ3_S) && gqa4) type = Q.Q4_K;
      else if (ft === F.MOSTLY_IQ3_M) type = Q.Q4_K;
      else if (ft === F.MOSTLY_Q3_K_M) type = this.iAttnV < 2 ? Q.Q5_K : Q.Q4_K;
      else if (ft === F.MOSTLY_Q3_K_L) type = Q.Q5_K;
      else if (is(F.MOSTLY_IQ4_NL, F.MOSTLY_IQ4_XS) && gqa4) type = Q.Q5_K;
      else if (is(F.MOSTLY_Q4_K_M, F.MOSTLY_Q5_K_M) && moreBits(this.iAttnV, this.nAttnV)) type = Q.Q6_K;
      else if (ft === F.MOSTLY_Q4_K_S && this.iAttnV < 4) type = Q.Q5_K;
      if (m.is70B && (type === Q.Q3_K || type === Q.Q4_K)) type = Q.Q5_K;
      if (m.nExpert === 8) type = Q.Q8_0;
      this.iAttnV++;
      return type;
    }
    if (cat === 'attn_k') {
      if (m.nExpert === 8) type = Q.Q8_0;
      else if (ft === F.MOSTLY_IQ3_XS) type = Q.IQ3_XXS;
      else if (ft === F.MOSTLY_IQ3_XXS) type = Q.IQ2_S;
      return type;
    }
    if (cat === 'attn_q') {
      if (ft === F.MOSTLY_IQ3_XS) type = Q.IQ3_XXS;
      else if (ft === F.MOSTLY_IQ3_XXS) type = Q.IQ2_S;
      return type;
    }
    if (cat === 'ffn_down') {
      const [il, nl] = this.layer(this.iFfnDown, t.name);
      if (ft === F.MOSTLY_Q2_K) type = Q.Q3_K;
      else if (ft === F.MOSTLY_Q2_K_S) {
        if (il < div(nl, 8)) type = Q.Q4_K;
      } else if (ft === F.MOSTLY_IQ3_XXS && !this.hasImatrix) type = il < div(nl, 8) ? Q.Q4_K : Q.Q3_K;
      else if (ft === F.MOSTLY_Q3_K_M) type = il < div(nl, 16) ? Q.Q5_K : !falcon || moreBits(il, nl) ? Q.Q4_K : Q.Q3_K;
      else if (ft === F.MOSTLY_IQ3_M && (il < div(nl, 8) || (m.nExpert === 8 && moreBits(il, nl)))) type = Q.Q4_K;
      else if (ft === F.MOSTLY_Q3_K_L) type = falcon ? Q.Q4_K : Q.Q5_K;
      else if (ft === F.MOSTLY_Q4_K_M) {
        if (falcon) type = il < div(nl, 16) ? Q.Q6_K : moreBits(il, nl) ? Q.Q5_K : Q.Q4_K;
        else if (moreBits(il, nl)) type = Q.Q6_K;
      } else if (il < div(nl, 8) && is(F.MOSTLY_IQ4_NL, F.MOSTLY_IQ4_XS) && !this.hasImatrix) type = Q.Q5_K;
      else if (ft === F.MOSTLY_Q5_K_M && moreBits(il, nl)) type = Q.Q6_K;
      else if (ft === F.MOSTLY_Q4_K_S && !falcon && il < div(nl, 8)) type = Q.Q5_K;
      // (llama.cpp's guard for the first ffn_down layers, only with an imatrix.)
      else if (is(F.MOSTLY_Q4_0, F.MOSTLY_Q5_0) && this.hasImatrix && il < div(nl, 8)) type = ft === F.MOSTLY_Q4_0 ? Q.Q4_1 : Q.Q5_1;
      this.iFfnDown++;
      return type;
    }
    if (cat === 'attn_output') {
      if (!falcon) {
        if (m.nExpert === 8) {
          if (is(F.MOSTLY_Q2_K, F.MOSTLY_IQ3_XS, F.MOSTLY_IQ3_XXS, F.MOSTLY_Q3_K_S, F.MOSTLY_Q3_K_M, F.MOSTLY_IQ4_NL, F.MOSTLY_Q4_K_S, F.MOSTLY_Q4_K_M, F.MOSTLY_IQ3_S, F.MOSTLY_IQ3_M, F.MOSTLY_IQ4_XS)) type = Q.Q5_K;
        } else if (ft === F.MOSTLY_Q2_K) type = Q.Q3_K;
        else if (ft === F.MOSTLY_IQ3_XXS) type = Q.IQ3_S;
        else if (ft === F.MOSTLY_Q3_K_M) type = Q.Q4_K;
        else if (ft === F.MOSTLY_Q3_K_L) type = Q.Q5_K;
        else if (ft === F.MOSTLY_IQ3_M) type = Q.Q4_K;
      } else if (ft === F.MOSTLY_Q3_K_L) type = Q.Q4_K;
      return type;
    }
    if (cat === 'ffn_gate' || cat === 'ffn_up') {
      const counter = cat === 'ffn_gate' ? this.iFfnGate : this.iFfnUp;
      const [il, nl] = this.layer(counter, t.name);
      if (ft === F.MOSTLY_IQ3_XS && il >= div(nl, 8) && il < div(7 * nl, 8)) type = Q.IQ3_XXS;
      if (cat === 'ffn_gate') this.iFfnGate++;
      else this.iFfnUp++;
      return type;
    }
    return type;
  }
}

/** tensor_requires_imatrix: types whose quantization is garbage without an importance matrix. */
function requiresImatrix(name: string, type: GgmlType, ftype: number): boolean {
  if (name === 'token_embd.weight' || name === 'per_layer_token_embd.weight' || name === 'output.weight') return false;
  switch (type) {
    case GgmlType.IQ3_XXS: case GgmlType.IQ2_XXS: case GgmlType.IQ2_XS: case GgmlType.IQ2_S: case GgmlType.IQ1_M: case GgmlType.IQ1_S:
      return true;
    case GgmlType.Q2_K:
      return ftype === LlamaFileType.MOSTLY_Q2_K_S;
    default:
      return false;
  }
}

/** llama_model_loader's file-type guess for COPY from a file without general.file_type. */
function guessFtype(tensors: readonly GgufReadTensor[]): number {
  const count = new Map<GgmlType, number>();
  let max = 0;
  let typeMax = GgmlType.F32;
  for (const t of tensors) {
    const c = (count.get(t.type) ?? 0) + 1;
    count.set(t.type, c);
    if (c > max) {
      max = c;
      typeMax = t.type;
    }
  }
  const byType: Partial<Record<GgmlType, number>> = {
    [GgmlType.F32]: LlamaFileType.ALL_F32, [GgmlType.F16]: LlamaFileType.MOSTLY_F16, [GgmlType.BF16]: LlamaFileType.MOSTLY_BF16, [GgmlType.Q4_0]: LlamaFileType.MOSTLY_Q4_0,
    [GgmlType.Q4_1]: LlamaFileType.MOSTLY_Q4_1, [GgmlType.Q5_0]: LlamaFileType.MOSTLY_Q5_0, [GgmlType.Q5_1]: LlamaFileType.MOSTLY_Q5_1, [GgmlType.Q8_0]: LlamaFileType.MOSTLY_Q8_0,
    [GgmlType.Q2_K]: LlamaFileType.MOSTLY_Q2_K, [GgmlType.Q3_K]: LlamaFileType.MOSTLY_Q3_K_M, [GgmlType.Q4_K]: LlamaFileType.MOSTLY_Q4_K_M, [GgmlType.Q5_K]: LlamaFileType.MOSTLY_Q5_K_M,
    [GgmlType.Q6_K]: LlamaFileType.MOSTLY_Q6_K, [GgmlType.IQ2_XXS]: LlamaFileType.MOSTLY_IQ2_XXS, [GgmlType.IQ2_XS]: LlamaFileType.MOSTLY_IQ2_XS, [GgmlType.IQ2_S]: LlamaFileType.MOSTLY_IQ2_S,
    [GgmlType.IQ3_XXS]: LlamaFileType.MOSTLY_IQ3_XXS, [GgmlType.IQ1_S]: LlamaFileType.MOSTLY_IQ1_S, [GgmlType.IQ1_M]: LlamaFileType.MOSTLY_IQ1_M, [GgmlType.IQ4_NL]: LlamaFileType.MOSTLY_IQ4_NL,
    [GgmlType.IQ4_XS]: LlamaFileType.MOSTLY_IQ4_XS, [GgmlType.IQ3_S]: LlamaFileType.MOSTLY_IQ3_S,
    [GgmlType.TQ1_0]: LlamaFileType.MOSTLY_TQ1_0, [GgmlType.TQ2_0]: LlamaFileType.MOSTLY_TQ2_0, [GgmlType.NVFP4]: LlamaFileType.MOSTLY_NVFP4,
    [GgmlType.Q1_0]: LlamaFileType.MOSTLY_Q1_0, [GgmlType.Q2_0]: LlamaFileType.MOSTLY_Q2_0,
  };
  return (byType[typeMax] ?? LlamaFileType.ALL_F32) | LLAMA_FTYPE_GUESSED;
}

/**
 * A tensor's importance values from the imatrix (ne0 per expert), as llama_model_quantize looks
 * them up: by name; a size other than ne0 * ne2 is an error except for token_embd, which goes
 * without.
 */
function imatrixFor(im: Imatrix | undefined, t: SourceTensor, log: (line: string) => void): Float32Array | undefined {
  if (!im) return undefined;
  const v = im.values.get(t.srcName ?? t.name);
  if (!v) {
    log(`====== did not find weights for ${t.name}`);
    return undefined;
  }
  const want = t.shape[0] * (t.shape[2] ?? 1);
  if (v.length === want) return v;
  const msg = `imatrix size ${v.length} is different from tensor size ${want} for ${t.name}`;
  if (t.name === 'token_embd.weight') {
    log(`====== ${msg}`);
    return undefined;
  }
  throw new Error(`${im.file}: ${msg} (an imatrix made for another model?)`);
}

/** A string value of at most 127 bytes, as llama_model_kv_override's val_str holds it (strncpy). */
function overrideStr(s: string): RawGgufValue {
  const b = Buffer.from(s, 'utf8').subarray(0, 127);
  const raw = Buffer.alloc(8 + b.length);
  raw.writeBigUInt64LE(BigInt(b.length));
  b.copy(raw, 8);
  return kv.raw(GgufType.STRING, raw);
}

/** The keys llama-quantize adds for an imatrix (tools/quantize/quantize.cpp), in its order. */
function imatrixMetadata(im: Imatrix): [string, GgufValue | RawGgufValue][] {
  const out: [string, GgufValue | RawGgufValue][] = [['quantize.imatrix.file', overrideStr(im.file)]];
  if (im.datasets.length) out.push(['quantize.imatrix.dataset', overrideStr(im.datasets[0])]);
  out.push(['quantize.imatrix.entries_count', kv.u32(im.values.size)]);
  if (im.chunkCount > 0) out.push(['quantize.imatrix.chunks_count', kv.u32(im.chunkCount)]);
  return out;
}

/** An override as llama-quantize writes it (src/llama-quant.cpp: gguf_set_val_u32/f32/bool/str). */
function overrideValue(o: KvOverride): GgufValue {
  switch (o.type) {
    case 'int': {
      const n = o.value as number;
      if (n < 0 || n > 0xffffffff) throw new Error(`--override-kv ${o.key}=int:${n}: an int override is written as a u32 (0..4294967295), as llama-quantize writes it`);
      return kv.u32(n);
    }
    case 'float':
      return kv.f32(o.value as number);
    case 'bool':
      return kv.bool(o.value as boolean);
    case 'str':
      return kv.str(o.value as string);
  }
}

/**
 * The metadata as llama.cpp's loader reads the model for the mix: the overrides' values in place
 * of the file's, each checked against the file's kind of value as a load checks it (the engine's
 * applyKvOverrides). The output copies the file's metadata from its header.
 */
function readValues(h: GgufHeader, overrides: readonly KvOverride[] | undefined): KvValues {
  const values = valuesOf(h);
  return overrides?.length ? engineCore().applyKvOverrides(values as Parameters<typeof import('@kailstream/engine/core').applyKvOverrides>[0], overrides) : values;
}

// --- the native core ---

function engineCore(): typeof import('@kailstream/engine/core') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('@kailstream/engine/core') as typeof import('@kailstream/engine/core');
}

interface NativeQuant {
  convert(from: number, data: Uint8Array, n: number, to: number, threads?: number, imatrix?: Float32Array): Uint8Array;
}

function nativeQuant(): NativeQuant {
  return (engineCore() as unknown as { native: () => NativeQuant }).native();
}

function defaultThreads(): number {
  return Math.max(1, engineCore().systemInfo().defaultThreads);
}

/** The files of a model: one, or llama.cpp's split files PREFIX-0000i-of-0000N.gguf found from the first. */
function modelSplits(file: string, h: GgufHeader): string[] {
  const count = kvNumber(valuesOf(h), 'split.count');
  if (count === undefined || count <= 1) return [file];
  const no = kvNumber(valuesOf(h), 'split.no') ?? 0;
  if (no !== 0) throw new Error(`${file} is split ${no + 1} of ${count}: give the first split`);
  const m = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/.exec(file);
  if (!m) throw new Error(`${file}: split.count is ${count} but the name is not PREFIX-00001-of-NNNNN.gguf`);
  return Array.from({ length: count }, (_, i) => ggufSplitPath(m[1], i + 1, count));
}

/** `srcName`: its name in the input where --prune-layers renumbered its block (the imatrix's name for it). */
type SourceTensor = GgufReadTensor & { file: string; split: number; srcName?: string };

/**
 * llama.cpp's remap_layer over the tensors in block order: each block's new number (null:
 * pruned), and the blocks that remain. `prune` sorted, without repeats.
 */
function pruneBlocks(names: readonly string[], prune: readonly number[]): { mapped: Map<number, number | null>; remaining: number } {
  const blocks = [...new Set(names.map(blockOf).filter((b) => b >= 0))].sort((a, b) => a - b);
  const mapped = new Map<number, number | null>();
  let next = 0;
  for (const b of blocks) {
    if (prune.includes(b)) mapped.set(b, null);
    else if (b < prune[0]) {
      mapped.set(b, b);
      next = b + 1;
    } else mapped.set(b, next++);
  }
  return { mapped, remaining: next };
}

/** The header, or an error that names the file and what is wrong with it. */
function readHeader(file: string): GgufHeader {
  try {
    return readGgufHeader(file);
  } catch (e) {
    const m = (e as Error).message;
    throw new Error(m.includes(file) ? m : `${file}: not a readable GGUF model: ${m}`);
  }
}

function readAll(fd: number, buf: Uint8Array, pos: number, what: string): void {
  for (let off = 0; off < buf.length; ) {
    const n = fs.readSync(fd, buf, off, buf.length - off, pos + off);
    if (n <= 0) throw new Error(`${what}: the file ends early (read ${off} of ${buf.length} bytes at ${pos})`);
    off += n;
  }
}

const MIB = 1024 * 1024;

/**
 * Quantizes `input` (a GGUF model, or a split model's first file) to `output` as llama-quantize
 * does without an importance matrix; returns what each tensor became. `output` undefined only
 * with dryRun.
 */
export function quantizeModel(input: string, output: string | undefined, opts: QuantizeOptions): QuantizeReport {
  const ft = parseQuantFileType(opts.type);
  const log = opts.log ?? (() => undefined);
  if (!opts.dryRun && !output) throw new Error('quantize: an output file is needed (or a dry run)');
  if (opts.threads !== undefined && (!Number.isInteger(opts.threads) || opts.threads < 1 || opts.threads > 1024)) {
    throw new Error(`quantize: threads must be 1 to 1024, got ${opts.threads}`);
  }
  const first = readHeader(input);
  const files = modelSplits(input, first);
  // (Overrides are checked, and their ints' range, before anything else is read.)
  for (const o of opts.kvOverrides ?? [])
    if (o.key === 'general.alignment' || o.key.startsWith('split.')) throw new Error(`--override-kv ${o.key}: kail quantize sets the file's layout keys (general.alignment, split.*) itself`);
  const overrideKvs: [string, GgufValue][] = (opts.kvOverrides ?? []).map((o) => [o.key, overrideValue(o)]);
  const read = readValues(first, opts.kvOverrides);
  const info = modelInfo(read, input);
  let tensors: SourceTensor[] = [];
  files.forEach((f, split) => {
    if (!fs.existsSync(f)) throw new Error(`${input}: split file ${f} is missing`);
    const h = f === input ? first : readHeader(f);
    for (const t of h.tensors) tensors.push({ ...t, file: f, split });
  });
  const seen = new Set<string>();
  for (const t of tensors) {
    if (seen.has(t.name)) throw new Error(`${input}: tensor '${t.name}' appears twice`);
    seen.add(t.name);
  }
  // llama.cpp's order: by block number (none first), then by name; kept in splits, file order.
  if (opts.keepSplit) tensors.sort((a, b) => a.split - b.split || a.fileOffset - b.fileOffset);
  else tensors.sort((a, b) => blockOf(a.name) - blockOf(b.name) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  // (llama.cpp names the files from OUT less .gguf, even when there is one.)
  const nOut = opts.keepSplit ? files.length : 1;
  const outputs = opts.dryRun || !output ? [] : opts.keepSplit ? Array.from({ length: nOut }, (_, i) => ggufSplitPath(output.replace(/\.gguf$/, ''), i + 1, nOut)) : [output];
  for (const o of outputs) {
    if (fs.existsSync(o) && files.some((f) => fs.realpathSync(o) === fs.realpathSync(f))) throw new Error(`quantize: the output ${o} is the input`);
    checkOutputFile(o, 'quantize: the output');
  }

  const ftype = ft.copy ? (kvNumber(read, 'general.file_type') ?? guessFtype(tensors)) : ft.ftype;
  // --prune-layers: the kept blocks renumbered (llama-quantize's remap_layer), block_count set below.
  let prunedBlockCount: number | undefined;
  if (opts.pruneLayers?.length) {
    const prune = [...new Set(opts.pruneLayers)].sort((a, b) => a - b);
    for (const b of prune) {
      if (!Number.isInteger(b) || b < 0 || b >= info.nLayerAll) throw new Error(`--prune-layers: ${b} is not a block of this model (${info.arch}.block_count is ${info.nLayerAll}: 0..${info.nLayerAll - 1})`);
    }
    if (prune.length >= info.nLayerAll) throw new Error(`--prune-layers would prune every one of the model's ${info.nLayerAll} blocks`);
    const { mapped, remaining } = pruneBlocks(tensors.map((t) => t.name), prune);
    tensors = tensors.flatMap((t) => {
      const b = blockOf(t.name);
      if (b < 0) return [t];
      const to = mapped.get(b);
      if (to === null || to === undefined) return [];
      return to === b ? [t] : [{ ...t, name: t.name.replace(/blk\.(\d+)\./, `blk.${to}.`), srcName: t.name }];
    });
    prunedBlockCount = remaining;
    log(`pruned blocks ${prune.join(', ')}: ${remaining} of ${info.nLayerAll} remain`);
  }
  if (!opts.imatrix && (opts.includeWeights?.length || opts.excludeWeights?.length)) throw new Error('quantize: --include-weights and --exclude-weights need --imatrix');
  const imatrix = opts.imatrix ? loadImatrix(opts.imatrix, { include: opts.includeWeights, exclude: opts.excludeWeights }) : undefined;
  // (llama-quantize passes no imatrix when the filters leave it empty.)
  const im = imatrix && imatrix.values.size > 0 ? imatrix : undefined;
  if (imatrix) log(`imatrix ${imatrix.file}: ${imatrix.values.size} entries, ${imatrix.chunkCount} chunks${imatrix.datasets.length ? `, datasets ${imatrix.datasets.map((d) => `'${d}'`).join(', ')}` : ''}`);
  const chooser = new TypeChooser(info, tensors.map((t) => t.name), ft.ftype, opts, log, !!im);
  const plan = tensors.map((t) => {
    const allowed = allowsQuantization(t, opts, !!ft.copy);
    const to = allowed ? chooser.choose(t, ft.type) : t.type;
    return { t, to, needsImatrix: allowed && requiresImatrix(t.name, to, ft.ftype), weights: !opts.dryRun && to !== t.type ? imatrixFor(im, t, log) : undefined };
  });
  const needsImatrix = !im && plan.some((p) => p.needsImatrix);

  // Everything that would stop the run is found before a byte is written.
  if (!opts.dryRun) {
    for (const { t, to, needsImatrix: needs, weights } of plan) {
      if (to === t.type) continue;
      if (needs && !weights) {
        throw new Error(
          im
            ? `missing importance matrix for tensor ${t.name} in a very low-bit quantization (${ggmlTypeTraits(to).name}): the imatrix has no entry for it`
            : `${ft.name} needs an importance matrix for ${t.name} (type ${ggmlTypeTraits(to).name}), as llama.cpp's does: give one with --imatrix, or choose another type`,
        );
      }
      const toName = ggmlTypeTraits(to).name;
      if (NEEDS_WEIGHTS.has(to) && !weights) throw new Error(`${t.name} would be ${toName}, which cannot be quantized without importance values for it${im ? ': the imatrix has no entry for it' : ' (--imatrix)'}`);
      if (!QUANTIZABLE.has(to)) throw new Error(`${t.name} would be ${toName}, which kail quantize cannot write (it writes ${[...QUANTIZABLE].map((x) => ggmlTypeTraits(x).name).join(', ')})`);
      if (isQuantized(t.type) && !opts.allowRequantize) throw new Error(`${t.name} is already ${ggmlTypeTraits(t.type).name}: requantizing is off (--allow-requantize turns it on; quality suffers)`);
      if (!DEQUANTIZABLE.has(t.type)) throw new Error(`${t.name} is ${ggmlTypeTraits(t.type).name}, which kail quantize cannot read back to floats`);
      if (t.shape[0] % blockSize(to) !== 0) throw new Error(`${t.name}: row length ${t.shape[0]} is not a multiple of the ${toName} block`);
    }
  }

  const report: QuantizeReport = { output: outputs[0], outputs, ftype, typeName: ft.name, tensors: [], bytesIn: 0, bytesOut: 0, elements: 0, fallbacks: chooser.fallbacks, needsImatrix };
  const alignment = first.alignment;
  // After the file's metadata, as llama-quantize sets them (each set moves its key last): the
  // quantization version and file type, then the overrides, the user's and the imatrix's.
  const tail = new Map<string, GgufValue | RawGgufValue>([
    ['general.quantization_version', kv.u32(QNT_VERSION)],
    ['general.file_type', kv.u32(ftype)],
  ]);
  // (then, pruned, the block count: llama-quantize sets it after the overrides.)
  const pruned: [string, GgufValue][] = prunedBlockCount === undefined ? [] : [[`${info.arch}.block_count`, kv.u32(prunedBlockCount)]];
  for (const [key, v] of [...overrideKvs, ...(im ? imatrixMetadata(im) : []), ...pruned]) {
    tail.delete(key);
    tail.set(key, v);
  }
  const skip = new Set(['general.alignment', 'split.no', 'split.count', 'split.tensors.count', ...tail.keys()]);
  const tmps = outputs.map((o) => `${o}.tmp-${process.pid}`);
  // The first file carries the metadata; later splits only the split keys (as gguf-split's).
  const writers = tmps.map((tmp, i) => new GgufWriter(tmp, { alignment, alignmentKey: i === 0 ? first.kv.has('general.alignment') : alignment !== GGUF_DEFAULT_ALIGNMENT }));
  writers.forEach((w, i) => {
    if (i === 0) {
      for (const [key, v] of first.kv as Map<string, GgufReadKv>) if (!skip.has(key)) w.set(key, kv.raw(v.type, v.raw));
      for (const [key, v] of tail) w.set(key, v);
    }
    if (nOut > 1) {
      w.set('split.no', kv.u16(i));
      w.set('split.count', kv.u16(nOut));
      w.set('split.tensors.count', kv.i32(plan.length));
    }
  });
  // (ggml writes a tensor's dims up to the last one above 1.)
  for (const { t, to } of plan) writers[opts.keepSplit ? t.split : 0]?.addTensor({ name: t.name, shape: t.shape.slice(0, nDims(t.shape)), type: to });

  const threads = opts.threads ?? defaultThreads();
  const slabBytes = opts.slabBytes ?? 256 * MIB;
  const q = writers.length ? nativeQuant() : undefined;
  const fds = new Map<string, number>();
  const totalIn = plan.reduce((a, p) => a + p.t.bytes, 0);
  let slabBuf = new Uint8Array(0);
  let doneIn = 0;
  try {
    let i = 0;
    for (const { t, to, weights } of plan) {
      i++;
      const nPerRow = t.shape[0];
      const rows = t.shape.slice(1).reduce((a, b) => a * b, 1);
      const fromName = ggmlTypeTraits(t.type).name;
      const toName = ggmlTypeTraits(to).name;
      const rowIn = (nPerRow / blockSize(t.type)) * ggmlTypeTraits(t.type).typeSize;
      const rowOut = (nPerRow / blockSize(to)) * ggmlTypeTraits(to).typeSize;
      const bytesOut = rowOut * rows;
      const w = writers[opts.keepSplit ? t.split : 0];
      if (w && q) {
        let fd = fds.get(t.file);
        if (fd === undefined) {
          fd = fs.openSync(t.file, 'r');
          fds.set(t.file, fd);
        }
        const perRow = to === t.type ? rowIn : rowIn + 4 * nPerRow + rowOut;
        const slabRows = Math.max(1, Math.min(rows, Math.floor(slabBytes / perRow)));
        // (With an imatrix a slab stays within one expert: each has its own weights.)
        const perMatrix = t.shape[1] ?? 1;
        const nPerMatrix = weights ? weights.length / nPerRow : 1;
        for (let r = 0; r < rows; ) {
          const e = weights ? Math.min(nPerMatrix - 1, Math.floor(r / perMatrix)) : 0;
          const end = weights && nPerMatrix > 1 ? Math.min(rows, (e + 1) * perMatrix) : rows;
          const n = Math.min(slabRows, end - r);
          // (One buffer for every slab: a fresh one each time costs more in page faults than the read.)
          if (slabBuf.length < n * rowIn) slabBuf = new Uint8Array(n * rowIn);
          const src = slabBuf.subarray(0, n * rowIn);
          readAll(fd, src, t.fileOffset + r * rowIn, `${t.file}: tensor ${t.name}`);
          if (to === t.type) {
            w.writeTensorData(t.name, src);
          } else {
            const out = q.convert(t.type, src, n * nPerRow, to, threads, weights?.subarray(e * nPerRow, (e + 1) * nPerRow));
            if (out.byteLength !== n * rowOut) throw new Error(`quantize ${t.name}: ${out.byteLength} bytes for ${n} rows of ${toName}, expected ${n * rowOut}`);
            w.writeTensorData(t.name, out);
          }
          doneIn += n * rowIn;
          opts.progress?.(doneIn, totalIn, t.name);
          r += n;
        }
      }
      const shape = `[${t.shape.join(', ')}]`;
      log(`[${String(i).padStart(4)}/${String(plan.length).padStart(4)}] ${t.name.padEnd(36)} ${shape.padEnd(22)} ${fromName.padStart(7)} -> ${toName.padEnd(7)} ${(t.bytes / MIB).toFixed(2).padStart(9)} MiB -> ${(bytesOut / MIB).toFixed(2).padStart(9)} MiB`);
      report.tensors.push({ name: t.name, shape: [...t.shape], from: fromName, to: toName, bytesIn: t.bytes, bytesOut });
      report.bytesIn += t.bytes;
      report.bytesOut += bytesOut;
      report.elements += nPerRow * rows;
    }
    for (const w of writers) w.finish();
    tmps.forEach((tmp, i) => fs.renameSync(tmp, outputs[i]));
  } catch (e) {
    for (const w of writers) w.abort();
    for (const tmp of tmps) fs.rmSync(tmp, { force: true });
    throw e;
  } finally {
    for (const fd of fds.values()) fs.closeSync(fd);
  }
  return report;
}

/** llama-quantize's default output name: ggml-model-TYPE.gguf beside the input. */
export function defaultQuantizedPath(input: string, typeName: string): string {
  return path.join(path.dirname(input), `ggml-model-${typeName}.gguf`);
}

/** `model size = X MiB (Y BPW)` lines, as llama-quantize ends. */
export function quantizeSummary(r: QuantizeReport): string[] {
  const bpw = (b: number) => ((b * 8) / Math.max(1, r.elements)).toFixed(2);
  const lines = [
    `model size  = ${(r.bytesIn / MIB).toFixed(2)} MiB (${bpw(r.bytesIn)} BPW)`,
    `quant size  = ${(r.bytesOut / MIB).toFixed(2)} MiB (${bpw(r.bytesOut)} BPW)`,
  ];
  if (r.fallbacks > 0) lines.push(`${r.fallbacks} of ${r.tensors.length} tensor(s) took a fallback type (row length not a multiple of the block)`);
  if (r.needsImatrix) lines.push(`${r.typeName} needs an importance matrix (--imatrix FILE, from kail imatrix or llama-imatrix): without one this plan cannot be written`);
  return lines;
}

/**
 * quantizeModel on a worker thread (the compiled quantize-worker.js): the caller's event loop
 * stays free. Rejects with the same messages quantizeModel throws.
 */
export function quantizeModelInWorker(
  input: string,
  output: string | undefined,
  opts: Omit<QuantizeOptions, 'log' | 'progress'>,
  onProgress?: (doneBytes: number, totalBytes: number, tensor: string) => void,
): Promise<QuantizeReport> {
  // (From the sources, as under jest, the build's worker is used.)
  const script = [path.join(__dirname, 'quantize-worker.js'), path.resolve(__dirname, '../../dist/gguf/quantize-worker.js')].find((p) => fs.existsSync(p));
  if (!script) return Promise.reject(new Error('quantize: the worker script is not built (npx nx run tools:build)'));
  return new Promise((resolve, reject) => {
    const w = new Worker(script, { workerData: { input, output, opts } });
    let settled = false;
    w.on('message', (m: { progress?: { done: number; total: number; tensor: string }; report?: QuantizeReport; error?: string }) => {
      if (m.progress) onProgress?.(m.progress.done, m.progress.total, m.progress.tensor);
      else if (m.report) {
        settled = true;
        resolve(m.report);
      } else if (m.error !== undefined) {
        settled = true;
        reject(new Error(m.error));
      }
    });
    w.on('error', (e) => {
      settled = true;
      reject(e);
    });
    w.on('exit', (code) => {
      if (!settled) reject(new Error(`quantize: the worker exited with code ${code} before it finished`));
    });
  });
}
