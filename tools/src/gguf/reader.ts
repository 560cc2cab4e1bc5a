// Minimal GGUF header reader: metadata and tensor table, read from the file in pieces. Used to
// check what the writer produced and by the CLI's --inspect; the engine reads models natively.
import fs from 'node:fs';

import { fsErrorText } from '@kailstream/engine/core';

import { alignUp, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GgmlType, ggmlTensorBytes, GgufType } from './constants';

export type GgufReadValue = number | bigint | boolean | string | GgufReadValue[];

export interface GgufReadKv {
  type: GgufType;
  /** Element type for arrays. */
  elemType?: GgufType;
  value: GgufReadValue;
  /** The value's bytes as the file holds them (after the key and the type tag): copies it losslessly. */
  raw: Buffer;
}

export interface GgufReadTensor {
  name: string;
  shape: number[];
  type: GgmlType;
  /** Offset within the data section. */
  offset: number;
  /** Absolute file offset of the first byte. */
  fileOffset: number;
  bytes: number;
}

export interface GgufHeader {
  version: number;
  alignment: number;
  kv: Map<string, GgufReadKv>;
  tensors: GgufReadTensor[];
  /** Absolute file offset of the data section. */
  dataOffset: number;
  fileSize: number;
}

class FileCursor {
  private buf = Buffer.alloc(1 << 20);
  private bufStart = 0;
  private bufLen = 0;
  pos = 0;

  constructor(
    private readonly fd: number,
    readonly size: number,
  ) {}

  private need(n: number): Buffer {
    if (this.pos + n > this.size) throw new Error(`GGUF truncated: need ${n} bytes at ${this.pos}, file has ${this.size}`);
    if (this.pos < this.bufStart || this.pos + n > this.bufStart + this.bufLen) {
      if (n > this.buf.length) this.buf = Buffer.alloc(n);
      this.bufStart = this.pos;
      this.bufLen = fs.readSync(this.fd, this.buf, 0, Math.min(this.buf.length, this.size - this.pos), this.pos);
    }
    const o = this.pos - this.bufStart;
    this.pos += n;
    return this.buf.subarray(o, o + n);
  }

  u8(): number { return this.need(1).readUInt8(0); }
  i8(): number { return this.need(1).readInt8(0); }
  u16(): number { return this.need(2).readUInt16LE(0); }
  i16(): number { return this.need(2).readInt16LE(0); }
  u32(): number { return this.need(4).readUInt32LE(0); }
  i32(): number { return this.need(4).readInt32LE(0); }
  f32(): number { return this.need(4).readFloatLE(0); }
  f64(): number { return this.need(8).readDoubleLE(0); }
  u64(): bigint { return this.need(8).readBigUInt64LE(0); }
  i64(): bigint { return this.need(8).readBigInt64LE(0); }
  u64n(): number {
    const v = this.u64();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`GGUF size ${v} too large`);
    return Number(v);
  }
  /**
   * An array's count, refused when its elements cannot fit in the bytes left (each takes at least
   * `minElementBytes(elemType)`), before anything is allocated for them.
   */
  arrayCount(elemType: GgufType): number {
    const at = this.pos;
    const n = this.u64();
    const min = minElementBytes(elemType);
    if (n > BigInt(Math.floor((this.size - this.pos) / min)))
      throw new Error(`GGUF array count ${n} at offset ${at} is impossible: elements of type ${GgufType[elemType] ?? elemType} take at least ${min} bytes each but only ${this.size - this.pos} bytes remain (truncated or corrupt)`);
    if (n > 0xffffffffn) throw new Error(`GGUF array count ${n} at offset ${at} is more than this reader holds (2^32 - 1)`);
    return Number(n);
  }
  str(): string {
    const n = this.u64n();
    return this.need(n).toString('utf8');
  }

  /** A copy of the file's bytes [from, to), wherever the buffer stands. */
  copy(from: number, to: number): Buffer {
    const out = Buffer.alloc(to - from);
    if (from >= this.bufStart && to <= this.bufStart + this.bufLen) {
      this.buf.copy(out, 0, from - this.bufStart, to - this.bufStart);
      return out;
    }
    for (let off = 0; off < out.length; ) {
      const n = fs.readSync(this.fd, out, off, out.length - off, from + off);
      if (n <= 0) throw new Error(`GGUF truncated at ${from + off}`);
      off += n;
    }
    return out;
  }
}

/** The fewest bytes an array element of this type takes in the file (a string: its length; an array: its type and count). */
function minElementBytes(t: GgufType): number {
  switch (t) {
    case GgufType.UINT16: case GgufType.INT16: return 2;
    case GgufType.UINT32: case GgufType.INT32: case GgufType.FLOAT32: return 4;
    case GgufType.UINT64: case GgufType.INT64: case GgufType.FLOAT64: case GgufType.STRING: return 8;
    case GgufType.ARRAY: return 12;
    default: return 1;
  }
}

