// llama.cpp's tokenizer test vocabularies: every line of every .out must come out exactly.
// The GGUFs are read with the native reader; fixtures are found in shared/fixtures/tokenizers
// (searched upward from here), plus any directories listed in KAIL_TOKENIZER_FIXTURES.

import fs from 'node:fs';
import path from 'node:path';

import { native } from '../native';
import { fixtureVocabs, readVocabTests } from './test-vocabs';
import { Tokenizer } from './tokenizer';

const vocabs = fixtureVocabs();

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
      const inputs = readVocabTests(file + '.inp');
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
      for (const text of readVocabTests(file + '.inp')) {
        expect(tok.detokenize(tok.tokenize(text, { addSpecial: false }))).toBe(text);
      }
    });
  });
});
