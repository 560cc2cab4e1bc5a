// Structured output under the names other servers take it: llama-server's `json_schema` and
// `grammar` (GBNF, on /completion, /infill and its OpenAI routes; lazy with `grammar_lazy` and
// `grammar_triggers`) and vLLM's `guided_json`,
// `guided_choice`, `guided_grammar` and `guided_regex` (the whole output matches it), and their
// current form, vLLM's `structured_outputs` ({json | regex | choice | grammar | json_object}),
// held by the engine's constrained decoding like OpenAI's response_format.
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
  /**
   * vLLM (0.12 on): one of json, regex, choice, grammar or json_object; its backend options
   * (disable_fallback…) change nothing here. whitespace_pattern and structural_tag are refused.
   */
  structured_outputs: z
    .object({
      json: schema.optional().nullable(),
      regex: z.string().max(1 << 16).optional().nullable(),
      choice: z.array(z.string().min(1, 'choice strings must not be empty')).min(1).max(1024).optional().nullable(),
      grammar: z.string().max(1 << 20).optional().nullable(),
      json_object: z.boolean().optional().nullable(),
      whitespace_pattern: z.string().refine((w) => !w, 'whitespace_pattern is not supported (JSON is written with llama.cpp\'s whitespace rule)').optional().nullable(),
      structural_tag: z.unknown().refine((t) => t == null, 'structural_tag is not supported').optional().nullable(),
    })
    .passthrough()
    .optional()
    .nullable(),
  /** vLLM: a grammar (GBNF, as llama.cpp's; vLLM's xgrammar backend reads the same EBNF). */
  guided_grammar: z.string().max(1 << 20, 'guided_grammar is longer than 1 MiB').optional().nullable(),
  /** llama-server: the grammar holds only from a trigger on (the output is free before). */
  grammar_lazy: z.boolean().optional().nullable(),
  /**
   * llama-server: the lazy grammar's triggers, `{type, value, token}`: 0 = a token (`token`, or
   * the single token `value` spells), 1 = a word, 2 = a pattern searched in the output so far, 3 =
   * a pattern the whole output so far matches; the grammar starts at the pattern's first capture.
   */
  grammar_triggers: z
    .array(z.object({ type: z.number().int().min(0).max(3), value: z.string().max(1 << 16).optional().nullable(), token: z.number().int().min(0).max(2 ** 31 - 1).optional().nullable() }))
    .max(256)
    .optional()
    .nullable(),
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
  const so = b.structured_outputs;
  if (so) {
    // The new form: one constraint inside, the old fields beside it not at all.
    const inner = (['json', 'regex', 'choice', 'grammar', 'json_object'] as const).filter((k) => (k === 'json_object' ? so[k] === true : so[k] != null && so[k] !== ''));
    if (inner.length > 1) throw bad(`structured_outputs: ${inner.join(' and ')} cannot be combined`, 'structured_outputs');
    const old = (['json_schema', 'guided_json', 'guided_choice', 'grammar', 'guided_grammar', 'guided_regex'] as const).filter((k) => b[k] != null && b[k] !== '');
    if (old.length) throw bad(`structured_outputs cannot be combined with ${old[0]}`, 'structured_outputs');
    if (!inner.length) return undefined;
    if (hasResponseFormat) throw bad('structured_outputs cannot be combined with response_format', 'structured_outputs');
    if (inner[0] === 'json_object') return { responseFormat: pb.ResponseFormat.RESPONSE_FORMAT_JSON_OBJECT };
    try {
      return structuredOutput({ guided_json: so.json, guided_regex: so.regex, guided_choice: so.choice, guided_grammar: so.grammar }, false);
    } catch (e) {
      // (Named as the request named them.)
      if (e instanceof StructuredOutputError) throw bad(e.message.replace(/guided_(json|regex|choice|grammar)/g, 'structured_outputs.$1'), 'structured_outputs');
      throw e;
    }
  }
  // (An empty grammar or regex is none, as llama-server reads an empty grammar.)
  const set = (['json_schema', 'guided_json', 'guided_choice', 'grammar', 'guided_grammar', 'guided_regex'] as const).filter((k) =>
    k === 'grammar' || k === 'guided_grammar' || k === 'guided_regex' ? !!b[k] : b[k] != null,
  );
  const lazy = !!b.grammar_lazy || !!b.grammar_triggers?.length;
  if (lazy && !b.grammar) throw bad('grammar_lazy and grammar_triggers need a grammar', b.grammar_lazy ? 'grammar_lazy' : 'grammar_triggers');
  if (!set.length) return undefined;
  if (set.length > 1) throw bad(`${set.join(' and ')} cannot be combined`, set[1]);
  if (hasResponseFormat) throw bad(`${set[0]} cannot be combined with response_format`, set[0]);
  if (b.grammar && lazy) {
    return {
      grammar: b.grammar,
      grammarLazy: !!b.grammar_lazy,
      // (A token trigger is its `token` when given, as llama-server reads it; else the one token `value` spells.)
      grammarTriggers: (b.grammar_triggers ?? []).map((t) => ({ type: t.type, value: t.type === 0 && t.token != null ? '' : (t.value ?? ''), token: t.token ?? 0 })),
    };
  }
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
