// Structured output under the names other servers take it: llama-server's `json_schema` and
// `grammar` (GBNF, on /completion, /infill and its OpenAI routes) and vLLM's `guided_json`,
// `guided_choice`, `guided_grammar` and `guided_regex` (the whole output matches it), held by the
// engine's constrained decoding like OpenAI's response_format.
import { z } from 'zod';

import { engine as pb } from '@kailstream/proto';

const schema = z.union([z.record(z.string(), z.unknown()), z.string()]);

export const structuredFields = {
  /** llama-server: a JSON schema the output follows ({} = any JSON object). */
  json_schema: schema.optional().nullable(),
  /** llama-server: a GBNF grammar the output follows. */
  grammar: z.string().max(1 << 20, 'grammar is longer than 1 MiB').optional().nullable(),
  /** vLLM: a JSON schema (object or its JSON text). */
  guided_json: schema.optional().nullable(),
  /** vLLM: the output is exactly one of these strings. */
  guided_choice: z.array(z.string().min(1, 'guided_choice strings must not be empty')).min(1).max(1024).optional().nullable(),
  /** vLLM: a regular expression the whole output matches. */
  guided_regex: z.string().max(1 << 16, 'guided_regex is longer than 64 KiB').optional().nullable(),
  /** vLLM: a grammar (GBNF, as llama.cpp's; vLLM's xgrammar backend reads the same EBNF). */
  guided_grammar: z.string().max(1 << 20, 'guided_grammar is longer than 1 MiB').optional().nullable(),
};

export type StructuredFields = { [K in keyof typeof structuredFields]?: z.infer<(typeof structuredFields)[K]> };

/** A 400 in OpenAI's error shape (built here: openai/schemas.ts imports this module). */
export class StructuredOutputError extends Error {
  readonly body: { error: { message: string; type: string; param: string; code: string } };
  constructor(message: string, param: string) {
    super(message);
    this.body = { error: { message, type: 'invalid_request_error', param, code: 'invalid_value' } };
  }
}

const bad = (message: string, param: string) => new StructuredOutputError(message, param);

/**
 * The engine request's output fields for these request fields, or undefined when none is set.
 * Throws StructuredOutputError (a 400) for refused or conflicting ones.
 */
export function structuredOutput(b: StructuredFields, hasResponseFormat: boolean): Partial<pb.GenerateRequest> | undefined {
  // (An empty grammar or regex is none, as llama-server reads an empty grammar.)
  const set = (['json_schema', 'guided_json', 'guided_choice', 'grammar', 'guided_grammar', 'guided_regex'] as const).filter((k) =>
    k === 'grammar' || k === 'guided_grammar' || k === 'guided_regex' ? !!b[k] : b[k] != null,
  );
  if (!set.length) return undefined;
  if (set.length > 1) throw bad(`${set.join(' and ')} cannot be combined`, set[1]);
  if (hasResponseFormat) throw bad(`${set[0]} cannot be combined with response_format`, set[0]);
  if (b.grammar || b.guided_grammar) return { grammar: (b.grammar || b.guided_grammar)! };
  if (b.guided_regex) return { regex: b.guided_regex };
  if (b.guided_choice) return { outputChoices: b.guided_choice };
  const raw = (b.json_schema ?? b.guided_json)!;
  let parsed: unknown = raw;
  if (typeof raw === 'string') {
    try {
      parsed = JSON.parse(raw);
    } catch (e) {
      throw bad(`${set[0]} is not valid JSON: ${(e as Error).message}`, set[0]);
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw bad(`${set[0]} must be a JSON schema object`, set[0]);
  }
  // An empty schema means any object, as llama-server reads it.
  const s = Object.keys(parsed as object).length ? parsed : { type: 'object' };
  return { responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_JSON_SCHEMA, jsonSchema: JSON.stringify(s) };
}
