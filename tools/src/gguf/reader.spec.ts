// The tools' GGUF reader (kail quantize, gguf-split, export-lora, imatrix, the Ollama import) on
// corrupt files: each refusal names the file and the field, before anything is allocated for a
// count the file cannot hold (the engine's reader is tested in
// packages/engine/src/model/gguf-corruption.native.spec.ts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType, GgufType } from './constants';
import { readGgufHeader } from './reader';

const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const u64 = (v: bigint | number) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};
const str = (s: string) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
const pair = (key: string, type: GgufType, value: Buffer) => Buffer.concat([str(key), u32(type), value]);
/** An array value: element type, count, elements. */
const arr = (elem: GgufType, n: bigint | number, items: Buffer) => Buffer.concat([u32(elem), u64(n), items]);

/** A GGUF v3 image: the pairs, one F32 tensor [4] at data offset 0, its 16 bytes. */
function image(pairs: Buffer[], tensor = Buffer.concat([str('t.weight'), u32(1), u64(4), u32(GgmlType.F32), u64(0)])): Buffer {
  const head = Buffer.concat([Buffer.from('GGUF'), u32(3), u64(1), u64(pairs.length), ...pairs, tensor]);
  return Buffer.concat([head, Buffer.alloc(Math.ceil(head.length / 32) * 32 - head.length), Buffer.alloc(16, 1)]);
}

describe('readGgufHeader on corrupt files', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gguf-reader-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'm.gguf');
  const read = (img: Buffer) => {
    fs.writeFileSync(file, img);
    return () => readGgufHeader(file);
  };
  const ints = pair('a.i32', GgufType.ARRAY, arr(GgufType.INT32, 4, Buffer.alloc(16)));

  it('reads the well-formed image', () => {
    const h = readGgufHeader((fs.writeFileSync(file, image([pair('general.alignment', GgufType.UINT32, u32(32)), ints])), file));
    expect(h.alignment).toBe(32);
    expect(h.kv.get('a.i32')?.value).toEqual([0, 0, 0, 0]);
    expect(h.tensors).toEqual([expect.objectContaining({ name: 't.weight', shape: [4], bytes: 16, fileOffset: h.dataOffset })]);
  });

  it('refuses an array count the file cannot hold before allocating for it (2^31, 2^32, 2^53 - 1)', () => {
    for (const n of [2n ** 31n, 2n ** 32n, 2n ** 53n - 1n, 2n ** 64n - 1n])
      expect(read(image([pair('a.i32', GgufType.ARRAY, arr(GgufType.INT32, n, Buffer.alloc(16)))]))).toThrow(
        new RegExp(`^${file}: GGUF array count ${n} at offset 45 is impossible: elements of type INT32 take at least 4 bytes each but only \\d+ bytes remain`),
      );
    // Strings take at least their 8-byte length, nested arrays their type and count.
    expect(read(image([pair('a.s', GgufType.ARRAY, arr(GgufType.STRING, 2n ** 40n, Buffer.alloc(0)))]))).toThrow(/array count 1099511627776 at offset 43 is impossible: elements of type STRING take at least 8 bytes/);
  });

  it('refuses arrays nested deeper than 16 levels without exhausting the stack', () => {
    // depth - 1 arrays of one array each, then an empty u8 array.
    const nested = (depth: number) => {
      const v = Buffer.alloc(12 * depth);
      for (let i = 0; i < depth - 1; i++) {
        v.writeUInt32LE(GgufType.ARRAY, 12 * i);
        v.writeBigUInt64LE(1n, 12 * i + 4);
      }
      return image([pair('a.nest', GgufType.ARRAY, v)]);
    };
    expect(read(nested(16))).not.toThrow();
    expect(read(nested(18))).toThrow(/GGUF arrays nested deeper than 16 levels at offset \d+/);
    expect(read(nested(100_000))).toThrow(/GGUF arrays nested deeper than 16 levels/);
  });

  it('refuses a tensor of 0 or more than 4 dimensions, and a general.alignment that is not a uint32 power of two', () => {
    for (const nd of [0, 5, 2 ** 32 - 1])
      expect(read(image([ints], Buffer.concat([str('t.weight'), u32(nd), u64(4), u32(GgmlType.F32), u64(0)])))).toThrow(`${file}: tensor 't.weight' has ${nd} dimensions (must be 1..4)`);
    for (const a of [0, 3, 48]) expect(read(image([pair('general.alignment', GgufType.UINT32, u32(a))]))).toThrow(`${file}: general.alignment is ${a} (type 4): must be a uint32 power of two`);
    expect(read(image([pair('general.alignment', GgufType.INT32, u32(32))]))).toThrow(`${file}: general.alignment is 32 (type 5): must be a uint32 power of two`);
  });
});
