// The tokenizer of a model, built from its GGUF metadata and matching llama.cpp's llama_tokenize /
// llama_token_to_piece / llama_detokenize.

import { bpeTokenize } from './bpe';
import { cleanSpaces, tokenPieceBytes, Utf8StreamDecoder } from './detokenize';
import { TokenizerError } from './errors';
import { plamo2Tokenize } from './plamo2';
import { rwkvTokenize } from './rwkv';
import { spmTokenize } from './spm';
import { ugmTokenize } from './ugm';
import { wellFormed } from './unicode';
import { TokenAttr, Vocab } from './vocab';
import type { VocabMetadata } from './vocab';
import { wpmTokenize } from './wpm';

export interface TokenizeOptions {
  /**
   * Add the BOS/EOS (SEP for WordPiece) tokens the model asks for (`tokenizer.ggml.add_bos_token`,
   * `add_eos_token`, …). Default: true.
   */
  addSpecial?: boolean;
  /**
   * Treat the text of control tokens (e.g. "<|im_start|>") as those tokens. When false they are
   * tokenized as plain text; user-defined tokens are always matched. Default: false.
   */
  parseSpecial?: boolean;
}

export interface DetokenizeOptions {
  /** Render control and unknown tokens as their text. Default: false (they render as nothing). */
  special?: boolean;
  /** Drop a leading BOS and a trailing EOS when the model adds them. Default: false. */
  removeSpecial?: boolean;
  /**
   * The ids begin a longer list, the rest still to come (a diffusion canvas's settled start): the
   * result stops where the clean-up of spaces could still change with what follows, so that it is
   * a prefix of the whole list's bytes (and no trailing EOS is dropped). Default: false.
   */
  partial?: boolean;
}

export interface PieceOptions {
  /** Render control and unknown tokens as their text. Default: false. */
  special?: boolean;
  /**
   * Render these control tokens as their text even without `special` (llama.cpp's preserved
   * tokens: a tool-call format's markers, which its parser must see). Default: none.
   */
  preserve?: ReadonlySet<number>;
  /** Drop up to this many leading spaces. Default: 0. */
  lstrip?: number;
}

type Fragment = { token: number } | { offset: number; length: number };

const isSpace = (c: number) => c === 0x20 || (c >= 0x09 && c <= 0x0d);

export class Tokenizer {
  readonly vocab: Vocab;
  private readonly pieces: (Uint8Array | undefined)[];
  private newlineId: number | null | undefined;

  constructor(vocab: Vocab) {
    this.vocab = vocab;
    this.pieces = new Array(vocab.nTokens);
  }

  /** Builds the vocabulary from GGUF metadata (see VocabMetadata) and a tokenizer over it. */
  static fromMetadata(meta: VocabMetadata): Tokenizer {
    return new Tokenizer(new Vocab(meta));
  }

  /**
   * Every token's bytes as tokenToPiece gives them, for `n` ids (a model's vocabulary may have more
   * rows than tokens: those write nothing). What output constraints read tokens as.
   */
  allPieces(n: number, options: PieceOptions = {}): Uint8Array[] {
    return Array.from({ length: n }, (_, id) => (id < this.nTokens ? this.tokenToPiece(id, options) : new Uint8Array(0)));
  }

  get nTokens(): number {
    return this.vocab.nTokens;
  }

