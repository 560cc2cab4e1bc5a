// Byte-level corruption of a model file (the semantic fuzz, tools/src/fuzz/semantic-fuzz.ts, edits
// values; this corrupts the file's structure): every corrupt file is refused with a KAIL_E_* error
// that names the problem (and, for the GGUF reader's refusals, the file), never a crash, a hang or a
// huge allocation. Fixed cases for each structural field, then seeded random corruptions: parsed
// in-process, a few loaded.
import fs from 'node:fs';
import path from 'node:path';

import { tempDir, writeTestModel } from '../testing';
import { EngineModel, openGgufMetadata } from './model';

/** Where a GGUF file's structural fields lie (little-endian v3: header, key/value pairs, tensor table). */
interface Layout {
  kvs: { key: string; keyLenAt: number; typeAt: number; valueAt: number; start: number; end: number }[];
  tensors: { name: string; nDimsAt: number; dimsAt: number[]; typeAt: number; offsetAt: number; start: number; end: number }[];
  /** u64 and u32 fields a corruption may set: [offset, size]. */
  fields: [number, 4 | 8][];
  kvEnd: number;
  tableEnd: number;
  dataStart: number;
}

const SCALAR_BYTES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

function layoutOf(b: Buffer): Layout {
  let p = 24;
  const fields: [number, 4 | 8][] = [[4, 4], [8, 8], [16, 8]];
  const str = () => {
    fields.push([p, 8]);
    const n = Number(b.readBigUInt64LE(p));
    p += 8 + n;
    return b.toString('utf8', p - n, p);
  };
  const value = (type: number): void => {
    if (type === 8) return void str();
    if (type !== 9) return void (p += SCALAR_BYTES[type]);
    const et = b.readUInt32LE(p);
    fields.push([p, 4], [p + 4, 8]);
    const n = Number(b.readBigUInt64LE(p + 4));
    p += 12;
    for (let i = 0; i < n; i++) {
      // (A vocabulary's string lengths: the first few are enough.)
      if (et === 8 && i >= 16) p += 8 + Number(b.readBigUInt64LE(p));
      else value(et);
    }
  };
  const kvs: Layout['kvs'] = [];
  for (let i = 0n, n = b.readBigUInt64LE(16); i < n; i++) {
    const start = p;
    const key = str();
    const typeAt = p;
    fields.push([p, 4]);
    p += 4;
    value(b.readUInt32LE(typeAt));
    kvs.push({ key, keyLenAt: start, typeAt, valueAt: typeAt + 4, start, end: p });
  }
  const kvEnd = p;
  const tensors: Layout['tensors'] = [];
  for (let i = 0n, n = b.readBigUInt64LE(8); i < n; i++) {
    const start = p;
    const name = str();
    const nDimsAt = p;
    const dimsAt = Array.from({ length: b.readUInt32LE(p) }, (_, j) => p + 4 + 8 * j);
    p += 4 + 8 * dimsAt.length;
    const typeAt = p;
    p += 12;
    fields.push([nDimsAt, 4], ...dimsAt.map((d): [number, 8] => [d, 8]), [typeAt, 4], [typeAt + 4, 8]);
    tensors.push({ name, nDimsAt, dimsAt, typeAt, offsetAt: typeAt + 4, start, end: p });
  }
  const al = kvs.find((k) => k.key === 'general.alignment');
  const a = al ? b.readUInt32LE(al.valueAt) : 32;
  return { kvs, tensors, fields, kvEnd, tableEnd: p, dataStart: Math.ceil(p / a) * a };
}

/** xorshift32: the random corruptions are the same on every run. */
function rng(seed: number): (n: number) => number {
  let s = seed >>> 0 || 1;
  return (n) => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return Math.floor((s / 2 ** 32) * n);
  };
}

/**
 * A corrupt copy: its first bytes (the header, the tensor table, the start of the data), then the
 * original's bytes up to `len` (a corruption of the first 64 KiB copies no more than that).
 */
