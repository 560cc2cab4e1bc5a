import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { common, engine as pb, scheduler as spb } from '@kailstream/proto';

import { writeTestModel } from '@kailstream/engine/testing';

import { parseModelfile, planCreate } from './commands/create';
import { applyAliases, serve, staticApiKeys } from './commands/serve';
import type { Supervisor } from './supervisor';

function unary<Res>(fn: (req: object, md: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown): Promise<Res> {
  return new Promise((resolve, reject) => fn({}, new grpc.Metadata(), { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))));
}

describe('kail serve', () => {
  let sup: Supervisor;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-serve-'));
  const lines: string[] = [];

  beforeAll(async () => {
    const model = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    // (--override-kv reaches the engine: the model routes to 2 of its experts, not the file's 4.)
    // (So do RoPE flags: the engine takes them, or it would not start. And --ram and --threads.)
    // (--alias: the model's id is 'tiny', and it answers to the other names too.)
    sup = await serve({ host: '127.0.0.1', port: '0', dataDir: dir, web: true, model: [model], alias: ['tiny,gpt-4o-mini', 'org/tiny'], corsOrigins: 'https://app.example', corsCredentials: false, nPredict: 3, temp: 0, lookup: true, specK: 3, chatTemplateKwargs: '{"enable_thinking": false}', reasoningFormat: 'none', timeout: 120, ctx: '512', overrideKv: ['qwen3moe.expert_used_count=int:2'], rope: { 'rope-freq-base': '20000' }, parallel: '3', threads: '1', ram: '300M' }, (l) => lines.push(l));
  }, 120_000);

  afterAll(async () => {
    await sup?.stopAll();
    fs.rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('refuses a malformed --override-kv before starting anything', async () => {
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, overrideKv: ['qwen3moe.expert_used_count=2'] })).rejects.toThrow(/--override-kv 'qwen3moe.expert_used_count=2': no TYPE: before the value/);
    expect(fs.existsSync(path.join(dir, 'never'))).toBe(false);
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, rope: { 'rope-scale': 'x' } })).rejects.toThrow("--rope-scale takes a number, got 'x'");
    expect(fs.existsSync(path.join(dir, 'never'))).toBe(false);
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, model: ['x.gguf'], lookup: true, mtp: true })).rejects.toThrow('give one of --draft FILE, --lookup and --mtp');
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, lookup: true })).rejects.toThrow(/speculate for the models given with -m or -hf/);
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, chatTemplateKwargs: 'enable_thinking=false' })).rejects.toThrow(/--chat-template-kwargs takes a JSON object/);
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, ram: '8X' })).rejects.toThrow(/--ram: .*8X/);
    expect(fs.existsSync(path.join(dir, 'never'))).toBe(false);
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'never'), web: false, chatTemplateFile: path.join(dir, 'none.jinja') })).rejects.toThrow(/--chat-template-file: cannot read .*none.jinja/);
    expect(fs.existsSync(path.join(dir, 'never'))).toBe(false);
    // The API's own flags are checked by the API (main.js --check) before the engine starts.
    const started: string[] = [];
    const api = (o: Partial<Parameters<typeof serve>[0]>) => serve({ host: '127.0.0.1', port: '0', dataDir: path.join(dir, 'api-check'), web: false, model: ['x.gguf'], ...o }, (l) => started.push(l));
    await expect(api({ corsOrigins: 'not an origin' })).rejects.toThrow(/invalid API configuration: corsOrigins: .*'not an origin' is not an origin/);
    await expect(api({ apiPrefix: 'llm/' })).rejects.toThrow(/invalid API configuration: apiPrefix: an API prefix is a path such as \/llm/);
    fs.writeFileSync(path.join(dir, 'junk.pem'), 'not a key');
    await expect(api({ sslKeyFile: path.join(dir, 'junk.pem'), sslCertFile: path.join(dir, 'junk.pem') })).rejects.toThrow(/--ssl-key-file: .*junk\.pem is not a PEM file/);
    await expect(api({ host: '0.0.0.0' })).rejects.toThrow(/refusing to listen on 0\.0\.0\.0 \(beyond loopback\) without an API key/);
    expect(started.filter((l) => /^engine/.test(l))).toEqual([]);
  });

  it('starts every service as its own process and prints their addresses', () => {
    expect([...sup.services.keys()]).toEqual(['engine', 'scheduler', 'api', 'web']);
    const pids = new Set([...sup.services.values()].map((s) => s.child.pid));
    expect(pids.size).toBe(4);
    expect(lines.join('\n')).toMatch(/engine\s+grpc:\/\/127\.0\.0\.1:\d+/);
    const state = JSON.parse(fs.readFileSync(path.join(dir, 'serve.json'), 'utf8'));
    expect(Object.keys(state.services)).toEqual(['engine', 'scheduler', 'api', 'web']);
  });

  it('engine and scheduler answer health over gRPC', async () => {
    const e = new pb.EngineServiceClient(sup.services.get('engine')!.address, grpc.credentials.createInsecure());
    const s = new spb.SchedulerServiceClient(sup.services.get('scheduler')!.address, grpc.credentials.createInsecure());
    try {
      expect((await unary<common.HealthResponse>(e.health.bind(e))).status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
      expect((await unary<common.HealthResponse>(s.health.bind(s))).status).toBe(common.ServingStatus.SERVING_STATUS_SERVING);
      const engines = await unary<spb.ListEnginesResponse>(s.listEngines.bind(s));
      expect(engines.engines[0].address).toBe(sup.services.get('engine')!.address);
      const models = await unary<pb.ListModelsResponse>(e.listModels.bind(e));
      // The 30 MB file fits the engine's --ram 300M: in memory; plans are made against that budget.
      expect(models.models.find((m) => m.id === 'tiny')).toMatchObject({ expertCount: 16, expertUsedCount: 2, ramBudgetBytes: 0 });
      const plan = await new Promise<pb.PlanModelResponse>((resolve, reject) =>
        e.planModel(pb.PlanModelRequest.fromPartial({ path: models.models.find((m) => m.id === 'tiny')!.path }), (err, r) => (err ? reject(err) : resolve(r))),
      );
      expect(JSON.parse(plan.planJson).ramBytes).toBe(300 * 2 ** 20);
      const argv = fs.readFileSync(`/proc/${sup.services.get('engine')!.child.pid}/cmdline`, 'utf8').split('\0');
      expect(argv.slice(argv.indexOf('--threads'), argv.indexOf('--threads') + 2)).toEqual(['--threads', '1']);
    } finally {
      e.close();
      s.close();
    }
  });

  it('the API answers /health, /v1/models and a chat completion through scheduler and engine', async () => {
    const api = sup.services.get('api')!.address;
    expect(api).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${api}/health`)).status).toBe(200);
    const models = (await (await fetch(`${api}/v1/models`)).json()) as { object: string; data: { id: string }[] };
    expect(models.object).toBe('list');
    expect(models.data).toEqual([expect.objectContaining({ id: 'tiny', aliases: ['gpt-4o-mini', 'org/tiny'] })]);
    const chat = async (model: string) => {
      const r = await fetch(`${api}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 5, temperature: 0 }),
      });
      expect(r.status).toBe(200);
      return (await r.json()) as { model: string; usage: { completion_tokens: number }; choices: { message: { content: string } }[] };
    };
    const body = await chat('tiny');
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    // -n 3 and --temp 0 reach the API as defaults: a request without max_tokens stops at 3.
    const r = await fetch(`${api}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'Hi' }) });
    expect(((await r.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
    // --reasoning-format and --timeout (-to) reach the API.
    const apiArgv = fs.readFileSync(`/proc/${sup.services.get('api')!.child.pid}/cmdline`, 'utf8').split('\0');
    expect(apiArgv.join(' ')).toContain('--reasoning-format none --request-timeout 120');
    // --cors-origins and --no-cors-credentials reach the API.
    const pre = await fetch(`${api}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
    expect([pre.status, pre.headers.get('access-control-allow-origin'), pre.headers.get('access-control-allow-credentials')]).toEqual([204, 'https://app.example', null]);
    expect((await fetch(`${api}/v1/models`, { headers: { origin: 'http://localhost:3000' } })).headers.get('access-control-allow-origin')).toBeNull();
    // An alias reaches the same model.
    expect((await chat('org/tiny')).choices[0].message.content).toBe(body.choices[0].message.content);
    // --parallel 3 (llama-server's -np): the model has three slots.
    // (Polled, 30 s at most: /slots answers once the API has the engine's telemetry, a second or
    // so after start, later on a loaded machine; so do the speculative counters below.)
    let slots: unknown[] = [];
    const end = Date.now() + 30_000;
    while (!slots.length && Date.now() < end) {
      const res = await fetch(`${api}/slots`);
      if (res.status === 200) slots = (await res.json()) as unknown[];
      else await new Promise((r) => setTimeout(r, 100));
    }
    expect(slots).toHaveLength(3);
    // --lookup reaches the engine: the model speculates (its speculative counters are exported).
    let metrics = '';
    while (!/kailstream:spec_decode_num_draft_tokens_total\{[^}]*model="tiny"/.test(metrics) && Date.now() < end) {
      metrics = await (await fetch(`${api}/metrics`)).text();
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(metrics).toMatch(/kailstream:spec_decode_num_draft_tokens_total\{[^}]*model="tiny"[^}]*\} \d+/);
  }, 60_000);

  it("kail create NAME -f Modelfile (ollama create's): the FROM file goes up once as a blob; SYSTEM, PARAMETER and MESSAGE lines hold for the model; /api/show's Modelfile reads back the same", async () => {
    const api = sup.services.get('api')!.address;
    const src = path.join(dir, 'import');
    fs.mkdirSync(src);
    writeTestModel(src, 'tiny-qwen3moe', 'F32');
    const file = fs.readdirSync(src).find((n) => n.endsWith('.gguf'))!;
    const system = 'You are "Mario".\nAnswer briefly.';
    const modelfile = `# made for the test\nFROM ./${file}\nSYSTEM """${system}"""\nPARAMETER temperature 0\nPARAMETER num_predict 4\nPARAMETER stop "zz top"\nMESSAGE user Hi\nMESSAGE assistant Hello!\n`;
    fs.writeFileSync(path.join(src, 'Modelfile'), modelfile);
    // Through the CLI, which finds the API in the data directory's serve.json.
    const run = (...args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const c = spawn(process.execPath, [path.resolve(__dirname, '../bin/kail.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
        let out = '';
        c.stdout.on('data', (d) => (out += d));
        c.stderr.on('data', (d) => (out += d));
        c.on('close', (code) => resolve({ code, out }));
      });
    const first = await run('create', 'mario', '-f', path.join(src, 'Modelfile'), '--data-dir', dir);
    expect(first).toMatchObject({ code: 0 });
    expect(first.out).toMatch(/^copied sha256:[0-9a-f]{64} /m);
    expect(first.out.trim().split('\n').at(-1)).toBe('success');
    const again = await run('create', 'mario', '-f', path.join(src, 'Modelfile'), '--data-dir', dir);
    expect(again.out).toMatch(/^using existing layer sha256:[0-9a-f]{64} /m);
    const post = async (route: string, body: object) => (await fetch(`${api}${route}`, { method: 'POST', body: JSON.stringify(body) })).json() as Promise<Record<string, unknown>>;
    const show = await post('/api/show', { model: 'mario' });
    expect(show.system).toBe(system);
    expect(show.messages).toEqual([{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello!' }]);
    // The Modelfile /api/show writes (Ollama's quoting) reads back as the same model.
    const back = planCreate(parseModelfile(show.modelfile as string), src);
    expect(back).toMatchObject({ system, parameters: { temperature: 0, num_predict: 4, stop: ['zz top'] }, messages: show.messages });
    expect(back.file).toBe(path.join(dir, 'models', 'mario.gguf'));
    // The PARAMETER lines hold: 4 tokens, at temperature 0 (so the same answer twice).
    const chat = async () => (await post('/api/chat', { model: 'mario', messages: [{ role: 'user', content: 'Tell me a story' }], stream: false })) as { eval_count: number; message: { content: string } };
    const [a, b] = [await chat(), await chat()];
    expect(a.eval_count).toBe(4);
    expect(b.message.content).toBe(a.message.content);
    // The settings live next to the model's file, so kail cp and kail rm (through the scheduler) carry them.
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'models', 'mario.modelfile.json'), 'utf8')).system).toBe(system);
    expect(await run('cp', 'mario', 'mario2', '--data-dir', dir)).toMatchObject({ code: 0 });
    expect((await post('/api/show', { model: 'mario2' })).system).toBe(system);
    expect(await run('rm', 'mario2', '--data-dir', dir)).toMatchObject({ code: 0 });
    fs.copyFileSync(path.join(src, file), path.join(dir, 'models', 'mario2.gguf'));
    expect((await post('/api/show', { model: 'mario2' })).system).toBe('');
    // kail show (ollama show's): the model, its settings; --modelfile writes a Modelfile kail create reads.
    const shown = await run('show', 'mario', '--data-dir', dir);
    expect(shown.code).toBe(0);
    expect(shown.out).toMatch(/^  Model\n    architecture\s+qwen3moe\n    parameters\s+\S+\n    context length\s+\d+\n/);
    expect(shown.out).toMatch(/^    experts\s+2 of 16 per token$/m);
    expect(shown.out).toMatch(/^  Parameters\n(    .*\n)*    num_predict\s+4$/m);
    expect(shown.out).toContain('  System\n    You are "Mario".\n    Answer briefly.\n');
    expect(shown.out).toContain('  Messages\n    user: Hi\n    assistant: Hello!\n');
    expect((await run('show', 'mario', '--system', '--data-dir', dir)).out).toBe(`${system}\n`);
    const mf = await run('show', 'mario', '--modelfile', '--data-dir', dir);
    fs.writeFileSync(path.join(src, 'Shown'), mf.out);
    expect(await run('create', 'peach', '-f', path.join(src, 'Shown'), '--data-dir', dir)).toMatchObject({ code: 0 });
    const peach = await post('/api/show', { model: 'peach' });
    expect([peach.system, peach.messages, peach.parameters]).toEqual([show.system, show.messages, show.parameters]);
    expect((await run('show', 'bowser', '--data-dir', dir)).out).toMatch(/showing 'bowser': HTTP 404: .*bowser/);
    // -q (ollama create -q): the F16 file is quantized on the server as it is imported, its progress streamed.
    const f16 = writeTestModel(src, 'tiny-qwen3moe', 'F16');
    fs.writeFileSync(path.join(src, 'Small'), `FROM ${f16}\n`);
    const small = await run('create', 'small', '-f', path.join(src, 'Small'), '-q', 'Q4_K_M', '--data-dir', dir);
    expect(small.code).toBe(0);
    expect(small.out).toMatch(/^quantizing model to Q4_K_M$/m);
    expect(((await post('/api/show', { model: 'small' })).details as { quantization_level: string }).quantization_level).toBe('Q4_K_M');
    // FROM a model of the server (by name), and a Modelfile it cannot use: an error, nothing made.
    fs.writeFileSync(path.join(src, 'Derived'), 'FROM mario\nPARAMETER num_predict 2\n');
    expect(await run('create', 'luigi', '-f', path.join(src, 'Derived'), '--data-dir', dir)).toMatchObject({ code: 0 });
    expect(((await post('/api/chat', { model: 'luigi', messages: [{ role: 'user', content: 'Hi' }], stream: false })) as { eval_count: number }).eval_count).toBe(2);
    expect((await post('/api/show', { model: 'luigi' })).system).toBe(system);
    // TEMPLATE (Ollama's Go template): kept for the model, shown, and read back from kail show --modelfile.
    const template = '{{ if .System }}<<{{ .System }}>>\n{{ end }}[{{ .Prompt }}]\n';
    fs.writeFileSync(path.join(src, 'Templated'), `FROM mario\nTEMPLATE "${'""'}${template}"${'""'}\n`);
    expect(await run('create', 'toad', '-f', path.join(src, 'Templated'), '--data-dir', dir)).toMatchObject({ code: 0 });
    expect((await post('/api/show', { model: 'toad' })).template).toBe(template);
    fs.writeFileSync(path.join(src, 'ToadShown'), (await run('show', 'toad', '--modelfile', '--data-dir', dir)).out);
    expect(await run('create', 'toad2', '-f', path.join(src, 'ToadShown'), '--data-dir', dir)).toMatchObject({ code: 0 });
    expect((await post('/api/show', { model: 'toad2' })).template).toBe(template);
    fs.writeFileSync(path.join(src, 'Bad'), 'FROM mario\nTEMPLATE {{ .Prompt }\n');
    const bad = await run('create', 'wario', '-f', path.join(src, 'Bad'), '--data-dir', dir);
    expect(bad.code).not.toBe(0);
    expect(bad.out).toMatch(/Modelfile line 2: TEMPLATE: template: :1: unexpected "}" in operand/);
    const missing = await run('create', 'wario', '-f', path.join(src, 'Derived'), '--url', 'http://127.0.0.1:9', '--data-dir', dir);
    expect(missing.out).toMatch(/cannot reach the API at http:\/\/127\.0\.0\.1:9 .*start kail serve, or give --url/);
    expect(fs.existsSync(path.join(dir, 'models', 'wario.gguf'))).toBe(false);
  }, 120_000);

  it('the web console renders its page', async () => {
    const res = await fetch(sup.services.get('web')!.address);
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain('KailStream');
    expect(html).toContain(sup.services.get('api')!.address);
  });
});

