// A vocabulary built from GGUF metadata the way llama.cpp's `llama_vocab::impl::load` builds it:
// token texts, scores and attributes, BPE merge ranks, special token ids (from the metadata, from
// llama.cpp's per-model defaults, and from its text-based detection of EOT/FIM tokens), the flags
// that drive tokenization, and the set of end-of-generation tokens.

import { TokenizerError } from './errors';
import { plamo2ByteTokens } from './plamo2';
import { preTokenizerByName, preTokenizerRegexes } from './pre-tokenizers';
import type { PreTokenizerType } from './pre-tokenizers';
import { BYTE_TO_CHAR, utf8Length } from './unicode';

/**
 * GGUF metadata as a plain object: key → value. Strings are strings, booleans booleans, integers
 * numbers or bigints, arrays JS arrays or typed arrays (string arrays as string[]). The tokenizer
 * reads only `tokenizer.*` keys and `general.name` / `general.architecture`.
 */
export type VocabMetadata = Readonly<Record<string, unknown>>;

/** llama.cpp's llama_token_attr bits. */
export const TokenAttr = {
  UNDEFINED: 0,
  UNKNOWN: 1 << 0,
  UNUSED: 1 << 1,
  NORMAL: 1 << 2,
  CONTROL: 1 << 3,
  USER_DEFINED: 1 << 4,
  BYTE: 1 << 5,
  NORMALIZED: 1 << 6,
  LSTRIP: 1 << 7,
  RSTRIP: 1 << 8,
  SINGLE_WORD: 1 << 9,
} as const;

/** GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type). */
export const TokenType = {
  UNDEFINED: 0,
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

const TYPE_TO_ATTR: Record<number, number> = {
  [TokenType.UNKNOWN]: TokenAttr.UNKNOWN,
  [TokenType.UNUSED]: TokenAttr.UNUSED,
  [TokenType.NORMAL]: TokenAttr.NORMAL,
  [TokenType.CONTROL]: TokenAttr.CONTROL,
  [TokenType.USER_DEFINED]: TokenAttr.USER_DEFINED,
  [TokenType.BYTE]: TokenAttr.BYTE,
  [TokenType.UNDEFINED]: TokenAttr.UNDEFINED,
};

/**
 * 'spm': SentencePiece BPE (model "llama"); 'bpe': byte-level BPE ("gpt2" and kin); 'wpm': WordPiece
 * ("bert"); 'ugm': SentencePiece unigram ("t5"); 'rwkv': RWKV world ("rwkv"); 'plamo2': PLaMo 2's
 * unigram Viterbi with byte fallback ("plamo2").
 */
export type VocabType = 'spm' | 'bpe' | 'wpm' | 'ugm' | 'rwkv' | 'plamo2';

/** `tokenizer.ggml.model` values this tokenizer implements. */
export const SUPPORTED_TOKENIZER_MODELS = ['llama', 'gpt2', 'gemma4', 'whitespace', 'hybriddna', 'bert', 't5', 'rwkv', 'plamo2'] as const;

/** Special token ids; null where the vocabulary has none. */
export interface SpecialTokens {
  bos: number | null;
  eos: number | null;
  eot: number | null;
  eom: number | null;
  unk: number | null;
  sep: number | null;
  pad: number | null;
  mask: number | null;
  fimPre: number | null;
  fimSuf: number | null;
  fimMid: number | null;
  fimPad: number | null;
  fimRep: number | null;
  fimSep: number | null;
}

const K = 'tokenizer.ggml.';

// ---- metadata accessors ----

function describe(v: unknown): string {
  if (Array.isArray(v)) return 'array';
  if (ArrayBuffer.isView(v)) return v.constructor.name;
  return typeof v;
}

function bad(key: string, want: string, v: unknown): never {
  throw new TokenizerError('KAIL_E_BAD_MODEL', `invalid GGUF metadata ${key}: expected ${want}, got ${describe(v)}`);
}

function getString(meta: VocabMetadata, key: string): string | undefined {
  const v = meta[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') bad(key, 'string', v);
  return v;
}

function getBool(meta: VocabMetadata, key: string): boolean | undefined {
  const v = meta[key];
  if (v === undefined) return undefined;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'number' || typeof v === 'bigint') return v !== 0 && v !== 0n;
  return bad(key, 'bool', v);
}

function getInt(meta: VocabMetadata, key: string): number | undefined {
  const v = meta[key];
  if (v === undefined) return undefined;
  if (typeof v === 'bigint') return Number(v);
  if (typeof v === 'number' && Number.isInteger(v)) return v;
  return bad(key, 'integer', v);
}

function getStrings(meta: VocabMetadata, key: string): readonly string[] | undefined {
  const v = meta[key];
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || (v.length > 0 && typeof v[0] !== 'string')) bad(key, 'string array', v);
  return v as string[];
}

