import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { writeTestModel } from '@kailstream/engine/testing';
import { startHubEmulator, writeOllamaStoreModel } from '@kailstream/tools';

import { startTestStack, type TestStack } from '../test-stack';

// Models load when a request names a GGUF file of the engine's models directory (as Ollama loads
// a model it has pulled), are listed before that, and unload with keep_alive 0.
describe('models loaded on demand and unloaded with keep_alive 0', () => {
  let stack: TestStack;
  beforeAll(async () => {
    // `lazy` is the same file as `tiny` (same weights), only not loaded at start.
    stack = await startTestStack([{ id: 'tiny' }], { onDemand: ['lazy'], apiDataDir: true });
  }, 60_000);
  afterAll(() => stack?.close());

  const get = async (p: string) => (await fetch(`${stack.api.url}${p}`)).json() as Promise<Record<string, any>>;
  const messages = [{ role: 'user', content: 'Hello' }];
  const chat = (model: string) => stack.post('/api/chat', { model, messages, stream: false, options: { temperature: 0, num_predict: 5 } });
  const loaded = async () => ((await get('/api/ps')).models as { name: string }[]).map((m) => m.name).sort();

  it('lists the directory\'s models as available, loads one when a request names it, unloads it with keep_alive 0', async () => {
    expect(((await get('/api/tags')).models as { name: string }[]).map((m) => m.name)).toEqual(['tiny:latest', 'lazy:latest']);
    // When each file was made: OpenAI's `created` (seconds), Ollama's `modified_at`.
    const made = new Date('2026-03-01T12:00:00Z');
    fs.utimesSync(path.join(stack.dir, 'models', 'lazy.gguf'), made, made);
    expect((await get('/v1/models')).data).toEqual([
      expect.objectContaining({ id: 'tiny', status: { value: 'loaded' }, created: Math.floor(fs.statSync(stack.files.tiny).mtimeMs / 1000) }),
      expect.objectContaining({ id: 'lazy', status: { value: 'unloaded' }, created: made.getTime() / 1000 }),
    ]);
    expect(((await get('/api/tags')).models as { name: string; modified_at: string }[]).find((m) => m.name === 'lazy:latest')!.modified_at).toBe(made.toISOString());
    // Each listing's digest is its file's SHA-256, hashed in the background after a first listing
    // ('' until then) and kept in the data directory with the file's size, mtime and inode.
    const sha = (file: string) => createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    const digests = async () => Object.fromEntries(((await get('/api/tags')).models as { name: string; digest: string }[]).map((m) => [m.name, m.digest]));
    const hashes = { 'tiny:latest': sha(stack.files.tiny), 'lazy:latest': sha(path.join(stack.dir, 'models', 'lazy.gguf')) };
    const until = Date.now() + 20_000;
    while (JSON.stringify(await digests()) !== JSON.stringify(hashes) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    expect(await digests()).toEqual(hashes);
    expect(JSON.parse(fs.readFileSync(path.join(stack.dir, 'model-digests.json'), 'utf8'))[stack.files.tiny]).toMatchObject({ sha256: hashes['tiny:latest'], size: fs.statSync(stack.files.tiny).size });
    expect(await loaded()).toEqual(['tiny:latest']);
    // /api/show describes it without loading it.
    const show = await stack.post('/api/show', { model: 'lazy' });
    expect(show.body.details.family).toBe('qwen3moe');
    expect(await loaded()).toEqual(['tiny:latest']);

    const want = await chat('tiny');
    const got = await chat('lazy:latest');
    expect(got.status).toBe(200);
    expect(got.body.message.content).toBe(want.body.message.content);
    expect(await loaded()).toEqual(['lazy:latest', 'tiny:latest']);
    expect(stack.sched.dispatcher.loader!.loads).toBe(1);

    // `ollama stop lazy`: an empty chat with keep_alive 0.
    const stop = await stack.post('/api/chat', { model: 'lazy', messages: [], keep_alive: 0 });
    expect(stop.body).toMatchObject({ done: true, done_reason: 'unload' });
    expect(await loaded()).toEqual(['tiny:latest']);

    // The OpenAI and llama-server routes load it again; keep_alive 0 on an answer unloads it after.
    const oai = await stack.post('/v1/chat/completions', { model: 'lazy', messages, max_tokens: 3, temperature: 0 });
    expect(oai.status).toBe(200);
    expect(await loaded()).toEqual(['lazy:latest', 'tiny:latest']);
    const once = await stack.post('/api/generate', { model: 'lazy', prompt: 'Hi', stream: false, keep_alive: '0s', options: { num_predict: 2 } });
    expect(once.status).toBe(200);
    expect(once.body.done).toBe(true);
    // (The answer goes out first; the unload follows it, at the scheduler's next sweep: polled for
    // 30 s at most, a loaded machine delays it.)
    const end = Date.now() + 30_000;
    while ((await loaded()).length > 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    expect(await loaded()).toEqual(['tiny:latest']);
    expect((await stack.post('/completion', { model: 'lazy', prompt: 'Hi', n_predict: 2 })).status).toBe(200);
    expect(stack.sched.dispatcher.loader!.loads).toBe(3);

    // A name that is neither loaded nor in the directory is still a 404.
    const missing = await chat('nope');
    expect(missing.status).toBe(404);
  }, 120_000);

  it('copies and deletes models of the directory (ollama cp, ollama rm)', async () => {
    const del = (model: string) => fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model }) });
    const tags = async () => ((await get('/api/tags')).models as { name: string }[]).map((m) => m.name).sort();
    const copy = async (source: string, destination: string) =>
      (await fetch(`${stack.api.url}/api/copy`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ source, destination }) })).status;
    expect(await copy('lazy:latest', 'lazy2')).toBe(200);
    expect(await tags()).toEqual(['lazy2:latest', 'lazy:latest', 'tiny:latest']);
    // The copy serves as the original does.
    expect((await chat('lazy2')).body.message.content).toBe((await chat('tiny')).body.message.content);
    expect(await copy('lazy', 'lazy2')).toBe(409);
    expect(await copy('nope', 'x')).toBe(404);
    expect(await copy('lazy', '../evil')).toBe(400);
    // Deleting a loaded (idle) model unloads it first.
    expect((await del('lazy2:latest')).status).toBe(200);
    expect(await tags()).toEqual(['lazy:latest', 'tiny:latest']);
    expect(await loaded()).not.toContain('lazy2:latest');
    expect((await del('lazy2')).status).toBe(404);
    // A model loaded from outside the directory (kail serve -m) is not a file here.
    expect((await del('tiny')).status).toBe(404);
  }, 60_000);

  it('keeps a model for keep_alive after its last request: /api/ps says until when; -1 keeps it; a bad duration is a 400', async () => {
    const ps = async () => Object.fromEntries(((await get('/api/ps')).models as { name: string; expires_at: string }[]).map((m) => [m.name, Date.parse(m.expires_at)]));
    // Loaded on demand: the scheduler's default keep-alive (Ollama's 5 minutes), counted from this
    // preload, also when the model is still loaded from an earlier request (as here: the first
    // test's /completion loaded it).
    expect(await loaded()).toContain('lazy:latest');
    const t0 = Date.now();
    expect((await stack.post('/api/chat', { model: 'lazy', messages: [] })).body).toMatchObject({ done_reason: 'load' });
    let at = (await ps())['lazy:latest'];
    expect(at).toBeGreaterThanOrEqual(t0 + 300_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 300_000);
    // A request's keep_alive becomes the model's, as a Go duration or seconds, counted from the
    // request (between its start and the listing after it, however long it took).
    const t1 = Date.now();
    expect((await stack.post('/api/generate', { model: 'lazy', prompt: 'Hi', stream: false, keep_alive: '1h30m', options: { num_predict: 2 } })).status).toBe(200);
    at = (await ps())['lazy:latest'];
    expect(at).toBeGreaterThanOrEqual(t1 + 5_400_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 5_400_000);
    const t2 = Date.now();
    expect((await stack.post('/api/embed', { model: 'lazy', input: 'Hi', keep_alive: 600 })).status).toBe(200);
    at = (await ps())['lazy:latest'];
    expect(at).toBeGreaterThanOrEqual(t2 + 600_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 600_000);
    // Negative: until unloaded by hand (Ollama reports the year 2318).
    expect((await stack.post('/api/chat', { model: 'lazy', messages: [], keep_alive: -1 })).body).toMatchObject({ done_reason: 'load' });
    expect((await get('/api/ps')).models.find((m: { name: string }) => m.name === 'lazy:latest').expires_at).toBe('2318-01-01T00:00:00Z');
    // Seconds past what a date holds count as forever (they were a 500 from /api/ps).
    for (const keep_alive of [1e308, 2 ** 53, '99999999999h']) {
      expect((await stack.post('/api/chat', { model: 'lazy', messages: [], keep_alive })).status).toBe(200);
      const ps = await fetch(`${stack.api.url}/api/ps`);
      expect([keep_alive, ps.status]).toEqual([keep_alive, 200]);
      expect(((await ps.json()) as { models: { name: string; expires_at: string }[] }).models.find((m) => m.name === 'lazy:latest')!.expires_at).toBe('2318-01-01T00:00:00Z');
    }
    // A model `kail serve -m` loaded from outside the directory never expires.
    expect((await get('/api/ps')).models.find((m: { name: string }) => m.name === 'tiny:latest').expires_at).toBe('2318-01-01T00:00:00Z');
    for (const keep_alive of ['forever', '5 minutes', true, '1e3s']) {
      const r = await stack.post('/api/chat', { model: 'lazy', messages, keep_alive });
      expect([keep_alive, r.status]).toEqual([keep_alive, 400]);
      expect(r.body.error).toMatch(/keep_alive/);
    }
  }, 60_000);

  it("honours num_ctx: a model loads (or reloads, idle) with it; a smaller one is the request's window", async () => {
    const ctxOf = async (name: string) => ((await get('/api/ps')).models as { name: string; context_length: number }[]).find((m) => m.name === name)?.context_length;
    await stack.post('/api/chat', { model: 'lazy', messages: [], keep_alive: 0 });
    expect(await loaded()).toEqual(['tiny:latest']);
    const at = (num_ctx: number, extra: Record<string, unknown> = {}) => stack.post('/api/chat', { model: 'lazy', messages, stream: false, options: { temperature: 0, num_predict: 3, num_ctx }, ...extra });
    expect((await at(2048)).status).toBe(200);
    expect(await ctxOf('lazy:latest')).toBe(2048);
    // Less: the model stays as it is (no reload back and forth between clients)...
    const reloads = stack.sched.dispatcher.loader!.reloads;
    expect((await at(512)).status).toBe(200);
    expect(await ctxOf('lazy:latest')).toBe(2048);
    // ...and the request's window is num_ctx: a prompt past it is refused, the output stops at it.
    const long = await stack.post('/api/generate', { model: 'lazy', prompt: 'word '.repeat(40), raw: true, stream: false, options: { num_ctx: 16 } });
    expect(long.status).toBe(400);
    expect(long.body.error).toMatch(/context window \(num_ctx\) holds 16/);
    const fill = await stack.post('/api/generate', { model: 'lazy', prompt: 'Hi', raw: true, stream: false, options: { num_ctx: 12, temperature: 0 } });
    expect(fill.body).toMatchObject({ done: true, done_reason: 'length' });
    expect(fill.body.prompt_eval_count + fill.body.eval_count).toBe(12);
    // A chat history longer than the window keeps its latest turns that fit (Ollama's truncation).
    const history = Array.from({ length: 12 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i} `.repeat(8) }));
    const cut = await stack.post('/api/chat', { model: 'lazy', messages: history.slice(0, 11), stream: false, options: { num_ctx: 96, num_predict: 2, temperature: 0 } });
    expect(cut.status).toBe(200);
    expect(cut.body.prompt_eval_count).toBeLessThanOrEqual(96);
    // More: reloaded with it (idle, from the models directory).
    expect((await at(3072)).status).toBe(200);
    expect(await ctxOf('lazy:latest')).toBe(3072);
    expect(stack.sched.dispatcher.loader!.reloads).toBe(reloads + 1);
    // A model loaded from outside the directory keeps its context; the window is its context.
    expect((await stack.post('/api/chat', { model: 'tiny', messages, stream: false, options: { num_predict: 2, num_ctx: 8192 } })).status).toBe(200);
    expect(await ctxOf('tiny:latest')).toBe(1024);
  }, 60_000);

  it('creates models as `ollama create` does: a GGUF blob uploaded and checked, or another model with a system prompt, options and messages', async () => {
    const gguf = fs.readFileSync(`${stack.dir}/models/lazy.gguf`);
    const digest = `sha256:${createHash('sha256').update(gguf).digest('hex')}`;
    const head = () => fetch(`${stack.api.url}/api/blobs/${digest}`, { method: 'HEAD' });
    expect((await head()).status).toBe(404);
    // A body that is not what the digest says leaves nothing behind.
    const wrong = await fetch(`${stack.api.url}/api/blobs/${digest}`, { method: 'POST', body: gguf.subarray(0, 1000) });
    expect(wrong.status).toBe(400);
    expect(((await wrong.json()) as { error: string }).error).toMatch(/the body's SHA-256 is sha256:[0-9a-f]{64}, not sha256:/);
    expect((await head()).status).toBe(404);
    const up = await fetch(`${stack.api.url}/api/blobs/${digest}`, { method: 'POST', body: gguf, headers: { 'content-type': 'application/octet-stream' } });
    expect(up.status).toBe(201);
    expect((await head()).status).toBe(200);
    // From the blob (streamed status lines, as Ollama's), then it is listed and answers.
    const made = await fetch(`${stack.api.url}/api/create`, { method: 'POST', body: JSON.stringify({ model: 'mine', files: { 'model.gguf': digest } }) });
    expect(made.status).toBe(200);
    const lines = (await made.text()).trim().split('\n').map((l) => JSON.parse(l) as { status: string });
    expect(lines.at(-1)).toEqual({ status: 'success' });
    expect(lines[0].status).toBe(`using existing layer ${digest}`);
    // (Its digest known at once: the file is the blob's.)
    expect(((await get('/api/tags')).models as { name: string; digest: string }[]).find((m) => m.name === 'mine:latest')?.digest).toBe(digest.slice(7));
    const plain = await stack.post('/api/chat', { model: 'mine', messages, stream: false, options: { temperature: 0, num_predict: 4 } });
    expect(plain.status).toBe(200);
    // From that model: a system prompt and options of its own (the request's own still win).
    const system = 'You are terse.';
    const r = await stack.post('/api/create', { model: 'terse', from: 'mine', system, parameters: { temperature: 0, num_predict: 4, stop: ['zz'] }, stream: false });
    expect(r.body).toEqual({ status: 'success' });
    const viaModelfile = await stack.post('/api/chat', { model: 'terse', messages, stream: false });
    const spelledOut = await stack.post('/api/chat', { model: 'mine', messages: [{ role: 'system', content: system }, ...messages], stream: false, options: { temperature: 0, num_predict: 4 } });
    expect(viaModelfile.body.message.content).toBe(spelledOut.body.message.content);
    expect(viaModelfile.body.prompt_eval_count).toBe(spelledOut.body.prompt_eval_count);
    expect(viaModelfile.body.eval_count).toBe(4);
    expect((await stack.post('/api/chat', { model: 'terse', messages, stream: false, options: { num_predict: 2 } })).body.eval_count).toBe(2);
    const show = await stack.post('/api/show', { model: 'terse' });
    expect(show.body.system).toBe(system);
    // From a model kail serve -m loaded from outside the models directory: its file comes in (a hard link).
    expect((await stack.post('/api/create', { model: 'tiny-copy', from: 'tiny', system: 'Copied.', stream: false })).body).toEqual({ status: 'success' });
    expect(fs.statSync(`${stack.dir}/models/tiny-copy.gguf`).ino).toBe(fs.statSync(stack.files.tiny).ino);
    expect((await stack.post('/api/show', { model: 'tiny-copy' })).body.system).toBe('Copied.');
    expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: 'tiny-copy' }) })).status).toBe(200);
    expect(fs.existsSync(stack.files.tiny)).toBe(true);
    expect(show.body.modelfile).toMatch(/^PARAMETER stop zz$/m);
    expect(show.body.parameters).toMatch(/temperature\s+0\b/);
    // Copy keeps it, delete forgets it.
    expect((await fetch(`${stack.api.url}/api/copy`, { method: 'POST', body: JSON.stringify({ source: 'terse', destination: 'terse2' }) })).status).toBe(200);
    expect((await stack.post('/api/show', { model: 'terse2' })).body.system).toBe(system);
    for (const m of ['terse2', 'terse', 'mine']) expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: m }) })).status).toBe(200);
    // What it cannot do, it says.
    for (const [body, why] of [
      [{ model: 'x', files: { 'model.gguf': `sha256:${'0'.repeat(64)}` } }, /blob sha256:0{64} is not on the server: upload it with POST/],
      [{ model: 'x', files: { 'model.safetensors': digest } }, /files must be one GGUF file/],
      [{ model: 'x', from: 'lazy', quantize: 'q4_K_M' }, /quantize needs files: an uploaded F32, F16 or BF16 GGUF/],
      [{ model: 'x', from: 'lazy', template: '{{ .Prompt' }, /template: template: :1: unclosed action/],
      [{ model: 'x', from: 'lazy', template: '{{ upper .Prompt }}' }, /function "upper" not defined/],
      [{ model: 'x', from: 'lazy', parameters: { temperature: 'hot' } }, /parameters.temperature/],
      [{ model: 'x' }, /give from \(a model\) or files/],
      [{ model: 'x', from: 'nope' }, /nope/],
    ] as const) {
      const bad = await stack.post('/api/create', { ...body, stream: false });
      expect([JSON.stringify(body), bad.status >= 400 && bad.status < 500]).toEqual([JSON.stringify(body), true]);
      expect(bad.body.error).toMatch(why);
    }
  }, 60_000);

  it("renders a Modelfile TEMPLATE (Ollama's Go template) as Ollama does: per turn without .Messages, in one pass with them, tools as its JSON; /api/generate's template too", async () => {
    const greedy = { temperature: 0, num_predict: 4 };
    // What `tiny` answers to a prompt given raw: the text each template should have made.
    const raw = async (prompt: string) => (await stack.post('/api/generate', { model: 'tiny', prompt, raw: true, stream: false, options: greedy })).body;
    const same = (got: Record<string, any>, want: Record<string, any>, text: (b: Record<string, any>) => string) => {
      expect(got.prompt_eval_count).toBe(want.prompt_eval_count);
      expect(text(got)).toBe(want.response);
    };

    // A template without .Messages runs once per turn; the last run stops after .Response.
    const legacy = '{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n';
    expect((await stack.post('/api/create', { model: 'go-legacy', from: 'tiny', template: legacy, stream: false })).body).toEqual({ status: 'success' });
    const chat = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'Why?' }];
    const turns = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n';
    same((await stack.post('/api/chat', { model: 'go-legacy', messages: chat, stream: false, options: greedy })).body, await raw(turns), (b) => b.message.content);
    // /api/generate renders with it too, and a request's own template wins.
    same((await stack.post('/api/generate', { model: 'go-legacy', system: 'S', prompt: 'P', stream: false, options: greedy })).body, await raw('<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nP<|im_end|>\n<|im_start|>assistant\n'), (b) => b.response);
    same((await stack.post('/api/generate', { model: 'tiny', template: '[{{ .System }}|{{ .Prompt }}]', system: 'S', prompt: 'P', stream: false, options: greedy })).body, await raw('[S|P]'), (b) => b.response);
    const show = (await stack.post('/api/show', { model: 'go-legacy' })).body;
    expect(show.template).toBe(legacy);
    expect(show.modelfile).toContain(`TEMPLATE """${legacy}"""`);
    expect(show.capabilities).toEqual(['completion']);

    // With .Messages: one pass; tools, tool calls and their results as Ollama's types print them.
    const withTools = '{{ if .Tools }}tools:{{ json .Tools }}\n{{ end }}{{ range $i, $m := .Messages }}<{{ .Role }}>{{ .Content }}{{ range .ToolCalls }}call:{{ .Function.Name }}{{ .Function.Arguments }}{{ end }}{{ if eq .Role "tool" }}({{ .ToolName }}){{ end }}\n{{ end }}<assistant>';
    expect((await stack.post('/api/create', { model: 'go-tools', from: 'tiny', template: withTools, stream: false })).body).toEqual({ status: 'success' });
    expect((await stack.post('/api/show', { model: 'go-tools' })).body.capabilities).toEqual(['completion', 'tools']);
    const tools = [{ type: 'function', function: { name: 'weather', description: 'Weather <now>', parameters: { type: 'object', required: ['city'], properties: { city: { type: 'string', description: 'City', minLength: 1 } } } } }];
    const calls = [
      { role: 'user', content: 'Rome?' },
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'weather', arguments: { city: 'Rome', days: 2 } } }] },
      { role: 'tool', content: 'Sunny', tool_name: 'weather' },
    ];
    const rendered =
      'tools:[{"type":"function","function":{"name":"weather","description":"Weather \\u003cnow\\u003e","parameters":{"type":"object","required":["city"],"properties":{"city":{"type":"string","description":"City"}}}}}]\n' +
      '<user>Rome?\n<assistant>call:weather{"city":"Rome","days":2}\n<tool>Sunny(weather)\n<assistant>';
    same((await stack.post('/api/chat', { model: 'go-tools', messages: calls, tools, stream: false, options: greedy })).body, await raw(rendered), (b) => b.message.content);

    // A template that fails on the request's values is the request's 400; the server goes on.
    const failing = await stack.post('/api/generate', { model: 'tiny', template: '{{ index .Prompt 99 }}', prompt: 'P', stream: false });
    expect(failing.status).toBe(400);
    expect(failing.body.error).toMatch(/chat template failed: template: :1:3: executing "" at <index .Prompt 99>: error calling index: .*out of range/);
    for (const m of ['go-legacy', 'go-tools']) expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: m }) })).status).toBe(200);
  }, 60_000);

  it("applies a model's Modelfile settings on the OpenAI routes (Responses too) as Ollama's do: system prompt, opening messages, TEMPLATE, PARAMETERs under the request's own", async () => {
    const system = 'You are terse.';
    const template = '{{ range .Messages }}[{{ .Role }}] {{ .Content }}\n{{ end }}[assistant] ';
    const made = await stack.post('/api/create', { model: 'oa', from: 'tiny', system, template, parameters: { temperature: 0, num_predict: 3, top_k: 1, stop: ['zz'], num_ctx: 512 }, messages: [{ role: 'user', content: 'Earlier.' }, { role: 'assistant', content: 'Yes.' }], stream: false });
    expect(made.body).toEqual({ status: 'success' });
    const ask = [{ role: 'user', content: 'Hello' }];
    // The prompt the Modelfile makes, sent raw to the same weights with the same settings.
    const rendered = `[system] ${system}\n[user] Earlier.\n[assistant] Yes.\n[user] Hello\n[assistant] `;
    const want = (await stack.post('/v1/completions', { model: 'tiny', prompt: rendered, temperature: 0, max_tokens: 3, stop: ['zz'] })).body;
    const got = (await stack.post('/v1/chat/completions', { model: 'oa', messages: ask })).body;
    expect([got.choices[0].message.content, got.usage.prompt_tokens, got.usage.completion_tokens]).toEqual([want.choices[0].text, want.usage.prompt_tokens, 3]);
    // Anthropic's route too (its max_tokens is required; top_k and temperature come from the Modelfile).
    const anthropic = (await stack.post('/v1/messages', { model: 'oa', max_tokens: 3, messages: ask })).body;
    expect([anthropic.content.map((c: { text?: string }) => c.text ?? '').join(''), anthropic.usage.input_tokens + (anthropic.usage.cache_read_input_tokens ?? 0)]).toEqual([want.choices[0].text, want.usage.prompt_tokens]);
    expect((await stack.post('/v1/messages/count_tokens', { model: 'oa', messages: ask })).body.input_tokens).toBe(want.usage.prompt_tokens);
    // The Responses route too (num_predict is max_output_tokens there).
    const resp = (await stack.post('/v1/responses', { model: 'oa', input: 'Hello' })).body;
    expect([resp.output[0].content[0].text, resp.usage.input_tokens, resp.usage.output_tokens]).toEqual([want.choices[0].text, want.usage.prompt_tokens, 3]);
    expect((await stack.post('/v1/responses/input_tokens', { model: 'oa', input: 'Hello' })).body.input_tokens).toBe(want.usage.prompt_tokens);
    // A later turn (previous_response_id) gets them again, once: they are not stored with the conversation.
    const next = (await stack.post('/v1/responses', { model: 'oa', input: 'More', previous_response_id: resp.id })).body;
    const nextWant = (await stack.post('/v1/completions', { model: 'tiny', prompt: `${rendered}${want.choices[0].text}\n[user] More\n[assistant] `, temperature: 0, max_tokens: 3, stop: ['zz'] })).body;
    expect([next.output[0].content[0].text, next.usage.input_tokens]).toEqual([nextWant.choices[0].text, nextWant.usage.prompt_tokens]);
    // The request's own system message and max_tokens win.
    const own = (await stack.post('/v1/chat/completions', { model: 'oa', messages: [{ role: 'system', content: 'Mine.' }, ...ask], max_tokens: 2 })).body;
    const ownWant = (await stack.post('/v1/completions', { model: 'tiny', prompt: '[system] Mine.\n[user] Earlier.\n[assistant] Yes.\n[user] Hello\n[assistant] ', temperature: 0, max_tokens: 2 })).body;
    expect([own.choices[0].message.content, own.usage.prompt_tokens]).toEqual([ownWant.choices[0].text, ownWant.usage.prompt_tokens]);
    // /v1/completions takes the PARAMETERs (its prompt stays raw); a value OpenAI's range refuses is left out, not a 400.
    expect((await stack.post('/v1/completions', { model: 'oa', prompt: 'Once' })).body.usage.completion_tokens).toBe(3);
    expect((await stack.post('/api/create', { model: 'hot', from: 'tiny', parameters: { temperature: 3 }, stream: false })).body).toEqual({ status: 'success' });
    expect((await stack.post('/v1/chat/completions', { model: 'hot', messages: ask, max_tokens: 2 })).status).toBe(200);
    for (const m of ['oa', 'hot']) expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: m }) })).status).toBe(200);
  }, 60_000);

  it('creates a quantized model as `ollama create -q` does: the uploaded F16 file quantized on a worker while the API keeps answering', async () => {
    const f16 = fs.readFileSync(writeTestModel(stack.dir, 'tiny-qwen3moe', 'F16', 11));
    const digest = `sha256:${createHash('sha256').update(f16).digest('hex')}`;
    expect((await fetch(`${stack.api.url}/api/blobs/${digest}`, { method: 'POST', body: f16 })).status).toBe(201);
    const made = fetch(`${stack.api.url}/api/create`, { method: 'POST', body: JSON.stringify({ model: 'small', files: { 'model.gguf': digest }, quantize: 'q4_K_M' }) });
    // (The quantizer runs off the event loop: the API answers meanwhile.)
    expect((await fetch(`${stack.api.url}/api/version`)).status).toBe(200);
    const r = await made;
    expect(r.status).toBe(200);
    const all = (await r.text()).trim().split('\n').map((l) => JSON.parse(l) as { status: string; total?: number; completed?: number });
    // (Statuses as they happen; the quantization's progress repeats its status with total and completed.)
    const lines = all.map((l) => l.status).filter((x, i, a) => x !== a[i - 1]);
    expect(lines).toEqual([`using existing layer ${digest}`, 'quantizing model to Q4_K_M', 'creating new layer', 'writing manifest', 'success']);
    const progress = all.filter((l) => l.total !== undefined);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.every((l) => l.status === 'quantizing model to Q4_K_M' && l.completed! <= l.total! && l.total! > 0)).toBe(true);
    const show = await stack.post('/api/show', { model: 'small' });
    expect(show.body.details.quantization_level).toBe('Q4_K_M');
    const chatted = await stack.post('/api/chat', { model: 'small', messages, stream: false, options: { temperature: 0, num_predict: 3 } });
    expect(chatted.status).toBe(200);
    expect(chatted.body.eval_count).toBe(3);
    for (const [quantize, why] of [
      ['iq2_xxs', /quantize: IQ2_XXS needs an importance matrix for blk\.\d+\.\w+\.weight/],
      ['q9_k', /quantize: unknown quantization type 'q9_k'/],
    ] as const) {
      const bad = await stack.post('/api/create', { model: 'bad', files: { 'model.gguf': digest }, quantize, stream: false });
      expect(bad.status).toBe(400);
      expect(bad.body.error).toMatch(why);
    }
    expect(((await get('/api/tags')).models as { name: string }[]).map((m) => m.name)).not.toContain('bad:latest');
    expect(fs.readdirSync(`${stack.dir}/blobs`).filter((f) => f.startsWith('.quantize-'))).toEqual([]);
    expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: 'small' }) })).status).toBe(200);
  }, 60_000);

  it('creates a model with LoRA adapters as `ollama create` does with ADAPTER lines: the blob checked, loaded with it, copied with it', async () => {
    const adapter = fs.readFileSync(writeTestModel(stack.dir, 'tiny-qwen3moe', 'F32', 9, ['--lora-rank', '8', '--lora-alpha', '32']));
    const digest = `sha256:${createHash('sha256').update(adapter).digest('hex')}`;
    expect((await fetch(`${stack.api.url}/api/blobs/${digest}`, { method: 'POST', body: adapter })).status).toBe(201);
    const made = await stack.post('/api/create', { model: 'styled', from: 'lazy', adapters: { 'adapter.gguf': digest }, stream: false });
    expect(made.body).toEqual({ status: 'success' });
    const probs = async (model: string, lora?: unknown) =>
      JSON.stringify((await stack.post('/completion', { model, prompt: 'Adapters', n_predict: 4, temperature: 0, ignore_eos: true, n_probs: 2, ...(lora ? { lora } : {}) })).body.completion_probabilities);
    const styled = await probs('styled');
    // Loaded with the adapter: not the base model's answer, which scale 0 gives back.
    expect(styled).not.toBe(await probs('lazy'));
    expect(await probs('styled', [{ id: 0, scale: 0 }])).toBe(await probs('lazy'));
    expect((await stack.post('/api/show', { model: 'styled' })).body.modelfile).toMatch(/^ADAPTER \/.*[0-9a-f]{64}/m);
    // A copy loads it too; a model file as an adapter, or an adapter for another architecture, is refused.
    expect((await fetch(`${stack.api.url}/api/copy`, { method: 'POST', body: JSON.stringify({ source: 'styled', destination: 'styled2' }) })).status).toBe(200);
    expect(await probs('styled2')).toBe(styled);
    const model = fs.readFileSync(`${stack.dir}/models/lazy.gguf`);
    const modelDigest = `sha256:${createHash('sha256').update(model).digest('hex')}`;
    await fetch(`${stack.api.url}/api/blobs/${modelDigest}`, { method: 'POST', body: model });
    const bad = await stack.post('/api/create', { model: 'wrong', from: 'lazy', adapters: { 'a.gguf': modelDigest }, stream: false });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/is not a LoRA adapter \(general.type 'model'/);
    expect(((await get('/api/tags')).models as { name: string }[]).map((m) => m.name)).not.toContain('wrong:latest');
    expect((await stack.post('/api/create', { model: 'x', adapters: { 'a.gguf': digest }, stream: false })).body.error).toMatch(/give from \(a model\) or files|adapters need from/);
    for (const m of ['styled2', 'styled']) expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: m }) })).status).toBe(200);
  }, 60_000);

  it("pulls a model this machine's Ollama has (its store) by linking it in, with its system prompt and parameters", async () => {
    const store = path.join(stack.dir, 'ollama-store');
    writeOllamaStoreModel(store, 'jane/terse:2b', stack.files.tiny, { system: 'Be terse.', params: { num_predict: 3, temperature: 0 } });
    process.env.OLLAMA_MODELS = store;
    try {
      const r = await fetch(`${stack.api.url}/api/pull`, { method: 'POST', body: JSON.stringify({ model: 'jane/terse:2b' }) });
      const lines = (await r.text()).trim().split('\n').map((l) => JSON.parse(l));
      expect(lines[0]).toEqual({ status: 'pulling manifest' });
      expect(lines.at(-1)).toEqual({ status: 'success' });
      expect(fs.statSync(`${stack.dir}/models/terse:2b.gguf`).ino).toBe(fs.statSync(path.join(store, 'blobs', lines[1].digest.replace(':', '-'))).ino);
      expect(((await get('/api/tags')).models as { name: string; digest: string }[]).find((m) => m.name === 'terse:2b')?.digest).toBe(lines[1].digest.slice(7));
      // It answers to the name it was pulled by, with the Modelfile settings Ollama kept for it.
      const show = await stack.post('/api/show', { model: 'jane/terse:2b' });
      expect(show.body.system).toBe('Be terse.');
      const answer = await stack.post('/api/chat', { model: 'jane/terse:2b', messages, stream: false });
      expect([answer.status, answer.body.eval_count]).toEqual([200, 3]);
      // Again: the same file, nothing to do.
      expect((await stack.post('/api/pull', { model: 'jane/terse:2b', stream: false })).body).toEqual({ status: 'success' });
      // `ollama create` FROM a model only the Ollama store has: linked in first, its settings under the request's.
      writeOllamaStoreModel(store, 'plain:1b', stack.files.tiny, { params: { num_predict: 2 } });
      const made = await fetch(`${stack.api.url}/api/create`, { method: 'POST', body: JSON.stringify({ model: 'mine:v2', from: 'plain:1b', system: 'Mine.' }) });
      expect((await made.text()).trim().split('\n').map((l) => JSON.parse(l).status)).toEqual(["using ollama's model plain:1b", 'using existing model plain:1b', 'writing manifest', 'success']);
      const mine = await stack.post('/api/show', { model: 'mine:v2' });
      expect([mine.body.system, mine.body.parameters]).toEqual(['Mine.', expect.stringMatching(/num_predict\s+2/)]);
      expect(fs.existsSync(`${stack.dir}/models/plain:1b.gguf`)).toBe(true);
      const streamed = await fetch(`${stack.api.url}/api/create`, { method: 'POST', body: JSON.stringify({ model: 'mine:v3', from: 'plain:1b' }) });
      expect(await streamed.text()).not.toContain("using ollama's model");
      for (const m of ['terse:2b', 'mine:v2', 'mine:v3', 'plain:1b']) expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: m }) })).status).toBe(200);
      expect(fs.existsSync(path.join(store, 'blobs', lines[1].digest.replace(':', '-')))).toBe(true);
    } finally {
      delete process.env.OLLAMA_MODELS;
    }
  }, 60_000);

  it('pulls hf.co/USER/REPO:QUANT as `ollama pull` does, the model then answering to that name; other names are a 501', async () => {
    const gguf = fs.readFileSync(stack.files.tiny);
    const h = await startHubEmulator({ 'moe-Q8_0.gguf': gguf, 'moe-Q4_K_M.gguf': Buffer.from('not this one') });
    const before = process.env.HF_ENDPOINT;
    process.env.HF_ENDPOINT = h.url;
    // (No Ollama store: the developer's own must not answer for these names.)
    process.env.OLLAMA_MODELS = path.join(stack.dir, 'no-ollama');
    try {
      const r = await fetch(`${stack.api.url}/api/pull`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'hf.co/team/moe-GGUF:Q8_0' }) });
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toContain('application/x-ndjson');
      const lines = (await r.text()).trim().split('\n').map((l) => JSON.parse(l));
      expect(lines[0]).toEqual({ status: 'pulling manifest' });
      const digest = `sha256:${createHash('sha256').update(gguf).digest('hex')}`;
      expect(lines).toContainEqual({ status: `pulling ${digest.slice(7, 19)}`, digest, total: gguf.length, completed: gguf.length });
      expect(lines.slice(-3)).toEqual([{ status: 'verifying sha256 digest' }, { status: 'writing manifest' }, { status: 'success' }]);
      expect(fs.readFileSync(`${stack.dir}/models/moe-Q8_0.gguf`).equals(gguf)).toBe(true);
      expect(((await get('/api/tags')).models as { name: string }[]).map((m) => m.name)).toContain('moe-Q8_0:latest');
      // The name it was pulled by finds it, on Ollama's routes and OpenAI's.
      const want = (await chat('tiny')).body.message.content;
      const byPulled = await chat('hf.co/team/moe-GGUF:Q8_0');
      expect(byPulled.status).toBe(200);
      expect(byPulled.body.message.content).toBe(want);
      expect((await stack.post('/api/show', { model: 'hf.co/team/moe-GGUF:Q8_0' })).body.details.family).toBe('qwen3moe');
      expect((await stack.post('/v1/chat/completions', { model: 'hf.co/team/moe-GGUF:Q8_0', messages, max_tokens: 2 })).status).toBe(200);
      // stream: false answers once; the file is there already.
      expect((await stack.post('/api/pull', { model: 'hf.co/team/moe-GGUF:Q8_0', stream: false })).body).toEqual({ status: 'success' });
      const bad = await stack.post('/api/pull', { model: 'hf.co/team/moe-GGUF:IQ1_S', stream: false });
      expect(bad.status).toBe(400);
      expect(bad.body.error).toMatch(/no GGUF model file for 'IQ1_S'/);
      const registry = await stack.post('/api/pull', { model: 'llama3.2' });
      expect(registry.status).toBe(501);
      expect(registry.body.error).toMatch(/'llama3.2' is neither a Hugging Face model \(hf.co\/USER\/REPO\[:QUANT\], a GGUF repository\) nor a model of this machine's Ollama store/);
      // `ollama rm` by the pulled name removes the file and forgets the name.
      const del = await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'hf.co/team/moe-GGUF:Q8_0' }) });
      expect(del.status).toBe(200);
      expect(fs.existsSync(`${stack.dir}/models/moe-Q8_0.gguf`)).toBe(false);
      expect((await chat('hf.co/team/moe-GGUF:Q8_0')).status).toBe(404);
      // `ollama create` FROM hf.co/USER/REPO:QUANT pulls it first, as Ollama's does.
      const made = await fetch(`${stack.api.url}/api/create`, { method: 'POST', body: JSON.stringify({ model: 'fromhub', from: 'hf.co/team/moe-GGUF:Q8_0', system: 'Hub.' }) });
      const statuses = (await made.text()).trim().split('\n').map((l) => (JSON.parse(l) as { status: string }).status);
      expect(statuses[0]).toBe('pulling manifest');
      expect(statuses).toContain('verifying sha256 digest');
      expect(statuses.slice(-3)).toEqual(['using existing model moe-Q8_0', 'writing manifest', 'success']);
      expect((await stack.post('/api/show', { model: 'fromhub' })).body.system).toBe('Hub.');
      for (const m of ['fromhub', 'moe-Q8_0']) expect((await fetch(`${stack.api.url}/api/delete`, { method: 'DELETE', body: JSON.stringify({ model: m }) })).status).toBe(200);
    } finally {
      if (before === undefined) delete process.env.HF_ENDPOINT;
      else process.env.HF_ENDPOINT = before;
      delete process.env.OLLAMA_MODELS;
      h.close();
    }
  }, 120_000);

  it("answers llama-server's router endpoints: GET /models, POST /models/load and /models/unload", async () => {
    const status = async () => Object.fromEntries(((await get('/models')).data as { id: string; status: { value: string } }[]).map((m) => [m.id, m.status.value]));
    if ((await status()).lazy === 'loaded') expect((await stack.post('/models/unload', { model: 'lazy' })).body).toEqual({ success: true });
    expect(await status()).toEqual({ tiny: 'loaded', lazy: 'unloaded' });
    expect((await stack.post('/models/load', { model: 'lazy' })).body).toEqual({ success: true });
    expect(await status()).toEqual({ tiny: 'loaded', lazy: 'loaded' });
    expect((await stack.post('/models/unload', { model: 'lazy' })).body).toEqual({ success: true });
    expect(await status()).toEqual({ tiny: 'loaded', lazy: 'unloaded' });
    const bad: [string, unknown, number, RegExp][] = [
      ['/models/load', {}, 400, /model/],
      ['/models/load', { model: 'nope' }, 404, /The model 'nope' does not exist/],
      ['/models/unload', { model: 'lazy' }, 404, /model 'lazy' is not loaded/],
    ];
    for (const [p, body, code, why] of bad) {
      const r = await stack.post(p, body);
      expect([p, r.status]).toEqual([p, code]);
      expect(r.body.error.message).toMatch(why);
    }
  }, 60_000);
});
