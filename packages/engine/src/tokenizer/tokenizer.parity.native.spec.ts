// Parity with llama.cpp itself (through the node-llama-cpp devDependency, in a child process) on
// seeded random text: tokenization with and without special-token parsing, detokenization of
// random ids, token attributes, end-of-generation tokens and special ids, for every fixture
// vocabulary, and for the WordPiece ("bert") vocabulary of the project's own tiny-bert, the PLaMo 2
// ("plamo2") one of tiny-plamo2, the RWKV world ("rwkv") one of tiny-rwkv6, T5-style unigram
// ("t5") ones, without and with a precompiled charsmap, and a HybridDNA one ("hybriddna": Llama 3's
// BPE plus DNA 6-mers, DNA_TEXTS more texts of <dna> sequences) (no fixture has any of them).
// Skipped where node-llama-cpp is not installed.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { native } from '../native';
import { tempDir, writeTestModel } from '../testing';
import { fixtureVocabs } from './test-vocabs';
import { PRE_TOKENIZER_NAMES, preTokenizerByName, preTokenizerRegexes } from './pre-tokenizers';
import { Tokenizer } from './tokenizer';
import { TokenAttr } from './vocab';

interface RefResult {
  tokenize: number[][];
  tokenizeSpecial: number[][];
  detokenize: string[];
  detokenizeSpecial: string[];
  attrs: number[];
  eog: number[];
  bos: number;
  eos: number;
  eot: number;
  nl: number;
  addBos: boolean;
  addEos: boolean;
}

const N_TEXTS = 60;

let haveReference = true;
try {
  require.resolve('node-llama-cpp');
} catch {
  haveReference = false;
}

/**
 * RWKV world extras: text that looks like the escapes the vocabulary stores, control bytes,
 * token texts (<s>, [PADn]) and characters no token starts with beyond their first byte.
 */
/**
 * Unigram with the writer's NFKC-like charsmap (tools/src/models/charsmap.ts): its sources alone,
 * after each other and cut short (a prefix that is no source: "\u1100" of "\u1100\u1161"), nested
 * ones ("ｶ" in "ｶﾞ", "\u1100\u1161" in "\u1100\u1161\u11a8"), what they normalize to, whitespace it maps to spaces
 * and characters it removes, and the user-defined tokens <br> and при with their prefixes and text
 * that starts like them (llama.cpp keeps the input as it is as far as it follows a user-defined
 * token's text, even into the middle of a character, and puts U+FFFD for each byte left of that
 * character: with при, every character whose first byte is п's, и + U+0306 too, which the charsmap
 * would make й).
 */
const CHARSMAP_WORDS = [
  'ﬁ', 'ﬃ', 'ﬄx', 'ﬆ', '①', '⑩', '⑳', '⑴', '²', '½', 'Ａ', 'ｚ', '！', 'Ｈｅｌｌｏ', '\u3000', '\u00a0', '\u2003', '…', '‥', '™', '㍿', '㎏', '¨', '´',
  'ｶﾞ', 'ｶ', 'ﾞ', 'ﾊﾟ', '𝐀𝐁', '𝟏', 'e\u0301', 'e\u0301\u0301', 'Ａ\u0301', 'ﬁ\u0301', '\u1100\u1161', '\u1100\u1161\u11a8', '\u1100', '\u1103\u1167',
  '\u200b', '\u00ad', '\ufeff', '\t', '\n', '\r\n', ' \t ', '<br>', '<b', '<brx', 'при', 'пр', 'прив', 'пе\u0308', 'при\u0306', 'и\u0306', 'е\u0308', 'й', 'fi', '1', '...', 'ガ', '가',
];

const RWKV_WORDS = ['\\x41', '\\n', '\\', '\\\\', "\\'", '\\t\t', '\x00', '\x07', '\x1b[0m', '\x7f', '\r\n', '<s>', '[PAD1021]', '龘', '𝔘𝔫', 'é', '中文', '🦙🚀', '"\'', "'s"];

/**
 * HybridDNA texts: <dna>…</dna> around DNA of every length (k-mers the vocabulary has, random ACGT,
 * lowercase, N, short tails that pad with A), unclosed, empty, nested and stray tags, the tags cut
 * short, and inside the sequence spaces, newlines, digits, non-ASCII characters (the 6-mers are
 * byte slices: a k-mer can end inside a character) and special tokens, around ordinary text.
 */
