// Small but real tokenizers for generated models, stored in the GGUF so llama.cpp (and our engine)
// tokenize with them: a byte-level BPE ("gpt2" with the qwen2 or llama-bpe pre-tokenizer) or a
// SentencePiece-style vocabulary ("llama", with scores and <0xNN> byte-fallback tokens). Merges
// are learned from a built-in corpus; a larger vocabulary is filled with further merges of
// existing tokens, so every token is a valid BPE product.
import { GgufType } from '../gguf/constants';
import type { GgufWriter } from '../gguf/writer';
import { kv } from '../gguf/writer';
import { buildPrecompiledCharsmap, nmtNfkcTable } from './charsmap';
import { TRAINING_CORPUS } from './corpus';
import { Xoshiro128 } from './rng';

/** llama_token_type (llama.cpp's vocab token types). */
export enum TokenType {
  NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6,
}

/** Which tokenizer and chat format a vocabulary follows. */
export type VocabKind =
  /** byte-level BPE, pre-tokenizer "qwen2", ChatML specials and template. */
  | 'qwen2'
  /** byte-level BPE, pre-tokenizer "llama-bpe", Llama 3 specials and template. */
  | 'llama3'
  /** SentencePiece-style ("llama" model), byte fallback, Mistral [INST] template. */
  | 'spm'
  /** Phi-3's: the SentencePiece vocabulary with <|endoftext|> and the chat specials appended, Phi-3.5's template. */
  | 'phi3'
  /** WordPiece ("bert" model) as convert_hf_to_gguf writes it: word starts carry U+2581, [CLS] ... [SEP]. */
  | 'bert'
  /** PLaMo 2's ("plamo2" model, conversion/base.py _set_vocab_plamo): <|plamo:*|> specials, <0xXX> bytes, unigram pieces with plain spaces. */
  | 'plamo2'
  /** RWKV "world" ("rwkv" model, conversion/base.py _set_vocab_rwkv_world): <s>, then byte strings stored escaped as Python's repr writes them. */
  | 'rwkv'
  /** T5's SentencePiece unigram ("t5" model): <pad> </s> <unk>, scored pieces with U+2581, no byte tokens, no precompiled charsmap. */
  | 'ugm'
  /** The same with T5's normalization: an NFKC-like precompiled charsmap, pieces for what it normalizes to and two user-defined tokens. */
  | 'ugm-charsmap'
  /** A HybridDNATokenizer's ("hybriddna" model, conversion/base.py _set_vocab_hybriddna): Llama 3's BPE, then <dna> </dna> <oov> and DNA 6-mers with the U+E000 marker. */
  | 'hybriddna';

export const VOCAB_KINDS: readonly VocabKind[] = ['qwen2', 'llama3', 'spm', 'phi3', 'bert', 'plamo2', 'rwkv', 'ugm', 'ugm-charsmap', 'hybriddna'];

export interface Vocab {
  kind: VocabKind;
  model: 'gpt2' | 'llama' | 'bert' | 'plamo2' | 'rwkv' | 't5' | 'hybriddna';
  pre?: string;
  tokens: string[];
  types: TokenType[];
  scores?: Float32Array;
  merges?: string[];
  bosId: number;
  eosId: number;
  unkId?: number;
  padId?: number;
  /** WordPiece: the separator (appended by llama.cpp's add_sep) and the mask token. */
  sepId?: number;
  maskId?: number;
  addBos: boolean;
  chatTemplate: string;
  /** tokenizer.ggml.eot_token_id (PLaMo 2's <|plamo:op|>, RWKV world's "\\n\\n"). */
  eotId?: number;
  /** tokenizer.ggml.add_space_prefix, when the converter writes it. */
  addSpacePrefix?: boolean;
  /** tokenizer.ggml.remove_extra_whitespaces (SentencePiece's normalizer flag, T5's converter writes it). */
  removeExtraWhitespaces?: boolean;
  /** tokenizer.ggml.precompiled_charsmap: SentencePiece's normalization table (charsmap.ts). */
  precompiledCharsmap?: Uint8Array;
}

// Chat templates as published with the models they imitate (Qwen2 ChatML, Llama 3 instruct,
// Mixtral instruct); llama.cpp recognizes each by its markers.
export const CHATML_TEMPLATE =
  "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

export const LLAMA3_TEMPLATE =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

export const MISTRAL_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

export const PHI3_TEMPLATE =
  "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

