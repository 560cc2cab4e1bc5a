import { parseApiConfig } from './env';
import { startTestStack, type TestStack } from './test-stack';

// The server's sampling defaults (kail serve --temp, --top-k, -n …, llama-server's flags): a
// request that leaves a field out gets the server's value, on every route; the request's own
// value wins, and on Ollama's routes so does the model's Modelfile.
describe('server sampling defaults (kail serve --temp … -n)', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'tiny' }], { api: { samplingDefaults: { temperature: 1.5, top_k: 20, top_p: 0.95, min_p: 0, seed: 7, repeat_last_n: 32, n_predict: 3 } }, onDemand: ['lazy'], apiDataDir: true });
  }, 60_000);
  afterAll(() => stack?.close());

  const messages = [{ role: 'user', content: 'Hello' }];

  it("fill what a request leaves out, on OpenAI's and llama-server's routes; the request's own values win", async () => {
    const chat = async (extra: Record<string, unknown>) => (await stack.post('/v1/chat/completions', { model: 'tiny', messages, ...extra })).body;
    const d = await chat({});
    expect(d.usage.completion_tokens).toBe(3);
    // The same as a request that gives the defaults itself (a seeded draw at 1.5, top-k 20).
    const explicit = await chat({ temperature: 1.5, top_k: 20, top_p: 0.95, min_p: 0, seed: 7, repeat_last_n: 32, max_tokens: 3 });
    expect(d.choices[0].message.content).toBe(explicit.choices[0].message.content);
    expect((await chat({ max_tokens: 5, temperature: 0 })).usage.completion_tokens).toBe(5);
    expect((await stack.post('/v1/completions', { model: 'tiny', prompt: 'Hi' })).body.usage.completion_tokens).toBe(3);
    // llama-server's /completion reports the settings it ran with, and /props the server's.
    const c = (await stack.post('/completion', { model: 'tiny', prompt: 'Hi', top_k: 5 })).body;
    expect(c.generation_settings).toMatchObject({ n_predict: 3, seed: 7, temperature: 1.5, top_k: 5, top_p: 0.95, min_p: 0, repeat_last_n: 32 });
    expect(c.tokens_predicted).toBe(3);
    const props = await (await fetch(`${stack.api.url}/props`)).json();
    expect((props as any).default_generation_settings.params).toMatchObject({ n_predict: 3, temperature: 1.5, top_k: 20, seed: 7 });
    // The Responses API too.
    expect((await stack.post('/v1/responses', { model: 'tiny', input: 'Hi' })).body.usage.output_tokens).toBe(3);
    // Anthropic's route takes temperature up to 1: a higher default leaves its own; the request still runs.
    expect((await stack.post('/v1/messages', { model: 'tiny', max_tokens: 2, messages })).status).toBe(200);
  }, 60_000);

  it("on Ollama's routes: under the request's options and the Modelfile's parameters", async () => {
    const gen = async (model: string, options?: Record<string, unknown>) => (await stack.post('/api/generate', { model, prompt: 'Hi', stream: false, ...(options ? { options } : {}) })).body;
    expect((await gen('lazy')).eval_count).toBe(3);
    expect((await gen('lazy', { num_predict: 2 })).eval_count).toBe(2);
    expect((await stack.post('/api/create', { model: 'longer', from: 'lazy', parameters: { num_predict: 5 }, stream: false })).status).toBe(200);
    expect((await gen('longer')).eval_count).toBe(5);
    const chat = await stack.post('/api/chat', { model: 'lazy', messages, stream: false });
    expect(chat.body.eval_count).toBe(3);
  }, 60_000);

  it('refuses a default out of range, naming it', () => {
    expect(() => parseApiConfig({ samplingDefaults: { temperature: 3 } })).toThrow(/samplingDefaults.temperature/);
    expect(() => parseApiConfig({ samplingDefaults: { top_p: 0 } })).toThrow(/samplingDefaults.top_p/);
    expect(() => parseApiConfig({ samplingDefaults: { n_predict: -2 } })).toThrow(/samplingDefaults.n_predict/);
    expect(() => parseApiConfig({ samplingDefaults: { tempo: 1 } })).toThrow(/samplingDefaults: .*tempo/);
  });
});
