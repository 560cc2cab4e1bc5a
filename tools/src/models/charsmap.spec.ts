import { buildDoubleArray, buildPrecompiledCharsmap, nmtNfkcTable } from './charsmap';

/** The longest key prefix of `s` and its normalized string, read from `blob` as llama.cpp's normalize_prefix walks it. */
function lookup(blob: Uint8Array, s: Uint8Array): { length: number; normalized: string } {
  const dv = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
  const size = dv.getUint32(0, true);
  const unit = (i: number) => {
    if (i >= size / 4) throw new Error(`unit ${i} out of bounds`);
    return dv.getUint32(4 + 4 * i, true);
  };
  const base = (i: number) => ((unit(i) >>> 10) << ((unit(i) & (1 << 9)) >>> 6)) >>> 0;
  let index = base(0);
  let length = 0;
  let offset = 0;
  for (let p = 0; p < s.length && s[p] !== 0; p++) {
    index ^= s[p];
    if ((unit(index) & 0x800000ff) >>> 0 !== s[p]) break;
    const leaf = (unit(index) >>> 8) & 1;
    index ^= base(index);
    if (leaf) {
      length = p + 1;
      offset = unit(index) & 0x7fffffff;
    }
  }
  const strings = blob.subarray(4 + size);
  const end = strings.indexOf(0, offset);
  return { length, normalized: length ? Buffer.from(strings.subarray(offset, end)).toString('utf8') : '' };
}

describe('precompiled charsmap (SentencePiece normalizer, darts-clone double array)', () => {
  const table = nmtNfkcTable();
  const blob = buildPrecompiledCharsmap(table);
  const keys = new Map(table);

  it('is NFKC-like: full-width ASCII, ligatures, circled numbers, compositions, whitespace and removals', () => {
    for (const [s, n] of [['Ａ', 'A'], ['～', '~'], ['ﬁ', 'fi'], ['ﬃ', 'ffi'], ['①', '1'], ['⑳', '20'], ['\u00a0', ' '], ['\u3000', ' '], ['…', '...'], ['㍿', '株式会社'], ['¨', ' \u0308'], ['ｶﾞ', 'ガ'], ['e\u0301', 'é'], ['\u1100\u1161\u11a8', '각'], ['\n', ' '], ['\u200b', '']]) {
      expect([s, keys.get(s)]).toEqual([s, n]);
    }
  });

  it('lays out the blob as sentencepiece does: trie size, whole 256-unit blocks, NUL-terminated strings stored once', () => {
    const size = new DataView(blob.buffer, blob.byteOffset).getUint32(0, true);
    expect(size % 1024).toBe(0);
    const strings = Buffer.from(blob.subarray(4 + size)).toString('utf8').split('\0');
    expect(strings.pop()).toBe('');
    expect(new Set(strings).size).toBe(strings.length);
    expect(new Set(strings)).toEqual(new Set(table.map(([, n]) => n)));
  });

  it('finds every key, and the longest key prefix of any other text', () => {
    for (const [s, n] of table) expect([s, lookup(blob, Buffer.from(s))]).toEqual([s, { length: Buffer.byteLength(s), normalized: n }]);
    const pool = ['a', 'e', '\u0301', 'ﬁ', 'Ａ', '\u1100', '\u1161', '\u11a8', 'x', 'ｶ', 'ﾞ', '①', '😀', 'é', '\n', ' '];
    const bad: string[] = [];
    for (const a of pool) for (const b of pool) for (const c of pool) {
      const s = a + b + c;
      let want = { length: 0, normalized: '' };
      for (let k = 1; k <= s.length; k++) if (keys.has(s.slice(0, k))) want = { length: Buffer.byteLength(s.slice(0, k)), normalized: keys.get(s.slice(0, k))! };
      const got = lookup(blob, Buffer.from(s));
      if (got.length !== want.length || got.normalized !== want.normalized) bad.push(s);
    }
    expect(bad).toEqual([]);
  });

  it('keeps every walk, matching or not, inside the array', () => {
    for (let x = 1; x < 256; x++) for (let y = 1; y < 256; y++) lookup(blob, Uint8Array.of(x, y, 0x80, 0xbf, 0xa0));
  });

  it('refuses empty keys, keys with NUL, duplicates and values of 2^31', () => {
    expect(() => buildDoubleArray([{ key: new Uint8Array(0), value: 0 }])).toThrow(/non-empty/);
    expect(() => buildDoubleArray([{ key: Uint8Array.of(0x41, 0), value: 0 }])).toThrow(/NUL/);
    expect(() => buildDoubleArray([{ key: Uint8Array.of(0x41), value: 0 }, { key: Uint8Array.of(0x41), value: 1 }])).toThrow(/duplicate/);
    expect(() => buildDoubleArray([{ key: Uint8Array.of(0x41), value: 2 ** 31 }])).toThrow(/out of range/);
  });
});
