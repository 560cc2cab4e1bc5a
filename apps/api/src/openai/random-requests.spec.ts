import fs from 'node:fs';
import { engine as pb } from '@kailstream/proto';
import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { startSchedulerServer, type RunningSchedulerServer } from '@kailstream/scheduler';
import { parseApiConfig } from '../env';
import { startApi, type RunningApi } from '../server';

// Random bodies for the completion routes, /v1/embeddings and llama-server's routes (seeded, so a failure reproduces): fields replaced
// by values of other types and ranges, removed, or the JSON cut short. Whatever comes in, the
// answer is 200 or a 4xx in OpenAI's error shape, and the server keeps serving.
jest.setTimeout(120_000);
describe('OpenAI routes under random requests', () => {
  const dir = tempDir();
  let engine: RunningEngineServer; let sched: RunningSchedulerServer; let api: RunningApi; let key: string;
  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 8, defaultContext: 256 });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny', contextLength: 256, threads: 2 }));
    engine = await startEngineServer(host, { port: 0 });
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], slotsPerEngine: 8, maxQueued: 40, maxQueuedPerTenant: 40, probeIntervalMs: 500 });
    api = await startApi(parseApiConfig({ port: 0, schedulerAddress: `127.0.0.1:${sched.port}`, dataDir: dir, readyMaxAgeS: 5 }));
    key = api.keys!.create('tests').key;
  }, 60_000);
  afterAll(async () => { await api?.close(); await sched?.close(100); await engine?.close(100); fs.rmSync(dir, { recursive: true, force: true }); });

  it('answer 200 or a 4xx naming the problem, never 5xx', async () => {
    let seed = Number(process.env.KAIL_FUZZ_SEED ?? 1);
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const pick = <T,>(a: T[]) => a[Math.floor(rnd() * a.length)];
    const vals = (): unknown => pick<unknown>([null, 0, -1, 1, 2, 0.5, 1e308, -1e308, 2 ** 31, 2 ** 32 + 1, 2 ** 53, 2 ** 63, 1e-320, '', 'x', '1', 'tiny', '\u0000', '\ud800', 'a'.repeat(5000), [], [1], ['a'], ['a', 'b'], [[1, 2], [3]], [[]], [[1], 'a'], {}, { a: 1 }, true, false, [{ role: 'user', content: 'hi' }], [{ type: 'text', text: 'x' }], [{ type: 'image_url' }], Array(40).fill('s'),
      // well-formed values of the structured fields, some of them refused
      { type: 'json_object' }, { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } } },
      { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object', properties: { a: { pattern: 'x' } } } } }, { type: 'json_schema', json_schema: { schema: { $ref: '#/x' } } },
      [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], [{ type: 'function', function: { name: 'bad name' } }], 'auto', 'none', 'required',
      { 0: 5 }, { 1: -100, 2: 100 }, { 99999999: 1 }, { '-1': 1 }, { 3: 101 },
      { type: 'function', function: { name: 'f' } }, 'deepseek', { enable_thinking: false }, { messages: [] }, { x: { y: [1] } },
      ['red', 'green'], ['a', 'ab'], 'kpt', ['top_k', 'temp'], ['\n'], [0, 5], [1e9], '{"type":"object"}', { type: 'object', properties: { ok: { type: 'boolean' } } },
      // grammars, regexes and vLLM's structured_outputs, well-formed or not
      'root ::= "a" [0-9]*', 'root ::= x', 'root ::= "a"{3,1}', '[a-z]+\\d?', '(a)\\1', '(?=x)', { choice: ['x', 'y'] }, { regex: '[0-9]{2}' }, { json: { type: 'object' } }, { json_object: true }, { grammar: 'root ::= "z"' }, { regex: 'a', choice: ['a'] }, { structural_tag: {} },
      true, [{ type: 2, value: '[0-9]' }], [{ type: 0, token: 5 }], [{ type: 1, value: 'he' }], [{ type: 3, value: '(' }], [{ type: 0, token: 99999999 }], [{ type: 9 }]]);
    const baseChat = () => ({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, temperature: 0 } as Record<string, unknown>);
    const baseComp = () => ({ model: 'tiny', prompt: 'hello', max_tokens: 4, temperature: 0 } as Record<string, unknown>);
    const baseEmb = () => ({ model: 'tiny', input: 'hello' } as Record<string, unknown>);
    const fields = ['model', 'messages', 'prompt', 'input', 'encoding_format', 'dimensions', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'seed', 'stop', 'stream', 'stream_options', 'logprobs', 'top_logprobs', 'n', 'top_k', 'min_p', 'repeat_penalty', 'presence_penalty', 'frequency_penalty', 'ignore_eos', 'user', 'echo', 'suffix', 'best_of', 'logit_bias', 'response_format', 'tools', 'tool_choice', 'parallel_tool_calls', 'chat_template_kwargs', 'reasoning_format', 'reasoning_budget_tokens', 'thinking_budget_tokens', 'reasoning_budget_message',
      // llama-server's and vLLM's extra fields
      'repeat_last_n', 'typical_p', 'top_n_sigma', 'xtc_probability', 'xtc_threshold', 'min_keep', 'dry_multiplier', 'dry_sequence_breakers', 'mirostat', 'samplers',
      'json_schema', 'grammar', 'guided_json', 'guided_choice', 'guided_regex', 'guided_grammar', 'structured_outputs', 'min_tokens', 'stop_token_ids', 'include_stop_str_in_output', 'repetition_penalty', 'timings_per_token',
      'grammar_lazy', 'grammar_triggers', 'adaptive_target', 'adaptive_decay'];
    const bad: string[] = []; const hist: Record<string, number> = {};
    const N = Number(process.env.KAIL_FUZZ_N ?? 600);
    for (let i = 0; i < N; i++) {
      const route = rnd();
      const chatRoute = route < 0.55;
      const embRoute = !chatRoute && route >= 0.85;
      const body = chatRoute ? baseChat() : embRoute ? baseEmb() : baseComp();
      const nm = 1 + Math.floor(rnd() * 3);
      for (let j = 0; j < nm; j++) {
        const f = pick(fields);
        if (rnd() < 0.15) delete body[f]; else body[f] = vals();
        if (f === 'messages' && rnd() < 0.5) body.messages = [{ role: pick(['user', 'system', 'assistant', 'tool', 'bogus', 1, null]), content: vals(), name: rnd() < 0.2 ? vals() : undefined }];
      }
      if (typeof body.max_tokens === 'number' && body.max_tokens > 64 && rnd() < 0.9) body.max_tokens = 8;
      let raw = JSON.stringify(body);
      if (rnd() < 0.05) raw = raw.slice(0, Math.floor(rnd() * raw.length));
      const path = chatRoute ? '/v1/chat/completions' : embRoute ? '/v1/embeddings' : '/v1/completions';
      const ctl = new AbortController(); const t = setTimeout(() => ctl.abort(), 60_000);
      try {
        const r = await fetch(`${api.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: raw, signal: ctl.signal });
        const text = await r.text(); hist[r.status] = (hist[r.status] ?? 0) + 1;
        if (r.status >= 500 || (r.status >= 400 && !/"error":\{"message"/.test(text))) bad.push(`${r.status} ${path} ${raw.slice(0, 300)} -> ${text.slice(0, 300)}`);
        // (Embeddings do not stream: stream is not one of their fields.)
        if (r.status === 200 && body.stream === true && !embRoute && !text.includes('[DONE]')) bad.push(`stream no DONE ${raw.slice(0,300)} -> ${text.slice(-300)}`);
      } catch (e) { bad.push(`fetch failed ${path} ${raw.slice(0, 300)}: ${String(e)}`); }
      clearTimeout(t);
    }
    const ok = await fetch(`${api.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify(baseChat()) });
    expect(bad).toEqual([]);
    expect(hist[200]).toBeGreaterThan(N / 20);
    expect(hist[400]).toBeGreaterThan(N / 20);
    expect(ok.status).toBe(200);
  });

  /**
   * Seeded random bodies from `bases`: 1-3 fields replaced by `vals` or removed, now and then the
   * JSON cut short. Collects each answer that is a 5xx, an error without a message, or a stream
   * that `streamOk` refuses; returns them with the count of each status.
   */
  async function fuzz(o: {
    seed: number; n: number; headers: Record<string, string>; vals: unknown[]; fields: string[];
    bases: Record<string, () => Record<string, unknown>>;
    lengths: string[]; maxLength: number; minLength: number;
    errorShape: RegExp; streamOk: (path: string, text: string) => boolean;
  }): Promise<{ bad: string[]; hist: Record<string, number> }> {
    let seed = o.seed;
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const pick = <T,>(a: T[]) => a[Math.floor(rnd() * a.length)];
    const bad: string[] = []; const hist: Record<string, number> = {};
    for (let i = 0; i < o.n; i++) {
      const path = pick(Object.keys(o.bases));
      const body = o.bases[path]();
      const nm = 1 + Math.floor(rnd() * 3);
      for (let j = 0; j < nm; j++) {
        const f = pick(o.fields);
        if (rnd() < 0.15) delete body[f]; else body[f] = pick(o.vals);
      }
      // Mostly short answers: the point is the parsing, not long generations.
      for (const f of o.lengths) if ((typeof body[f] !== 'number' || (body[f] as number) < o.minLength || (body[f] as number) > o.maxLength) && rnd() < 0.9) body[f] = o.maxLength / 2;
      let raw = JSON.stringify(body);
      if (rnd() < 0.05) raw = raw.slice(0, Math.floor(rnd() * raw.length));
      const ctl = new AbortController(); const t = setTimeout(() => ctl.abort(), 60_000);
      try {
        const r = await fetch(`${api.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...o.headers }, body: raw, signal: ctl.signal });
        const text = await r.text(); hist[r.status] = (hist[r.status] ?? 0) + 1;
        if (r.status >= 500 || (r.status >= 400 && !o.errorShape.test(text))) bad.push(`${r.status} ${path} ${raw.slice(0, 300)} -> ${text.slice(0, 300)}`);
        if (r.status === 200 && body.stream === true && !o.streamOk(path, text)) bad.push(`stream without its last event ${raw.slice(0, 300)} -> ${text.slice(-300)}`);
      } catch (e) { bad.push(`fetch failed ${path} ${raw.slice(0, 300)}: ${String(e)}`); }
      clearTimeout(t);
    }
    return { bad, hist };
  }

  it("llama-server's routes: 200 or a 4xx naming the problem, never 5xx", async () => {
    const N = Number(process.env.KAIL_FUZZ_N ?? 300);
    const { bad, hist } = await fuzz({
      seed: Number(process.env.KAIL_FUZZ_SEED ?? 2), n: N, headers: { authorization: `Bearer ${key}` },
      vals: [null, 0, -1, -2, 1, 2, 0.5, 1e308, 2 ** 31, 2 ** 53, '', 'x', 'tiny', '\u0000', '\ud800', 'a'.repeat(5000), [], [1], [0, 1, 2], [-1], [1e12], ['a'],
        [{ filename: 'a.py', text: 'x = 1' }], [{ text: 'y' }], [{ filename: 3, text: 'z' }], [{ filename: 'b' }], [[1, 2], [3, false]], [[1, 'x']], {}, { 5: 1 }, true, false, '<|fim_prefix|>',
        ['\n', ':'], [''], ['x'.repeat(100)], 0.1, 1.75, 5, 100, -1e9],
      bases: {
        '/completion': () => ({ prompt: 'hello', n_predict: 4, temperature: 0 }),
        '/infill': () => ({ input_prefix: 'def f(x):\n    ', input_suffix: '\n    return y\n', n_predict: 4 }),
        '/tokenize': () => ({ content: 'hello' }),
        '/detokenize': () => ({ tokens: [1, 2, 3] }),
        '/embedding': () => ({ content: 'hello' }),
      },
      fields: ['embd_normalize', 'input', 'model', 'prompt', 'n_predict', 'max_tokens', 'temperature', 'top_k', 'top_p', 'min_p', 'seed', 'stop', 'stream', 'n_probs', 'return_tokens', 'logit_bias', 'ignore_eos', 'repeat_penalty',
        'input_prefix', 'input_suffix', 'input_extra', 'content', 'add_special', 'parse_special', 'with_pieces', 'tokens',
        // llama.cpp's further samplers
        'repeat_last_n', 'typical_p', 'top_n_sigma', 'xtc_probability', 'xtc_threshold', 'min_keep', 'dynatemp_range', 'dynatemp_exponent', 'dry_multiplier', 'dry_base',
        'dry_allowed_length', 'dry_penalty_last_n', 'dry_sequence_breakers', 'mirostat', 'mirostat_tau', 'mirostat_eta', 'timings_per_token'],
      lengths: ['n_predict', 'max_tokens'], minLength: 0, maxLength: 16,
      errorShape: /"error":\{"message"/,
      streamOk: (path, text) => (path !== '/completion' && path !== '/infill') || text.includes('"stop":true'),
    });
    expect(bad).toEqual([]);
    expect(hist[200]).toBeGreaterThan(N / 20);
    expect(hist[400]).toBeGreaterThan(N / 20);
    expect((await fetch(`${api.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: '{"content":"hi"}' })).status).toBe(200);
  });

  it("Anthropic's Messages routes and /apply-template: 200 or a 4xx naming the problem, never 5xx", async () => {
    const N = Number(process.env.KAIL_FUZZ_N ?? 200);
    const { bad, hist } = await fuzz({
      seed: Number(process.env.KAIL_FUZZ_SEED ?? 3), n: N, headers: { 'x-api-key': key },
      vals: [null, 0, -1, 1, 2, 0.5, 1e308, 2 ** 53, '', 'x', 'tiny', '\u0000', '\ud800', 'a'.repeat(5000), [], [1], ['a'], {}, true, false,
        [{ role: 'user', content: 'hi' }], [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] }],
        [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'ok' }] }], [{ role: 'user', content: [{ type: 'image', source: {} }] }], [{ role: 'bot', content: 'x' }],
        [{ name: 'f', input_schema: { type: 'object' } }], [{ name: 'bad name', input_schema: {} }], { type: 'any' }, { type: 'tool', name: 'f' }, { type: 'none' }, { type: 'enabled', budget_tokens: 10 },
        [{ type: 'text', text: 'sys' }], ['\n\n']],
      bases: {
        '/v1/messages': () => ({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }], temperature: 0 }),
        '/v1/messages/count_tokens': () => ({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }] }),
        '/apply-template': () => ({ messages: [{ role: 'user', content: 'hello' }] }),
      },
      fields: ['model', 'max_tokens', 'messages', 'system', 'stop_sequences', 'temperature', 'top_p', 'top_k', 'stream', 'tools', 'tool_choice', 'thinking', 'seed', 'metadata', 'chat_template_kwargs'],
      lengths: ['max_tokens'], minLength: 1, maxLength: 8,
      // Anthropic's {"type":"error","error":{"type":…,"message":…}} (malformed JSON too), or OpenAI's from /apply-template.
      errorShape: /"error":\{("type":"[a-z_]+",)?"message"/,
      streamOk: (path, text) => path !== '/v1/messages' || text.includes('event: message_stop'),
    });
    expect(bad).toEqual([]);
    expect(hist[200]).toBeGreaterThan(N / 20);
    expect(hist[400]).toBeGreaterThan(N / 20);
  });

  it("OpenAI's Responses API: 200 or a 4xx naming the problem, never 5xx", async () => {
    const N = Number(process.env.KAIL_FUZZ_N ?? 200);
    const { bad, hist } = await fuzz({
      seed: Number(process.env.KAIL_FUZZ_SEED ?? 4), n: N, headers: { authorization: `Bearer ${key}` },
      vals: [null, 0, -1, 1, 2, 0.5, 1e308, 2 ** 53, '', 'x', 'tiny', '\u0000', '\ud800', 'a'.repeat(5000), [], [1], ['a'], {}, true, false, 'auto', 'required', 'none', 'resp_x',
        [{ role: 'user', content: 'hi' }], [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }], [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'a' }] }],
        [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c', output: 'ok' }], [{ type: 'reasoning', summary: [{ type: 'summary_text', text: 's' }] }],
        [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }], [{ type: 'item_reference', id: 'x' }], [{ role: 'bot', content: 'x' }],
        [{ type: 'function', name: 'f', parameters: { type: 'object' } }], [{ type: 'web_search' }], { type: 'function', name: 'f' },
        { format: { type: 'json_object' } }, { format: { type: 'json_schema', name: 's', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } } }, { format: { type: 'xml' } },
        { effort: 'none' }, { effort: 'high' }, ['reasoning.encrypted_content'], ['message.output_text.logprobs'], { k: 'v' }],
      bases: { '/v1/responses': () => ({ model: 'tiny', input: 'hello', max_output_tokens: 4, temperature: 0, store: false }) },
      fields: ['model', 'input', 'instructions', 'max_output_tokens', 'temperature', 'top_p', 'tools', 'tool_choice', 'parallel_tool_calls', 'text', 'reasoning', 'stream', 'store',
        'previous_response_id', 'metadata', 'include', 'top_logprobs', 'background', 'truncation', 'seed', 'top_k', 'chat_template_kwargs'],
      lengths: ['max_output_tokens'], minLength: 1, maxLength: 8,
      errorShape: /"error":\{"message"/,
      streamOk: (_path, text) => /event: response\.(completed|incomplete)\n/.test(text),
    });
    expect(bad).toEqual([]);
    expect(hist[200]).toBeGreaterThan(N / 20);
    expect(hist[400]).toBeGreaterThan(N / 20);
  });

  it("Ollama's API: 200 or a 4xx with its {error} body, never 5xx", async () => {
    const N = Number(process.env.KAIL_FUZZ_N ?? 200);
    const { bad, hist } = await fuzz({
      seed: Number(process.env.KAIL_FUZZ_SEED ?? 5), n: N, headers: { authorization: `Bearer ${key}` },
      vals: [null, 0, -1, -2, 1, 2, 0.5, 1e308, 2 ** 53, '', 'x', 'tiny', 'tiny:latest', 'json', '0', '5m', '1h30m', '-1m', 'forever', '300', '\u0000', '\ud800', 'a'.repeat(5000), [], [1], [1, 2, 3], ['a'], {}, true, false, 'high',
        [{ role: 'user', content: 'hi' }], [{ role: 'assistant', content: '', tool_calls: [{ function: { name: 'f', arguments: { a: 1 } } }] }, { role: 'tool', content: 'ok', tool_name: 'f' }],
        [{ role: 'user', content: 'x', images: ['aGk='] }], [{ role: 'robot', content: 'x' }], [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
        { type: 'object', properties: { a: { type: 'boolean' } }, required: ['a'] }, { temperature: 0, num_predict: 3 }, { num_predict: -1, top_k: 1 }, { mirostat: 2 }, { stop: ['\n'], seed: 3 },
        { temperature: -1 }, { repeat_last_n: -1, repeat_penalty: 1.3 }, { num_ctx: 99999, num_thread: 4 },
        // Go templates (the template field): good, failing, broken, over the limits.
        '{{ .Prompt }}', '{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}{{ json .Tools }}', '{{ index .Messages 9 }}', '{{ .Prompt', '{{ printf "%*d" 99999999 1 }}', '{{ range 2000000 }}{{ end }}'],
      bases: {
        '/api/chat': () => ({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }], stream: false, options: { num_predict: 4, temperature: 0 } }),
        '/api/generate': () => ({ model: 'tiny', prompt: 'hello', stream: false, options: { num_predict: 4, temperature: 0 } }),
        '/api/embed': () => ({ model: 'tiny', input: 'hello' }),
        '/api/show': () => ({ model: 'tiny' }),
      },
      fields: ['model', 'messages', 'prompt', 'input', 'system', 'suffix', 'raw', 'context', 'format', 'options', 'stream', 'think', 'keep_alive', 'tools', 'images', 'template', 'truncate', 'dimensions', 'logprobs', 'top_logprobs'],
      // (options carry the length; the fuzz's length guard does not reach inside it.)
      lengths: [], minLength: 0, maxLength: 8,
      errorShape: /^\{"error":"/,
      streamOk: (path, text) => !['/api/chat', '/api/generate'].includes(path) || /"done":true/.test(text.trim().split('\n').at(-1) ?? ''),
    });
    expect(bad).toEqual([]);
    expect(hist[200]).toBeGreaterThan(N / 20);
    expect(hist[400]).toBeGreaterThan(N / 20);
  });
});
