// kail pull against a local server that answers as Hugging Face's does (refs, the recursive tree
// with LFS oids, resolve URLs redirecting to a store that takes ranges): the pick by quantization
// tag, split models, resuming a broken download, and refusals (wrong SHA-256, not a GGUF, 404s).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { writeTestModel } from '@kailstream/engine/testing';

import { HUB_COMMIT, modelEndpoint, parseRepoRef, pickModelFiles, planRepoPull, planUrlPull, runPull, startHubEmulator, writeOllamaStoreModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');
const COMMIT = HUB_COMMIT;
const hub = startHubEmulator;

function kail(env: NodeJS.ProcessEnv, ...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [KAIL, ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d) => (stdout += d));
    c.stderr.on('data', (d) => (stderr += d));
    c.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

describe('kail pull', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-pull-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const q4 = fs.readFileSync(writeTestModel(dir, 'tiny-qwen3moe', 'Q4_K'));
  const q8 = fs.readFileSync(writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0'));

  it("picks the file as llama.cpp's -hf does: the tag before '.' or '-', any case; Q4_K_M, then Q8_0, then the first model file; a split's parts", () => {
    const f = (...p: string[]) => p.map((x) => ({ path: x }));
    const files = f('mmproj-moe-Q4_K_M.gguf', 'moe-IQ2_XXS.gguf', 'moe-Q8_0.gguf', 'sub/moe-Q4_K_M.gguf', 'moe-Q4_K_M-imatrix.gguf');
    expect(pickModelFiles(files, '').map((x) => x.path)).toEqual(['sub/moe-Q4_K_M.gguf']);
    expect(pickModelFiles(files, 'q8_0').map((x) => x.path)).toEqual(['moe-Q8_0.gguf']);
    expect(pickModelFiles(f('a-IQ2_XXS.gguf', 'b-Q5_K_S.gguf'), '').map((x) => x.path)).toEqual(['a-IQ2_XXS.gguf']);
    // (Q4_K is not Q4_K_M: the tag must be followed by '.' or '-'.)
    expect(() => pickModelFiles(files, 'Q4_K')).toThrow(/no GGUF model file for 'Q4_K' in the repository; its GGUF files: mmproj-moe-Q4_K_M.gguf, moe-IQ2_XXS.gguf/);
    const split = f('Q3/m-Q3_K_M-00002-of-00003.gguf', 'Q3/m-Q3_K_M-00001-of-00003.gguf', 'Q3/m-Q3_K_M-00003-of-00003.gguf', 'm-Q8_0.gguf');
    expect(pickModelFiles(split, 'Q3_K_M').map((x) => x.path)).toEqual(['Q3/m-Q3_K_M-00001-of-00003.gguf', 'Q3/m-Q3_K_M-00002-of-00003.gguf', 'Q3/m-Q3_K_M-00003-of-00003.gguf']);
    expect(() => pickModelFiles(split.slice(1), 'Q3_K_M')).toThrow(/part 1 of 3, but the repository lists 2 of its parts/);
  });

  it('reads references as llama.cpp and Ollama write them, and the endpoint from the environment', () => {
    expect(parseRepoRef('Qwen/Qwen3-30B-A3B-GGUF:Q4_K_M')).toEqual({ repo: 'Qwen/Qwen3-30B-A3B-GGUF', tag: 'Q4_K_M' });
    expect(parseRepoRef('hf.co/unsloth/gpt-oss-20b-GGUF:latest')).toEqual({ repo: 'unsloth/gpt-oss-20b-GGUF', tag: '' });
    expect(parseRepoRef('https://huggingface.co/team/moe-GGUF')).toEqual({ repo: 'team/moe-GGUF', tag: '' });
    for (const bad of ['just-a-name', 'a/b/c', '../x/y', 'a/..', '']) expect(parseRepoRef(bad)).toBeNull();
    expect(modelEndpoint({})).toBe('https://huggingface.co/');
    expect(modelEndpoint({ HF_ENDPOINT: 'http://mirror:8080' })).toBe('http://mirror:8080/');
    expect(modelEndpoint({ MODEL_ENDPOINT: 'http://a/', HF_ENDPOINT: 'http://b/' })).toBe('http://a/');
    expect(planUrlPull('https://host/x/m-00001-of-00002.gguf').files.map((f) => f.url)).toEqual(['https://host/x/m-00001-of-00002.gguf', 'https://host/x/m-00002-of-00002.gguf']);
    expect(() => planUrlPull('https://host/m-00002-of-00002.gguf')).toThrow(/part 2 of a split model/);
    expect(() => planUrlPull('https://host/readme.md')).toThrow(/not the URL of a .gguf file/);
  });

  it('pulls the picked quantization from a repository, checked against its SHA-256, then keeps it; kail list shows it', async () => {
    const h = await hub({ 'moe-Q4_K_M.gguf': q4, 'sub/moe-Q8_0.gguf': q8, 'mmproj-moe-F16.gguf': q8 });
    try {
      const data = path.join(dir, 'd1');
      const r = await kail({ HF_ENDPOINT: h.url }, 'pull', 'team/moe-GGUF', '--data-dir', data, '--json');
      expect(r.stderr).toContain(`team/moe-GGUF at ${COMMIT.slice(0, 12)}: moe-Q4_K_M.gguf`);
      expect(r.status).toBe(0);
      const out = JSON.parse(r.stdout);
      expect(out.id).toBe('moe-Q4_K_M');
      expect(fs.readFileSync(path.join(data, 'models', 'moe-Q4_K_M.gguf')).equals(q4)).toBe(true);
      expect(fs.readdirSync(path.join(data, 'models'))).toEqual(['moe-Q4_K_M.gguf']);
      // Ollama's spelling, another tag: the file in a subdirectory lands by its name.
      expect((await kail({ HF_ENDPOINT: h.url }, 'pull', 'hf.co/team/moe-GGUF:q8_0', '--data-dir', data)).status).toBe(0);
      expect(fs.readFileSync(path.join(data, 'models', 'moe-Q8_0.gguf')).equals(q8)).toBe(true);
      const sent = h.sent;
      const again = await kail({ HF_ENDPOINT: h.url }, 'pull', 'team/moe-GGUF:Q4_K_M', '--data-dir', data, '--json');
      expect(JSON.parse(again.stdout).files[0]).toMatchObject({ skipped: true, downloaded: 0 });
      expect(h.sent).toBe(sent);
      const list = JSON.parse((await kail({}, 'list', '--data-dir', data, '--json')).stdout);
      expect(JSON.stringify(list)).toContain('moe-Q4_K_M');
      // A file larger than the disk's free space is refused before any byte moves.
      const huge = await planRepoPull('team/moe-GGUF:Q4_K_M', undefined, { HF_ENDPOINT: h.url });
      await expect(runPull({ ...huge, files: huge.files.map((f) => ({ ...f, name: 'huge.gguf', size: 2 ** 52 })) }, path.join(data, 'models'), { env: { HF_ENDPOINT: h.url } })).rejects.toThrow(/the model needs 4194304.00 GiB more and .* has .* free/);
      expect(h.sent).toBe(sent);
      const none = await kail({ HF_ENDPOINT: h.url }, 'pull', 'team/moe-GGUF:IQ1_S', '--data-dir', data);
      expect(none.status).not.toBe(0);
      expect(none.stderr).toMatch(/no GGUF model file for 'IQ1_S' in the repository; its GGUF files: moe-Q4_K_M.gguf, sub\/moe-Q8_0.gguf, mmproj-moe-F16.gguf/);
      const missing = await kail({ HF_ENDPOINT: h.url }, 'pull', 'team/none', '--data-dir', data);
      expect(missing.stderr).toMatch(/GET .*api\/models\/team\/none\/refs: HTTP 404 \(no such repository\?\)/);
    } finally {
      h.close();
    }
  }, 60_000);

  it("kail run -hf (llama-cli's) pulls the model first, keeps it, and runs from it offline", async () => {
    const h = await hub({ 'moe-Q8_0.gguf': q8 });
    const data = path.join(dir, 'd-hf');
    const url = h.url;
    try {
      const r = await kail({ HF_ENDPOINT: url }, 'run', '-hf', 'team/moe-GGUF:Q8_0', '-n', '3', '--json', '--data-dir', data);
      expect(r.status).toBe(0);
      expect(JSON.parse(r.stdout).model).toBe(path.join(data, 'models', 'moe-Q8_0.gguf'));
      expect(fs.readFileSync(path.join(data, 'models', 'moe-Q8_0.gguf')).equals(q8)).toBe(true);
    } finally {
      h.close();
    }
    // The repository unreachable: the file the same pick finds in the models directory, said so.
    const off = await kail({ HF_ENDPOINT: url }, 'run', '-hf', 'team/moe-GGUF:Q8_0', '-n', '3', '--json', '--data-dir', data);
    expect(off.status).toBe(0);
    expect(off.stderr).toContain('(offline: using moe-Q8_0.gguf of');
    const none = await kail({ HF_ENDPOINT: url }, 'run', '-hf', 'team/moe-GGUF:Q4_K_M', '-n', '3', '--data-dir', data);
    expect(none.status).not.toBe(0);
    expect(none.stderr).toMatch(/GET .*refs: /);
    const both = await kail({}, 'run', '-hf', 'team/moe-GGUF', '-m', 'x.gguf');
    expect(both.stderr).toContain('give one of -m FILE.gguf, -hf USER/REPO[:QUANT] and --demo');
  }, 60_000);

  it("--offline (llama.cpp's) takes the models directory's file without a request; --hf-token (-hft) is sent as the bearer token", async () => {
    const h = await hub({ 'moe-Q8_0.gguf': q8 });
    const data = path.join(dir, 'd-offline');
    try {
      const pulled = await kail({ HF_ENDPOINT: h.url, HF_TOKEN: '' }, 'pull', 'team/moe-GGUF:Q8_0', '--data-dir', data, '-hft', 'hf_secret');
      expect(pulled.status).toBe(0);
      expect(h.auth.length).toBeGreaterThan(0);
      expect(h.auth.every((a) => a === 'Bearer hf_secret')).toBe(true);
      // pull names the way to run it.
      expect(pulled.stdout).toContain("kail run moe-Q8_0 (a chat); kail serve loads it as 'moe-Q8_0'");
      // Ollama's `ollama run hf.co/USER/REPO:QUANT`: the same pull (here the file already there).
      const byName = await kail({ HF_ENDPOINT: h.url }, 'run', '--data-dir', data, 'hf.co/team/moe-GGUF:Q8_0', 'Hi', '-n', '2', '--json');
      expect(byName.status).toBe(0);
      expect(JSON.parse(byName.stdout).model).toBe(path.join(data, 'models', 'moe-Q8_0.gguf'));
      const seen = h.auth.length;
      const off = await kail({ HF_ENDPOINT: h.url }, 'run', '-hf', 'team/moe-GGUF:Q8_0', '--offline', '-n', '2', '--json', '--data-dir', data);
      expect(off.status).toBe(0);
      expect(JSON.parse(off.stdout).model).toBe(path.join(data, 'models', 'moe-Q8_0.gguf'));
      expect(h.auth.length).toBe(seen);
      const none = await kail({ HF_ENDPOINT: h.url }, 'run', '-hf', 'team/moe-GGUF:Q4_K_M', '--offline', '--data-dir', data);
      expect(none.stderr).toContain(`--offline: no file of ${path.join(data, 'models')} is what team/moe-GGUF:Q4_K_M picks`);
      expect(h.auth.length).toBe(seen);
      expect((await kail({}, 'run', '-m', 'x.gguf', '--offline')).stderr).toContain('--offline goes with --hf-repo');
    } finally {
      h.close();
    }
  }, 60_000);

  it('kail serve -hf pulls the model before anything starts and loads it; --models-dir puts the models elsewhere', async () => {
    const h = await hub({ 'moe-Q8_0.gguf': q8 });
    const before = { HF_ENDPOINT: process.env.HF_ENDPOINT, KAIL_MODELS_DIR: process.env.KAIL_MODELS_DIR };
    process.env.HF_ENDPOINT = h.url;
    const data = path.join(dir, 'd-serve');
    const big = path.join(dir, 'big-disk');
    const { serve } = require('./commands/serve') as typeof import('./commands/serve');
    const sup = await serve({ host: '127.0.0.1', port: '0', dataDir: data, web: false, hfRepo: ['team/moe-GGUF:Q8_0'], modelsDir: big }, () => undefined);
    try {
      const models = (await (await fetch(`${sup.services.get('api')!.address}/v1/models`)).json()) as { data: { id: string; status?: { value: string } }[] };
      expect(models.data.find((m) => m.id === 'moe-Q8_0')).toMatchObject({ status: { value: 'loaded' } });
      expect(fs.readFileSync(path.join(big, 'moe-Q8_0.gguf')).equals(q8)).toBe(true);
      expect(fs.existsSync(path.join(data, 'models', 'moe-Q8_0.gguf'))).toBe(false);
      // The API's pulls go there too.
      const r = await fetch(`${sup.services.get('api')!.address}/api/pull`, { method: 'POST', body: JSON.stringify({ model: 'hf.co/team/moe-GGUF:Q8_0', stream: false }) });
      expect(await r.json()).toEqual({ status: 'success' });
    } finally {
      await sup.stopAll();
      h.close();
      for (const [k, v] of Object.entries(before)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    // Other commands find it through KAIL_MODELS_DIR, as Ollama's through OLLAMA_MODELS. (The
    // server is gone: its state file goes, as `kail serve` removes it when it stops.)
    fs.rmSync(path.join(data, 'serve.json'), { force: true });
    const list = await kail({ KAIL_MODELS_DIR: big }, 'list', '--data-dir', data, '--json');
    expect(JSON.parse(list.stdout).modelsDir).toBe(big);
    expect(list.stdout).toContain('moe-Q8_0');
  }, 120_000);

  it('resumes a download that broke off from where it stopped, with a range request', async () => {
    const h = await hub({ 'moe-Q8_0.gguf': q8 });
    try {
      const models = path.join(dir, 'd2', 'models');
      h.breakAt.set('moe-Q8_0.gguf', 100_000);
      const plan = await planRepoPull('team/moe-GGUF:Q8_0', undefined, { HF_ENDPOINT: h.url });
      await expect(runPull(plan, models, { env: { HF_ENDPOINT: h.url } })).rejects.toThrow(/moe-Q8_0.gguf: (the download broke off at \d+ bytes|\d+ bytes arrived of \d+).*run the pull again/);
      const partial = fs.statSync(path.join(models, 'moe-Q8_0.gguf.part')).size;
      expect(partial).toBeGreaterThan(0);
      expect(partial).toBeLessThan(q8.length);
      expect(fs.existsSync(path.join(models, 'moe-Q8_0.gguf'))).toBe(false);
      // A lock another live process holds is refused, naming it; one a dead process left is taken over.
      fs.writeFileSync(path.join(models, 'moe-Q8_0.gguf.part.lock'), String(process.ppid));
      await expect(runPull(plan, models, { env: { HF_ENDPOINT: h.url } })).rejects.toThrow(`moe-Q8_0.gguf is being pulled already (process ${process.ppid})`);
      fs.writeFileSync(path.join(models, 'moe-Q8_0.gguf.part.lock'), '999999999');
      const r = await runPull(plan, models, { env: { HF_ENDPOINT: h.url } });
      expect(r.files[0].downloaded).toBe(q8.length - partial);
      expect(fs.existsSync(path.join(models, 'moe-Q8_0.gguf.part.lock'))).toBe(false);
      expect(h.ranges).toEqual([`moe-Q8_0.gguf bytes=${partial}-`]);
      expect(fs.readFileSync(path.join(models, 'moe-Q8_0.gguf')).equals(q8)).toBe(true);
      expect(fs.existsSync(path.join(models, 'moe-Q8_0.gguf.part'))).toBe(false);
    } finally {
      h.close();
    }
  }, 60_000);

  it('refuses a file whose SHA-256 is not the listed one, or that is no GGUF, leaving nothing', async () => {
    const html = Buffer.from('<!DOCTYPE html><html>rate limited</html>');
    const h = await hub({ 'moe-Q4_K_M.gguf': q4, 'page-Q8_0.gguf': html }, { 'moe-Q4_K_M.gguf': { sha256: 'e'.repeat(64) } });
    try {
      const models = path.join(dir, 'd3', 'models');
      const env = { HF_ENDPOINT: h.url };
      await expect(runPull(await planRepoPull('team/moe-GGUF', undefined, env), models, { env })).rejects.toThrow(/moe-Q4_K_M.gguf: SHA-256 [0-9a-f]{64} is not the e{64} the source lists; the download is deleted/);
      await expect(runPull(await planRepoPull('team/moe-GGUF', 'page-Q8_0.gguf', env), models, { env })).rejects.toThrow(/page-Q8_0.gguf: not a GGUF file \(it starts with "<!DO"\); the download is deleted/);
      expect(fs.readdirSync(models)).toEqual([]);
      // A URL too, with --sha256.
      const data = path.join(dir, 'd3b');
      const sha = createHash('sha256').update(q4).digest('hex');
      const ok = await kail({}, 'pull', `${h.url}/store/moe-Q4_K_M.gguf`, '--sha256', sha, '--data-dir', data);
      expect(ok.status).toBe(0);
      expect(fs.readFileSync(path.join(data, 'models', 'moe-Q4_K_M.gguf')).equals(q4)).toBe(true);
      const gone = await kail({}, 'pull', `${h.url}/store/other.gguf`, '--data-dir', data);
      expect(gone.stderr).toMatch(/GET .*\/store\/other.gguf: HTTP 404/);
    } finally {
      h.close();
    }
  }, 60_000);

  it('pulls every part of a split model, which then opens as one', async () => {
    const { execFileSync } = require('node:child_process') as typeof import('node:child_process');
    const splitDir = path.join(dir, 'split');
    fs.mkdirSync(splitDir);
    const GEN = path.resolve(__dirname, '../../../tools/dist/gen-model.js');
    execFileSync(process.execPath, [GEN, '--preset', 'tiny-qwen3moe', '--type', 'Q8_0', '--split-max-tensors', '12', '--out', path.join(splitDir, 'moe-Q8_0.gguf')], { stdio: 'pipe' });
    const parts = fs.readdirSync(splitDir).filter((f) => f.endsWith('.gguf')).sort();
    expect(parts.length).toBeGreaterThan(1);
    const h = await hub(Object.fromEntries(parts.map((p) => [`Q8_0/${p}`, fs.readFileSync(path.join(splitDir, p))])));
    try {
      const data = path.join(dir, 'd4');
      const r = await kail({ HF_ENDPOINT: h.url }, 'pull', 'team/moe-GGUF:Q8_0', '--data-dir', data, '--json');
      expect(r.status).toBe(0);
      expect(fs.readdirSync(path.join(data, 'models')).sort()).toEqual(parts);
      const run = await kail({}, 'run', '-m', path.join(data, 'models', parts[0]), '-n', '2', '--json');
      expect(run.status).toBe(0);
    } finally {
      h.close();
    }
  }, 60_000);
});

describe("kail pull ollama:NAME: a model this machine's Ollama has, brought in without downloading it again", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-pull-ollama-'));
  const store = path.join(dir, 'ollama');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('links the blob into the models directory, keeps its Modelfile settings, and runs it by name', async () => {
    const weights = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0');
    writeOllamaStoreModel(store, 'tiny:2b', weights, { params: { temperature: 0.3 }, system: 'Be brief.' });
    const listed = await kail({}, 'list', '--ollama', '--ollama-dir', store);
    expect(listed.stdout).toMatch(/^NAME\s+SIZE\ntiny:2b\s+[\d.]+ MiB\n\(kail pull ollama:NAME brings one in\)\n$/);
    // Not brought in yet: kail run says where it is.
    const before = await kail({ OLLAMA_MODELS: store }, 'run', 'tiny:2b', '-p', 'Hi', '--data-dir', dir);
    expect(before.stderr).toContain("this machine's Ollama has 'tiny:2b': `kail pull ollama:tiny:2b` links it in without downloading it");
    // (OLLAMA_MODELS names the store, as for Ollama itself.)
    const r = await kail({ OLLAMA_MODELS: store }, 'pull', 'ollama:tiny:2b', '--data-dir', dir);
    expect(r.stderr).toMatch(/^ollama:tiny:2b: [\d.]+ MiB linked from .*blobs\/sha256-[0-9a-f]{64}, with its system prompt and parameters$/m);
    const file = path.join(dir, 'models', 'tiny:2b.gguf');
    expect(r.stdout).toBe(`${file}\nkail run tiny:2b (a chat); kail serve loads it as 'tiny:2b'\n`);
    const blob = /linked from (\S+),/.exec(r.stderr)![1];
    expect([fs.statSync(file).ino, fs.statSync(file).size]).toEqual([fs.statSync(blob).ino, fs.statSync(weights).size]);
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'models', 'tiny:2b.modelfile.json'), 'utf8'))).toEqual({ system: 'Be brief.', parameters: { temperature: 0.3 } });
    const run = await kail({}, 'run', 'tiny:2b', '-p', 'Hi', '-n', '2', '--data-dir', dir);
    expect(run.status).toBe(0);
    expect((await kail({}, 'list', '--data-dir', dir)).stdout).toMatch(/^tiny:2b\s+qwen3moe/m);
    const again = await kail({}, 'pull', 'ollama:tiny:2b', '--ollama-dir', store, '--data-dir', dir);
    expect(again.status).not.toBe(0);
    expect(again.stderr).toMatch(/model 'tiny:2b' is already in .* \(--force replaces it\)/);
    expect((await kail({}, 'pull', 'ollama:tiny:2b', '--ollama-dir', store, '--data-dir', dir, '--force')).status).toBe(0);
    const missing = await kail({}, 'pull', 'ollama:llama3.2', '--ollama-dir', store, '--data-dir', dir);
    expect(missing.stderr).toContain(`no Ollama model 'llama3.2:latest' in ${store}`);
    expect((await kail({}, 'pull', 'Qwen/Repo', '--ollama-dir', store, '--data-dir', dir)).stderr).toMatch(/--ollama-dir goes with ollama:NAME/);
    // A store the flag names that is not one is an error, not an empty list.
    const none = await kail({}, 'list', '--ollama-dir', path.join(dir, 'nope'));
    expect([none.status, none.stderr]).toEqual([1, `kail: --ollama-dir ${path.join(dir, 'nope')}: no such directory\n`]);
    const notStore = await kail({}, 'pull', 'ollama:tiny:2b', '--ollama-dir', dir, '--data-dir', dir);
    expect(notStore.stderr).toContain(`--ollama-dir ${dir} is not an Ollama store (no manifests/ or blobs/ directory in it)`);
  }, 60_000);
});
