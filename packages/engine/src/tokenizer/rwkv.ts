// RWKV "world" vocabularies (tokenizer.ggml.model "rwkv"), ported from llama.cpp's
// llm_tokenizer_rwkv: tokens are byte strings, stored escaped (\xNN, \n, \t, \r, \\); tokenization
// takes the longest token at each byte, greedily.

import { TokenizerError } from './errors';
import { utf8Encode } from './unicode';
import type { Vocab } from './vocab';

/** llama.cpp's llama_unescape_rwkv_token: the bytes an escaped token text stands for. */
export function unescapeRwkv(escaped: string): Uint8Array {
  const src = utf8Encode(escaped);
  const out: number[] = [];
  let escaping = false;
  let hexRemaining = 0;
  let hexAcc = 0;
  for (const c of src) {
    if (hexRemaining !== 0) {
      hexAcc = ((hexAcc << 4) + (c >= 0x61 ? c - 0x61 + 10 : c - 0x30)) & 0xff;
      if (--hexRemaining === 0) {
        out.push(hexAcc);
        hexAcc = 0;
      }
      continue;
    }
    if (escaping) {
      if (c === 0x74) out.push(0x09); // \t
      else if (c === 0x6e) out.push(0x0a); // \n
      else if (c === 0x72) out.push(0x0d); // \r
      else if (c === 0x78) hexRemaining = 2; // \xNN
      else out.push(c);
      escaping = false;
      continue;
    }
    if (c === 0x5c) {
      escaping = true;
      continue;
    }
    out.push(c);
  }
  return Uint8Array.from(out);
}

const latin1 = (bytes: Uint8Array, start = 0, end = bytes.length) => {
  let s = '';
  for (let i = start; i < end; i++) s += String.fromCharCode(bytes[i]);
  return s;
};

/** Token bytes (as a latin1 string) → id, longest token length and the bytes tokens start with. */
class RwkvModel {
  readonly byBytes = new Map<string, number>();
  readonly firstBytes = new Set<number>();
  readonly maxLen: number;

  constructor(vocab: Vocab) {
    let maxLen = 0;
    for (let id = 0; id < vocab.nTokens; id++) {
      const bytes = unescapeRwkv(vocab.tokenText(id));
      if (bytes.length === 0) continue;
      this.byBytes.set(latin1(bytes), id);
      this.firstBytes.add(bytes[0]);
      maxLen = Math.max(maxLen, bytes.length);
    }
    this.maxLen = maxLen;
  }
}

const models = new WeakMap<Vocab, RwkvModel>();

/** Tokenizes one fragment of raw text (special tokens already split off). */
export function rwkvTokenize(vocab: Vocab, text: string, output: number[]): void {
  let model = models.get(vocab);
  if (!model) models.set(vocab, (model = new RwkvModel(vocab)));
  const bytes = utf8Encode(text);
  for (let pos = 0; pos < bytes.length; ) {
    if (!model.firstBytes.has(bytes[pos])) {
      if (vocab.special.unk === null) {
        throw new TokenizerError('KAIL_E_BAD_MODEL', `the vocabulary has no token for byte 0x${bytes[pos].toString(16)} and no unknown token`);
      }
      output.push(vocab.special.unk);
      pos++;
      continue;
    }
    let found = -1;
    let len = 0;
    for (let l = Math.min(model.maxLen, bytes.length - pos); l > 0; l--) {
      const id = model.byBytes.get(latin1(bytes, pos, pos + l));
      if (id !== undefined) {
        found = id;
        len = l;
        break;
      }
    }
    // llama.cpp emits token 0 and starts over at the text's beginning here (forever); no vocabulary
    // with every single byte as a token gets here
    if (found < 0) throw new TokenizerError('KAIL_E_BAD_MODEL', `no token matches the text at byte ${pos}`);
    output.push(found);
    pos += len;
  }
}
