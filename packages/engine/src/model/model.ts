import fs from 'node:fs';
import os from 'node:os';
import nodePath from 'node:path';
import type { ForwardBatch, GgufTensorInfo, GgufValue, ModelParams, ModelProgram, NativeGgufFile, NativeModel, NativeResidencyPlan } from '@kailstream/core-native';

import { EngineError, toEngineError } from '../errors';
import { DEFAULT_USAGE_DECAY, mergeUsage, modelIdentity, readUsageHistory, warmOrder, writeUsageHistory, type UsageHistory } from '../cache/usage-history';
import { native } from '../native';
import { Tokenizer } from '../tokenizer/tokenizer';
import { SUPPORTED_ARCHITECTURES, buildMtpProgram, buildProgram, defaultContext, isDiffusionArchitecture, isEncoderArchitecture } from './architectures';
import { mlaKvBytesPerToken, readMlaDims, trunkLayers } from './architectures/deepseek2';
import { eagle3Params, readEagle3D2t, withLayerInputs, type Eagle3Params } from './architectures/eagle3';
import { buildGemma4Assistant } from './architectures/gemma4-assistant';
import { dflashParams, type DflashParams } from './architectures/dflash';
import { resolveExpertPack, writeExpertPack } from './expert-pack';
import { formatBytes, parseByteSize, shareOfBytes } from './byte-size';
import { fileTypeName } from './file-type';
import { applyKvOverrides, formatKvOverride, type KvOverride } from './kv-override';
import { applyRopeOptions, describeRopeOptions, hasRopeOptions, ropeOptionsOnSlidingWindows, type RopeOptions } from './rope-options';
import { Metadata, readHParams, type HParams } from './hparams';
import { cgroupMemoryLimit, type CgroupMemoryLimit } from './memory-cgroup';
import { readRankHead, type RankHead } from './rank-head';
import { parseScaledFiles, readControlVectors, type ControlVectorSpec } from './control-vector';

/** KV cache types: llama.cpp's `-ctk`/`-ctv` list (Ollama's OLLAMA_KV_CACHE_TYPE takes f16, q8_0, q4_0). */
export type KvType = 'f16' | 'f32' | 'bf16' | 'q8_0' | 'q4_0' | 'q4_1' | 'iq4_nl' | 'q5_0' | 'q5_1';
export const KV_TYPES: readonly KvType[] = ['f16', 'f32', 'bf16', 'q8_0', 'q4_0', 'q4_1', 'iq4_nl', 'q5_0', 'q5_1'];
/** Per type: the native type id (KAIL_TYPE_*), values per block and bytes per block. */
const KV_TYPE_INFO: Record<KvType, { id: number; block: number; bytes: number }> = {
  f32: { id: 0, block: 1, bytes: 4 },
  f16: { id: 1, block: 1, bytes: 2 },
  bf16: { id: 30, block: 1, bytes: 2 },
  q8_0: { id: 8, block: 32, bytes: 34 },
  q4_0: { id: 2, block: 32, bytes: 18 },
  q4_1: { id: 3, block: 32, bytes: 20 },
  iq4_nl: { id: 20, block: 32, bytes: 18 },
  q5_0: { id: 6, block: 32, bytes: 22 },
  q5_1: { id: 7, block: 32, bytes: 24 },
};
/** Bytes of a cached row of `width` values (a quantized cache stores whole blocks: Q8_0 34 bytes per 32). */
export function kvRowBytes(kvType: KvType, width: number): number {
  const t = KV_TYPE_INFO[kvType];
  return (width / t.block) * t.bytes;
}
/** Bytes per cached value (Q4_0: 18 per 32). */
export function kvBytesPerValue(kvType: KvType): number {
  return KV_TYPE_INFO[kvType].bytes / KV_TYPE_INFO[kvType].block;
}
/**
 * LoRA adapters from llama.cpp's flags: --lora FNAME[,FNAME...] (scale 1) and --lora-scaled
 * FNAME:SCALE[,...], each repeatable; in that order.
 */
export function parseLoraFlags(lora: readonly string[], scaled: readonly string[]): { path: string; scale: number }[] {
  const out = lora.flatMap((v) => v.split(',')).filter((p) => p !== '').map((path) => ({ path, scale: 1 }));
  return [...out, ...parseScaledFiles(scaled.flatMap((v) => v.split(',')), (item) => `--lora-scaled takes FNAME:SCALE, got '${item}'`)];
}


/**
 * An encoder-decoder program's (T5's, ops tagged pass) KV bytes per position by role, as
 * core-native's kv_enc_dec_roles sorts its layers: the encoder's own self-attention rows (pass 1;
 * held while a prompt encodes, then freed), the cross-attention rows (one per prompt token, kept for
 * the decoder) and the decoder's self-attention rows (one per decoder position); with each role's
 * layer count. Null for any other program.
 */
export function kvBytesByRole(program: ModelProgram, kvType: KvType, kvTypeV: KvType): { encoder: number; cross: number; decoder: number; layers: { encoder: number; cross: number; decoder: number } } | null {
  if (!program.ops.some((o) => o.params?.pass !== undefined)) return null;
  const role = new Map<number, 'encoder' | 'cross' | 'decoder'>();
  for (const o of program.ops) {
    if (o.op !== 'attention' || typeof o.params?.layer !== 'number') continue;
    role.set(o.params.layer, o.params.pass === 1 ? (o.params.store_only ? 'cross' : 'encoder') : o.params.cross ? 'cross' : 'decoder');
  }
  const out = { encoder: 0, cross: 0, decoder: 0, layers: { encoder: 0, cross: 0, decoder: 0 } };
  for (const [l, r] of role) {
    out[r] += kvRowBytes(kvType, program.kvKWidth[l]) + kvRowBytes(kvTypeV, program.kvVWidth[l]);
    out.layers[r]++;
  }
  return out;
}

/** Cache bytes per position over every layer: K rows (and MLA latents) in kvType, V rows in kvTypeV. */
function kvBytesPerPosition(program: { kvKWidth: number[]; kvVWidth: number[] }, kvType: KvType, kvTypeV: KvType): number {
  return program.kvKWidth.reduce((a, w) => a + kvRowBytes(kvType, w), 0) + program.kvVWidth.reduce((a, w) => a + kvRowBytes(kvTypeV, w), 0);
}

