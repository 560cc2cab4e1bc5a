import Fastify, { type FastifyInstance } from 'fastify';
import OpenAI from 'openai';

import { startTestStack, type TestStack } from '../test-stack';
import { fakeScheduler } from './fake-scheduler';
import { registerOpenAiRoutes } from './routes';
import { ToolCallStream, jsonArgsPrefix, type ToolCallDelta } from './tool-call-stream';
import { HERMES_TEMPLATE } from './test-templates';
import { parseToolCalls } from './tool-calls';

const CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>';

describe('parseToolCalls (Hermes format)', () => {
  it('takes the calls out of the text', () => {
    const r = parseToolCalls(`Let me check.\n${CALL}\n${CALL.replace('Paris', 'Oslo')}`);
    expect(r.content).toBe('Let me check.');
    expect(r.calls.map((c) => [c.type, c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['function', 'get_weather', { city: 'Paris', days: 2 }],
      ['function', 'get_weather', { city: 'Oslo', days: 2 }],
    ]);
    expect(new Set(r.calls.map((c) => c.id)).size).toBe(2);
    expect(r.calls[0].id).toMatch(/^call_[0-9a-f]{24}$/);
  });

  it('leaves blocks that are cut off or not JSON in the text', () => {
    for (const text of ['plain answer', '<tool_call>\n{"name": "f", "argu', '<tool_call>not json</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'])
      expect(parseToolCalls(text)).toEqual({ content: text, calls: [], cut: text === '<tool_call>\n{"name": "f", "argu' });
    // A call before one the output cut off is taken; the answer says it was cut.
    const cut = parseToolCalls('<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "argu');
    expect([cut.calls.map((c) => c.function.name), cut.content, cut.cut]).toEqual([['f'], '<tool_call>{"name": "g", "argu', true]);
  });

  it('takes arguments written as a string as they are', () => {
    expect(parseToolCalls('<tool_call>{"name":"f","arguments":"{\\"a\\":1}"}</tool_call>').calls[0].function.arguments).toBe('{"a":1}');
  });
});

describe('parseToolCalls (GLM and DeepSeek formats)', () => {
  const defs = [{ function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' }, code: { type: 'string' } } } } }];

  it('reads GLM-4.5 key/value calls, a value JSON unless the schema says string', () => {
    const text = 'Looking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n<arg_key>code</arg_key>\n<arg_value>75</arg_value>\n</tool_call>';
    const r = parseToolCalls(text, defs);
    expect(r.content).toBe('Looking.');
    expect(r.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: 'Paris', days: 2, code: '75' }]]);
    expect(parseToolCalls('<tool_call>ping</tool_call>').calls.map((c) => [c.function.name, c.function.arguments])).toEqual([['ping', '{}']]);
    expect(parseToolCalls('<tool_call>f\n<arg_key>a</arg_key> stray</tool_call>').calls).toEqual([]);
  });

  it('reads DeepSeek V3.1 and V3/R1 calls and drops their wrappers', () => {
    const v31 = 'Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>';
    const r = parseToolCalls(v31);
    expect(r.content).toBe('Sure.');
    expect(r.calls.map((c) => JSON.parse(c.function.arguments).city)).toEqual(['Paris', 'Oslo']);
    const v3 = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>';
    const r3 = parseToolCalls(v3);
    expect(r3.content).toBe('');
    expect(r3.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: 'Rome' }]]);
  });

  it("reads Qwen3-Coder's <function=…><parameter=…> calls and Seed-OSS's, typed by the schema", () => {
    const tools = [{ function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }];
    const text = 'Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>';
    const r = parseToolCalls(text, tools);
    expect(r.content).toBe('Let me check.');
    expect(r.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: '12', days: 3 }]]);
    const seed = parseToolCalls('<seed:tool_call>\n<function=f>\n<parameter=q>a\nb</parameter>\n</function>\n</seed:tool_call>');
    expect(seed.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['f', { q: 'a\nb' }]]);
    // Text between the parameters is not a call.
    expect(parseToolCalls('<tool_call><function=f>hello<parameter=q>x</parameter></function></tool_call>').calls).toEqual([]);
  });

  it("reads MiniMax-M2's <invoke> calls in their wrapper, typed by the schema", () => {
    const tools = [{ function: { name: 'get_weather', parameters: { properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }];
    const text = 'Checking.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">12</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n<invoke name="f">\n</invoke>\n</minimax:tool_call>';
    const r = parseToolCalls(text, tools);
    expect(r.content).toBe('Checking.');
    expect(r.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: '12', days: 3 }], ['f', {}]]);
    // Something else inside an invoke keeps it text.
    expect(parseToolCalls('<invoke name="f">hello<parameter name="q">x</parameter></invoke>').calls).toEqual([]);
  });

  it('reads <tool_calls> lists: a JSON list (Apriel, Hunyuan) or one call per line (MiniMax-M1)', () => {
    const list = parseToolCalls('Sure.\n<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "f", "arguments": {}}]</tool_calls>');
    expect(list.content).toBe('Sure.');
    expect(list.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: 'Oslo' }], ['f', {}]]);
    const lines = parseToolCalls('<tool_calls>\n{"name": "a", "arguments": {"x": 1}}\n{"name": "b", "arguments": {"y": "z"}}\n</tool_calls><end_of_sentence>');
    expect(lines.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['a', { x: 1 }], ['b', { y: 'z' }]]);
    expect(lines.content).toBe('<end_of_sentence>');
    expect(parseToolCalls('<tool_calls>[{"name": "a", "arguments": {}, "id": "call_abc123"}]</tool_calls>').calls[0].id).toBe('call_abc123');
    // Not all of it calls, or cut off: text.
    expect(parseToolCalls('<tool_calls>[{"name": "a"}, 3]</tool_calls>').calls).toEqual([]);
    const cut = parseToolCalls('<tool_calls>[{"name": "a", "argu');
    expect([cut.calls, cut.cut]).toEqual([[], true]);
  });

  it("reads Granite 3.x's <|tool_call|> JSON list, to the end of the answer", () => {
    const r = parseToolCalls('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "f", "arguments": {}}]');
    expect([r.content, r.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])]).toEqual(['', [['get_weather', { city: 'Oslo' }], ['f', {}]]]);
    // Anything but a list of calls after the marker stays text.
    expect(parseToolCalls('<|tool_call|>[{"name": "f"}] and more').calls).toEqual([]);
    expect(parseToolCalls('<|tool_call|>{"name": "f", "arguments": {}}').calls).toEqual([]);
  });

  it("reads Mistral's calls: a JSON list, or name[ARGS] calls, ids kept", () => {
    const list = parseToolCalls('Sure.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1B2c3D4e"}, {"name": "f", "arguments": {}}]');
    expect(list.content).toBe('Sure.');
    expect(list.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments), c.id.startsWith('call_') ? 'generated' : c.id])).toEqual([
      ['get_weather', { city: 'Paris' }, 'a1B2c3D4e'],
      ['f', {}, 'generated'],
    ]);
    const calls = parseToolCalls('[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]f[CALL_ID]xYz123456[ARGS]{}');
    expect(calls.calls.map((c) => [c.function.name, c.function.arguments])).toEqual([['get_weather', '{"city":"Oslo"}'], ['f', '{}']]);
    expect(calls.calls[1].id).toBe('xYz123456');
    // Anything that does not parse stays text.
    expect(parseToolCalls('[TOOL_CALLS]get_weather[ARGS]{"city": ').calls).toEqual([]);
    const s = new ToolCallStream();
    expect(s.push('Ok.[TOOL_') + s.push('CALLS]f[ARGS]{}')).toBe('Ok.');
    expect(s.finish().calls.map((c) => c.function.name)).toEqual(['f']);
  });

  it("reads Kimi K2's calls, keeping each header as the call's id", () => {
    const text =
      'Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>' +
      '<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>';
    const r = parseToolCalls(text);
    expect(r.content).toBe('Checking.');
    expect(r.calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['functions.get_weather:0', 'get_weather', { city: 'Paris' }],
      ['functions.get_time:1', 'get_time', {}],
    ]);
    const s = new ToolCallStream();
    let out = '';
    for (const piece of ['Ok', '.<|tool_calls_sec', 'tion_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}', '<|tool_call_end|><|tool_calls_section_end|>']) out += s.push(piece);
    expect(out).toBe('Ok.');
    expect(s.finish().calls.map((c) => c.function.name)).toEqual(['f']);
  });
});

