import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from './constants';
import { encodeF16 } from './float-encode';
import { readGgufHeader, readGgufTensorBytes } from './reader';
import { GgufWriter, kv } from './writer';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gguf-writer-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function bytes(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 0xff;
  return b;
}

describe('GgufWriter', () => {
  it('writes every value type, arrays included, and reads them back', () => {
    const file = path.join(dir, 'all-types.gguf');
    const w = new GgufWriter(file, { alignment: 64 });
    w.set('t.u8', kv.u8(250))
      .set('t.i8', kv.i8(-100))
      .set('t.u16', kv.u16(65000))
      .set('t.i16', kv.i16(-32000))
      .set('t.u32', kv.u32(4_000_000_000))
      .set('t.i32', kv.i32(-2_000_000_000))
      .set('t.f32', kv.f32(1.5))
      .set('t.f64', kv.f64(Math.PI))
      .set('t.bool', kv.bool(true))
      .set('t.str', kv.str('héllo ✓ 🙂'))
      .set('t.u64', kv.u64(2n ** 63n + 5n))
      .set('t.i64', kv.i64(-(2n ** 62n)))
      .set('t.u64n', kv.u64(123456789012))
      .set('a.u8', kv.arr(GgufType.UINT8, [0, 1, 255]))
      .set('a.i8', kv.arr(GgufType.INT8, [-128, 127]))
      .set('a.u16', kv.arr(GgufType.UINT16, [1, 65535]))
      .set('a.i16', kv.arr(GgufType.INT16, [-1, 2]))
      .set('a.u32', kv.arr(GgufType.UINT32, new Uint32Array([7, 8, 9])))
      .set('a.i32', kv.arr(GgufType.INT32, new Int32Array([-7, 8])))
      .set('a.f32', kv.arr(GgufType.FLOAT32, new Float32Array([0.25, -2])))
      .set('a.f64', kv.arr(GgufType.FLOAT64, [1e300, -1e-300]))
      .set('a.bool', kv.arr(GgufType.BOOL, [true, false, true]))
      .set('a.str', kv.arr(GgufType.STRING, ['a', '', 'ünï', 'x y']))
      .set('a.u64', kv.arr(GgufType.UINT64, [1n, 2n ** 64n - 1n]))
      .set('a.i64', kv.arr(GgufType.INT64, [-1n, 5n]))
      .set('a.empty', kv.arr(GgufType.INT32, []));
    const f = new Float32Array([1, -2, 3.5, 0.1, 7, 8]);
    const t16 = encodeF16(new Float32Array(64).map((_, i) => i / 8));
    const q = bytes(34 * 2 * 3, 3); // Q8_0: [64, 3] = 2 blocks per row
    w.addTensor({ name: 'a', shape: [6], type: GgmlType.F32 })
      .addTensor({ name: 'b', shape: [32, 2], type: GgmlType.F16 })
      .addTensor({ name: 'c', shape: [64, 3], type: GgmlType.Q8_0 })
      .addTensor({ name: 'd.3d', shape: [2, 2, 2], type: GgmlType.F32 });
    w.writeTensorData('a', new Uint8Array(f.buffer));
    w.writeTensorData('b', t16.subarray(0, 50)); // any chunking
    w.writeTensorData('b', t16.subarray(50));
    for (let i = 0; i < 3; i++) w.writeTensorData('c', q.subarray(i * 68, (i + 1) * 68));
    w.writeTensorData('d.3d', new Uint8Array(32));
    const res = w.finish();
    expect(res.bytes).toBe(fs.statSync(file).size);

    const h = readGgufHeader(file);
    expect(h.version).toBe(3);
    expect(h.alignment).toBe(64);
    const val = (k: string) => h.kv.get(k)?.value;
    expect(val('general.alignment')).toBe(64);
    expect(h.kv.get('general.alignment')?.type).toBe(GgufType.UINT32);
    expect(val('t.u8')).toBe(250);
    expect(val('t.i8')).toBe(-100);
    expect(val('t.u16')).toBe(65000);
    expect(val('t.i16')).toBe(-32000);
    expect(val('t.u32')).toBe(4_000_000_000);
    expect(val('t.i32')).toBe(-2_000_000_000);
    expect(val('t.f32')).toBe(1.5);
    expect(val('t.f64')).toBe(Math.PI);
    expect(val('t.bool')).toBe(true);
    expect(val('t.str')).toBe('héllo ✓ 🙂');
    expect(val('t.u64')).toBe(2n ** 63n + 5n);
    expect(val('t.i64')).toBe(-(2n ** 62n));
    expect(val('t.u64n')).toBe(123456789012n);
    expect(val('a.u8')).toEqual([0, 1, 255]);
    expect(val('a.i8')).toEqual([-128, 127]);
    expect(val('a.u16')).toEqual([1, 65535]);
    expect(val('a.i16')).toEqual([-1, 2]);
    expect(val('a.u32')).toEqual([7, 8, 9]);
    expect(val('a.i32')).toEqual([-7, 8]);
    expect(val('a.f32')).toEqual([0.25, -2]);
    expect(val('a.f64')).toEqual([1e300, -1e-300]);
    expect(val('a.bool')).toEqual([true, false, true]);
    expect(val('a.str')).toEqual(['a', '', 'ünï', 'x y']);
    expect(val('a.u64')).toEqual([1n, 2n ** 64n - 1n]);
    expect(val('a.i64')).toEqual([-1n, 5n]);
    expect(val('a.empty')).toEqual([]);
    expect(h.kv.get('a.str')?.elemType).toBe(GgufType.STRING);
    // key order is preserved
    expect([...h.kv.keys()].slice(0, 3)).toEqual(['general.alignment', 't.u8', 't.i8']);

    expect(h.tensors.map((t) => [t.name, t.shape, t.type, t.offset])).toEqual([
      ['a', [6], GgmlType.F32, 0],
      ['b', [32, 2], GgmlType.F16, 64],
      ['c', [64, 3], GgmlType.Q8_0, 192],
      ['d.3d', [2, 2, 2], GgmlType.F32, 448],
    ]);
    expect(h.dataOffset % 64).toBe(0);
    for (const t of h.tensors) expect(t.fileOffset % 64).toBe(0);
    expect(new Float32Array(new Uint8Array(readGgufTensorBytes(file, h.tensors[0])).buffer)).toEqual(f);
    expect(new Uint8Array(readGgufTensorBytes(file, h.tensors[1]))).toEqual(t16);
    expect(new Uint8Array(readGgufTensorBytes(file, h.tensors[2]))).toEqual(q);
    // the file ends with the last tensor's padding
    expect(h.fileSize).toBe(h.dataOffset + 448 + 64);
  });

  it('lays out the header byte for byte as gguf.cpp reads it', () => {
    const file = path.join(dir, 'layout.gguf');
    const w = new GgufWriter(file);
    w.set('general.architecture', kv.str('llama'));
    w.addTensor({ name: 'x', shape: [4, 2], type: GgmlType.F32 });
    w.writeTensorData('x', new Uint8Array(32).fill(0xab));
    w.finish();
    const b = fs.readFileSync(file);
    let o = 0;
    const u32 = () => ((o += 4), b.readUInt32LE(o - 4));
    const u64 = () => ((o += 8), Number(b.readBigUInt64LE(o - 8)));
    const str = () => {
      const n = u64();
      o += n;
      return b.toString('utf8', o - n, o);
    };
    expect(b.toString('latin1', 0, 4)).toBe('GGUF');
    o = 4;
    expect(u32()).toBe(3); // version
    expect(u64()).toBe(1); // n_tensors
    expect(u64()).toBe(2); // n_kv
    expect(str()).toBe('general.alignment');
    expect(u32()).toBe(GgufType.UINT32);
    expect(u32()).toBe(32);
    expect(str()).toBe('general.architecture');
    expect(u32()).toBe(GgufType.STRING);
    expect(str()).toBe('llama');
    expect(str()).toBe('x');
    expect(u32()).toBe(2); // n_dims
    expect(u64()).toBe(4);
    expect(u64()).toBe(2);
    expect(u32()).toBe(GgmlType.F32);
    expect(u64()).toBe(0); // offset
    const dataStart = Math.ceil(o / 32) * 32;
    expect(b.subarray(o, dataStart).every((x) => x === 0)).toBe(true);
    expect(b.subarray(dataStart, dataStart + 32).every((x) => x === 0xab)).toBe(true);
    expect(b.length).toBe(dataStart + 32);
  });

  it('rejects misuse', () => {
    const file = path.join(dir, 'bad.gguf');
    const w = new GgufWriter(file);
    expect(() => w.set('general.alignment', kv.u32(64))).toThrow(/alignment/);
    w.set('k', kv.u32(1));
    expect(() => w.set('k', kv.u32(2))).toThrow(/duplicate/);
    expect(() => w.addTensor({ name: 'q', shape: [48, 2], type: GgmlType.Q8_0 })).toThrow(/block size/);
    expect(() => w.addTensor({ name: 'y'.repeat(64), shape: [4], type: GgmlType.F32 })).toThrow(/64 bytes/);
    w.addTensor({ name: 'a', shape: [4], type: GgmlType.F32 }).addTensor({ name: 'b', shape: [4], type: GgmlType.F32 });
    expect(() => w.writeTensorData('b', new Uint8Array(16))).toThrow(/expected data for tensor 'a'/);
    expect(() => w.writeTensorData('a', new Uint8Array(20))).toThrow(/declared 16/);
    expect(() => w.set('late', kv.u32(1))).toThrow(/already written/);
    w.writeTensorData('a', new Uint8Array(16));
    expect(() => w.finish()).toThrow(/'b' incomplete/);
    expect(fs.existsSync(file)).toBe(false);
    expect(() => new GgufWriter(file, { alignment: 24 })).toThrow(/power of two/);
    expect(() => new GgufWriter(file).set('x', kv.u8(256)).headerBytes()).toThrow(/out of range/);
  });
});
