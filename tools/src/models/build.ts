// Writes a generated model: metadata, tokenizer, then every tensor generated in work units of
// whole rows, converted to its file type and streamed into the GGUF writer. Each tensor is one
// RNG stream, and any range of it can be generated on its own (jump-ahead), so units can be
// computed in any order or in parallel (writeModelParallel) with the bytes of one sequential pass.
import { GgmlType, ggmlTypeTraits } from '../gguf/constants';
import { encodeBf16, encodeF16, encodeF32 } from '../gguf/float-encode';
import { GgufWriter, kv } from '../gguf/writer';
import type { ModelConfig, TensorSpec } from './arch';
import { getArch } from './architectures';
import { llamaFileType, tensorType } from './quant-plan';
import type { FileTypeName } from './quant-plan';
import { resolveDequantizer, resolveQuantizer } from './quantizer';
import type { DequantizeFn, QuantizeFn } from './quantizer';
import { hashSeed, Xoshiro128 } from './rng';
import { buildVocab, writeVocab, type Vocab, type VocabKind } from './vocab';
import { cachedFile, stableKeyText } from './file-cache';

/** Version of the weight recipe; bump when the values a seed produces change. */
export const WEIGHT_RECIPE_VERSION = 2;

export interface WriteModelOptions {
  config: ModelConfig;
  fileType: FileTypeName;
  seed: number;
  out: string;
  /** Quantizer for quantized types; default: the native core's (`native().quantize`). */
  quantize?: QuantizeFn;
  /** GGUF alignment. Default 32. */
  alignment?: number;
  /** Elements per work unit (rounded to whole rows). Default 4 Mi. */
  chunkElements?: number;
  /**
   * Writes F32 (or F16/BF16) values that went through this type plan's quantization and back
   * (native quantize + dequantize): the same numbers a `simulateType` file decodes to, in a float
   * file. Comparing the two in llama.cpp separates format errors from quantization error.
   */
  simulateType?: FileTypeName;
  /**
   * Benchmark files of tens of GB: each routed-expert tensor (ffn_*_exps, ffn_*_chexps) of a quantized type is
   * filled with rows drawn from a pool of this many of its own quantized random rows (chosen per
   * row by a hash of the tensor and row) instead of generating and quantizing every row, which is
   * what makes such a file take hours. The values are still quantized normal draws at the tensor's
   * scale, and the router and every other tensor are generated as usual, so routing is unchanged in
   * kind; the file records the pool size (kailstream.generator.expert_pool) and cannot be
   * regenerated row by row from the recipe. Default 0: off.
   */
  expertPool?: number;
  /** Called after each tensor. */
  onTensor?: (info: { name: string; index: number; count: number; type: GgmlType; bytes: number }) => void;
}

export interface WrittenTensor {
  name: string;
  shape: number[];
  type: GgmlType;
  bytes: number;
}

export interface WriteModelResult {
  path: string;
  bytes: number;
  params: number;
  seconds: number;
  config: ModelConfig;
  tensors: WrittenTensor[];
}

export type PlannedTensor = TensorSpec & { type: GgmlType; simType?: GgmlType };

/** The tensors a config produces, with their file types. */
export function planModel(config: ModelConfig, fileType: FileTypeName): { config: ModelConfig; tensors: PlannedTensor[] } {
  const arch = getArch(config.arch);
  const c = arch.normalize({ ...config });
  return { config: c, tensors: arch.tensors(c).map((s) => ({ ...s, type: tensorType(fileType, s, c) })) };
}

/** planModel plus, with `simulateType`, the type each tensor's values are passed through. */
export function planWithSimulation(opts: Pick<WriteModelOptions, 'config' | 'fileType' | 'simulateType'>): { config: ModelConfig; tensors: PlannedTensor[] } {
  const plan = planModel(opts.config, opts.fileType);
  if (opts.simulateType) {
    const sim = planModel(opts.config, opts.simulateType).tensors;
    plan.tensors.forEach((t, i) => (t.simType = sim[i].type));
  }
  return plan;
}

