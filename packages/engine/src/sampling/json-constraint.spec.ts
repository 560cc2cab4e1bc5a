import { compileJsonSchema } from './json-schema';
import { JsonConstraint, JsonRecognizer, MAX_DEPTH, MAX_INDENT } from './json-constraint';
import { Mt19937 } from './rng';

const bytes = (s: string) => Uint8Array.from(Buffer.from(s, 'utf8'));

/** Whether the whole text is accepted and completes the object. */
function complete(text: string | Uint8Array): boolean {
  const r = new JsonRecognizer();
  return r.feed(typeof text === 'string' ? bytes(text) : text) && r.done;
}

/** Whether the text can still continue to a JSON object (every byte accepted). */
function prefixOk(text: string | Uint8Array): boolean {
  return new JsonRecognizer().feed(typeof text === 'string' ? bytes(text) : text);
}

/** A random JSON value (objects, arrays, strings with escapes and non-ASCII, numbers, literals). */
function randomValue(rng: Mt19937, depth: number): unknown {
  const k = Math.floor(rng.nextDouble() * (depth > 4 ? 4 : 7));
  const str = () => {
    const parts = ['a', 'Z', ' ', '"', '\\', '/', '\n', '\t', '\u0001', 'é', '中', '😀', '\u2028', '{', '}', ':', ','];
    let s = '';
    const n = Math.floor(rng.nextDouble() * 8);
    for (let i = 0; i < n; i++) s += parts[Math.floor(rng.nextDouble() * parts.length)];
    return s;
  };
  switch (k) {
    case 0:
      return str();
    case 1:
      return [0, -0.5, 1e21, -3, 12345678901234, 2.5e-8, 0.1][Math.floor(rng.nextDouble() * 7)];
    case 2:
      return [true, false, null][Math.floor(rng.nextDouble() * 3)];
    case 3: {
      const n = Math.floor(rng.nextDouble() * 4);
      return Array.from({ length: n }, () => randomValue(rng, depth + 1));
    }
    default: {
      const o: Record<string, unknown> = {};
      const n = Math.floor(rng.nextDouble() * 4);
      for (let i = 0; i < n; i++) o[str()] = randomValue(rng, depth + 1);
      return o;
    }
  }
}

function randomObject(rng: Mt19937): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  const n = 1 + Math.floor(rng.nextDouble() * 4);
  for (let i = 0; i < n; i++) o[`k${i}`] = randomValue(rng, 1);
  return o;
}

/** Every whitespace run outside strings is llama.cpp's ws: one space, or a newline and ≤ MAX_INDENT spaces/tabs. */
function wsRunsOk(s: string): boolean {
  const rule = new RegExp(`^( |\\n[ \\t]{0,${MAX_INDENT}})$`);
  let inStr = false;
  let run = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (inStr) {
      if (c === '\\') i++;
      else if (c === '"') inStr = false;
      continue;
    }
    if (' \t\n\r'.includes(c)) {
      run += c;
      continue;
    }
    if (run && !rule.test(run)) return false;
    run = '';
    if (c === '"') inStr = true;
  }
  return true;
}

