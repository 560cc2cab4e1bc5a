import { bpeMetadata, SPM_FIRST_PIECE, spmMetadata } from './test-vocabs';
import { Tokenizer } from './tokenizer';
import { TokenAttr, TokenType } from './vocab';

const byteId = (b: number) => 3 + b; // spmMetadata: <0xXX> follows <unk>, <s>, </s>

describe('SentencePiece vocabulary', () => {
  // ids from SPM_FIRST_PIECE: ▁ h i hi ▁hi a b c ab bc <|user|>
  const pieces = [
    { text: '\u2581', score: -5 },
    { text: 'h', score: -4 },
    { text: 'i', score: -4 },
    { text: 'hi', score: -2 },
    { text: '\u2581hi', score: -1 },
    { text: 'a', score: -4 },
    { text: 'b', score: -4 },
    { text: 'c', score: -4 },
    { text: 'ab', score: -1 },
    { text: 'bc', score: -0.5 },
    { text: '<|user|>', type: TokenType.CONTROL },
  ];
  const id = (text: string) => SPM_FIRST_PIECE + pieces.findIndex((p) => p.text === text);
  const tok = Tokenizer.fromMetadata(spmMetadata(pieces));

  it('adds BOS and a space prefix by default, and merges the best-scoring pair first', () => {
    expect(tok.tokenize('hi')).toEqual([1, id('▁hi')]);
    expect(tok.tokenize('hi', { addSpecial: false })).toEqual([id('▁hi')]);
    // "bc" (-0.5) beats "ab" (-1)
    const noPrefix = Tokenizer.fromMetadata(spmMetadata(pieces, { 'tokenizer.ggml.add_space_prefix': false }));
    expect(noPrefix.tokenize('abc', { addSpecial: false })).toEqual([id('a'), id('bc')]);
  });

  it('falls back to byte tokens for what the vocabulary lacks', () => {
    expect(tok.tokenize('hi€', { addSpecial: false })).toEqual([id('▁hi'), byteId(0xe2), byteId(0x82), byteId(0xac)]);
  });

  it('adds EOS when the model says so', () => {
    const t = Tokenizer.fromMetadata(spmMetadata(pieces, { 'tokenizer.ggml.add_eos_token': true }));
    expect(t.tokenize('hi')).toEqual([1, id('▁hi'), 2]);
    const noBos = Tokenizer.fromMetadata(spmMetadata(pieces, { 'tokenizer.ggml.add_bos_token': false }));
    expect(noBos.tokenize('hi')).toEqual([id('▁hi')]);
  });

  it('matches control-token text only with parseSpecial, and space-prefixes the text after it', () => {
    expect(tok.tokenize('<|user|>hi', { addSpecial: false, parseSpecial: true })).toEqual([id('<|user|>'), id('▁hi')]);
    const plain = tok.tokenize('<|user|>hi', { addSpecial: false });
    expect(plain).not.toContain(id('<|user|>'));
    expect(tok.detokenize(plain)).toBe('<|user|>hi');
  });

  it('strips spaces after special tokens for Phi-3, as llama.cpp does', () => {
    const phi = Tokenizer.fromMetadata(spmMetadata(pieces, { 'general.name': 'Phi3' }));
    expect(phi.vocab.tokenAttr(id('<|user|>')) & TokenAttr.RSTRIP).toBeTruthy();
    expect(phi.tokenize('<|user|>  hi', { addSpecial: false, parseSpecial: true })).toEqual([id('<|user|>'), id('▁hi')]);
    expect(tok.tokenize('<|user|>  hi', { addSpecial: false, parseSpecial: true })).toEqual([
      id('<|user|>'),
      id('▁'),
      id('▁'),
      id('▁hi'),
    ]);
  });

  it('detokenizes: drops the prefix space, turns byte tokens back into bytes, hides control tokens', () => {
    const ids = [1, id('▁hi'), byteId(0xe2), byteId(0x82), byteId(0xac), id('<|user|>')];
    expect(tok.detokenize(ids.slice(1))).toBe('hi€');
    // as in llama.cpp, the first token takes the prefix-space removal even when it renders as nothing
    expect(tok.detokenize(ids)).toBe(' hi€');
    expect(tok.detokenize(ids, { special: true })).toBe('<s> hi€<|user|>');
    expect(tok.detokenize(ids, { special: true, removeSpecial: true })).toBe(' hi€<|user|>');
    expect(tok.newline).toBe(byteId(0x0a));
    // A growing list's pieces: the first token's space dropped once, a byte split character
    // whole in the piece that completes it, the end-of-text token nothing, together detokenize's text.
    const grow = [id('▁hi'), byteId(0xe2), byteId(0x82), 2, byteId(0xac), id('▁hi')];
    const d = tok.createPrefixDecoder();
    const pieces = grow.map((_, i) => d.push(grow.slice(0, i + 1), i === grow.length - 1));
    expect(pieces).toEqual(['hi', '', '', '', '€', ' hi']);
    expect(pieces.join('')).toBe(tok.detokenize(grow));
    const cut = tok.createPrefixDecoder();
    // (An incomplete character at the end of the whole list: U+FFFD, as detokenize.)
    expect(cut.push(grow.slice(0, 2)) + cut.push(grow.slice(0, 3), true)).toBe(tok.detokenize(grow.slice(0, 3)));
  });
});