describe('parseToolCalls (Llama 3.x format)', () => {
  const defs = [{ function: { name: 'get_weather' } }];
  it('takes a whole answer that is one JSON call to a declared tool, python tag or not', () => {
    for (const text of ['{"name": "get_weather", "parameters": {"city": "Paris"}}', ' <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}\n']) {
      const r = parseToolCalls(text, defs);
      expect(r.content).toBe('');
      expect(r.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['get_weather', { city: 'Paris' }]]);
    }
  });

  it('leaves JSON alone that names no declared tool, or is not the whole answer, or comes without tools', () => {
    for (const text of ['{"name": "Ada", "parameters": {}}', 'Here: {"name": "get_weather", "parameters": {}}', '{"city": "Paris"}'])
      expect(parseToolCalls(text, defs).calls).toEqual([]);
    expect(parseToolCalls('{"name": "get_weather", "parameters": {}}').calls).toEqual([]);
  });

  it('streams a JSON-looking answer only at the end when tools are given', () => {
    const s = new ToolCallStream(defs);
    let out = '';
    for (const piece of ['\n', '{"name": "get_', 'weather", "parameters": {"city"', ': "Oslo"}}']) out += s.push(piece);
    expect(out).toBe('');
    const end = s.finish();
    expect(end.calls.map((c) => JSON.parse(c.function.arguments).city)).toEqual(['Oslo']);
    const plain = new ToolCallStream(defs);
    expect(plain.push('\nHello') + plain.push(' there')).toBe('\nHello there');
    expect(plain.finish()).toEqual({ content: '', calls: [], deltas: [], cut: false });
    const data = new ToolCallStream(defs);
    expect(data.push('{"not": "a call"}')).toBe('');
    expect(data.finish()).toEqual({ content: '{"not": "a call"}', calls: [], deltas: [], cut: false });
  });
});

