import { parseApiConfig } from './env';
import { startTestStack, type TestStack } from './test-stack';

// Other names of a loaded model (kail serve --alias, llama-server's): every route that names a
// model reaches it by any of them, /v1/models lists them, and routes that name a model to make or
// remove leave them alone.
describe('model aliases (kail serve --alias)', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }], { api: { aliases: { 'gpt-4o-mini': 'tiny', 'org/tiny': 'tiny', small: 'lazy' } }, onDemand: ['lazy'], apiDataDir: true });
  }, 60_000);
  afterAll(() => stack?.close());

  const messages = [{ role: 'user', content: 'Hello' }];
  const get = async (p: string) => {
    const r = await fetch(`${stack.api.url}${p}`);
    return { status: r.status, body: (await r.json()) as Record<string, any> };
  };

  it('lists each model with its aliases, and retrieves it by one', async () => {
    expect((await get('/v1/models')).body.data).toEqual([
      expect.objectContaining({ id: 'tiny', aliases: ['gpt-4o-mini', 'org/tiny'] }),
      expect.objectContaining({ id: 'lazy', aliases: ['small'], status: { value: 'unloaded' } }),
    ]);
    expect((await get('/v1/models/org/tiny')).body).toMatchObject({ id: 'tiny', aliases: ['gpt-4o-mini', 'org/tiny'] });
    expect((await get('/v1/models/gpt-4o')).status).toBe(404);
  });

  it("reaches the model by an alias on OpenAI's, Anthropic's, Ollama's and llama-server's routes", async () => {
    const oai = async (model: string) => (await stack.post('/v1/chat/completions', { model, messages, max_tokens: 4, temperature: 0 })).body.choices[0].message.content;
    const want = await oai('tiny');
    expect(await oai('gpt-4o-mini')).toBe(want);
    expect(await oai('org/tiny')).toBe(want);
    expect((await stack.post('/v1/messages', { model: 'gpt-4o-mini', max_tokens: 4, messages })).status).toBe(200);
    const ollama = await stack.post('/api/chat', { model: 'gpt-4o-mini:latest', messages, stream: false, options: { temperature: 0, num_predict: 4 } });
    expect(ollama.status).toBe(200);
    expect(ollama.body.message.content).toBe(want);
    expect((await stack.post('/api/show', { model: 'org/tiny' })).body.details.family).toBe('qwen3moe');
    expect((await stack.post('/completion', { model: 'gpt-4o-mini', prompt: 'Hi', n_predict: 2 })).status).toBe(200);
    // A name that is not one stays unknown.
    expect((await stack.post('/v1/chat/completions', { model: 'gpt-4o', messages, max_tokens: 4 })).status).toBe(404);
  }, 60_000);

  it('routes that make or remove a model by name take an alias as a name, not as its model', async () => {
    // (Deleting by an alias does not delete the model's file; copying to an alias makes that file.)
    expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: 'gpt-4o-mini' }) })).status).toBe(404);
    expect((await stack.post('/api/show', { model: 'tiny' })).status).toBe(200);
    // `from` names the model a created one starts from: there an alias is read as its model.
    const made = await stack.post('/api/create', { model: 'terse', from: 'small', system: 'Be brief.', stream: false });
    expect(made.status).toBe(200);
    expect((await stack.post('/api/show', { model: 'terse' })).body.system).toBe('Be brief.');
    // (An alias of a model not loaded yet loads it, as its id would.)
    expect((await stack.post('/api/generate', { model: 'small', prompt: 'Hi', stream: false, options: { num_predict: 2 } })).status).toBe(200);
  }, 60_000);

  it('refuses an alias with spaces or without a model', () => {
    expect(() => parseApiConfig({ aliases: { 'a b': 'tiny' } })).toThrow(/aliases.a b: an alias is a name without spaces or commas/);
    expect(() => parseApiConfig({ aliases: { a: '' } })).toThrow(/aliases.a: an alias needs the id of a model/);
  });
});