const N_DNA_TEXTS = 80;
function dnaTexts(tok: Tokenizer, n: number, seed: number): string[] {
  let s = seed;
  const rnd = () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  const pick = <T>(a: readonly T[]): T => a[Math.floor(rnd() * a.length)];
  const v = tok.vocab;
  const kmers = Array.from({ length: v.nTokens }, (_, i) => v.tokenText(i)).filter((t) => /^[ACGT]{6}$/.test(t));
  const specials = v.specialTokenIds.map((id) => v.tokenText(id));
  const around = ['Hello', ' world', ' ', '\n', '\n\n', '  \t', '42', ' 3.14', 'ACGT', ' CCCCCC', 'gattaca', "don't", 'é', '中文', '🦙', '<dn', '</dn', 'dna>', '<dna', '<DNA>'];
  const inside = ['N', 'NNNN', 'n', ' ', '\n', '\t', '7', '42', 'é', '中', '🦙', 'ß', 'ACGTé', 'U', 'X', '-', '<dn', '</dn', '</dna', '<dna>', '<|begin_of_text|>'];
  const seq = () => {
    let d = '';
    for (let k = Math.floor(rnd() * 8); k > 0; k--) {
      const r = rnd();
      if (r < 0.35) d += pick(kmers);
      else if (r < 0.5) d += pick(kmers).toLowerCase();
      else if (r < 0.8) for (let q = Math.floor(rnd() * 14); q > 0; q--) d += pick(['A', 'C', 'G', 'T', 'a', 'c', 'g', 't']);
      else d += pick(inside);
    }
    return d;
  };
  const texts: string[] = [];
  for (let t = 0; t < n; t++) {
    let text = '';
    for (let k = 1 + Math.floor(rnd() * 4); k > 0; k--) {
      const r = rnd();
      if (r < 0.6) text += '<dna>' + seq() + (rnd() < 0.85 ? '</dna>' : '');
      else if (r < 0.8) text += pick(around);
      else if (r < 0.9) text += pick(specials);
      else text += seq();
    }
    texts.push(text);
  }
  return texts;
}

/** Seeded text mixing scripts, spaces, digits, contractions, special-token text and token pieces. */
function randomTexts(tok: Tokenizer, n: number, seed: number, extraWords: readonly string[] = []): { texts: string[]; ids: number[][] } {
  let s = seed;
  const rnd = () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  const pick = <T>(a: readonly T[]): T => a[Math.floor(rnd() * a.length)];
  const pools = [
    'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~',
    '    \t\n\n\r', 'éèàçñüößÀÉÎÕÜ', 'αβγδΩΣπ', 'привет мир', '中文字符测试你好世界', '한국어텍스트', 'ひらがなカタカナ',
    '😀🙂👍🏽🚀🦙', '\u0301\u0308\u200d\u00a0\u3000\u2028\u0085\ufeff', 'مرحبا', 'नमस्ते', 'สวัสดี', '½¼①²³', '…—–“”‘’«»',
  ].map((p) => Array.from(p));
  const words = ["'s", "'t", "'RE", "'Ve", "'ll", "'D", 'Hello', ' world', '  ', '\n\n', ' \n ', '123456789', '3.14', '...', "don't", '<|', '|>', '▁', ...extraWords];
  const v = tok.vocab;
  const specials = v.specialTokenIds.map((id) => v.tokenText(id));
  const texts: string[] = [];
  const ids: number[][] = [];
  for (let t = 0; t < n; t++) {
    let text = '';
    const len = Math.floor(rnd() * 30);
    for (let k = 0; k < len; k++) {
      const r = rnd();
      if (r < 0.5) {
        const p = pick(pools);
        for (let q = 1 + Math.floor(rnd() * 4); q > 0; q--) text += pick(p);
      } else if (r < 0.75) text += pick(words);
      else if (r < 0.85 && specials.length) text += pick(specials);
      else text += tok.detokenize([Math.floor(rnd() * v.nTokens)], { special: rnd() < 0.3 });
    }
    texts.push(text);
    ids.push(Array.from({ length: Math.floor(rnd() * 12) }, () => Math.floor(rnd() * v.nTokens)));
  }
  return { texts, ids };
}

const describeIf = haveReference ? describe : describe.skip;

/**
 * llama-tokenizer-ref.mjs on `jobs`, in one child process (loading llama.cpp takes seconds), through
 * a job file; its answer is stdout's last line (llama.cpp prints its kv overrides before it).
 */