describe('ToolCallStream', () => {
  it('holds back DeepSeek markers too', () => {
    const s = new ToolCallStream();
    let out = '';
    for (const piece of ['Ok', '.<｜tool', '▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}', '<｜tool▁call▁end｜><｜tool▁calls▁end｜>']) out += s.push(piece);
    expect(out).toBe('Ok.');
    expect(s.finish().calls.map((c) => c.function.name)).toEqual(['f']);
  });

  it('streams text up to a call, in any chunking, and gives the calls at the end', () => {
    const text = `Sure <3, checking.\n${CALL}`;
    for (let seed = 1; seed <= 50; seed++) {
      const s = new ToolCallStream();
      let out = '';
      let at = 0;
      let r = seed;
      while (at < text.length) {
        r = (r * 1103515245 + 12345) % 2147483648;
        const n = 1 + (r % 7);
        out += s.push(text.slice(at, at + n));
        at += n;
      }
      const end = s.finish();
      expect(out + end.content).toBe('Sure <3, checking.\n');
      expect(end.calls.map((c) => c.function.name)).toEqual(['get_weather']);
    }
  });

  it('gives back held text that did not become a call', () => {
    const s = new ToolCallStream();
    expect(s.push('a <tool_ca')).toBe('a ');
    expect(s.push('t>')).toBe('<tool_cat>');
    expect(s.push('<tool_call>{"name": "f"')).toBe('');
    expect(s.finish()).toEqual({ content: '<tool_call>{"name": "f"', calls: [], deltas: [], cut: false });
  });
});

