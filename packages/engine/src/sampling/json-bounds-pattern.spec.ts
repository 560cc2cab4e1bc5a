// JSON Schema's number bounds and string patterns under constrained decoding: random walks over
// the bytes a recognizer allows never reach a dead end (some byte can always follow, until the
// object closes), and every text they end with satisfies the schema, checked directly (the
// number's value against the bounds, the string against JavaScript's RegExp).
import { JsonRecognizer } from './json-constraint';
import { compileJsonSchema } from './json-schema';

function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return (n: number) => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s % n;
  };
}

/**
 * A random text of the schema's one-property object, piece by piece from `alphabet` (texts, or
 * raw bytes: a UTF-8 character may come split), each piece one the recognizer allows; null on a
 * dead end.
 */
function walk(schema: object, alphabet: (string | Uint8Array)[], rand: (n: number) => number, prefix: string): string | null {
  const r = new JsonRecognizer(compileJsonSchema(schema));
  const t = new JsonRecognizer(r.grammar);
  if (!r.feed(Buffer.from(prefix))) throw new Error(`prefix ${prefix} refused`);
  const bytes = (c: string | Uint8Array) => (typeof c === 'string' ? Buffer.from(c) : c);
  const out: Uint8Array[] = [Buffer.from(prefix)];
  for (let step = 0; step < 200 && !r.done; step++) {
    const ok = alphabet.filter((c) => {
      t.assign(r);
      return t.feed(bytes(c));
    });
    if (!ok.length) return null;
    // Lean towards closing (the string, then the object) as the text grows, so walks end.
    const ends = (c: string) => {
      t.assign(r);
      return t.feed(Buffer.from(c)) && t.done;
    };
    const close = ok.includes('}') && ends('}') ? '}' : ok.includes('"') ? '"' : null;
    const c = close && rand(40) < step ? close : ok[rand(ok.length)];
    r.feed(bytes(c));
    out.push(bytes(c));
  }
  return r.done ? Buffer.concat(out).toString('utf8') : null;
}

/** Bytes that start or continue UTF-8 characters, alone: a walk may take them one at a time. */
const SPLIT = [0xc3, 0xa9, 0xe0, 0xa4, 0x85, 0xe6, 0x97, 0xa5, 0xf0, 0x9f, 0x98, 0x80, 0xed, 0x9f, 0xbf].map((b) => Uint8Array.of(b));