export interface LoadModelOptions {
  /** Compute threads; 0 or undefined = physical cores. */
  threads?: number;
  /** Positions per sequence; default min(training context, 4096). */
  nCtx?: number;
  /** Concurrent sequences. Default 1. */
  nSeqMax?: number;
  /**
   * KV cache type. Default 'f16' (llama.cpp's default); 'q8_0' about halves it, 'q4_0' about
   * quarters it (llama.cpp's `-ctk q8_0 -ctv q8_0`, Ollama's OLLAMA_KV_CACHE_TYPE); the quantized
   * types need attention whose head dims (MLA: whose latent and latent row) are multiples of 32.
   */
  kvType?: KvType;
  /**
   * The V rows' type when it differs from kvType's (llama.cpp's `-ctk` and `-ctv` separately:
   * kvType is K's and, for MLA, the latent cache's; MLA stores no V). Default: kvType.
   */
  kvTypeV?: KvType;
  /**
   * LoRA adapters (llama.cpp's GGUF adapter files, `--lora` / `--lora-scaled`), applied in order,
   * each with its scale (default 1; the delta is scale x alpha / rank x B A x). Projections, routed
   * experts (a pair per expert) and the token embedding take them; pairs on routers or MLA's
   * up-projections are refused at load. The adapter files are mapped, not counted in a RAM budget.
   */
  lora?: { path: string; scale?: number }[];
  /**
   * Control vectors (llama.cpp's --control-vector FNAME / --control-vector-scaled FNAME SCALE),
   * summed and added to the residual stream after each layer's block that has a direction
   * (model/control-vector.ts), within controlVectorLayerRange (inclusive; default 1 .. every layer,
   * llama.cpp's --control-vector-layer-range).
   */
  controlVectors?: ControlVectorSpec[];
  controlVectorLayerRange?: [number, number];
  /**
   * llama.cpp's --swa-full: sliding-window layers keep every position instead of a ring of the
   * window plus one batch, so a context shift and a rollback of any length work on them (gpt-oss);
   * their KV cache grows with the context like the other layers'.
   */
  swaFull?: boolean;
  /**
   * llama.cpp's --override-kv: metadata values read in place of the file's (hyperparameters and
   * tokenizer keys alike; model/kv-override.ts), e.g. `<arch>.expert_used_count` as an int to
   * route each token to fewer experts. The summary, plan and tokenizer see them too.
   */
  kvOverrides?: KvOverride[];
  /**
   * llama.cpp's RoPE context flags (--rope-scaling, --rope-freq-base, --rope-freq-scale / --rope-scale,
   * --yarn-*), in place of the file's values (model/rope-options.ts): e.g. YaRN to extend a
   * context. Refused for a model with sliding-window layers.
   */
  rope?: RopeOptions;
  /**
   * In memory (no ramBytes): compute from the file's read-only mapping, as llama.cpp does by
   * default, instead of a copy of the tensor data in huge pages: a faster start and pages shared
   * with other processes, but slower passes where 4 KiB pages are costly (docs/benchmarks.md).
   */
  mmap?: boolean;
  /** Memory the load may plan against; default: memoryNow().availableBytes (MemAvailable, or a cgroup's headroom when lower). */
  memoryAvailableBytes?: number;
  /**
   * Without ramBytes: a MoE model whose weights and KV cache do not fit the memory available streams
   * its routed experts from storage within 80% of it (the hardware profile's share), when that
   * budget holds the resident part; only otherwise, or for a dense model, are the weights computed
   * from the file's mapping. EngineModel.autoRamBytes says which. false: always the mapping. Default true.
   */
  autoStream?: boolean;
  /**
   * RAM budget in bytes for the whole model: turns on expert streaming. Non-expert weights are
   * copied into RAM at load, routed experts are read from the file on demand (O_DIRECT) into a
   * cache of what the budget leaves after the resident weights, the KV cache at nCtx, the scratch
   * for nBatch tokens and ramReserveBytes. The load refuses with KAIL_E_BUDGET, naming the
   * numbers, before reading any weight when the resident part does not fit. Default: unset, every
   * weight is read through a mapping of the file.
   */
  ramBytes?: number;
  /** Part of ramBytes held back for the rest of this process (Node, tokenizer, heaps). Default DEFAULT_RAM_RESERVE_BYTES. */
  ramReserveBytes?: number;
  /**
   * The VRAM tier under the RAM expert cache (needs ramBytes): bytes of GPU memory holding copies
   * of experts read from storage, so a RAM miss is a device-to-host copy instead of a storage read.
   * Experts are computed on the CPU either way. The load refuses with KAIL_E_UNSUPPORTED without a
   * CUDA build or device. Default 0: none.
   */
  vramBytes?: number;
  /** The CUDA device of the VRAM tier. Default 0. */
  vramDevice?: number;
  /**
   * vramBytes is a default (the hardware profile's, or what other models leave of it), not asked
   * for: when it cannot hold one of the model's experts the model loads without a VRAM tier
   * (plan.vramCacheExperts 0, see vramTierDropped) instead of being refused.
   */
  vramOptional?: boolean;
  /** Most tokens per forward pass; with ramBytes, the scratch the budget plans for. Default 512. */
  nBatch?: number;
  /** Expert reads in flight at once (I/O threads, 1..64). Default 4. */
  ioThreads?: number;
  /** O_DIRECT expert reads; false: buffered reads + POSIX_FADV_DONTNEED. Default true. */
  directIo?: boolean;
  /**
   * Largest single expert read in bytes (rounded down to 4 KiB): each expert's reads (one per
   * gate/up/down slice, or one per pack block) are cut into parts that idle I/O threads take in
   * parallel. Default 0: uncut. `kail profile` chooses one for the device.
   */
  readBytes?: number;
  /** Read the next MoE layer's predicted experts ahead of its router. Default true. */
  prefetch?: boolean;
  /**
   * Expert cache eviction policy: 'lru', 'lfu', 'lrfu' or 'context', options after a colon
   * ('lfu:half_life=16'). Default: the native cache's default ('context').
   */
  cachePolicy?: string;
  /**
   * Directory of per-model usage histories (decayed expert activation counts, one small JSON file
   * per model keyed by modelIdentity()). When set, a streaming load warms the expert cache with the
   * historically hottest experts in the background (reads below demand priority, never evicting)
   * and seeds the eviction policy's frequency state; close() (or saveUsageHistory()) merges this
   * run's counts in. A missing or unreadable history starts cold (see usageHistoryNote). Default:
   * unset, no history. The CLI uses <data dir>/usage (USAGE_HISTORY_SUBDIR).
   */
  usageHistoryDir?: string;
  /** Weight of the stored history against this run when merging, 0..1. Default DEFAULT_USAGE_DECAY (0.5). */
  usageDecay?: number;
  /**
   * Read routed experts from this model's expert pack (`kail repack`, see expert-pack.ts) instead of
   * the GGUF: directories to scan for its *.kxp stripes, or the stripe files. Needs ramBytes. The
   * load fails with KAIL_E_IO naming what is missing when no complete pack of this file is found.
   */
  storage?: string[];
  /**
   * Load the file's multi-token-prediction block (DeepSeek-V3 NextN) as a draft model of its own
   * instead of the decoder (see buildDeepseek2Mtp): each forward row needs the target's hidden
   * state of the position before in ForwardBatch.embd. KAIL_E_INVALID_ARG when the file has none.
   */
  mtp?: boolean;
  /**
   * Make the program's hidden rows what the file's MTP block reads (llama.cpp's h_nextn) when that
   * differs from the normalized final state: deepseek4's final hyper-connection streams (hc x
   * n_embd per position). Load a target with it to draft with its MTP block (`mtp`); the logits
   * are the same, embeddings pooled from it are of those rows. Other architectures ignore it.
   */
  nextnHidden?: boolean;
  /**
   * Make the program's hidden rows the inputs of these blocks, concatenated per position (each
   * n_embd wide), instead of the normalized final state: what an EAGLE-3 or a DFlash draft reads
   * (draftLayersOf gives its layers). KAIL_E_INVALID_ARG for a layer outside the model.
   */
  extractLayers?: readonly number[];
  /**
   * A GGUF file whose token_embd.weight and output.weight stand in for this file's when it has
   * none: an EAGLE-3 draft's target (llama.cpp's ctx_other). Not with ramBytes.
   */
  embeddingsFrom?: string;
  /**
   * The target model whose KV cache a Gemma 4 assistant draft (`gemma4-assistant`) attends over
   * (llama.cpp's ctx_other): the draft keeps no cache, reads the target's token_embd, and each of
   * its rows sits at its sequence's target length. Required for such a draft, refused for any
   * other model; not with ramBytes. Load it with nSeqMax and nCtx at most the target's.
   */
  kvSource?: EngineModel;
}

/** The tensors a model may take from `LoadModelOptions.embeddingsFrom` when its file lacks them. */
const BORROWED_TENSORS = ['token_embd.weight', 'output.weight'];

/**
 * What a RAM budget holds with routed experts streaming from storage. An encoder-decoder model's
 * (t5) also says what runs once per prompt and what per generated token (its kvBytes is already by
 * role: the most a sequence holds, a whole context encoding).
 */
export type ResidencyPlan = NativeResidencyPlan & {
  encoderDecoder?: EncoderDecoderWeights & { kvEncoderBytesPerToken: number; kvCrossBytesPerToken: number; kvDecoderBytesPerToken: number };
};

/** Share of the available memory a default RAM budget takes: the hardware profile's, and the load's own (autoStream). */
export const DEFAULT_RAM_SHARE = 0.8;

/** Part of a RAM budget held back for the process itself (Node runtime, tokenizer, JS heap) by default. */
export const DEFAULT_RAM_RESERVE_BYTES = 256 * 2 ** 20;

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;

/** Memory a load may plan against now, and the memory cgroup limit over this process, if any. */
export interface MemoryNow {
  /** MemAvailable (/proc/meminfo), or less where the cgroup leaves less room (its headroom). */
  availableBytes: number;
  cgroup: CgroupMemoryLimit | null;
}

export function memoryNow(): MemoryNow {
  let bytes = os.freemem();
  try {
    const m = /^MemAvailable:\s+(\d+) kB/m.exec(fs.readFileSync('/proc/meminfo', 'utf8'));
    if (m) bytes = Number(m[1]) * 1024;
  } catch {
    // not Linux
  }
  const cgroup = cgroupMemoryLimit();
  return { availableBytes: cgroup ? Math.min(bytes, cgroup.headroomBytes) : bytes, cgroup };
}

/**
 * A byte size (8G, 512M, 1.5GiB, 4096), or a share of `of()` bytes ("80%"), rounded down to a MiB:
 * how --ram and --vram take their budgets. `what` names that total in messages.
 */
function parseBudget(text: string, of: () => number, what: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*%\s*$/.exec(text);
  if (!m) {
    try {
      return parseByteSize(text);
    } catch {
      throw new EngineError('KAIL_E_INVALID_ARG', `'${text}' is not a byte size (e.g. 8G, 512M, 1.5GiB, 4096) or a share of ${what} (e.g. 80%)`);
    }
  }
  const pct = Number(m[1]);
  if (!(pct > 0 && pct <= 100)) throw new EngineError('KAIL_E_INVALID_ARG', `'${text}': a share of ${what} must be above 0% and at most 100%`);
  const bytes = shareOfBytes(of(), pct / 100);
  if (bytes <= 0) throw new EngineError('KAIL_E_INVALID_ARG', `'${text}' of ${what} is less than 1 MiB`);
  return bytes;
}

/** The memory cgroup when it, not MemAvailable, is what limits `now` (to name it in messages); else null. */
export function limitingCgroup(now: MemoryNow): CgroupMemoryLimit | null {
  return now.cgroup && now.cgroup.headroomBytes <= now.availableBytes ? now.cgroup : null;
}

/**
 * The RAM budget when neither a flag nor a hardware profile sets one: DEFAULT_RAM_SHARE of the
 * memory available now, which a load without either streams a MoE model within when it does not
 * fit (autoStream), and which plans take; with the reason, naming a cgroup that limits it.
 */
export function defaultRamBudget(now: MemoryNow = memoryNow()): { bytes: number; why: string } {
  const c = limitingCgroup(now);
  return {
    bytes: shareOfBytes(now.availableBytes, DEFAULT_RAM_SHARE),
    why: `${Math.round(100 * DEFAULT_RAM_SHARE)}% of the ${formatBytes(now.availableBytes)} available now` + (c ? ` (the memory cgroup ${c.dir}'s room)` : ''),
  };
}

/**
 * A RAM budget as a flag gives it: a byte size or a share of the memory available now ("80%": of
 * MemAvailable, or of a memory cgroup's headroom when lower), as vLLM's --gpu-memory-utilization
 * takes a share of its device.
 */
