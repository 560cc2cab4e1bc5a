// Streaming GGUF v3 writer (format: ggml/src/gguf.cpp, docs/gguf.md).
//
// Layout: header (magic, version, n_tensors, n_kv), the key/value pairs, the tensor table (name,
// dims, type, offset relative to the data section), padding to `general.alignment`, then each
// tensor's bytes, each padded to the alignment. Every offset depends only on shapes and types, so
// the header is written first and tensor data is then streamed in order, chunk by chunk: the
// writer never holds more than one write buffer.
import fs from 'node:fs';

import { alignUp, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, GgmlType, ggmlTensorBytes, GgufType } from './constants';

export type GgufArrayElementType = Exclude<GgufType, GgufType.ARRAY>;

export type GgufValue =
  | { type: GgufType.UINT8 | GgufType.INT8 | GgufType.UINT16 | GgufType.INT16; value: number }
  | { type: GgufType.UINT32 | GgufType.INT32 | GgufType.FLOAT32 | GgufType.FLOAT64; value: number }
  | { type: GgufType.UINT64 | GgufType.INT64; value: number | bigint }
  | { type: GgufType.BOOL; value: boolean }
  | { type: GgufType.STRING; value: string }
  | {
      type: GgufType.ARRAY;
      elemType: GgufArrayElementType;
      value: ArrayLike<number> | ArrayLike<bigint> | readonly boolean[] | readonly string[];
    };

/** A value already encoded as GGUF stores it after its type tag (GgufReadKv.raw): written as it is. */
export interface RawGgufValue {
  type: GgufType;
  raw: Uint8Array;
}

/** Typed GGUF values: `kv.u32(5)`, `kv.str('llama')`, `kv.arr(GgufType.INT32, [1, 2])`. */
export const kv = {
  u8: (value: number): GgufValue => ({ type: GgufType.UINT8, value }),
  i8: (value: number): GgufValue => ({ type: GgufType.INT8, value }),
  u16: (value: number): GgufValue => ({ type: GgufType.UINT16, value }),
  i16: (value: number): GgufValue => ({ type: GgufType.INT16, value }),
  u32: (value: number): GgufValue => ({ type: GgufType.UINT32, value }),
  i32: (value: number): GgufValue => ({ type: GgufType.INT32, value }),
  f32: (value: number): GgufValue => ({ type: GgufType.FLOAT32, value }),
  f64: (value: number): GgufValue => ({ type: GgufType.FLOAT64, value }),
  u64: (value: number | bigint): GgufValue => ({ type: GgufType.UINT64, value }),
  i64: (value: number | bigint): GgufValue => ({ type: GgufType.INT64, value }),
  bool: (value: boolean): GgufValue => ({ type: GgufType.BOOL, value }),
  str: (value: string): GgufValue => ({ type: GgufType.STRING, value }),
  arr: (
    elemType: GgufArrayElementType,
    value: ArrayLike<number> | ArrayLike<bigint> | readonly boolean[] | readonly string[],
  ): GgufValue => ({ type: GgufType.ARRAY, elemType, value }),
  /** A value copied from a file as its bytes (GgufReadKv's `type` and `raw`). */
  raw: (type: GgufType, raw: Uint8Array): RawGgufValue => ({ type, raw }),
};

export interface GgufTensorInfo {
  name: string;
  /** ggml order: shape[0] is the row length (ne0), the fastest-varying dimension. At most 4 dims. */
  shape: number[];
  type: GgmlType;
}

export interface GgufWriterOptions {
  /** Data alignment in bytes, a power of two; written as `general.alignment`. Default 32. */
  alignment?: number;
  /**
   * Write the `general.alignment` key (default true). False (only at the default alignment, which
   * readers assume without it) copies a file that has no such key as it is.
   */
  alignmentKey?: boolean;
  /** Size of the write buffer in bytes. Default 8 MiB. */
  bufferSize?: number;
}

