import { OutputConstraint } from './json-constraint';
import { ChatTemplate } from '../tokenizer/chat-template';
import { choicePattern, forcedToolCallPattern, lazyToolCallPattern, PatternRecognizer, toolCallFormat, toolCallSyntax, type GlmLayout, type MinimaxLayout, type OutputPattern, type XmlLayout, type ToolDef } from './tool-call-grammar';

const GLM46: GlmLayout = { afterName: '\n', keyValue: '\n', betweenPairs: '\n', beforeClose: '\n' };
const GLM47: GlmLayout = { afterName: '', keyValue: '', betweenPairs: '', beforeClose: '' };

const bytes = (s: string) => Uint8Array.from(Buffer.from(s, 'utf8'));

const tools: ToolDef[] = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1 } }, required: ['city'] } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] } } },
  { type: 'function', function: { name: 'get' } },
];

/** Whether the whole text is accepted and complete. */
const complete = (p: OutputPattern, text: string) => {
  const r = new PatternRecognizer(p);
  return r.feed(bytes(text)) && r.done;
};
/** Whether every byte is accepted (the text may go on to a complete one). */
const prefix = (p: OutputPattern, text: string) => new PatternRecognizer(p).feed(bytes(text));

describe('toolCallFormat', () => {
  it('finds the format a chat template writes calls in', () => {
    expect(toolCallFormat('{{ "<tool_call>\\n{\\"name\\": \\"" + name }}')).toBe('hermes');
    expect(toolCallFormat(`{{- '<tool_call>\\n{"name": "' }}{{ tc.name }}`)).toBe('hermes');
    expect(toolCallFormat("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' + args + '<｜tool▁call▁end｜>'}}")).toBe('deepseek-v3.1');
    expect(toolCallFormat("{{'<｜tool▁call▁begin｜>' + type + '<｜tool▁sep｜>' + name + '\\n```json\\n' + args + '\\n```<｜tool▁call▁end｜>'}}")).toBe('deepseek-r1');
    expect(toolCallFormat('<|start_header_id|>ipython Respond in the format {"name": function name, "parameters": dictionary}')).toBe('llama3');
    expect(toolCallFormat('<tool_call>{{ name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>')).toBe('glm');
    expect(toolCallFormat('<tool_call>\n<tool_calls>[{{ calls | tojson }}]</tool_calls>')).toBe('tool-calls-list');
    expect(toolCallFormat('<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>')).toBe('xml');
    expect(toolCallFormat('<function={{ name }}>{{ args }}</function>')).toEqual({ unsupported: expect.any(String) });
    expect(toolCallFormat("{{ '<|tool_calls_section_begin|><|tool_call_begin|>' + id + '<|tool_call_argument_begin|>' }}")).toBe('kimi');
    expect(toolCallFormat('[TOOL_CALLS]')).toBe('mistral');
    expect(toolCallFormat(`{%- set toolcall_begin_token = '<minimax:tool_call>' -%}{{- '<invoke name="' + tool_call.name + '">' }}`)).toBe('minimax');
    expect(toolCallFormat('<|im_start|>{{ message.content }}')).toEqual({ unsupported: expect.any(String) });
  });
});

describe('toolCallSyntax', () => {
  // GLM-style templates differ in the whitespace between a call's parts; it is read from a rendered call.
  const glm = (afterName: string, keyValue: string, between: string) =>
    new ChatTemplate(
      '{%- for m in messages %}{%- if m.tool_calls %}{%- for tc in m.tool_calls %}<tool_call>{{ tc.function.name }}' +
        `{%- for k, v in tc.function.arguments.items() %}{{ '${between}' if not loop.first else '${afterName}' }}<arg_key>{{ k }}</arg_key>${keyValue}<arg_value>{{ v | tojson if v is not string else v }}</arg_value>{%- endfor %}{{ '\\n' }}</tool_call>{%- endfor %}` +
        '{%- else %}{{ m.content }}{%- endif %}{%- endfor %}',
    );
  it('reads the layout of GLM-style calls from a call the template renders', () => {
    expect(toolCallSyntax(glm('\\n', '\n', '\\n'))).toEqual({ format: 'glm', layout: { afterName: '\n', keyValue: '\n', betweenPairs: '\n', beforeClose: '\n' } });
    expect(toolCallSyntax(glm('\\n', '', ''))).toEqual({ format: 'glm', layout: { afterName: '\n', keyValue: '', betweenPairs: '', beforeClose: '\n' } });
    expect(toolCallSyntax(new ChatTemplate("{{ '<tool_call>\\n{\"name\": \"' }}{{ messages[0].content }}"))).toEqual({ format: 'hermes' });
    expect(toolCallSyntax(new ChatTemplate('<tool_call>{{ messages[0].content }}<arg_key>'))).toEqual({ unsupported: expect.stringContaining('layout not recognized') });
  });
});

