import { EngineError } from '../errors';
import { JsonRecognizer } from './json-constraint';
import { compileJsonSchema } from './json-schema';
import { Mt19937 } from './rng';

const accepts = (schema: unknown, text: string) => {
  const r = new JsonRecognizer(compileJsonSchema(schema));
  return r.feed(Uint8Array.from(Buffer.from(text, 'utf8'))) && r.done;
};

// The shape Pydantic writes: $defs and $ref, Optional as anyOf [X, null], enums, defaults.
const person = {
  $defs: {
    Address: {
      type: 'object',
      properties: { street: { type: 'string' }, zip: { type: 'integer', title: 'Zip' } },
      required: ['street', 'zip'],
      additionalProperties: false,
    },
    Role: { enum: ['admin', 'user', 'guest'], type: 'string' },
  },
  type: 'object',
  title: 'Person',
  properties: {
    name: { type: 'string', description: 'full name' },
    age: { type: 'integer' },
    score: { type: 'number' },
    active: { type: 'boolean', default: true },
    role: { $ref: '#/$defs/Role' },
    address: { anyOf: [{ $ref: '#/$defs/Address' }, { type: 'null' }], default: null },
    tags: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 3 },
  },
  required: ['name', 'age', 'role', 'tags'],
};

describe('compileJsonSchema + JsonRecognizer', () => {
  const ok = [
    { name: 'Ada', age: 36, role: 'admin', tags: ['x'] },
    { name: 'Ada', age: -3, score: 1.5e3, active: false, role: 'guest', address: null, tags: ['a', 'b', 'c'] },
    { name: 'Émile "E" \\ 中', age: 0, score: -0.25, role: 'user', address: { street: 'Main', zip: 12345 }, tags: ['t'] },
  ];
  it.each(ok.map((v) => [JSON.stringify(v)]))('accepts %s, compact and indented', (text) => {
    expect(accepts(person, text)).toBe(true);
    expect(accepts(person, JSON.stringify(JSON.parse(text), null, 2))).toBe(true);
  });

  it.each([
    ['a required key missing', '{"name":"Ada","role":"admin","tags":["x"]}'],
    ['keys out of the schema order', '{"age":36,"name":"Ada","role":"admin","tags":["x"]}'],
    ['a key the schema does not have', '{"name":"Ada","age":36,"nick":"A","role":"admin","tags":["x"]}'],
    ['a number for a string', '{"name":1,"age":36,"role":"admin","tags":["x"]}'],
    ['a fraction for an integer', '{"name":"Ada","age":36.5,"role":"admin","tags":["x"]}'],
    ['an exponent for an integer', '{"name":"Ada","age":3e1,"role":"admin","tags":["x"]}'],
    ['a value outside the enum', '{"name":"Ada","age":36,"role":"root","tags":["x"]}'],
    ['an enum value prefix', '{"name":"Ada","age":36,"role":"adm","tags":["x"]}'],
    ['too few items', '{"name":"Ada","age":36,"role":"admin","tags":[]}'],
    ['too many items', '{"name":"Ada","age":36,"role":"admin","tags":["a","b","c","d"]}'],
    ['a nested object missing a required key', '{"name":"Ada","age":36,"role":"admin","address":{"street":"M"},"tags":["x"]}'],
    ['a string where anyOf allows an object or null', '{"name":"Ada","age":36,"role":"admin","address":"M","tags":["x"]}'],
    ['a boolean spelled wrong', '{"name":"Ada","age":36,"active":tru,"role":"admin","tags":["x"]}'],
    ['a duplicate key', '{"name":"Ada","name":"B","age":36,"role":"admin","tags":["x"]}'],
  ])('rejects %s', (_what, text) => {
    expect(accepts(person, text)).toBe(false);
  });

  it('counts string lengths in characters (an escape or a multi-byte character is one)', () => {
    const s = { type: 'object', properties: { a: { type: 'string', minLength: 2, maxLength: 3 } }, required: ['a'] };
    for (const v of ['ab', 'abc', 'é中', '\\n\\u0041x', '😀😀😀']) expect(accepts(s, `{"a":"${v}"}`)).toBe(true);
    for (const v of ['', 'a', 'abcd', 'é中😀x']) expect(accepts(s, `{"a":"${v}"}`)).toBe(false);
  });

  it("takes 'format' as the annotation JSON Schema makes it (the string is not checked)", () => {
    expect(accepts({ type: 'object', properties: { at: { type: 'string', format: 'date-time' } }, required: ['at'] }, '{"at":"2026-11-30T16:00:00Z"}')).toBe(true);
  });

  it('takes numbers among enum values, ended by what follows them', () => {
    const s = { type: 'object', properties: { n: { enum: [1, 12, 'x', null, [1, 2], { a: 1 }] } }, required: ['n'] };
    for (const v of ['1', '12', '"x"', 'null', '[1,2]', '{"a":1}']) expect(accepts(s, `{"n":${v}}`)).toBe(true);
    for (const v of ['2', '121', '"y"', '[1]', '{"a":2}', '1.0']) expect(accepts(s, `{"n":${v}}`)).toBe(false);
  });

  it('follows recursive references (a tree)', () => {
    const tree = {
      $defs: { Node: { type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#/$defs/Node' } } }, required: ['v', 'kids'] } },
      $ref: '#/$defs/Node',
    };
    expect(accepts(tree, '{"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]}')).toBe(true);
    expect(accepts(tree, '{"v":1,"kids":[{"v":2}]}')).toBe(false);
    const list = { $defs: { L: { type: 'object', properties: { next: { anyOf: [{ $ref: '#/$defs/L' }, { type: 'null' }] } }, required: ['next'] } }, $ref: '#/$defs/L' };
    expect(accepts(list, '{"next":{"next":{"next":null}}}')).toBe(true);
  });

  it('treats an object without properties as any keys, with additionalProperties as their values', () => {
    expect(accepts({ type: 'object' }, '{"a":[1,{"b":null}],"c":"d"}')).toBe(true);
    const counts = { type: 'object', additionalProperties: { type: 'integer' } };
    expect(accepts(counts, '{"a":1,"b":2}')).toBe(true);
    expect(accepts(counts, '{"a":"1"}')).toBe(false);
    expect(accepts({ type: 'object', additionalProperties: false }, '{}')).toBe(true);
    expect(accepts({ type: 'object', additionalProperties: false }, '{"a":1}')).toBe(false);
  });

  it('accepts values generated from random schemas, and rejects them under a changed schema', () => {
    const rng = new Mt19937(3);
    const r = () => rng.nextDouble();
    const pick = <T,>(xs: T[]) => xs[Math.floor(r() * xs.length)];
    // A random schema and a value it describes.
    function gen(depth: number): [unknown, unknown] {
      const k = depth > 3 ? pick(['string', 'integer', 'number', 'boolean', 'enum']) : pick(['string', 'integer', 'number', 'boolean', 'enum', 'object', 'array', 'nullable']);
      switch (k) {
        case 'string':
          return [{ type: 'string' }, pick(['', 'a', 'é "q"', '\n'])];
        case 'integer':
          return [{ type: 'integer' }, pick([0, -7, 123456])];
        case 'number':
          return [{ type: 'number' }, pick([0.5, -1e-7, 3])];
        case 'boolean':
          return [{ type: 'boolean' }, r() < 0.5];
        case 'enum': {
          const e = ['red', 'green', 7, null];
          return [{ enum: e }, pick(e)];
        }
        case 'nullable': {
          const [s, v] = gen(depth + 1);
          return [{ anyOf: [s, { type: 'null' }] }, r() < 0.5 ? null : v];
        }
        case 'array': {
          const [s, v] = gen(depth + 1);
          const n = Math.floor(r() * 3);
          return [{ type: 'array', items: s, maxItems: 2 }, Array.from({ length: n }, () => v)];
        }
        default: {
          const props: Record<string, unknown> = {};
          const value: Record<string, unknown> = {};
          const required: string[] = [];
          const n = 1 + Math.floor(r() * 3);
          for (let i = 0; i < n; i++) {
            const [s, v] = gen(depth + 1);
            props[`p${i}`] = s;
            if (r() < 0.6) required.push(`p${i}`);
            if (required.includes(`p${i}`) || r() < 0.5) value[`p${i}`] = v;
          }
          return [{ type: 'object', properties: props, required }, value];
        }
      }
    }
    for (let i = 0; i < 500; i++) {
      const [s, v] = gen(0);
      const schema = { type: 'object', properties: { root: s }, required: ['root'] };
      const text = JSON.stringify({ root: v });
      expect(accepts(schema, text)).toBe(true);
      expect(accepts(schema, JSON.stringify({ root: v }, null, 1))).toBe(true);
      // The same value under a schema wanting a string of it where it is not one, or with a key added.
      if (typeof v !== 'string') expect(accepts({ type: 'object', properties: { root: { type: 'string' } }, required: ['root'] }, text)).toBe(false);
      expect(accepts(schema, JSON.stringify({ root: v, extra: 1 }))).toBe(false);
    }
  });

  it.each<[unknown, RegExp]>([
    [{ type: 'object', properties: { a: { type: 'array', uniqueItems: true } } }, /json_schema at \/properties\/a: 'uniqueItems' is not supported/],
    [{ type: 'object', properties: { a: { type: 'integer', multipleOf: 0 } } }, /json_schema at \/properties\/a\/multipleOf: must be a number above 0/],
    [{ type: 'object', properties: { a: { type: 'integer', multipleOf: 10, minimum: 1, maximum: 9 } } }, /no multiple of 10 is within its minimum and maximum/],
    [{ type: 'object', properties: { a: { type: 'string', pattern: '(a)\\1' } } }, /json_schema at \/properties\/a\/pattern: regex: \\1 \(a backreference\) cannot be held by a grammar/],
    [{ type: 'object', properties: { a: { type: 'string', pattern: 5 } } }, /json_schema at \/properties\/a\/pattern: must be a string/],
    [{ type: 'object', properties: { a: { type: 'integer', minimum: 3, maximum: 2.5 } } }, /json_schema at \/properties\/a: no integer is within its minimum and maximum/],
    [{ type: 'object', properties: { a: { type: 'number', exclusiveMinimum: 1, maximum: 1 } } }, /no number is within its minimum and maximum/],
    [{ type: 'object', properties: { a: { type: 'number', minimum: '1' } } }, /json_schema at \/properties\/a\/minimum: must be a number, got "1"/],
    [{ type: 'object', properties: { a: { anyOf: [{ type: 'object' }, { type: 'object', properties: { b: {} } }] } } }, /alternatives that can both start with "\{" are not supported/],
    [{ type: 'array', items: {} }, /the top-level schema must describe an object/],
    [{ type: 'object', properties: { a: { $ref: '#/$defs/Nope' } } }, /the reference "#\/\$defs\/Nope" leads nowhere/],
    [{ type: 'object', properties: { a: { $ref: 'http://x/schema' } } }, /only local references/],
    [{ type: 'object', properties: { a: { type: 'decimal' } } }, /unknown type "decimal"/],
    [{ type: 'object', properties: { a: { type: 'array', minItems: 3, maxItems: 2 } } }, /maxItems 2 is below minItems 3/],
    [{ type: 'object', properties: { a: false } }, /the schema false admits no value/],
    [{ type: 'object', properties: { a: { enum: [] } } }, /enum: must be a non-empty array/],
  ])('refuses %j naming the problem', (schema, message) => {
    let err: unknown;
    try {
      compileJsonSchema(schema);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EngineError);
    expect((err as EngineError).code).toBe('KAIL_E_INVALID_ARG');
    expect((err as EngineError).message).toMatch(message);
  });
});