describe('byte-level BPE vocabulary', () => {
  // ids: bytes 0–255, then 256 he, 257 ll, 258 hell, 259 hello, 260 Ġw, 261 or, 262 bc
  const merges: [string, string][] = [
    ['h', 'e'],
    ['l', 'l'],
    ['he', 'll'],
    ['hell', 'o'],
    [' ', 'w'],
    ['o', 'r'],
    ['b', 'c'],
  ];
  const specials = [
    { text: '<|endoftext|>', type: TokenType.CONTROL },
    { text: '<|end|>', type: TokenType.CONTROL },
    { text: '<tool>', type: TokenType.USER_DEFINED },
  ];
  const meta = bpeMetadata(merges, specials, { 'tokenizer.ggml.bos_token_id': 263, 'tokenizer.ggml.eos_token_id': 263 });
  const tok = Tokenizer.fromMetadata(meta);
  const [EOT, END, TOOL] = [263, 264, 265];

  it('applies merges in rank order within each pre-tokenized word', () => {
    expect(tok.tokenize('hello world', { addSpecial: false })).toEqual([259, 260, 261, 0x6c, 0x64]);
    // rank 6 "b c" goes before any "a b" (which does not exist): a + bc
    expect(tok.tokenize('abc', { addSpecial: false })).toEqual([0x61, 262]);
  });

  it('spells unmerged text byte by byte in the GPT-2 alphabet', () => {
    // é = C3 A9: two byte tokens
    expect(tok.tokenize('é', { addSpecial: false })).toEqual([0xc3, 0xa9]);
  });

  it('splits special tokens out longest first, control ones only with parseSpecial, user-defined always', () => {
    expect(tok.tokenize('a<|endoftext|>b', { addSpecial: false, parseSpecial: true })).toEqual([0x61, EOT, 0x62]);
    expect(tok.tokenize('<|end|><|endoftext|>', { addSpecial: false, parseSpecial: true })).toEqual([END, EOT]);
    expect(tok.tokenize('a<|endoftext|>b', { addSpecial: false })).not.toContain(EOT);
    expect(tok.tokenize('x<tool>y', { addSpecial: false })).toEqual([0x78, TOOL, 0x79]);
  });

  it('adds BOS only where the pre-tokenizer or metadata asks for it', () => {
    expect(tok.tokenize('hello')).toEqual([259]); // gpt-2: no BOS
    const llama3 = Tokenizer.fromMetadata({ ...meta, 'tokenizer.ggml.pre': 'llama-bpe' });
    expect(llama3.tokenize('hello')).toEqual([EOT, 259]);
    const withEos = Tokenizer.fromMetadata({ ...meta, 'tokenizer.ggml.add_eos_token': true });
    expect(withEos.tokenize('hello')).toEqual([259, EOT]);
    const noBos = Tokenizer.fromMetadata({ ...meta, 'tokenizer.ggml.pre': 'llama-bpe', 'tokenizer.ggml.bos_token_id': undefined });
    // llama.cpp's default BPE BOS id (11) applies when the file names none
    expect(noBos.tokenize('hello')).toEqual([11, 259]);
    const glm = Tokenizer.fromMetadata({ ...meta, 'tokenizer.ggml.pre': 'chatglm-bpe', 'tokenizer.ggml.bos_token_id': undefined });
    expect(() => glm.tokenize('hello', { addSpecial: true })).not.toThrow();
    const glmBos = Tokenizer.fromMetadata({
      ...meta,
      'tokenizer.ggml.pre': 'chatglm-bpe',
      'tokenizer.ggml.bos_token_id': undefined,
      'tokenizer.ggml.add_bos_token': true,
    });
    expect(() => glmBos.tokenize('hello')).toThrow(/BOS/);
  });

  it('knows end-of-generation tokens', () => {
    expect(tok.isEog(EOT)).toBe(true);
    expect(tok.isEog(END)).toBe(true);
    expect(tok.isEog(TOOL)).toBe(false);
    expect(tok.vocab.special.eot).toBe(END); // detected by text: "<|end|>" comes before "<|endoftext|>"
  });

  it('detokenizes byte-level text, with llama.cpp space clean-up for GPT-2', () => {
    const ids = tok.tokenize('hello world , é !', { addSpecial: false });
    expect(tok.detokenize(ids)).toBe('hello world, é!');
    const qwen = Tokenizer.fromMetadata({ ...meta, 'tokenizer.ggml.pre': 'qwen2' });
    expect(qwen.detokenize(qwen.tokenize('hello world , é !', { addSpecial: false }))).toBe('hello world , é !');
    expect(tok.detokenize([EOT, 259])).toBe('hello');
    expect(tok.detokenize([EOT, 259], { special: true })).toBe('<|endoftext|>hello');
    expect(tok.newline).toBe(10); // "\n" is the byte token Ċ
  });

  it('renders preserved control tokens as their text, and only those', () => {
    expect(Buffer.from(tok.tokenToPiece(EOT)).toString()).toBe('');
    expect(Buffer.from(tok.tokenToPiece(EOT, { preserve: new Set([EOT]) })).toString()).toBe('<|endoftext|>');
    const d = tok.createStreamDecoder({ preserve: new Set([EOT]) });
    expect(d.push(259) + d.push(EOT) + d.flush()).toBe('hello<|endoftext|>');
  });

  it("decodes a growing list's pieces that together are detokenize's text, holding back what a space clean-up could change", () => {
    // (GPT-2 cleans spaces: " ," and " 're" lose theirs, " ' " its two, once what follows is known.)
    expect(tok.vocab.cleanSpaces).toBe(true);
    const ids = [...tok.tokenize("hi ' x , we 're é !", { addSpecial: false }), EOT, ...tok.tokenize(" 's", { addSpecial: false })];
    const want = tok.detokenize(ids);
    expect(want).toBe("hi'x, we're é!'s");
    // The list given at every pair of lengths, then whole.
    for (let i = 0; i <= ids.length; i++)
      for (let j = i; j <= ids.length; j++) {
        const d = tok.createPrefixDecoder();
        const pieces = [d.push(ids.slice(0, i)), d.push(ids.slice(0, j)), d.push(ids, true)];
        expect([i, j, pieces.join('')]).toEqual([i, j, want]);
        // (A piece holds no half character: é is two byte tokens.)
        expect(pieces.join('').includes('\ufffd')).toBe(false);
      }
    // (" we" may yet lose its space to a "," or keep it: held back until the list says.)
    const d = tok.createPrefixDecoder();
    expect(d.push(tok.tokenize('hi, we', { addSpecial: false }))).toBe('hi,');
    expect(d.push(tok.tokenize('hi, we ,', { addSpecial: false }), true)).toBe(' we,');
  });

  it('rejects out-of-range ids', () => {
    expect(() => tok.tokenToPiece(99999)).toThrow(/out of range/);
    expect(() => tok.detokenize([-1])).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG' }));
  });
});

