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
  /** CPUs this process may run on (its affinity mask: taskset, a container's cpuset). */
  logicalCores: number;
  /** Distinct physical cores among those. */
  physicalCores: number;
  /** Every CPU the kernel has online. */
  onlineCores: number;
  /** CPU time a cgroup allows, in CPUs (docker --cpus, a Kubernetes CPU limit); 0 when none. */
  cpuQuota: number;
  /** Compute threads when none are asked for: the physical cores, at most the quota. */
  defaultThreads: number;
  /** True when the addon was built with the CUDA backend. */
  cudaCompiled: boolean;
  cudaDevices: CudaDeviceInfo[];
}

/** Options of ioBench (include/kail/storage_bench.h). */
export interface IoBenchOptions {
  /** An existing file of at least one block. */
  path: string;
  /** Bytes per read, a multiple of 4096. Default 1 MiB. */
  blockBytes?: number;
  /** Reads in flight (one thread each), 1..256. Default 1. */
  queueDepth?: number;
  /** Random aligned offsets; default false (sequential). */
  random?: boolean;
  /** Stop after this many seconds (or at the end of a sequential pass). Default 1. */
  seconds?: number;
  /** O_DIRECT (default true); buffered reads + POSIX_FADV_DONTNEED where refused. */
  direct?: boolean;
}

export interface IoBenchResult {
  bytes: number;
  reads: number;
  seconds: number;
  /** O_DIRECT was used. */
  direct: boolean;
  /** Why not, when not. */
  note: string;
}

export interface MemBenchResult {
  /** All threads summing one buffer. */
  readBytesPerSecond: number;
  /** One thread, memcpy: bytes copied per second. */
  copyBytesPerSecond: number;
  threads: number;
}

/** The memory limit the tightest cgroup over this process sets (include/kail/cgroup.h). */
export interface CgroupMemoryLimit {
  /** The group directory whose limit leaves the least room (this process's group or an ancestor). */
  dir: string;
  version: 1 | 2;
  /** v2 memory.max (or memory.high when lower), v1 memory.limit_in_bytes. */
  limitBytes: number;
  /** Charged to the group now, page cache included. */
  usedBytes: number;
  /** The group's file page cache, which the kernel reclaims before it OOM-kills. */
  reclaimableBytes: number;
  /** limitBytes - (usedBytes - reclaimableBytes), at least 0. */
  headroomBytes: number;
}

export interface AddonSystem {
  systemInfo(): SystemInfo;
  /** The tightest cgroup memory limit over this process; null when none is set. fsRoot (a fake /proc and /sys) is for tests. */
  cgroupMemoryLimit(fsRoot?: string): CgroupMemoryLimit | null;
  /** Read bandwidth of a file at one block size and queue depth. */
  ioBench(options: IoBenchOptions): Promise<IoBenchResult>;
  /** Memory bandwidth over a buffer of `bytes` (default 256 MiB). */
  memBench(options?: { bytes?: number; threads?: number; seconds?: number }): Promise<MemBenchResult>;
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
    | 'copy'
    | 'mla_attention'
    | 'input'
    | 'cvec'
    | 'layer_norm'
    | 'gelu'
    | 'hadamard'
    | 'dsa_index'
    | 'ssm_conv'
    | 'gated_delta_net'
    | 'ssm_scan'
    | 'relu_sqr'
    | 'softcap'
    | 'moe_prefetch'
    | 'clamp'
    | 'lightning_attn'
    | 'hc_gates'
    | 'attn_res'
    | 'msa_index'
    | 'dsv4_compress'
    | 'dsv4_attention'
    | 'dsv4_hc_post'
    | 'ple_ngram'
    | 'ple_gate'
    | 'xielu'
    | 'qsa_index'
    | 'rwkv_wkv7'
    | 'rwkv_wkv6'
    | 'sigmoid'
    | 'head_sum_mul'
    | 'altup'
    | 'gaussian_topk'
    | 'token_shift'
    | 'switch_route'
    | 'switch_lora';
  out: number;
  a?: number;
  b?: number;
  c?: number;
  /** Role -> tensor name. */
  weights?: Record<string, string>;
  params?: Record<string, number | boolean>;
  /** Integer lists an op takes whole (switch_route: the adapters' activation tokens, then their substitutes). */
  ids?: number[];
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
  /** A per-token buffer forward() returns when the batch asks (`hidden: true`); -1 or absent: none. */
  hidden?: number;
  kvKWidth: number[];
  kvVWidth: number[];
  /** Recurrent layers (linear attention): the F32 state each sequence keeps per layer, in floats. */
  rsWidth?: number[];
  nMoeLayers: number;
  nExpert: number;
}

