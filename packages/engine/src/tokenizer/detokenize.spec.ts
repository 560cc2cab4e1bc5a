import { cleanSpaces, Utf8StreamDecoder } from './detokenize';
import { bpeMetadata, SPM_FIRST_PIECE, spmMetadata } from './test-vocabs';
import { Tokenizer } from './tokenizer';

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);

describe('streaming detokenization', () => {
  it('emits a character split over byte tokens only with the token that completes it', () => {
    const tok = Tokenizer.fromMetadata(spmMetadata([{ text: '\u2581a', score: -1 }]));
    const ids = tok.tokenize('a€😀', { addSpecial: false });
    expect(ids).toEqual([SPM_FIRST_PIECE, 3 + 0xe2, 3 + 0x82, 3 + 0xac, 3 + 0xf0, 3 + 0x9f, 3 + 0x98, 3 + 0x80]);
    const stream = tok.createStreamDecoder();
    expect(ids.map((id) => stream.push(id))).toEqual([' a', '', '', '€', '', '', '', '😀']);
    expect(stream.flush()).toBe('');
  });

  it('does the same for byte-level BPE pieces', () => {
    // "é" is C3 A9: two byte characters, two tokens
    const tok = Tokenizer.fromMetadata(bpeMetadata([['h', 'i']]));
    const ids = tok.tokenize('hié', { addSpecial: false });
    expect(ids).toEqual([256, 0xc3, 0xa9]);
    const stream = tok.createStreamDecoder();
    expect(ids.map((id) => stream.push(id))).toEqual(['hi', '', 'é']);
  });

  it('turns a character cut off at the end into U+FFFD on flush, then starts afresh', () => {
    const d = new Utf8StreamDecoder();
    expect(d.push(bytes('€').subarray(0, 2))).toBe('');
    expect(d.flush()).toBe('\ufffd');
    expect(d.push(bytes('ok'))).toBe('ok');
  });

  it('renders control tokens only when asked', () => {
    const tok = Tokenizer.fromMetadata(bpeMetadata([], [{ text: '<|im_end|>' }]));
    const end = tok.vocab.textToToken('<|im_end|>')!;
    expect(tok.createStreamDecoder().push(end)).toBe('');
    expect(tok.createStreamDecoder({ special: true }).push(end)).toBe('<|im_end|>');
  });
});

describe('token pieces', () => {
  it('maps byte-level characters outside the GPT-2 alphabet to llama.cpp\'s [UNK_BYTE_…] marker', () => {
    const meta = bpeMetadata([]);
    (meta['tokenizer.ggml.tokens'] as string[]).push('中');
    (meta['tokenizer.ggml.token_type'] as Int32Array) = Int32Array.from([...(meta['tokenizer.ggml.token_type'] as Int32Array), 1]);
    const tok = Tokenizer.fromMetadata(meta);
    expect(text(tok.tokenToPiece(256))).toBe('[UNK_BYTE_0xe4b8ad中]');
  });

  it('lstrip drops leading spaces', () => {
    const tok = Tokenizer.fromMetadata(spmMetadata([{ text: '\u2581\u2581a' }]));
    expect(text(tok.tokenToPiece(SPM_FIRST_PIECE))).toBe('  a');
    expect(text(tok.tokenToPiece(SPM_FIRST_PIECE, { lstrip: 1 }))).toBe(' a');
  });
});

describe('clean-up of tokenization spaces', () => {
  it('follows llama.cpp: punctuation, lone apostrophes, some contractions', () => {
    const clean = (s: string) => text(cleanSpaces(bytes(s)));
    expect(clean('Hello , world ! Is it ? Yes .')).toBe('Hello, world! Is it? Yes.');
    expect(clean("rock ' n roll")).toBe("rock'n roll");
    expect(clean("it 's I 'm we 're they 've")).toBe("it's I'm we're they've");
    expect(clean("don 't I 'd we 'll")).toBe("don 't I 'd we 'll");
    expect(clean('')).toBe('');
  });
});