describe('HybridDNA vocabulary', () => {
  // ids: bytes 0–255, 256 CC, 257 CCCC, 258 CCCCCC (BPE), 259 <dna>, 260 </dna>, 261 <oov>, then the 6-mers
  // with the converter's U+E000 marker: 262 CCCCCC, 263 ACGTAA, 264 AAAAAA
  const tok = Tokenizer.fromMetadata({
    ...bpeMetadata([['C', 'C'], ['CC', 'CC'], ['CCCC', 'CC']], [
      { text: '<dna>' }, { text: '</dna>' }, { text: '<oov>' },
      ...['CCCCCC', 'ACGTAA', 'AAAAAA'].map((k) => ({ text: k + '\ue000', type: TokenType.NORMAL })),
    ]),
    'tokenizer.ggml.model': 'hybriddna',
  });
  const [DNA, END, OOV] = [259, 260, 261];

  it('cuts the text inside <dna> tags into 6-byte k-mers (uppercased, a short tail padded with A), plain BPE outside', () => {
    expect(tok.tokenize('<dna>ccccccACGT</dna>CCCCCC', { addSpecial: false })).toEqual([DNA, 262, 263, END, 258]);
    expect(tok.tokenize('<dna>AAAAAAN', { addSpecial: false })).toEqual([DNA, 264, OOV]);
    // bytes, not characters: 中中 is the first 6 bytes, ACGTAA the next
    expect(tok.tokenize('<dna>中中ACGTAA</dna>', { addSpecial: false })).toEqual([DNA, OOV, 263, END]);
    expect(tok.tokenize('<dna>A中CGTAA</dna>', { addSpecial: false })).toEqual([DNA, OOV, OOV, END]);
    // with special parsing the control token <dna> is split off first: its sequence is plain BPE
    expect(tok.tokenize('<dna>CCCCCC', { addSpecial: false, parseSpecial: true })).toEqual([DNA, 258]);
  });

  it('detokenizes k-mers without their marker', () => {
    expect(tok.detokenize([DNA, 262, 263, END, 258], { special: true })).toBe('<dna>CCCCCCACGTAA</dna>CCCCCC');
    expect(tok.detokenize([262, 264])).toBe('CCCCCCAAAAAA');
  });
});