  /** Text to token ids, as llama_tokenize. */
  tokenize(text: string, options: TokenizeOptions = {}): number[] {
    const addSpecial = options.addSpecial ?? true;
    const parseSpecial = options.parseSpecial ?? false;
    const v = this.vocab;
    const raw = wellFormed(text);
    const fragments: Fragment[] = raw.length > 0 ? this.partition(raw, parseSpecial) : [];
    const output: number[] = [];
    const sp = v.special;

    switch (v.type) {
      case 'spm': {
        let prevSpecial = true; // a space prefix goes on the first fragment too
        if (addSpecial && v.addBos) output.push(this.need(sp.bos, 'BOS'));
        for (const f of fragments) {
          if ('token' in f) {
            output.push(f.token);
            prevSpecial = true;
            continue;
          }
          let s = raw.slice(f.offset, f.offset + f.length);
          if (v.addSpacePrefix && prevSpecial) s = ' ' + s;
          spmTokenize(v, s.replace(/ /g, '\u2581'), output);
          prevSpecial = false;
        }
        if (addSpecial && v.addEos) output.push(this.need(sp.eos, 'EOS'));
        break;
      }
      case 'bpe': {
        if (addSpecial && v.addBos) output.push(this.need(sp.bos, 'BOS'));
        for (const f of fragments) {
          if ('token' in f) {
            output.push(f.token);
            continue;
          }
          let s = raw.slice(f.offset, f.offset + f.length);
          if (v.escapeWhitespaces) s = s.replace(/ /g, '\u2581');
          bpeTokenize(v, s, output);
        }
        if (addSpecial && v.addEos) output.push(this.need(sp.eos, 'EOS'));
        break;
      }
      case 'ugm': {
        if (addSpecial && v.addBos) output.push(this.need(sp.bos, 'BOS'));
        for (const f of fragments) {
          if ('token' in f) output.push(f.token);
          else ugmTokenize(v, raw.slice(f.offset, f.offset + f.length), output);
        }
        if (addSpecial && v.addEos) output.push(this.need(sp.eos, 'EOS'));
        break;
      }
      case 'rwkv': {
        for (const f of fragments) {
          if ('token' in f) output.push(f.token);
          else rwkvTokenize(v, raw.slice(f.offset, f.offset + f.length), output);
        }
        break;
      }
      case 'plamo2': {
        // (llama.cpp adds no BOS or EOS to a PLaMo 2 text, whatever add_bos_token says.)
        for (const f of fragments) {
          if ('token' in f) output.push(f.token);
          else plamo2Tokenize(v, raw.slice(f.offset, f.offset + f.length), output);
        }
        break;
      }
      case 'wpm': {
        if (addSpecial) output.push(this.need(sp.bos, 'BOS'));
        for (const f of fragments) {
          if ('token' in f) output.push(f.token);
          else wpmTokenize(v, raw.slice(f.offset, f.offset + f.length), output);
        }
        if (addSpecial) output.push(this.need(sp.sep, 'SEP'));
        break;
      }
    }
    return output;
  }

  /**
   * The bytes a token stands for, as llama_token_to_piece. Bytes, not a string: a multi-byte
   * character may be split over several tokens (see createStreamDecoder).
   */
  tokenToPiece(id: number, options: PieceOptions = {}): Uint8Array {
    const attr = this.vocab.tokenAttr(id);
    if (!options.special && attr & (TokenAttr.UNKNOWN | TokenAttr.CONTROL) && !options.preserve?.has(id)) return new Uint8Array(0);
    let piece: Uint8Array = (this.pieces[id] ??= tokenPieceBytes(this.vocab, id));
    const lstrip = options.lstrip ?? 0;
    let skip = 0;
    while (skip < lstrip && skip < piece.length && piece[skip] === 0x20) skip++;
    if (skip > 0) piece = piece.subarray(skip);
    return piece;
  }

  /** Token ids to bytes, as llama_detokenize (including its clean-up of spaces for some vocabularies). */
  detokenizeBytes(ids: readonly number[], options: DetokenizeOptions = {}): Uint8Array {
    const v = this.vocab;
    let begin = 0;
    let end = ids.length;
    let removeSpace = v.addSpacePrefix;
    if (options.removeSpecial && v.addBos && end > 0 && ids[0] === v.special.bos) {
      removeSpace = false;
      begin++;
    }
    if (options.removeSpecial && !options.partial && v.addEos && end > begin && ids[end - 1] === v.special.eos) end--;

    const parts: Uint8Array[] = [];
    let total = 0;
    for (let i = begin; i < end; i++) {
      const p = this.tokenToPiece(ids[i], { special: options.special, lstrip: removeSpace ? 1 : 0 });
      removeSpace = false;
      parts.push(p);
      total += p.length;
    }
    let out: Uint8Array = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    if (v.cleanSpaces) {
      // (The clean-up drops a space by the bytes after it, at most 3 on: where none of the last 3
      // bytes is a space or an apostrophe, every drop before is decided and none after reaches back.)
      if (options.partial) {
        const spaceOrQuote = (k: number) => k >= 0 && (out[k] === 0x20 || out[k] === 0x27);
        let cut = out.length;
        while (cut > 0 && (spaceOrQuote(cut - 1) || spaceOrQuote(cut - 2) || spaceOrQuote(cut - 3))) cut--;
        out = out.subarray(0, cut);
      }
      out = cleanSpaces(out);
    }
    return out;
  }

  /** Token ids to text. Bytes that are not valid UTF-8 (a character cut off at the end) become U+FFFD. */
  detokenize(ids: readonly number[], options: DetokenizeOptions = {}): string {
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(this.detokenizeBytes(ids, options));
  }

  /**
   * A streaming detokenizer: feed tokens one at a time as they are generated, get back only the
   * complete characters so far. Pieces are not space-cleaned, as llama.cpp's per-token output.
   */
  createStreamDecoder(options: PieceOptions = {}): TokenStreamDecoder {
    return new TokenStreamDecoder(this, options);
  }