describe('JsonRecognizer', () => {
  it('accepts JSON.stringify output of random objects, compact and indented, in any chunking', () => {
    const rng = new Mt19937(11);
    for (let i = 0; i < 400; i++) {
      const o = randomObject(rng);
      for (const text of [JSON.stringify(o), JSON.stringify(o, null, 2), `\n${JSON.stringify(o, null, '\t')}`, ` ${JSON.stringify(o)}`]) {
        const b = bytes(text);
        if (!complete(b)) throw new Error(`refused whole: ${JSON.stringify(text)}`);
        // Fed in random pieces, with every proper prefix incomplete but accepted (checked without
        // an expect() per piece: hundreds of thousands of them were most of this test's time).
        const r = new JsonRecognizer();
        let at = 0;
        while (at < b.length) {
          const n = 1 + Math.floor(rng.nextDouble() * 6);
          if (!r.feed(b.subarray(at, at + n))) throw new Error(`refused the piece at byte ${at} of ${JSON.stringify(text)}`);
          at += n;
          if (at < b.length && r.done) throw new Error(`done after ${at} bytes of ${JSON.stringify(text)}`);
        }
        expect(r.done).toBe(true);
      }
    }
  });

  it.each([
    ['{"a":01}'],
    ['{"a":.5}'],
    ['{"a":1.}'],
    ['{"a":-}'],
    ['{"a":1e}'],
    ['{"a":+1}'],
    ["{'a':1}"],
    ['{"a" 1}'],
    ['{"a":1,}'],
    ['{"a":[1,]}'],
    ['{,}'],
    ['[1]'],
    ['"top"'],
    ['{"a":tru}'],
    ['{"a":nul}'],
    ['{"a":True}'],
    ['{"a\nb":1}'],
    ['{"a":"\\x"}'],
    ['{"a":"\\u12G4"}'],
    ['{"a":1}}'],
    ['{"a":1} x'],
    ['{"a":1]'],
    ['{a:1}'],
    ['{"a":1 2}'],
    ['{"a":NaN}'],
  ])('rejects %s', (text) => {
    expect(complete(text)).toBe(false);
  });

  it('rejects invalid UTF-8 in strings: overlong forms, surrogates, stray continuation bytes, bytes past U+10FFFF', () => {
    const wrap = (...b: number[]) => Uint8Array.from([...bytes('{"a":"'), ...b, ...bytes('"}')]);
    expect(complete(wrap(0xc3, 0xa9))).toBe(true); // é
    expect(complete(wrap(0xf0, 0x9f, 0x98, 0x80))).toBe(true); // 😀
    for (const bad of [[0xc0, 0x80], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0x80], [0xc3], [0xf4, 0x90, 0x80, 0x80], [0xff], [0xc3, 0x28]])
      expect(complete(wrap(...bad))).toBe(false);
  });

  it(`limits nesting to ${MAX_DEPTH}; whitespace to one space or a newline and ${MAX_INDENT} spaces or tabs (llama.cpp's ws)`, () => {
    const nested = (d: number) => '{"a":' + '['.repeat(d - 1) + ']'.repeat(d - 1) + '}';
    expect(complete(nested(MAX_DEPTH))).toBe(true);
    expect(prefixOk(nested(MAX_DEPTH + 1))).toBe(false);
    expect(complete(`{\n${' \t'.repeat(MAX_INDENT / 2)}"a" : 1 }`)).toBe(true);
    expect(prefixOk(`{\n${' '.repeat(MAX_INDENT + 1)}`)).toBe(false);
    for (const bad of ['{  }', '{ \n}', '{\n\n}', '{\t}', '{\r\n}', '  {}']) expect(complete(bad)).toBe(false);
    expect(complete(`{"a":"${' '.repeat(500)}\\n"}`)).toBe(true); // inside a string spaces are text
  });

  it('agrees with JSON.parse on random strings of JSON fragments', () => {
    const rng = new Mt19937(5);
    const alphabet = ['{', '}', '[', ']', ':', ',', '"', 'a', 'é', '1', '0', '-', '.', 'e', '+', ' ', '\\', 'n', 'u', 'true', 'null', 'fals', '"k"', '\n', '2', 'E'];
    let accepted = 0;
    for (let i = 0; i < 200_000; i++) {
      let s = '{';
      const n = Math.floor(rng.nextDouble() * 12);
      for (let j = 0; j < n; j++) s += alphabet[Math.floor(rng.nextDouble() * alphabet.length)];
      if (rng.nextDouble() < 0.7) s += '}';
      let oracle: boolean;
      try {
        const v = JSON.parse(s);
        oracle = v !== null && typeof v === 'object' && !Array.isArray(v) && s.endsWith('}') && wsRunsOk(s);
      } catch {
        oracle = false;
      }
      if (complete(s) !== oracle) throw new Error(`disagree on ${JSON.stringify(s)}: JSON.parse ${oracle}`);
      if (oracle) accepted++;
    }
    expect(accepted).toBeGreaterThan(1000);
  });
});