interface Corrupt {
  head: Buffer;
  len: number;
}
const HEAD = 65536;

const HUGE64 = [0n, 1n, 2n ** 31n, 2n ** 32n - 1n, 2n ** 63n, 2n ** 64n - 1n];
const HUGE32 = [0, 1, 2 ** 31, 2 ** 32 - 1];

describe('corrupt model files', () => {
  const dir = tempDir('kail-gguf-corrupt-');
  let file: string;
  let orig: Buffer;
  let L: Layout;
  beforeAll(() => {
    file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    orig = fs.readFileSync(file);
    L = layoutOf(orig);
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  let n = 0;
  /**
   * The corrupt copy as a file. Only the header and the tensor table matter to the parser, so unless
   * `full`, the rest is a hole of the right length (a sparse file: fast to write).
   */
  const write = (c: Corrupt, full = false): string => {
    const p = path.join(dir, `c${n++ % 4}.gguf`);
    fs.writeFileSync(p, c.head.subarray(0, c.len));
    if (c.len > c.head.length) {
      if (full) fs.appendFileSync(p, orig.subarray(c.head.length, c.len));
      else fs.truncateSync(p, c.len);
    }
    return p;
  };
  const edited = (edit: (b: Buffer) => void): Corrupt => {
    const head = Buffer.from(orig.subarray(0, HEAD));
    edit(head);
    return { head, len: orig.length };
  };
  const truncated = (len: number): Corrupt => ({ head: orig.subarray(0, Math.min(len, HEAD)), len });
  const whole = (b: Buffer): Corrupt => ({ head: b, len: b.length });
  /** A parse's outcome: 'parsed', or the error's code (every refusal is checked to name its problem, and the GGUF reader's the file). */
  const parse = (p: string): string => {
    try {
      openGgufMetadata(p).close();
      return 'parsed';
    } catch (e) {
      const err = e as { code?: string; message: string };
      expect(err.code).toMatch(/^KAIL_E_(BAD_MODEL|UNSUPPORTED)$/);
      if (err.message.startsWith('GGUF:')) expect(err.message).toContain(p);
      return err.code!;
    }
  };
  const refusal = (b: Corrupt): string => {
    const p = write(b);
    try {
      openGgufMetadata(p).close();
    } catch (e) {
      expect((e as { code?: string }).code).toBe('KAIL_E_BAD_MODEL');
      expect((e as Error).message).toContain(p);
      return (e as Error).message;
    }
    throw new Error('the corrupt file parsed');
  };
  const kv = (key: string) => L.kvs.find((k) => k.key === key)!;

  it('refuses truncation inside the header, the metadata, the tensor table and the padding, naming the offset', () => {
    expect(refusal(truncated(3))).toMatch(/magic at offset 0 needs 4 bytes .*truncated/);
    expect(refusal(truncated(13))).toMatch(/tensor count at offset 8 needs 8 bytes/);
    const k = kv('tokenizer.ggml.tokens');
    expect(refusal(truncated(k.end - 100))).toMatch(/key 'tokenizer.ggml.tokens': (string element \d+|length of string element \d+) at offset \d+/);
    const t = L.tensors[L.tensors.length - 1];
    expect(refusal(truncated(t.typeAt + 2))).toContain(`tensor '${t.name}': type at offset ${t.typeAt} needs 4 bytes`);
    expect(refusal(truncated(L.tableEnd + 1))).toMatch(/data section start \d+ .* is past the end of the file/);
    expect(refusal(truncated(orig.length - 1))).toMatch(/extends past end of file/);
  });

  it('refuses counts and lengths of 2^31, 2^32-1, 2^63 and 2^64-1 before allocating for them', () => {
    const u64 = (at: number, v: bigint) => refusal(edited((b) => b.writeBigUInt64LE(v, at)));
    for (const v of [2n ** 31n, 2n ** 63n, 2n ** 64n - 1n]) {
      expect(u64(16, v)).toMatch(/metadata count \d+ at offset 16 is impossible/);
      expect(u64(8, v)).toMatch(/tensor count \d+ at offset 8 is impossible/);
      expect(u64(kv('general.architecture').keyLenAt, v)).toMatch(/key at offset \d+: length \d+ exceeds the \d+ bytes left/);
      expect(u64(kv('general.architecture').valueAt, v)).toMatch(/key 'general.architecture': string value at offset \d+: length \d+ exceeds/);
      expect(u64(kv('tokenizer.ggml.tokens').valueAt + 4, v)).toMatch(/key 'tokenizer.ggml.tokens': array count \d+ at offset \d+ is impossible/);
      expect(u64(kv('tokenizer.ggml.token_type').valueAt + 4, v)).toMatch(/key 'tokenizer.ggml.token_type': array count \d+ at offset \d+ is impossible/);
    }
    expect(u64(kv('tokenizer.ggml.tokens').valueAt + 12, 2n ** 32n - 1n)).toMatch(/key 'tokenizer.ggml.tokens': string element 0 at offset \d+: length 4294967295 exceeds/);
  });

  it('refuses bad tensor table entries: dimensions, types and data offsets', () => {
    const t = L.tensors.find((x) => x.name === 'blk.0.ffn_up_exps.weight')!;
    const u = L.tensors.find((x) => x.name === 'blk.0.ffn_down_exps.weight')!;
    const at = (off: number, v: number | bigint) => refusal(edited((b) => (typeof v === 'bigint' ? b.writeBigUInt64LE(v, off) : b.writeUInt32LE(v, off))));
    expect(at(t.nDimsAt, 0)).toContain(`tensor '${t.name}': n_dims 0 at offset ${t.nDimsAt} is out of range (must be 1..4)`);
    expect(at(t.nDimsAt, 5)).toContain('n_dims 5');
    expect(at(t.dimsAt[1], 0n)).toContain(`dimension 1 at offset ${t.dimsAt[1]} is 0 (must be > 0)`);
    expect(at(t.dimsAt[1], 2n ** 63n)).toMatch(/dimension 1 at offset \d+ is -\d+ \(must be > 0\)/);
    expect(at(t.dimsAt[2], 2n ** 62n)).toMatch(/element count or byte size overflows 64 bits/);
    expect(at(t.dimsAt[2], 2n ** 31n)).toMatch(/extends past end of file/);
    for (const v of [2 ** 31, 2 ** 32 - 1, 41 + 1000]) expect(at(t.typeAt, v)).toContain(`unknown tensor type id ${v} at offset ${t.typeAt}`);
    const off = (x: typeof t) => orig.readBigUInt64LE(x.offsetAt);
    expect(at(t.offsetAt, off(u))).toMatch(/data \[offset \d+\.\.\d+\) overlaps tensor/);
    expect(at(t.offsetAt, off(t) + 1n)).toMatch(/is not a multiple of the alignment 32/);
    expect(at(t.offsetAt, BigInt(orig.length))).toMatch(/extends past end of file/);
    expect(at(t.offsetAt, 2n ** 64n - 32n)).toMatch(/overflows 64 bits/);
  });

  it('refuses value type ids out of range, a bad alignment, duplicate keys and tensor names', () => {
    const k = kv('qwen3moe.block_count');
    for (const v of [13, 2 ** 32 - 1]) expect(refusal(edited((b) => b.writeUInt32LE(v, k.typeAt)))).toContain(`key 'qwen3moe.block_count': unknown value type id ${v} at offset ${k.typeAt}`);
    expect(refusal(edited((b) => b.writeUInt32LE(13, kv('tokenizer.ggml.tokens').valueAt)))).toMatch(/unknown array element type id 13/);
    const al = kv('general.alignment');
    for (const v of [0, 3, 2 ** 32 - 1]) expect(refusal(edited((b) => b.writeUInt32LE(v, al.valueAt)))).toContain(`key 'general.alignment': alignment ${v} at offset ${al.start} is not a power of two`);
    expect(refusal(edited((b) => b.writeUInt32LE(5, al.typeAt)))).toContain(`key 'general.alignment': type int32 at offset ${al.start}, expected uint32`);
    // One more key: a copy of block_count's first (the table moves; the data follows, realigned).
    const h = Buffer.from(orig.subarray(0, 24));
    h.writeBigUInt64LE(BigInt(L.kvs.length + 1), 16);
    const head = Buffer.concat([h, orig.subarray(k.start, k.end), orig.subarray(24, L.tableEnd)]);
    const dup = Buffer.concat([head, Buffer.alloc(Math.ceil(head.length / 32) * 32 - head.length), orig.subarray(L.dataStart)]);
    expect(refusal(whole(dup))).toMatch(/duplicate key 'qwen3moe.block_count' at offsets 24 and \d+/);
    // Tensor 5 renamed to tensor 4's name (same length: the layout stays).
    const [a, c] = [L.tensors[4], L.tensors.find((x, i) => i > 4 && x.name.length === L.tensors[4].name.length)!];
    expect(refusal(edited((b) => b.write(a.name, c.start + 8)))).toContain(`duplicate tensor name '${a.name}' in the tensor table`);
  });

  it('answers 400 seeded random corruptions with a parse or a clear refusal, and loads some of them', () => {
    const r = rng(20261206);
    const outcomes: Record<string, number> = {};
    const loaded: Record<string, number> = {};
    for (let i = 0; i < 400; i++) {
      let c: Corrupt;
      const kind = r(3);
      if (kind === 0) {
        // truncated: in the header, the metadata, the tensor table, the padding or the data
        const ends = [24, L.kvEnd, L.tableEnd, L.dataStart, orig.length];
        const j = r(5);
        const from = j === 0 ? 0 : ends[j - 1];
        c = truncated(from + r(ends[j] - from));
      } else if (kind === 1) {
        // 1-4 bytes flipped or overwritten in the first 64 KiB
        c = edited((b) => {
          for (let k = 1 + r(4); k > 0; k--) {
            const at = r(HEAD);
            b[at] = r(2) ? b[at] ^ (1 << r(8)) : r(256);
          }
        });
      } else {
        // a length, count, type, dimension or offset set to 0, 1 or a huge value
        const [at, size] = L.fields[r(L.fields.length)];
        const v = size === 8 ? HUGE64[r(HUGE64.length)] : HUGE32[r(HUGE32.length)];
        c = edited((b) => (typeof v === 'bigint' ? b.writeBigUInt64LE(v, at) : b.writeUInt32LE(v, at)));
      }
      const p = write(c);
      const o = parse(p);
      outcomes[o] = (outcomes[o] ?? 0) + 1;
      // Every 8th file that parses is loaded (its data written): it loads, or is refused clearly.
      if (o === 'parsed' && outcomes[o] % 8 === 1) {
        const full = write(c, true);
        let lo = 'loaded';
        try {
          EngineModel.load(full, { threads: 1, nCtx: 32 }).close();
        } catch (e) {
          lo = (e as { code?: string }).code ?? `no code: ${(e as Error).message}`;
          expect(lo).toMatch(/^KAIL_E_(BAD_MODEL|UNSUPPORTED)$/);
        }
        loaded[lo] = (loaded[lo] ?? 0) + 1;
      }
    }
    // Most corruptions are refused by the reader; the rest parse (bytes of a value, a vocabulary string).
    expect(outcomes.KAIL_E_BAD_MODEL).toBeGreaterThan(200);
    expect(Object.values(loaded).reduce((a, x) => a + x, 0)).toBeGreaterThan(3);
  }, 60_000);
});
