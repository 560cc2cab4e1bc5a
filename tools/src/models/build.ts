// Writes a generated model: metadata, tokenizer, then every tensor generated chunk by chunk
// (whole rows at a time), converted to its file type and streamed into the GGUF writer.
import { GgmlType, ggmlTypeTraits } from '../gguf/constants';
import { encodeBf16, encodeF16, encodeF32 } from '../gguf/float-encode';
import { GgufWriter, kv } from '../gguf/writer';
import type { ModelConfig, TensorSpec } from './arch';
import { getArch } from './architectures';
import { llamaFileType, tensorType } from './quant-plan';
import type { FileTypeName } from './quant-plan';
import { resolveDequantizer, resolveQuantizer } from './quantizer';
import type { QuantizeFn } from './quantizer';
import { hashSeed, Xoshiro128 } from './rng';
import { buildVocab, writeVocab } from './vocab';

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
  /** Elements generated per chunk (rounded to whole rows). Default 4 Mi. */
  chunkElements?: number;
  /**
   * Writes F32 (or F16/BF16) values that went through this type plan's quantization and back
   * (native quantize + dequantize): the same numbers a `simulateType` file decodes to, in a float
   * file. Comparing the two in llama.cpp separates format errors from quantization error.
   */
  simulateType?: FileTypeName;
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

/** The tensors a config produces, with their file types. */
export function planModel(config: ModelConfig, fileType: FileTypeName): { config: ModelConfig; tensors: (TensorSpec & { type: GgmlType })[] } {
  const arch = getArch(config.arch);
  const c = arch.normalize({ ...config });
  return { config: c, tensors: arch.tensors(c).map((s) => ({ ...s, type: tensorType(fileType, s, c) })) };
}

function tensorRng(seed: number, name: string): Xoshiro128 {
  return new Xoshiro128(hashSeed(seed, name));
}

function fill(rng: Xoshiro128, spec: TensorSpec, out: Float32Array): void {
  if (spec.init.kind === 'const') out.fill(spec.init.value);
  else rng.fillNormal(out, spec.init.mean ?? 0, spec.init.std);
}

/**
 * The F32 values of one tensor exactly as `writeModel` generates them for this seed, before any
 * conversion: parity tests use it to rebuild weights without reading the file.
 */
export function generateTensorF32(config: ModelConfig, seed: number, name: string): Float32Array {
  const arch = getArch(config.arch);
  const c = arch.normalize({ ...config });
  const spec = arch.tensors(c).find((t) => t.name === name);
  if (!spec) throw new Error(`no tensor '${name}' in ${c.arch}`);
  const out = new Float32Array(spec.shape.reduce((a, b) => a * b, 1));
  fill(tensorRng(seed, name), spec, out);
  return out;
}

export function writeModel(opts: WriteModelOptions): WriteModelResult {
  const t0 = performance.now();
  const arch = getArch(opts.config.arch);
  const { config: c, tensors } = planModel(opts.config, opts.fileType);
  const quantized = tensors.some((t) => ggmlTypeTraits(t.type).quantized);
  const quantize = quantized ? (opts.quantize ?? resolveQuantizer()) : undefined;
  const simulated = opts.simulateType ? planModel(opts.config, opts.simulateType).tensors : undefined;
  const simQuantize = simulated ? (opts.quantize ?? resolveQuantizer()) : undefined;
  const simDequantize = simulated ? resolveDequantizer() : undefined;

  const w = new GgufWriter(opts.out, { alignment: opts.alignment });
  w.set('general.architecture', kv.str(arch.ggufArch));
  w.set('general.type', kv.str('model'));
  w.set('general.name', kv.str(c.name));
  w.set('general.description', kv.str(`KailStream random-weight test model (${c.arch}, seed ${opts.seed}); not trained`));
  w.set('general.file_type', kv.u32(llamaFileType(opts.fileType)));
  if (quantized) w.set('general.quantization_version', kv.u32(2));
  for (const [k, v] of arch.metadata(c)) w.set(k, v);
  writeVocab(w, buildVocab(c.vocabKind, c.vocabSize));
  // How to regenerate the F32 weights (generateTensorF32) without the file.
  w.set('kailstream.generator.seed', kv.u32(opts.seed >>> 0));
  w.set('kailstream.generator.recipe', kv.u32(WEIGHT_RECIPE_VERSION));
  w.set('kailstream.generator.arch', kv.str(c.arch));
  for (const t of tensors) w.addTensor({ name: t.name, shape: t.shape, type: t.type });

  const chunkElements = opts.chunkElements ?? 4 << 20;
  let f32 = new Float32Array(0);
  let half = new Uint8Array(0);
  let params = 0;
  const written: WrittenTensor[] = [];
  try {
    w.begin();
    tensors.forEach((spec, index) => {
      const simType = simulated?.[index].type;
      const rowLen = spec.shape[0];
      const nRows = spec.shape.slice(1).reduce((a, b) => a * b, 1);
      const rowsPerChunk = Math.max(1, Math.floor(chunkElements / rowLen));
      const rng = tensorRng(opts.seed, spec.name);
      let bytes = 0;
      for (let r = 0; r < nRows; r += rowsPerChunk) {
        const n = Math.min(rowsPerChunk, nRows - r) * rowLen;
        if (f32.length < n) f32 = new Float32Array(n);
        const chunk = f32.subarray(0, n);
        fill(rng, spec, chunk);
        if (simType !== undefined && ggmlTypeTraits(simType).quantized) {
          chunk.set(simDequantize!(simType, simQuantize!(simType, chunk), chunk.length));
        }
        let data: Uint8Array;
        switch (spec.type) {
          case GgmlType.F32: data = encodeF32(chunk); break;
          case GgmlType.F16:
          case GgmlType.BF16:
            if (half.length < n * 2) half = new Uint8Array(n * 2);
            data = spec.type === GgmlType.F16 ? encodeF16(chunk, half) : encodeBf16(chunk, half);
            break;
          default:
            data = quantize!(spec.type, chunk);
        }
        w.writeTensorData(spec.name, data);
        bytes += data.byteLength;
      }
      params += rowLen * nRows;
      written.push({ name: spec.name, shape: spec.shape, type: spec.type, bytes });
      opts.onTensor?.({ name: spec.name, index, count: tensors.length, type: spec.type, bytes });
    });
    const res = w.finish();
    return { path: res.path, bytes: res.bytes, params, seconds: (performance.now() - t0) / 1000, config: c, tensors: written };
  } catch (e) {
    w.abort();
    throw e;
  }
}
