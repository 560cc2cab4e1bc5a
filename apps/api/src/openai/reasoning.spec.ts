import Fastify, { type FastifyInstance } from 'fastify';
import OpenAI from 'openai';

import { fakeScheduler } from './fake-scheduler';
import { registerOpenAiRoutes } from './routes';

describe('chat completions: reasoning_content', () => {
  let app: FastifyInstance;
  let client: OpenAI;
  const serve = async (text: string, reasoningOpen = false, reasoningFormat?: 'none' | 'auto' | 'deepseek') => {
    app = Fastify();
    registerOpenAiRoutes(app, { scheduler: () => fakeScheduler(text, { reasoningOpen }), tenantOf: () => 't', reasoningFormat });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  };
  afterEach(() => app?.close());
  const ask = (extra: Record<string, unknown> = {}) => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], ...extra } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
  const askStream = async (extra: Record<string, unknown> = {}) => {
    const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true, ...extra } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      reasoning += d?.reasoning_content ?? '';
      content += d?.content ?? '';
    }
    return { reasoning, content };
  };

  it('puts the <think> block in reasoning_content, streamed or not', async () => {
    await serve('<think>\nThey say hi.\n</think>\n\nHello there!');
    const r = await ask();
    expect(r.choices[0].message).toMatchObject({ content: 'Hello there!', reasoning_content: 'They say hi.' });
    expect(await askStream()).toEqual({ reasoning: 'They say hi.', content: 'Hello there!' });
  });

  it("leaves it in the content with reasoning_format 'none'", async () => {
    await serve('<think>x</think>y');
    const r = await ask({ reasoning_format: 'none' });
    expect(r.choices[0].message.content).toBe('<think>x</think>y');
    expect((r.choices[0].message as { reasoning_content?: string }).reasoning_content).toBeUndefined();
    expect(await askStream({ reasoning_format: 'none' })).toEqual({ reasoning: '', content: '<think>x</think>y' });
  });

  it("the server's --reasoning-format none leaves it in the content for requests that say nothing; a request's own wins", async () => {
    await serve('<think>x</think>y', false, 'none');
    expect((await ask()).choices[0].message.content).toBe('<think>x</think>y');
    expect((await ask({ reasoning_format: 'deepseek' })).choices[0].message).toMatchObject({ content: 'y', reasoning_content: 'x' });
  });

  it('starts in reasoning when the engine says the prompt opened it', async () => {
    await serve('Thinking it over.</think>Yes.', true);
    expect((await ask()).choices[0].message).toMatchObject({ content: 'Yes.', reasoning_content: 'Thinking it over.' });
    expect(await askStream()).toEqual({ reasoning: 'Thinking it over.', content: 'Yes.' });
  });

  it('parses tool calls after the reasoning', async () => {
    await serve('<think>Need the weather.</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>');
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const r = await ask({ tools });
    expect(r.choices[0].finish_reason).toBe('tool_calls');
    expect((r.choices[0].message as { reasoning_content?: string }).reasoning_content).toBe('Need the weather.');
    expect(r.choices[0].message.tool_calls?.map((t) => (t as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function.name)).toEqual(['get_weather']);
  });

  it('refuses a bad reasoning_format, reasoning_effort or chat_template_kwargs with a 400', async () => {
    await serve('x');
    await expect(ask({ reasoning_format: 'loud' })).rejects.toMatchObject({ status: 400 });
    await expect(ask({ reasoning_effort: 'extreme' })).rejects.toMatchObject({ status: 400 });
    await expect(ask({ chat_template_kwargs: [1] })).rejects.toMatchObject({ status: 400 });
  });

  it('splits a gpt-oss (harmony) answer by channel and takes its call, streamed or not', async () => {
    await serve('<|channel|>analysis<|message|>User wants Oslo weather.<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}');
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const r = await ask({ tools });
    expect(r.choices[0].finish_reason).toBe('tool_calls');
    expect(r.choices[0].message.content).toBeNull();
    expect((r.choices[0].message as { reasoning_content?: string }).reasoning_content).toBe('User wants Oslo weather.');
    expect(r.choices[0].message.tool_calls?.map((t) => (t as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function)).toEqual([{ name: 'get_weather', arguments: '{"city":"Oslo"}' }]);
    await app.close();
    await serve('<|channel|>analysis<|message|>Greeting.<|start|>assistant<|channel|>final<|message|>Hello!');
    expect((await ask()).choices[0].message).toMatchObject({ content: 'Hello!', reasoning_content: 'Greeting.' });
    expect(await askStream()).toEqual({ reasoning: 'Greeting.', content: 'Hello!' });
  });

  it('gives reasoning_effort to the chat template, unless chat_template_kwargs sets it', async () => {
    const seen: { generate: { chatTemplateKwargsJson: string } }[] = [];
    app = Fastify();
    const base = fakeScheduler('ok');
    const scheduler = { submit: (req: { generate: { chatTemplateKwargsJson: string } }, ...rest: unknown[]) => (seen.push(req), (base.submit as (...a: unknown[]) => unknown)(req, ...rest)) };
    registerOpenAiRoutes(app, { scheduler: () => scheduler as unknown as ReturnType<typeof fakeScheduler>, tenantOf: () => 't' });
    client = new OpenAI({ baseURL: `${await app.listen({ port: 0, host: '127.0.0.1' })}/v1`, apiKey: 'x', maxRetries: 0 });
    await ask({ reasoning_effort: 'high' });
    await ask({ reasoning_effort: 'high', chat_template_kwargs: { reasoning_effort: 'low', x: 1 } });
    await ask();
    expect(seen.map((r) => r.generate.chatTemplateKwargsJson)).toEqual(['{"reasoning_effort":"high"}', '{"reasoning_effort":"low","x":1}', '']);
  });
});
