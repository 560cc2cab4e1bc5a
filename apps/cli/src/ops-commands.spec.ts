import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';

import { writeTestModel } from '@kailstream/engine/testing';

import { humanTime } from './commands/models';
import { createProgress } from './progress';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(args: string[], input?: string) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 60_000, input });
}

/** Asynchronous run: while spawnSync blocks, this process cannot reap its own exited children. */
function kailAsync(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [KAIL, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    c.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

describe('kail keys', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-keys-cli-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('creates (shown once), lists with usage, and revokes keys in the data directory', () => {
    const c = kail(['keys', 'create', 'alice', '--data-dir', dir, '--json']);
    expect(c.stderr).toBe('');
    expect(c.status).toBe(0);
    const k = JSON.parse(c.stdout);
    expect(k.key).toMatch(/^ks-/);
    const human = kail(['keys', 'create', 'bob', '--data-dir', dir]);
    expect(human.stdout).toMatch(/only time the key is shown/);
    const list = JSON.parse(kail(['keys', 'list', '--data-dir', dir, '--json']).stdout);
    expect(list.map((x: { name: string }) => x.name)).toEqual(['alice', 'bob']);
    expect(JSON.stringify(list)).not.toContain(k.key);
    expect(list[0]).toMatchObject({ requests: 0, revokedAt: null });
    expect(kail(['keys', 'revoke', k.id.slice(0, 8), '--data-dir', dir]).status).toBe(0);
    const table = kail(['keys', 'list', '--data-dir', dir]).stdout;
    expect(table).toMatch(/alice.*revoked/);
    expect(table).toMatch(/bob.*active/);
    const again = kail(['keys', 'revoke', k.id, '--data-dir', dir]);
    expect(again.status).not.toBe(0);
    expect(again.stderr).toMatch(/no active key matches/);
  });
});

describe("kail list's MODIFIED column", () => {
  it("says how long ago in ollama list's words", () => {
    const now = new Date('2026-12-05T12:00:00Z');
    const ago = (ms: number) => humanTime(new Date(now.getTime() - ms), now);
    const [s, m, h, d] = [1000, 60_000, 3_600_000, 86_400_000];
    expect([0, 1, 30].map((n) => ago(n * s))).toEqual(['Less than a second ago', '1 second ago', '30 seconds ago']);
    expect([1, 59].map((n) => ago(n * m))).toEqual(['About a minute ago', '59 minutes ago']);
    // (Hours round: 1 h 29 min is about an hour, 47 h 20 min is 47 hours.)
    expect([89 * m, 47 * h + 20 * m, 48 * h].map(ago)).toEqual(['About an hour ago', '47 hours ago', '2 days ago']);
    expect([13 * d, 14 * d, 59 * d, 60 * d, 729 * d, 731 * d].map(ago)).toEqual(['13 days ago', '2 weeks ago', '8 weeks ago', '2 months ago', '24 months ago', '2 years ago']);
    expect(humanTime(new Date(now.getTime() + 5 * m), now)).toBe('5 minutes from now');
  });
});

describe('kail list / rm without a server', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-models-cli-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('lists the models directory (a split model once, an unreadable file with its error) and deletes models, every split', () => {
    const models = path.join(dir, 'models');
    expect(kail(['list', '--data-dir', dir]).stdout).toMatch(/^no models in .*models/);
    fs.mkdirSync(models);
    const prefix = path.basename(writeTestModel(models, 'tiny-qwen3moe', 'Q8_0', 2, ['--split-max-tensors', '10']), '.gguf');
    const first = `${prefix}-00001-of-00003`;
    fs.copyFileSync(writeTestModel(dir, 'tiny-llama', 'F32'), path.join(models, 'small.gguf'));
    fs.writeFileSync(path.join(models, 'broken.gguf'), 'not a model');
    const r = kail(['list', '--data-dir', dir, '--json']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const l = JSON.parse(r.stdout);
    expect(l.source).toBe('files');
    expect(l.models.map((m: { id: string }) => m.id)).toEqual(['broken', 'small', first]);
    expect(l.models[0].error).toMatch(/bad magic/);
    expect(l.models[2]).toMatchObject({ architecture: 'qwen3moe', loaded: false });
    expect(l.models[2].sizeBytes).toBe([1, 2, 3].reduce((a, i) => a + fs.statSync(path.join(models, `${prefix}-0000${i}-of-00003.gguf`)).size, 0));
    expect(l.models[1]).toMatchObject({ architecture: 'llama', experts: '-' });
    expect(kail(['ls', '--data-dir', dir]).stdout).toMatch(/^small\s+llama\s+\S+\s+-\s+\d+\s+\d/m);
    // When each file last changed: ISO in JSON, Ollama's words in the table.
    expect(l.models[1].modifiedAt).toBe(fs.statSync(path.join(models, 'small.gguf')).mtime.toISOString());
    const threeDays = new Date(Date.now() - 3 * 86_400_000 - 60_000);
    fs.utimesSync(path.join(models, 'small.gguf'), threeDays, threeDays);
    expect(kail(['ls', '--data-dir', dir]).stdout).toMatch(/^small\s+llama\s.*\s3 days ago\s*$/m);
    const cp = kail(['cp', 'small', 'small2', '--data-dir', dir]);
    expect(cp.stderr).toBe('');
    expect(cp.stdout).toBe("copied 'small' to 'small2'\n");
    expect(fs.readFileSync(path.join(models, 'small2.gguf')).equals(fs.readFileSync(path.join(models, 'small.gguf')))).toBe(true);
    expect(kail(['cp', 'small', 'small2', '--data-dir', dir]).stderr).toMatch(/'small2' is already in the models directory/);
    expect(kail(['cp', first, 'x', '--data-dir', dir]).stderr).toMatch(/split over 3 files/);
    expect(kail(['rm', 'small2', '--data-dir', dir]).status).toBe(0);
    const later = kail(['rm', first.replace('00001-of', '00002-of'), '--data-dir', dir]);
    expect(later.status).not.toBe(0);
    expect(later.stderr).toMatch(/is split 2 of 3 of the model '.*-00001-of-00003': remove that/);
    const rm = kail(['rm', first, 'broken', '--data-dir', dir]);
    expect(rm.stdout).toBe(`deleted '${first}'\ndeleted 'broken'\n`);
    expect(fs.readdirSync(models)).toEqual(['small.gguf']);
    const missing = kail(['rm', 'nope', '--data-dir', dir]);
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toMatch(/model 'nope' is not in the models directory/);
    expect(kail(['rm', '../small', '--data-dir', dir]).stderr).toMatch(/must be a model id/);
  });
});

describe('kail ps / chat / stop against a running kail serve', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-ops-'));
  let server: ChildProcess;
  let out = '';
  let apiKey = '';

  beforeAll(async () => {
    const model = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    // (The context and the port come from the environment, as a container's unit would give them.)
    server = spawn(process.execPath, [KAIL, 'serve', '--no-web', '-m', `tiny=${model}`, '--data-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KAIL_CTX: '256', KAIL_PORT: '0' } });
    server.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    server.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const end = Date.now() + 90_000;
    while (!out.includes('ready;')) {
      if (Date.now() > end || server.exitCode !== null) throw new Error(`kail serve did not start:\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 120_000);

  afterAll(async () => {
    if (server.exitCode === null) {
      server.kill('SIGTERM');
      await new Promise((r) => server.once('exit', r));
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('ps lists the services, the engine, the loaded model and the queue', () => {
    const r = kail(['ps', '--json', '--data-dir', dir]);
    expect(r.status).toBe(0);
    const ps = JSON.parse(r.stdout);
    expect(ps.running).toBe(true);
    expect(ps.services.map((s: { name: string }) => s.name)).toEqual(['engine', 'scheduler', 'api']);
    expect(ps.services.every((s: { alive: boolean }) => s.alive)).toBe(true);
    expect(ps.scheduler.error).toBeUndefined();
    expect(ps.scheduler.engines[0]).toMatchObject({ status: 'SERVING', models: ['tiny'] });
    expect(ps.scheduler.models[0]).toMatchObject({ id: 'tiny', architecture: 'qwen3moe', kvType: 'f16', lora: [], contextLength: 256 });
    expect(ps.scheduler.models[0].memory.residentBytes).toBeGreaterThan(0);
    expect(ps.scheduler.queue).toBeDefined();
    const human = kail(['ps', '--data-dir', dir]).stdout;
    expect(human).toMatch(/scheduler\s+127\.0\.0\.1:\d+/);
    expect(human).toMatch(/^tiny\s+qwen3moe/m);
    expect(human).toMatch(/^tiny\s+qwen3moe.* MiB f16 /m);
  });

  it('list and rm go through the server when one runs: the engine lists the directory (each file, loaded or not) and deletes', () => {
    const models = path.join(dir, 'models');
    fs.mkdirSync(models, { recursive: true });
    fs.copyFileSync(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), path.join(models, 'spare.gguf'));
    const l = JSON.parse(kail(['list', '--data-dir', dir, '--json']).stdout);
    expect(l.source).toBe('server');
    expect(l.models.map((m: { id: string; loaded: boolean }) => [m.id, m.loaded])).toEqual([['spare', false]]);
    expect(kail(['list', '--data-dir', dir]).stdout).toMatch(/^spare\s+qwen3moe.*\sno$/m);
    expect(kail(['cp', 'spare', 'spare2', '--data-dir', dir]).stdout).toBe("copied 'spare' to 'spare2'\n");
    expect(fs.existsSync(path.join(models, 'spare2.gguf'))).toBe(true);
    expect(kail(['cp', 'nope', 'x', '--data-dir', dir]).stderr).toMatch(/model 'nope' is not in the models directory/);
    expect(kail(['rm', 'spare2', '--data-dir', dir]).status).toBe(0);
    const rm = kail(['rm', 'spare', '--data-dir', dir]);
    expect(rm.stderr).toBe('');
    expect(rm.stdout).toBe("deleted 'spare'\n");
    expect(fs.existsSync(path.join(models, 'spare.gguf'))).toBe(false);
    const gone = kail(['rm', 'spare', '--data-dir', dir]);
    expect(gone.status).not.toBe(0);
    expect(gone.stderr).toMatch(/not in the models directory/);
  });

  it("run of a model the server has loaded says it loads a second copy, and how to use the server's", async () => {
    const file = fs.readdirSync(dir).find((n) => n.startsWith('tiny-qwen3moe') && n.endsWith('.gguf'))!;
    const r = await kailAsync(['run', '-m', path.join(dir, file), '-p', 'Hi', '-n', '2', '--data-dir', dir]);
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(`note: kail serve on ${dir} has this model loaded as 'tiny'; kail run loads it again in this process (kail chat -m tiny talks to the server's copy)`);
    const other = await kailAsync(['run', '-m', path.join(dir, file), '-p', 'Hi', '-n', '2', '--data-dir', path.join(dir, 'elsewhere')]);
    expect(other.stderr).not.toContain('note: kail serve');
  });

  it('stop NAME unloads a model, as ollama stop does, and leaves the server running', async () => {
    fs.copyFileSync(writeTestModel(dir, 'tiny-qwen3moe', 'F32'), path.join(dir, 'models', 'spare3.gguf'));
    const api = JSON.parse(kail(['ps', '--json', '--data-dir', dir]).stdout).services.find((s: { name: string }) => s.name === 'api').address as string;
    // A request loads it on demand.
    const r = await fetch(`${api}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'spare3', prompt: 'Hi', max_tokens: 1 }) });
    expect(r.status).toBe(200);
    const loaded = () => (JSON.parse(kail(['ps', '--json', '--data-dir', dir]).stdout).scheduler.models as { id: string }[]).map((m) => m.id).sort();
    expect(loaded()).toEqual(['spare3', 'tiny']);
    const stop = await kailAsync(['stop', 'spare3:latest', '--data-dir', dir]);
    expect([stop.status, stop.stdout]).toEqual([0, "unloaded 'spare3'\n"]);
    expect(loaded()).toEqual(['tiny']);
    const again = kail(['stop', 'spare3', '--data-dir', dir]);
    expect(again.status).not.toBe(0);
    expect(again.stderr).toMatch(/model 'spare3' is not loaded \(kail ps lists the loaded models\)/);
    expect(kail(['stop', '--force', '--data-dir', dir]).stderr).toMatch(/--force is for unloading models/);
    expect(kail(['ps', '--json', '--data-dir', dir]).status).toBe(0);
  });

  it('chat reads stdin line by line, streams replies, and needs a key once one exists', async () => {
    const r = kail(['chat', '--data-dir', dir, '--max-tokens', '4', '--temperature', '0'], 'Hello\nHow are you?\n');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const replies = r.stdout.split('\n').filter(Boolean);
    expect(replies.length).toBeGreaterThanOrEqual(1);
    // /load (ollama run's): a model the server lists, loaded on demand for the next answer.
    const switched = kail(['chat', '--data-dir', dir, '--max-tokens', '2'], 'Hi\n/load spare3\nHi\n/load nope\n');
    expect(switched.status).toBe(0);
    expect(switched.stderr).toContain('the answers now come from spare3');
    expect(switched.stderr).toMatch(/no model 'nope' at http:\/\/127\.0\.0\.1:\d+/);
    // /save (ollama run's): a new model of the server with this chat's system message, parameters and messages.
    const saving = kail(['chat', '--data-dir', dir, '--max-tokens', '2'], '/load spare3\n/set system Be brief.\n/set parameter num_predict 2\nHi\n/save brief\n');
    expect(saving.stderr).toContain("Created new model 'brief'");
    const api = JSON.parse(kail(['ps', '--json', '--data-dir', dir]).stdout).services.find((x: { name: string }) => x.name === 'api').address as string;
    const show = (await (await fetch(`${api}/api/show`, { method: 'POST', body: JSON.stringify({ model: 'brief' }) })).json()) as { system: string; parameters: string; messages: { role: string }[] };
    expect(show.system).toBe('Be brief.');
    expect(show.parameters).toMatch(/num_predict\s+2/);
    expect(show.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    const key = JSON.parse(kail(['keys', 'create', 'ops', '--data-dir', dir, '--json']).stdout).key as string;
    apiKey = key;
    const denied = kail(['chat', '--data-dir', dir, '--max-tokens', '2'], 'Hi\n');
    expect(denied.status).not.toBe(0);
    expect(denied.stderr).toMatch(/HTTP 401/);
    const ok = kail(['chat', '--data-dir', dir, '--max-tokens', '2', '--api-key', key], 'Hi\n');
    expect(ok.status).toBe(0);
    const usage = JSON.parse(kail(['keys', 'list', '--data-dir', dir, '--json']).stdout);
    expect(usage[0].requests).toBe(1);
    expect(usage[0].completionTokens).toBeGreaterThan(0);
  });

  it('/ready goes false when the engine dies mid-stream, and true again once the supervisor restored it', async () => {
    const ps = JSON.parse(kail(['ps', '--json', '--data-dir', dir]).stdout);
    const api = ps.services.find((s: { name: string }) => s.name === 'api').address as string;
    const enginePid = ps.services.find((s: { name: string }) => s.name === 'engine').pid as number;
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
    const ready = async () => (await fetch(`${api}/ready`, { headers })).status;
    expect(await ready()).toBe(200);
    const r = await fetch(`${api}/v1/chat/completions`, {
      method: 'POST', headers,
      body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'long' }], max_tokens: 200, stream: true, ignore_eos: true }),
    });
    const reader = r.body!.getReader();
    await reader.read();
    process.kill(enginePid, 'SIGKILL');
    // The stream ends with an OpenAI-shaped error event, not silently.
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += Buffer.from(value).toString();
    }
    expect(rest).toMatch(/"error":\{"message":"[^"]+","type":"server_error"/);
    const until = async (want: number, ms: number) => {
      const end = Date.now() + ms;
      let s = await ready();
      while (s !== want && Date.now() < end) {
        await new Promise((res) => setTimeout(res, 100));
        s = await ready();
      }
      return s;
    };
    expect(await until(503, 15_000)).toBe(503);
    expect(await until(200, 60_000)).toBe(200);
    const ok = kail(['chat', '--data-dir', dir, '--max-tokens', '2', '--api-key', apiKey], 'Hi\n');
    expect(ok.stderr).toBe('');
    expect(ok.status).toBe(0);
  }, 90_000);

  it('stop signals the supervisor, waits for it, and everything is gone', async () => {
    const ps = JSON.parse(kail(['ps', '--json', '--data-dir', dir]).stdout);
    const pids: number[] = ps.services.map((s: { pid: number }) => s.pid);
    // kail serve is this test's child: `kail stop` sees it gone only once we reap it, so no spawnSync here.
    const r = await kailAsync(['stop', '--data-dir', dir]);
    expect(r.stdout).toMatch(/stopped kail serve/);
    expect(r.status).toBe(0);
    expect(server.exitCode ?? (await new Promise((res) => server.once('exit', res)))).toBe(0);
    expect(fs.existsSync(path.join(dir, 'serve.json'))).toBe(false);
    for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
    const none = kail(['stop', '--data-dir', dir]);
    expect(none.status).not.toBe(0);
    expect(none.stderr).toMatch(/no server is running/);
    expect(kail(['ps', '--data-dir', dir]).stdout).toMatch(/no server is running/);
  }, 60_000);
});

describe('progress', () => {
  const sink = (tty: boolean) => {
    let text = '';
    const s = new Writable({ write(c, _e, cb) { text += c.toString(); cb(); } }) as unknown as NodeJS.WriteStream;
    s.isTTY = tty;
    return { s, text: () => text };
  };

  it('prints plain lines at most every 10% without a terminal', () => {
    const { s, text } = sink(false);
    const p = createProgress({ label: 'writing', total: 1000, stream: s });
    for (let i = 0; i <= 1000; i++) p.update(i);
    p.done();
    const lines = text().trim().split('\n');
    expect(lines[0]).toBe('writing...');
    expect(lines.length).toBeLessThanOrEqual(12);
    expect(lines.at(-1)).toMatch(/^writing 100% 1000\/1000 \(\d+\.\d s\)$/);
    expect(text()).not.toContain('\r');
  });

  it('redraws one bar with carriage returns on a terminal', () => {
    const { s, text } = sink(true);
    const p = createProgress({ label: 'load', total: 4, stream: s });
    p.done();
    expect(text()).toMatch(/^\rload \[#{28}\] 100% 4\/4 \(\d+\.\d s\)\x1b\[K\n$/);
  });
});