/** Fills `out` with the tensor's values [start, start + out.length). */
export function fillTensorRange(seed: number, spec: TensorSpec, start: number, out: Float32Array): void {
  if (spec.init.kind === 'const') {
    out.fill(spec.init.value);
    return;
  }
  if (spec.init.kind === 'ramp') {
    const row = spec.shape[0];
    for (let k = 0; k < out.length; k++) out[k] = spec.init.start + spec.init.step * ((start + k) % row);
    return;
  }
  if (spec.init.kind === 'step') {
    const row = spec.shape[0];
    const { n, head, tail } = spec.init;
    for (let k = 0; k < out.length; k++) out[k] = (start + k) % row < n ? head : tail;
    return;
  }
  if (spec.init.kind === 'values') {
    const v = spec.init.values;
    if (v.length !== spec.shape[0]) throw new Error(`${spec.name}: ${v.length} values for rows of ${spec.shape[0]}`);
    for (let k = 0; k < out.length; k++) out[k] = v[(start + k) % v.length];
    return;
  }
  if (spec.init.kind === 'expert_ids') {
    // Row r: a Fisher-Yates prefix of the experts, from a generator seeded by (tensor, row).
    const row = spec.shape[0];
    const ne = spec.init.nExpert;
    if (row > ne) throw new Error(`${spec.name}: ${row} distinct ids of ${ne} experts`);
    const ids = new Int32Array(ne);
    for (let r = Math.floor(start / row), k = 0; k < out.length; r++) {
      const rng = new Xoshiro128(hashSeed(seed, `${spec.name}#${r}`));
      for (let e = 0; e < ne; e++) ids[e] = e;
      for (let j = 0; j < row; j++) {
        const pick = j + Math.floor(rng.nextFloat() * (ne - j));
        const v = ids[pick];
        ids[pick] = ids[j];
        ids[j] = v;
      }
      for (let j = (r === Math.floor(start / row) ? start % row : 0); j < row && k < out.length; j++) out[k++] = ids[j];
    }
    return;
  }
  if (spec.init.kind === 'mla_kv_b_fold') {
    const { kB, vB, std, qkNope: n, vHead: v } = spec.init;
    const L = spec.shape[0];
    const H = spec.shape[1] / (n + v);
    if (!Number.isInteger(H)) throw new Error(`${spec.name}: rows of ${spec.shape[1]} are not heads of ${n} + ${v}`);
    const draw = (name: string, len: number) => {
      const a = new Float32Array(len);
      fillTensorRange(seed, { name, shape: [len], init: { kind: 'normal', std }, role: spec.role }, 0, a);
      return a;
    };
    const kb = draw(kB, n * L * H);
    const vb = draw(vB, L * v * H);
    // Row h * (n + v) + j: key row j of head h (attn_k_b is stored transposed) or its value row j - n.
    for (let k = 0; k < out.length; k++) {
      const e = start + k;
      const l = e % L;
      const r = (e - l) / L;
      const h = Math.floor(r / (n + v));
      const j = r - h * (n + v);
      out[k] = j < n ? kb[(h * L + l) * n + j] : vb[(h * v + j - n) * L + l];
    }
    return;
  }
  const rng = new Xoshiro128(hashSeed(seed, spec.name));
  rng.jump(2 * start); // fillNormal draws two 32-bit words per value
  rng.fillNormal(out, spec.init.mean ?? 0, spec.init.std);
  if (spec.init.zeroLead) out.fill(0, 0, Math.max(0, Math.min(out.length, spec.init.zeroLead - start)));
}

/**
 * The F32 values of one tensor exactly as the writers generate them for this seed, before any
 * conversion: parity tests use it to rebuild weights without reading the file.
 */
export function generateTensorF32(config: ModelConfig, seed: number, name: string): Float32Array {
  const arch = getArch(config.arch);
  const c = arch.normalize({ ...config });
  const spec = arch.tensors(c).find((t) => t.name === name);
  if (!spec) throw new Error(`no tensor '${name}' in ${c.arch}`);
  const out = new Float32Array(spec.shape.reduce((a, b) => a * b, 1));
  fillTensorRange(seed, spec, 0, out);
  return out;
}

