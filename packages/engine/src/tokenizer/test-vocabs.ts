// Test helpers: small hand-built vocabularies as GGUF metadata objects, for tests that need no
// model file, and the llama.cpp vocabulary fixtures for those that read real ones.

import fs from 'node:fs';
import path from 'node:path';

import { BYTE_TO_CHAR } from './unicode';
import { TokenType } from './vocab';

export interface ToyToken {
  text: string;
  score?: number;
  type?: number;
}

/**
 * A SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>…<0xFF>, then
 * `pieces` (U+2581 for spaces, higher score merges first) and `specials`.
 */
export function spmMetadata(pieces: ToyToken[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  const all: ToyToken[] = [
    { text: '<unk>', type: TokenType.UNKNOWN },
    { text: '<s>', type: TokenType.CONTROL },
    { text: '</s>', type: TokenType.CONTROL },
  ];
  for (let b = 0; b < 256; b++) all.push({ text: `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`, type: TokenType.BYTE });
  all.push(...pieces);
  return {
    'tokenizer.ggml.model': 'llama',
    'tokenizer.ggml.tokens': all.map((t) => t.text),
    'tokenizer.ggml.scores': Float32Array.from(all, (t) => t.score ?? 0),
    'tokenizer.ggml.token_type': Int32Array.from(all, (t) => t.type ?? TokenType.NORMAL),
    'tokenizer.ggml.bos_token_id': 1,
    'tokenizer.ggml.eos_token_id': 2,
    'tokenizer.ggml.unknown_token_id': 0,
    ...extra,
  };
}

/** Id of the first piece in spmMetadata: pieces follow the 3 specials and 256 bytes. */
export const SPM_FIRST_PIECE = 259;

/**
 * A byte-level BPE ("gpt2") vocabulary: the 256 byte characters (ids 0–255), then one token per
 * merge result in merge order, then `specials`. Merges are pairs of real text, e.g. [' ', 'w'];
 * they are written in the byte alphabet ("Ġ" for a space) as GGUF files hold them.
 */
export function bpeMetadata(
  merges: [string, string][],
  specials: ToyToken[] = [],
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const tokens = [...BYTE_TO_CHAR];
  const types = tokens.map(() => TokenType.NORMAL as number);
  const ggufMerges: string[] = [];
  for (const [a, b] of merges) {
    ggufMerges.push(`${byteText(a)} ${byteText(b)}`);
    if (!tokens.includes(byteText(a + b))) {
      tokens.push(byteText(a + b));
      types.push(TokenType.NORMAL);
    }
  }
  for (const s of specials) {
    tokens.push(s.text);
    types.push(s.type ?? TokenType.CONTROL);
  }
  return {
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': 'gpt-2',
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.token_type': Int32Array.from(types),
    'tokenizer.ggml.merges': ggufMerges,
    ...extra,
  };
}

/** Text in GPT-2's byte alphabet, as byte-level BPE vocabularies store it. */
export function byteText(s: string): string {
  return Array.from(new TextEncoder().encode(s), (b) => BYTE_TO_CHAR[b]).join('');
}

/**
 * llama.cpp's vocabulary fixtures (GGUF + .inp + .out): shared/fixtures/tokenizers, searched upward
 * from here, plus the directories listed in KAIL_TOKENIZER_FIXTURES (path-delimiter separated).
 */
export function fixtureVocabs(): string[] {
  const dirs: string[] = [];
  for (let dir = __dirname; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'shared/fixtures/tokenizers');
    if (fs.existsSync(candidate)) {
      dirs.push(candidate);
      break;
    }
    if (path.dirname(dir) === dir) break;
  }
  for (const d of (process.env.KAIL_TOKENIZER_FIXTURES ?? '').split(path.delimiter)) if (d) dirs.push(path.resolve(d));
  return dirs.flatMap((dir) =>
    fs
      .readdirSync(dir)
      .filter((f) => f.endsWith('.gguf') && fs.existsSync(path.join(dir, f + '.inp')) && fs.existsSync(path.join(dir, f + '.out')))
      .sort()
      .map((f) => path.join(dir, f)),
  );
}

/** The test strings of a .inp file: each is followed by a line "__ggml_vocab_test__" (llama.cpp's test-tokenizer-0). */
export function readVocabTests(file: string): string[] {
  const raw = fs.readFileSync(file, 'utf8');
  const sep = '\n__ggml_vocab_test__\n';
  const out: string[] = [];
  for (let pos = 0; pos < raw.length; ) {
    const next = raw.indexOf(sep, pos);
    if (next < 0) {
      out.push(raw.slice(pos));
      break;
    }
    out.push(raw.slice(pos, next));
    pos = next + sep.length;
  }
  return out;
}