function getNumbers(meta: VocabMetadata, key: string): ArrayLike<number> | undefined {
  const v = meta[key];
  if (v === undefined) return undefined;
  if (ArrayBuffer.isView(v) && !(v instanceof DataView) && !(v instanceof BigInt64Array) && !(v instanceof BigUint64Array)) {
    return v as unknown as ArrayLike<number>;
  }
  if (Array.isArray(v) && (v.length === 0 || typeof v[0] === 'number')) return v as number[];
  return bad(key, 'number array', v);
}

// ---- texts llama.cpp recognises special tokens by ----

const EOT_TEXTS = [
  '<|eot_id|>', '<|im_end|>', '<|end|>', '<end_of_turn>', '<|endoftext|>', '<|end_of_text|>', '<EOT>', '_<EOT>', '[EOT]',
  '<｜end▁of▁sentence｜>', '<end_of_utterance>',
];
const EOM_TEXTS = ['<|eom_id|>'];
const FIM_PRE_TEXTS = ['<|fim_prefix|>', '<fim-prefix>', '<fim_prefix>', '<｜fim▁begin｜>', '<PRE>', '▁<PRE>', '<|code_prefix|>', '<|prefix|>'];
const FIM_SUF_TEXTS = ['<|fim_suffix|>', '<fim-suffix>', '<fim_suffix>', '<｜fim▁hole｜>', '<SUF>', '▁<SUF>', '<|code_suffix|>', '<|suffix|>'];
const FIM_MID_TEXTS = ['<|fim_middle|>', '<fim-middle>', '<fim_middle>', '<｜fim▁end｜>', '<MID>', '▁<MID>', '<|code_middle|>', '<|middle|>'];
const FIM_PAD_TEXTS = ['<|fim_pad|>', '<fim-pad>', '<fim_pad>', '<PAD>', '[PAD]'];
const FIM_REP_TEXTS = ['<|fim_repo|>', '<|repo_name|>', '<fim-repo>', '<REPO>', '<reponame>'];
const FIM_SEP_TEXTS = ['<|file_sep|>'];
const EOG_TEXTS = [
  '<|eot_id|>', '<|im_end|>', '<|end|>', '<|return|>', '<|call|>', '<|flush|>', '<|calls|>', '<end_of_turn>', '<|endoftext|>', '</s>',
  '<|eom_id|>', '<EOT>', '_<EOT>', '[EOT]', '[EOS]', '<|end_of_text|>', '<end_of_utterance>', '<eos>', '<turn|>', '<|tool_response>',
  '<｜end▁of▁sentence｜>', '[e~[',
];

export class Vocab {
  /** `tokenizer.ggml.model`. */
  readonly model: string;
  /** `tokenizer.ggml.pre` as used ('gemma4' for model gemma4; '' when missing). */
  readonly pre: string;
  readonly type: VocabType;
  readonly preType: PreTokenizerType;
  /** Pre-tokenizer regexes (BPE only) and whether pieces are GPT-2 byte-encoded. */
  readonly regexes: readonly string[];
  readonly byteEncode: boolean;

