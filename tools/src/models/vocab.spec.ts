import { buildVocab, bytesToUnicode, TokenType, VOCAB_KINDS } from './vocab';

describe('generated vocabularies', () => {
  it('GPT-2 byte map covers all 256 bytes with distinct printable characters', () => {
    const { order, map } = bytesToUnicode();
    expect(new Set(order).size).toBe(256);
    expect(new Set(map).size).toBe(256);
    expect(map[0x41]).toBe('A');
    expect(map[0x20]).toBe('Ġ');
    expect(map[0x0a]).toBe('Ċ');
  });

  for (const kind of VOCAB_KINDS) {
    for (const size of [512, 2048, 32000]) {
      it(`${kind} x ${size}: exact size, unique tokens, consistent merges and special ids`, () => {
        const v = buildVocab(kind, size);
        expect(v.tokens.length).toBe(size);
        expect(v.types.length).toBe(size);
        expect(new Set(v.tokens).size).toBe(size);
        expect(v.tokens.filter((t) => t.length === 0)).toEqual([]);
        expect(v.types[v.bosId]).toBe(TokenType.CONTROL);
        expect(v.types[v.eosId]).toBe(TokenType.CONTROL);
        const index = new Map(v.tokens.map((t, i) => [t, i]));
        if (v.model === 'gpt2') {
          const { map } = bytesToUnicode();
          expect(map.filter((ch) => !index.has(ch))).toEqual([]);
          // Each merge joins two earlier tokens into a later one, so BPE can reach every token.
          const bad = v.merges!.filter((m) => {
            const parts = m.split(' ');
            if (parts.length !== 2) return true;
            const iab = index.get(parts[0] + parts[1]);
            return iab === undefined || !(iab > index.get(parts[0])! && iab > index.get(parts[1])!);
          });
          expect(bad).toEqual([]);
          expect(v.chatTemplate).toContain(v.kind === 'qwen2' ? '<|im_start|>' : '<|start_header_id|>');
        } else if (v.model === 'bert') {
          // WordPiece in llama.cpp's form: [CLS] ... [SEP]; every corpus character as a word start and a continuation.
          expect(v.tokens.slice(0, 5)).toEqual(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
          expect([v.bosId, v.sepId, v.unkId, v.padId, v.maskId]).toEqual([2, 3, 1, 0, 4]);
          expect(v.tokens).toContain('▁the');
          for (const c of 'abcxyz.,') expect([index.has(`▁${c}`), index.has(c)]).toEqual([true, true]);
          expect(v.chatTemplate).toBe('');
        } else {
          expect(v.tokens.slice(0, 3)).toEqual(['<unk>', '<s>', '</s>']);
          const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
          expect(v.tokens.slice(3, 259)).toEqual(bytes);
          expect(v.types.slice(3, 259).every((t) => t === TokenType.BYTE)).toBe(true);
          expect(v.scores!.length).toBe(size);
          expect(v.tokens).toContain('▁the');
          if (kind === 'phi3') {
            // Phi-3's specials close the vocabulary; <|endoftext|> ends text, <|end|> a turn.
            expect(v.tokens.slice(-11)).toEqual(['<|endoftext|>', '<|assistant|>', '<|placeholder1|>', '<|placeholder2|>', '<|placeholder3|>', '<|placeholder4|>', '<|system|>', '<|end|>', '<|placeholder5|>', '<|placeholder6|>', '<|user|>']);
            expect(v.types.slice(-11).every((t) => t === TokenType.CONTROL)).toBe(true);
            expect(v.tokens[v.eosId]).toBe('<|endoftext|>');
            expect(v.chatTemplate).toContain('<|user|>');
          } else expect(v.chatTemplate).toContain('[INST]');
        }
      });
    }
  }

  it('is deterministic', () => {
    expect(buildVocab('qwen2', 1024)).toEqual(buildVocab('qwen2', 1024));
    expect(buildVocab('spm', 1024)).toEqual(buildVocab('spm', 1024));
  });

  it('learns common words from the corpus as single tokens', () => {
    const v = buildVocab('llama3', 1024);
    for (const w of ['Ġthe', 'Ġand', 'Ġexperts']) expect(v.tokens).toContain(w);
  });

  it('rejects sizes too small for the byte tokens', () => {
    expect(() => buildVocab('qwen2', 200)).toThrow(/too small/);
    expect(() => buildVocab('spm', 300)).toThrow(/too small/);
  });
});