export function parseRamBudget(text: string, now: () => MemoryNow = memoryNow): number {
  return parseBudget(text, () => now().availableBytes, 'the memory available');
}

/**
 * A VRAM budget as a flag gives it: a byte size or a share of the free memory of CUDA device 0
 * (the VRAM tier's) now ("90%"); a share without a device is an error saying so.
 */
export function parseVramBudget(text: string, devices: () => { freeBytes: number }[] = () => native().systemInfo().cudaDevices): number {
  return parseBudget(
    text,
    () => {
      const d = devices()[0];
      if (!d) throw new EngineError('KAIL_E_UNSUPPORTED', `'${text}': a share of GPU memory needs a CUDA device (none found, or no CUDA backend in this build)`);
      return d.freeBytes;
    },
    "GPU 0's free memory",
  );
}

/** What `kail inspect` and the model list show about a file, read from its metadata alone. */
export interface ModelSummary {
  path: string;
  architecture: string;
  fileBytes: number;
  parameterCount: number;
  layerCount: number;
  contextLength: number;
  expertCount: number;
  expertUsedCount: number;
  /** Bytes per type name. */
  tensorTypeBytes: Record<string, number>;
  /** general.file_type as llama-quantize names it ("Q4_K_M"); '' when the file has none. */
  fileType: string;
  /** Bytes of routed expert tensors (ffn_*_exps, and GroveMoE's chunk experts ffn_*_chexps). */
  expertBytes: number;
  /** Bytes of everything else (resident). */
  residentBytes: number;
  /** Bytes of one expert of one layer (gate+up+down), 0 for dense models. */
  bytesPerExpert: number;
  /** Weight bytes read per token: resident + experts used per layer (an encoder-decoder's: per generated token, the decoder's). */
  bytesPerToken: number;
  /** An encoder-decoder model (t5): its weights by what reads them (absent for any other model). */
  encoderDecoder?: EncoderDecoderWeights;
}

/**
 * An encoder-decoder model's weights by pass: the encoder runs once over a prompt, the decoder once
 * per generated token (each tensor a pass names counted once, whole: token_embd in both).
 */
export interface EncoderDecoderWeights {
  encoderLayers: number;
  decoderLayers: number;
  /** Read once per prompt: token_embd, the encoder's blocks and output norm, each decoder block's cross-attention K and V projections. */
  promptWeightBytes: number;
  /** Read per generated token: token_embd, the decoder's blocks (but the cross K/V projections), its output norm and head. */
  tokenWeightBytes: number;
}

/** The weight split of an encoder-decoder program (ops tagged pass 1 and 2); null for any other. */
function encoderDecoderWeights(program: ModelProgram, file: NativeGgufFile): EncoderDecoderWeights | null {
  const roles = kvBytesByRole(program, 'f32', 'f32');
  if (!roles) return null;
  const pass = (n: number) => programWeightBytes({ ...program, ops: program.ops.filter((o) => o.params?.pass === n) }, file);
  return { encoderLayers: roles.layers.encoder, decoderLayers: roles.layers.decoder, promptWeightBytes: pass(1), tokenWeightBytes: pass(2) };
}

/** summarize's encoder-decoder split for an architecture that has one (t5), from its program; null when the file builds none. */
function summaryEncoderDecoder(file: NativeGgufFile, md: Metadata): EncoderDecoderWeights | null {
  if (md.arch !== 't5') return null;
  try {
    const tensors = new Map<string, GgufTensorInfo>(file.tensors.map((t) => [t.name, t]));
    return encoderDecoderWeights(buildProgram(readHParams(md, tensors), tensors), file);
  } catch {
    // (A file the engine cannot build: its summary as any other's.)
    return null;
  }
}

export const isExpertTensor = (name: string) => /\.ffn_(gate|up|down|gate_up)_(ch)?exps\./.test(name);

/**
 * For each MoE layer the routing counts use (a `moe` op's moe_layer), its layer in the expert
 * stream (the `moe` ops in program order). They differ where a `moe` op is not counted (GroveMoE's
 * chunk experts stream as layers of their own).
 */
export function moeStreamLayers(program: ModelProgram): number[] {
  const out: number[] = [];
  let s = 0;
  for (const op of program.ops) {
    if (op.op !== 'moe') continue;
    const ml = op.params?.moe_layer;
    if (typeof ml === 'number' && ml >= 0) out[ml] = s;
    s++;
  }
  return out;
}

/** `metadata`: the file's with a load's overrides (applyKvOverrides); default the file's. */
export function summarize(file: NativeGgufFile, metadata: Record<string, GgufValue> = file.metadata): ModelSummary {
  const arch = String(metadata['general.architecture'] ?? 'unknown');
  const md = new Metadata(metadata, arch);
  let params = 0;
  let expertBytes = 0;
  let residentBytes = 0;
  const byType: Record<string, number> = {};
  for (const t of file.tensors) {
    params += t.dims.reduce((a, b) => a * b, 1);
    byType[t.typeName] = (byType[t.typeName] ?? 0) + t.nbytes;
    if (isExpertTensor(t.name)) expertBytes += t.nbytes;
    else residentBytes += t.nbytes;
  }
  const nExpert = md.num('expert_count', 0);
  const nUsed = md.num('expert_used_count', 0);
  const nLayer = md.num('block_count', 0);
  const moeLayers = new Set(file.tensors.filter((t) => isExpertTensor(t.name)).map((t) => t.name.split('.')[1])).size;
  const bytesPerExpert = nExpert && moeLayers ? expertBytes / moeLayers / nExpert : 0;
  const encDec = summaryEncoderDecoder(file, md);
  return {
    path: file.path,
    architecture: arch,
    fileBytes: file.fileSize,
    parameterCount: params,
    layerCount: nLayer,
    contextLength: md.num('context_length', 0),
    expertCount: nExpert,
    expertUsedCount: nUsed,
    tensorTypeBytes: byType,
    fileType: typeof metadata['general.file_type'] === 'number' ? fileTypeName(metadata['general.file_type']) : '',
    expertBytes,
    residentBytes,
    bytesPerExpert,
    bytesPerToken: encDec ? encDec.tokenWeightBytes : residentBytes + bytesPerExpert * nUsed * moeLayers,
    ...(encDec ? { encoderDecoder: encDec } : {}),
  };
}

/**
 * Weight bytes one token reads through `program`: every tensor it names once, routed expert
 * tensors at the share the used experts take. For a program that runs part of a file (the MTP block).
 */
function programBytesPerToken(program: ModelProgram, file: NativeGgufFile, s: ModelSummary): number {
  return programWeightBytes(program, file, (name, b) => (isExpertTensor(name) && s.expertCount ? (b * s.expertUsedCount) / s.expertCount : b));
}

/** Bytes of the tensors the program names (each once), each counted through `count` (default: whole). */
function programWeightBytes(program: ModelProgram, file: NativeGgufFile, count: (name: string, bytes: number) => number = (_, b) => b): number {
  const bytes = new Map(file.tensors.map((t) => [t.name, t.nbytes]));
  const seen = new Set<string>();
  let total = 0;
  for (const op of program.ops)
    for (const name of Object.values(op.weights ?? {})) {
      if (seen.has(name)) continue;
      seen.add(name);
      total += count(name, bytes.get(name) ?? 0);
    }
  return total;
}

/**
 * The tokenizer and the weights must agree on the vocabulary, as llama.cpp requires (token_embd and
 * output are [n_embd, n_vocab] with n_vocab the tokenizer's): a token the tokenizer produces past
 * the embedding would fail only when a prompt contains it, and one past the head is never sampled.
 */
function checkVocabulary(tokenizer: Tokenizer, hp: HParams, program: ModelProgram, d2t: Int32Array | null = null): void {
  // (An encoder has no output head: its "logits" are its hidden rows. An EAGLE-3 draft's head with a
  // d2t map gives logits over its draft vocabulary, which d2t maps into the tokenizer's.)
  const nHead = isEncoderArchitecture(hp.arch) || d2t ? hp.nVocab : program.buffers[program.logits]?.width;
  if (tokenizer.nTokens !== hp.nVocab || tokenizer.nTokens !== nHead)
    throw new EngineError(
      'KAIL_E_BAD_MODEL',
      `the tokenizer has ${tokenizer.nTokens} tokens (tokenizer.ggml.tokens), but the model's embedding has ${hp.nVocab} rows and its output head ${nHead}`,
    );
}

/**
 * The target layers an EAGLE-3 draft file reads (load its target with them as `extractLayers`);
 * null when the file is not an EAGLE-3 draft.
 */
export function eagle3LayersOf(path: string): number[] | null {
  return targetLayersOf(path, 'eagle3');
}

/**
 * The target layers a draft file that reads its target's hidden states takes (an EAGLE-3 or a
 * DFlash draft: load its target with them as `extractLayers`); null for any other file.
 */
export function draftLayersOf(path: string): number[] | null {
  return targetLayersOf(path, 'eagle3', 'dflash');
}

/** The target layers of a file of one of these draft architectures (its metadata read once), else null. */
function targetLayersOf(path: string, ...archs: ('eagle3' | 'dflash')[]): number[] | null {
  const file = openGgufMetadata(path);
  try {
    const arch = file.metadata['general.architecture'];
    if (arch !== 'eagle3' && arch !== 'dflash') return null;
    if (!archs.includes(arch)) return null;
    const md = new Metadata(file.metadata, arch);
    if (arch === 'eagle3') return eagle3Params({ arch, meta: md } as HParams).targetLayers;
    // (nVocab only bounds the mask token here; the load checks it against the vocabulary.)
    return dflashParams({ arch, meta: md, nVocab: Number.MAX_SAFE_INTEGER } as HParams).targetLayers;
  } finally {
    file.close();
  }
}

