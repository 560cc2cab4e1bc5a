import { EngineError } from '../errors';
import { GbnfRecognizer, parseGbnf } from './gbnf';
import { OutputConstraint } from './json-constraint';

const bytes = (s: string) => Uint8Array.from(Buffer.from(s, 'utf8'));

/** Feeds `text` split into the given pieces; null when some piece is refused, else whether the text is complete. */
function run(grammar: string, ...pieces: (string | Uint8Array)[]): boolean | null {
  const r = new GbnfRecognizer(parseGbnf(grammar));
  for (const p of pieces) if (!r.feed(typeof p === 'string' ? bytes(p) : p)) return null;
  return r.done;
}

function refusal(grammar: string, opts = {}): string {
  try {
    parseGbnf(grammar, opts);
  } catch (e) {
    expect(e).toBeInstanceOf(EngineError);
    expect((e as EngineError).code).toBe('KAIL_E_INVALID_ARG');
    return (e as Error).message;
  }
  throw new Error('the grammar was accepted');
}

describe('GBNF grammars (llama.cpp semantics)', () => {
  it('matches literals, alternates, classes and groups', () => {
    const g = `
      # a move list
      root ::= "1. " move (" " move)* "\\n"
      move ::= [a-h] [1-8] | "O-O" ("-O")? |
               piece [a-h] [1-8]
      piece ::= [NBRQK]
    `;
    expect(run(g, '1. e4 Nf3\n')).toBe(true);
    expect(run(g, '1. O-O-O e5\n')).toBe(true);
    expect(run(g, '1. e4')).toBe(false); // a prefix: allowed, not complete
    expect(run(g, '1. e9')).toBeNull();
    expect(run(g, '1. Xe4')).toBeNull();
    expect(run(g, '1. e4\nx')).toBeNull(); // nothing after the whole
  });

  it('repeats {m}, {m,}, {m,n}, *, + and ?', () => {
    expect(run('root ::= "a"{2,4}', 'a')).toBe(false);
    expect(run('root ::= "a"{2,4}', 'aa')).toBe(true);
    expect(run('root ::= "a"{2,4}', 'aaaa')).toBe(true);
    expect(run('root ::= "a"{2,4}', 'aaaaa')).toBeNull();
    expect(run('root ::= "ab"{3}', 'ababab')).toBe(true);
    expect(run('root ::= "ab"{3}', 'abab')).toBe(false);
    expect(run('root ::= [0-9]{2,} "."', '1.')).toBeNull();
    expect(run('root ::= [0-9]{2,} "."', '123456.')).toBe(true);
    expect(run('root ::= "x"+ "y"? "z"*', 'xxxyzz')).toBe(true);
    expect(run('root ::= "x"+ "y"? "z"*', 'y')).toBeNull();
    expect(run('root ::= ("a" | "b"){0,3} "c"', 'ababc')).toBeNull();
    expect(run('root ::= ("a" | "b"){0,3} "c"', 'bac')).toBe(true);
  });

  it('takes negated classes, any character, escapes and Unicode ranges', () => {
    expect(run('root ::= [^\\n]+ "\\n"', 'héllo wörld\n')).toBe(true);
    expect(run('root ::= [^\\n]+ "\\n"', 'a\nb')).toBeNull();
    expect(run('root ::= . . .', '日本語')).toBe(true);
    expect(run('root ::= "\\x41\\u00e9\\U0001F600\\t\\"\\\\\\[\\]\\-"', 'Aé😀\t"\\[]-')).toBe(true);
    expect(run('root ::= [ぁ-ゟ]+', 'ひらがな')).toBe(true);
    expect(run('root ::= [ぁ-ゟ]+', 'カタカナ')).toBeNull();
    expect(run('root ::= [a-]+', 'a-a')).toBe(true); // '-' before ']' is itself
  });

  it('follows UTF-8 characters split across tokens, refusing a prefix no allowed character has', () => {
    const smile = bytes('😀'); // F0 9F 98 80
    expect(run('root ::= "😀"', smile.subarray(0, 1), smile.subarray(1, 3), smile.subarray(3))).toBe(true);
    expect(run('root ::= "😀"', smile.subarray(0, 2))).toBe(false); // inside the character: allowed, not complete
    expect(run('root ::= [a-z]+', bytes('é').subarray(0, 1))).toBeNull(); // C3: only 2-byte characters follow
    expect(run('root ::= [^a-z]', bytes('é').subarray(0, 1))).toBe(false);
    expect(run('root ::= .', Uint8Array.of(0x80))).toBeNull(); // a stray continuation byte
    expect(run('root ::= . .', Uint8Array.of(0xc3), Uint8Array.of(0x41))).toBeNull(); // a character cut short
  });

  it('matches tokens by id, and everything but a token', () => {
    const g = parseGbnf('root ::= <[5]> think <[6]> "ok"\nthink ::= !<[6]>*');
    const r = new GbnfRecognizer(g);
    expect(r.wantsTokens()).toBe(true);
    expect(r.copy().feedToken(7, bytes('<think>'))).toBe(false); // the right text is not the token
    expect(r.feedToken(5, bytes('<think>'))).toBe(true);
    expect(r.feedToken(9, bytes('hmm'))).toBe(true);
    expect(r.feedToken(11, bytes(' yes'))).toBe(true);
    expect(r.feedToken(6, bytes('</think>'))).toBe(true);
    expect(r.wantsTokens()).toBe(false);
    expect(r.done).toBe(false);
    expect(r.feedToken(12, bytes('ok'))).toBe(true);
    expect(r.done).toBe(true);
    // <text> is looked up in the vocabulary.
    const tokenize = (s: string) => (s === '<think>' ? [5] : s === '<two>' ? [1, 2] : []);
    expect(parseGbnf('root ::= <think> "x"', { tokenize }).values[0]).toBe(5);
    expect(refusal('root ::= <two>', { tokenize })).toMatch(/<two> is not one token of the vocabulary \(it tokenizes to 2\)/);
    expect(refusal('root ::= <[70000]>', { nVocab: 1024 })).toMatch(/token id 70000 is outside the vocabulary \(0..1023\)/);
  });

  it('refuses what llama.cpp refuses, naming the problem and where', () => {
    expect(refusal('')).toMatch(/the grammar is empty/);
    expect(refusal('start ::= "a"')).toMatch(/there is no 'root' rule/);
    expect(refusal('root ::= item\n')).toMatch(/rule 'item' is used but never defined/);
    expect(refusal('root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9]')).toMatch(/rule 'expr' is left-recursive/);
    expect(refusal('root ::= opt "a"\nopt ::= "" | root')).toMatch(/left-recursive/); // through a rule that may be empty
    expect(refusal('root ::= "a\\q"')).toMatch(/unknown escape at line 1, column 12/);
    expect(refusal('root ::= "abc')).toMatch(/unexpected end of input in a string literal/);
    expect(refusal('root ::= [abc')).toMatch(/unexpected end of input in a character class/);
    expect(refusal('root ::= ("a" | "b"')).toMatch(/expecting '\)'/);
    expect(refusal('root ::= "a"\nitem = "b"')).toMatch(/expecting '::=' after the rule name 'item' at line 2, column 6/);
    expect(refusal('root ::= "a"{3,1}')).toMatch(/maximum below its minimum/);
    expect(refusal('root ::= "a"{2001}')).toMatch(/more than 2000 times/);
    expect(refusal('root ::= ("a"{0,50}){0,50}')).toMatch(/exceed 2000/);
    expect(refusal('root ::= * "a"')).toMatch(/expecting an item before/);
    expect(refusal('root ::= "\\xZZ"')).toMatch(/expecting 2 hex digits/);
    expect(refusal('root ::= <think>')).toMatch(/no vocabulary to look up the token <think>/);
    expect(refusal('root ::= "a" )')).toMatch(/expecting a newline or the end at line 1, column 14/);
  });

  it('allows the same tokens as a direct check, through an output constraint', () => {
    // A vocabulary of pieces, with a multi-byte character split over two tokens and an end token.
    const texts = ['{', '}', '"', 'a', 'ab', 'b', ':', ' ', '1', '12', '\xe9'];
    const pieces = texts.map(bytes);
    pieces.push(Uint8Array.of(0xe6), Uint8Array.of(0x97, 0xa5)); // 日 = E6 97 A5
    pieces.push(new Uint8Array(0)); // end of generation (13)
    const eog = new Set([13]);
    const g = parseGbnf('root ::= "{" pair ("," pair)* "}"\npair ::= "\\"" [a-b]+ "\\":" " "? val\nval ::= [0-9]+ | "日"');
    const c = new OutputConstraint(pieces, eog, new GbnfRecognizer(g), new GbnfRecognizer(g));
    const allowed = () => {
      const logits = new Float32Array(pieces.length).fill(0);
      c.mask(logits);
      return [...logits.keys()].filter((t) => logits[t] === 0);
    };
    expect(allowed()).toEqual([0]);
    c.accept(0);
    expect(allowed()).toEqual([2]);
    c.accept(2);
    expect(allowed()).toEqual([3, 4, 5]);
    for (const t of [4, 2, 6]) c.accept(t);
    expect(allowed()).toEqual([7, 8, 9, 11]); // ' ', digits, the first byte of 日
    c.accept(11);
    expect(allowed()).toEqual([12]);
    c.accept(12);
    expect(allowed()).toEqual([1]);
    c.accept(1);
    expect(c.done).toBe(true);
    expect(allowed()).toEqual([13]);
  });
});
