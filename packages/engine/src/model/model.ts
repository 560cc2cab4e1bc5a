import fs from 'node:fs';
import os from 'node:os';
import type { ForwardBatch, GgufTensorInfo, ModelProgram, NativeGgufFile, NativeModel } from '@kailstream/core-native';

import { EngineError, toEngineError } from '../errors';
import { native } from '../native';
import { Tokenizer } from '../tokenizer/tokenizer';
import { SUPPORTED_ARCHITECTURES, buildProgram } from './architectures';
import { Metadata, readHParams, type HParams } from './hparams';

export interface LoadModelOptions {
  /** Compute threads; 0 or undefined = physical cores. */
  threads?: number;
  /** Positions per sequence; default min(training context, 4096). */
  nCtx?: number;
  /** Concurrent sequences. Default 1. */
  nSeqMax?: number;
  /** KV cache element type. Default 'f16' (llama.cpp's default). */
  kvType?: 'f16' | 'f32';
  /** Memory the load may plan against; default: MemAvailable from /proc/meminfo (or os.freemem()). */
  memoryAvailableBytes?: number;
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;

/** Memory the kernel says is available for new allocations without swapping. */
export function availableMemoryBytes(): number {
  try {
    const m = /^MemAvailable:\s+(\d+) kB/m.exec(fs.readFileSync('/proc/meminfo', 'utf8'));
    if (m) return Number(m[1]) * 1024;
  } catch {
    // not Linux
  }
  return os.freemem();
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
  /** Bytes of routed expert tensors (ffn_*_exps). */
  expertBytes: number;
  /** Bytes of everything else (resident). */
  residentBytes: number;
  /** Bytes of one expert of one layer (gate+up+down), 0 for dense models. */
  bytesPerExpert: number;
  /** Weight bytes read per token: resident + experts used per layer. */
  bytesPerToken: number;
}

const isExpertTensor = (name: string) => /\.ffn_(gate|up|down|gate_up)_exps\./.test(name);

export function summarize(file: NativeGgufFile): ModelSummary {
  const arch = String(file.metadata['general.architecture'] ?? 'unknown');
  const md = new Metadata(file.metadata, arch);
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
    expertBytes,
    residentBytes,
    bytesPerExpert,
    bytesPerToken: residentBytes + bytesPerExpert * nUsed * moeLayers,
  };
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

/** A loaded model: hyperparameters, tokenizer and the native runtime with its KV cache. */
export class EngineModel {
  private busy: Promise<unknown> = Promise.resolve();

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
  ) {}

  static load(path: string, opts: LoadModelOptions = {}): EngineModel {
    const file = openGgufMetadata(path);
    try {
      const arch = file.metadata['general.architecture'];
      if (typeof arch !== 'string') throw new EngineError('KAIL_E_BAD_MODEL', `${path}: metadata 'general.architecture' is missing`);
      if (!SUPPORTED_ARCHITECTURES.includes(arch))
        throw new EngineError('KAIL_E_UNSUPPORTED', `architecture '${arch}' is not supported; supported: ${SUPPORTED_ARCHITECTURES.join(', ')}`);
      const md = new Metadata(file.metadata, arch);
      const tensors = new Map<string, GgufTensorInfo>(file.tensors.map((t) => [t.name, t]));
      const hp = readHParams(md, tensors);
      const program = buildProgram(hp, tensors);
      const tokenizer = Tokenizer.fromMetadata(file.metadata);
      const nCtx = Math.max(1, Math.min(opts.nCtx ?? Math.min(hp.nCtxTrain || 4096, 4096), 1 << 20));
      const nSeqMax = Math.max(1, opts.nSeqMax ?? 1);
      const summary = summarize(file);
      // Refuse before allocating: the KV cache at full context for every sequence must fit in
      // what the machine has available (the weights are mapped, not allocated).
      const kvElem = opts.kvType === 'f32' ? 4 : 2;
      const kvPerToken = program.kvKWidth.reduce((a, b) => a + b, 0) * kvElem + program.kvVWidth.reduce((a, b) => a + b, 0) * kvElem;
      const kvBytes = kvPerToken * nCtx * nSeqMax;
      const available = opts.memoryAvailableBytes ?? availableMemoryBytes();
      if (kvBytes > available)
        throw new EngineError(
          'KAIL_E_BUDGET',
          `not enough memory: the KV cache for ${nSeqMax} sequence(s) of ${nCtx} tokens needs ${gib(kvBytes)} ` +
            `(${kvPerToken} bytes per token), ${gib(available)} is available; lower the context (--ctx) or the number of sequences`,
        );
      let runtime: NativeModel;
      try {
        runtime = new (native().Model)(path, program, {
          threads: opts.threads ?? 0,
          kvType: opts.kvType === 'f32' ? 0 : 1,
          nCtx,
          nSeqMax,
          kvMaxBytes: kvBytes,
        });
      } catch (e) {
        throw toEngineError(e);
      }
      return new EngineModel(path, hp, md, tokenizer, program, runtime, nCtx, nSeqMax, summary);
    } finally {
      file.close();
    }
  }

  get nVocab(): number {
    return this.runtime.nVocab;
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
  async evaluate(seq: number, tokens: readonly number[], outputs: 'last' | 'all', nBatch = 512): Promise<Float32Array> {
    return this.exclusive(async () => {
      const start = this.runtime.seqLen(seq);
      if (start + tokens.length > this.nCtx)
        throw new EngineError('KAIL_E_CONTEXT_OVERFLOW', `${start + tokens.length} tokens do not fit the context of ${this.nCtx}`);
      const nv = this.nVocab;
      const out = new Float32Array((outputs === 'all' ? tokens.length : 1) * nv);
      let written = 0;
      for (let i = 0; i < tokens.length; i += nBatch) {
        const n = Math.min(nBatch, tokens.length - i);
        const batch = {
          tokens: Int32Array.from(tokens.slice(i, i + n)),
          pos: Int32Array.from({ length: n }, (_, j) => start + i + j),
          seq: new Int32Array(n).fill(seq),
          output: Uint8Array.from({ length: n }, (_, j) => (outputs === 'all' || i + j === tokens.length - 1 ? 1 : 0)),
        };
        try {
          const logits = await this.runtime.forward(batch);
          out.set(logits, written);
          written += logits.length;
        } catch (e) {
          throw toEngineError(e);
        }
      }
      return out;
    });
  }

  /** One forward pass over a batch that may mix sequences; logits for rows with output set. */
  forwardBatch(batch: ForwardBatch): Promise<Float32Array> {
    return this.exclusive(async () => {
      try {
        return await this.runtime.forward(batch);
      } catch (e) {
        throw toEngineError(e);
      }
    });
  }

  /** Drops a sequence's cache from position len on (len 0 clears it). */
  truncate(seq: number, len: number): void {
    this.runtime.seqTruncate(seq, len);
  }

  close(): void {
    this.runtime.close();
  }
}
