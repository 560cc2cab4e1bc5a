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
        if (v.model !== 't5') expect(v.types[v.bosId]).toBe(TokenType.CONTROL);
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
        } else if (v.model === 'plamo2') {
          // PLaMo 2's: its specials, the byte tokens, pieces with plain spaces (no U+2581), no template.
          expect(v.tokens.slice(0, 5)).toEqual(['<|plamo:unk|>', '<|plamo:bos|>', '<|plamo:eos|>', '<|plamo:pad|>', '<|plamo:op|>']);
          expect([v.unkId, v.bosId, v.eosId, v.padId, v.eotId]).toEqual([0, 1, 2, 3, 4]);
          expect(v.tokens.slice(5, 261)).toEqual(Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`));
          expect(v.types.slice(5, 261).every((t) => t === TokenType.BYTE)).toBe(true);
          expect(v.tokens).toContain(' the');
          expect(v.tokens.filter((t) => t.includes('\u2581'))).toEqual([]);
          expect(v.chatTemplate).toBe('');
        } else if (v.model === 't5') {
          // T5's unigram vocabulary: <pad> </s> <unk>, pieces with U+2581 and falling scores, <extra_id_N> last, no BOS.
          expect(v.tokens.slice(0, 3)).toEqual(['<pad>', '</s>', '<unk>']);
          expect([v.bosId, v.eosId, v.unkId, v.padId, v.types[2]]).toEqual([-1, 1, 2, 0, TokenType.UNKNOWN]);
          expect(v.tokens).toContain('▁the');
          expect(v.tokens.slice(-4)).toEqual(['<extra_id_0>', '<extra_id_1>', '<extra_id_2>', '<extra_id_3>']);
          const normal = v.types.flatMap((t, i) => (t === TokenType.NORMAL ? [i] : []));
          expect(v.scores![normal[1]]).toBeLessThan(v.scores![normal[0]]);
          expect([v.addSpacePrefix, v.removeExtraWhitespaces, v.chatTemplate]).toEqual([true, true, '']);
          if (kind === 'ugm-charsmap') {
            // the charsmap, two user-defined tokens (score 0) and pieces for what the charsmap normalizes to
            expect(v.tokens.slice(3, 5)).toEqual(['<br>', 'при']);
            expect([v.types[3], v.types[4], v.scores![3], v.scores![4]]).toEqual([TokenType.USER_DEFINED, TokenType.USER_DEFINED, 0, 0]);
            for (const t of ['fi', '▁ffi', '1', '▁10', '株式会社', 'é', '각', 'й']) expect(index.has(t)).toBe(true);
            expect(v.precompiledCharsmap!.length).toBeGreaterThan(1024);
          } else expect(v.precompiledCharsmap).toBeUndefined();
        } else if (v.model === 'hybriddna') {
          // HybridDNA: Llama 3's BPE (its merges reach every BPE token) with plain-text DNA runs, the specials, then
          // <dna> </dna> <oov> (CONTROL) and right after them the 6-mers, each with the U+E000 marker, sorted; [PADn] to the size.
          const bad = v.merges!.filter((m) => {
            const [a, b] = m.split(' ');
            const iab = index.get(a + b);
            return iab === undefined || !(iab > index.get(a)! && iab > index.get(b)!);
          });
          expect(bad).toEqual([]);
          expect(v.pre).toBe('llama-bpe');
          const oov = index.get('<oov>')!;
          expect([v.tokens[oov - 2], v.tokens[oov - 1], v.types[oov - 2], v.types[oov - 1], v.types[oov]]).toEqual(['<dna>', '</dna>', TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL]);
          const kmers = v.tokens.filter((t) => t.endsWith('\ue000'));
          expect(kmers.length).toBe(size >= 8200 ? 4096 : Math.min(4096, size - oov - 1));
          expect(v.tokens.slice(oov + 1, oov + 1 + kmers.length)).toEqual(kmers);
          expect(kmers.every((k) => /^[ACGT]{6}\ue000$/.test(k))).toBe(true);
          expect([...kmers].sort()).toEqual(kmers);
          for (const t of ['AAAAAA', 'CCCCCC', 'GATTAC', 'TTTTTT']) expect([index.has(t + '\ue000'), v.types[index.get(t + '\ue000')!]]).toEqual([true, TokenType.NORMAL]);
          for (const t of ['CCCCCC', 'AAAAAA', 'ACGT']) expect(v.types[index.get(t)!]).toBe(TokenType.NORMAL);
          expect(v.tokens.slice(oov + 1 + kmers.length).every((t, i) => t === `[PAD${oov + 1 + kmers.length + i}]`)).toBe(true);
          expect([v.tokens[v.bosId], v.tokens[v.eosId], v.chatTemplate]).toEqual(['<|begin_of_text|>', '<|end_of_text|>', '']);
        } else if (v.model === 'rwkv') {
          // RWKV world (rwkv_vocab_v20230424 through the converter): <s>, the 256 bytes, "\n\n" the EOT at 261,
          // texts as Python's repr(bytes)[2:-1] (lowercase \xNN, \t \n \r \\, \' only where " is present), [PADn] last.
          expect([v.bosId, v.eosId, v.eotId, v.tokens[0], v.types[0]]).toEqual([0, 0, 261, '<s>', TokenType.CONTROL]);
          expect(v.tokens.slice(1, 257)).toEqual(Array.from({ length: 256 }, (_, b) =>
            b === 0x5c ? '\\\\' : b === 9 ? '\\t' : b === 10 ? '\\n' : b === 13 ? '\\r' : b < 0x20 || b >= 0x7f ? `\\x${b.toString(16).padStart(2, '0')}` : String.fromCharCode(b)));
          expect(v.tokens[261]).toBe('\\n\\n');
          for (const t of ["'s", '\\\'"', '"\\\'', '\\\\n', '\\xc3\\xa9', '\\xe4\\xb8', '\\xf0\\x9f\\x98', ' the']) expect(index.has(t)).toBe(true);
          expect(v.tokens.slice(-4)).toEqual([size - 4, size - 3, size - 2, size - 1].map((i) => `[PAD${i}]`));
          expect(v.types.slice(-4).every((t) => t === TokenType.UNUSED)).toBe(true);
          expect(v.chatTemplate).toContain("'Assistant:'");
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
