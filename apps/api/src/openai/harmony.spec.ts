import { parseHeader, ReasoningSplitter, splitReasoning } from '@kailstream/engine/reasoning';

import { ToolCallStream } from './tool-call-stream';
import { parseToolCalls } from './tool-calls';

const TOOLS = [{ function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];

// gpt-oss output as the engine renders it: <|end|>, <|return|> and <|call|> are control tokens
// (not rendered), <|channel|>, <|message|>, <|start|>, <|constrain|> are rendered.
const ANSWER = '<|channel|>analysis<|message|>The user says hi. Reply briefly.<|start|>assistant<|channel|>final<|message|>Hello! How can I help?';
const CALL =
  '<|channel|>analysis<|message|>Need weather for Paris.<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}';

/** Splits in chunks of `n` characters through the streaming splitter and the tool-call stream. */
function streamed(text: string, n: number) {
  const r = new ReasoningSplitter(false);
  const tools = new ToolCallStream(TOOLS);
  let reasoning = '';
  let content = '';
  for (let i = 0; i < text.length; i += n) {
    const s = r.push(text.slice(i, i + n));
    reasoning += s.reasoning;
    content += tools.push(s.content);
    tools.deltas();  // as the route does after each piece: calls go out as they are written
  }
  const f = r.finish();
  reasoning += f.reasoning;
  content += tools.push(f.content);
  const end = tools.finish();
  return { reasoning, content: content + end.content, calls: end.calls.map((c) => c.function), cut: end.cut };
}

describe('harmony (gpt-oss) answers', () => {
  it('reads a header: channel and recipient, in the channel part or the role part', () => {
    expect(parseHeader('<|channel|>analysis')).toEqual({ channel: 'analysis', recipient: null });
    expect(parseHeader('<|channel|>commentary to=functions.f <|constrain|>json')).toEqual({ channel: 'commentary', recipient: 'functions.f' });
    expect(parseHeader(' to=functions.g<|channel|>commentary json')).toEqual({ channel: 'commentary', recipient: 'functions.g' });
  });

  it('puts the analysis channel in reasoning and the final channel in content', () => {
    expect(splitReasoning(ANSWER, false)).toEqual({ reasoning: 'The user says hi. Reply briefly.', content: 'Hello! How can I help?' });
    // The same with <|end|> rendered (an engine that shows control tokens), and a stray leading space.
    expect(splitReasoning(` ${ANSWER.replace('<|start|>', '<|end|><|start|>')}`, false)).toEqual({ reasoning: 'The user says hi. Reply briefly.', content: 'Hello! How can I help?' });
    // Two analysis messages are one reasoning text; a preamble (commentary without recipient) is content.
    expect(splitReasoning('<|channel|>analysis<|message|>A.<|start|>assistant<|channel|>analysis<|message|>B.<|start|>assistant<|channel|>commentary<|message|>Checking.', false))
      .toEqual({ reasoning: 'A.\n\nB.', content: 'Checking.' });
  });

  it('turns a message to functions.NAME into a tool call, with the recipient in either part of the header', () => {
    const split = splitReasoning(CALL, false);
    expect(split.reasoning).toBe('Need weather for Paris.');
    const parsed = parseToolCalls(split.content, TOOLS);
    expect(parsed.calls.map((c) => c.function)).toEqual([{ name: 'get_weather', arguments: '{"city":"Paris"}' }]);
    expect(parsed.content).toBe('');
    const role = splitReasoning('<|channel|>analysis<|message|>x<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}', false);
    expect(parseToolCalls(role.content, TOOLS).calls.map((c) => JSON.parse(c.function.arguments))).toEqual([{ city: 'Oslo' }]);
  });

  it('streams the same split and calls in any chunking', () => {
    for (const text of [ANSWER, CALL]) {
      const whole = splitReasoning(text, false);
      const parsed = parseToolCalls(whole.content, TOOLS);
      for (const n of [1, 2, 3, 7, 50, 1000]) {
        const s = streamed(text, n);
        expect(s.reasoning).toBe(whole.reasoning);
        expect(s.content).toBe(parsed.content);
        expect(s.calls).toEqual(parsed.calls.map((c) => c.function));
      }
    }
  });

  it('keeps an answer cut off inside a call as text, marked cut, and a cut-off final as content', () => {
    const cutCall = CALL.slice(0, -6);
    const split = splitReasoning(cutCall, false);
    const parsed = parseToolCalls(split.content, TOOLS);
    expect(parsed.calls).toEqual([]);
    expect(parsed.cut).toBe(true);
    // Streamed, a call goes out whole at its end, so a cut one never went out: it is text.
    const st = streamed(cutCall, 5);
    expect(st.calls).toEqual([]);
    expect(st.content).toBe(split.content);
    expect(splitReasoning(ANSWER.slice(0, -5), false)).toEqual({ reasoning: 'The user says hi. Reply briefly.', content: 'Hello! How can I ' });
    expect(splitReasoning('<|channel|>analysis<|message|>only thinking so f', false)).toEqual({ reasoning: 'only thinking so f', content: '' });
  });

  it('leaves answers of other formats alone', () => {
    expect(splitReasoning('Plain <|channel|> text', false)).toEqual({ reasoning: '', content: 'Plain <|channel|> text' });
    expect(splitReasoning('<think>a</think>b', false)).toEqual({ reasoning: 'a', content: 'b' });
  });
});