  /**
   * A detokenizer for a token list that grows at its end (a diffusion canvas's settled start):
   * give it the list so far, get back the text it adds; together the pieces are `detokenize` of
   * the whole list, byte for byte (its first-token space removal and clean-up of spaces included).
   */
  createPrefixDecoder(): TokenPrefixDecoder {
    return new TokenPrefixDecoder(this);
  }

  /** True for tokens that end generation. */
  isEog(id: number): boolean {
    return this.vocab.isEog(id);
  }

  /**
   * The token for "\n" (llama.cpp's linefeed token), or null. Found as llama.cpp finds it while
   * loading: tokenizing "\n" without special tokens, else the model type's default padding id.
   */
  get newline(): number | null {
    if (this.newlineId === undefined) {
      const v = this.vocab;
      const ids: number[] = [];
      if (v.type === 'spm') {
        try {
          ids.push(v.byteToToken(0x0a));
        } catch {
          // none: the fallback below
        }
      } else if (v.type === 'bpe') {
        bpeTokenize(v, '\n', ids);
      } else if (v.type === 'ugm') {
        ugmTokenize(v, '\n', ids);
      } else if (v.type === 'rwkv') {
        rwkvTokenize(v, '\n', ids);
      } else if (v.type === 'plamo2') {
        plamo2Tokenize(v, '\n', ids);
      }
      this.newlineId = ids.length > 0 ? ids[0] : v.newlineFallback;
    }
    return this.newlineId;
  }

  private need(id: number | null, what: string): number {
    if (id === null) throw new TokenizerError('KAIL_E_BAD_MODEL', `the model asks for a ${what} token but has none`);
    return id;
  }

  /**
   * Splits special-token text out of the raw text, longest special token first (llama.cpp's
   * tokenizer_st_partition). Control and unknown tokens only with parseSpecial; user-defined always.
   */
  private partition(raw: string, parseSpecial: boolean): Fragment[] {
    const v = this.vocab;
    let buffer: Fragment[] = [{ offset: 0, length: raw.length }];
    for (const id of v.specialTokenIds) {
      const attr = v.tokenAttr(id);
      if (!parseSpecial && attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN)) continue;
      const text = v.tokenText(id);
      if (raw.indexOf(text) < 0) continue; // most special tokens are not in the text at all
      const next: Fragment[] = [];
      for (const f of buffer) {
        if ('token' in f) {
          next.push(f);
          continue;
        }
        let offset = f.offset;
        let length = f.length;
        for (;;) {
          const match = raw.indexOf(text, offset);
          if (match < 0 || match + text.length > offset + length) {
            if (length > 0) next.push({ offset, length });
            break;
          }
          if (match > offset) {
            let leftLength = match - offset;
            if (attr & TokenAttr.LSTRIP) {
              while (leftLength > 0 && isSpace(raw.charCodeAt(offset + leftLength - 1))) leftLength--;
            }
            if (leftLength > 0) next.push({ offset, length: leftLength });
          }
          next.push({ token: id });
          const end = offset + length;
          let rightOffset = match + text.length;
          if (rightOffset >= end) break;
          if (attr & TokenAttr.RSTRIP) {
            while (rightOffset < end && isSpace(raw.charCodeAt(rightOffset))) rightOffset++;
          }
          offset = rightOffset;
          length = end - rightOffset;
        }
      }
      buffer = next;
    }
    return buffer;
  }
}

/** See Tokenizer.createPrefixDecoder. */
export class TokenPrefixDecoder {
  private readonly utf8 = new Utf8StreamDecoder();
  private sent = 0;

  constructor(private readonly tokenizer: Tokenizer) {}

  /**
   * The text `ids` (the list so far: the last one given, extended) adds, complete characters only;
   * `whole`: the list is complete (then what is held back comes out, an incomplete character as U+FFFD).
   */
  push(ids: readonly number[], whole = false): string {
    const bytes = this.tokenizer.detokenizeBytes(ids, { partial: !whole });
    let text = bytes.length > this.sent ? this.utf8.push(bytes.subarray(this.sent)) : '';
    this.sent = Math.max(this.sent, bytes.length);
    if (whole) text += this.utf8.flush();
    return text;
  }
}

/** See Tokenizer.createStreamDecoder. */
export class TokenStreamDecoder {
  private readonly utf8 = new Utf8StreamDecoder();

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly options: PieceOptions,
  ) {}

  /** Adds one token; returns the text it completes (possibly empty). */
  push(id: number): string {
    return this.utf8.push(this.tokenizer.tokenToPiece(id, this.options));
  }

  /** Ends the stream: returns what is left, an incomplete character as U+FFFD. */
  flush(): string {
    return this.utf8.flush();
  }
}
