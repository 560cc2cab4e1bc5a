import { Command } from 'commander';

import { LLAMA_ARG_ENV, registerServe } from './serve';

/** `kail serve`'s options as the command line and the environment give them (the server is not started). */
async function serveOptions(argv: string[], env: Record<string, string>): Promise<{ opts: Record<string, unknown>; stderr: string }> {
  const program = new Command().exitOverride();
  registerServe(program);
  const serve = program.commands.find((c) => c.name() === 'serve')!;
  let opts: Record<string, unknown> = {};
  serve.action((o: Record<string, unknown>) => {
    opts = o;
  });
  const saved = { ...process.env };
  const write = process.stderr.write;
  let stderr = '';
  process.stderr.write = ((chunk: string) => ((stderr += chunk), true)) as typeof process.stderr.write;
  try {
    Object.assign(process.env, env);
    await program.parseAsync(['serve', ...argv], { from: 'user' });
  } finally {
    process.stderr.write = write;
    for (const k of Object.keys(env)) delete process.env[k];
    Object.assign(process.env, saved);
  }
  return { opts, stderr };
}

describe("kail serve reads llama-server's LLAMA_ARG_ variables", () => {
  it('as the flags they stand for, under the command line and KAIL_ variables', async () => {
    const { opts, stderr } = await serveOptions(['--top-k', '7'], {
      LLAMA_ARG_MODEL: '/models/m.gguf', LLAMA_ARG_CTX_SIZE: '8192', LLAMA_ARG_N_PARALLEL: '4', LLAMA_ARG_PORT: '9000', LLAMA_ARG_TOP_K: '3',
      LLAMA_ARG_TEMPERATURE: '0.5', LLAMA_ARG_ALIAS: 'gpt-4o', LLAMA_API_KEY: 'sekret', LLAMA_ARG_CONTEXT_SHIFT: 'on', LLAMA_ARG_UI: 'off',
      LLAMA_ARG_MODELS_AUTOLOAD: 'false', LLAMA_ARG_ROPE_FREQ_BASE: '20000', KAIL_THREADS: '2', LLAMA_ARG_THREADS: '16',
      LLAMA_ARG_N_GPU_LAYERS: '99', LLAMA_ARG_FLASH_ATTN: 'on',
    });
    expect(opts).toMatchObject({
      model: ['/models/m.gguf'], ctx: '8192', parallel: '4', port: '9000', topK: 7, temp: 0.5, alias: ['gpt-4o'], apiKey: ['sekret'],
      contextShift: true, web: false, loadOnDemand: false, ropeFreqBase: '20000', threads: '2',
    });
    const [used, unread] = stderr.trimEnd().split('\n');
    expect(used).toMatch(/^kail serve: from llama-server's variables: LLAMA_ARG_MODEL \(--model\), .*LLAMA_ARG_CTX_SIZE \(--ctx\), /);
    // (Those under the command line or a KAIL_ variable are not said to apply.)
    expect(used).not.toMatch(/LLAMA_ARG_TOP_K|LLAMA_ARG_THREADS/);
    expect(unread).toBe('kail serve: LLAMA_ARG_FLASH_ATTN, LLAMA_ARG_N_GPU_LAYERS not read (GPU placement, batching and switches that are always on here, or what kail serve does not have)');
  });

  it('names each flag that kail serve has, and a bad switch is an error naming the variable', async () => {
    const program = new Command();
    registerServe(program);
    const longs = new Set(program.commands.find((c) => c.name() === 'serve')!.options.map((o) => o.long));
    expect(Object.values(LLAMA_ARG_ENV).filter((f) => !longs.has(f))).toEqual([]);
    await expect(serveOptions([], { LLAMA_ARG_CONTEXT_SHIFT: 'maybe' })).rejects.toThrow("LLAMA_ARG_CONTEXT_SHIFT takes on/off, true/false, enabled/disabled or 1/0, got 'maybe'");
  });
});

describe("kail serve reads ollama serve's OLLAMA_ variables", () => {
  it('as the settings they stand for, under the command line and KAIL_/LLAMA_ARG_ variables', async () => {
    const { opts, stderr } = await serveOptions(['--ctx', '2048'], {
      OLLAMA_HOST: 'http://0.0.0.0:11434', OLLAMA_KEEP_ALIVE: '24h', OLLAMA_NUM_PARALLEL: '4', OLLAMA_CONTEXT_LENGTH: '8192', OLLAMA_MAX_LOADED_MODELS: '2',
      OLLAMA_ORIGINS: 'https://app.example, chrome-extension://*', OLLAMA_KV_CACHE_TYPE: 'Q8_0', OLLAMA_FLASH_ATTENTION: '1', OLLAMA_MODELS: '/srv/ollama', OLLAMA_SCHED_SPREAD: '1',
    });
    expect(opts).toMatchObject({ host: '0.0.0.0', port: '11434', keepAlive: 86_400_000, parallel: '4', ctx: '2048', modelsMax: 2, corsOrigins: 'localhost,https://app.example', cacheType: 'q8_0' });
    const lines = stderr.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^kail serve: from Ollama's variables: OLLAMA_HOST \(--host\), OLLAMA_HOST \(--port\), OLLAMA_NUM_PARALLEL \(--parallel\), OLLAMA_MAX_LOADED_MODELS \(--models-max\), OLLAMA_KEEP_ALIVE \(--keep-alive\), /);
    expect(lines[0]).not.toContain('OLLAMA_CONTEXT_LENGTH');
    expect(lines.slice(1)).toEqual([
      'kail serve: OLLAMA_ORIGINS: chrome-extension://* left out (origins are matched whole here: list each, or *)',
      "kail serve: OLLAMA_SCHED_SPREAD not read (ollama serve's, without a kail serve setting)",
    ]);
  });

  it("reads OLLAMA_HOST's forms as Ollama does, 0 as Ollama's automatic choice, and names a bad value", async () => {
    expect((await serveOptions([], { OLLAMA_HOST: '0.0.0.0' })).opts).toMatchObject({ host: '0.0.0.0', port: '8080' });
    expect((await serveOptions([], { OLLAMA_HOST: ':9000' })).opts).toMatchObject({ host: '127.0.0.1', port: '9000' });
    expect((await serveOptions([], { OLLAMA_HOST: '[::1]:9001' })).opts).toMatchObject({ host: '::1', port: '9001' });
    expect((await serveOptions([], { OLLAMA_HOST: '0.0.0.0', LLAMA_ARG_HOST: '10.0.0.2' })).opts).toMatchObject({ host: '10.0.0.2' });
    expect((await serveOptions([], { OLLAMA_NUM_PARALLEL: '0', OLLAMA_MAX_LOADED_MODELS: '0' })).opts).not.toHaveProperty('parallel');
    await expect(serveOptions([], { OLLAMA_HOST: 'a:b:c' })).rejects.toThrow("OLLAMA_HOST takes [scheme://]host[:port], got 'a:b:c'");
    await expect(serveOptions([], { OLLAMA_NUM_PARALLEL: 'many' })).rejects.toThrow(/--parallel must be an integer/);
  });
});
