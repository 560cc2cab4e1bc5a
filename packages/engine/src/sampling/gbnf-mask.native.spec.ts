// A grammar's token mask walks the vocabulary's byte trie (OutputConstraint.maskByTrie): on real
// vocabularies it must allow exactly the tokens that trying each one allows, in every state a
// random walk through the grammar reaches (multi-byte characters split across tokens included).
import path from 'node:path';

import { native } from '../native';
import { fixtureVocabs } from '../tokenizer/test-vocabs';
import { Tokenizer } from '../tokenizer/tokenizer';
import { GbnfRecognizer, GbnfStacks, parseGbnf } from './gbnf';
import { OutputConstraint } from './json-constraint';
import { Mt19937 } from './rng';

const GRAMMARS: [string, string][] = [
  ['any line', 'root ::= [^\\n]+ "\\n"'],
  ['number sentence', 'root ::= ("yes" | "no" | "maybe") ", " [0-9]{1,3} (" " [a-zé]{1,8}){0,3} "."'],
  ['kana and any', 'root ::= [ぁ-ゖ]{1,6} "「" . . "」" [^。]{0,12} "。"'],
  [
    'json',
    `root ::= object
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}"
array ::= "[" ws ( value ("," ws value)* )? "]"
value ::= (object | array | string | number | "true" | "false" | "null") ws
string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\\"" ws
number ::= "-"? ([0-9] | [1-9] [0-9]{1,6}) ("." [0-9]{1,4})?
ws ::= | " " | "\\n" [ \\t]{0,4}`,
  ],
  ['not these', 'root ::= [^a-zA-Z0-9 ]{2,10} [a-z]+'],
];

function vocab(name: string): Tokenizer {
  const file = fixtureVocabs().find((f) => path.basename(f) === name);
  if (!file) throw new Error(`shared/fixtures/tokenizers/${name} not found`);
  const gguf = native().openGguf(file, { mapData: false });
  try {
    return Tokenizer.fromMetadata(gguf.metadata);
  } finally {
    gguf.close();
  }
}

describe.each([
  ['ggml-vocab-qwen2.gguf', 4],
  ['ggml-vocab-llama-spm.gguf', 8],
])('grammar masks by the byte trie on %s', (name, steps) => {
  let pieces: Uint8Array[];
  let eog: Set<number>;
  beforeAll(() => {
    const tok = vocab(name);
    pieces = tok.allPieces(tok.nTokens);
    eog = new Set([...Array(tok.nTokens).keys()].filter((t) => tok.isEog(t)));
  });

  it.each(GRAMMARS)('%s: the tokens trying each one allows, along random walks', (_n, src) => {
    const g = parseGbnf(src);
    const rng = new Mt19937(7);
    let states = 0;
    for (let walk = 0; walk < 2; walk++) {
      const table = new GbnfStacks();
      const c = new OutputConstraint(pieces, eog, new GbnfRecognizer(g, table), new GbnfRecognizer(g, table));
      for (let s = 0; s < steps && !c.done; s++) {
        const logits = new Float32Array(pieces.length);
        c.mask(logits);
        const got = [...logits.keys()].filter((t) => logits[t] === 0);
        const want = [...logits.keys()].filter((t) => c.allows(t));
        expect(got).toEqual(want);
        expect(want.length).toBeGreaterThan(0);
        states++;
        const t = want[Math.floor(rng.nextDouble() * want.length)];
        if (eog.has(t)) break;
        c.accept(t);
      }
    }
    expect(states).toBeGreaterThan(3);
  }, 120_000);

  it('inside a character split across tokens', () => {
    // 'ぁ' is E3 81 81: after a token ending in E3 or E3 81, only the right continuations fit.
    const g = parseGbnf(GRAMMARS[2][1]);
    const lead = pieces.findIndex((p) => p.length === 1 && p[0] === 0xe3);
    if (lead < 0) return; // (a vocabulary without byte tokens cannot split it)
    const table = new GbnfStacks();
    const c = new OutputConstraint(pieces, eog, new GbnfRecognizer(g, table), new GbnfRecognizer(g, table));
    c.accept(lead);
    const logits = new Float32Array(pieces.length);
    const kept = c.mask(logits);
    const want = [...logits.keys()].filter((t) => c.allows(t));
    expect([...logits.keys()].filter((t) => logits[t] === 0)).toEqual(want);
    expect(kept).toBe(want.length);
    expect(want.every((t) => pieces[t][0] >= 0x81 && pieces[t][0] <= 0x82)).toBe(true);
    expect(want.length).toBeGreaterThan(0);
    // A whole text, then a character's first byte: no longer whole, so no end of generation.
    const whole = parseGbnf('root ::= [ぁ-ゖ]{1,6}');
    const c2 = new OutputConstraint(pieces, eog, new GbnfRecognizer(whole, table), new GbnfRecognizer(whole, table));
    for (const b of [0xe3, 0x81, 0x81]) c2.accept(pieces.findIndex((p) => p.length === 1 && p[0] === b));
    const end = [...eog][0];
    expect(c2.allows(end)).toBe(true);
    c2.accept(lead);
    expect(c2.allows(end)).toBe(false);
    c2.mask(logits.fill(0));
    for (const t of eog) expect(logits[t]).toBe(-Infinity);
  });
});
