// GBNF grammars against llama.cpp's grammar sampler: greedy generation under a grammar must pick
// the same tokens (the argmax of the tokens each allows), on a byte-level BPE vocabulary (Llama 3's
// kind, with byte tokens that split UTF-8 characters) and a SentencePiece one (byte-fallback
// tokens, '▁' spaces). Random weights put the unconstrained choice outside the grammar at nearly
// every step, so nearly every token is a masked choice: the allowed sets must agree, not only
// the texts. The grammars cover literals, classes (negated, Unicode ranges), any-character,
// repetitions ({m,n}, *, +, ?), recursion, and token ids (!<[id]>). The random test vocabularies
// hold tokens that are not UTF-8 (a NUL byte inside, C0 xx), which llama.cpp's decoder misreads
// ("C0 F5" as '5', ",\0x" as ",") and kail refuses (`sampling/gbnf.ts`): both sides ban them.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { common, engine as pb } from '@kailstream/proto';
import { EngineModel, LocalModelHost } from '@kailstream/engine';

import { writeModel } from '../models/build';
import { getPreset } from '../models/presets';
import { llamaGenerateMany } from './llama-ref';
import { tokenIds as randomTokenIds } from './metrics';

const GRAMMARS: Record<string, string> = {
  answer: 'root ::= "The answer is " [0-9]{1,3} ("." [0-9]+)? "\\n"',
  json: [
    'root   ::= "{" ws string ":" ws value ("," ws string ":" ws value)* "}" ws',
    'value  ::= object | array | string | number | ("true" | "false" | "null") ws',
    'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws',
    'array  ::= "[" ws ( value ("," ws value)* )? "]" ws',
    'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\\"" ws',
    'number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws',
    'ws ::= | " " | "\\n" [ \\t]{0,20}',
  ].join('\n'),
  unicode: 'root ::= "«" [ぁ-ゟ]{2,5} "» " ([a-zé ]{0,8}) (. | "日本")\n',
  choice: '# alternatives, then free text up to a full stop\nroot ::= ("yes" | "no" | "maybe") ", because " [^.\\n]{1,40} "."',
  tokens: 'root ::= !<[TOK]>{3,6} "end"',
};

const PRESETS = ['tiny-llama', 'tiny-mixtral'];
const MAX_TOKENS = 40;

/**
 * Tokens whose text llama.cpp's grammar decoder reads other than as UTF-8: a NUL byte, bytes that
 * never occur in UTF-8, a lead byte whose next byte is range-limited (E0, ED, F0, F4), a lead byte
 * not followed by enough continuation bytes inside the token.
 */
function misreadTokens(pieces: Uint8Array[]): number[] {
  const bad = (p: Uint8Array) => {
    for (let i = 0; i < p.length; i++) {
      const b = p[i];
      if (b === 0 || b === 0xc0 || b === 0xc1 || b >= 0xf5 || b === 0xe0 || b === 0xed || b === 0xf0 || b === 0xf4) return true;
      const n = b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : 0;
      for (let k = 1; k <= n && i + k < p.length; k++) if (p[i + k] >> 6 !== 2) return true;
    }
    return false;
  };
  return pieces.flatMap((p, id) => (bad(p) ? [id] : []));
}

// (Ids from 3 on: the vocabulary's first ids are its control tokens.)
const tokenIds = (n: number, nVocab: number, seed: number) => randomTokenIds(n, nVocab, seed, 3);

describe("GBNF grammars against llama.cpp's grammar sampler (greedy)", () => {
  let dir: string;
  const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 256 });
  const banned: Record<string, number[]> = {};
  // Per preset and grammar, the two prompts' grammars and llama.cpp's generations (one harness
  // process per preset runs them all: starting it costs more than the generations).
  const cases: Record<string, Record<string, { grammar: string; prompts: number[][]; refs: { tokens: number[]; eog: boolean }[] }>> = {};
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-parity-gbnf-'));
    for (const p of PRESETS) {
      const file = path.join(dir, `${p}.gguf`);
      writeModel({ config: getPreset(p).config, fileType: 'F32', seed: 5, out: file });
      await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: p, threads: 2 }));
      const m = EngineModel.load(file, { threads: 1, nCtx: 16 });
      banned[p] = misreadTokens(Array.from({ length: m.tokenizer.nTokens }, (_, id) => m.tokenizer.tokenToPiece(id, { special: true })));
      m.close();
      const nVocab = getPreset(p).config.vocabSize;
      cases[p] = {};
      const jobs = [];
      for (const [name, text] of Object.entries(GRAMMARS)) {
        const grammar = text.replace('TOK', String(tokenIds(1, nVocab, 99)[0]));
        const grammarFile = path.join(dir, `${p}-${name}.gbnf`);
        fs.writeFileSync(grammarFile, grammar);
        const prompts = [1, 2].map((seed) => tokenIds(6, nVocab, seed * 7 + name.length));
        cases[p][name] = { grammar, prompts, refs: [] };
        for (const tokens of prompts) jobs.push({ name, tokens, maxTokens: MAX_TOKENS, grammarFile, ban: banned[p] });
      }
      const refs = await llamaGenerateMany(file, jobs, { timeoutMs: 240_000 });
      jobs.forEach((j, i) => cases[p][j.name].refs.push(refs[i]));
    }
  }, 360_000);
  afterAll(async () => {
    await host.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  /** The generated tokens, and whether an end-of-generation token ended them (the last of them). */
  async function kail(model: string, prompt: number[], grammar: string): Promise<{ tokens: number[]; eog: boolean }> {
    const sampling = common.SamplingParams.fromPartial({ temperature: 0 });
    for (const t of banned[model]) sampling.logitBias[t] = -Infinity;
    const req = pb.GenerateRequest.fromPartial({ requestId: `g${Math.random()}`, model, promptTokens: prompt, maxTokens: MAX_TOKENS, grammar, sampling });
    const tokens: number[] = [];
    let finish = common.FinishReason.FINISH_REASON_UNSPECIFIED;
    for await (const r of host.generate(req, new AbortController().signal)) {
      tokens.push(...r.tokens);
      if (r.finishReason) finish = r.finishReason;
    }
    return { tokens, eog: finish === common.FinishReason.FINISH_REASON_STOP };
  }

  for (const preset of PRESETS)
    for (const name of Object.keys(GRAMMARS))
      it(`${preset}: ${name}`, async () => {
        const { grammar, prompts, refs } = cases[preset][name];
        expect(refs).toHaveLength(prompts.length);
        for (const [i, prompt] of prompts.entries()) {
          const ours = await kail(preset, prompt, grammar);
          // Both list the end-of-generation token that ended the output (kail's finish reason is then stop).
          expect({ prompt, tokens: ours.tokens, eog: ours.eog }).toEqual({ prompt, tokens: refs[i].tokens, eog: refs[i].eog });
          expect(ours.tokens.length).toBeGreaterThan(3);
        }
      }, 120_000);
});