/** One piece of work: `nRows` whole rows of tensor `tensor` starting at `rowStart`. */
export interface WorkUnit {
  tensor: number;
  rowStart: number;
  nRows: number;
}

export function workUnits(tensors: readonly TensorSpec[], chunkElements: number): WorkUnit[] {
  const units: WorkUnit[] = [];
  tensors.forEach((spec, tensor) => {
    const rowLen = spec.shape[0];
    const nRows = spec.shape.slice(1).reduce((a, b) => a * b, 1);
    const rowsPerUnit = Math.max(1, Math.floor(chunkElements / rowLen));
    for (let r = 0; r < nRows; r += rowsPerUnit) units.push({ tensor, rowStart: r, nRows: Math.min(rowsPerUnit, nRows - r) });
  });
  return units;
}

/** Generates and encodes work units; reuses its scratch buffers between calls. */
// grovemoe's chunk experts (ffn_*_chexps) are routed expert tensors too.
const isExpertTensor = (name: string) => /\.ffn_(gate|up|down|gate_up)_(ch)?exps\./.test(name);

export class UnitEncoder {
  private f32 = new Float32Array(0);
  private half = new Uint8Array(0);
  private quantize?: QuantizeFn;
  private dequantize?: DequantizeFn;
  private readonly pools = new Map<number, { rowBytes: number; rows: Uint8Array }>();

  constructor(
    private readonly seed: number,
    private readonly tensors: readonly PlannedTensor[],
    quantize?: QuantizeFn,
    private readonly expertPool = 0,
  ) {
    if (!(Number.isInteger(expertPool) && expertPool >= 0)) throw new Error(`expertPool must be a non-negative integer, got ${expertPool}`);
    const needsQuant = tensors.some((t) => ggmlTypeTraits(t.type).quantized || (t.simType !== undefined && ggmlTypeTraits(t.simType).quantized));
    if (needsQuant) this.quantize = quantize ?? resolveQuantizer();
    if (tensors.some((t) => t.simType !== undefined && ggmlTypeTraits(t.simType).quantized)) this.dequantize = resolveDequantizer();
  }

  /**
   * The unit's bytes in the file type. The result may alias scratch memory: use it (or copy it)
   * before the next call.
   */
  encode(u: WorkUnit): Uint8Array {
    const spec = this.tensors[u.tensor];
    if (this.expertPool > 0 && isExpertTensor(spec.name) && ggmlTypeTraits(spec.type).quantized && spec.simType === undefined) return this.pooled(u);
    const rowLen = spec.shape[0];
    const n = u.nRows * rowLen;
    if (this.f32.length < n) this.f32 = new Float32Array(n);
    const chunk = this.f32.subarray(0, n);
    fillTensorRange(this.seed, spec, u.rowStart * rowLen, chunk);
    if (spec.simType !== undefined && ggmlTypeTraits(spec.simType).quantized) {
      chunk.set(this.dequantize!(spec.simType, this.quantize!(spec.simType, chunk), n));
    }
    switch (spec.type) {
      case GgmlType.F32:
        return encodeF32(chunk);
      case GgmlType.I32:
        return new Uint8Array(Int32Array.from(chunk).buffer);
      case GgmlType.I64:
        return new Uint8Array(BigInt64Array.from(chunk, (v) => BigInt(v)).buffer);
      case GgmlType.F16:
      case GgmlType.BF16:
        if (this.half.length < n * 2) this.half = new Uint8Array(n * 2);
        return spec.type === GgmlType.F16 ? encodeF16(chunk, this.half) : encodeBf16(chunk, this.half);
      default:
        return this.quantize!(spec.type, chunk);
    }
  }