describe('WordPiece vocabulary', () => {
  const tokens = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '\u2581hello', '\u2581world', '\u2581!', 'ing', '\u2581walk'];
  const tok = Tokenizer.fromMetadata({
    'tokenizer.ggml.model': 'bert',
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.token_type': Int32Array.from([3, 2, 3, 3, 1, 1, 1, 1, 1]),
    'tokenizer.ggml.unknown_token_id': 1,
    'tokenizer.ggml.cls_token_id': 2,
    'tokenizer.ggml.bos_token_id': 2,
    'tokenizer.ggml.seperator_token_id': 3,
    'tokenizer.ggml.padding_token_id': 0,
  });

  it('lowercases, strips accents, splits punctuation, matches longest pieces and wraps in CLS/SEP', () => {
    expect(tok.tokenize('Héllo WALKING world!')).toEqual([2, 4, 8, 7, 5, 6, 3]);
    expect(tok.tokenize('hello xyz', { addSpecial: false })).toEqual([4, 1]);
  });
});

describe('unigram vocabulary', () => {
  // ids: 0 <pad>, 1 </s>, 2 <unk>, 3 ▁, 4 ▁a, 5 b, 6 ab, 7 ▁ab, 8 <sep>, 9 пр (user-defined)
  const metadata = {
    'tokenizer.ggml.model': 't5',
    'tokenizer.ggml.tokens': ['<pad>', '</s>', '<unk>', '\u2581', '\u2581a', 'b', 'ab', '\u2581ab', '<sep>', 'пр'],
    'tokenizer.ggml.scores': Float32Array.from([0, 0, 0, -2, -1, -1, -5, -2.5, 0, 0]),
    'tokenizer.ggml.token_type': Int32Array.from([3, 3, 2, 1, 1, 1, 1, 1, 4, 4]),
    'tokenizer.ggml.add_space_prefix': true,
  };
  const tok = Tokenizer.fromMetadata(metadata);

  it('picks the best-scoring segmentation, merges unknown runs, and adds EOS', () => {
    expect(tok.tokenize('ab')).toEqual([4, 5, 1]); // ▁a + b (-2) beats ▁ab (-2.5)
    expect(tok.tokenize('ab€€', { addSpecial: false })).toEqual([4, 5, 2]);
    // user-defined text stays whole and scores 0
    expect(tok.tokenize('ab<sep>', { addSpecial: false })).toEqual([4, 5, 8]);
    expect(tok.detokenize([4, 5, 1])).toBe('ab');
  });

  /**
   * A precompiled charsmap of one rule, "x" -> "ab", laid out by hand as a darts-clone double array:
   * the root's children in block 1 ("x" at 1 ^ 0x78), those of "x" in block 2, its value there.
   */
  function charsmap(o: { units?: number; size?: number; value?: number; strings?: string } = {}): Uint8Array {
    const units = new Uint32Array(o.units ?? 256);
    units[0] = 1 << 10;
    units[0x79] = 0x78 | (1 << 8) | ((0x79 ^ 2) << 10);
    units[2] = (0x80000000 | (o.value ?? 0)) >>> 0;
    const strings = Buffer.from(o.strings ?? 'ab\0', 'latin1');
    const blob = new Uint8Array(4 + units.byteLength + strings.length);
    new DataView(blob.buffer).setUint32(0, o.size ?? units.byteLength, true);
    blob.set(new Uint8Array(units.buffer), 4);
    blob.set(strings, 4 + units.byteLength);
    return blob;
  }
  const withCharsmap = (map: Uint8Array) => Tokenizer.fromMetadata({ ...metadata, 'tokenizer.ggml.precompiled_charsmap': map });

  it('normalizes through the precompiled charsmap, but not inside user-defined text', () => {
    const t = withCharsmap(charsmap());
    expect(t.tokenize('x', { addSpecial: false })).toEqual([4, 5]); // "x" -> "ab" -> ▁a b
    expect(t.tokenize('xx<sep>x', { addSpecial: false })).toEqual([4, 5, 6, 8, 4, 5]);
    // As llama.cpp: the input is kept as far as it follows a user-defined token's text, here the
    // first byte of "е" (D0 B5, as п D0 BF), then U+FFFD for B5; the search steps over D0 EF (a
    // lead byte's two), BF, BD as unknown, then "x" -> "ab" (not "x" glued to B5 as one character).
    expect(t.tokenize('еx', { addSpecial: false })).toEqual([3, 2, 6]);
  });

  it('refuses a broken charsmap with llama.cpp\'s messages', () => {
    expect(() => withCharsmap(Uint8Array.of(1, 0, 0)).tokenize('x')).toThrow(/precompiled_charsmap too small for xcda_blob_size header/);
    expect(() => withCharsmap(charsmap({ size: 1024 + 3 })).tokenize('x')).toThrow(/Index out of array bounds in precompiled charsmap/);
    expect(() => withCharsmap(charsmap({ units: 128 })).tokenize('\u00e9')).toThrow(/Index out of array bounds in XCDA array/);
    expect(() => withCharsmap(charsmap({ value: 100 })).tokenize('x')).toThrow(/Index out of array bounds in precompiled charsmap/);
    expect(() => withCharsmap(charsmap({ strings: 'ab' })).tokenize('x')).toThrow(/Unterminated string in precompiled charsmap/);
  });
});

