// Pre-tokenizers of byte-level BPE vocabularies, as llama.cpp maps `tokenizer.ggml.pre` to them:
// the name table of `llama_vocab::impl::load` and the regex lists of `llm_tokenizer_bpe` (both in
// llama.cpp src/llama-vocab.cpp). The regex strings are llama.cpp's own, character for character,
// because regex-split.ts picks its hand-written fast paths by comparing them.

import { TokenizerError } from './errors';

/** llama.cpp's LLAMA_VOCAB_PRE_TYPE_*, lower case. */
export type PreTokenizerType =
  | 'default' | 'llama3' | 'deepseek_llm' | 'deepseek_coder' | 'falcon' | 'mpt' | 'starcoder' | 'gpt2'
  | 'refact' | 'command_r' | 'stablelm2' | 'qwen2' | 'olmo' | 'dbrx' | 'smaug' | 'poro' | 'chatglm4'
  | 'viking' | 'jais' | 'tekken' | 'smollm' | 'codeshell' | 'bloom' | 'gpt3_finnish' | 'exaone'
  | 'chameleon' | 'minerva' | 'deepseek3_llm' | 'gpt4o' | 'superbpe' | 'trillion' | 'bailingmoe'
  | 'seed_coder' | 'hunyuan' | 'kimi_k2' | 'hunyuan_dense' | 'granite_docling' | 'minimax_m2'
  | 'afmoe' | 'solar_open' | 'youtu' | 'exaone_moe' | 'qwen35' | 'tiny_aya' | 'joyai_llm' | 'jais2'
  | 'gemma4' | 'sarvam_moe' | 'minicpm5' | 'whitespace' | 'granite_emb_multi' | 'mellum2' | 'laguna'
  | 'hy_v4' | 'spark2_5' | 'ufakzeka' | 'grok_2';

interface RegexSet {
  types: PreTokenizerType[];
  regexes: string[];
  /** false: pieces stay raw UTF-8 instead of GPT-2's byte-level alphabet (SPM-style BPE). */
  byteEncode?: boolean;
}