/** Phi-3's added tokens, after the SentencePiece pieces (ids 32000.. in the real vocabulary). */
const PHI3_SPECIALS = ['<|endoftext|>', '<|assistant|>', '<|placeholder1|>', '<|placeholder2|>', '<|placeholder3|>', '<|placeholder4|>', '<|system|>', '<|end|>', '<|placeholder5|>', '<|placeholder6|>', '<|user|>'];

/** GPT-2's byte -> printable character map (bytes_to_unicode), in GPT-2's token order. */
export function bytesToUnicode(): { order: number[]; map: string[] } {
  const order: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) order.push(b);
  for (let b = 0xa1; b <= 0xac; b++) order.push(b);
  for (let b = 0xae; b <= 0xff; b++) order.push(b);
  const map: string[] = new Array(256);
  for (const b of order) map[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (map[b] === undefined) {
      map[b] = String.fromCodePoint(256 + n++);
      order.push(b);
    }
  }
  return { order, map };
}

// GPT-2 style pre-tokenization, close enough to qwen2/llama3 for learning merges.
const PRETOKENIZE = /'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** Learns BPE merges over `words` (symbol sequences with counts), most frequent pair first. */
function learnMerges(words: Map<string, number>, split: (w: string) => string[], maxMerges: number): [string, string][] {
  const seqs = [...words].map(([w, count]) => ({ syms: split(w), count }));
  const merges: [string, string][] = [];
  while (merges.length < maxMerges) {
    const counts = new Map<string, number>();
    for (const { syms, count } of seqs) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const k = syms[i] + '\u0000' + syms[i + 1];
        counts.set(k, (counts.get(k) ?? 0) + count);
      }
    }
    let best = '';
    let bestCount = 1;
    for (const [k, c] of counts) if (c > bestCount || (c === bestCount && best !== '' && k < best)) { best = k; bestCount = c; }
    if (best === '') break;
    const [a, b] = best.split('\u0000');
    merges.push([a, b]);
    const ab = a + b;
    for (const s of seqs) {
      const out: string[] = [];
      for (let i = 0; i < s.syms.length; i++) {
        if (i + 1 < s.syms.length && s.syms[i] === a && s.syms[i + 1] === b) { out.push(ab); i++; }
        else out.push(s.syms[i]);
      }
      s.syms = out;
    }
  }
  return merges;
}

/**
 * Adds merges of existing tokens until `target` tokens exist: A + B where B does not start a word,
 * so the new tokens are plausible word pieces. Deterministic (fixed seed).
 */
function fillMerges(
  tokens: string[],
  have: Set<string>,
  merges: [string, string][],
  target: number,
  wordStart: string,
  poolStart: number,
): void {
  const rng = new Xoshiro128(0x5eed);
  const pool = tokens.slice(poolStart);
  const tails = pool.filter((t) => !t.startsWith(wordStart));
  let guard = 0;
  while (tokens.length < target) {
    if (++guard > target * 200) throw new Error(`cannot fill the vocabulary to ${target} tokens`);
    const a = pool[Math.floor(rng.nextFloat() * pool.length)];
    const b = tails[Math.floor(rng.nextFloat() * tails.length)];
    const ab = a + b;
    if (ab.length > 16 || have.has(ab)) continue;
    have.add(ab);
    tokens.push(ab);
    merges.push([a, b]);
    pool.push(ab);
    if (!ab.startsWith(wordStart)) tails.push(ab);
  }
}

function corpusWords(mapChar: (s: string) => string): Map<string, number> {
  const words = new Map<string, number>();
  for (const m of TRAINING_CORPUS.matchAll(PRETOKENIZE)) {
    const w = mapChar(m[0]);
    words.set(w, (words.get(w) ?? 0) + 1);
  }
  return words;
}

function byteLevel(s: string, map: string[]): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) out += map[b];
  return out;
}

function specialsFor(kind: 'qwen2' | 'llama3'): string[] {
  // Qwen2.5's ChatML specials and its fill-in-the-middle tokens, repository-level ones included (found by their text, as llama.cpp does).
  if (kind === 'qwen2') return ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|fim_pad|>', '<|repo_name|>', '<|file_sep|>'];
  const s = ['<|begin_of_text|>', '<|end_of_text|>', '<|reserved_special_token_0|>', '<|reserved_special_token_1|>', '<|finetune_right_pad_id|>', '<|reserved_special_token_2|>', '<|start_header_id|>', '<|end_header_id|>', '<|eom_id|>', '<|eot_id|>', '<|python_tag|>'];
  return s;
}