describe('JSON Schema bounds and patterns', () => {
  const bounded: [object, (v: number) => boolean][] = [
    [{ type: 'integer', minimum: 1, maximum: 10 }, (v) => Number.isInteger(v) && v >= 1 && v <= 10],
    [{ type: 'integer', minimum: -250, maximum: -17 }, (v) => Number.isInteger(v) && v >= -250 && v <= -17],
    [{ type: 'integer', exclusiveMinimum: 0 }, (v) => Number.isInteger(v) && v > 0],
    [{ type: 'integer', maximum: 99, exclusiveMaximum: 42.5 }, (v) => Number.isInteger(v) && v <= 42],
    [{ type: 'integer', minimum: 1000, maximum: 1005 }, (v) => v >= 1000 && v <= 1005],
    [{ type: 'number', minimum: 0.5, maximum: 2.25 }, (v) => v >= 0.5 && v <= 2.25],
    [{ type: 'number', exclusiveMinimum: -1, exclusiveMaximum: 0 }, (v) => v > -1 && v < 0],
    [{ type: 'number', minimum: 0, exclusiveMaximum: 1 }, (v) => v >= 0 && v < 1],
    [{ type: 'number', minimum: 3.14159, maximum: 3.1416 }, (v) => v >= 3.14159 && v <= 3.1416],
    [{ type: 'number', minimum: 10, exclusiveMinimum: true, maximum: 12 }, (v) => v > 10 && v <= 12],
    // multipleOf, alone and with bounds, whole and decimal steps
    [{ type: 'integer', multipleOf: 7, minimum: 10, maximum: 100 }, (v) => v % 7 === 0 && v >= 10 && v <= 100],
    [{ type: 'integer', multipleOf: 5 }, (v) => Number.isInteger(v) && v % 5 === 0],
    [{ type: 'number', multipleOf: 0.25, minimum: 0, maximum: 3 }, (v) => Number.isInteger(v * 4) && v >= 0 && v <= 3],
    [{ type: 'number', multipleOf: 0.01, exclusiveMinimum: 0, maximum: 1 }, (v) => Math.abs(v * 100 - Math.round(v * 100)) < 1e-9 && v > 0 && v <= 1],
  ];
  const digits = [...'0123456789', '-', '.', 'e', '}', ' '];
  for (const [schema, ok] of bounded)
    it(`numbers: ${JSON.stringify(schema)}`, () => {
      const full = { type: 'object', properties: { n: schema }, required: ['n'] };
      const rand = rng(JSON.stringify(schema).length * 7919);
      const seen = new Set<number>();
      for (let i = 0; i < 300; i++) {
        const text = walk(full, digits, rand, '{"n":');
        expect([i, text]).not.toEqual([i, null]);
        const v = JSON.parse(text!).n as number;
        expect([text, ok(v)]).toEqual([text, true]);
        expect(text).not.toMatch(/e/i);
        seen.add(v);
      }
      expect(seen.size).toBeGreaterThan(1);
    });

  it('refuses a number outside the bounds as soon as no digit can bring it back', () => {
    const r = (schema: object, text: string) => new JsonRecognizer(compileJsonSchema({ type: 'object', properties: { n: schema } })).feed(Buffer.from(`{"n":${text}`));
    const small = { type: 'integer', minimum: 1, maximum: 10 };
    expect(r(small, '1')).toBe(true); // 1, or 10
    expect(r(small, '10')).toBe(true);
    expect(r(small, '11')).toBe(false);
    expect(r(small, '2')).toBe(true);
    expect(r(small, '20')).toBe(false);
    expect(r(small, '0')).toBe(false);
    expect(r(small, '-')).toBe(false);
    expect(r(small, '5}')).toBe(true);
    const neg = { type: 'number', minimum: -5, maximum: -2 };
    expect(r(neg, '-')).toBe(true);
    expect(r(neg, '-1')).toBe(false);
    expect(r(neg, '-2.5}')).toBe(true);
    expect(r(neg, '-5.01')).toBe(false);
    expect(r({ type: 'number', maximum: 0.3 }, '0.3}')).toBe(true);
    expect(r({ type: 'number', exclusiveMaximum: 0.3 }, '0.3}')).toBe(false);
    expect(r({ type: 'number', minimum: 0 }, '1e5')).toBe(false); // a bounded number has no exponent
    expect(r({ type: 'number' }, '1e5}')).toBe(true);
  });

  const patterns: [string, (string | Uint8Array)[]][] = [
    ['^[A-Z]{2}-\\d{3,4}$', [...'ABZ-0189x', ...SPLIT]],
    ['^\\d{4}-\\d{2}-\\d{2}$', [...'0129-x']],
    ['^[a-z]+@[a-z]+\\.(com|org)$', [...'ab@.comrgx']],
    ['ab', [...'abc']],
    ['^(yes|no)$', [...'yesno']],
    ['^[^"\\\\]*$', [...'ab"\\', '\\n', '\\u00e9', 'é', ...SPLIT]],
    ['^é+\\n?$', ['é', '\\n', '\\u00e9', 'e', ...SPLIT]],
    ['^[^a-z]{1,4}$', [...'aZ1', ...SPLIT]],
    ['^[ऀ-ॿ]+ 日?$', [' ', '日', 'अ', ...SPLIT]],
    ['^\\w{2,3}$', [...'a_9-', '\\u0041']],
  ];
  for (const [pattern, alphabet] of patterns)
    it(`strings: pattern ${pattern}`, () => {
      const schema = { type: 'object', properties: { s: { type: 'string', pattern } }, required: ['s'] };
      const re = new RegExp(pattern, 'u');
      const rand = rng(pattern.length * 104729);
      const seen = new Set<string>();
      for (let i = 0; i < 200; i++) {
        const text = walk(schema, [...alphabet, '"', '}'], rand, '{"s":"');
        expect([i, text]).not.toEqual([i, null]);
        const s = JSON.parse(text!).s as string;
        expect([s, re.test(s)]).toEqual([s, true]);
        seen.add(s);
      }
      expect(seen.size).toBeGreaterThan(1);
    });

  const formats: [string, string[], (s: string) => boolean][] = [
    ['date', [...'0123-9T:Z'], (x) => /^\d{4}-\d{2}-\d{2}$/.test(x) && !Number.isNaN(Date.parse(x))],
    ['date-time', [...'01239-T:Z.+'], (x) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(x) && (x.includes(':60') || !Number.isNaN(Date.parse(x)))],
    ['time', [...'01259:Z+-.'], (x) => /^\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(x)],
    ['uuid', [...'0aF9-g'], (x) => /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/i.test(x)],
    ['email', [...'ab.@-_9'], (x) => {
      const [local, domain, more] = x.split('@');
      return more === undefined && /^[A-Za-z0-9._%+-]+$/.test(local) && domain.split('.').length > 1 && domain.split('.').every((l) => /^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$/.test(l));
    }],
    ['ipv4', [...'0125.9'], (x) => x.split('.').length === 4 && x.split('.').every((o) => String(Number(o)) === o && Number(o) <= 255)],
  ];
  for (const [format, alphabet, ok] of formats)
    it(`strings: format ${format}`, () => {
      const schema = { type: 'object', properties: { s: { type: 'string', format } }, required: ['s'] };
      const rand = rng(format.length * 15485863);
      for (let i = 0; i < 100; i++) {
        const text = walk(schema, [...alphabet, '"', '}'], rand, '{"s":"');
        expect([i, text]).not.toEqual([i, null]);
        const v = JSON.parse(text!).s as string;
        expect([v, ok(v)]).toEqual([v, true]);
      }
    });

  it('takes pattern over format, and leaves other formats as annotations', () => {
    const feed = (prop: object, text: string) => new JsonRecognizer(compileJsonSchema({ type: 'object', properties: { s: prop } })).feed(Buffer.from(`{"s":${text}}`));
    expect(feed({ type: 'string', format: 'date', pattern: '^x+$' }, '"xx"')).toBe(true);
    expect(feed({ type: 'string', format: 'date' }, '"xx"')).toBe(false);
    expect(feed({ type: 'string', format: 'date' }, '"2026-12-02"')).toBe(true);
    expect(feed({ type: 'string', format: 'uri' }, '"anything"')).toBe(true);
  });

  it('holds tuples: prefixItems then items (Pydantic\'s Tuple), and the older items array with additionalItems', () => {
    const feed = (schema: object, text: string) => new JsonRecognizer(compileJsonSchema({ type: 'object', properties: { t: schema } })).feed(Buffer.from(`{"t":${text}}`));
    const pair = { type: 'array', prefixItems: [{ type: 'integer' }, { type: 'string' }], minItems: 2, maxItems: 2 };
    expect(feed(pair, '[1,"a"]')).toBe(true);
    expect(feed(pair, '["a",1]')).toBe(false);
    expect(feed(pair, '[1]')).toBe(false);
    expect(feed(pair, '[1,"a",2]')).toBe(false);
    const open = { type: 'array', prefixItems: [{ type: 'boolean' }], items: { type: 'integer', minimum: 0 } };
    expect(feed(open, '[true,1,2,3]')).toBe(true);
    expect(feed(open, '[true,-1]')).toBe(false);
    expect(feed(open, '[]')).toBe(true);
    const closed = { type: 'array', prefixItems: [{ type: 'null' }, { const: 'x' }], items: false };
    expect(feed(closed, '[null,"x"]')).toBe(true);
    expect(feed(closed, '[null,"x",1]')).toBe(false);
    const old = { type: 'array', items: [{ type: 'string' }, { type: 'number' }], additionalItems: false };
    expect(feed(old, '["a",1.5]')).toBe(true);
    expect(feed(old, '["a",1.5,2]')).toBe(false);
    expect(() => compileJsonSchema({ type: 'object', properties: { t: { type: 'array', prefixItems: [{}], items: false, minItems: 2 } } })).toThrow(/minItems 2 is more than the 1 elements items: false leaves/);
  });

  it('holds a pattern together with minLength and maxLength, and refuses a text outside it', () => {
    const g = compileJsonSchema({ type: 'object', properties: { code: { type: 'string', pattern: '^[0-9a-f]+$', minLength: 4, maxLength: 6 } } });
    const feed = (text: string) => new JsonRecognizer(g).feed(Buffer.from(text));
    expect(feed('{"code":"0a1f"}')).toBe(true);
    expect(feed('{"code":"0a1"}')).toBe(false);
    expect(feed('{"code":"0a1fx')).toBe(false);
    expect(feed('{"code":"0a1f0a1')).toBe(false);
    expect(feed('{"code":"\\u0030abc"}')).toBe(true); // an escape is the character it stands for
    expect(feed('{"code":"\\u006')).toBe(true); // a-f are U+0061..U+0066
    expect(feed('{"code":"\\u004')).toBe(false); // no hex digit or letter is U+004x
  });
});
