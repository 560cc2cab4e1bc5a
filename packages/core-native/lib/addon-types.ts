// The whole native surface as TypeScript sees it: one hand-written type, kept in step with
// addon/*.cpp. Everything the engine calls on the addon goes through this interface.

export interface CudaDeviceInfo {
  index: number;
  name: string;
  totalBytes: number;
  freeBytes: number;
  computeCapability: string;
}

export interface SystemInfo {
  /** SIMD features detected at run time, e.g. ["avx2", "fma", "avx512f", "avx512_vnni"]. */
  simd: string[];
  /** Kernel level in use: "avx512", "avx2" or "scalar" (KAIL_FORCE_ISA can lower it). */
  kernelLevel: 'avx512' | 'avx2' | 'scalar';
  logicalCores: number;
  physicalCores: number;
  /** True when the addon was built with the CUDA backend. */
  cudaCompiled: boolean;
  cudaDevices: CudaDeviceInfo[];
}

export interface AddonSystem {
  systemInfo(): SystemInfo;
  /** Dequantizes Q8_0 blocks on GPU 0; throws KAIL_E_UNSUPPORTED without a device. */
  cudaDequantizeQ8_0(blocks: Uint8Array): Float32Array;
}

export type { AddonGguf, GgufOpenOptions, GgufTensorInfo, GgufTypeName, GgufValue, NativeGgufFile } from './gguf-types';
import type { AddonGguf } from './gguf-types';

/** One op of a model program (see include/kail/model.h for the op set). */
export interface ProgramOp {
  op:
    | 'embed'
    | 'rms_norm'
    | 'head_rms_norm'
    | 'matmul'
    | 'add'
    | 'mul'
    | 'scale'
    | 'swiglu'
    | 'sigmoid_mul'
    | 'rope'
    | 'attention'
    | 'moe'
    | 'gather_out'
    | 'copy';
  out: number;
  a?: number;
  b?: number;
  c?: number;
  /** Role -> tensor name. */
  weights?: Record<string, string>;
  params?: Record<string, number | boolean>;
}

export interface ProgramBuffer {
  name: string;
  /** Floats per row. */
  width: number;
  /** Rows are the batch's output rows (else one per token). */
  outRows: boolean;
}

export interface ModelProgram {
  buffers: ProgramBuffer[];
  ops: ProgramOp[];
  logits: number;
  kvKWidth: number[];
  kvVWidth: number[];
  nMoeLayers: number;
  nExpert: number;
}

export interface ModelParams {
  /** Compute threads; 0 = physical cores. */
  threads?: number;
  /** KV cache element type: 1 (F16, default) or 0 (F32). */
  kvType?: number;
  /** Positions per sequence. */
  nCtx?: number;
  /** Sequence slots. */
  nSeqMax?: number;
  /** KV budget in bytes; 0 = unlimited. */
  kvMaxBytes?: number;
}

export interface ForwardBatch {
  tokens: Int32Array;
  pos: Int32Array;
  seq: Int32Array;
  /** 1 where logits are wanted. */
  output: Uint8Array;
}

export interface NativeModelStats {
  forwardCalls: number;
  tokens: number;
  computeSeconds: number;
  kvBytes: number;
  /** nMoeLayers x nExpert activation counts. */
  expertCounts: Float64Array;
}

export interface NativeModel {
  /** Resolves n_out x nVocab logits for the rows with output set. */
  forward(batch: ForwardBatch): Promise<Float32Array>;
  seqLen(seq: number): number;
  seqTruncate(seq: number, len: number): void;
  seqCopy(src: number, dst: number): void;
  stats(): NativeModelStats;
  cancel(): void;
  close(): void;
  readonly nVocab: number;
  readonly nThreads: number;
  readonly kvBytesPerToken: number;
}

export interface AddonModel {
  Model: new (path: string, program: ModelProgram, params?: ModelParams) => NativeModel;
}

export interface AddonQuants {
  /** Quantizes floats to a ggml type id; returns the blocks. */
  quantize(type: number, data: Float32Array): Uint8Array;
  /** Dequantizes n values of a ggml type. */
  dequantize(type: number, data: Uint8Array, n: number): Float32Array;
  matmul(type: number, weights: Uint8Array, rows: number, cols: number, x: Float32Array, n: number): Float32Array;
}

export type NativeAddon = AddonSystem & AddonGguf & AddonModel & AddonQuants;