/** Whether a file is a Gemma 4 assistant draft (`gemma4-assistant`), which loads over its target's cache (LoadModelOptions.kvSource). */
export function isGemma4AssistantFile(path: string): boolean {
  const file = openGgufMetadata(path);
  try {
    return file.metadata['general.architecture'] === 'gemma4-assistant';
  } finally {
    file.close();
  }
}

/** Opens a GGUF file's metadata and tensor table (no weights mapped). */
export function openGgufMetadata(path: string): NativeGgufFile {
  if (!fs.existsSync(path)) throw new EngineError('KAIL_E_IO', `model file not found: ${path}`);
  try {
    return native().openGguf(path, { mapData: false });
  } catch (e) {
    throw toEngineError(e);
  }
}

interface Prepared {
  md: Metadata;
  hp: HParams;
  program: ModelProgram;
  nCtx: number;
  nSeqMax: number;
  nBatch: number;
  params: ModelParams;
  /** The cache types in effect (an encoder's default is F32). */
  kvType: KvType;
  kvTypeV: KvType;
}

/** The native parameters of the load's control vectors (none without); their size checked against the model's. */
function controlVectorParams(opts: LoadModelOptions, hp: HParams): Pick<ModelParams, 'cvec' | 'cvecNEmbd' | 'cvecStart' | 'cvecEnd'> {
  if (!opts.controlVectors?.length) return {};
  const { data, nEmbd } = readControlVectors(opts.controlVectors);
  if (nEmbd !== hp.nEmbd) throw new EngineError('KAIL_E_INVALID_ARG', `control vector n_embd ${nEmbd} does not match the model's ${hp.nEmbd}`);
  const [start, end] = opts.controlVectorLayerRange ?? [0, 0];
  if (!Number.isInteger(start) || !Number.isInteger(end)) throw new EngineError('KAIL_E_INVALID_ARG', `the control vector layer range must be two integers, got ${start} ${end}`);
  // llama.cpp's defaults: a start or end of 0 or less means 1 and the layer count.
  return { cvec: data, cvecNEmbd: nEmbd, cvecStart: start <= 0 ? 1 : start, cvecEnd: end <= 0 ? hp.nLayer : end };
}

/**
 * llama.cpp's --cache-type / -ctk / -ctv as load options: K's type is -ctk, else --cache-type; V's
 * is -ctv, else --cache-type, else f16 when only -ctk is given (llama.cpp's default V). Unset
 * stays unset: the load's default (f16, or f32 for an encoder).
 */
export function kvTypesFromFlags(all?: KvType, k?: KvType, v?: KvType): { kvType?: KvType; kvTypeV?: KvType } {
  return { kvType: k ?? all, kvTypeV: v ?? all ?? (k ? 'f16' : undefined) };
}

function kvTypeId(t: KvType | undefined): number {
  if (t === undefined) return KV_TYPE_INFO.f16.id;
  if (!Object.hasOwn(KV_TYPE_INFO, t)) throw new EngineError('KAIL_E_INVALID_ARG', `KV cache type must be ${KV_TYPES.join(', ')}, got '${t}'`);
  return KV_TYPE_INFO[t].id;
}

/**
 * A load's error, saying which overrides were in play when the model was found wrong: the file may
 * be fine and an override what does not fit it (a head count its tensors do not have).
 */
function withOverrides(e: unknown, opts: LoadModelOptions): unknown {
  if (!opts.kvOverrides?.length) return e;
  const err = toEngineError(e);
  if (err.code !== 'KAIL_E_BAD_MODEL' || err.message.includes('(with --override-kv ')) return err;
  return new EngineError(err.code, `${err.message} (with --override-kv ${opts.kvOverrides.map(formatKvOverride).join(',')})`);
}

/** EngineModel.computeKey of a load. */
function computeKey(opts: LoadModelOptions, lora: readonly { path: string }[]): string {
  const parts: string[] = [];
  if (opts.kvOverrides?.length) parts.push(`override-kv ${opts.kvOverrides.map(formatKvOverride).join(',')}`);
  const rope = describeRopeOptions(opts.rope);
  if (rope) parts.push(rope);
  if (opts.controlVectors?.length) {
    const range = opts.controlVectorLayerRange ?? [0, 0];
    parts.push(`control-vector ${opts.controlVectors.map((c) => `${nodePath.resolve(c.path)}:${c.scale ?? 1}`).join(',')} layers ${range.join('-')}`);
  }
  if (lora.length) parts.push(`lora ${lora.map((l) => l.path).join(',')}`);
  if (opts.embeddingsFrom) parts.push(`embeddings from ${nodePath.resolve(opts.embeddingsFrom)}`);
  return parts.join('; ');
}

// Architecture checks, hyperparameters, program and the native parameters: what both planning
// and loading need, from the metadata alone.
function prepare(path: string, file: NativeGgufFile, opts: LoadModelOptions): Prepared {
  const meta = applyKvOverrides(file.metadata, opts.kvOverrides);
  const arch = meta['general.architecture'];
  if (typeof arch !== 'string') throw new EngineError('KAIL_E_BAD_MODEL', `${path}: metadata 'general.architecture' is missing`);
  if (!SUPPORTED_ARCHITECTURES.includes(arch))
    throw new EngineError('KAIL_E_UNSUPPORTED', `architecture '${arch}' is not supported; supported: ${SUPPORTED_ARCHITECTURES.join(', ')}`);
  const md = new Metadata(meta, arch);
  const tensors = new Map<string, GgufTensorInfo>(file.tensors.map((t) => [t.name, t]));
  if (opts.embeddingsFrom) {
    if (opts.ramBytes) throw new EngineError('KAIL_E_INVALID_ARG', 'embeddingsFrom (tensors from another file) cannot go with a RAM budget (expert streaming)');
    const other = openGgufMetadata(opts.embeddingsFrom);
    try {
      // (A DFlash draft with a token_embd of its own and no output ties its head to it, as llama.cpp's loader.)
      const tied = arch === 'dflash' && tensors.has('token_embd.weight');
      for (const t of other.tensors) if (BORROWED_TENSORS.includes(t.name) && !tensors.has(t.name) && !(tied && t.name === 'output.weight')) tensors.set(t.name, t);
    } finally {
      other.close();
    }
  }
  if (opts.kvSource && arch !== 'gemma4-assistant')
    throw new EngineError('KAIL_E_INVALID_ARG', `${path}: kvSource (another model's KV cache) is for a Gemma 4 assistant draft; this model is '${arch}'`);
  if (opts.kvSource && opts.ramBytes) throw new EngineError('KAIL_E_INVALID_ARG', 'a draft over another model\'s KV cache (kvSource) cannot go with a RAM budget (expert streaming)');
  const fileHp = readHParams(md, tensors);
  const hp = applyRopeOptions(fileHp, opts.rope);
  const nCtx = Math.max(1, Math.min(opts.nCtx ?? defaultContext(hp), 1 << 20));
  const build = (h: HParams) => {
    const prog = opts.mtp
      ? buildMtpProgram(h, tensors)
      : h.arch === 'gemma4-assistant'
        ? buildGemma4Assistant(h, tensors, opts.kvSource && { hparams: opts.kvSource.hparams, program: opts.kvSource.program, path: opts.kvSource.path })
        : buildProgram(h, tensors, { nCtxSeq: nCtx, ...(opts.nextnHidden ? { nextnHidden: true } : {}) });
    return opts.extractLayers ? withLayerInputs(prog, opts.extractLayers, h.nLayer, h.nEmbd, h.arch) : prog;
  };
  // (With RoPE options, sliding-window layers take them or keep the file's, as llama.cpp's architecture does.)
  const program = hasRopeOptions(opts.rope) ? ropeOptionsOnSlidingWindows(build(hp), () => build(fileHp), hp.arch) : build(hp);
  const nSeqMax = Math.max(1, opts.nSeqMax ?? 1);
  // (A diffusion LM, like an encoder, computes its whole canvas in one non-causal pass.)
  const encoder = isEncoderArchitecture(hp.arch) || isDiffusionArchitecture(hp.arch);
  // (Decoders with learned positions too, GPT-2's and StarCoder's: the program embeds position_embd's rows.)
  const learnedPositions = program.ops.some((o) => o.op === 'embed' && o.params?.index === 1);
  if ((encoder || learnedPositions) && tensors.has('position_embd.weight')) {
    const nPos = tensors.get('position_embd.weight')!.dims[1];
    if (nCtx > nPos) throw new EngineError('KAIL_E_INVALID_ARG', `${path}: a context of ${nCtx} is longer than the model's ${nPos} learned positions; use --ctx ${nPos} or less`);
  }
  // An encoder computes a sequence in one pass (non-causal attention), so by default a pass holds a
  // whole context, as llama-server wants its physical batch to hold an embedding's input.
  // (A diffusion model's canvas is one pass too, at most llama-diffusion-cli's default ubatch of 512
  // unless a batch is asked for: its logits rows are the canvas times the vocabulary.)
  const nBatch = Math.max(1, Math.floor(opts.nBatch ?? (isDiffusionArchitecture(hp.arch) ? Math.min(nCtx, 512) : encoder ? nCtx : 512)));
  // An encoder's K and V never outlive the pass (llama.cpp keeps no cache for it): F32 by default,
  // so they are the exact rows it attends over.
  if (encoder && opts.kvType === undefined) opts = { ...opts, kvType: 'f32' };
  if (opts.ramBytes !== undefined && !(Number.isSafeInteger(opts.ramBytes) && opts.ramBytes > 0))
    throw new EngineError('KAIL_E_INVALID_ARG', `ramBytes must be a positive integer, got ${opts.ramBytes}`);
  if (opts.vramBytes !== undefined && !(Number.isSafeInteger(opts.vramBytes) && opts.vramBytes >= 0))
    throw new EngineError('KAIL_E_INVALID_ARG', `vramBytes must be a non-negative integer, got ${opts.vramBytes}`);
  if (opts.vramDevice !== undefined && !(Number.isSafeInteger(opts.vramDevice) && opts.vramDevice >= 0))
    throw new EngineError('KAIL_E_INVALID_ARG', `vramDevice must be a non-negative integer, got ${opts.vramDevice}`);
  if (opts.vramBytes && !opts.ramBytes)
    throw new EngineError('KAIL_E_INVALID_ARG', 'a VRAM budget (vramBytes / --vram) needs a RAM budget (ramBytes / --ram): the VRAM tier caches experts streamed from storage');
  const params: ModelParams = {
    threads: opts.threads ?? 0,
    kvType: kvTypeId(opts.kvType),
    kvTypeV: kvTypeId(opts.kvTypeV ?? opts.kvType),
    ...(opts.lora?.length ? { lora: opts.lora.map((l) => ({ path: nodePath.resolve(l.path), scale: l.scale ?? 1 })) } : {}),
    ...(opts.embeddingsFrom ? { weightFiles: [nodePath.resolve(opts.embeddingsFrom)] } : {}),
    ...(opts.kvSource ? { kvSource: opts.kvSource.runtime } : {}),
    ...controlVectorParams(opts, hp),
    ...(opts.swaFull ? { swaFull: true } : {}),
    ...(opts.mmap ? { mmap: true } : {}),
    nCtx,
    nSeqMax,
    nBatch,
    ramBytes: opts.ramBytes ?? 0,
    ramReserveBytes: opts.ramBytes ? (opts.ramReserveBytes ?? DEFAULT_RAM_RESERVE_BYTES) : 0,
    vramBytes: opts.vramBytes ?? 0,
    vramDevice: opts.vramDevice ?? 0,
    ...(opts.vramOptional ? { vramOptional: true } : {}),
    ioThreads: opts.ioThreads ?? 4,
    directIo: opts.directIo ?? true,
    prefetch: opts.prefetch ?? true,
    cachePolicy: opts.cachePolicy,
    readBytes: opts.readBytes ?? 0,
  };
  if (opts.storage?.length) {
    if (!opts.ramBytes) throw new EngineError('KAIL_E_INVALID_ARG', 'storage (an expert pack) needs a RAM budget (ramBytes / --ram): experts stream only then');
    params.expertPack = resolveExpertPack(path, program, file, opts.storage);
  }
  return { md, hp, program, nCtx, nSeqMax, nBatch, params, kvType: opts.kvType ?? 'f16', kvTypeV: opts.kvTypeV ?? opts.kvType ?? 'f16' };
}