/** Byte-level BPE vocabulary of exactly `vocabSize` tokens, special tokens last (as Qwen and Llama 3 do). */
export function buildBpeVocab(kind: 'qwen2' | 'llama3', vocabSize: number): Vocab {
  const specials = specialsFor(kind);
  const nRegular = vocabSize - specials.length;
  if (nRegular < 256) throw new Error(`vocab size ${vocabSize} too small for ${kind}: needs at least ${256 + specials.length}`);
  const { order, map } = bytesToUnicode();
  const tokens = order.map((b) => map[b]);
  const have = new Set(tokens);
  const learned = learnMerges(corpusWords((w) => byteLevel(w, map)), (w) => [...w], nRegular - 256);
  const merges: [string, string][] = [];
  for (const [a, b] of learned) {
    const ab = a + b;
    if (have.has(ab)) continue;
    have.add(ab);
    tokens.push(ab);
    merges.push([a, b]);
  }
  fillMerges(tokens, have, merges, nRegular, map[0x20], 0);
  const types = tokens.map(() => TokenType.NORMAL);
  for (const s of specials) { tokens.push(s); types.push(TokenType.CONTROL); }
  const id = (t: string) => tokens.indexOf(t);
  if (kind === 'qwen2') {
    return {
      kind, model: 'gpt2', pre: 'qwen2', tokens, types, merges: merges.map(([a, b]) => `${a} ${b}`),
      bosId: id('<|endoftext|>'), eosId: id('<|im_end|>'), padId: id('<|endoftext|>'), addBos: false,
      chatTemplate: CHATML_TEMPLATE,
    };
  }
  return {
    kind, model: 'gpt2', pre: 'llama-bpe', tokens, types, merges: merges.map(([a, b]) => `${a} ${b}`),
    bosId: id('<|begin_of_text|>'), eosId: id('<|eot_id|>'), padId: id('<|finetune_right_pad_id|>'), addBos: true,
    chatTemplate: LLAMA3_TEMPLATE,
  };
}

const SPM_SPACE = '\u2581';

/**
 * SentencePiece-style vocabulary: <unk>, <s>, </s>, 256 byte-fallback tokens, then scored pieces;
 * `phi3` appends Phi-3's control tokens (the size includes them), <|endoftext|> the end of text.
 */
export function buildSpmVocab(vocabSize: number, flavor: 'spm' | 'phi3' = 'spm'): Vocab {
  if (flavor === 'phi3') {
    const v = buildSpmVocab(vocabSize - PHI3_SPECIALS.length);
    for (const t of PHI3_SPECIALS) { v.tokens.push(t); v.types.push(TokenType.CONTROL); }
    const scores = new Float32Array(v.tokens.length);
    scores.set(v.scores!);
    const eos = v.tokens.indexOf('<|endoftext|>');
    return { ...v, kind: 'phi3', scores, eosId: eos, padId: eos, chatTemplate: PHI3_TEMPLATE };
  }
  const tokens = ['<unk>', '<s>', '</s>'];
  const types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TokenType.BYTE);
  }
  const firstPiece = tokens.length;
  if (vocabSize < firstPiece + 64) throw new Error(`vocab size ${vocabSize} too small for spm: needs at least ${firstPiece + 64}`);
  // SentencePiece marks word starts with U+2581 and (llama.cpp's add_space_prefix) prefixes the text with one.
  const words = new Map<string, number>();
  for (const line of TRAINING_CORPUS.split('\n')) {
    for (const w of line.split(' ')) {
      if (!w) continue;
      const piece = SPM_SPACE + w;
      words.set(piece, (words.get(piece) ?? 0) + 1);
    }
  }
  const chars = [...new Set([...words.keys()].flatMap((w) => [...w]))].sort();
  const have = new Set(tokens);
  for (const c of chars) { if (!have.has(c)) { have.add(c); tokens.push(c); } }
  const merges: [string, string][] = [];
  for (const [a, b] of learnMerges(words, (w) => [...w], vocabSize - tokens.length)) {
    const ab = a + b;
    if (have.has(ab)) continue;
    have.add(ab);
    tokens.push(ab);
    merges.push([a, b]);
  }
  fillMerges(tokens, have, merges, vocabSize, SPM_SPACE, firstPiece);
  while (types.length < tokens.length) types.push(TokenType.NORMAL);
  // llama.cpp's SPM tokenizer merges the bigram whose result scores highest: earlier merges score higher.
  const scores = new Float32Array(tokens.length);
  for (let i = firstPiece; i < tokens.length; i++) scores[i] = -(i - firstPiece);
  return {
    kind: 'spm', model: 'llama', tokens, types, scores, bosId: 1, eosId: 2, unkId: 0, addBos: true,
    chatTemplate: MISTRAL_TEMPLATE,
  };
}