  /** A unit of an expert tensor from its row pool (WriteModelOptions.expertPool). */
  private pooled(u: WorkUnit): Uint8Array {
    const spec = this.tensors[u.tensor];
    let pool = this.pools.get(u.tensor);
    if (!pool) {
      const rowLen = spec.shape[0];
      const nRows = Math.min(this.expertPool, spec.shape.slice(1).reduce((a, b) => a * b, 1));
      const f = new Float32Array(nRows * rowLen);
      fillTensorRange(this.seed, spec, 0, f);
      const rows = this.quantize!(spec.type, f);
      pool = { rowBytes: rows.byteLength / nRows, rows };
      this.pools.set(u.tensor, pool);
    }
    const n = pool.rows.byteLength / pool.rowBytes;
    const out = new Uint8Array(u.nRows * pool.rowBytes);
    for (let i = 0; i < u.nRows; i++) {
      // splitmix-style hash of (tensor, row): a fixed, well-spread choice of pool row.
      let h = Math.imul((u.rowStart + i) ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(u.tensor + 1, 0xc2b2ae35);
      h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
      h ^= h >>> 15;
      const r = (h >>> 0) % n;
      out.set(pool.rows.subarray(r * pool.rowBytes, (r + 1) * pool.rowBytes), i * pool.rowBytes);
    }
    return out;
  }
}

// buildVocab is a pure function of its kind and size, and costs 45-80 ms for the 1024-token
// vocabularies (llama3's BPE merges most): a test process writing a hundred models built the same
// few again and again. Read-only once built: a writer takes a shallow copy to set its template.
const vocabs = new Map<string, Vocab>();
function vocabOf(kind: VocabKind, size: number): Vocab {
  const key = `${kind}:${size}`;
  let v = vocabs.get(key);
  if (!v) vocabs.set(key, (v = buildVocab(kind, size)));
  return v;
}

/** Opens the writer with all metadata and the tensor table set. */
function openWriter(opts: WriteModelOptions, c: ModelConfig, tensors: readonly PlannedTensor[]): GgufWriter {
  const arch = getArch(c.arch);
  const quantized = tensors.some((t) => ggmlTypeTraits(t.type).quantized);
  const w = new GgufWriter(opts.out, { alignment: opts.alignment });
  w.set('general.architecture', kv.str(arch.ggufArch));
  w.set('general.type', kv.str('model'));
  w.set('general.name', kv.str(c.name));
  w.set('general.description', kv.str(`KailStream random-weight test model (${c.arch}, seed ${opts.seed}); not trained`));
  w.set('general.file_type', kv.u32(llamaFileType(opts.fileType)));
  if (quantized) w.set('general.quantization_version', kv.u32(2));
  for (const [k, v] of arch.metadata(c)) w.set(k, v);
  const vocab = { ...vocabOf(c.vocabKind, c.vocabSize) };
  if (c.chatTemplate !== undefined) vocab.chatTemplate = c.chatTemplate;
  writeVocab(w, vocab);
  if (c.rerankTemplate !== undefined) w.set('tokenizer.chat_template.rerank', kv.str(c.rerankTemplate));
  // How to regenerate the F32 weights (generateTensorF32) without the file.
  w.set('kailstream.generator.seed', kv.u32(opts.seed >>> 0));
  w.set('kailstream.generator.recipe', kv.u32(WEIGHT_RECIPE_VERSION));
  w.set('kailstream.generator.arch', kv.str(c.arch));
  if (opts.expertPool) w.set('kailstream.generator.expert_pool', kv.u32(opts.expertPool));
  for (const t of tensors) w.addTensor({ name: t.name, shape: t.shape, type: t.type });
  w.begin();
  return w;
}

/** Tracks bytes per tensor and reports finished tensors. */
class Progress {
  readonly written: WrittenTensor[] = [];
  private bytes = 0;
  private unitsLeft: number[];

  constructor(
    private readonly tensors: readonly PlannedTensor[],
    units: readonly WorkUnit[],
    private readonly onTensor?: WriteModelOptions['onTensor'],
  ) {
    this.unitsLeft = tensors.map(() => 0);
    for (const u of units) this.unitsLeft[u.tensor]++;
  }