  readonly special: SpecialTokens;

  readonly addSpacePrefix: boolean;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly addSep: boolean;
  readonly ignoreMerges: boolean;
  readonly cleanSpaces: boolean;
  readonly removeExtraWhitespaces: boolean;
  readonly escapeWhitespaces: boolean;
  /** WordPiece normalizer options. */
  readonly lowercase: boolean;
  readonly stripAccents: boolean;

  /** `tokenizer.ggml.precompiled_charsmap` (unigram normalization), when present. */
  readonly precompiledCharsmap: Uint8Array | undefined;
  /** `tokenizer.chat_template`, when present. */
  readonly chatTemplate: string | undefined;
  /** Named templates, `tokenizer.chat_template.<name>` (e.g. "tool_use"). */
  readonly namedChatTemplates = new Map<string, string>();
  /**
   * The padding id llama.cpp falls back to for the newline token: its per-model default, since it
   * looks for the newline before reading the special ids from the metadata.
   */
  readonly newlineFallback: number | null;
  /** Longest token text in UTF-8 bytes. */
  readonly maxTokenLen: number;

  private readonly texts: string[];
  private readonly scores: Float32Array;
  private readonly attrs: Uint16Array;
  private readonly textToId = new Map<string, number>();
  private readonly ranks = new Map<string, number>();
  private readonly eog = new Set<number>();
  /** Control, user-defined and unknown tokens, longest text first (llama.cpp's cache_special_tokens). */
  readonly specialTokenIds: readonly number[];