/**
 * Writes an expert pack of `path` (`kail repack`): one stripe file named `name` (*.kxp) in each
 * storage directory; returns their paths. The GGUF is not changed and stays needed.
 */
export function repackModel(path: string, name: string, storage: string[], log?: (line: string) => void): string[] {
  const file = openGgufMetadata(path);
  try {
    const p = prepare(path, file, {});
    return writeExpertPack(path, p.program, file, { name, storage, log });
  } catch (e) {
    throw toEngineError(e);
  } finally {
    file.close();
  }
}

/** KV cache bytes per token of a file, and for MLA models the naive per-head cache it replaces. */
export interface KvCacheReport {
  /** K rows' (and MLA latents') type, and V rows'. */
  kvType: KvType;
  kvTypeV: KvType;
  /** What this engine's cache holds per token over all layers. */
  bytesPerToken: number;
  /** Recurrent layers (Qwen3.5's delta nets): the F32 state every sequence keeps whatever its length; 0 without them. */
  recurrentBytesPerSequence: number;
  /**
   * deepseek4: its cache's rings (the window's raw rows and the compressors' F32 rows), bytes per
   * sequence whatever the context (at the load's nBatch); bytesPerToken is then what grows with
   * the context: the compressed rows and indexer keys, one row per block of positions.
   */
  ringBytesPerSequence?: number;
  /** deepseek2: the latent cache against a per-head cache (see mlaKvBytesPerToken). */
  mla?: ReturnType<typeof mlaKvBytesPerToken> & { kvLora: number; qkRope: number; nHead: number };
  /**
   * An encoder-decoder model (t5): bytesPerToken is then the decoder's self-attention rows per
   * generated token; per prompt token the cache keeps the cross-attention rows, and holds the
   * encoder's own rows only while the prompt encodes (kvBytesByRole). Prompt and generated tokens
   * share the context.
   */
  encoderDecoder?: { crossBytesPerPromptToken: number; encoderBytesPerPromptToken: number; encoderLayers: number; crossLayers: number; decoderLayers: number };
}

/** The KV cache an open file needs per token (`kail inspect`), from its metadata alone. */
export function kvCacheReport(file: NativeGgufFile, kvTypeIn?: KvType, kvTypeVIn?: KvType): KvCacheReport {
  // A Gemma 4 assistant draft keeps no KV cache: it attends over its target's (LoadModelOptions.kvSource).
  if (file.metadata['general.architecture'] === 'gemma4-assistant') {
    const kvType = kvTypeIn ?? 'f16';
    return { kvType, kvTypeV: kvTypeVIn ?? kvType, bytesPerToken: 0, recurrentBytesPerSequence: 0 };
  }
  // A DFlash draft that takes its target's token_embd (it cannot be built alone): a K and a V row of
  // head_count_kv x key_length per block, from its metadata.
  if (file.metadata['general.architecture'] === 'dflash' && !file.tensors.some((t) => t.name === 'token_embd.weight')) {
    const kvType = kvTypeIn ?? 'f16';
    const kvTypeV = kvTypeVIn ?? kvType;
    const hp = readHParams(new Metadata(file.metadata, 'dflash'), new Map(file.tensors.map((t) => [t.name, t])));
    dflashParams(hp);
    const widths = Array.from({ length: hp.nLayer }, (_, il) => hp.nHeadKv[il] * hp.headDimK);
    return { kvType, kvTypeV, bytesPerToken: kvBytesPerPosition({ kvKWidth: widths, kvVWidth: widths }, kvType, kvTypeV), recurrentBytesPerSequence: 0 };
  }
  try {
    // (Unset: the load's default, f16, or f32 for an encoder.)
    const { hp, program, params, kvType, kvTypeV } = prepare(file.path, file, { kvType: kvTypeIn, kvTypeV: kvTypeVIn ?? kvTypeIn });
    // Refuses a cache type the model's attention cannot take (as a load would).
    native().kvCacheBytes(program, params);
    // Bytes per cached value (Q8_0: 34 per block of 32), for the MLA comparison below.
    const e = kvBytesPerValue(kvType);
    const bytesPerToken = kvBytesPerPosition(program, kvType, kvTypeV);
    const out: KvCacheReport = { kvType, kvTypeV, bytesPerToken, recurrentBytesPerSequence: (program.rsWidth ?? []).reduce((a, w) => a + 4 * w, 0) };
    const roles = kvBytesByRole(program, kvType, kvTypeV);
    if (roles) {
      out.bytesPerToken = roles.decoder;
      out.encoderDecoder = { crossBytesPerPromptToken: roles.cross, encoderBytesPerPromptToken: roles.encoder, encoderLayers: roles.layers.encoder, crossLayers: roles.layers.cross, decoderLayers: roles.layers.decoder };
    }
    if (hp.arch === 'deepseek4') {
      // The runtime's layout (kv_packed_layouts) from the native sizing: past every ring, the growth
      // of a span of whole blocks is the per-token share; what remains at that context the rings.
      const at = (nCtx: number) => native().kvCacheBytes(program, { ...params, nCtx, nSeqMax: 1 });
      const base = 1 << 20;
      const span = 1 << 16;
      out.bytesPerToken = (at(base + span) - at(base)) / span;
      out.ringBytesPerSequence = at(base) - base * out.bytesPerToken;
    }
    if (hp.arch === 'deepseek2') {
      const d = readMlaDims(hp);
      const shape = { nLayer: trunkLayers(hp), nHead: hp.nHead[0], kvLora: d.kvLora, qkNope: d.qkNope, qkRope: d.qkRope, vHead: d.vHead, elemBytes: e };
      out.mla = { ...mlaKvBytesPerToken(shape), kvLora: d.kvLora, qkRope: d.qkRope, nHead: shape.nHead };
    }
    return out;
  } catch (e) {
    throw toEngineError(e);
  }
}

/**
 * The residency plan for opts.ramBytes (required): resident bytes, KV bytes at the context, expert
 * bytes, cache capacity in experts per layer and cold-cache bytes read per token, from the file's
 * tensor table alone. `fits` false means a load with this budget would be refused (see `message`).
 */
export function planModel(path: string, opts: LoadModelOptions & { ramBytes: number }): ResidencyPlan {
  const file = openGgufMetadata(path);
  try {
    const p = prepare(path, file, opts);
    const plan: ResidencyPlan = native().planModel(path, p.program, p.params);
    const roles = kvBytesByRole(p.program, p.kvType, p.kvTypeV);
    const weights = encoderDecoderWeights(p.program, file);
    if (roles && weights) plan.encoderDecoder = { ...weights, kvEncoderBytesPerToken: roles.encoder, kvCrossBytesPerToken: roles.cross, kvDecoderBytesPerToken: roles.decoder };
    return plan;
  } catch (e) {
    throw withOverrides(e, opts);
  } finally {
    file.close();
  }
}