describe('ToolCallStream: calls as they are written', () => {
  const defs = [
    { function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } } },
    { function: { name: 'write_file', parameters: { type: 'object', properties: { path: { type: 'string' }, content: { type: 'string' }, mode: { type: 'integer' } } } } },
  ];
  const body = 'line one \\"quoted\\" \\\\ back\\nline two é 🙂\\n'.repeat(3);
  const content = JSON.parse(`"${body}"`) as string;
  // One text per format: the same two calls.
  const formats: [string, string][] = [
    ['hermes', `Writing.<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "${body}", "mode": 420}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>`],
    ['glm', `Writing.<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n<arg_key>content</arg_key>\n<arg_value>${content}</arg_value>\n<arg_key>mode</arg_key>\n<arg_value>420</arg_value>\n</tool_call><tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>`],
    ['xml', `Writing.\n<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\n${content}\n</parameter>\n<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>`],
    ['deepseek-v3.1', `Writing.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{"path": "a.txt", "content": "${body}", "mode": 420}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Oslo", "days": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`],
    ['deepseek-r1', `Writing.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n\`\`\`json\n{"path": "a.txt", "content": "${body}", "mode": 420}\n\`\`\`<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n\`\`\`json\n{"city": "Oslo", "days": 2}\n\`\`\`<｜tool▁call▁end｜><｜tool▁calls▁end｜>`],
    ['kimi', `Writing.<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>{"path": "a.txt", "content": "${body}", "mode": 420}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Oslo", "days": 2}<|tool_call_end|><|tool_calls_section_end|>`],
    ['mistral', `Writing.[TOOL_CALLS]write_file[ARGS]{"path": "a.txt", "content": "${body}", "mode": 420}[TOOL_CALLS]get_weather[CALL_ID]aB3dE6gH9[ARGS]{"city": "Oslo", "days": 2}`],
    ['minimax', `Writing.\n<minimax:tool_call>\n<invoke name="write_file">\n<parameter name="path">a.txt</parameter>\n<parameter name="content">${content}</parameter>\n<parameter name="mode">420</parameter>\n</invoke>\n<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>\n<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>`],
  ];
  const expected = [
    ['write_file', { path: 'a.txt', content, mode: 420 }],
    ['get_weather', { city: 'Oslo', days: 2 }],
  ];

  /** Feeds `text` in pieces of 1-7 characters; returns the content and the calls put together from the deltas. */
  const feed = (text: string, seed: number, tools = defs) => {
    const s = new ToolCallStream(tools);
    let out = '';
    const calls: { id?: string; name?: string; arguments: string; pieces: number; before: number }[] = [];
    const take = (ds: ToolCallDelta[], ended: boolean) => {
      for (const d of ds) {
        if (!calls[d.index]) {
          // The first delta of a call carries its id, type and name; the later ones only arguments.
          expect(d.id && d.type === 'function' && d.function.name).toBeTruthy();
          calls[d.index] = { id: d.id, name: d.function.name, arguments: '', pieces: 0, before: 0 };
        } else expect(d.id === undefined && d.function.name === undefined).toBe(true);
        calls[d.index].arguments += d.function.arguments;
        calls[d.index].pieces++;
        if (!ended) calls[d.index].before += d.function.arguments.length;
      }
    };
    let r = seed;
    for (let at = 0; at < text.length; ) {
      r = (r * 1103515245 + 12345) % 2147483648;
      const n = 1 + (r % 7);
      out += s.push(text.slice(at, at + n));
      take(s.deltas(), false);
      at += n;
    }
    const end = s.finish();
    take(end.deltas, true);
    return { content: out + end.content, calls, end };
  };

  it.each(formats)('%s: ids and names first, then the arguments in pieces while they are written', (_name, text) => {
    for (let seed = 1; seed <= 20; seed++) {
      const { content: text_, calls, end } = feed(text, seed);
      expect(text_.trim()).toBe('Writing.');
      expect(calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual(expected);
      // The long call's arguments went out while it was being written, not at the end.
      expect(calls[0].pieces).toBeGreaterThan(10);
      expect(calls[0].before).toBe(calls[0].arguments.length);
      // finish() lists the same calls, with the ids that went out.
      expect(end.calls.map((c) => [c.id, c.function.name, c.function.arguments])).toEqual(calls.map((c) => [c.id, c.name, c.arguments]));
      // The same text whole gives the same calls.
      expect(parseToolCalls(text, defs).calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual(expected);
    }
  });

  it('holds a <tool_calls> list and gives its calls whole at the end, in any chunking', () => {
    const text = 'Checking.\n<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}, {"name": "write_file", "arguments": {"path": "a.txt"}}]</tool_calls>';
    for (let seed = 1; seed <= 10; seed++) {
      const { content: text_, calls } = feed(text, seed);
      expect(text_.trim()).toBe('Checking.');
      expect(calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([['get_weather', { city: 'Oslo', days: 2 }], ['write_file', { path: 'a.txt' }]]);
    }
    // A list that does not parse comes back as text.
    expect(feed('Hi <tool_calls>[nope]</tool_calls> bye', 3).content).toBe('Hi <tool_calls>[nope]</tool_calls> bye');
  });

  it("holds Granite's <|tool_call|> list and gives its calls whole at the end", () => {
    const text = 'Sure.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]';
    for (let seed = 1; seed <= 5; seed++) {
      const { content: text_, calls } = feed(text, seed);
      expect(text_.trim()).toBe('Sure.');
      expect(calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([['get_weather', { city: 'Oslo', days: 2 }]]);
    }
  });

  it('keeps the model ids (Kimi headers, Mistral CALL_IDs)', () => {
    expect(feed(formats[5][1], 3).calls.map((c) => c.id)).toEqual(['functions.write_file:0', 'functions.get_weather:1']);
    const m = feed(formats[6][1], 3).calls.map((c) => c.id);
    expect(m[0]).toMatch(/^call_/);
    expect(m[1]).toBe('aB3dE6gH9');
  });

  it('streams a Llama 3.x whole-answer call and a Mistral list (the list as whole calls)', () => {
    const llama = feed(`{"name": "write_file", "parameters": {"path": "a.txt", "content": "${body}", "mode": 420}}`, 5);
    expect(llama.content).toBe('');
    expect(llama.calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([expected[0]]);
    expect(llama.calls[0].pieces).toBeGreaterThan(10);
    const list = feed('Ok.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}, "id": "a1B2c3D4e"}]', 5);
    expect(list.content).toBe('Ok.');
    expect(list.calls.map((c) => [c.id, c.name, JSON.parse(c.arguments)])).toEqual([['a1B2c3D4e', ...expected[1]]]);
  });

  it('leaves malformed blocks that close before going out as text, and keeps an announced call that is cut off', () => {
    const bad = feed('Hm.<tool_call>{"name": "f", oops}</tool_call> done', 2);
    expect(bad.calls).toEqual([]);
    expect(bad.content).toBe('Hm.<tool_call>{"name": "f", oops}</tool_call> done');
    const cut = feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os', 2);
    expect(cut.calls.map((c) => [c.name, c.arguments])).toEqual([['get_weather', '{"city":"Os']]);
    expect(cut.end.calls.length).toBe(1);
    expect(cut.end.cut).toBe(true);
    expect(feed(formats[0][1], 1).end.cut).toBe(false);
    // An answer that opens with JSON data and then calls is read whole at the end.
    const late = feed('{"a": 1} then <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>', 4);
    expect(late.content).toBe('{"a": 1} then');
    expect(late.calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([['get_weather', { city: 'Oslo' }]]);
  });

  it('never throws and only ever extends what went out, on random text made of markers and JSON pieces', () => {
    const pieces = ['<tool_call>', '</tool_call>', '{"name": "get_weather", "arguments": ', '{"city": "Os', 'lo"}', '}', '"', '\\', ' ', '\n', 'text',
      '<function=write_file>', '<parameter=content>', '</parameter>', '</function>', 'get_weather', '<arg_key>', 'city</arg_key>', '<arg_value>', 'Rome</arg_value>',
      '<｜tool▁call▁begin｜>', '<｜tool▁sep｜>', '<｜tool▁call▁end｜>', '<|tool_call_begin|>', 'functions.f:0', '<|tool_call_argument_begin|>', '<|tool_call_end|>',
      '[TOOL_CALLS]', 'f[ARGS]', '[CALL_ID]', '[', ']', ',', '{', '<|python_tag|>', '\u00e9', '🙂', '<think>',
      '<minimax:tool_call>', '</minimax:tool_call>', '<invoke name="', 'write_file">', '<parameter name="content">', '</invoke>', '<tool_calls>', '</tool_calls>', '<|tool_call|>'];
    let r = 7;
    const rand = (n: number) => ((r = (r * 1103515245 + 12345) % 2147483648), r % n);
    for (let round = 0; round < 400; round++) {
      let text = '';
      for (let i = rand(30); i >= 0; i--) text += pieces[rand(pieces.length)];
      const s = new ToolCallStream(defs);
      const sent: string[] = [];
      const take = (ds: ToolCallDelta[]) => {
        for (const d of ds) sent[d.index] = (sent[d.index] ?? '') + d.function.arguments;
      };
      for (let at = 0; at < text.length; ) {
        const n = 1 + rand(9);
        s.push(text.slice(at, at + n));
        take(s.deltas());
        at += n;
      }
      const end = s.finish();
      take(end.deltas);
      // The calls' final arguments are exactly what went out, piece by piece.
      expect(end.calls.map((c) => c.function.arguments)).toEqual(sent.slice(0, end.calls.length));
      expect(sent.length).toBe(end.calls.length);
    }
  });

  it('reads a JSON value prefix without the whitespace between tokens, and a string argument as its content', () => {
    expect(jsonArgsPrefix(' {"a" : [1, 2 ,{"b":"x y"}] } trailing')).toBe('{"a":[1,2,{"b":"x y"}]}');
    expect(jsonArgsPrefix('{"a" : "x \\\\"')).toBe('{"a":"x \\\\"');
    expect(jsonArgsPrefix('"{\\"a\\": 1}"')).toBe('{"a": 1}');
    expect(jsonArgsPrefix('"{\\"a\\": \\u00e9\\u')).toBe('{"a": é');
    // Every prefix's reading is a prefix of the whole's.
    const whole = '{"k": "v \\" \\u00e9", "n": [1.5e3, true, null]}';
    for (let i = 0; i <= whole.length; i++) expect(jsonArgsPrefix(whole).startsWith(jsonArgsPrefix(whole.slice(0, i)))).toBe(true);
  });
});

const tools: OpenAI.Chat.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } },
];

// The route's side of tool calls, against a scheduler that answers a fixed text (the engine's
// side, the template, is tested below with a real model).
describe('chat completions with tools: the answer', () => {
  let app: FastifyInstance;
  let client: OpenAI;
  const serve = async (text: string) => {
    app = Fastify();
    registerOpenAiRoutes(app, { scheduler: () => fakeScheduler(text), tenantOf: () => 't' });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  };
  afterEach(() => app?.close());

  it('returns the calls as tool_calls with finish_reason tool_calls, streamed or not', async () => {
    await serve(`Checking.${CALL}`);
    const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Weather?' }], tools });
    expect(r.choices[0].finish_reason).toBe('tool_calls');
    expect(r.choices[0].message.content).toBe('Checking.');
    const call = r.choices[0].message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris', days: 2 });

    const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Weather?' }], tools, stream: true });
    let content = '';
    const calls: { name?: string; arguments?: string }[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta;
      content += d?.content ?? '';
      // As clients do: the first delta of a call names it, the arguments come in pieces.
      for (const t of d?.tool_calls ?? []) {
        calls[t.index] ??= { name: t.function?.name, arguments: '' };
        calls[t.index].arguments += t.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(content).toBe('Checking.');
    expect(calls.map((c) => [c.name, JSON.parse(c.arguments!)])).toEqual([['get_weather', { city: 'Paris', days: 2 }]]);
    expect(finish).toBe('tool_calls');
  });

  it('leaves the text alone without tools, or with tool_choice none', async () => {
    await serve(`Checking.${CALL}`);
    const plain = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Weather?' }] });
    expect(plain.choices[0].message.content).toBe(`Checking.${CALL}`);
    expect(plain.choices[0].finish_reason).toBe('stop');
    const none = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Weather?' }], tools, tool_choice: 'none' });
    expect(none.choices[0].message.content).toBe(`Checking.${CALL}`);
  });

  it('refuses a tool_choice that requires a call without tools, or names a function not among them, with a 400', async () => {
    await serve('x');
    for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }] as const)
      await expect(client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], tool_choice })).rejects.toMatchObject({
        status: 400,
        message: expect.stringMatching(/tool_choice.*needs tools/),
      });
    await expect(
      client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], tools, tool_choice: { type: 'function', function: { name: 'get_wind' } } }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringMatching(/'get_wind', which is not among the tools/) });
  });
});

