// GBNF grammars and regular expressions through the model host (the gRPC service's request): sampled outputs always fit
// the grammar and end there; bad grammars and conflicting forms are refused by name.
import { common, engine as pb } from '@kailstream/proto';
import fs from 'node:fs';

import { EngineError } from '../errors';
import { tempDir, writeTestModel } from '../testing';
import { LocalModelHost } from './model-host';

describe('GBNF grammars on requests', () => {
  const dir = tempDir();
  const host = new LocalModelHost({ seqsPerModel: 4, defaultContext: 256 });
  beforeAll(async () => {
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: writeTestModel(dir, 'tiny-llama', 'Q8_0', 2), id: 'm', threads: 2 }));
  }, 60_000);
  afterAll(async () => {
    await host.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const run = async (extra: Partial<pb.GenerateRequest>) => {
    const req = pb.GenerateRequest.fromPartial({ requestId: `r${Math.random()}`, model: 'm', prompt: 'Q: what is it?\nA:', maxTokens: 64, ...extra });
    let text = '';
    let finish = common.FinishReason.FINISH_REASON_UNSPECIFIED;
    for await (const r of host.generate(req, new AbortController().signal)) {
      text += r.text;
      if (r.finishReason) finish = r.finishReason;
    }
    return { text, finish };
  };
  const refused = async (extra: Partial<pb.GenerateRequest>) => {
    try {
      await run(extra);
    } catch (e) {
      expect(e).toBeInstanceOf(EngineError);
      expect((e as EngineError).code).toBe('KAIL_E_INVALID_ARG');
      return (e as Error).message;
    }
    throw new Error('accepted');
  };

  it('samples only texts of the grammar, ending where it is whole', async () => {
    const grammar = 'root ::= ("yes" | "no") ", " [0-9]{1,3} (" " [a-zé]{1,8}){0,3} "."\n';
    const texts = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((seed) => run({ grammar, sampling: common.SamplingParams.fromPartial({ temperature: 1.5, seed, hasSeed: true, topK: 0, topP: 1 }) })),
    );
    for (const { text, finish } of texts) {
      expect(text).toMatch(/^(yes|no), [0-9]{1,3}( [a-zé]{1,8}){0,3}\.$/);
      expect(finish).toBe(common.FinishReason.FINISH_REASON_STOP);
    }
    expect(new Set(texts.map((t) => t.text)).size).toBeGreaterThan(1);
  }, 60_000);

  it("holds the output to a regular expression (vLLM's guided_regex)", async () => {
    for (const seed of [1, 2, 3]) {
      const { text, finish } = await run({ regex: '[A-Z]{2}-\\d{2,4}( \\(v\\d\\))?', sampling: common.SamplingParams.fromPartial({ temperature: 1, seed, hasSeed: true }) });
      expect(text).toMatch(/^[A-Z]{2}-\d{2,4}( \(v\d\))?$/);
      expect(finish).toBe(common.FinishReason.FINISH_REASON_STOP);
    }
    expect(await refused({ regex: 'a(?!b)' })).toMatch(/regex: '\(\?!' \(lookaround, flags or a backreference\) cannot be held by a grammar/);
    expect(await refused({ regex: 'a', grammar: 'root ::= "a"' })).toMatch(/a GBNF grammar cannot be combined with a regular expression/);
  });

  it("holds a JSON schema's string patterns and number bounds (OpenAI's structured outputs)", async () => {
    const schema = {
      type: 'object',
      properties: {
        sku: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{4}$' },
        qty: { type: 'integer', minimum: 1, maximum: 12 },
        price: { type: 'number', exclusiveMinimum: 0, maximum: 99.5 },
      },
      required: ['sku', 'qty', 'price'],
      additionalProperties: false,
    };
    for (const seed of [1, 2, 3, 4]) {
      const { text, finish } = await run({
        maxTokens: 200, responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_JSON_SCHEMA, jsonSchema: JSON.stringify(schema),
        sampling: common.SamplingParams.fromPartial({ temperature: 1, seed, hasSeed: true }),
      });
      expect(finish).toBe(common.FinishReason.FINISH_REASON_STOP);
      const v = JSON.parse(text);
      expect(v.sku).toMatch(/^[A-Z]{3}-[0-9]{4}$/);
      expect(Number.isInteger(v.qty) && v.qty >= 1 && v.qty <= 12).toBe(true);
      expect(v.price > 0 && v.price <= 99.5).toBe(true);
    }
  }, 60_000);

  it('cuts a grammar output at max_tokens like any other', async () => {
    const out = await run({ grammar: 'root ::= "a" [a-z ]*', maxTokens: 5 });
    expect(out.finish).toBe(common.FinishReason.FINISH_REASON_LENGTH);
    expect(out.text).toMatch(/^a[a-z ]*$/);
  });

  it('refuses bad grammars and conflicting output forms', async () => {
    expect(await refused({ grammar: 'root ::= "a" | bad' })).toMatch(/rule 'bad' is used but never defined/);
    expect(await refused({ grammar: 'root ::= "a"\nx ::= [b' })).toMatch(/unexpected end of input in a character class at line 2, column 9/);
    expect(await refused({ grammar: 'root ::= <[99999]>' })).toMatch(/token id 99999 is outside the vocabulary/);
    expect(await refused({ grammar: 'root ::= "{}"', responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_JSON_OBJECT })).toMatch(/cannot be combined with a JSON response format/);
    expect(await refused({ grammar: 'root ::= "a"', outputChoices: ['a', 'b'] })).toMatch(/cannot be combined with output choices/);
  });
});