/** Whether a model streaming its experts was given a VRAM budget (vramOptional) too small for one expert, so has no tier. */
export function vramTierDropped(model: EngineModel): boolean {
  const p = model.plan;
  return !!p && p.vramBytes > 0 && p.nMoeLayers > 0 && p.vramCacheExperts === 0;
}

interface UsageState {
  dir: string;
  key: string;
  decay: number;
  /** Counts and tokens already merged into the file by this model. */
  savedCounts: Float64Array;
  savedTokens: number;
}

/** A loaded model: hyperparameters, tokenizer and the native runtime with its KV cache. */
export class EngineModel {
  private busy: Promise<unknown> = Promise.resolve();
  private usage: UsageState | null = null;
  /** What became of the usage history at load: warmed from it, none yet, or why it was ignored. '' without a history dir. */
  usageHistoryNote = '';
  /** The LoRA adapters (paths resolved) with their default scales (the load's, until setDefaultLoraScales). */
  loraAdapters: readonly { path: string; scale: number }[] = [];
  /** A reranker's classification head (pooling rank and cls.output: model/rank-head.ts), else null. */
  rankHead: RankHead | null = null;
  /**
   * An EAGLE-3 draft's binding to its target (the target layers it reads, their width, and the d2t
   * map of its draft vocabulary when it has one); null for any other model.
   */
  eagle3: (Eagle3Params & { d2t: Int32Array | null }) | null = null;
  /** A DFlash draft's keys (the target layers it reads, its block size, mask token, causality) and its d2t map when it has one; null for any other model. */
  dflash: (DflashParams & { d2t: Int32Array | null }) | null = null;
  /** The blocks whose inputs the program's hidden rows hold (LoadModelOptions.extractLayers); null when they are the usual hidden rows. */
  extractLayers: readonly number[] | null = null;
  /** Loaded with LoadModelOptions.nextnHidden: where that changed the hidden rows (wider than n_embd), they are what the MTP block reads, not embeddings. */
  nextnHidden = false;
  /** LoadModelOptions.embeddingsFrom, resolved; null when not given. */
  embeddingsFrom: string | null = null;
  /** A Gemma 4 assistant draft's target (LoadModelOptions.kvSource), whose KV cache it reads; null for any other model. */
  kvSource: EngineModel | null = null;
  /**
   * In memory, whether the weights are computed from the file's mapping: asked for (mmap), or
   * chosen because a copy would not have fit the memory available at load. False when they were
   * copied into huge pages, and when experts stream.
   */
  weightsMapped = false;
  /** The RAM budget the load chose itself (autoStream) because the model did not fit in memory; 0 when it did not choose one. */
  autoRamBytes = 0;
  /** The cache types the model was loaded with (an encoder's default is F32, a decoder's F16). */
  kvType: KvType = 'f16';
  kvTypeV: KvType = 'f16';
  /**
   * What the load changed about the computation besides the file, LoRA scales and cache types: the
   * metadata overrides, the control vectors (files, scales, layer range) and the LoRA adapters'
   * files, as one string ('' for none). A saved KV cache (slot file, prompt cache) holds rows
   * computed under it and is refused under another.
   */
  computeKey = '';

  private constructor(
    readonly path: string,
    readonly hparams: HParams,
    readonly metadata: Metadata,
    readonly tokenizer: Tokenizer,
    readonly program: ModelProgram,
    readonly runtime: NativeModel,
    readonly nCtx: number,
    readonly nSeqMax: number,
    readonly summary: ModelSummary,
    /** Most tokens per forward pass. */
    readonly nBatch: number,
    /** The residency plan when experts stream (LoadModelOptions.ramBytes), else null. */
    readonly plan: ResidencyPlan | null,
  ) {}

  static load(path: string, opts: LoadModelOptions = {}): EngineModel {
    const file = openGgufMetadata(path);
    try {
      const { md, hp, program, nCtx, nSeqMax, nBatch, params, kvType, kvTypeV } = prepare(path, file, opts);
      const tokenizer = Tokenizer.fromMetadata(md.kv);
      const eagle3 = hp.arch === 'eagle3' ? { ...eagle3Params(hp), d2t: readEagle3D2t(path, new Map(file.tensors.map((t) => [t.name, t])), hp.nVocab, file.splits.map((x) => x.path)) } : null;
      const dflash = hp.arch === 'dflash' ? { ...dflashParams(hp), d2t: readEagle3D2t(path, new Map(file.tensors.map((t) => [t.name, t])), hp.nVocab, file.splits.map((x) => x.path), 'dflash') } : null;
      checkVocabulary(tokenizer, hp, program, eagle3?.d2t ?? dflash?.d2t ?? null);
      let summary = summarize(file, md.kv);
      if (opts.mtp || eagle3 || hp.arch === 'dflash') summary = { ...summary, bytesPerToken: programBytesPerToken(program, file, summary) };
      // Refuse before allocating: the KV cache at full context for every sequence must fit in
      // what the machine has available (the weights are mapped, not allocated).
      // (An encoder-decoder's most per position: a prompt's encoder and cross rows while it encodes.)
      const roles = kvBytesByRole(program, kvType, kvTypeV);
      const kvPerToken = roles ? roles.encoder + roles.cross : kvBytesPerPosition(program, kvType, kvTypeV);
      // At most what the runtime allocates (sliding-window layers hold rings: kv_bytes_per_sequence).
      let kvBytes: number;
      try {
        kvBytes = native().kvCacheBytes(program, params);
      } catch (e) {
        throw toEngineError(e);
      }
      let plan: ResidencyPlan | null = null;
      if (params.ramBytes) {
        // The budget is the user's: refuse before reading any weight when its resident part does not fit.
        try {
          plan = native().planModel(path, program, params);
        } catch (e) {
          throw toEngineError(e);
        }
        if (!plan.fits) throw new EngineError('KAIL_E_BUDGET', `${path}: ${plan.message}`);
      }
      const available = opts.memoryAvailableBytes ?? memoryNow().availableBytes;
      if (!plan && kvBytes > available)
        throw new EngineError(
          'KAIL_E_BUDGET',
          `not enough memory: the KV cache for ${nSeqMax} sequence(s) of ${nCtx} tokens needs ${gib(kvBytes)} ` +
            `(${kvPerToken} bytes per token${roles ? ' of a prompt while it encodes' : ''}), ${gib(available)} is available; lower the context (--ctx) or the number of sequences`,
        );
      // In memory the weights the program names are copied into huge pages, unless that copy and
      // the KV cache would not fit what is available: then a MoE model streams its experts (below),
      // and any other is computed from the file's mapping (as mmap), which the page cache can give
      // back; slower, but it runs.
      let weightsMapped = !plan && !!params.mmap;
      let autoRamBytes = 0;
      if (!plan && !params.mmap && programWeightBytes(program, file) + kvBytes > available) {
        // A MoE model streams its experts within the profile's usual share of what is available,
        // when that holds its resident part: far faster than the mapping, whose page cache thrashes
        // when a model's experts do not fit (docs/benchmarks.md, "Expert streaming under a memory cap").
        const ramBytes = shareOfBytes(available, DEFAULT_RAM_SHARE);
        if (program.nMoeLayers > 0 && opts.autoStream !== false && ramBytes > 0) {
          const auto = { ...params, ramBytes, ramReserveBytes: opts.ramReserveBytes ?? DEFAULT_RAM_RESERVE_BYTES };
          let p: ResidencyPlan | null = null;
          try {
            p = native().planModel(path, program, auto);
          } catch {
            // no plan: the mapping below
          }
          if (p?.fits) {
            Object.assign(params, auto);
            plan = p;
            autoRamBytes = ramBytes;
          }
        }
        if (!plan) {
          params.mmap = true;
          weightsMapped = true;
        }
      }
      const rankHead = readRankHead(file, hp);
      let runtime: NativeModel;
      try {
        runtime = new (native().Model)(path, program, { ...params, kvMaxBytes: kvBytes });
      } catch (e) {
        throw toEngineError(e);
      }
      const model = new EngineModel(path, hp, md, tokenizer, program, runtime, nCtx, nSeqMax, summary, nBatch, plan);
      model.loraAdapters = (params.lora ?? []).map((l) => ({ path: l.path, scale: l.scale ?? 1 }));
      model.rankHead = rankHead;
      model.eagle3 = eagle3;
      model.dflash = dflash;
      model.extractLayers = opts.extractLayers ? [...opts.extractLayers] : null;
      model.nextnHidden = opts.nextnHidden === true;
      model.embeddingsFrom = opts.embeddingsFrom ? nodePath.resolve(opts.embeddingsFrom) : null;
      model.kvSource = opts.kvSource ?? null;
      model.weightsMapped = weightsMapped;
      model.autoRamBytes = autoRamBytes;
      model.kvType = kvType;
      model.kvTypeV = kvTypeV;
      model.computeKey = computeKey(opts, model.loraAdapters);
      if (opts.usageHistoryDir && program.nMoeLayers > 0) model.startUsageHistory(opts.usageHistoryDir, opts.usageDecay);
      return model;
    } catch (e) {
      throw withOverrides(e, opts);
    } finally {
      file.close();
    }
  }