// GLM-4.5/4.6's way of writing calls (key/value pairs, raw text for strings).
const GLM_TEMPLATE = [
  "{%- if tools %}<|system|>\nYou may call functions:\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\nWrite <tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n</tool_call>{%- endif %}",
  "{%- for m in messages %}",
  "{%- if m.role == 'assistant' and m.tool_calls %}<|assistant|>{%- for tc in m.tool_calls %}\n<tool_call>{{ tc.function.name }}{%- for k, v in tc.function.arguments.items() %}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v | tojson if v is not string else v }}</arg_value>{%- endfor %}\n</tool_call>{%- endfor %}",
  "{%- else %}<|{{ m.role }}|>\n{{ m.content }}{%- endif %}",
  '{%- endfor %}',
  "{%- if add_generation_prompt %}<|assistant|>{%- endif %}",
].join('');

// Qwen3-Coder's way (XML-style parameters, values raw or JSON).
const CODER_TEMPLATE = [
  '{%- if tools %}<|im_start|>system\n<tools>{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools><|im_end|>\n{%- endif %}',
  "{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant{%- for tc in m.tool_calls %}",
  "{{ '\\n<tool_call>\\n<function=' + tc.function.name + '>\\n' }}{%- for k, v in tc.function.arguments.items() %}{{ '<parameter=' + k + '>\\n' + (v | tojson if v is not string else v) + '\\n</parameter>\\n' }}{%- endfor %}{{ '</function>\\n</tool_call>' }}{%- endfor %}<|im_end|>\n",
  "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}",
].join('');