const SCALAR_SIZE: Partial<Record<GgufType, number>> = {
  [GgufType.UINT8]: 1,
  [GgufType.INT8]: 1,
  [GgufType.UINT16]: 2,
  [GgufType.INT16]: 2,
  [GgufType.UINT32]: 4,
  [GgufType.INT32]: 4,
  [GgufType.FLOAT32]: 4,
  [GgufType.BOOL]: 1,
  [GgufType.UINT64]: 8,
  [GgufType.INT64]: 8,
  [GgufType.FLOAT64]: 8,
};

/** Growable little-endian byte sink for the header. */
class ByteSink {
  private buf = Buffer.alloc(1 << 16);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = Buffer.alloc(size);
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }

  scalar(type: GgufType, v: number | bigint | boolean): void {
    const n = SCALAR_SIZE[type];
    if (n === undefined) throw new Error(`not a scalar GGUF type: ${type}`);
    this.reserve(n);
    const b = this.buf;
    const o = this.length;
    switch (type) {
      case GgufType.UINT8: checkInt(v, 0, 0xff); b.writeUInt8(v as number, o); break;
      case GgufType.INT8: checkInt(v, -0x80, 0x7f); b.writeInt8(v as number, o); break;
      case GgufType.UINT16: checkInt(v, 0, 0xffff); b.writeUInt16LE(v as number, o); break;
      case GgufType.INT16: checkInt(v, -0x8000, 0x7fff); b.writeInt16LE(v as number, o); break;
      case GgufType.UINT32: checkInt(v, 0, 0xffffffff); b.writeUInt32LE(v as number, o); break;
      case GgufType.INT32: checkInt(v, -0x80000000, 0x7fffffff); b.writeInt32LE(v as number, o); break;
      case GgufType.FLOAT32: b.writeFloatLE(Number(v), o); break;
      case GgufType.FLOAT64: b.writeDoubleLE(Number(v), o); break;
      case GgufType.BOOL:
        if (typeof v !== 'boolean') throw new Error(`GGUF bool expects a boolean, got ${String(v)}`);
        b.writeUInt8(v ? 1 : 0, o);
        break;
      case GgufType.UINT64: b.writeBigUInt64LE(toBigInt(v), o); break;
      case GgufType.INT64: b.writeBigInt64LE(toBigInt(v), o); break;
      default: throw new Error(`unreachable GGUF type ${type}`);
    }
    this.length += n;
  }

  u32(v: number): void { this.scalar(GgufType.UINT32, v); }
  u64(v: number): void { this.scalar(GgufType.UINT64, v); }

  string(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.reserve(bytes.length);
    bytes.copy(this.buf, this.length);
    this.length += bytes.length;
  }

  append(bytes: Uint8Array): void {
    this.reserve(bytes.length);
    this.buf.set(bytes, this.length);
    this.length += bytes.length;
  }

  zeros(n: number): void {
    this.reserve(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function checkInt(v: number | bigint | boolean, min: number, max: number): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new Error(`GGUF integer value ${String(v)} out of range [${min}, ${max}]`);
  }
}

function toBigInt(v: number | bigint | boolean): bigint {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return BigInt(v);
  throw new Error(`GGUF 64-bit integer expects a safe integer or bigint, got ${String(v)}`);
}

function writeValue(sink: ByteSink, v: GgufValue | RawGgufValue): void {
  if ('raw' in v) {
    sink.append(v.raw);
  } else if (v.type === GgufType.STRING) {
    sink.string(v.value);
  } else if (v.type === GgufType.ARRAY) {
    if ((v.elemType as GgufType) === GgufType.ARRAY) throw new Error('nested GGUF arrays are not supported');
    sink.u32(v.elemType);
    sink.u64(v.value.length);
    if (v.elemType === GgufType.STRING) {
      for (const s of v.value as readonly string[]) sink.string(s);
    } else {
      const arr = v.value as ArrayLike<number | bigint | boolean>;
      for (let i = 0; i < arr.length; i++) sink.scalar(v.elemType, arr[i]);
    }
  } else {
    sink.scalar(v.type, v.value);
  }
}