describe('JsonConstraint', () => {
  // A toy vocabulary: pieces by id; 0 is end of generation, 1 a control token (no bytes).
  const pieces = ['', '', '{', '}', '"', 'a', ':', '1', ' ', '{"', '"}', '":', ',"', 'é', '\u00e9"'].map((p) => bytes(p));
  pieces[15] = Uint8Array.from([0xc3]); // first byte of é
  pieces[16] = Uint8Array.from([0xa9]); // its continuation
  const eog = new Set([0]);
  const allowed = (c: JsonConstraint) => pieces.map((_, t) => t).filter((t) => c.allows(t));

  it('allows only what continues the object, end of generation only once it is complete', () => {
    const c = new JsonConstraint(pieces, eog);
    expect(allowed(c)).toEqual([2, 8, 9]); // '{', ' ', '{"'
    for (const t of [9, 5, 11, 7]) c.accept(t); // {"a":1
    expect(allowed(c)).toEqual([3, 7, 8, 12]); // '}', '1', ' ', ',"'
    c.accept(12); // ,"
    c.accept(15); // first byte of é
    expect(allowed(c)).toEqual([16]);
    c.accept(16);
    c.accept(11); // ":
    c.accept(4); // "
    c.accept(10); // "}
    expect(c.done).toBe(true);
    expect(allowed(c)).toEqual([0]);
  });

  it('masks a row to the allowed tokens and counts them', () => {
    const c = new JsonConstraint(pieces, eog);
    const row = new Float32Array(pieces.length).fill(1);
    expect(c.mask(row)).toBe(3);
    expect([...row].map((x, t) => (x === 1 ? t : -1)).filter((t) => t >= 0)).toEqual([2, 8, 9]);
  });

  it('masks exactly the tokens allows() refuses, in every kind of state, on a large random vocabulary', () => {
    const rng = new Mt19937(21);
    const vocab: Uint8Array[] = [new Uint8Array(0)]; // 0: end of generation, no text
    const alphabet = Buffer.from(' \n\t{}[]:,"\\-.0123456789eEtrufalsnxyzé中');
    for (const b of new Set(alphabet)) vocab.push(Uint8Array.of(b));
    for (let i = vocab.length; i < 20000; i++) {
      const len = 1 + Math.floor(rng.nextDouble() * 5);
      vocab.push(Uint8Array.from({ length: len }, () => alphabet[Math.floor(rng.nextDouble() * alphabet.length)]));
    }
    for (const prefix of ['', '{', '{"a', '{"a"', '{"a":', '{"a":-1', '{"a":[tr', '{"a":"\\u00', '{"a":1}']) {
      const c = new JsonConstraint(vocab, new Set([0]));
      for (const b of bytes(prefix)) c.accept(vocab.findIndex((p) => p.length === 1 && p[0] === b));
      expect(c.done).toBe(prefix.endsWith('}'));
      const row = new Float32Array(vocab.length).fill(1);
      const kept = c.mask(row);
      const expected = vocab.map((_, t) => c.allows(t));
      expect([...row].map((x) => x === 1)).toEqual(expected);
      expect(kept).toBe(expected.filter(Boolean).length);
    }
  });

  it("masks inside a bounded string exactly as allows() does (plain tokens admitted by the string's room)", () => {
    const rng = new Mt19937(5);
    const alphabet = Buffer.from('ab "\\u0\nzé中😀{}:,stcd');
    const vocab: Uint8Array[] = [Uint8Array.from(Buffer.from('ab'))]; // 0: an end-of-generation token with text
    for (const b of new Set(alphabet)) vocab.push(Uint8Array.of(b));
    for (let i = vocab.length; i < 20000; i++) {
      const len = 1 + Math.floor(rng.nextDouble() * 6);
      vocab.push(Uint8Array.from({ length: len }, () => alphabet[Math.floor(rng.nextDouble() * alphabet.length)]));
    }
    const grammar = compileJsonSchema({ type: 'object', properties: { s: { type: 'string', maxLength: 4 }, t: { type: 'string' } }, required: ['s', 't'] });
    for (const prefix of ['{"s":"', '{"s":"a', '{"s":"ab', '{"s":"abé', '{"s":"abéa', '{"s":"a\\', '{"s":"abcd","t":"', '{"s":"abcd","t":"中']) {
      const c = new JsonConstraint(vocab, new Set([0]), grammar);
      expect(c.allows(0)).toBe(false);
      const bytesOf = bytes(prefix);
      for (let i = 0; i < bytesOf.length; i++) {
        // whole characters, as single-byte tokens where they exist, else the multi-byte one
        const one = vocab.findIndex((p) => p.length === 1 && p[0] === bytesOf[i]);
        if (one >= 0) c.accept(one);
        else {
          const len = bytesOf[i] >= 0xf0 ? 4 : bytesOf[i] >= 0xe0 ? 3 : 2;
          const t = vocab.findIndex((p) => p.length === len && Buffer.from(p).equals(Buffer.from(bytesOf.subarray(i, i + len))));
          c.accept(t);
          i += len - 1;
        }
      }
      const row = new Float32Array(vocab.length).fill(1);
      const kept = c.mask(row);
      const expected = vocab.map((_, t) => c.allows(t));
      expect([...row].map((x) => x === 1)).toEqual(expected);
      expect(kept).toBe(expected.filter(Boolean).length);
    }
  });

  it('refuses to advance past a token it does not allow', () => {
    const c = new JsonConstraint(pieces, eog);
    expect(() => c.accept(3)).toThrow(/does not continue the constrained output/);
  });
});