  private startUsageHistory(dir: string, decay = DEFAULT_USAGE_DECAY): void {
    if (!(decay >= 0 && decay <= 1)) throw new EngineError('KAIL_E_INVALID_ARG', `usageDecay must be in 0..1, got ${decay}`);
    const n = this.program.nMoeLayers * this.program.nExpert;
    const key = modelIdentity(this.path);
    this.usage = { dir, key, decay, savedCounts: new Float64Array(n), savedTokens: 0 };
    let h: UsageHistory | null = null;
    try {
      h = readUsageHistory(dir, key, this.program.nMoeLayers, this.program.nExpert);
    } catch (e) {
      this.usageHistoryNote = `usage history ignored: ${(e as Error).message}`;
      return;
    }
    if (!h) {
      this.usageHistoryNote = `no usage history yet (${dir}); this run starts one`;
      return;
    }
    if (!this.plan) {
      this.usageHistoryNote = `usage history of ${h.runs} run(s) kept; nothing to warm (experts are not streaming)`;
      return;
    }
    const w = warmOrder(h);
    // (The history counts MoE layers as the routing statistics do; the stream numbers its own.)
    const streamOf = moeStreamLayers(this.program);
    const layers = Int32Array.from(w.layers, (l) => streamOf[l] ?? l);
    try {
      this.runtime.warmExperts(layers, w.experts, w.shares);
    } catch (e) {
      throw toEngineError(e);
    }
    const st = this.runtime.stats().stream;
    this.usageHistoryNote = `warming ${st?.warmQueued ?? 0} of ${w.experts.length} experts used in ${h.runs} earlier run(s)`;
  }

  /**
   * Merges the counts since the last save into this model's usage history file; returns its path,
   * or null without a history directory.
   */
  saveUsageHistory(): string | null {
    const u = this.usage;
    if (!u) return null;
    const st = this.runtime.stats();
    const n = u.savedCounts.length;
    if (st.expertCounts.length !== n) return null;
    const delta = new Float64Array(n);
    let any = 0;
    for (let i = 0; i < n; i++) {
      delta[i] = st.expertCounts[i] - u.savedCounts[i];
      any += delta[i];
    }
    const tokens = st.tokens - u.savedTokens;
    if (!any || tokens <= 0) return null;
    let prev: UsageHistory | null = null;
    try {
      prev = readUsageHistory(u.dir, u.key, this.program.nMoeLayers, this.program.nExpert);
    } catch {
      prev = null; // unreadable or another shape: start over rather than keep a broken file
    }
    const file = writeUsageHistory(
      u.dir,
      mergeUsage(prev, { key: u.key, model: this.path, nMoeLayers: this.program.nMoeLayers, nExpert: this.program.nExpert, counts: delta, tokens }, u.decay),
    );
    u.savedCounts = Float64Array.from(st.expertCounts);
    u.savedTokens = st.tokens;
    return file;
  }

  /** Resolves once the usage-history warm reads are done (true), or false after timeoutMs. */
  async warmed(timeoutMs = 30_000): Promise<boolean> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const st = this.runtime.stats().stream;
      if (!st || st.warmPending === 0) return true;
      if (Date.now() >= end) return false;
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** Token ids the model takes (and the width of its logits rows; an encoder has no head and no logits to sample). */
  get nVocab(): number {
    return this.encoder ? this.hparams.nVocab : this.runtime.nVocab;
  }

  /**
   * The model has recurrent layers (Qwen3.5's gated delta nets, LFM2's short convolutions): each
   * sequence keeps a state of fixed size that holds its whole past, so its cache can be kept or
   * cleared but not cut back (truncate returns 0 below its length) unless keepRollback armed a
   * checkpoint, and not shifted.
   */
  get recurrent(): boolean {
    return (this.program.rsWidth?.length ?? 0) > 0;
  }

  /**
   * An encoder-only embedding model (bert, nomic-bert): non-causal attention, no output head. It
   * gives embeddings, never generated text, and takes each sequence whole in one forward pass.
   */
  get encoder(): boolean {
    return isEncoderArchitecture(this.hparams.arch);
  }

  /**
   * An encoder-decoder model (t5): a sequence's first forward pass encodes its whole prompt (no
   * logits), the later ones run the decoder from decoderStartToken at the positions after the
   * prompt's. Generation appends the start token to the prompt; no prefix reuse, context shift,
   * sequence state, drafts or embeddings.
   */
  get encoderDecoder(): boolean {
    return (this.encDec ??= this.program.ops.some((o) => o.params?.pass !== undefined));
  }

  private encDec: boolean | undefined;

  /** The decoder's first input (decoder_start_token_id; BOS where the file has none, as llama.cpp's examples do). */
  get decoderStartToken(): number {
    const id = this.hparams.meta.int('decoder_start_token_id', -1, -1, this.hparams.nVocab - 1);
    if (id >= 0) return id;
    const bos = this.tokenizer.vocab.special.bos;
    if (bos === null) throw new EngineError('KAIL_E_BAD_MODEL', `${this.path}: an encoder-decoder model without decoder_start_token_id or a BOS token to start its decoder`);
    return bos;
  }

  /**
   * A diffusion language model (llada, llada-moe, rnd1, dream): non-causal attention with an output
   * head; every position's logits come from one pass over the canvas (evaluate(seq, canvas, 'all')
   * from an empty sequence), and text comes from model/diffusion.ts's loop.
   */
  get diffusion(): boolean {
    return isDiffusionArchitecture(this.hparams.arch);
  }

  /**
   * The pooling the file asks for (`{arch}.pooling_type`: 1 mean, 2 CLS); else the last token's
   * row, as vLLM and llama.cpp embed with a decoder-only model.
   */
  get defaultPooling(): 'mean' | 'cls' | 'last' {
    const t = this.hparams.poolingType;
    return t === 1 ? 'mean' : t === 2 ? 'cls' : 'last';
  }

  /**
   * The refusal of text generation from an embedding model (null for a model that generates),
   * `label` naming the model as the caller shows it (the API does not show file paths).
   */
  generationRefusal(label = 'this model'): EngineError | null {
    if (this.diffusion)
      return new EngineError(
        'KAIL_E_INVALID_ARG',
        `${label} is a diffusion language model (${this.hparams.arch}): it generates by iterative unmasking (kail run's diffusion loop), not token by token, so autoregressive generation and streaming are not available for it`,
      );
    if (this.eagle3)
      return new EngineError('KAIL_E_INVALID_ARG', `${label} is an EAGLE-3 draft: it drafts from a target model's hidden states; give it with --draft beside its target`);
    if (this.dflash)
      return new EngineError('KAIL_E_INVALID_ARG', `${label} is a DFlash draft: it drafts blocks from a target model's hidden states; give it with --draft beside its target`);
    if (this.kvSource)
      return new EngineError('KAIL_E_INVALID_ARG', `${label} is a Gemma 4 assistant draft: it drafts over its target model's KV cache; give it with --draft beside its target`);
    if (!this.encoder) return null;
    return new EngineError(
      'KAIL_E_INVALID_ARG',
      `${label} is an embedding model (${this.hparams.arch}): it gives embeddings (kail embed; /v1/embeddings or /embedding under kail serve), not generated text`,
    );
  }

  /** Why an encoder cannot take `n` tokens of a sequence that holds `start` (one pass, from position 0), or null. */
  encoderInputError(start: number, n: number, nBatch = this.nBatch): string | null {
    if (!this.encoder && !this.diffusion) return null;
    const what = this.encoder ? 'an encoder' : 'a diffusion model';
    if (start > 0) return `${this.path}: ${what} (${this.hparams.arch}) takes a sequence whole, in one pass; this one already holds ${start} positions`;
    if (n > nBatch) return `input is too large to process: ${n} tokens, and this ${this.encoder ? 'encoder' : 'diffusion model'} (${this.hparams.arch}) takes a sequence in one pass of at most ${nBatch} tokens`;
    return null;
  }