/** `depth`: how many arrays enclose the value (capped as the engine's reader caps it, so no file can exhaust the stack). */
function readScalar(c: FileCursor, type: GgufType, depth = 0): GgufReadValue {
  switch (type) {
    case GgufType.UINT8: return c.u8();
    case GgufType.INT8: return c.i8();
    case GgufType.UINT16: return c.u16();
    case GgufType.INT16: return c.i16();
    case GgufType.UINT32: return c.u32();
    case GgufType.INT32: return c.i32();
    case GgufType.FLOAT32: return c.f32();
    case GgufType.FLOAT64: return c.f64();
    case GgufType.BOOL: {
      const b = c.u8();
      if (b > 1) throw new Error(`GGUF bool with value ${b}`);
      return b === 1;
    }
    case GgufType.UINT64: return c.u64();
    case GgufType.INT64: return c.i64();
    case GgufType.STRING: return c.str();
    case GgufType.ARRAY: {
      // An array of arrays: each element carries its own element type and length.
      if (depth >= 16) throw new Error(`GGUF arrays nested deeper than 16 levels at offset ${c.pos}`);
      const elemType = c.u32() as GgufType;
      const n = c.arrayCount(elemType);
      const value: GgufReadValue[] = new Array(n);
      for (let j = 0; j < n; j++) value[j] = readScalar(c, elemType, depth + 1);
      return value;
    }
    default: throw new Error(`bad GGUF value type ${type}`);
  }
}

/** Reads the header of a GGUF file (v2 or v3) without touching the tensor data. */
export function readGgufHeader(path: string): GgufHeader {
  let fd: number;
  try {
    fd = fs.openSync(path, 'r');
  } catch (e) {
    throw new Error(`cannot read ${path}: ${fsErrorText(e)}`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new Error(`${path} is ${st.isDirectory() ? 'a directory' : 'not a regular file'}, not a GGUF file`);
    return readHeaderFrom(path, new FileCursor(fd, st.size));
  } catch (e) {
    // (Every refusal names the file: the cursor's own do not.)
    const m = (e as Error).message;
    throw m.includes(path) ? e : new Error(`${path}: ${m}`);
  } finally {
    fs.closeSync(fd);
  }
}

function readHeaderFrom(path: string, c: FileCursor): GgufHeader {
  if (c.u32() !== GGUF_MAGIC) throw new Error(`${path}: not a GGUF file`);
  const version = c.u32();
  if (version < 2 || version > 3) throw new Error(`${path}: unsupported GGUF version ${version}`);
  const nTensors = c.u64n();
  const nKv = c.u64n();
  const kv = new Map<string, GgufReadKv>();
  for (let i = 0; i < nKv; i++) {
    const key = c.str();
    const type = c.u32() as GgufType;
    if (kv.has(key)) throw new Error(`${path}: duplicate key '${key}'`);
    const start = c.pos;
    if (type === GgufType.ARRAY) {
      const elemType = c.u32() as GgufType;
      const n = c.arrayCount(elemType);
      const value: GgufReadValue[] = new Array(n);
      for (let j = 0; j < n; j++) value[j] = readScalar(c, elemType);
      kv.set(key, { type, elemType, value, raw: c.copy(start, c.pos) });
    } else {
      const value = readScalar(c, type);
      kv.set(key, { type, value, raw: c.copy(start, c.pos) });
    }
  }
  const alignKv = kv.get('general.alignment');
  const alignment = alignKv ? (alignKv.value as number) : GGUF_DEFAULT_ALIGNMENT;
  if (alignKv && (alignKv.type !== GgufType.UINT32 || alignment === 0 || (alignment & (alignment - 1)) !== 0))
    throw new Error(`${path}: general.alignment is ${String(alignKv.value).slice(0, 40)} (type ${alignKv.type}): must be a uint32 power of two`);
  const tensors: GgufReadTensor[] = [];
  for (let i = 0; i < nTensors; i++) {
    const name = c.str();
    const nDims = c.u32();
    if (nDims < 1 || nDims > 4) throw new Error(`${path}: tensor '${name}' has ${nDims} dimensions (must be 1..4)`);
    const shape: number[] = [];
    for (let d = 0; d < nDims; d++) shape.push(c.u64n());
    const type = c.u32() as GgmlType;
    const offset = c.u64n();
    tensors.push({ name, shape, type, offset, fileOffset: 0, bytes: ggmlTensorBytes(type, shape) });
  }
  const dataOffset = nTensors > 0 ? alignUp(c.pos, alignment) : c.pos;
  let expected = 0;
  for (const t of tensors) {
    if (t.offset !== expected) throw new Error(`${path}: tensor '${t.name}' at offset ${t.offset}, expected ${expected}`);
    t.fileOffset = dataOffset + t.offset;
    if (t.fileOffset + t.bytes > c.size) throw new Error(`${path}: tensor '${t.name}' runs past the end of the file`);
    expected += alignUp(t.bytes, alignment);
  }
  return { version, alignment, kv, tensors, dataOffset, fileSize: c.size };
}

/** Reads one tensor's raw bytes. */
export function readGgufTensorBytes(path: string, tensor: GgufReadTensor): Buffer {
  const fd = fs.openSync(path, 'r');
  try {
    const out = Buffer.alloc(tensor.bytes);
    let off = 0;
    while (off < out.length) {
      const n = fs.readSync(fd, out, off, out.length - off, tensor.fileOffset + off);
      if (n === 0) throw new Error(`${path}: short read in tensor '${tensor.name}'`);
      off += n;
    }
    return out;
  } finally {
    fs.closeSync(fd);
  }
}