  constructor(meta: VocabMetadata) {
    const model = getString(meta, K + 'model');
    if (model === undefined) throw new TokenizerError('KAIL_E_BAD_MODEL', `GGUF metadata has no ${K}model`);
    this.model = model;
    let pre = getString(meta, K + 'pre') ?? '';

    const special: SpecialTokens = {
      bos: null, eos: null, eot: null, eom: null, unk: null, sep: null, pad: null, mask: null,
      fimPre: null, fimSuf: null, fimMid: null, fimPad: null, fimRep: null, fimSep: null,
    };
    let type: VocabType;
    let addSpacePrefix = false;
    let addBos = false;
    let addEos = false;
    let addSep = false;
    let ignoreMerges = false;
    let cleanSpaces = false;
    let escapeWhitespaces = true;
    let lowercase = true;
    let preType: PreTokenizerType = 'default';

    if (model === 'llama') {
      type = 'spm';
      Object.assign(special, { bos: 1, eos: 2, unk: 0 });
    } else if (model === 't5') {
      type = 'ugm';
      Object.assign(special, { eos: 1, unk: 2, pad: 0 });
    } else if (model === 'rwkv') {
      type = 'rwkv';
    } else if (model === 'plamo2') {
      // (PLaMo 2's defaults, which the file's ids override.)
      type = 'plamo2';
      Object.assign(special, { bos: 1, eos: 2, unk: 0, pad: 3 });
    } else if (model === 'bert') {
      type = 'wpm';
      Object.assign(special, { bos: 101, unk: 100, sep: 102, pad: 0, mask: 103 });
      addSep = true;
    } else if (model === 'gpt2' || model === 'hybriddna' || model === 'whitespace' || model === 'gemma4') {
      type = 'bpe';
      const merges = getStrings(meta, K + 'merges');
      if (merges === undefined) {
        if (model === 'gemma4' || pre !== 'kimi-k2') {
          throw new TokenizerError('KAIL_E_BAD_MODEL', `GGUF metadata has no ${K}merges, which a '${model}' (BPE) vocabulary needs`);
        }
      } else {
        // llama.cpp splits each merge at the first space after its first character: "a b" keys the
        // pair (a, b). The first of repeated merges counts, hence the walk from the end.
        for (let i = merges.length - 1; i >= 0; i--) {
          const m = merges[i];
          if (m.indexOf(' ', 1) > 0) this.ranks.set(m, i);
        }
      }
      if (model === 'gemma4') {
        pre = 'gemma4';
      } else {
        Object.assign(special, { bos: 11, eos: 11 });
      }
    } else {
      const known = ['no_vocab', 'none', 'test'].includes(model);
      throw new TokenizerError(
        known ? 'KAIL_E_UNSUPPORTED' : 'KAIL_E_BAD_MODEL',
        `${known ? 'unsupported' : 'unknown'} tokenizer model '${model}' (${K}model); supported: ${SUPPORTED_TOKENIZER_MODELS.join(', ')}`,
      );
    }

    this.newlineFallback = special.pad;

    let regexes: readonly string[] = [];
    let byteEncode = true;
    if (type === 'bpe') {
      addSpacePrefix = false;
      escapeWhitespaces = false;
      cleanSpaces = true;
      const p = preTokenizerByName(pre);
      preType = p.type;
      if (p.cleanSpaces !== undefined) cleanSpaces = p.cleanSpaces;
      if (p.ignoreMerges) ignoreMerges = true;
      if (p.addBos) addBos = true;
      if (p.addSep) addSep = true;
      if (p.escapeWhitespaces) escapeWhitespaces = true;
      if (p.noBos) special.bos = null;
      if (p.type === 'whitespace') lowercase = false;
      ({ regexes, byteEncode } = preTokenizerRegexes(p.type));
    } else if (type === 'spm') {
      addSpacePrefix = true;
      cleanSpaces = false;
      addBos = true;
      addEos = false;
    } else if (type === 'ugm') {
      addBos = false;
      addEos = true;
    } else if (type === 'rwkv') {
      addSpacePrefix = false;
      cleanSpaces = false;
      addBos = false;
      addEos = false;
    } else if (type === 'plamo2') {
      // llama.cpp's defaults for the other types; its PLaMo 2 tokenization adds no BOS or EOS at all.
      addSpacePrefix = false;
      addBos = false;
      addEos = false;
    } else {
      addSpacePrefix = false;
      cleanSpaces = true;
      addBos = true;
      addEos = false;
      addSep = true;
    }
    addSpacePrefix = getBool(meta, K + 'add_space_prefix') ?? addSpacePrefix;
    this.removeExtraWhitespaces = getBool(meta, K + 'remove_extra_whitespaces') ?? false;

    // tokens, scores, types
    const tokens = getStrings(meta, K + 'tokens');
    if (tokens === undefined) throw new TokenizerError('KAIL_E_BAD_MODEL', `GGUF metadata has no ${K}tokens`);
    const n = tokens.length;
    const scores = getNumbers(meta, K + 'scores');
    if (scores && scores.length < n) {
      throw new TokenizerError('KAIL_E_BAD_MODEL', `${K}scores has ${scores.length} entries for ${n} tokens`);
    }
    const types = getNumbers(meta, K + 'token_type');
    if (types && types.length < n) {
      throw new TokenizerError('KAIL_E_BAD_MODEL', `${K}token_type has ${types.length} entries for ${n} tokens`);
    }
    this.texts = new Array<string>(n);
    this.scores = new Float32Array(n);
    this.attrs = new Uint16Array(n);
    let maxLen = 0;
    for (let i = 0; i < n; i++) {
      let word = tokens[i];
      if (word === '') word = `[EMPTY_${i}]`;
      // A later token with the same text takes the text, as in llama.cpp's map. (llama.cpp refuses
      // such files; here texts can also coincide when invalid UTF-8 was decoded to U+FFFD.)
      this.textToId.set(word, i);
      this.texts[i] = word;
      const len = utf8Length(word);
      if (len > maxLen) maxLen = len;
      if (scores) this.scores[i] = scores[i];
      this.attrs[i] = types ? (TYPE_TO_ATTR[types[i]] ?? TokenAttr.UNDEFINED) : TokenAttr.NORMAL;
    }
    this.maxTokenLen = maxLen;

    // hybriddna: k-mer texts carry a marker that keeps them apart from plain text; they detokenize
    // without it (llama.cpp erases it from the id → text table only)
    if (model === 'hybriddna') {
      const oov = this.textToId.get('<oov>');
      if (oov !== undefined) {
        for (let i = oov + 1; i < n; i++) {
          const t = this.texts[i];
          if (t.length > 1 && t.endsWith('\ue000')) this.texts[i] = t.slice(0, -1);
        }
      }
    }

    // special token ids: defaults out of range are dropped; metadata ids out of range are ignored
    const idKeys: [keyof SpecialTokens, string][] = [
      ['bos', 'bos_token_id'], ['eos', 'eos_token_id'], ['eot', 'eot_token_id'], ['eom', 'eom_token_id'],
      ['unk', 'unknown_token_id'], ['sep', 'seperator_token_id'], ['pad', 'padding_token_id'], ['mask', 'mask_token_id'],
      ['fimPre', 'fim_pre_token_id'], ['fimSuf', 'fim_suf_token_id'], ['fimMid', 'fim_mid_token_id'],
      ['fimPad', 'fim_pad_token_id'], ['fimRep', 'fim_rep_token_id'], ['fimSep', 'fim_sep_token_id'],
      ['fimPre', 'prefix_token_id'], ['fimSuf', 'suffix_token_id'], ['fimMid', 'middle_token_id'],
    ];
    for (const [field, key] of idKeys) {
      const cur = special[field];
      if (cur !== null && cur >= n) special[field] = null;
      const id = getInt(meta, K + key);
      if (id !== undefined && id >= 0 && id < n) special[field] = id;
    }

    addBos = getBool(meta, K + 'add_bos_token') ?? addBos;
    addEos = getBool(meta, K + 'add_eos_token') ?? addEos;
    addSep = getBool(meta, K + 'add_sep_token') ?? addSep;
    if (preType === 'gemma4' && !addBos) addBos = true;

    lowercase = getBool(meta, K + 'normalizer.lowercase') ?? lowercase;
    this.lowercase = lowercase;
    this.stripAccents = getBool(meta, K + 'normalizer.strip_accents') ?? lowercase;

    // Text-based detection of EOT/EOM/FIM tokens. llama.cpp walks an unordered_map, so with several
    // candidates its pick depends on the C++ library's hashing; here the first text of the list wins
    // (the chat-turn terminator before <|endoftext|>, which is what llama.cpp on Linux picks for
    // Qwen2, Llama 3 and Phi-3).
    const detect: [keyof SpecialTokens, string[]][] = [
      ['eot', EOT_TEXTS], ['eom', EOM_TEXTS], ['fimPre', FIM_PRE_TEXTS], ['fimSuf', FIM_SUF_TEXTS], ['fimMid', FIM_MID_TEXTS],
      ['fimPad', FIM_PAD_TEXTS], ['fimRep', FIM_REP_TEXTS], ['fimSep', FIM_SEP_TEXTS],
    ];
    for (const [field, texts] of detect) {
      if (special[field] !== null) continue;
      let best: number | null = null;
      for (const t of texts) {
        const id = this.textToId.get(t);
        if (id !== undefined) {
          best = id;
          break;
        }
      }
      if (best !== null) {
        special[field] = best;
        this.attrs[best] |= TokenAttr.CONTROL;
      }
    }

    // control tokens named "unused…" are unused
    for (let i = 0; i < n; i++) {
      if (this.attrs[i] & TokenAttr.CONTROL && !(this.attrs[i] & TokenAttr.UNUSED) && this.texts[i].includes('unused')) {
        this.attrs[i] |= TokenAttr.UNUSED;
      }
    }

    // end-of-generation tokens
    for (const id of [special.fimPad, special.fimRep, special.fimSep]) if (id !== null) this.eog.add(id);
    for (const t of EOG_TEXTS) {
      const id = this.textToId.get(t);
      if (id !== undefined) {
        this.eog.add(id);
        this.attrs[id] |= TokenAttr.CONTROL;
      }
    }
    // gpt-oss: always render these
    for (const t of ['<|channel|>', '<|message|>', '<|start|>', '<|constrain|>']) {
      const id = this.textToId.get(t);
      if (id !== undefined) this.attrs[id] = TokenAttr.USER_DEFINED;
    }
    for (const id of [special.eos, special.eot, special.eom]) if (id !== null) this.eog.add(id);
    {
      // o200k_harmony / solar-open: <|end|> is not end of generation when <|return|>+<|call|> or <|calls|>+<|flush|> exist
      let hasReturn = false;
      let hasCall = false;
      let hasFlush = false;
      let endId: number | null = null;
      for (const id of this.eog) {
        const t = this.texts[id];
        if (t === '<|return|>') hasReturn = true;
        else if (t === '<|call|>' || t === '<|calls|>') hasCall = true;
        else if (t === '<|flush|>') hasFlush = true;
        else if (t === '<|end|>') endId = id;
      }
      if (endId !== null && ((hasReturn && hasCall) || (hasCall && hasFlush))) {
        this.eog.delete(endId);
        this.attrs[endId] = TokenAttr.USER_DEFINED;
      }
      // gemma4 / paddleocr: </s> is not end of generation when <|tool_response> is
      let hasToolResponse = false;
      let sId: number | null = null;
      for (const id of this.eog) {
        const t = this.texts[id];
        if (t === '<|tool_response>') hasToolResponse = true;
        else if (t === '</s>') sId = id;
      }
      if (hasToolResponse && sId !== null) {
        this.eog.delete(sId);
        this.attrs[sId] = TokenAttr.NORMAL;
      }
    }

    // Special tokens, longest UTF-8 text first. llama.cpp's std::sort leaves ties in no set order;
    // ties here keep id order.
    const specials: number[] = [];
    for (let i = 0; i < n; i++) {
      if (this.attrs[i] & (TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN)) specials.push(i);
    }
    const byteLen = new Map(specials.map((id) => [id, utf8Length(this.texts[id])]));
    specials.sort((a, b) => byteLen.get(b)! - byteLen.get(a)! || a - b);
    this.specialTokenIds = specials;

    // per-model strip attributes (llama.cpp keys these off the model and tokenizer names)
    const name = (getString(meta, 'general.name') ?? '').toLowerCase();
    const rawPre = getString(meta, K + 'pre') ?? '';
    const arch = getString(meta, 'general.architecture') ?? '';
    const has = (s: string, subs: string[]) => subs.some((x) => s.includes(x));
    const setAttr = (text: string, attr: number, on: boolean) => {
      const id = this.textToId.get(text);
      if (id === undefined) return;
      this.attrs[id] = on ? this.attrs[id] | attr : this.attrs[id] & ~attr;
    };
    if (has(rawPre, ['jina-v2-de', 'jina-v2-es', 'jina-v2-code']) || has(arch, ['nomic-bert-moe', 'jina-bert-v3'])) {
      setAttr('<mask>', TokenAttr.LSTRIP, true);
    } else if (has(name, ['phi-3', 'phi3'])) {
      for (const id of specials) this.attrs[id] |= TokenAttr.RSTRIP;
      setAttr('</s>', TokenAttr.RSTRIP, true);
      for (const t of ['<unk>', '<s>', '<|endoftext|>']) setAttr(t, TokenAttr.RSTRIP, false);
    } else if (has(name, ['modern-bert'])) {
      setAttr('[MASK]', TokenAttr.LSTRIP, true);
    }

    this.type = type;
    this.pre = pre;
    this.preType = preType;
    this.regexes = regexes;
    this.byteEncode = byteEncode;
    this.special = special;
    this.addSpacePrefix = addSpacePrefix;
    this.addBos = addBos;
    this.addEos = addEos;
    this.addSep = addSep;
    this.ignoreMerges = ignoreMerges;
    this.cleanSpaces = cleanSpaces;
    this.escapeWhitespaces = escapeWhitespaces;
    // llama.cpp builds PLaMo 2's tokenizer while loading: a vocabulary without every byte token is refused there.
    if (type === 'plamo2') plamo2ByteTokens(this);
    const charsmap = meta[K + 'precompiled_charsmap'];
    if (charsmap === undefined) this.precompiledCharsmap = undefined;
    else if (charsmap instanceof Uint8Array) this.precompiledCharsmap = charsmap;
    else if (charsmap instanceof Int8Array) this.precompiledCharsmap = new Uint8Array(charsmap.buffer, charsmap.byteOffset, charsmap.length);
    else if (Array.isArray(charsmap)) this.precompiledCharsmap = Uint8Array.from(charsmap as number[]);
    else bad(K + 'precompiled_charsmap', 'uint8 array', charsmap);
    this.chatTemplate = getString(meta, 'tokenizer.chat_template');
    for (const key of Object.keys(meta)) {
      if (key.startsWith('tokenizer.chat_template.')) {
        const t = getString(meta, key);
        if (t !== undefined) this.namedChatTemplates.set(key.slice('tokenizer.chat_template.'.length), t);
      }
    }
  }