  /** Serializes forward passes (one at a time per model). */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.busy.then(fn, fn);
    this.busy = next.catch(() => undefined);
    return next;
  }

  /**
   * Evaluates tokens of one sequence starting at its current length, in batches of nBatch;
   * returns logits for the rows selected by `outputs` ('last' or 'all').
   */
  async evaluate(seq: number, tokens: readonly number[], outputs: 'last' | 'all', nBatch = this.nBatch): Promise<Float32Array> {
    return (await this.evaluateRows(seq, tokens, outputs, nBatch, false)).logits;
  }

  /**
   * `evaluate`, plus the program's hidden rows for every token (tokens x hiddenWidth floats): the
   * normalized final hidden states a multi-token-prediction draft reads.
   */
  async evaluateWithHidden(seq: number, tokens: readonly number[], outputs: 'last' | 'all', nBatch = this.nBatch): Promise<{ logits: Float32Array; hidden: Float32Array }> {
    if (!this.runtime.hiddenWidth) throw new EngineError('KAIL_E_INVALID_ARG', `${this.path}: this model's program has no hidden-state output`);
    const r = await this.evaluateRows(seq, tokens, outputs, nBatch, true);
    return { logits: r.logits, hidden: r.hidden! };
  }

  private async evaluateRows(seq: number, tokens: readonly number[], outputs: 'last' | 'all', nBatch: number, withHidden: boolean): Promise<{ logits: Float32Array; hidden: Float32Array | null }> {
    return this.exclusive(async () => {
      let start = this.runtime.seqLen(seq);
      if (start + tokens.length > this.nCtx)
        throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `${start + tokens.length} tokens do not fit the context of ${this.nCtx}`);
      const inputError = this.encoderInputError(start, tokens.length, Math.min(nBatch, this.nBatch));
      if (inputError) throw new EngineError('KAIL_E_INVALID_ARG', inputError);
      if (this.encoderDecoder && start === 0) {
        // An empty sequence's tokens are the prompt: one encoding pass, then the decoder's start
        // token, whose logits are the first generated token's (the cache then holds both).
        if (outputs === 'all' || withHidden) throw new EngineError('KAIL_E_UNSUPPORTED', `${this.path}: an encoder-decoder model (${this.hparams.arch}) encodes a prompt without logits or hidden rows per token`);
        if (tokens.length + 1 > this.nCtx) throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `${tokens.length} prompt tokens and the decoder's start token do not fit the context of ${this.nCtx}`);
        if (tokens.length > this.nBatch)
          throw new EngineError('KAIL_E_INVALID_ARG', `input is too large to process: ${tokens.length} tokens, and this encoder-decoder model (${this.hparams.arch}) encodes a prompt in one pass of at most ${this.nBatch} tokens`);
        const n = tokens.length;
        await this.runtime.forward({ tokens: Int32Array.from(tokens), pos: Int32Array.from({ length: n }, (_, j) => j), seq: new Int32Array(n).fill(seq), output: new Uint8Array(n) });
        start = n;
        tokens = [this.decoderStartToken];
      }
      // (An encoder's rows are its hidden states, n_embd wide.)
      const nv = this.encoder ? this.program.buffers[this.program.logits].width : this.nVocab;
      const out = new Float32Array((outputs === 'all' ? tokens.length : 1) * nv);
      const hw = this.runtime.hiddenWidth;
      const hidden = withHidden ? new Float32Array(tokens.length * hw) : null;
      let written = 0;
      // No more than the model's batch per pass: sliding-window rings hold the window plus one batch.
      nBatch = Math.max(1, Math.min(nBatch, this.nBatch));
      for (let i = 0; i < tokens.length; i += nBatch) {
        const n = Math.min(nBatch, tokens.length - i);
        const batch = {
          tokens: Int32Array.from(tokens.slice(i, i + n)),
          pos: Int32Array.from({ length: n }, (_, j) => start + i + j),
          seq: new Int32Array(n).fill(seq),
          output: Uint8Array.from({ length: n }, (_, j) => (outputs === 'all' || i + j === tokens.length - 1 ? 1 : 0)),
        };
        try {
          if (hidden) {
            const r = await this.runtime.forward({ ...batch, hidden: true });
            out.set(r.logits, written);
            written += r.logits.length;
            hidden.set(r.hidden, i * hw);
          } else {
            const logits = await this.runtime.forward(batch);
            out.set(logits, written);
            written += logits.length;
          }
        } catch (e) {
          throw toEngineError(e);
        }
      }
      return { logits: out, hidden };
    });
  }

  /** One forward pass over a batch that may mix sequences; logits for rows with output set. */
  forwardBatch(batch: ForwardBatch & { hidden?: false }): Promise<Float32Array> {
    return this.exclusive(async () => {
      try {
        return await this.runtime.forward(batch);
      } catch (e) {
        throw toEngineError(e);
      }
    });
  }

  /** `forwardBatch`, plus the program's hidden rows for every row of the batch. */
  forwardBatchWithHidden(batch: ForwardBatch): Promise<{ logits: Float32Array; hidden: Float32Array }> {
    return this.exclusive(async () => {
      try {
        return await this.runtime.forward({ ...batch, hidden: true });
      } catch (e) {
        throw toEngineError(e);
      }
    });
  }

  /** Floats per hidden row (the normalized final hidden state an MTP draft reads); 0 when the program has none. */
  get hiddenWidth(): number {
    return this.runtime.hiddenWidth;
  }

  /** The default scales of the model's LoRA adapters (those in loraAdapters), one per adapter; empty without. */
  get loraScales(): readonly number[] {
    return this.loraAdapters.map((l) => l.scale);
  }

  /** Throws unless `scales` holds one finite number per LoRA adapter. */
  checkLoraScales(scales: readonly number[]): void {
    const n = this.loraAdapters.length;
    if (scales.length !== n) throw new EngineError('KAIL_E_INVALID_ARG', `LoRA scales: ${scales.length} given, the model has ${n} adapter${n === 1 ? '' : 's'}`);
    for (const x of scales) if (!Number.isFinite(x)) throw new EngineError('KAIL_E_INVALID_ARG', `LoRA scales must be finite numbers, got ${x}`);
  }

  /** Makes `scales` the LoRA scales of sequences that are given none (llama-server's POST /lora-adapters). */
  setDefaultLoraScales(scales: readonly number[]): void {
    this.checkLoraScales(scales);
    this.loraAdapters = this.loraAdapters.map((l, i) => ({ ...l, scale: scales[i] }));
  }

  /** The scale sequence `seq` applies each LoRA adapter with from its next pass on (loraScales.length numbers). */
  setLoraScales(seq: number, scales: readonly number[]): void {
    this.runtime.setLoraScales(seq, [...scales]);
  }

  /** Positions of a sequence held in its cache. */
  seqLen(seq: number): number {
    return this.runtime.seqLen(seq);
  }

  /**
   * Drops a sequence's cache from position len on (len 0 clears it) and returns the positions
   * kept: len, or 0 when a sliding-window layer's ring no longer holds the window before len
   * (positions written since overwrote it; then only recomputing from the start is exact), or when
   * the model is recurrent and len is below the sequence's length.
   */
  truncate(seq: number, len: number): number {
    return this.runtime.seqTruncate(seq, len);
  }

  /** Starts (clearing) or stops gathering importance-matrix statistics in every forward pass (model/imatrix.ts). */
  collectImatrix(on: boolean): void {
    try {
      this.runtime.imatrixCollect(on);
    } catch (e) {
      throw toEngineError(e);
    }
  }

  /**
   * The importance-matrix statistics gathered since collection started or was last taken; clears
   * them, unless `clear` is false (a copy, for a snapshot of a run that goes on).
   */
  takeImatrix(clear = true): Record<string, { sums: Float32Array; counts: Float64Array }> {
    try {
      return this.runtime.imatrixTake(clear);
    } catch (e) {
      throw toEngineError(e);
    }
  }

  /**
   * Context shift (llama.cpp's seq_rm + seq_add, llama-server's --context-shift): drops `discard`
   * positions after the first `keep` of a sequence's cache and moves the later ones down, their
   * keys turned to the new positions; returns the sequence's new length (the next position to
   * feed). Refused (KAIL_E_UNSUPPORTED) for a model whose sliding-window layers keep a ring
   * smaller than the context.
   */
  shiftContext(seq: number, keep: number, discard: number): number {
    return this.runtime.seqShift(seq, keep, discard);
  }

  /** A sequence's KV cache as bytes (llama.cpp's llama_state_seq_get_data), for restoreSequence. */
  saveSequence(seq: number): Uint8Array {
    return this.runtime.seqState(seq);
  }

  /**
   * Puts a saveSequence blob back into a sequence (its length becomes the blob's). A blob of
   * another model shape or cache types is refused (KAIL_E_INVALID_ARG), the sequence unchanged.
   */
  restoreSequence(seq: number, state: Uint8Array): void {
    this.runtime.setSeqState(seq, state);
  }

  /**
   * Recurrent models: while on, the sequence keeps a checkpoint of its recurrent states and the
   * inputs since, so truncate/rollback can take back up to 40 positions (speculative decoding's
   * rejected drafts), at the cost of a copy of the states per sequence. Nothing for other models.
   */
  keepRollback(seq: number, on: boolean): void {
    if (this.recurrent) this.runtime.seqKeepRollback(seq, on);
  }

  /**
   * A recurrent model's context checkpoint: the sequence's states now (every recurrent layer's
   * floats), which restoreStates puts back once the sequence has moved on.
   */
  recurrentStates(seq: number): Float32Array {
    return this.runtime.seqStates(seq);
  }

  /**
   * Takes a recurrent model's sequence back to `len` positions with the states recurrentStates gave
   * when it was `len` long (its first `len` positions unchanged since): returns len, or 0 when a
   * sliding-window ring lost the window (the sequence is then cleared).
   */
  restoreStates(seq: number, len: number, states: Float32Array): number {
    return this.runtime.seqSetStates(seq, len, states);
  }

  /** Makes `dst`'s cache a copy of `src`'s (every position; truncate it after to keep a prefix). */
  copySequence(src: number, dst: number): void {
    this.runtime.seqCopy(src, dst);
  }

  /**
   * Takes back the last positions written (a speculative pass's rejected drafts): exact whenever
   * fewer than nBatch positions are taken back, which a verification pass guarantees (a recurrent
   * model: when keepRollback armed the sequence, up to 40 positions).
   */
  rollback(seq: number, len: number): void {
    const want = Math.min(len, this.runtime.seqLen(seq));
    const kept = this.runtime.seqTruncate(seq, len);
    if (kept !== want)
      throw new EngineError(
        'KAIL_E_INTERNAL',
        this.recurrent
          ? `sequence ${seq}: rolling back to ${len} positions is beyond its recurrent layers' checkpoint (kept ${kept}; the sequence was cleared)`
          : `sequence ${seq}: rolling back to ${len} positions lost the sliding window's cache (kept ${kept})`,
      );
  }

  /** Saves the usage history (errors are kept in usageHistoryNote, never thrown) and frees the model. */
  close(): void {
    try {
      this.saveUsageHistory();
    } catch (e) {
      this.usageHistoryNote = `usage history not saved: ${(e as Error).message}`;
    }
    this.runtime.close();
  }
}