describe('RWKV world vocabulary', () => {
  // escaped byte strings: ids 0 a, 1 b, 2 ab, 3 \n, 4 €, 5 <unk>
  const tok = Tokenizer.fromMetadata({
    'tokenizer.ggml.model': 'rwkv',
    'tokenizer.ggml.tokens': ['a', 'b', 'ab', '\\n', '\\xe2\\x82\\xac', '<unk>'],
    'tokenizer.ggml.token_type': Int32Array.from([1, 1, 1, 1, 1, 2]),
    'tokenizer.ggml.unknown_token_id': 5,
  });

  it('takes the longest byte token at each point and unescapes on the way back', () => {
    expect(tok.tokenize('aab€\nz')).toEqual([0, 2, 4, 3, 5]);
    expect(tok.detokenize([0, 2, 4, 3])).toBe('aab€\n');
    expect(tok.newline).toBe(3);
  });
});

describe('PLaMo 2 vocabulary', () => {
  // ids 0 <|plamo:unk|>, 1 <|plamo:bos|>, 2..257 the byte tokens, then pieces with log-probability scores.
  const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  const pieces = ['a', 'b', 'ab', 'abc', 'c', 'bc', ' '];
  const scores = [-1, -1, -3, -9, -1, -1, -1];
  const meta = (drop = -1) => {
    const tokens = ['<|plamo:unk|>', '<|plamo:bos|>', ...bytes, ...pieces].filter((_, i) => i !== drop);
    const types = [2, 3, ...bytes.map(() => 6), ...pieces.map(() => 1)].filter((_, i) => i !== drop);
    return { 'tokenizer.ggml.model': 'plamo2', 'tokenizer.ggml.tokens': tokens, 'tokenizer.ggml.token_type': Int32Array.from(types), 'tokenizer.ggml.scores': Float32Array.from([0, 0, ...bytes.map(() => 0), ...scores].filter((_, i) => i !== drop)) };
  };
  const tok = Tokenizer.fromMetadata(meta());
  const id = (p: string) => 258 + pieces.indexOf(p);

  it('finds the best-scoring path (a Viterbi search, not the longest match), bytes for uncovered characters, no BOS', () => {
    // abc (-9), ab + c (-4), a + b + c (-3), a + bc (-2): a + bc; a + b (-2) beats ab (-3).
    expect(tok.tokenize('abc')).toEqual([id('a'), id('bc')]);
    expect(tok.tokenize('ab ab')).toEqual([id('a'), id('b'), id(' '), id('a'), id('b')]);
    // € has no piece: its three UTF-8 bytes.
    expect(tok.tokenize('a€')).toEqual([id('a'), 2 + 0xe2, 2 + 0x82, 2 + 0xac]);
    expect(tok.detokenize([id('a'), 2 + 0xe2, 2 + 0x82, 2 + 0xac, id(' ')])).toBe('a€ ');
    expect(tok.vocab.addBos).toBe(false);
  });

  it('refuses a vocabulary without every byte token, as llama.cpp does while loading', () => {
    expect(() => Tokenizer.fromMetadata(meta(2 + 0x41))).toThrow(expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining('no byte token <0x41>') }));
  });
});

describe('unsupported metadata', () => {
  it('names the supported tokenizer models', () => {
    expect(() => Tokenizer.fromMetadata({ 'tokenizer.ggml.model': 'no_vocab', 'tokenizer.ggml.tokens': ['a'] })).toThrow(
      expect.objectContaining({ code: 'KAIL_E_UNSUPPORTED', message: expect.stringMatching(/unsupported tokenizer model 'no_vocab'.*supported: llama, gpt2.*plamo2/) }),
    );
    expect(() => Tokenizer.fromMetadata({ 'tokenizer.ggml.model': 'nope', 'tokenizer.ggml.tokens': ['a'] })).toThrow(
      expect.objectContaining({ code: 'KAIL_E_BAD_MODEL', message: expect.stringContaining("unknown tokenizer model 'nope'") }),
    );
  });

  it('needs merges for BPE and tokens for any model', () => {
    expect(() => Tokenizer.fromMetadata({ 'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.tokens': ['a'] })).toThrow(/merges/);
    expect(() => Tokenizer.fromMetadata({ 'tokenizer.ggml.model': 'llama' })).toThrow(/tokens/);
  });
});