describe('kail serve --api-key / --api-key-file', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-serve-keys-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("reads llama-server's --alias: the one model's id becomes the first name that can be an id; the others alias it", () => {
    expect(applyAliases(['a, b', 'c'], ['/m/x.gguf'])).toEqual({ models: ['a=/m/x.gguf'], aliases: ['b=a', 'c=a'] });
    expect(applyAliases(['org/x,a'], ['old=/m/x.gguf'])).toEqual({ models: ['a=/m/x.gguf'], aliases: ['org/x=a'] });
    // (No name that can be an id: the model keeps its own, from -m ID=FILE or its file.)
    expect(applyAliases(['org/x'], ['old=/m/x.gguf'])).toEqual({ models: ['old=/m/x.gguf'], aliases: ['org/x=old'] });
    expect(applyAliases(['org/x'], ['/m/x.gguf'])).toEqual({ models: ['/m/x.gguf'], aliases: ['org/x=x'] });
    expect(applyAliases([], ['/m/x.gguf', '/m/y.gguf'])).toEqual({ models: ['/m/x.gguf', '/m/y.gguf'], aliases: [] });
    expect(() => applyAliases(['a'], ['/m/x.gguf', '/m/y.gguf'])).toThrow(/--alias names one model.*-m ID=FILE/);
    expect(() => applyAliases(['a'], [])).toThrow(/--alias names one model, as llama-server's: give one -m or -hf$/);
    expect(() => applyAliases(['a=b'], ['/m/x.gguf'])).toThrow("--alias: 'a=b' cannot hold spaces or '='");
  });

  it("reads llama-server's flags: comma-separated keys, a file of a key per line; bad ones are errors naming the flag", () => {
    const f = path.join(dir, 'keys.txt');
    fs.writeFileSync(f, 'k-three\n\n  k-four  \r\nk-one\n');
    expect(staticApiKeys(['k-one,k-two', 'k-five'], f)).toEqual(['k-one', 'k-two', 'k-five', 'k-three', 'k-four']);
    expect(staticApiKeys([], undefined)).toEqual([]);
    expect(() => staticApiKeys(['a,,b'], undefined)).toThrow('--api-key: an empty key');
    expect(() => staticApiKeys([], path.join(dir, 'none.txt'))).toThrow(/--api-key-file: cannot read .*none.txt: ENOENT/);
    fs.writeFileSync(path.join(dir, 'blank.txt'), '\n \n');
    expect(() => staticApiKeys([], path.join(dir, 'blank.txt'))).toThrow(/no key in it/);
    fs.writeFileSync(path.join(dir, 'spaced.txt'), 'a b\n');
    expect(() => staticApiKeys([], path.join(dir, 'spaced.txt'))).toThrow(/a key cannot hold spaces/);
  });

  it('the API then needs one of them (kept out of its command line)', async () => {
    const sup = await serve({ host: '127.0.0.1', port: '0', dataDir: dir, web: false, apiKey: ['k-lan'] }, () => undefined);
    try {
      const api = sup.services.get('api')!;
      expect((await fetch(`${api.address}/v1/models`)).status).toBe(401);
      expect((await fetch(`${api.address}/v1/models`, { headers: { authorization: 'Bearer k-lan' } })).status).toBe(200);
      expect(fs.readFileSync(`/proc/${api.child.pid}/cmdline`, 'utf8')).not.toContain('k-lan');
    } finally {
      await sup.stopAll();
    }
  }, 120_000);
});

