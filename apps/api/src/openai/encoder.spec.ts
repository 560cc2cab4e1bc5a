// An encoder-only embedding model (tiny-nomic-bert, like Ollama's nomic-embed-text) behind the
// real stack: the embedding routes serve it (OpenAI, Ollama, llama-server), text routes answer a
// clear 4xx, and the model keeps serving.
import { startTestStack, type TestStack } from '../test-stack';

describe('an embedding (encoder) model through the API', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'nomic', preset: 'tiny-nomic-bert', contextLength: 256 }]);
  }, 60_000);
  afterAll(() => stack?.close());

  it('embeds on /v1/embeddings, /api/embed and /embedding: the same unit vector', async () => {
    const oai = await stack.post('/v1/embeddings', { model: 'nomic', input: ['search_query: what streams experts?', 'search_document: the expert cache'] });
    expect(oai.status).toBe(200);
    const [a, b] = oai.body.data.map((d: { embedding: number[] }) => d.embedding);
    expect(a).toHaveLength(256);
    expect(Math.hypot(...a)).toBeCloseTo(1, 5);
    expect(a).not.toEqual(b);
    // [CLS] + the text's pieces + [SEP].
    expect(oai.body.usage.prompt_tokens).toBeGreaterThan(4);
    const ollama = await stack.post('/api/embed', { model: 'nomic', input: 'search_query: what streams experts?' });
    expect(ollama.status).toBe(200);
    ollama.body.embeddings[0].forEach((v: number, i: number) => expect(v).toBeCloseTo(a[i], 5));
    const ls = await stack.post('/embedding', { model: 'nomic', content: 'search_query: what streams experts?' });
    expect(ls.status).toBe(200);
  });

  it('answers text generation with a 4xx naming the embedding model, and keeps serving', async () => {
    for (const [route, body] of [
      ['/v1/chat/completions', { model: 'nomic', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }],
      ['/v1/completions', { model: 'nomic', prompt: 'hi', max_tokens: 4 }],
      ['/api/generate', { model: 'nomic', prompt: 'hi', stream: false }],
    ] as const) {
      const r = await stack.post(route, body);
      expect(r.status).toBeGreaterThanOrEqual(400);
      expect(r.status).toBeLessThan(500);
      expect(JSON.stringify(r.body)).toMatch(/embedding model/);
    }
    expect((await stack.post('/v1/embeddings', { model: 'nomic', input: 'still here' })).status).toBe(200);
  });

  it('answers an input past the context with a 400 (OpenAI, llama-server), or truncates it (Ollama, unless truncate: false)', async () => {
    const long = Array.from({ length: 300 }, (_, i) => `word${i % 7}`).join(' ');
    const oai = await stack.post('/v1/embeddings', { model: 'nomic', input: long });
    expect(oai.status).toBe(400);
    expect(oai.body.error.message).toMatch(/context holds 256/);
    expect((await stack.post('/embedding', { model: 'nomic', content: long })).status).toBe(400);
    const cut = await stack.post('/api/embed', { model: 'nomic', input: long });
    expect(cut.status).toBe(200);
    expect(cut.body.prompt_eval_count).toBe(256);
    expect((await stack.post('/api/embed', { model: 'nomic', input: long, truncate: false })).status).toBe(400);
    // Token ids past the vocabulary are the client's error too.
    expect((await stack.post('/v1/embeddings', { model: 'nomic', input: [[2, 99999, 3]] })).status).toBe(400);
  });

  it("shows Ollama clients an embedding model: capabilities ['embedding'], no template, its F32 cache", async () => {
    const show = await stack.post('/api/show', { model: 'nomic' });
    expect(show.status).toBe(200);
    expect(show.body.capabilities).toEqual(['embedding']);
    expect(show.body.template).toBe('');
    expect(show.body.details.family).toBe('nomic-bert');
    const info = stack.host.listModels().find((m) => m.id === 'nomic')!;
    expect([info.embeddingOnly, info.kvType]).toEqual([true, 'f32']);
  });
});

describe("an encoder under llama-server's --pooling none", () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack([{ id: 'bert', preset: 'tiny-bert', contextLength: 128 }], { pooling: 'none' });
  }, 60_000);
  afterAll(() => stack?.close());

  it('answers /embedding with every token\'s row; the pooled routes refuse with 400', async () => {
    const tok = await stack.post('/tokenize', { model: 'bert', content: 'experts stream from storage', add_special: true });
    const n = tok.body.tokens.length;
    const r = await stack.post('/embedding', { model: 'bert', content: 'experts stream from storage' });
    expect(r.status).toBe(200);
    expect(r.body[0].embedding).toHaveLength(n);
    for (const row of r.body[0].embedding) expect(row).toHaveLength(256);
    // Raw rows (not normalized), each a different token's.
    expect(Math.hypot(...r.body[0].embedding[0])).not.toBeCloseTo(1, 2);
    expect(r.body[0].embedding[1]).not.toEqual(r.body[0].embedding[0]);
    const oai = await stack.post('/v1/embeddings', { model: 'bert', input: 'x' });
    expect([oai.status, oai.body.error.message]).toEqual([400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type"]);
    const ollama = await stack.post('/api/embed', { model: 'bert', input: 'x' });
    expect(ollama.status).toBe(400);
    expect(ollama.body.error).toMatch(/pooling is none/);
  });
});