// Mistral Nemo's way (a JSON list of calls with 9-character ids after [TOOL_CALLS]).
const MISTRAL_TEMPLATE = [
  '{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}',
  "{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]",
  "{%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS][{%- for tc in m.tool_calls %}{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments | tojson }}, \"id\": \"{{ tc.id }}\"}{%- if not loop.last %}, {% endif %}{%- endfor %}]</s>",
  "{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{%- else %}{{ m.content }}</s>{%- endif %}{%- endfor %}",
].join('');

// gpt-oss's way (harmony: a message to functions.NAME, the recipient in the role part of the header).
const HARMONY_TEMPLATE = [
  '{%- if tools %}<|start|>developer<|message|># Tools{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}<|end|>{%- endif %}',
  "{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}<|start|>assistant to=functions.{{ m.tool_calls[0].function.name }}<|channel|>commentary json<|message|>{{ m.tool_calls[0].function.arguments | tojson }}<|call|>",
  "{%- elif m.role == 'tool' %}<|start|>functions.f to=assistant<|channel|>commentary<|message|>{{ m.content }}<|end|>",
  "{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif %}{%- endfor %}{%- if add_generation_prompt %}<|start|>assistant{%- endif %}",
].join('');

describe('chat completions with tools: the prompt (real engine)', () => {
  let stack: TestStack;
  let client: OpenAI;

  beforeAll(async () => {
    stack = await startTestStack(
      [
        // 1024: the tools' definitions take about 420 of this vocabulary's tokens.
        { id: 'hermes', template: HERMES_TEMPLATE, contextLength: 1024 },
        { id: 'chatml', contextLength: 512 },
        { id: 'coder', template: CODER_TEMPLATE, contextLength: 1024 },
        { id: 'mistral', template: MISTRAL_TEMPLATE, contextLength: 1024 },
        { id: 'harmony', template: HARMONY_TEMPLATE, contextLength: 1024 },
        { id: 'glm', template: GLM_TEMPLATE, contextLength: 1024 },
        // As Qwen3's and Granite's do, this one fails on the null content of a tool-calling turn.
        { id: 'trim', template: HERMES_TEMPLATE.replace("<|im_start|>assistant\n{%- for tc", "<|im_start|>assistant\n{{ message.content | trim }}{%- for tc"), contextLength: 512 },
      ],
      { defaultContext: 512, scheduler: { slotsPerEngine: 4, maxQueued: 8, maxQueuedPerTenant: 8, probeIntervalMs: 500 }, api: { readyMaxAgeS: 5 } },
    );
    client = new OpenAI({ baseURL: `${stack.api.url}/v1`, apiKey: 'none', maxRetries: 0 });
  }, 60_000);
  afterAll(() => stack?.close());

  it('shows the tools and the earlier calls and answers to the model through its template', async () => {
    const ask = (extra: Partial<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming>, messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }]) =>
      client.chat.completions.create({ model: 'hermes', messages, max_tokens: 1, temperature: 0, ...extra }).then((r) => r.usage!.prompt_tokens);
    const bare = await ask({});
    const withTools = await ask({ tools });
    const toolsText = JSON.stringify(tools[0]).length;
    expect(withTools - bare).toBeGreaterThan(toolsText / 8); // the definition's text is in the prompt
    expect(await ask({ tools, tool_choice: 'none' })).toBe(bare);
    // A second turn: the call and the tool's answer are rendered too.
    const turn2 = await ask({ tools }, [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    ]);
    expect(turn2).toBeGreaterThan(withTools + 10);
    // A template that needs the content to be a string gets '' for the call's turn.
    const trimmed = await client.chat.completions.create({ model: 'trim', max_tokens: 1, tools, messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    ] });
    expect(trimmed.usage!.prompt_tokens).toBeGreaterThan(withTools + 10);
  });

  it("holds the answer to calls of the tools with tool_choice 'required' or a named function (constrained decoding)", async () => {
    // Random weights write anything; the answer must still be calls in the template's format.
    const forced: OpenAI.Chat.ChatCompletionTool[] = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] }, metric: { type: 'boolean' } }, required: ['city', 'metric'] } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] } } },
    ];
    const base = { model: 'hermes', messages: [{ role: 'user' as const, content: 'Weather in Paris?' }], tools: forced, max_tokens: 300, temperature: 1 };
    const check = (r: OpenAI.Chat.ChatCompletion, names: string[]) => {
      const c = r.choices[0];
      expect(c.finish_reason).toBe('tool_calls');
      expect(c.message.content ?? '').toBe('');
      expect(c.message.tool_calls!.length).toBeGreaterThan(0);
      for (const t of c.message.tool_calls as OpenAI.Chat.ChatCompletionMessageFunctionToolCall[]) {
        expect(names).toContain(t.function.name);
        const args = JSON.parse(t.function.arguments);
        if (t.function.name === 'get_weather') expect([['Paris', 'Rome'].includes(args.city), typeof args.metric]).toEqual([true, 'boolean']);
        else expect(['UTC', 'CET']).toContain(args.zone);
      }
      return c.message.tool_calls!.length;
    };
    let calls = 0;
    // GLM's format: the city comes back as the raw text of an enum member, the flag as JSON.
    // (one call: a random model's lists of calls can run past max_tokens)
    for (const seed of [1, 2]) check(await client.chat.completions.create({ ...base, model: 'glm', seed, tool_choice: 'required', parallel_tool_calls: false }), ['get_weather', 'get_time']);
    // gpt-oss's harmony message to functions.NAME (the reasoning splitter takes it as a call).
    for (const seed of [1, 2]) check(await client.chat.completions.create({ ...base, model: 'harmony', seed, tool_choice: 'required' }), ['get_weather', 'get_time']);
    // Qwen3-Coder's XML-style parameters.
    for (const seed of [1, 2]) check(await client.chat.completions.create({ ...base, model: 'coder', seed, tool_choice: 'required', parallel_tool_calls: false }), ['get_weather', 'get_time']);
    // Mistral's: the calls carry the 9-character ids the model wrote (one call: a random model's
    // lists of calls run past max_tokens).
    for (const seed of [1, 2]) {
      const r = await client.chat.completions.create({ ...base, model: 'mistral', seed, tool_choice: 'required', parallel_tool_calls: false });
      expect(check(r, ['get_weather', 'get_time'])).toBe(1);
      for (const t of r.choices[0].message.tool_calls!) expect(t.id).toMatch(/^[A-Za-z0-9]{9}$/);
    }
    for (const seed of [1, 2, 3]) {
      calls += check(await client.chat.completions.create({ ...base, seed, tool_choice: 'required' }), ['get_weather', 'get_time']);
      check(await client.chat.completions.create({ ...base, seed, tool_choice: { type: 'function', function: { name: 'get_time' } } }), ['get_time']);
      expect(check(await client.chat.completions.create({ ...base, seed, tool_choice: 'required', parallel_tool_calls: false }), ['get_weather', 'get_time'])).toBe(1);
    }
    expect(calls).toBeGreaterThanOrEqual(3);
    // Streamed: the same calls as the same seed's answer in one piece.
    const whole = await client.chat.completions.create({ ...base, seed: 7, tool_choice: 'required' });
    const stream = await client.chat.completions.create({ ...base, seed: 7, tool_choice: 'required', stream: true });
    const streamed: { name?: string; arguments?: string }[] = [];
    for await (const chunk of stream)
      for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) {
        streamed[t.index] ??= { name: t.function?.name, arguments: '' };
        streamed[t.index].arguments += t.function?.arguments ?? '';
      }
    expect(streamed).toEqual((whole.choices[0].message.tool_calls as OpenAI.Chat.ChatCompletionMessageFunctionToolCall[]).map((t) => ({ name: t.function.name, arguments: t.function.arguments })));
    // Unforced, the same requests are text.
    const free = await client.chat.completions.create({ ...base, seed: 1, max_tokens: 20 });
    expect(free.choices[0].message.tool_calls ?? []).toEqual([]);
    // About 20 constrained generations: 2.7 s on an idle 2-core VM, over 5 s on a busy one.
  }, 60_000);

  it('lets strict tools under tool_choice auto answer in free text (a call is held only once its marker comes: tool-call-grammar.spec)', async () => {
    const strict: OpenAI.Chat.ChatCompletionTool[] = [
      { type: 'function', function: { name: 'get_weather', strict: true, parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false } } },
    ];
    const messages = [{ role: 'user' as const, content: 'Weather in Paris?' }];
    // `strict` is the engine's: the model sees the tool without it (as llama.cpp shows tools).
    const shown = await stack.post('/apply-template', { model: 'hermes', messages, tools: strict });
    expect(shown.body.prompt).toContain('get_weather');
    expect(shown.body.prompt).not.toContain('strict');
    // No call started: free text (which may end anywhere).
    for (const seed of [1, 2]) {
      const a = await client.chat.completions.create({ model: 'hermes', messages, tools: strict, max_tokens: 24, temperature: 1, seed });
      expect(['stop', 'length']).toContain(a.choices[0].finish_reason);
      expect(a.choices[0].message.tool_calls ?? []).toEqual([]);
    }
  }, 60_000);

  it("answers 400 when the model's template cannot show tools", async () => {
    await expect(client.chat.completions.create({ model: 'chatml', messages: [{ role: 'user', content: 'x' }], tools, max_tokens: 1 })).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/chat template of model 'chatml' does not show tools/),
    });
  });
});