/**
 * A WordPiece vocabulary in llama.cpp's form (convert_hf_to_gguf's "phantom space": a word-start
 * piece is U+2581 + text, a continuation piece, BERT's "##x", is the bare text): [PAD] [UNK] [CLS]
 * [SEP] [MASK], every character of the lowercased corpus as a word start and as a continuation,
 * then the corpus's words by frequency, then frequent word endings, then [unusedN] to the size.
 */
export function buildWpmVocab(vocabSize: number): Vocab {
  const tokens = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
  const types = [TokenType.CONTROL, TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL];
  const have = new Set(tokens);
  const add = (t: string) => {
    if (tokens.length >= vocabSize || have.has(t)) return;
    have.add(t);
    tokens.push(t);
    types.push(TokenType.NORMAL);
  };
  const text = TRAINING_CORPUS.toLowerCase();
  const chars = [...new Set([...text].filter((c) => !/\s/u.test(c)))].sort();
  if (vocabSize < tokens.length + 2 * chars.length) throw new Error(`vocab size ${vocabSize} too small for bert: needs at least ${tokens.length + 2 * chars.length}`);
  for (const c of chars) add(SPM_SPACE + c);
  for (const c of chars) add(c);
  // Words as llama.cpp's WPM pre-tokenizer splits them (punctuation apart), by frequency.
  const counts = new Map<string, number>();
  for (const w of text.split(/[^\p{L}\p{N}]+/u)) if (w.length > 1) counts.set(w, (counts.get(w) ?? 0) + 1);
  const byCount = (m: Map<string, number>) => [...m.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([w]) => w);
  const words = byCount(counts);
  for (const w of words.slice(0, Math.floor((vocabSize - tokens.length) * 0.7))) add(SPM_SPACE + w);
  const endings = new Map<string, number>();
  for (const [w, n] of counts) for (let k = 2; k <= Math.min(5, w.length - 1); k++) endings.set(w.slice(-k), (endings.get(w.slice(-k)) ?? 0) + n);
  for (const e of byCount(endings)) add(e);
  for (const w of words) add(SPM_SPACE + w);
  for (let i = 0; tokens.length < vocabSize; i++) {
    tokens.push(`[unused${i}]`);
    types.push(TokenType.UNUSED);
  }
  return {
    kind: 'bert', model: 'bert', tokens, types, bosId: 2, eosId: 3, unkId: 1, padId: 0, sepId: 3, maskId: 4, addBos: true,
    chatTemplate: '',
  };
}

/**
 * PLaMo 2's vocabulary as conversion/base.py's _set_vocab_plamo writes it (tokenizer.ggml.model
 * "plamo2", pre "default"): <|plamo:unk|> (UNKNOWN), <|plamo:bos|>, <|plamo:eos|>, <|plamo:pad|> and
 * <|plamo:op|> (CONTROL; the converter makes id 4 the EOT), the 256 <0xXX> byte tokens, then the
 * SentencePiece-style pieces with plain spaces (PLaMo's tokenizer has no U+2581) scored as unigram
 * log-probabilities falling with rank; add_space_prefix false, no add_bos_token key.
 */
export function buildPlamo2Vocab(vocabSize: number): Vocab {
  const specials = ['<|plamo:unk|>', '<|plamo:bos|>', '<|plamo:eos|>', '<|plamo:pad|>', '<|plamo:op|>'];
  const tokens = [...specials];
  const types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TokenType.BYTE);
  }
  const firstPiece = tokens.length;
  const have = new Set(tokens);
  for (const t of buildSpmVocab(vocabSize + 64).tokens.slice(259)) {
    const piece = t.replace(new RegExp(SPM_SPACE, 'g'), ' ');
    if (tokens.length >= vocabSize || have.has(piece)) continue;
    have.add(piece);
    tokens.push(piece);
    types.push(TokenType.NORMAL);
  }
  if (tokens.length < vocabSize) throw new Error(`vocab size ${vocabSize} too large for plamo2's pieces`);
  const scores = new Float32Array(tokens.length);
  for (let i = firstPiece; i < tokens.length; i++) scores[i] = -Math.log(2 + i - firstPiece);
  return { kind: 'plamo2', model: 'plamo2', pre: 'default', tokens, types, scores, bosId: 1, eosId: 2, unkId: 0, padId: 3, eotId: 4, addBos: false, addSpacePrefix: false, chatTemplate: '' };
}