export interface ModelParams {
  /** Compute threads; 0 = physical cores. */
  threads?: number;
  /** KV cache element type (a ggml type id) of K rows and MLA latent rows: 1 (F16, default), 0 (F32), 8 (Q8_0), ... */
  kvType?: number;
  /** Element type of V rows; defaults to kvType. */
  kvTypeV?: number;
  /** LoRA adapters (GGUF adapter files), applied in order with their scales (default 1). */
  lora?: { path: string; scale?: number }[];
  /** GGUF files whose tensors fill the names the program gives that the model's file lacks, in order (not with ramBytes). */
  weightFiles?: string[];
  /**
   * A model whose KV cache this one (a draft: a Gemma 4 assistant) reads: its attention ops with
   * ext_layer read the source's layers, weights named "target:NAME" are the source's. Such a draft
   * keeps no cache: each row sits at its sequence's source length. While its forward runs, the
   * source's forward and cache changes are refused; after the source is closed, the draft's forward
   * is refused ("its target was closed").
   */
  kvSource?: NativeModel;
  /** Control vectors summed (llama.cpp's llama_set_adapter_cvec data): cvecNEmbd floats per layer from layer 1. */
  cvec?: Float32Array;
  cvecNEmbd?: number;
  /** The layers they apply to, inclusive (default 1 .. every layer). */
  cvecStart?: number;
  cvecEnd?: number;
  /** llama.cpp's --swa-full: sliding-window layers cache every position (no ring). */
  swaFull?: boolean;
  /** In memory: compute from the file's mapping instead of a copy of the tensor data in huge pages. */
  mmap?: boolean;
  /** Positions per sequence. */
  nCtx?: number;
  /** Sequence slots. */
  nSeqMax?: number;
  /** KV budget in bytes; 0 = unlimited. */
  kvMaxBytes?: number;
  /**
   * Expert streaming: the RAM budget in bytes for the whole model (resident weights, KV cache,
   * scratch, reserve and the expert cache). Non-expert weights are copied into RAM at load and
   * routed experts are read from the file on demand; the load throws KAIL_E_BUDGET with the
   * plan's numbers when the resident part does not fit. Default 0: every weight is read through
   * a mapping of the file (the in-memory path).
   */
  ramBytes?: number;
  /** Part of ramBytes held back for the rest of the process (runtime, heap). Default 0. */
  ramReserveBytes?: number;
  /**
   * The VRAM tier under the RAM expert cache (streaming only): bytes of memory on CUDA device
   * vramDevice (default 0) holding copies of experts read from storage. 0 or absent: none. The load
   * fails with KAIL_E_UNSUPPORTED without a CUDA build or device.
   */
  vramBytes?: number;
  vramDevice?: number;
  /** vramBytes is a default (the hardware profile's): one that cannot hold an expert gives no tier instead of failing. */
  vramOptional?: boolean;
  /** Most tokens per forward() the budget's scratch is planned for (streaming only). Default 512. */
  nBatch?: number;
  /** Expert reads in flight at once (I/O threads), 1..64. Default 4. */
  ioThreads?: number;
  /** O_DIRECT expert reads; false: buffered reads + POSIX_FADV_DONTNEED. Default true. */
  directIo?: boolean;
  /** Predict the next MoE layer's experts and read them early. Default true. */
  prefetch?: boolean;
  /**
   * Expert cache eviction policy: 'lru', 'lfu', 'lrfu' or 'context' (include/kail/expert_cache.h),
   * options after a colon ('lfu:half_life=16'). Default: the cache's default ('context').
   */
  cachePolicy?: string;
  /** Read experts from an expert pack (`kail repack`) instead of the GGUF. */
  expertPack?: NativeExpertPack;
  /** Largest single expert read in bytes (multiple of 4096; reads are cut into parts that readers take in parallel). Default 0 = uncut. */
  readBytes?: number;
}

/**
 * Where each routed expert lies in an expert pack: one 4 KiB-aligned block per expert with its
 * gate, up and down slices at sliceOffset, in files[file[e]] at offset[e] (include/kail/expert_stream.h).
 */