function runReference(jobs: unknown[]): RefResult[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-tok-'));
  try {
    const jobFile = path.join(dir, 'jobs.json');
    fs.writeFileSync(jobFile, JSON.stringify(jobs));
    const stdout = execFileSync(process.execPath, [path.join(__dirname, 'llama-tokenizer-ref.mjs'), jobFile], {
      env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' },
      maxBuffer: 512 << 20,
      stdio: ['ignore', 'pipe', 'ignore'],
    }).toString('utf8');
    return JSON.parse(stdout.slice(stdout.lastIndexOf('\n') + 1)) as RefResult[];
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Where kail's tokenization of each text, without and with special-token parsing, differs from llama.cpp's. */
function tokenizeMismatches(tok: Tokenizer, texts: string[], ref: RefResult): unknown[] {
  const mismatches: unknown[] = [];
  texts.forEach((text, i) => {
    for (const [parseSpecial, want] of [
      [false, ref.tokenize[i]],
      [true, ref.tokenizeSpecial[i]],
    ] as const) {
      const got = tok.tokenize(text, { addSpecial: false, parseSpecial });
      if (got.join(' ') !== want.join(' ')) mismatches.push({ text, parseSpecial, got, want });
    }
  });
  return mismatches;
}

describeIf('parity with llama.cpp (node-llama-cpp) on random text', () => {
  const genDir = tempDir('kail-tok-wpm-');
  afterAll(() => fs.rmSync(genDir, { recursive: true, force: true }));
  // (tiny-plamo2: PLaMo 2's own vocabulary kind, tokenizer.ggml.model "plamo2"; tiny-rwkv6: RWKV world, "rwkv";
  // tiny-llama with the writer's T5-style unigram vocabularies, "t5", llama.cpp's UGM without and with a charsmap,
  // and with its HybridDNA one, "hybriddna": 6-mers inside <dna> tags through the marked k-mer tokens.)
  const vocabs = [
    ...fixtureVocabs(),
    writeTestModel(genDir, 'tiny-bert', 'Q8_0'),
    writeTestModel(genDir, 'tiny-plamo2', 'Q8_0'),
    writeTestModel(genDir, 'tiny-rwkv6', 'Q8_0'),
    writeTestModel(genDir, 'tiny-llama', 'Q8_0', 1, ['--vocab-kind', 'ugm']),
    writeTestModel(genDir, 'tiny-llama', 'Q8_0', 1, ['--vocab-kind', 'ugm-charsmap']),
    writeTestModel(genDir, 'tiny-llama', 'Q8_0', 1, ['--vocab-kind', 'hybriddna']),
  ];
  const cases: { file: string; tok: Tokenizer; texts: string[]; ids: number[][]; ref: RefResult }[] = [];

  beforeAll(() => {
    for (const file of vocabs) {
      const gguf = native().openGguf(file, { mapData: false });
      try {
        const tok = Tokenizer.fromMetadata(gguf.metadata);
        const extra = tok.vocab.type === 'rwkv' ? RWKV_WORDS : tok.vocab.precompiledCharsmap ? CHARSMAP_WORDS : [];
        const c = randomTexts(tok, N_TEXTS, 12345, extra);
        if (tok.vocab.model === 'hybriddna') c.texts.push(...dnaTexts(tok, N_DNA_TEXTS, 4242));
        cases.push({ file, tok, ...c, ref: undefined as unknown as RefResult });
      } finally {
        gguf.close();
      }
    }
    // one child process for all vocabularies
    runReference(cases.map((c) => ({ model: c.file, nVocab: c.tok.nTokens, texts: c.texts, ids: c.ids }))).forEach((r, i) => (cases[i].ref = r));
  }, 600_000);

  it.each(vocabs.map((f, i) => [path.basename(f), i]))('%s', (_name, index) => {
    const { tok, texts, ids, ref } = cases[index];
    const v = tok.vocab;
    const mismatches = tokenizeMismatches(tok, texts, ref);
    ids.forEach((seq, i) => {
      for (const [special, want] of [
        [false, ref.detokenize[i]],
        [true, ref.detokenizeSpecial[i]],
      ] as const) {
        const got = tok.detokenize(seq, { special });
        if (got !== want) mismatches.push({ ids: seq, special, got, want });
      }
    });
    expect(mismatches).toEqual([]);
    if (v.model === 'hybriddna') {
      // the DNA texts reach llama.cpp's k-mer path (154 marked k-mers and 293 <oov>), without special parsing
      // only: with it <dna> is split off as a control token and its sequence is plain BPE (no k-mer ids)
      const oov = v.textToToken('<oov>')!;
      const kmerCount = (seqs: number[][]) => [seqs.flat().filter((id) => id > oov).length, seqs.flat().filter((id) => id === oov).length];
      const [kmers, oovs] = kmerCount(ref.tokenize);
      expect(kmers).toBeGreaterThan(100);
      expect(oovs).toBeGreaterThan(50);
      expect(kmerCount(ref.tokenizeSpecial)[0]).toBe(0);
    }

    const attrs = Array.from({ length: v.nTokens }, (_, i) => v.tokenAttr(i));
    expect(attrs.filter((a, i) => a !== ref.attrs[i]).length).toBe(0);
    expect(v.eogIds).toEqual(ref.eog);
    // node-llama-cpp reports BOS/EOS only when they are control tokens
    const control = (id: number | null) => (id !== null && v.tokenAttr(id) & TokenAttr.CONTROL ? id : -1);
    expect({ bos: control(v.special.bos), eos: control(v.special.eos), eot: v.special.eot ?? -1, nl: tok.newline ?? -1 }).toEqual({
      bos: ref.bos,
      eos: ref.eos,
      eot: ref.eot,
      nl: ref.nl,
    });
    expect({ addBos: v.addBos, addEos: v.addEos }).toEqual({ addBos: ref.addBos, addEos: ref.addEos });
  });
});

// The tokenizer.ggml.pre names llama.cpp knows, one per distinct tokenization (regex list, byte
// encoding and the flags tokenize reads; names that differ only in detokenization's clean_spaces, or
// alias the same regexes, share one: each llama.cpp load of the vocabulary costs ~0.3 s), on the GPT-2
// fixture vocabulary with the name overridden (llama.cpp's kv overrides, kail's metadata): the same
// merges through each pre-tokenizer. "whitespace" runs with tokenizer.ggml.model "whitespace" too,
// as jina-embeddings-v2-base-zh has it (the session drops the whitespace): through the plain BPE
// session its raw-UTF-8 pieces keep the spaces, which llama.cpp's find_bpe_rank asserts a
// byte-level vocabulary never gives it, aborting.
const gpt2Fixture = fixtureVocabs().find((f) => path.basename(f) === 'ggml-vocab-gpt-2.gguf');
const describePre = haveReference && gpt2Fixture ? describe : describe.skip;

describePre('parity with llama.cpp for every pre-tokenizer (GPT-2 vocabulary, tokenizer.ggml.pre overridden)', () => {
  const seen = new Set<string>();
  const names = PRE_TOKENIZER_NAMES.filter((n) => {
    const d = preTokenizerByName(n);
    const key = JSON.stringify([preTokenizerRegexes(d.type), d.ignoreMerges, d.addBos, d.escapeWhitespaces, d.noBos]);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  const cases: { tok: Tokenizer; texts: string[]; ref: RefResult }[] = [];

  beforeAll(() => {
    const gguf = native().openGguf(gpt2Fixture!, { mapData: false });
    let metadata: Record<string, unknown>;
    try {
      metadata = { ...gguf.metadata };
    } finally {
      gguf.close();
    }
    const overrides = (pre: string) => (pre === 'whitespace' ? { model: pre, pre } : { pre });
    for (const [i, pre] of names.entries()) {
      const o = overrides(pre);
      const tok = Tokenizer.fromMetadata({ ...metadata, 'tokenizer.ggml.pre': o.pre, 'tokenizer.ggml.model': o.model ?? metadata['tokenizer.ggml.model'] });
      cases.push({ tok, texts: randomTexts(tok, 30, 777 + i).texts, ref: undefined as unknown as RefResult });
    }
    runReference(names.map((pre, i) => ({ model: gpt2Fixture, nVocab: 0, texts: cases[i].texts, ids: [], metadataOverrides: { tokenizer: { ggml: overrides(pre) } } }))).forEach((r, i) => (cases[i].ref = r));
  }, 600_000);

  it.each(names.map((n, i) => [n, i]))('%s', (_name, index) => {
    const { tok, texts, ref } = cases[index];
    expect(tokenizeMismatches(tok, texts, ref).slice(0, 5)).toEqual([]);
    expect({ addBos: tok.vocab.addBos, addEos: tok.vocab.addEos, nl: tok.newline ?? -1 }).toEqual({ addBos: ref.addBos, addEos: ref.addEos, nl: ref.nl });
  });
});