/**
 * Writes one GGUF file: set metadata and declare tensors, then stream each tensor's bytes in
 * declaration order with `writeTensorData`, then `finish()`.
 */
export class GgufWriter {
  private readonly kvs = new Map<string, GgufValue | RawGgufValue>();
  private readonly tensors: (GgufTensorInfo & { bytes: number; offset: number })[] = [];
  private readonly alignment: number;
  private readonly alignmentKey: boolean;
  private readonly bufferSize: number;
  private fd: number | undefined;
  private buf: Buffer;
  private bufLen = 0;
  private filePos = 0;
  private current = 0;
  private currentWritten = 0;
  private dataSize = 0;
  private finished = false;

  constructor(
    readonly path: string,
    options: GgufWriterOptions = {},
  ) {
    this.alignment = options.alignment ?? GGUF_DEFAULT_ALIGNMENT;
    if (!Number.isInteger(this.alignment) || this.alignment <= 0 || (this.alignment & (this.alignment - 1)) !== 0) {
      throw new Error(`alignment must be a power of two, got ${this.alignment}`);
    }
    this.alignmentKey = options.alignmentKey ?? true;
    if (!this.alignmentKey && this.alignment !== GGUF_DEFAULT_ALIGNMENT) {
      throw new Error(`an alignment of ${this.alignment} must be written as general.alignment; only ${GGUF_DEFAULT_ALIGNMENT} may go without it`);
    }
    this.bufferSize = options.bufferSize ?? 8 << 20;
    this.buf = Buffer.alloc(0);
  }

  /** Sets a metadata key (insertion order is file order). `general.alignment` is managed by the writer. */
  set(key: string, value: GgufValue | RawGgufValue): this {
    this.assertNotStarted();
    if (key === 'general.alignment') throw new Error('general.alignment is set through the writer option `alignment`');
    if (this.kvs.has(key)) throw new Error(`duplicate GGUF key '${key}'`);
    this.kvs.set(key, value);
    return this;
  }

  has(key: string): boolean {
    return this.kvs.has(key);
  }

  addTensor(info: GgufTensorInfo): this {
    this.assertNotStarted();
    if (info.shape.length < 1 || info.shape.length > 4) throw new Error(`tensor '${info.name}': 1 to 4 dims, got ${info.shape.length}`);
    if (info.shape.some((d) => !Number.isSafeInteger(d) || d < 0)) throw new Error(`tensor '${info.name}': bad shape [${info.shape}]`);
    if (Buffer.byteLength(info.name) >= 64) throw new Error(`tensor name '${info.name}' is 64 bytes or longer (GGML_MAX_NAME)`);
    if (this.tensors.some((t) => t.name === info.name)) throw new Error(`duplicate tensor '${info.name}'`);
    const bytes = ggmlTensorBytes(info.type, info.shape);
    this.tensors.push({ ...info, shape: [...info.shape], bytes, offset: this.dataSize });
    this.dataSize += alignUp(bytes, this.alignment);
    return this;
  }

  /** The declared tensors with their byte sizes and offsets within the data section. */
  get tensorTable(): readonly (GgufTensorInfo & { bytes: number; offset: number })[] {
    return this.tensors;
  }