  add(u: WorkUnit, n: number): void {
    this.bytes += n;
    if (--this.unitsLeft[u.tensor] > 0) return;
    const t = this.tensors[u.tensor];
    this.written.push({ name: t.name, shape: t.shape, type: t.type, bytes: this.bytes });
    this.onTensor?.({ name: t.name, index: u.tensor, count: this.tensors.length, type: t.type, bytes: this.bytes });
    this.bytes = 0;
  }

  get params(): number {
    return this.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
  }
}

/** Writes the model on this thread. */
export function writeModel(opts: WriteModelOptions): WriteModelResult {
  // (Test runs only, where KAIL_TEST_MODEL_CACHE is set: see file-cache.ts. The progress callback
  // does not change the bytes; a quantizer of the caller's own does, so it is never cached.)
  const { out, onTensor: _progress, quantize, ...recipe } = opts;
  const recipeText = quantize ? null : stableKeyText(recipe);
  const t0 = performance.now();
  let written: WriteModelResult | undefined;
  const r = cachedFile(recipeText === null ? null : `writeModel/1 ${recipeText}`, out, () => {
    written = writeModelNow(opts);
    return { bytes: written.bytes, params: written.params, tensors: written.tensors };
  });
  // (A copy from the cache: the plan's config, which the file was written from.)
  return written ?? { ...r, path: out, seconds: (performance.now() - t0) / 1000, config: planWithSimulation(opts).config };
}

function writeModelNow(opts: WriteModelOptions): WriteModelResult {
  const t0 = performance.now();
  const { config: c, tensors } = planWithSimulation(opts);
  const encoder = new UnitEncoder(opts.seed, tensors, opts.quantize, opts.expertPool ?? 0);
  const units = workUnits(tensors, opts.chunkElements ?? 4 << 20);
  const progress = new Progress(tensors, units, opts.onTensor);
  const w = openWriter(opts, c, tensors);
  try {
    for (const u of units) {
      const data = encoder.encode(u);
      w.writeTensorData(tensors[u.tensor].name, data);
      progress.add(u, data.byteLength);
    }
    const res = w.finish();
    return { path: res.path, bytes: res.bytes, params: progress.params, seconds: (performance.now() - t0) / 1000, config: c, tensors: progress.written };
  } catch (e) {
    w.abort();
    throw e;
  }
}

/** Runs work units somewhere (worker threads, or this thread for tests) and returns their bytes. */
export interface UnitRunner {
  run(u: WorkUnit): Promise<Uint8Array>;
  close(): Promise<void>;
}

/**
 * Writes the model with work units computed by `runner` (e.g. a worker pool), at most `inFlight`
 * at a time, written in file order. Produces the same bytes as `writeModel`.
 */
export async function writeModelWith(opts: WriteModelOptions, runner: UnitRunner, inFlight: number): Promise<WriteModelResult> {
  const t0 = performance.now();
  const { config: c, tensors } = planWithSimulation(opts);
  const units = workUnits(tensors, opts.chunkElements ?? 4 << 20);
  const progress = new Progress(tensors, units, opts.onTensor);
  const w = openWriter(opts, c, tensors);
  const pending = new Map<number, Promise<Uint8Array>>();
  let next = 0;
  const launch = () => {
    while (next < units.length && pending.size < Math.max(1, inFlight)) {
      const i = next++;
      const p = runner.run(units[i]);
      p.catch(() => undefined); // observed when awaited in order; avoid an unhandled rejection meanwhile
      pending.set(i, p);
    }
  };
  try {
    for (let i = 0; i < units.length; i++) {
      launch();
      const data = await pending.get(i)!;
      pending.delete(i);
      launch();
      w.writeTensorData(tensors[units[i].tensor].name, data);
      progress.add(units[i], data.byteLength);
    }
    const res = w.finish();
    return { path: res.path, bytes: res.bytes, params: progress.params, seconds: (performance.now() - t0) / 1000, config: c, tensors: progress.written };
  } catch (e) {
    w.abort();
    throw e;
  } finally {
    await Promise.allSettled(pending.values());
    await runner.close();
  }
}
