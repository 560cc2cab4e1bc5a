// Our writer's files through the native core's GGUF reader (the one the engine loads models with).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { native } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { GgmlType, GgufType } from './constants';
import { readGgufHeader, readGgufTensorBytes } from './reader';
import { GgufWriter, kv } from './writer';

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-gguf-native-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const plain = (v: unknown): unknown =>
  ArrayBuffer.isView(v) ? Array.from(v as unknown as ArrayLike<unknown>) : Array.isArray(v) ? v.map(plain) : v;

describe('native openGguf reads what GgufWriter writes', () => {
  it('every value type and a non-default alignment', () => {
    const file = path.join(dir, 'types.gguf');
    const w = new GgufWriter(file, { alignment: 128 });
    w.set('t.u8', kv.u8(200))
      .set('t.i16', kv.i16(-300))
      .set('t.u32', kv.u32(4_000_000_000))
      .set('t.i32', kv.i32(-5))
      .set('t.f32', kv.f32(0.5))
      .set('t.f64', kv.f64(0.1))
      .set('t.bool', kv.bool(false))
      .set('t.str', kv.str('ünï 🙂'))
      .set('t.u64', kv.u64(2n ** 60n))
      .set('t.i64', kv.i64(-42))
      .set('a.i32', kv.arr(GgufType.INT32, [1, -2, 3]))
      .set('a.f32', kv.arr(GgufType.FLOAT32, [0.25, 4]))
      .set('a.str', kv.arr(GgufType.STRING, ['x', 'y z', '']))
      .set('a.bool', kv.arr(GgufType.BOOL, [true, false]));
    w.addTensor({ name: 'a', shape: [8, 2], type: GgmlType.F32 }).addTensor({ name: 'b', shape: [32], type: GgmlType.Q8_0 });
    w.writeTensorData('a', new Uint8Array(64).fill(1));
    w.writeTensorData('b', new Uint8Array(34).fill(2));
    w.finish();

    const g = native().openGguf(file);
    try {
      expect(g.version).toBe(3);
      expect(g.alignment).toBe(128);
      const m = g.metadata;
      expect(m['t.u8']).toBe(200);
      expect(m['t.i16']).toBe(-300);
      expect(m['t.u32']).toBe(4_000_000_000);
      expect(m['t.i32']).toBe(-5);
      expect(m['t.f32']).toBe(0.5);
      expect(m['t.f64']).toBe(0.1);
      expect(m['t.bool']).toBe(false);
      expect(m['t.str']).toBe('ünï 🙂');
      expect(BigInt(m['t.u64'] as bigint)).toBe(2n ** 60n);
      expect(Number(m['t.i64'])).toBe(-42);
      expect(plain(m['a.i32'])).toEqual([1, -2, 3]);
      expect(plain(m['a.f32'])).toEqual([0.25, 4]);
      expect(plain(m['a.str'])).toEqual(['x', 'y z', '']);
      expect(plain(m['a.bool'])).toEqual([true, false]);
      expect(g.tensors.map((t) => [t.name, t.type, t.dims])).toEqual([
        ['a', GgmlType.F32, [8, 2]],
        ['b', GgmlType.Q8_0, [32]],
      ]);
      expect(Array.from(g.tensorData('b'))).toEqual(new Array(34).fill(2));
    } finally {
      g.close();
    }
  });

  it.each(['tiny-qwen2moe', 'tiny-mixtral'])('%s: tensor table, offsets and bytes agree with our reader', (preset) => {
    const file = path.join(dir, `${preset}.gguf`);
    writeModel({ config: getPreset(preset).config, fileType: 'F16', seed: 4, out: file });
    const ours = readGgufHeader(file);
    const g = native().openGguf(file);
    try {
      expect(g.dataOffset).toBe(ours.dataOffset);
      expect(g.tensors.map((t) => [t.name, t.type, t.dims, t.offset, t.nbytes])).toEqual(
        ours.tensors.map((t) => [t.name, t.type, t.shape, t.fileOffset, t.bytes]),
      );
      expect(Object.keys(g.metadata).sort()).toEqual([...ours.kv.keys()].sort());
      expect((g.metadata['tokenizer.ggml.tokens'] as string[]).length).toBe(getPreset(preset).config.vocabSize);
      for (const t of ours.tensors.slice(0, 6)) {
        expect([t.name, Buffer.from(g.tensorData(t.name)).equals(readGgufTensorBytes(file, t))]).toEqual([t.name, true]);
      }
    } finally {
      g.close();
    }
  });
});
