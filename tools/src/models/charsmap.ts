// SentencePiece's precompiled charsmap (normalizer_spec.precompiled_charsmap, which T5's converter
// copies to tokenizer.ggml.precompiled_charsmap), as sentencepiece's normalizer builder compiles it:
// a u32 (little-endian) byte size of the trie, the trie, then the normalized strings, each ended by
// a NUL. The trie is a darts-clone double array over the UTF-8 source strings (llama.cpp's
// xcda_array_view reads it): one u32 unit per position, packing the label of the edge into it (bits
// 0-7, LCHECK), whether the node ends a key (bit 8, LEAF) and the XOR offset of its children's block
// (bits 10-30, BASE); the children of a node at `pos` with offset `o` lie at pos ^ o ^ label, its
// value (the offset of its normalized string) at pos ^ o in a unit with bit 31 set.

/** An NFKC-like table as SentencePiece's nmt_nfkc builds it: NFKC, with whitespace controls as a space and zero-width characters removed. */
export const NMT_NFKC_SOURCES: readonly string[] = [
  // full-width ASCII, ideographic and other spaces
  ...Array.from({ length: 0x5e }, (_, i) => String.fromCharCode(0xff01 + i)),
  '\u3000', '\u00a0', '\u2003', '\u2009',
  // ligatures, circled and parenthesized numbers, super- and subscripts, fractions
  'ﬀ', 'ﬁ', 'ﬂ', 'ﬃ', 'ﬄ', 'ﬅ', 'ﬆ',
  ...Array.from({ length: 20 }, (_, i) => String.fromCharCode(0x2460 + i)),
  '⑴', '⒈', '¹', '²', '³', '⁴', '₁', '₂', '½', '¼', '¾',
  // compatibility forms: several characters out of one, spaces inside
  '…', '‥', '™', '℃', '№', 'Ⅻ', 'ⅳ', '㎏', '㍻', '㍿', '¨', '´', '¯', '\u212b', 'ℌ', 'ℯ',
  // half-width katakana, the voiced mark and their composition; 4-byte sources
  'ｶ', 'ﾞ', 'ｶﾞ', 'ﾊﾟ', '𝐀', '𝐁', '𝟏', '𝔘',
  // composition: sources of several characters, some sharing prefixes (with each other and with single-character sources)
  'e\u0301', 'a\u0308', 'o\u0302', 'n\u0303', 'A\u030a', 'Ａ\u0301', 'ﬁ\u0301', '\u1100\u1161', '\u1100\u1161\u11a8', '\u1103\u1167',
  'и\u0306', 'е\u0308',
];

/** nmt_nfkc's rules beyond NFKC. */
const NMT_EXTRA: readonly (readonly [string, string])[] = [
  ['\t', ' '], ['\n', ' '], ['\r', ' '], ['\u200b', ''], ['\u00ad', ''], ['\ufeff', ''],
];

/** Source -> normalized pairs of the table: NFKC of NMT_NFKC_SOURCES (stable across Unicode versions), then the nmt rules. */
export function nmtNfkcTable(): [string, string][] {
  const table: [string, string][] = NMT_NFKC_SOURCES.map((s) => [s, s.normalize('NFKC')]);
  for (const [s, n] of table) if (s === n) throw new Error(`charsmap source ${JSON.stringify(s)} normalizes to itself`);
  return [...table, ...NMT_EXTRA.map(([s, n]) => [s, n] as [string, string])];
}

interface TrieNode {
  children: Map<number, TrieNode>;
  value?: number;
}

const LEAF = 1 << 8;
const VALUE = 0x80000000;
/** darts-clone stores an offset below 2^21 as it is (larger ones are not needed here). */
const MAX_OFFSET = 1 << 21;

/**
 * A darts-clone double array of `entries` (byte strings without NUL -> values below 2^31), padded to
 * whole blocks of 256 units so that every lookup, matching or not, stays inside the array. Each
 * node's block (pos ^ offset) is its own, which makes a label check enough to tell a node's children
 * from the others.
 */
export function buildDoubleArray(entries: readonly { key: Uint8Array; value: number }[]): Uint32Array {
  const root: TrieNode = { children: new Map() };
  for (const { key, value } of entries) {
    if (key.length === 0 || key.includes(0)) throw new Error('double array keys are non-empty and hold no NUL');
    if (!Number.isInteger(value) || value < 0 || value >= VALUE) throw new Error(`double array value ${value} out of range`);
    let node = root;
    for (const b of key) {
      let next = node.children.get(b);
      if (!next) node.children.set(b, (next = { children: new Map() }));
      node = next;
    }
    if (node.value !== undefined) throw new Error(`duplicate double array key ${Buffer.from(key).toString('hex')}`);
    node.value = value;
  }
  const units: number[] = [0];
  const used: boolean[] = [true];
  const blocks = new Set<number>();
  const queue: [TrieNode, number][] = [[root, 0]];
  for (let qi = 0; qi < queue.length; qi++) {
    const [node, pos] = queue[qi];
    const labels = [...node.children.keys()].sort((a, b) => a - b);
    if (node.value !== undefined) labels.unshift(0);
    let block = 1;
    while (blocks.has(block) || labels.some((c) => used[block ^ c])) block++;
    if ((pos ^ block) >= MAX_OFFSET) throw new Error('double array too large');
    blocks.add(block);
    units[pos] = (units[pos] | ((pos ^ block) << 10) | (node.value !== undefined ? LEAF : 0)) >>> 0;
    if (node.value !== undefined) {
      units[block] = (node.value | VALUE) >>> 0;
      used[block] = true;
    }
    for (const [c, child] of node.children) {
      const at = block ^ c;
      units[at] = c;
      used[at] = true;
      queue.push([child, at]);
    }
  }
  const top = Math.max(units.length - 1, ...blocks);
  const out = new Uint32Array(Math.ceil((top + 1) / 256) * 256);
  units.forEach((u, i) => (out[i] = u ?? 0));
  return out;
}

/** The charsmap blob of `table` (source -> normalized), as sentencepiece's Builder::CompileCharsMap lays it out. */
export function buildPrecompiledCharsmap(table: readonly (readonly [string, string])[]): Uint8Array {
  const utf8 = (s: string) => new Uint8Array(Buffer.from(s, 'utf8'));
  // keys in byte order, each distinct normalized string stored once at its first use
  const pairs = table.map(([s, n]) => ({ key: utf8(s), norm: n })).sort((a, b) => Buffer.compare(a.key, b.key));
  const offsets = new Map<string, number>();
  const strings: number[] = [];
  const entries = pairs.map(({ key, norm }) => {
    let off = offsets.get(norm);
    if (off === undefined) {
      offsets.set(norm, (off = strings.length));
      strings.push(...utf8(norm), 0);
    }
    return { key, value: off };
  });
  const units = buildDoubleArray(entries);
  const blob = new Uint8Array(4 + units.length * 4 + strings.length);
  const dv = new DataView(blob.buffer);
  dv.setUint32(0, units.length * 4, true);
  units.forEach((u, i) => dv.setUint32(4 + 4 * i, u, true));
  blob.set(strings, 4 + units.length * 4);
  return blob;
}
