import { PRE_TOKENIZER_NAMES, preTokenizerByName, preTokenizerRegexes } from './pre-tokenizers';
import { regexSplit } from './regex-split';
import { byteEncode } from './unicode';

const split = (name: string, text: string) => regexSplit(text, preTokenizerRegexes(preTokenizerByName(name).type).regexes, false);

describe('pre-tokenizer regex split', () => {
  it('GPT-2: contractions are case sensitive, a space joins the next word, whitespace before a word stays apart', () => {
    expect(split('gpt-2', "Hello world's  foo123 !!\n  x I'M")).toEqual([
      'Hello', ' world', "'s", ' ', ' foo', '123', ' !!', '\n ', ' x', ' I', "'", 'M',
    ]);
  });

  it('Llama-3: case-insensitive contractions, digits in threes, newlines end punctuation runs', () => {
    expect(split('llama-bpe', "I'M 1234567 don't!!\n\n  x")).toEqual([
      'I', "'M", ' ', '123', '456', '7', ' don', "'t", '!!\n\n', ' ', ' x',
    ]);
  });

  it('Qwen2: single digits', () => {
    expect(split('qwen2', 'a 123')).toEqual(['a', ' ', '1', '2', '3']);
  });

  it('Qwen3.5: combining marks stay with their letters', () => {
    // U+0301 (combining acute) is \p{M}: Qwen2 splits it off, Qwen3.5 keeps it
    expect(split('qwen2', 'cafe\u0301s')).toEqual(['cafe', '\u0301s']);
    expect(split('qwen35', 'cafe\u0301s')).toEqual(['cafe\u0301s']);
  });

  it('regexes without a fast path run on the collapsed text, as llama.cpp runs them through std::regex', () => {
    // deepseek-coder applies [\r\n], \s?\p{L}+, \s?\p{P}+, CJK runs and \p{N} in turn, each to the
    // pieces of the one before; a later regex can split an earlier piece (" 世界" -> " ", "世界")
    expect(split('deepseek-coder', 'héllo, 世界 42\n')).toEqual(['héllo', ',', ' ', '世界', ' ', '4', '2', '\n']);
  });

  it('keeps llama.cpp quirks: \\p{Lu} stands for any letter in the collapsed regexes', () => {
    // tekken's case-split: upper* lower+ — with non-ASCII letters counting as both cases, "ÀÉx" stays whole
    expect(split('tekken', 'HelloWorld ÀÉx')).toEqual(['Hello', 'World', ' ÀÉx']);
  });

  it('non-ASCII spaces are \\s for llama.cpp; U+FEFF is not', () => {
    // " ?\p{L}+" takes only an ASCII space, so U+3000 stays apart from the word
    expect(split('gpt-2', 'a\u3000\u3000b')).toEqual(['a', '\u3000', '\u3000', 'b']);
    expect(split('deepseek-llm', 'a\ufeffb')).toEqual(['a', '\ufeff', 'b']);
  });

  it('splits without losing text for every pre-tokenizer name', () => {
    const text = "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL\n\n\t 3.333 x\u0301 \u00a0 end  ";
    for (const name of PRE_TOKENIZER_NAMES) {
      const pieces = split(name, text);
      expect({ name, text: pieces.join('') }).toEqual({ name, text });
    }
  });

  it('byte-encodes pieces into the GPT-2 alphabet', () => {
    expect(regexSplit(' héllo', ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"])).toEqual([
      byteEncode(' héllo'),
    ]);
    expect(byteEncode(' é')).toBe('ĠÃ©');
  });
});

describe('pre-tokenizer names', () => {
  it('maps names the way llama.cpp does', () => {
    expect(preTokenizerByName('llama-bpe')).toMatchObject({ type: 'llama3', ignoreMerges: true, addBos: true });
    expect(preTokenizerByName('qwen2')).toMatchObject({ type: 'qwen2', cleanSpaces: false });
    expect(preTokenizerByName('megrez').type).toBe('qwen2');
    expect(preTokenizerByName('llama4').type).toBe('gpt4o');
    expect(preTokenizerByName('chatglm-bpe')).toMatchObject({ type: 'chatglm4', noBos: true });
    expect(preTokenizerByName(undefined).type).toBe('default');
  });

  it('rejects an unknown name, listing the known ones', () => {
    expect(() => preTokenizerByName('no-such-pre')).toThrow(/unknown pre-tokenizer type 'no-such-pre'.*qwen2/);
  });
});