export interface NativeExpertPack {
  files: string[];
  /** One per MoE layer, in program order. */
  layers: { sliceOffset: [number, number, number]; blockBytes: number; file: Int32Array; offset: Float64Array }[];
}

/** What a RAM budget holds with routed experts streaming from storage (include/kail/residency.h). */
export interface NativeResidencyPlan {
  ramBytes: number;
  reserveBytes: number;
  /** Non-expert weights the program reads, copied into RAM. */
  residentBytes: number;
  residentTensors: number;
  /** KV cache at nCtx positions for nSeqMax sequences. */
  kvBytes: number;
  nCtx: number;
  nSeqMax: number;
  /** Activations for a batch of nBatch tokens (an estimate). */
  scratchBytes: number;
  /** LoRA adapters' pairs (params.lora), mapped and read by every pass. */
  loraBytes: number;
  nBatch: number;
  /** reserve + resident + KV + scratch. */
  fixedBytes: number;
  /** Routed expert tensors in the file. */
  expertBytes: number;
  nMoeLayers: number;
  /** Experts of the largest and the smallest MoE layer, and over all of them (they differ where a
   * block has more than one MoE op: GroveMoE's 128 routed and 64 chunk experts are two layers here). */
  nExpert: number;
  nExpertMin: number;
  nExpertTotal: number;
  nExpertUsed: number;
  /** One cached expert (gate+up+down, 4 KiB-aligned read buffers), largest layer. */
  expertEntryBytes: number;
  /** ramBytes - fixedBytes (0 when smaller). */
  cacheBytes: number;
  /** The least the expert cache may have: nExpertUsed experts of the largest layer. */
  minCacheBytes: number;
  cacheExperts: number;
  /** cacheBytes / one expert of every MoE layer. */
  cacheExpertsPerLayer: number;
  /** Bytes read for one token with nothing cached: nExpertUsed experts per MoE layer. */
  coldReadBytesPerToken: number;
  fits: boolean;
  /** The VRAM tier's budget (params.vramBytes; 0 without MoE layers). */
  vramBytes: number;
  /** Experts it holds: slots of expertEntryBytes, at most nExpertTotal (a larger budget is not taken). */
  vramCacheExperts: number;
  /** vramCacheExperts x expertEntryBytes: the device memory the tier allocates. */
  vramCacheBytes: number;
  /** How much larger ramBytes must be; 0 when it fits. */
  shortfallBytes: number;
  /** The refusal with its numbers; '' when it fits. */
  message: string;
}

/**
 * One MoE layer's expert traffic. accesses counts distinct experts per forward pass;
 * hits + misses = accesses. Prefetch precision = predictedCorrect / predicted, recall =
 * predictedCorrect / predictedActual.
 */
export interface NativeExpertLayerStats {
  accesses: number;
  hits: number;
  misses: number;
  /** Misses whose read (a prefetch) was already in flight. */
  missesInflight: number;
  reads: number;
  bytesRead: number;
  readSeconds: number;
  computeSeconds: number;
  /** Time the forward pass waited with no expert of this layer ready. */
  stallSeconds: number;
  prefetchReads: number;
  prefetchBytes: number;
  prefetchUsed: number;
  prefetchWasted: number;
  predicted: number;
  predictedCorrect: number;
  predictedActual: number;
  /** Experts of this layer in the RAM cache now (ascending). */
  resident: Int32Array;
  /** Entries filled from the VRAM tier instead of storage (not in reads/bytesRead/readSeconds), their bytes and copy time. */
  vramReads: number;
  vramBytes: number;
  vramSeconds: number;
  /** Experts of this layer held by the VRAM tier now (ascending). */
  vramResident: Int32Array;
}

/** The VRAM tier of an expert stream (device "" and zeros without one). */
export interface NativeVramTierStats {
  /** "cuda:0 (NAME)". */
  device: string;
  /** Slots x slotBytes. */
  capacityBytes: number;
  /** One slot: the largest expert entry. */
  slotBytes: number;
  usedBytes: number;
  entries: number;
  /** Copies written to the device after storage reads, their bytes and time. */
  uploads: number;
  uploadBytes: number;
  uploadSeconds: number;
  evictions: number;
  /** Why the tier turned off (a failed copy); "" while it works. */
  error: string;
}

