import { EngineError } from '../errors';
import { GbnfRecognizer, parseGbnf } from './gbnf';
import { regexToGbnf } from './regex-gbnf';

/** Whether the grammar made from `pattern` takes the whole of `text`. */
function grammarMatches(pattern: string, text: string): boolean {
  const r = new GbnfRecognizer(parseGbnf(regexToGbnf(pattern)));
  return r.feed(Buffer.from(text, 'utf8')) && r.done;
}

function refusal(pattern: string): string {
  try {
    parseGbnf(regexToGbnf(pattern));
  } catch (e) {
    expect(e).toBeInstanceOf(EngineError);
    return (e as Error).message;
  }
  throw new Error(`${pattern} was accepted`);
}

describe('regular expressions as GBNF grammars (guided_regex)', () => {
  // Each pattern against strings drawn from an alphabet around it: the grammar takes exactly the
  // strings JavaScript's RegExp matches whole (the patterns use the syntax both read alike).
  const cases: [string, string][] = [
    ['[0-9]{3}-[0-9]{4}', '0123456789-a'],
    ['(yes|no|maybe)', 'yesnomaybe'],
    ['a*b+c?', 'abcd'],
    ['\\d{1,3}(\\.\\d{1,3}){3}', '0129.x'],
    ['[A-Z][a-z]+( [A-Z][a-z]+)*', 'AbZz y'],
    ['"([^"\\\\]|\\\\.)*"', '"\\ab'],
    ['\\w+@\\w+\\.(com|org)', 'a_1@.comorgx'],
    ['(?:ab|a)(?:bc|c)?d{0,2}', 'abcd'],
    ['(a?b?){0,3}c', 'abc'], // a bounded repetition of a part that can be empty is fine
    ['x{2,}y{0,1}', 'xy'],
    ['[^\\s,]+(,\\s?[^\\s,]+)*', 'ab, \t'],
    ['\\D\\W\\S', 'a1 -_\n'],
    ['é+[à-ü]?', 'éàüa'],
    ['a.c', 'ab\nc'],
    ['^(a|b)c$', 'abc'],
    ['(?P<num>[1-9][0-9]*)|0', '0123'],
    ['[-a-c]+[x-]?', '-abcx'],
  ];
  for (const [pattern, alphabet] of cases)
    it(pattern, () => {
      const re = new RegExp(`^(?:${pattern.replace('(?P<', '(?<')})$`, 'u');
      const chars = Array.from(alphabet);
      let seed = 7;
      const rand = (n: number) => {
        seed = (seed * 1103515245 + 12345) >>> 0;
        return (seed >>> 8) % n;
      };
      let matched = 0;
      for (let k = 0; k < 3000; k++) {
        const len = rand(12);
        const text = Array.from({ length: len }, () => chars[rand(chars.length)]).join('');
        const want = re.test(text);
        if (want) matched++;
        expect([text, grammarMatches(pattern, text)]).toEqual([text, want]);
      }
      // Matching strings too, not only refusals: hand-picked ones where random ones rarely match.
      const examples: Record<string, string> = {
        '[0-9]{3}-[0-9]{4}': '555-0199',
        '(yes|no|maybe)': 'maybe',
        '\\d{1,3}(\\.\\d{1,3}){3}': '10.0.0.1',
        '"([^"\\\\]|\\\\.)*"': '"a\\"b"',
        '\\w+@\\w+\\.(com|org)': 'a_1@x.org',
        '[A-Z][a-z]+( [A-Z][a-z]+)*': 'Ab Zz',
      };
      if (examples[pattern]) expect(grammarMatches(pattern, examples[pattern])).toBe(true);
      else expect(matched).toBeGreaterThan(0);
    });

  it('refuses what a grammar cannot hold, naming it and where', () => {
    expect(refusal('')).toMatch(/the regular expression is empty/);
    expect(refusal('(a)\\1')).toMatch(/\\1 \(a backreference\) cannot be held by a grammar \(at character 4\)/);
    expect(refusal('a(?=b)')).toMatch(/lookaround, flags or a backreference/);
    expect(refusal('(?i)abc')).toMatch(/lookaround, flags or a backreference/);
    expect(refusal('\\bword')).toMatch(/word boundary/);
    expect(refusal('a$b')).toMatch(/'\$' can only end the expression/);
    expect(refusal('a^')).toMatch(/'\^' can only start the expression/);
    expect(refusal('(ab')).toMatch(/missing '\)'/);
    expect(refusal('ab)')).toMatch(/unexpected '\)'/);
    expect(refusal('[abc')).toMatch(/missing '\]'/);
    expect(refusal('*a')).toMatch(/'\*' has nothing to repeat/);
    expect(refusal('a**')).toMatch(/a quantifier follows a quantifier/);
    expect(refusal('a++')).toMatch(/possessive/);
    expect(refusal('a{3,1}')).toMatch(/maximum below its minimum/);
    expect(refusal('[z-a]')).toMatch(/a range goes backwards/);
    expect(refusal('[\\W]')).toMatch(/\\W inside a class cannot be held by a grammar/);
    expect(refusal('\\q')).toMatch(/unknown escape \\q/);
    expect(refusal('a{2001}')).toMatch(/more than 2000 times/); // the grammar's own limit
    // Repeating without bound what can match nothing (left recursion in a grammar), named as the regex wrote it.
    expect(refusal('x(a*)*')).toMatch(/\(a\*\)\* repeats without bound a part that can match the empty text.*\(at character 2\)/);
    expect(refusal('( ?[a-z]*)+')).toMatch(/repeats without bound/);
    expect(refusal('(a|)+')).toMatch(/repeats without bound/);
  });
});
