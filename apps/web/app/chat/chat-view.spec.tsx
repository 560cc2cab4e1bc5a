import { renderToString } from 'react-dom/server';

import { SseParser, streamTiming } from '../_lib/sse';
import { chatRequest, DEFAULT_SAMPLING, TimingLine } from './chat-view';

describe('chat playground parts', () => {
  it('parses server-sent events split anywhere, and stops at [DONE]', () => {
    const p = new SseParser();
    const stream = 'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\ndata: {"choices":[{"delta":{"content":"lo"}}]}\r\n\r\n: comment\n\ndata: [DONE]\n\n';
    const got: unknown[] = [];
    for (let i = 0; i < stream.length; i += 7) got.push(...p.push(stream.slice(i, i + 7)));
    expect(got).toEqual([{ choices: [{ delta: { content: 'Hel' } }] }, { choices: [{ delta: { content: 'lo' } }] }]);
    expect(p.done).toBe(true);
    expect(() => new SseParser().push('data: {oops\n\n')).toThrow(/not JSON/);
  });

  it('measures TTFT from the request and tokens/s after the first token', () => {
    expect(streamTiming(1000, 1250, 2250, 11)).toEqual({ ttftMs: 250, tokensPerSecond: 10, completionTokens: 11, totalMs: 1250 });
    expect(streamTiming(0, null, 50, 0)).toMatchObject({ ttftMs: null, tokensPerSecond: null });
    const html = renderToString(<TimingLine t={streamTiming(1000, 1250, 2250, 11)} />);
    expect(html).toContain('TTFT <!-- -->250 ms');
    expect(html).toContain('10.0<!-- --> tokens/s');
  });

  it('sends the model and sampling settings; the seed only when given', () => {
    const msgs = [{ role: 'user' as const, content: 'hi' }];
    expect(chatRequest('tiny', msgs, DEFAULT_SAMPLING)).toEqual({ model: 'tiny', messages: msgs, temperature: 0.7, top_p: 0.95, max_tokens: 256 });
    expect(chatRequest('tiny', msgs, { ...DEFAULT_SAMPLING, seed: '42' }).seed).toBe(42);
    // The answer's form: JSON mode, or a GBNF grammar (llama-server's field).
    expect(chatRequest('tiny', msgs, { ...DEFAULT_SAMPLING, format: 'json' }).response_format).toEqual({ type: 'json_object' });
    expect(chatRequest('tiny', msgs, { ...DEFAULT_SAMPLING, format: 'grammar', grammar: 'root ::= "a"' }).grammar).toBe('root ::= "a"');
    expect(chatRequest('tiny', msgs, { ...DEFAULT_SAMPLING, format: 'grammar', grammar: '  ' })).not.toHaveProperty('grammar');
    expect(chatRequest('tiny', msgs, DEFAULT_SAMPLING)).not.toHaveProperty('grammar');
  });
});