/** llama.cpp's RWKV world chat template (models/templates/llama-cpp-rwkv-world.jinja), which the converter writes when the model has none. */
export const RWKV_WORLD_TEMPLATE = "{%- if not add_generation_prompt is defined -%}\n    {%- set add_generation_prompt = true -%}\n{%- endif -%}\n{%- set ns = namespace(system_prompt='') -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' -%}\n        {%- set ns.system_prompt = message['content'] -%}\n    {%- endif -%}\n{%- endfor -%}\n{{bos_token}}\n{%- if ns.system_prompt != '' -%}\n{{- 'System: ' + ns.system_prompt + '\\n\\n' -}}\n{%- endif -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'user' -%}\n        {{- 'User: ' + message['content']|trim + '\\n\\n' -}}\n    {%- endif -%}\n    {%- if message['role'] == 'assistant' and message['content'] is  not none -%}\n        {%- set content = message['content'] -%}\n        {%- if '</think>' in content -%}\n            {%- set content = content.split('</think>')[-1] -%}\n        {%- endif -%}\n        {{- 'Assistant: ' + content|trim + '\\n\\n' -}}\n    {%- endif -%}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{- 'Assistant:' -}}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n        {{- ' <think>\\n</think>' }}\n    {%- endif %}\n    {%- if enable_thinking is defined and enable_thinking is true %}\n        {{- ' <think>' }}\n    {%- endif %}\n{%- endif -%}";

/** A byte string as rwkv_vocab_v20230424's converter stores it: Python's repr(bytes)[2:-1]. */
export function escapeRwkvToken(bytes: Uint8Array): string {
  // repr quotes with " when the bytes hold ' and no ", so that ' stays bare; otherwise ' is escaped
  const hasSingle = bytes.includes(0x27);
  const escapeSingle = hasSingle && bytes.includes(0x22);
  let out = '';
  for (const b of bytes) {
    if (b === 0x5c) out += '\\\\';
    else if (b === 0x09) out += '\\t';
    else if (b === 0x0a) out += '\\n';
    else if (b === 0x0d) out += '\\r';
    else if (b === 0x27 && escapeSingle) out += "\\'";
    else if (b < 0x20 || b >= 0x7f) out += '\\x' + b.toString(16).padStart(2, '0');
    else out += String.fromCharCode(b);
  }
  return out;
}

/**
 * An RWKV "world" vocabulary as conversion/base.py's _set_vocab_rwkv_world writes
 * rwkv_vocab_v20230424 (tokenizer.ggml.model "rwkv", no pre-tokenizer, no scores): <s> (CONTROL,
 * id 0, BOS and EOS), the 256 single bytes (ids 1..256), the whitespace pairs of the real file
 * (id 261 "\n\n" is the converter's EOT), a few tokens with backslashes and quotes, whole and
 * partial UTF-8 characters (a token need not be valid UTF-8), then the byte strings of the llama3
 * BPE vocabulary (learned from the corpus), and [PADn] (UNUSED) at the end as the converter pads to vocab_size. Token texts are
 * escaped (\xNN lowercase, \t \n \r \\ \'); llama.cpp tokenizes by the longest byte match.
 */
