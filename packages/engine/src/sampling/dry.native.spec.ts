// DRY with string sequence breakers against llama.cpp's own sampler on a real vocabulary: the
// logits llama_sampler_init_dry leaves over a history (__fixtures__/gen-llama-cpp-samplers.cpp).
import path from 'node:path';

import { native } from '../native';
import { fixtureVocabs } from '../tokenizer/test-vocabs';
import { Tokenizer } from '../tokenizer/tokenizer';
import fixtures from './__fixtures__/llama-cpp-samplers.json';
import { applyDry, dryBreakerSequences, indexBreakers } from './dry';

const spm = fixtureVocabs().find((f) => path.basename(f) === 'ggml-vocab-llama-spm.gguf');

describe('DRY: parity with llama.cpp on the llama-spm vocabulary', () => {
  let tok: Tokenizer;
  beforeAll(() => {
    if (!spm) throw new Error('shared/fixtures/tokenizers/ggml-vocab-llama-spm.gguf not found');
    const gguf = native().openGguf(spm, { mapData: false });
    try {
      tok = Tokenizer.fromMetadata(gguf.metadata);
    } finally {
      gguf.close();
    }
  });

  it.each(fixtures.dry.map((c) => [c.name, c] as const))('%s: the same penalties', (_name, c) => {
    const seqs = dryBreakerSequences(tok, c.breakers);
    const logits = new Float32Array(tok.nTokens);
    applyDry(logits, c.history, { ...c, dryBreakers: seqs }, indexBreakers(seqs));
    const got: [number, number][] = [];
    logits.forEach((v, i) => v !== 0 && got.push([i, v]));
    expect(got).toEqual(c.penalized.map(([i, v]) => [i, Math.fround(v)]));
    expect(got.length).toBeGreaterThan(0);
  });

  it('turns breaker strings into every token sequence that spells them', () => {
    const seqs = dryBreakerSequences(tok, ['User:']);
    // Every token containing the whole string is a breaker alone; a head whose text ends with a
    // prefix of it carries the tokenization of the rest (with this vocabulary's space prefix, as
    // llama.cpp tokenizes it).
    const text = (ids: number[]) => tok.detokenize(ids, { special: true });
    const alone = seqs.filter((s) => s.length === 1);
    expect(alone.every((s) => text(s).includes('User:'))).toBe(true);
    const heads = seqs.filter((s) => s.length > 1);
    expect(heads.length).toBeGreaterThan(3);
    for (const [head, ...tail] of heads) {
      const h = text([head]);
      const cut = [1, 2, 3, 4].find((k) => h.endsWith('User:'.slice(0, k)));
      expect(cut).toBeDefined();
      expect(tail).toEqual(tok.tokenize('User:'.slice(cut), { addSpecial: false }));
    }
  });
});