describe('forced tool calls', () => {
  it("holds Hermes output to calls of the tools, one per line, each following the tool's parameters", () => {
    const p = forcedToolCallPattern({ format: 'hermes' }, tools, { parallel: true });
    const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;
    expect(complete(p, call('get_weather', '{"city": "Paris"}'))).toBe(true);
    expect(complete(p, call('get_weather', '{"city": "Paris", "days": 3}') + '\n' + call('get_time', '{"zone": "CET"}'))).toBe(true);
    expect(complete(p, call('get', '{"any": [1, {"x": null}]}'))).toBe(true); // no parameters: any object
    // A prefix of a call is not complete; a name that is not a tool, missing required keys, wrong
    // types, an enum value not listed, text before or between calls: refused.
    expect(prefix(p, '<tool_call>\n{"name": "get_w')).toBe(true);
    expect(complete(p, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}')).toBe(false);
    expect(prefix(p, '<tool_call>\n{"name": "get_wind"')).toBe(false);
    expect(prefix(p, call('get_weather', '{"days": 3}'))).toBe(false);
    expect(prefix(p, call('get_weather', '{"city": 3}'))).toBe(false);
    expect(prefix(p, call('get_time', '{"zone": "PST"}'))).toBe(false);
    expect(prefix(p, 'Sure. ' + call('get', '{}'))).toBe(false);
    expect(prefix(p, call('get', '{}') + ' and ')).toBe(false);
    // The parameters' bounds hold too.
    expect(complete(p, call('get_weather', '{"city": "x", "days": 0}'))).toBe(false);
    expect(complete(p, call('get_weather', '{"city": "x", "days": 10}'))).toBe(true);
    expect(prefix(p, call('get_weather', '{"city": "x", "days": 1.5}'))).toBe(false);
  });

  it('lets reasoning the prompt left open run free up to </think>, then holds the calls, when told to', () => {
    const p = forcedToolCallPattern({ format: 'hermes' }, tools, { parallel: true, reasoning: true });
    const c = '<tool_call>\n{"name": "get", "arguments": {}}\n</tool_call>';
    expect(complete(p, `</think>\n\n${c}\n${c}`)).toBe(true);
    // Any reasoning first, even text that looks like a call or a JSON object.
    expect(complete(p, `Let me call get. ${c} {"a": </thin </think>\n\n${c}`)).toBe(true);
    expect(complete(p, c)).toBe(false);
    expect(prefix(p, `hm</think>\n\nSure`)).toBe(false); // after the reasoning, calls only
    expect(prefix(p, `</think>\n\n${c}\n</think>`)).toBe(false); // closed once
  });

  it('writes one call only without parallel calls, and only the named tool when one is named', () => {
    const one = forcedToolCallPattern({ format: 'hermes' }, tools, { parallel: false });
    const c = '<tool_call>\n{"name": "get", "arguments": {}}\n</tool_call>';
    expect(complete(one, c)).toBe(true);
    expect(prefix(one, c + '\n')).toBe(false);
    const named = forcedToolCallPattern({ format: 'hermes' }, tools, { name: 'get_time', parallel: true });
    expect(complete(named, '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>')).toBe(true);
    expect(prefix(named, '<tool_call>\n{"name": "get"')).toBe(false);
    expect(() => forcedToolCallPattern({ format: 'hermes' }, tools, { name: 'nope', parallel: true })).toThrow(/'nope', which is not among/);
    expect(() => forcedToolCallPattern({ format: 'hermes' }, [], { parallel: true })).toThrow(/no tools/);
    expect(() => forcedToolCallPattern({ format: 'hermes' }, [tools[0], tools[0]], { parallel: true })).toThrow(/appears twice/);
    expect(() => forcedToolCallPattern({ format: 'hermes' }, [null as unknown as ToolDef], { parallel: true })).toThrow(/tools\[0\]/);
    expect(() => forcedToolCallPattern({ format: 'hermes' }, [{ function: { name: 'f', parameters: { type: 'wat' } } }], { parallel: true })).toThrow(/tool 'f' parameters/);
  });

  it("writes Llama 3's and DeepSeek's formats", () => {
    const l3 = forcedToolCallPattern({ format: 'llama3' }, tools, { parallel: true });
    expect(complete(l3, '{"name": "get_time", "parameters": {"zone": "UTC"}}')).toBe(true);
    expect(prefix(l3, '{"name": "get_time", "parameters": {"zone": "UTC"}}\n')).toBe(false);
    const v31 = forcedToolCallPattern({ format: 'deepseek-v3.1' }, tools, { parallel: true });
    const dsCall = (n: string, a: string) => `<｜tool▁call▁begin｜>${n}<｜tool▁sep｜>${a}<｜tool▁call▁end｜>`;
    expect(complete(v31, `<｜tool▁calls▁begin｜>${dsCall('get', '{}')}<｜tool▁calls▁end｜>`)).toBe(true);
    expect(complete(v31, `<｜tool▁calls▁begin｜>${dsCall('get', '{}')}${dsCall('get_time', '{"zone":"CET"}')}<｜tool▁calls▁end｜>`)).toBe(true);
    expect(complete(v31, `<｜tool▁calls▁begin｜>${dsCall('get', '{}')}`)).toBe(false);
    const kimi = forcedToolCallPattern({ format: 'kimi' }, tools, { parallel: true });
    const kCall = (n: string, i: number, a: string) => `<|tool_call_begin|>functions.${n}:${i}<|tool_call_argument_begin|>${a}<|tool_call_end|>`;
    expect(complete(kimi, `<|tool_calls_section_begin|>${kCall('get', 0, '{}')}${kCall('get_time', 1, '{"zone": "UTC"}')}<|tool_calls_section_end|>`)).toBe(true);
    expect(prefix(kimi, `<|tool_calls_section_begin|><|tool_call_begin|>functions.get:x`)).toBe(false);
    // Mistral: a JSON list with 9-character ids (Nemo, Mixtral 8x22B), or name[ARGS] calls (Ministral, Devstral).
    const list = forcedToolCallPattern({ format: 'mistral', layout: { list: true, gap: '', ids: true } }, tools, { parallel: true });
    expect(complete(list, '[TOOL_CALLS][{"name": "get", "arguments": {}, "id": "a1B2c3D4e"}, {"name": "get_time", "arguments": {"zone": "CET"}, "id": "ZZZZZZZZ9"}]')).toBe(true);
    expect(prefix(list, '[TOOL_CALLS][{"name": "get", "arguments": {}, "id": "a1B2-')).toBe(false);
    expect(prefix(list, '[TOOL_CALLS][{"name": "get", "arguments": {}, "id": "a1B2c3D4e1')).toBe(false);
    const args = forcedToolCallPattern({ format: 'mistral', layout: { list: false, ids: false } }, tools, { parallel: true });
    expect(complete(args, '[TOOL_CALLS]get[ARGS]{}[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}')).toBe(true);
    const withIds = forcedToolCallPattern({ format: 'mistral', layout: { list: false, ids: true } }, tools, { parallel: false });
    expect(complete(withIds, '[TOOL_CALLS]get[CALL_ID]abcdefghi[ARGS]{"q": 1}')).toBe(true);
    expect(prefix(withIds, '[TOOL_CALLS]get[CALL_ID]abcdefghi[ARGS]{"q": 1}[TOOL_CALLS]')).toBe(false);
    const r1 = forcedToolCallPattern({ format: 'deepseek-r1' }, tools, { parallel: false });
    expect(complete(r1, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{"zone": "UTC"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')).toBe(true);
    // gpt-oss (harmony): one call, the recipient in the channel part or in the role part.
    const harmony = forcedToolCallPattern({ format: 'harmony' }, tools, { parallel: true });
    expect(complete(harmony, '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"zone": "UTC"}')).toBe(true);
    expect(complete(harmony, ' to=functions.get<|channel|>commentary json<|message|>{}')).toBe(true);
    expect(prefix(harmony, '<|channel|>analysis')).toBe(false);
    expect(prefix(harmony, '<|channel|>commentary to=functions.get <|constrain|>json<|message|>{}<|start|>')).toBe(false);
  });

  it("writes GLM's key/value pairs: raw text for a string parameter, JSON for the others", () => {
    const glm = forcedToolCallPattern({ format: 'glm', layout: GLM46 }, tools, { parallel: true });
    const pairs = (kv: [string, string][]) => kv.map(([k, v]) => `\n<arg_key>${k}</arg_key>\n<arg_value>${v}</arg_value>`).join('');
    const call = (n: string, kv: [string, string][]) => `<tool_call>${n}${pairs(kv)}\n</tool_call>`;
    expect(complete(glm, call('get_weather', [['city', 'Paris, <b>FR</b> </arg_valu'], ['days', '12']]))).toBe(true);
    expect(complete(glm, call('get_weather', [['city', 'Rome'], ['days', '3']]) + '\n' + call('get_time', [['zone', '"UTC"']]))).toBe(true);
    // Keys in the schema's order, each once, required ones not skipped.
    expect(prefix(glm, call('get_weather', [['days', '3'], ['city', 'Rome']]))).toBe(false);
    expect(prefix(glm, call('get_weather', [['city', 'Rome'], ['city', 'Oslo']]))).toBe(false);
    expect(prefix(glm, call('get_weather', [['days', '3']]))).toBe(false);
    expect(prefix(glm, call('get_time', []))).toBe(false);
    expect(complete(glm, call('get', [['anything', '[1, 2]'], ['more', 'text']]))).toBe(true); // no parameters: any keys
    expect(complete(glm, call('get', []))).toBe(true);
    expect(prefix(glm, call('get_weather', [['days', 'three']]))).toBe(false); // an integer parameter
    expect(prefix(glm, call('get_weather', [['days', '1.5']]))).toBe(false);
    expect(prefix(glm, call('get_time', [['zone', '"PST"']]))).toBe(false);
    expect(prefix(glm, `<tool_call>get_weather\n<arg_key>wind</arg_key>`)).toBe(false); // not declared
    expect(prefix(glm, `<tool_call>get_wind`)).toBe(false);
    const compact = forcedToolCallPattern({ format: 'glm', layout: GLM47 }, tools, { name: 'get_weather', parallel: false });
    expect(complete(compact, '<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>')).toBe(true);
    expect(prefix(compact, '<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call><tool_call>')).toBe(false);
  });

  it("writes Qwen3-Coder's <function=…><parameter=…> calls, and Seed-OSS's tag", () => {
    const q3c: XmlLayout = { tag: 'tool_call', afterOpen: '\n', afterFunction: '\n', valueLead: '\n', valueTrail: '\n', between: '\n', beforeFunctionClose: '\n', beforeClose: '\n' };
    const xml = forcedToolCallPattern({ format: 'xml', layout: q3c }, tools, { parallel: true });
    const param = (k: string, v: string) => `<parameter=${k}>\n${v}\n</parameter>`;
    const call = (n: string, ps: string[]) => `<tool_call>\n<function=${n}>\n${ps.join('\n')}${ps.length ? '\n' : ''}</function>\n</tool_call>`;
    expect(complete(xml, call('get_weather', [param('city', 'New York, <NY>'), param('days', '3')]))).toBe(true);
    expect(complete(xml, call('get_weather', [param('city', 'Rome')]) + '\n' + call('get_time', [param('zone', '"UTC"')]))).toBe(true);
    expect(complete(xml, call('get', []))).toBe(true);
    expect(prefix(xml, call('get_weather', [param('days', '3')]))).toBe(false); // city is required
    expect(prefix(xml, call('get_weather', [param('city', 'Rome'), param('days', 'x')]))).toBe(false);
    const seed = forcedToolCallPattern({ format: 'xml', layout: { ...q3c, tag: 'seed:tool_call', valueLead: '', valueTrail: '' } }, tools, { parallel: false });
    expect(complete(seed, '<seed:tool_call>\n<function=get_time>\n<parameter=zone>"CET"</parameter>\n</function>\n</seed:tool_call>')).toBe(true);
  });

  it("writes MiniMax-M2's <invoke> calls in their wrapper, one wrapper per call", () => {
    const layout: MinimaxLayout = { afterOpen: '\n', afterName: '\n', between: '\n', beforeInvokeClose: '\n', beforeClose: '\n' };
    const mm = forcedToolCallPattern({ format: 'minimax', layout }, tools, { parallel: true });
    const param = (k: string, v: string) => `<parameter name="${k}">${v}</parameter>`;
    const call = (n: string, ps: string[]) => `<minimax:tool_call>\n<invoke name="${n}">\n${ps.join('\n')}${ps.length ? '\n' : ''}</invoke>\n</minimax:tool_call>`;
    expect(complete(mm, call('get_weather', [param('city', 'New York, <NY>'), param('days', '3')]))).toBe(true);
    expect(complete(mm, call('get_weather', [param('city', 'Rome')]) + '\n' + call('get_time', [param('zone', '"UTC"')]))).toBe(true);
    expect(complete(mm, call('get', []))).toBe(true);
    expect(prefix(mm, call('get_weather', [param('days', '3')]))).toBe(false); // city is required
    expect(prefix(mm, call('get_weather', [param('city', 'Rome'), param('days', 'x')]))).toBe(false);
    const lazy = lazyToolCallPattern({ format: 'minimax', layout }, tools, false)!;
    expect(complete(lazy, `Checking. ${call('get_time', [param('zone', '"CET"')])}`)).toBe(true);
    expect(prefix(lazy, 'Checking. <minimax:tool_call>\n<invoke name="get_time">\n<parameter name="zone">5')).toBe(false);
  });

  it('writes <tool_calls> lists: a JSON list, or one call per line', () => {
    const list = forcedToolCallPattern({ format: 'tool-calls-list', layout: { list: true, ids: false, afterOpen: '', beforeClose: '' } }, tools, { parallel: true });
    expect(complete(list, '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get", "arguments": {}}]</tool_calls>')).toBe(true);
    expect(prefix(list, '<tool_calls>[{"name": "get_weather", "arguments": {"days": 3}')).toBe(false); // city is required
    const lines = forcedToolCallPattern({ format: 'tool-calls-list', layout: { list: false, ids: false, afterOpen: '\n', beforeClose: '\n' } }, tools, { parallel: true });
    expect(complete(lines, '<tool_calls>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n{"name": "get", "arguments": {}}\n</tool_calls>')).toBe(true);
    const one = forcedToolCallPattern({ format: 'tool-calls-list', layout: { list: false, ids: false, afterOpen: '\n', beforeClose: '\n' } }, tools, { parallel: false });
    expect(prefix(one, '<tool_calls>\n{"name": "get", "arguments": {}}\n{')).toBe(false);
    const ids = forcedToolCallPattern({ format: 'tool-calls-list', layout: { list: true, ids: true, afterOpen: '', beforeClose: '' } }, tools, { parallel: false });
    expect(complete(ids, '<tool_calls>[{"name": "get", "arguments": {}, "id": "aB3dE6gH9"}]</tool_calls>')).toBe(true);
  });

  it('masks a vocabulary to the tokens that continue the calls, markers included', () => {
    // A toy vocabulary: single bytes, a few words, a preserved marker token and an end token.
    const words = ['<tool_call>', '\n', '{"', 'name', '": "', 'get', '_time', '", "arguments": ', '{', '"zone"', ': ', '"UTC"', '}', '</tool_call>', 'Sure'];
    const pieces = [...words.map(bytes), ...Array.from({ length: 128 }, (_, b) => Uint8Array.of(b)), new Uint8Array(0)];
    const eos = pieces.length - 1;
    const p = forcedToolCallPattern({ format: 'hermes' }, tools, { name: 'get_time', parallel: false });
    const c = new OutputConstraint(pieces, new Set([eos]), new PatternRecognizer(p), new PatternRecognizer(p));
    const allowed = () => {
      const row = new Float32Array(pieces.length);
      c.mask(row);
      return [...row.keys()].filter((t) => row[t] === 0);
    };
    expect(allowed()).toEqual([0, words.length + '<'.charCodeAt(0)]); // the marker, or its first byte
    for (const w of ['<tool_call>', '\n', '{"', 'name', '": "', 'get', '_time', '", "arguments": ', '{', '"zone"', ': ', '"UTC"', '}', '}', '\n', '</tool_call>']) {
      const t = words.indexOf(w);
      expect(c.allows(t)).toBe(true);
      c.accept(t);
    }
    expect(c.done).toBe(true);
    expect(allowed()).toEqual([eos]);
  });
});

describe('choicePattern (guided_choice)', () => {
  it('holds the output to exactly one of the strings', () => {
    const p = choicePattern(['red', 'green', 'blue', 'red']);
    for (const t of ['red', 'green', 'blue']) expect(complete(p, t)).toBe(true);
    for (const t of ['re', 'gree', 'redd', 'yellow', '']) expect(complete(p, t)).toBe(false);
    expect(prefix(p, 'gr')).toBe(true);
    expect(prefix(p, 'x')).toBe(false);
  });

  it('lets a reasoning model think first when the prompt left <think> open', () => {
    const p = choicePattern(['yes', 'no'], true);
    expect(complete(p, 'hmm, maybe</think>\n\nyes')).toBe(true);
    expect(complete(p, 'yes')).toBe(false);
    expect(prefix(p, 'anything at all')).toBe(true);
  });

  it('refuses strings one of which is a prefix of another, and empty ones', () => {
    expect(() => choicePattern(['a', 'ab'])).toThrow(/output choices: "a" and "ab" cannot be told apart/);
    expect(() => choicePattern([])).toThrow(/at least one/);
    expect(() => choicePattern(['x', ''])).toThrow(/non-empty/);
  });
});

describe('lazyToolCallPattern (strict tools under tool_choice auto)', () => {
  const mayEnd = (p: OutputPattern, text: string) => {
    const r = new PatternRecognizer(p);
    return r.feed(bytes(text)) && r.mayEnd();
  };
  it('lets free text run and end anywhere, and holds a call to the schemas once its marker appears', () => {
    const p = lazyToolCallPattern({ format: 'hermes' }, tools, false)!;
    expect(mayEnd(p, '')).toBe(true);
    expect(mayEnd(p, 'The weather is fine. <tool_ or <b>not</b> a call')).toBe(true);
    const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>';
    expect(complete(p, `Let me look. ${call}`)).toBe(true);
    // Inside a call the schema holds: a bound, a name, the JSON itself.
    expect(prefix(p, 'x <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 0')).toBe(false);
    expect(prefix(p, '<tool_call>\n{"name": "get_wind"')).toBe(false);
    expect(prefix(p, '<tool_call>\n{"name": "get_time", "arguments": {"zone": "PST"')).toBe(false);
    expect(prefix(p, '<tool_call>\nnot json')).toBe(false);
    // Started, the call must be finished before the answer ends; one call without parallel calls.
    expect(mayEnd(p, '<tool_call>\n{"name": "get')).toBe(false);
    expect(prefix(p, `${call}\n<tool_call>`)).toBe(false);
    expect(complete(lazyToolCallPattern({ format: 'hermes' }, tools, true)!, `${call}\n${call}`)).toBe(true);
  });

  it('works for the formats whose calls start with a marker, and not for those without one', () => {
    const ds = lazyToolCallPattern({ format: 'deepseek-v3.1' }, tools, true)!;
    expect(complete(ds, 'Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"zone": "UTC"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')).toBe(true);
    expect(prefix(ds, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"zone": 5')).toBe(false);
    const glm = lazyToolCallPattern({ format: 'glm', layout: GLM47 }, tools, false)!;
    expect(complete(glm, 'ok <tool_call>get_time<arg_key>zone</arg_key><arg_value>"CET"</arg_value></tool_call>')).toBe(true);
    const kimi = lazyToolCallPattern({ format: 'kimi' }, tools, true)!;
    expect(complete(kimi, 'Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{"zone": "UTC"}<|tool_call_end|><|tool_calls_section_end|>')).toBe(true);
    const args = lazyToolCallPattern({ format: 'mistral', layout: { list: false, ids: false } }, tools, true)!;
    expect(complete(args, 'Sure: [TOOL_CALLS]get[ARGS]{}[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}')).toBe(true);
    expect(prefix(args, 'Sure: [TOOL_CALLS]get_time[ARGS]{"zone": "PST"')).toBe(false);
    const list = lazyToolCallPattern({ format: 'mistral', layout: { list: true, gap: '', ids: false } }, tools, true)!;
    expect(complete(list, '[TOOL_CALLS][{"name": "get", "arguments": {}}]')).toBe(true);
    expect(lazyToolCallPattern({ format: 'llama3' }, tools, false)).toBeUndefined();
    expect(lazyToolCallPattern({ format: 'harmony' }, tools, false)).toBeUndefined();
  });
});