export function buildRwkvVocab(vocabSize: number): Vocab {
  const nPad = 4;
  const seqs: Uint8Array[] = [];
  const have = new Set<string>();
  const add = (bytes: Uint8Array) => {
    const k = Buffer.from(bytes).toString('latin1');
    if (bytes.length === 0 || have.has(k) || seqs.length >= vocabSize - 1 - nPad) return;
    have.add(k);
    seqs.push(bytes);
  };
  for (let b = 0; b < 256; b++) add(Uint8Array.of(b));
  for (const s of ['\t\t', '\t\n', '\t ', '\n\t', '\n\n']) add(Buffer.from(s, 'latin1'));
  if (vocabSize < 1 + seqs.length + nPad + 64) throw new Error(`vocab size ${vocabSize} too small for rwkv: needs at least ${1 + seqs.length + nPad + 64}`);
  const utf8 = (s: string) => Buffer.from(s, 'utf8');
  for (const s of ['\\\\', '\\n', '\\x', ' \\', "'s", "'\"", '"\'', '\r\n', ' \t', '\x00\x00', '\x7f ', '\n\n\n', '    ']) add(utf8(s));
  for (const s of ['é', 'ß', 'ü', 'α', 'π', 'п', 'р', 'ри', 'ив', 'вет', ' мир', '中', '文', '你好', '世界', '한', '국어', 'ひ', 'カタ', '😀', '🦙', '👍', '—', '“', '”', '…']) add(utf8(s));
  // partial characters: lead bytes of 3- and 4-byte sequences, and tails running into the next character
  for (const b of [[0xe4, 0xb8], [0xe4, 0xbd], [0xf0, 0x9f], [0xf0, 0x9f, 0x98], [0xe2, 0x80], [0xa9, 0x20], [0x80, 0x9c], [0xbd, 0xe5], [0xd0, 0xbf, 0xd1]]) add(Uint8Array.from(b));
  const { map } = bytesToUnicode();
  const unmap = new Map(map.map((c, b) => [c, b] as const));
  const bpe = buildBpeVocab('llama3', vocabSize + 64);
  bpe.tokens.forEach((t, i) => {
    if (bpe.types[i] === TokenType.NORMAL) add(Uint8Array.from([...t], (c) => unmap.get(c)!));
  });
  if (seqs.length < vocabSize - 1 - nPad) throw new Error(`vocab size ${vocabSize} too large for rwkv's corpus`);
  const tokens = ['<s>', ...seqs.map(escapeRwkvToken)];
  const types = [TokenType.CONTROL, ...seqs.map(() => TokenType.NORMAL)];
  for (let i = tokens.length; i < vocabSize; i++) {
    tokens.push(`[PAD${i}]`);
    types.push(TokenType.UNUSED);
  }
  return { kind: 'rwkv', model: 'rwkv', tokens, types, bosId: 0, eosId: 0, eotId: 261, addBos: false, chatTemplate: RWKV_WORLD_TEMPLATE };
}

/**
 * A T5-style SentencePiece unigram vocabulary (tokenizer.ggml.model "t5", llama.cpp's UGM): <pad>
 * (CONTROL, 0), </s> (CONTROL, 1, the EOS), <unk> (UNKNOWN, 2), the SentencePiece pieces (U+2581 for
 * spaces; every corpus character, so there are no byte tokens) scored as unigram log-probabilities
 * falling with rank, then <extra_id_N> (CONTROL) last as T5 has them; add_space_prefix and
 * remove_extra_whitespaces on, no precompiled charsmap (normalization is then the space handling
 * alone), no BOS (llama.cpp's UGM defaults: no BOS, an EOS appended). `withCharsmap` ('ugm-charsmap'):
 * T5's normalization too, an NFKC-like precompiled charsmap (charsmap.ts), pieces for what it
 * normalizes to and the user-defined tokens <br> and при after the specials (user-defined pieces score 0).
 */
export function buildUgmVocab(vocabSize: number, withCharsmap = false): Vocab {
  const tokens = ['<pad>', '</s>', '<unk>'];
  const types = [TokenType.CONTROL, TokenType.CONTROL, TokenType.UNKNOWN];
  const extras = Array.from({ length: 4 }, (_, i) => `<extra_id_${i}>`);
  const have = new Set(tokens);
  let precompiledCharsmap: Uint8Array | undefined;
  if (withCharsmap) {
    // user-defined tokens, one of them sharing its first bytes with charsmap sources (и + U+0306): llama.cpp
    // leaves the input unnormalized as far as it follows a user-defined token's text, even into a character
    for (const t of ['<br>', 'при']) { have.add(t); tokens.push(t); types.push(TokenType.USER_DEFINED); }
    const table = nmtNfkcTable();
    precompiledCharsmap = buildPrecompiledCharsmap(table);
    // pieces for the normalized text: its characters, and the whole string alone and as a word start
    const pieces = table.flatMap(([, n]) => (n.includes(' ') || n === '' ? [...n] : [...n, n, SPM_SPACE + n])).filter((p) => p !== ' ');
    for (const p of pieces) if (!have.has(p)) { have.add(p); tokens.push(p); types.push(TokenType.NORMAL); }
  }
  for (const t of buildSpmVocab(vocabSize + 259 + 64).tokens.slice(259)) {
    if (tokens.length >= vocabSize - extras.length || have.has(t)) continue;
    have.add(t);
    tokens.push(t);
    types.push(TokenType.NORMAL);
  }
  if (tokens.length < vocabSize - extras.length) throw new Error(`vocab size ${vocabSize} too large for ugm's pieces`);
  for (const t of extras) { tokens.push(t); types.push(TokenType.CONTROL); }
  const scores = new Float32Array(tokens.length);
  for (let i = 3; i < vocabSize - extras.length; i++) if (types[i] === TokenType.NORMAL) scores[i] = -Math.log(2 + i - 3);
  return {
    kind: withCharsmap ? 'ugm-charsmap' : 'ugm', model: 't5', tokens, types, scores, bosId: -1, eosId: 1, unkId: 2, padId: 0, addBos: false,
    addSpacePrefix: true, removeExtraWhitespaces: true, chatTemplate: '', ...(precompiledCharsmap ? { precompiledCharsmap } : {}),
  };
}