  /** Serializes the header, key/values and tensor table (padded to the alignment). */
  headerBytes(): Buffer {
    const sink = new ByteSink();
    sink.u32(GGUF_MAGIC);
    sink.u32(GGUF_VERSION);
    sink.u64(this.tensors.length);
    sink.u64(this.kvs.size + (this.alignmentKey ? 1 : 0));
    if (this.alignmentKey) {
      sink.string('general.alignment');
      sink.u32(GgufType.UINT32);
      sink.u32(this.alignment);
    }
    for (const [key, value] of this.kvs) {
      sink.string(key);
      sink.u32(value.type);
      writeValue(sink, value);
    }
    for (const t of this.tensors) {
      sink.string(t.name);
      sink.u32(t.shape.length);
      for (const d of t.shape) sink.u64(d);
      sink.u32(t.type);
      sink.u64(t.offset);
    }
    sink.zeros(alignUp(sink.length, this.alignment) - sink.length);
    return sink.bytes();
  }

  /** Opens the file and writes the header; called by the first `writeTensorData` if not before. */
  begin(): void {
    this.assertNotStarted();
    const header = this.headerBytes();
    this.fd = fs.openSync(this.path, 'w');
    this.buf = Buffer.allocUnsafe(this.bufferSize);
    this.rawWrite(header);
  }

  /** Name of the tensor whose bytes are expected next, or undefined when all are written. */
  get nextTensor(): string | undefined {
    return this.tensors[this.current]?.name;
  }

  /**
   * Appends bytes of tensor `name`, which must be the next unfinished tensor in declaration order.
   * A tensor may arrive in any number of chunks; padding follows its last byte.
   */
  writeTensorData(name: string, data: Uint8Array): void {
    if (this.fd === undefined) this.begin();
    const t = this.tensors[this.current];
    if (!t) throw new Error(`all tensors are written; got more data for '${name}'`);
    if (t.name !== name) throw new Error(`expected data for tensor '${t.name}', got '${name}'`);
    if (this.currentWritten + data.byteLength > t.bytes) {
      throw new Error(`tensor '${name}': ${this.currentWritten + data.byteLength} bytes written, declared ${t.bytes}`);
    }
    this.rawWrite(data);
    this.currentWritten += data.byteLength;
    if (this.currentWritten === t.bytes) {
      const pad = alignUp(t.bytes, this.alignment) - t.bytes;
      if (pad > 0) this.rawWrite(new Uint8Array(pad));
      this.current++;
      this.currentWritten = 0;
    }
  }

  /** Flushes and closes the file. Throws if a declared tensor has not been fully written. */
  finish(): { path: string; bytes: number } {
    if (this.finished) throw new Error('GGUF writer already finished');
    if (this.fd === undefined) this.begin();
    if (this.current !== this.tensors.length) {
      const t = this.tensors[this.current];
      this.abort();
      throw new Error(`tensor '${t.name}' incomplete: ${this.currentWritten} of ${t.bytes} bytes`);
    }
    this.flush();
    fs.closeSync(this.fd!);
    this.fd = undefined;
    this.finished = true;
    return { path: this.path, bytes: this.filePos };
  }

  /** Closes and removes a partially written file. */
  abort(): void {
    if (this.fd !== undefined) {
      fs.closeSync(this.fd);
      this.fd = undefined;
      fs.rmSync(this.path, { force: true });
    }
    this.finished = true;
  }

  private rawWrite(data: Uint8Array): void {
    if (data.byteLength >= this.buf.length) {
      this.flush();
      writeAll(this.fd!, data);
      this.filePos += data.byteLength;
      return;
    }
    if (this.bufLen + data.byteLength > this.buf.length) this.flush();
    this.buf.set(data, this.bufLen);
    this.bufLen += data.byteLength;
  }

  private flush(): void {
    if (this.bufLen === 0) return;
    writeAll(this.fd!, this.buf.subarray(0, this.bufLen));
    this.filePos += this.bufLen;
    this.bufLen = 0;
  }

  private assertNotStarted(): void {
    if (this.fd !== undefined || this.finished) throw new Error('GGUF header already written');
  }
}

function writeAll(fd: number, data: Uint8Array): void {
  let off = 0;
  while (off < data.byteLength) off += fs.writeSync(fd, data, off, data.byteLength - off);
}