describe('kail serve --ssl-key-file / --ssl-cert-file (and --api-prefix)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-serve-tls-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("serves the API over HTTPS; this machine's console and kail chat reach it on its loopback port", async () => {
    const key = path.join(dir, 'key.pem');
    const cert = path.join(dir, 'cert.pem');
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1'], { encoding: 'utf8', timeout: 60_000 });
    expect(made.status).toBe(0);
    await expect(serve({ host: '127.0.0.1', port: '0', dataDir: dir, web: false, sslKeyFile: key })).rejects.toThrow('HTTPS needs both --ssl-key-file and --ssl-cert-file');
    const model = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const lines: string[] = [];
    const sup = await serve({ host: '127.0.0.1', port: '0', dataDir: dir, web: true, model: [`tiny=${model}`], ctx: '256', sslKeyFile: key, sslCertFile: cert, apiPrefix: '/llm' }, (l) => lines.push(l));
    try {
      const api = sup.services.get('api')!;
      // (--api-prefix too: the addresses hold it.)
      expect(api.address).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/llm$/);
      const health = await new Promise<number>((resolve, reject) =>
        https.get(`${api.address}/health`, { ca: fs.readFileSync(cert) }, (res) => resolve(res.statusCode ?? 0)).on('error', reject),
      );
      expect(health).toBe(200);
      const local = JSON.parse(fs.readFileSync(path.join(dir, 'serve.json'), 'utf8')).services.api.local as string;
      expect(local).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/llm$/);
      expect(lines.join('\n')).toContain(`(and ${local} for this machine)`);
      // The console's proxy reaches the API.
      const web = sup.services.get('web')!.address;
      const listed = (await (await fetch(`${web}/api/v1/models`)).json()) as { data: { id: string }[] };
      expect(listed.data.map((m) => m.id)).toEqual(['tiny']);
      // So does kail chat, through the data directory's serve.json (asynchronously: this process holds the services).
      const chat = await new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const c = spawn(process.execPath, [path.resolve(__dirname, '../bin/kail.js'), 'chat', '--data-dir', dir, '--max-tokens', '2'], { stdio: ['pipe', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        c.stdout.on('data', (d: Buffer) => (out += d));
        c.stderr.on('data', (d: Buffer) => (err += d));
        c.on('exit', (code) => resolve({ code, out, err }));
        c.stdin.end('Hi\n');
      });
      expect([chat.code, chat.err]).toEqual([0, '']);
      expect(chat.out.trim().length).toBeGreaterThan(0);
    } finally {
      await sup.stopAll();
    }
  }, 180_000);
});
