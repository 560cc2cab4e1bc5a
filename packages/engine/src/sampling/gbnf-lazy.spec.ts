// Lazy grammars (llama-server's grammar_lazy + grammar_triggers): free output until a trigger, the
// grammar from the trigger on (a token trigger from that token, a pattern from its first non-empty
// capture group or its match), as llama.cpp's llama_grammar_accept_impl replays the tokens.
import { parseGbnf } from './gbnf';
import { LazyGbnfRecognizer, lazyTriggers } from './gbnf-lazy';
import { OutputConstraint } from './json-constraint';

const enc = (s: string) => new Uint8Array(Buffer.from(s, 'utf8'));
const VOCAB = ['a', 'b', ' ', '<', 'call', '>', '<call>', '1', '2', '</call>', 'x<call>1', '<call>z', '12', 'done', 'é', '\u00e9<'];
const EOG = VOCAB.length;
const pieces = [...VOCAB.map(enc), new Uint8Array(0)];
const id = (s: string) => VOCAB.indexOf(s);
// A tokenizer for words: the vocabulary's single token when there is one, else one per character.
const tokenize = (s: string) => (VOCAB.includes(s) ? [id(s)] : [...s].map(() => 0));

const grammar = parseGbnf('root ::= "<call>" [0-9]+ "</call>"');

function constraint(triggers: { type: number; value: string; token?: number }[]) {
  const t = lazyTriggers(triggers, tokenize);
  return new OutputConstraint(pieces, new Set([EOG]), LazyGbnfRecognizer.create(grammar, t), LazyGbnfRecognizer.create(grammar, t));
}

function allowed(c: OutputConstraint): string[] {
  const row = new Float32Array(pieces.length);
  c.mask(row);
  return [...row.keys()].filter((i) => row[i] === 0).map((i) => (i === EOG ? '<eog>' : VOCAB[i]));
}

describe('lazy GBNF grammars', () => {
  it('leave the output free until a word trigger, then hold it from the trigger on', () => {
    const c = constraint([{ type: 1, value: '<cal' }]);
    // Everything, but a token that brings the trigger and then text the grammar refuses.
    expect(allowed(c)).toEqual([...VOCAB.filter((t) => t !== '<call>z'), '<eog>']);
    for (const t of ['a', ' ', 'b']) c.accept(id(t));
    expect(c.done).toBe(false);
    c.accept(id('<'));
    c.accept(id('call')); // "<cal" has appeared: the grammar holds from its '<'
    expect(allowed(c)).toEqual(['>']);
    c.accept(id('>'));
    expect(allowed(c)).toEqual(['1', '2', '12']);
    c.accept(id('12'));
    expect(allowed(c)).toEqual(['<', '1', '2', '</call>', '12']);
    c.accept(id('</call>'));
    expect(c.done).toBe(true);
    expect(allowed(c)).toEqual(['<eog>']);
  });

  it('start inside a token, and refuse a token whose text after the trigger the grammar does not take', () => {
    const c = constraint([{ type: 2, value: '<call>' }]);
    expect(c.allows(id('<call>z'))).toBe(false);
    expect(c.allows(id('x<call>1'))).toBe(true);
    c.accept(id('x<call>1'));
    expect(allowed(c)).toEqual(['<', '1', '2', '</call>', '12']);
  });

  it("start a pattern trigger at its first non-empty capture group, a full pattern only when the whole text matches", () => {
    const group = constraint([{ type: 2, value: 'b\\s*(<call>)' }]);
    for (const t of ['b', ' ', '<call>']) group.accept(id(t));
    expect(allowed(group)).toEqual(['1', '2', '12']);
    const full = constraint([{ type: 3, value: 'a*(<call>)' }]);
    full.accept(id('b'));
    full.accept(id('<call>')); // "b<call>" is not all of "a*(<call>)": still free
    expect(full.allows(id('done'))).toBe(true);
    const fullHit = constraint([{ type: 3, value: 'a*(<call>)' }]);
    fullHit.accept(id('a'));
    fullHit.accept(id('<call>'));
    expect(allowed(fullHit)).toEqual(['1', '2', '12']);
  });

  it('start at a trigger token (a word that is one token becomes one, as llama-server makes it)', () => {
    for (const spec of [{ type: 0, value: '', token: id('<call>') }, { type: 0, value: '<call>' }, { type: 1, value: '<call>' }]) {
      const c = constraint([spec]);
      c.accept(id('a'));
      c.accept(id('<call>'));
      expect(allowed(c)).toEqual(['1', '2', '12']);
    }
    // Its text alone, split across tokens, is not the token.
    const c = constraint([{ type: 0, value: '<call>' }]);
    for (const t of ['<', 'call', '>']) c.accept(id(t));
    expect(allowed(c)).toEqual([...VOCAB, '<eog>']);
  });

  it('match patterns on bytes, as std::regex reads a string', () => {
    const c = constraint([{ type: 2, value: '\u00e9(<)' }]);
    c.accept(id('\u00e9<'));
    expect(allowed(c)).toEqual(['call']);
  });

  it('refuse bad triggers, naming them', () => {
    expect(() => lazyTriggers([], tokenize)).toThrow(/grammar_lazy needs grammar_triggers/);
    expect(() => lazyTriggers([{ type: 2, value: '(' }], tokenize)).toThrow(/grammar_triggers\[0\]: Invalid regular expression/);
    expect(() => lazyTriggers([{ type: 7, value: 'x' }], tokenize)).toThrow(/grammar_triggers\[0\]\.type must be 0/);
    expect(() => lazyTriggers([{ type: 0, value: 'ab' }], tokenize)).toThrow(/'ab' is 2 tokens, not one/);
    expect(() => lazyTriggers([{ type: 1, value: '' }], tokenize)).toThrow(/grammar_triggers\[0\] has no value/);
  });
});