/** The reserved suffix (U+E000) the hybriddna converter appends to each k-mer's text; llama.cpp erases it on load. */
export const DNA_KMER_MARKER = '\ue000';

/**
 * A HybridDNATokenizer's vocabulary as conversion/base.py's _set_vocab_hybriddna writes it
 * (tokenizer.ggml.model "hybriddna", pre "llama-bpe", Llama 3's merges): the byte-level BPE
 * vocabulary with plain-text runs of DNA letters among its tokens ("CCCCCC", "AAAAAA", "ACGT": text
 * a k-mer shares), Llama 3's specials less <|eot_id|> (a base model's end is <|end_of_text|>), then
 * the added tokens <dna>, </dna> and <oov> (CONTROL: the tokenizer's added tokens are special) and
 * right after <oov> the block of 6-mers over ACGT in
 * lexicographic order, each text with the U+E000 marker that keeps it apart from a BPE token of the
 * same text (NORMAL: the marked text is no added token). Half the vocabulary is BPE until the other
 * half holds all 4096 6-mers (the rest then [PADn], UNUSED, as the converter pads to vocab_size); a
 * smaller one keeps a fixed-seed subset of them (always AAAAAA, the padding of a short tail, and
 * CCCCCC, GATTAC and TTTTTT), so some k-mers fall back to <oov> as a non-ACGT k-mer does.
 */
export function buildHybridDnaVocab(vocabSize: number): Vocab {
  const nBase = Math.max(Math.ceil(vocabSize / 2), 280);
  if (vocabSize < nBase + 3 + 64) throw new Error(`vocab size ${vocabSize} too small for hybriddna: needs at least ${280 + 3 + 64}`);
  const bpe = buildBpeVocab('llama3', nBase);
  const nSpecials = specialsFor('llama3').length;
  const regular = bpe.tokens.slice(0, nBase - nSpecials);
  const merges = [...bpe.merges!];
  // plain-text DNA runs as BPE tokens (merged from the single letters), texts the k-mers share
  const have = new Set(regular);
  for (const [a, b] of [['C', 'C'], ['CC', 'CC'], ['CCCC', 'CC'], ['A', 'A'], ['AA', 'AA'], ['AAAA', 'AA'], ['A', 'C'], ['G', 'T'], ['AC', 'GT']]) {
    if (have.has(a + b)) continue;
    have.add(a + b);
    regular.push(a + b);
    merges.push(`${a} ${b}`);
  }
  // (a base model's specials: without <|eot_id|>, whose text llama.cpp's EOT detection would weigh against
  // <|end_of_text|>'s in its unordered_map's order, a hash layout kail does not copy; see the engine's vocab.ts)
  const specials = bpe.tokens.slice(nBase - nSpecials).filter((t) => t !== '<|eot_id|>');
  const tokens = [...regular, ...specials, '<dna>', '</dna>', '<oov>'];
  const types: TokenType[] = tokens.map((_, i) => (i < regular.length ? TokenType.NORMAL : TokenType.CONTROL));
  const nKmers = Math.min(4096, vocabSize - tokens.length);
  const all: string[] = [];
  for (let i = 0; i < 4096; i++) {
    let s = '';
    for (let j = 5; j >= 0; j--) s += 'ACGT'[(i >> (2 * j)) & 3];
    all.push(s);
  }
  let kmers = all;
  if (nKmers < all.length) {
    const keep = new Set(['AAAAAA', 'CCCCCC', 'GATTAC', 'TTTTTT']);
    const rng = new Xoshiro128(0xd7a);
    const rest = all.filter((k) => !keep.has(k));
    while (keep.size < nKmers) keep.add(rest.splice(Math.floor(rng.nextFloat() * rest.length), 1)[0]);
    kmers = all.filter((k) => keep.has(k));
  }
  for (const k of kmers) { tokens.push(k + DNA_KMER_MARKER); types.push(TokenType.NORMAL); }
  for (let i = tokens.length; i < vocabSize; i++) { tokens.push(`[PAD${i}]`); types.push(TokenType.UNUSED); }
  const id = (t: string) => tokens.indexOf(t);
  return {
    kind: 'hybriddna', model: 'hybriddna', pre: 'llama-bpe', tokens, types, merges,
    bosId: id('<|begin_of_text|>'), eosId: id('<|end_of_text|>'), padId: id('<|finetune_right_pad_id|>'), addBos: true, chatTemplate: '',
  };
}