// prettier-ignore
const REGEX_SETS: RegexSet[] = [
  // LLAMA3
  {
    types: ['llama3'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // JAIS2
  {
    types: ['jais2'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}',
    ],
  },
  // DBRX, SMAUG
  {
    types: ['dbrx', 'smaug'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // DEEPSEEK_LLM
  {
    types: ['deepseek_llm'],
    regexes: [
      '[\r\n]',
      '\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+',
      '\\s?[!-/:-~！-／：-～‘-‟　-。]+',
      '\\s+$',
      '[一-龥ࠀ-一가-퟿]+',
      '\\p{N}+',
    ],
  },
  // DEEPSEEK3_LLM, HUNYUAN_DENSE, JOYAI_LLM, HY_V4
  {
    types: ['deepseek3_llm', 'hunyuan_dense', 'joyai_llm', 'hy_v4'],
    regexes: [
      '\\p{N}{1,3}',
      '[一-龥぀-ゟ゠-ヿ]+',
      '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // SPARK2_5
  {
    types: ['spark2_5'],
    regexes: [
      '\\p{N}{1,3}',
      '[一-龥぀-ゟ゠-ヿ]+',
      '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+',
      '\\p{N}',
    ],
  },
  // YOUTU
  {
    types: ['youtu'],
    regexes: [
      '[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+',
      '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // DEEPSEEK_CODER
  {
    types: ['deepseek_coder'],
    regexes: [
      '[\r\n]',
      '\\s?\\p{L}+',
      '\\s?\\p{P}+',
      '[一-龥ࠀ-一가-퟿]+',
      '\\p{N}',
    ],
  },
  // FALCON
  {
    types: ['falcon'],
    regexes: [
      '[\\p{P}\\$\\+<=>\\^~\\|`]+',
      '\'s|\'t|\'re|\'ve|\'m|\'ll|\'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)',
      '[0-9][0-9][0-9]',
    ],
  },
  // STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2
  {
    types: ['starcoder', 'refact', 'command_r', 'smollm', 'codeshell', 'exaone', 'minerva', 'mellum2'],
    regexes: [
      '\\p{N}',
      '\'s|\'t|\'re|\'ve|\'m|\'ll|\'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)',
    ],
  },
  // GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING
  {
    types: ['gpt2', 'mpt', 'olmo', 'jais', 'trillion', 'granite_docling'],
    regexes: [
      '\'s|\'t|\'re|\'ve|\'m|\'ll|\'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)',
    ],
  },
  // STABLELM2, QWEN2, HUNYUAN, SOLAR_OPEN
  {
    types: ['stablelm2', 'qwen2', 'hunyuan', 'solar_open'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // QWEN35
  {
    types: ['qwen35'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // PORO, BLOOM, GPT3_FINNISH
  {
    types: ['poro', 'bloom', 'gpt3_finnish'],
    regexes: [
      ' ?[^(\\s|.,!?…。，、।۔،)]+',
    ],
  },
  // CHATGLM4
  {
    types: ['chatglm4'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // VIKING
  {
    types: ['viking'],
    regexes: [
      ' ?[^(\\s|.,!?…。，、।۔،)]+',
      '\\p{N}',
    ],
  },
  // TEKKEN
  {
    types: ['tekken'],
    regexes: [
      '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // CHAMELEON
  {
    types: ['chameleon'],
    regexes: [
      '<sentinel:[0-9]+>',
      '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z',
      '([\\t\\n]|    |  )',
      '\\p{N}',
      '[\\p{P}!-/:-@\\[-`{-~]',
      '\'s|\'t|\'re|\'ve|\'m|\'ll|\'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)',
    ],
  },
  // GPT4O, MINIMAX_M2
  {
    types: ['gpt4o', 'minimax_m2'],
    regexes: [
      '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // GRANITE_EMB_MULTI
  {
    types: ['granite_emb_multi'],
    regexes: [
      '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // TINY_AYA
  {
    types: ['tiny_aya'],
    regexes: [
      '\\d{1,3}(?=(?:\\d{3})*\\b)',
      '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // KIMI_K2
  {
    types: ['kimi_k2'],
    regexes: [
      '\\p{Han}+',
    ],
  },
  // SUPERBPE
  {
    types: ['superbpe'],
    regexes: [
      '\\p{N}+',
      '(?=(\\d{3})+(?!\\d))',
    ],
  },
  // BAILINGMOE
  {
    types: ['bailingmoe'],
    regexes: [
      '\'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+',
    ],
  },
  // SEED_CODER
  {
    types: ['seed_coder'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // UFAKZEKA
  {
    types: ['ufakzeka'],
    regexes: [
      '[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // GROK_2
  {
    types: ['grok_2'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // AFMOE
  {
    types: ['afmoe'],
    regexes: [
      '\\p{AFMoE_digits}',
      '[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+',
      '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // LAGUNA
  {
    types: ['laguna'],
    regexes: [
      '[^\\n]+|[\\n]+',
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // EXAONE_MOE
  {
    types: ['exaone_moe'],
    regexes: [
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+',
    ],
  },
  // GEMMA4
  {
    types: ['gemma4'],
    regexes: [
      '[^\\n]+|[\\n]+',
    ],
    byteEncode: false,
  },
  // SARVAM_MOE
  {
    types: ['sarvam_moe'],
    regexes: [
      '[^\\n]+|[\\n]+',
    ],
    byteEncode: false,
  },
  // MINICPM5
  {
    types: ['minicpm5'],
    regexes: [
      '\\p{N}{1,3}',
      '(?:\'[sS]|\'[tT]|\'[rR][eE]|\'[vV][eE]|\'[mM]|\'[lL][lL]|\'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ],
  },
  // WHITESPACE
  {
    types: ['whitespace'],
    regexes: [
      '\\S+',
    ],
    byteEncode: false,
  },
  // DEFAULT
  {
    types: ['default'],
    regexes: [
      '[\\p{P}\\$\\+<=>\\^~\\|]+',
      '\'s|\'t|\'re|\'ve|\'m|\'ll|\'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)',
      '\\p{N}+',
      '[0-9][0-9][0-9]',
    ],
  },
];

const BY_TYPE = new Map<PreTokenizerType, RegexSet>();
for (const set of REGEX_SETS) for (const t of set.types) BY_TYPE.set(t, set);

/** What a `tokenizer.ggml.pre` name sets, beyond the BPE defaults (clean spaces on, no space prefix). */
export interface PreTokenizerName {
  type: PreTokenizerType;
  /** clean_up_tokenization_spaces when detokenizing (BPE default: true). */
  cleanSpaces?: boolean;
  /** Take a whole pre-tokenized word as one token when the vocabulary has it, skipping merges. */
  ignoreMerges?: boolean;
  addBos?: boolean;
  addSep?: boolean;
  /** Spaces become U+2581 before BPE (SPM-style BPE vocabularies). */
  escapeWhitespaces?: boolean;
  /** The default BOS id is dropped (ChatGLM). */
  noBos?: boolean;
}

const NAMES = new Map<string, PreTokenizerName>();
function names(list: string[], def: PreTokenizerName): void {
  for (const n of list) NAMES.set(n, def);
}
names(['default'], { type: 'default' });
names(['minicpm5'], { type: 'minicpm5', ignoreMerges: true });
names(['llama3', 'llama-v3', 'llama-bpe', 'falcon3', 'falcon-h1', 'pixtral', 'midm-2.0', 'lfm2', 'jina-v5-nano'], {
  type: 'llama3',
  ignoreMerges: true,
  addBos: true,
});
names(['deepseek-llm'], { type: 'deepseek_llm', cleanSpaces: false });
names(['deepseek-coder'], { type: 'deepseek_coder', cleanSpaces: false });
names(['deepseek-v3'], { type: 'deepseek3_llm', cleanSpaces: false });
names(['spark2_5'], { type: 'spark2_5', cleanSpaces: false });
names(['youtu'], { type: 'youtu', cleanSpaces: false, ignoreMerges: true });
names(['falcon'], { type: 'falcon' });
names(['mpt'], { type: 'mpt' });
names(['starcoder'], { type: 'starcoder' });
names(['gpt-2', 'phi-2', 'jina-es', 'jina-de', 'gigachat', 'jina-v2-es', 'jina-v2-de', 'a.x-4.0', 'mellum', 'modern-bert'], {
  type: 'gpt2',
});
names(['jais-2'], { type: 'jais2' });
names(['gemma4', 'granite-embed-multi-311m'], { type: 'gemma4', escapeWhitespaces: true });
names(['sarvam-moe'], { type: 'sarvam_moe', escapeWhitespaces: true, cleanSpaces: false });
names(['jina-v1-en', 'jina-v2-code', 'roberta-bpe'], { type: 'gpt2', addSep: true });
names(['whitespace'], { type: 'whitespace' });
names(['refact'], { type: 'refact' });
names(['command-r'], { type: 'command_r', cleanSpaces: false });
names(['qwen2', 'deepseek-r1-qwen', 'kormo', 'f2llmv2'], { type: 'qwen2', cleanSpaces: false });
names(['qwen35'], { type: 'qwen35', cleanSpaces: false });
names(['stablelm2'], { type: 'stablelm2' });
names(['olmo'], { type: 'olmo' });
names(['dbrx'], { type: 'dbrx' });
names(['smaug-bpe'], { type: 'smaug' });
names(['poro-chat'], { type: 'poro', cleanSpaces: false });
names(['glm4', 'chatglm-bpe'], { type: 'chatglm4', noBos: true });
names(['viking'], { type: 'viking', cleanSpaces: false });
names(['jais'], { type: 'jais' });
names(['tekken'], { type: 'tekken', cleanSpaces: false, ignoreMerges: true, addBos: true });
names(['smollm'], { type: 'smollm', cleanSpaces: false });
names(['codeshell'], { type: 'codeshell' });
names(['bloom'], { type: 'bloom' });
names(['gpt3-finnish'], { type: 'gpt3_finnish' });
names(['exaone'], { type: 'exaone' });
names(['exaone4'], { type: 'gpt2' });
names(['exaone-moe'], { type: 'exaone_moe' });
names(['chameleon'], { type: 'chameleon', addBos: true, cleanSpaces: false });
names(['minerva-7b'], { type: 'minerva' });
names(['megrez'], { type: 'qwen2' });
names(['gpt-4o', 'llama4', 'kanana2', 'talkie'], { type: 'gpt4o', cleanSpaces: false });
names(['granite-embed-multi-97m'], { type: 'granite_emb_multi', cleanSpaces: false, ignoreMerges: true });
names(['tiny_aya', 'cohere2moe'], { type: 'tiny_aya', cleanSpaces: false });
names(['superbpe'], { type: 'superbpe', cleanSpaces: false });
names(['trillion'], { type: 'trillion', cleanSpaces: false });
names(['granite-docling'], { type: 'granite_docling', cleanSpaces: false });
names(['bailingmoe', 'bailingmoe2', 'llada-moe'], { type: 'bailingmoe', cleanSpaces: false });
names(['seed-coder'], { type: 'seed_coder', cleanSpaces: false });
names(['hunyuan'], { type: 'hunyuan', cleanSpaces: false });
names(['hunyuan-dense'], { type: 'hunyuan_dense', cleanSpaces: false });
names(['hy_v4'], { type: 'hy_v4', cleanSpaces: false });
names(['joyai-llm'], { type: 'joyai_llm', cleanSpaces: false });
names(['kimi-k2'], { type: 'kimi_k2', cleanSpaces: false });
names(['ufakzeka'], { type: 'ufakzeka', cleanSpaces: false });
names(['grok-2'], { type: 'grok_2', cleanSpaces: false });
names(['afmoe'], { type: 'afmoe', cleanSpaces: false });
names(['laguna'], { type: 'laguna', cleanSpaces: false });
names(['minimax-m2'], { type: 'minimax_m2', cleanSpaces: false });
names(['solar-open'], { type: 'solar_open', cleanSpaces: false });
names(['mellum2'], { type: 'mellum2' });

/** Every `tokenizer.ggml.pre` value llama.cpp (and so this tokenizer) accepts for BPE vocabularies. */
export const PRE_TOKENIZER_NAMES: readonly string[] = [...NAMES.keys()];

/**
 * The pre-tokenizer a `tokenizer.ggml.pre` name selects. A missing name means 'default' (llama.cpp
 * warns that generation quality will suffer); an unknown one is an error, as in llama.cpp.
 */
export function preTokenizerByName(name: string | undefined): PreTokenizerName {
  if (name === undefined || name === '') return { type: 'default' };
  const found = NAMES.get(name);
  if (!found) {
    throw new TokenizerError(
      'KAIL_E_BAD_MODEL',
      `unknown pre-tokenizer type '${name}' (tokenizer.ggml.pre); supported: ${PRE_TOKENIZER_NAMES.join(', ')}`,
    );
  }
  return found;
}

/** The regex list and byte encoding of a pre-tokenizer type. */
export function preTokenizerRegexes(type: PreTokenizerType): { regexes: readonly string[]; byteEncode: boolean } {
  const set = BY_TYPE.get(type) ?? BY_TYPE.get('default')!;
  return { regexes: set.regexes, byteEncode: set.byteEncode ?? true };
}