  get nTokens(): number {
    return this.texts.length;
  }

  /** The token's text as stored in the vocabulary (GPT-2 byte alphabet for byte-level BPE). */
  tokenText(id: number): string {
    this.check(id);
    return this.texts[id];
  }

  tokenScore(id: number): number {
    this.check(id);
    return this.scores[id];
  }

  /** TokenAttr bits of a token. */
  tokenAttr(id: number): number {
    this.check(id);
    return this.attrs[id];
  }

  isControl(id: number): boolean {
    return (this.tokenAttr(id) & TokenAttr.CONTROL) !== 0;
  }

  isByte(id: number): boolean {
    return (this.tokenAttr(id) & TokenAttr.BYTE) !== 0;
  }

  /** True for tokens that end generation (EOS, EOT, EOM, FIM pad/rep/sep and the texts llama.cpp knows). */
  isEog(id: number): boolean {
    return this.eog.has(id);
  }

  /** The end-of-generation token ids, ascending. */
  get eogIds(): number[] {
    return [...this.eog].sort((a, b) => a - b);
  }

  /** The token whose text is exactly `text`, or null. */
  textToToken(text: string): number | null {
    return this.textToId.get(text) ?? null;
  }

  /** Merge rank of the pair (lower merges first), or -1 when the pair does not merge. */
  bpeRank(left: string, right: string): number {
    return this.ranks.get(left + ' ' + right) ?? -1;
  }

  /** Number of BPE merges. */
  get nMerges(): number {
    return this.ranks.size;
  }

  /** The token for byte `b`: "<0xXX>" for SPM-style vocabularies, the byte's character for byte-level BPE. */
  byteToToken(b: number): number {
    let id: number | undefined;
    if (this.type === 'bpe' && this.byteEncode) {
      id = this.textToId.get(BYTE_TO_CHAR[b]);
    } else {
      id = this.textToId.get(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
      if (id === undefined && b < 0x80) id = this.textToId.get(String.fromCharCode(b));
    }
    if (id === undefined) {
      throw new TokenizerError('KAIL_E_BAD_MODEL', `the vocabulary has no token for byte 0x${b.toString(16).padStart(2, '0')}`);
    }
    return id;
  }

  /** The byte a byte token (<0xXX>) stands for. */
  tokenToByte(id: number): number {
    return parseInt(this.tokenText(id).slice(3, 5), 16);
  }

  private check(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.texts.length) {
      throw new TokenizerError('KAIL_E_INVALID_ARG', `token id ${id} is out of range (vocabulary of ${this.texts.length})`);
    }
  }

}