export function buildVocab(kind: VocabKind, vocabSize: number): Vocab {
  if (kind === 'hybriddna') return buildHybridDnaVocab(vocabSize);
  if (kind === 'ugm' || kind === 'ugm-charsmap') return buildUgmVocab(vocabSize, kind === 'ugm-charsmap');
  if (kind === 'rwkv') return buildRwkvVocab(vocabSize);
  if (kind === 'plamo2') return buildPlamo2Vocab(vocabSize);
  if (kind === 'bert') return buildWpmVocab(vocabSize);
  return kind === 'spm' || kind === 'phi3' ? buildSpmVocab(vocabSize, kind) : buildBpeVocab(kind, vocabSize);
}

/** Writes the `tokenizer.*` keys. */
export function writeVocab(w: GgufWriter, v: Vocab): void {
  w.set('tokenizer.ggml.model', kv.str(v.model));
  if (v.pre) w.set('tokenizer.ggml.pre', kv.str(v.pre));
  w.set('tokenizer.ggml.tokens', kv.arr(GgufType.STRING, v.tokens));
  if (v.scores) w.set('tokenizer.ggml.scores', kv.arr(GgufType.FLOAT32, v.scores));
  w.set('tokenizer.ggml.token_type', kv.arr(GgufType.INT32, v.types));
  if (v.merges) w.set('tokenizer.ggml.merges', kv.arr(GgufType.STRING, v.merges));
  // (T5's vocabulary has no BOS: bosId -1.)
  if (v.bosId >= 0) w.set('tokenizer.ggml.bos_token_id', kv.u32(v.bosId));
  w.set('tokenizer.ggml.eos_token_id', kv.u32(v.eosId));
  if (v.unkId !== undefined) w.set('tokenizer.ggml.unknown_token_id', kv.u32(v.unkId));
  if (v.padId !== undefined) w.set('tokenizer.ggml.padding_token_id', kv.u32(v.padId));
  if (v.sepId !== undefined) w.set('tokenizer.ggml.seperator_token_id', kv.u32(v.sepId));
  if (v.maskId !== undefined) w.set('tokenizer.ggml.mask_token_id', kv.u32(v.maskId));
  if (v.eotId !== undefined) w.set('tokenizer.ggml.eot_token_id', kv.u32(v.eotId));
  // (PLaMo 2's converter writes no add_bos_token / add_eos_token; it writes add_space_prefix.)
  // (Nor do the RWKV world and T5 ones: llama.cpp's defaults for "rwkv" add neither, for "t5" only the EOS.)
  if (v.model !== 'plamo2' && v.model !== 'rwkv' && v.model !== 't5') {
    w.set('tokenizer.ggml.add_bos_token', kv.bool(v.addBos));
    w.set('tokenizer.ggml.add_eos_token', kv.bool(false));
  }
  if (v.addSpacePrefix !== undefined) w.set('tokenizer.ggml.add_space_prefix', kv.bool(v.addSpacePrefix));
  if (v.removeExtraWhitespaces !== undefined) w.set('tokenizer.ggml.remove_extra_whitespaces', kv.bool(v.removeExtraWhitespaces));
  // (as gguf-py's add_precompiled_charsmap writes the bytes: a UINT8 array)
  if (v.precompiledCharsmap) w.set('tokenizer.ggml.precompiled_charsmap', kv.arr(GgufType.UINT8, v.precompiledCharsmap));
  // (An encoder's vocabulary has no chat template.)
  if (v.chatTemplate) w.set('tokenizer.chat_template', kv.str(v.chatTemplate));
  // BERT's token types ("sentence A/B"): llama.cpp refuses a bert file without the count.
  if (v.model === 'bert') w.set('tokenizer.ggml.token_type_count', kv.u32(2));
}
