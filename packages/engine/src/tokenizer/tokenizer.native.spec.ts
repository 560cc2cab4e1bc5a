// llama.cpp's tokenizer test vocabularies: every line of every .out must come out exactly.
// The GGUFs are read with the native reader; fixtures are found in shared/fixtures/tokenizers
// (searched upward from here), plus any directories listed in KAIL_TOKENIZER_FIXTURES.

import fs from 'node:fs';
import path from 'node:path';

import { native } from '../native';
import { Tokenizer } from './tokenizer';

function fixtureDirs(): string[] {
  const dirs: string[] = [];
  for (let dir = __dirname; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'shared/fixtures/tokenizers');
    if (fs.existsSync(candidate)) {
      dirs.push(candidate);
      break;
    }
    if (path.dirname(dir) === dir) break;
  }
  for (const d of (process.env.KAIL_TOKENIZER_FIXTURES ?? '').split(path.delimiter)) if (d) dirs.push(path.resolve(d));
  return dirs;
}

/** The test strings: each is followed by a line "__ggml_vocab_test__" (llama.cpp's test-tokenizer-0). */
function readInputs(file: string): string[] {
  const raw = fs.readFileSync(file, 'utf8');
  const sep = '\n__ggml_vocab_test__\n';
  const out: string[] = [];
  for (let pos = 0; pos < raw.length; ) {
    const next = raw.indexOf(sep, pos);
    if (next < 0) {
      out.push(raw.slice(pos));
      break;
    }
    out.push(raw.slice(pos, next));
    pos = next + sep.length;
  }
  return out;
}

const vocabs = fixtureDirs().flatMap((dir) =>
  fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.gguf') && fs.existsSync(path.join(dir, f + '.inp')) && fs.existsSync(path.join(dir, f + '.out')))
    .sort()
    .map((f) => path.join(dir, f)),
);

const summary: string[] = [];
afterAll(() => {
  if (summary.length) console.log(`tokenizer fixtures:\n${summary.join('\n')}`);
});

describe('llama.cpp tokenizer fixtures', () => {
  it('finds the fixture vocabularies', () => {
    expect(vocabs.length).toBeGreaterThanOrEqual(5);
  });

  describe.each(vocabs.map((file) => [path.basename(file), file]))('%s', (name, file) => {
    let tok: Tokenizer;
    let loadMs = 0;

    beforeAll(() => {
      const gguf = native().openGguf(file, { mapData: false });
      try {
        const t0 = performance.now();
        tok = Tokenizer.fromMetadata(gguf.metadata);
        loadMs = performance.now() - t0;
      } finally {
        gguf.close();
      }
    });

    it('tokenizes every test string to the expected ids (no BOS/EOS, special text not parsed)', () => {
      const inputs = readInputs(file + '.inp');
      const expected = fs.readFileSync(file + '.out', 'utf8').split('\n');
      const failures: { line: number; text: string; got: string; want: string }[] = [];
      const t0 = performance.now();
      inputs.forEach((text, i) => {
        const got = tok.tokenize(text, { addSpecial: false, parseSpecial: false }).join(' ');
        const want = (expected[i] ?? '').trim();
        if (got !== want) failures.push({ line: i + 1, text, got, want });
      });
      const ms = performance.now() - t0;
      summary.push(
        `  ${name}: ${inputs.length - failures.length}/${inputs.length} lines match` +
          ` (${tok.vocab.type}, pre ${tok.vocab.preType}; load ${loadMs.toFixed(0)} ms, tokenize ${ms.toFixed(1)} ms)`,
      );
      expect(inputs.length).toBe(expected.filter((l, i) => i < expected.length - 1 || l !== '').length);
      expect(failures).toEqual([]);
    });

    it('detokenizes back to the text where the vocabulary is lossless', () => {
      const v = tok.vocab;
      // byte-level BPE without llama.cpp's space clean-up gives back exactly what went in
      if (v.type !== 'bpe' || !v.byteEncode || v.cleanSpaces) return;
      for (const text of readInputs(file + '.inp')) {
        expect(tok.detokenize(tok.tokenize(text, { addSpecial: false }))).toBe(text);
      }
    });
  });
});