export interface NativeExpertStreamStats {
  /** Expert reads use O_DIRECT. */
  directIo: boolean;
  /** Why reads are buffered, when they are. */
  ioNote: string;
  ioThreads: number;
  /** The eviction policy in use. */
  policy: string;
  /** Weights copied into RAM at load. */
  residentBytes: number;
  capacityBytes: number;
  /** Every expert read buffer alive (cached, loading, queued). */
  usedBytes: number;
  peakBytes: number;
  pinnedBytes: number;
  entries: number;
  evictions: number;
  prefetchCancelled: number;
  prefetchDropped: number;
  readErrors: number;
  /** Usage-history warming: entries queued, read, later asked for, dropped unread, still queued or reading. */
  warmQueued: number;
  warmReads: number;
  warmBytes: number;
  warmUsed: number;
  warmCancelled: number;
  warmPending: number;
  /** The files experts are read from (the GGUF, or the expert pack's stripes). */
  files: string[];
  vram: NativeVramTierStats;
  /** One per MoE op, in program order. */
  layers: NativeExpertLayerStats[];
}

export interface ForwardBatch {
  tokens: Int32Array;
  pos: Int32Array;
  seq: Int32Array;
  /** 1 where logits are wanted. */
  output: Uint8Array;
  /** Hidden-state rows (tokens x inputWidth floats) for a program with an `input` op (an MTP head). */
  embd?: Float32Array;
  /** Also return the program's hidden buffer for every row (forward resolves `{logits, hidden}`). */
  hidden?: boolean;
}

export interface NativeModelStats {
  forwardCalls: number;
  tokens: number;
  computeSeconds: number;
  kvBytes: number;
  /** nMoeLayers x nExpert activation counts. */
  expertCounts: Float64Array;
  /** Activation buffers allocated now. */
  scratchBytes: number;
  /** Recurrent-state rollback checkpoints held now (speculating sequences of a recurrent model; outside the KV budget). */
  rollbackBytes: number;
  /** Expert streaming telemetry; null on the in-memory path. */
  stream: NativeExpertStreamStats | null;
}

export interface NativeModel {
  /**
   * Resolves n_out x nVocab logits for the rows with output set; with `hidden: true`, an object
   * with those logits and the hidden buffer's rows (tokens x hiddenWidth floats).
   */
  forward(batch: ForwardBatch & { hidden?: false }): Promise<Float32Array>;
  forward(batch: ForwardBatch & { hidden: true }): Promise<{ logits: Float32Array; hidden: Float32Array }>;
  /** Floats per row of the program's hidden buffer; 0 when it has none. */
  readonly hiddenWidth: number;
  /** Floats per row the program's input op reads (batch.embd); 0 when it reads none. */
  readonly inputWidth: number;
  seqLen(seq: number): number;
  /** Keeps positions [0, len); returns how many it kept: len, or 0 when a sliding-window layer's ring no longer holds the window before len. */
  seqTruncate(seq: number, len: number): number;
  seqCopy(src: number, dst: number): void;
  /** Recurrent layers: keep a checkpoint of the sequence's states so seqTruncate can take back up to 40 positions (speculative decoding). */
  seqKeepRollback(seq: number, on: boolean): void;
  /** Recurrent layers: the sequence's states now (every recurrent layer's floats, in order). */
  seqStates(seq: number): Float32Array;
  /** Recurrent layers: back to `len` positions with states seqStates gave at that length (KV layers cut to len); returns len, or 0 when a sliding-window ring lost the window (cleared). */
  seqSetStates(seq: number, len: number, states: Float32Array): number;
  /** Context shift: drops positions [keep, keep + discard), moves the rest down (K re-rotated); returns the new length. */
  seqShift(seq: number, keep: number, discard: number): number;
  /** A sequence's KV cache as bytes (slot save, prompt cache). */
  seqState(seq: number): Uint8Array;
  /** Puts bytes from seqState back into a sequence of a model of the same shape and cache types; refuses others, naming the difference. */
  setSeqState(seq: number, state: Uint8Array): void;
  /** LoRA adapters loaded (params.lora). */
  readonly nLora: number;
  /** The scale sequence `seq` applies each adapter with (nLora numbers; each sequence starts at params.lora's). */
  setLoraScales(seq: number, scales: number[]): void;
  stats(): NativeModelStats;
  /** The residency plan the model was loaded with; null on the in-memory path. */
  plan(): NativeResidencyPlan | null;
  /**
   * Warms the expert cache from usage history: seeds the eviction policy with each expert's
   * share of tokens and reads the experts, hottest first, into free cache room in the background.
   * No-op on the in-memory path.
   */
  warmExperts(layers: Int32Array, experts: Int32Array, shares: Float64Array): void;
  /**
   * Importance-matrix collection (llama-imatrix's statistics): true starts it (clearing what was
   * gathered), false stops it. While on, each forward adds every weight's input rows, per column
   * the sum of squares, per expert for routed experts (2-D weights only in passes of 16 rows or more).
   */
  imatrixCollect(on: boolean): void;
  /** What was gathered since, per weight name (sums: n_mat * ne0, counts: n_mat), and clears it. */
  /** The statistics gathered; cleared unless `clear` is false (a copy while collection goes on). */
  imatrixTake(clear?: boolean): Record<string, { sums: Float32Array; counts: Float64Array }>;
  cancel(): void;
  close(): void;
  readonly nVocab: number;
  readonly nThreads: number;
  readonly kvBytesPerToken: number;
  /** The KV cache at the context for every sequence (sliding-window layers hold a ring of window + nBatch - 1 positions, twice; DeepSeek-V4's raw and compressor rows rings, its compressed rows one per block). */
  readonly kvCapacityBytes: number;
}

export interface AddonModel {
  Model: new (path: string, program: ModelProgram, params?: ModelParams) => NativeModel;
  /** The residency plan for params.ramBytes, from the file's tensor table alone (nothing is read). */
  planModel(path: string, program: ModelProgram, params?: ModelParams): NativeResidencyPlan;
  /** The KV cache at params.nCtx for params.nSeqMax sequences, as the runtime allocates it at most (sliding-window layers: their ring). */
  kvCacheBytes(program: ModelProgram, params?: ModelParams): number;
}

export interface AddonQuants {
  /** Quantizes floats to a ggml type id; returns the blocks. `threads` (default 1) quantizes slices of whole blocks in parallel: the same bytes. */
  quantize(type: number, data: Float32Array, threads?: number): Uint8Array;
  /** Dequantizes n values of a ggml type. */
  dequantize(type: number, data: Uint8Array, n: number): Float32Array;
  /**
   * n values of type `from` as type `to` (dequantize then quantize, slice by slice on `threads`
   * threads, default 1: the same bytes); F32 on either side is taken or given as it is.
   */
  /**
   * `imatrix`: importance values, one per column of the rows (its length is the row length; n a
   * multiple of it), as llama-quantize --imatrix gives for one tensor or expert: ggml's weighted
   * quantizers. IQ2_XXS, IQ2_XS and IQ1_S are written only with it.
   */
  convert(from: number, data: Uint8Array, n: number, to: number, threads?: number, imatrix?: Float32Array): Uint8Array;
  matmul(type: number, weights: Uint8Array, rows: number, cols: number, x: Float32Array, n: number): Float32Array;
}

/** A routing trace for the expert-cache simulator: one record per (token, layer). */
export interface CacheTrace {
  layer: Int32Array;
  /** Global decode step of each record (numbered across prompts in decoding order). */
  token: Int32Array;
  /** k expert ids per record, router order (highest probability first); -1 pads shorter records. */
  experts: Int32Array;
  /** k gating probabilities per record, or an empty array (then 1/k each). */
  probs: Float32Array;
  k: number;
}

export interface CacheSimResult {
  /** Expert accesses replayed (padding excluded). */
  accesses: number;
  /** Hits per policy name, as given. */
  hits: Record<string, number>;
}

export interface AddonCache {
  /**
   * Replays the trace through a demand-fetch cache of `slots` experts per layer, once per policy
   * ("lru", "lfu", "lrfu", "context", "belady", optionally with options: "lfu:half_life=16").
   * Throws KAIL_E_INVALID_ARG for a malformed trace or an unknown policy or option.
   */
  cacheSimulate(trace: CacheTrace, slots: number, policies: string[]): CacheSimResult;
  /** Policy names the simulator knows, the default ("context") among them. */
  cachePolicies(): string[];
  /** The policy the runtime cache uses by default. */
  cacheDefaultPolicy(): string;
}

export type NativeAddon = AddonSystem & AddonGguf & AddonModel & AddonQuants & AddonCache;
