import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { dropIgnoredLlamaFlags, llamaFlagAliases } from './main';
import { resolveModelArg } from './paths';
import { serve, type ServeOptions } from './commands/serve';

const KAIL = path.resolve(__dirname, '../bin/kail.js');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 30_000 });
}

describe('kail CLI', () => {
  it('prints help listing its commands', () => {
    const r = kail('--help');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('Usage: kail');
    expect(r.stdout).toContain('version');
    expect(r.stdout).toContain('serve');
  });

  it('prints the version with native features', () => {
    const r = kail('version', '--json');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(Array.isArray(out.native.simd)).toBe(true);
    expect(out.native.defaultThreads).toBeGreaterThanOrEqual(1);
    expect(out.native.defaultThreads).toBeLessThanOrEqual(out.native.physicalCores);
    expect(out.memory.availableBytes).toBeGreaterThan(0);
    expect(out.memory.availableBytes).toBeLessThanOrEqual(out.memory.totalBytes);
    if (out.memory.cgroup) expect(out.memory.availableBytes).toBeLessThanOrEqual(out.memory.cgroup.headroomBytes);
    const text = kail('version');
    expect(text.stdout).toMatch(/compute threads? by default\nmemory: .* available of /);
    // --version and -V, as ollama's and llama.cpp's: the version alone.
    for (const flag of ['--version', '-V']) expect(kail(flag)).toEqual(expect.objectContaining({ status: 0, stdout: `${out.version}\n` }));
  });

  it('serve refuses a malformed --keep-alive, --models-max or --cache-type before starting anything', async () => {
    const a = kail('serve', '--keep-alive', 'forever');
    expect(a.status).not.toBe(0);
    expect(a.stderr).toContain("--keep-alive must be a duration such as 5m, 1h30m, 30s, 0 or -1, got 'forever'");
    const b = kail('serve', '--models-max', '-2');
    expect(b.status).not.toBe(0);
    expect(b.stderr).toContain('--models-max');
    expect(kail('serve', '--help').stdout).toMatch(/--keep-alive <duration>[\s\S]*--models-max <n>/);
    const c = kail('serve', '--cache-type', 'q4_k');
    expect(c.status).not.toBe(0);
    expect(c.stderr).toContain("--cache-type must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q4_k'");
    // The same from the environment (KAIL_ and the flag's name), which a flag overrides.
    const env = spawnSync(process.execPath, [KAIL, 'serve'], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, KAIL_KEEP_ALIVE: 'forever' } });
    expect(env.status).not.toBe(0);
    expect(env.stderr).toContain("--keep-alive must be a duration such as 5m, 1h30m, 30s, 0 or -1, got 'forever'");
    expect(kail('serve', '--help').stdout).toMatch(/\(default: "8080", env: KAIL_PORT\)/);
    // Numbers and directories checked before any service starts, each naming its flag.
    const file = path.join(os.tmpdir(), `kail-serve-file-${process.pid}`);
    fs.writeFileSync(file, 'x');
    try {
      const e = kail('serve', '-c', '-1');
      expect(e.status).not.toBe(0);
      expect(e.stderr).toContain("--ctx must be an integer >= 1, got '-1'");
      const opts = { port: '0', host: '127.0.0.1', dataDir: path.dirname(file) } as ServeOptions;
      for (const [o, message] of [
        [{ port: 'x' }, "--port must be an integer in 0..65535, got 'x'"],
        [{ ctxCheckpoints: 'x' }, "--ctx-checkpoints must be an integer >= 0, got 'x'"],
        [{ slotSavePath: file }, `--slot-save-path: ${file} is a file, not a directory`],
        [{ modelsDir: file }, `--models-dir: ${file} is a file, not a directory`],
        [{ ram: '0' }, "--ram: '0' is no budget"],
        [{ ram: '5X' }, '--ram: '],
      ] as const)
        await expect(serve({ ...opts, ...o }, () => undefined)).rejects.toThrow(message);
      // The address is tried before anything starts: a port in use, an address of another machine.
      const taken = net.createServer();
      await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
      const port = (taken.address() as net.AddressInfo).port;
      try {
        await expect(serve({ ...opts, port: String(port) }, () => undefined)).rejects.toThrow(`--port ${port}: in use on 127.0.0.1 (EADDRINUSE); give another, or 0 for any free one`);
      } finally {
        taken.close();
      }
      await expect(serve({ ...opts, host: '192.0.2.1' }, () => undefined)).rejects.toThrow('--host 192.0.2.1: not an address of this machine (EADDRNOTAVAIL)');
      const ps = kail('ps', '--data-dir', file);
      expect(ps.status).toBe(1);
      expect(ps.stderr).toContain(`the data directory ${file} is not a directory`);
    } finally {
      fs.rmSync(file, { force: true });
    }
    const d = kail('serve', '-ctk', 'q8_0', '-ctv', 'q3');
    expect(d.status).not.toBe(0);
    expect(d.stderr).toContain("--cache-type-v must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q3'");
  });

  it("spells llama.cpp's -ctk/-ctv as --cache-type-k/-v, and leaves what follows -- alone", () => {
    expect(llamaFlagAliases(['run', '-ctk', 'q8_0', '-ctv', 'q4_0', '--', '-ctk'])).toEqual(['run', '--cache-type-k', 'q8_0', '--cache-type-v', 'q4_0', '--', '-ctk']);
    // llama.cpp's two-word flags (FNAME SCALE, START END) become one word; the one-word forms stay.
    expect(llamaFlagAliases(['run', '--control-vector-scaled', 'a.gguf', '0.8', '--control-vector-layer-range', '2', '5', '-n', '3'])).toEqual([
      'run', '--control-vector-scaled', 'a.gguf:0.8', '--control-vector-layer-range', '2:5', '-n', '3',
    ]);
    expect(llamaFlagAliases(['run', '--control-vector-scaled', 'a.gguf:-1.5', '-n', '3'])).toEqual(['run', '--control-vector-scaled', 'a.gguf:-1.5', '-n', '3']);
    // llama-server's names for the draft model and the drafted tokens per pass.
    expect(llamaFlagAliases(['serve', '-md', 'd.gguf', '--draft-max', '8', '--model-draft', 'e.gguf', '--draft-n', '2'])).toEqual(['serve', '--draft', 'd.gguf', '--spec-k', '8', '--draft', 'e.gguf', '--spec-k', '2']);
    // llama-cli's --ctx-size (also with =) and --predict; -no-cnv and -st; a command's own flag of that name stays.
    expect(llamaFlagAliases(['run', '--ctx-size', '512', '--ctx-size=256', '--predict', '8', '-no-cnv', '-st'])).toEqual(['run', '--ctx', '512', '--ctx=256', '--n-predict', '8', '--no-conversation', '--single-turn']);
    expect(llamaFlagAliases(['embed', '--ctx-size', '512', '--ctx-size=256'], new Set(['--ctx-size']))).toEqual(['embed', '--ctx-size', '512', '--ctx-size=256']);
  });

  it("runs a llama.cpp guide's command line: GPU placement flags and what is always on here are dropped, each with a line saying why", () => {
    const known = new Set(['-m', '--model', '-b']);
    expect(dropIgnoredLlamaFlags(['run', '-m', 'x.gguf', '-ngl', '99', '-fa', 'on', '--jinja', '-ot', '.ffn_.*_exps.=CPU', '-fa', '-n', '4', '--flash-attn=auto', '-b', '64', '--', '-ngl', '9'], known)).toEqual({
      argv: ['run', '-m', 'x.gguf', '-n', '4', '-b', '64', '--', '-ngl', '9'],
      notes: [
        'kail: -ngl 99 ignored: layers are computed on the CPU here; --vram gives streamed experts a cache in GPU memory',
        'kail: -fa on ignored: the engine has one attention path here, no switch',
        "kail: --jinja ignored: chat templates are always run as Jinja here (--chat-template replaces the file's)",
        'kail: -ot .ffn_.*_exps.=CPU ignored: non-expert weights stay in RAM and routed experts stream into a RAM cache here (--ram, --vram set the budgets)',
        'kail: -fa ignored: the engine has one attention path here, no switch',
        'kail: --flash-attn=auto ignored: the engine has one attention path here, no switch',
      ],
    });
    // Through the CLI: the run goes ahead (-ngl 99 would otherwise read as -n gl); a command that loads no model keeps its errors.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-llama-flags-'));
    const r = kail('run', '--demo', '--data-dir', dir, '-p', 'Hi', '-n', '2', '-ngl', '99', '-fa', 'on', '--jinja', '--json');
    fs.rmSync(dir, { recursive: true, force: true });
    expect(r.status).toBe(0);
    expect(r.stderr).toContain('kail: -ngl 99 ignored');
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!).tokens).toHaveLength(2);
    expect(kail('keys', 'list', '--jinja').stderr).toContain("unknown option '--jinja'");
    // llama-server's always-on endpoints and its other spellings.
    expect(dropIgnoredLlamaFlags(['serve', '--embeddings', '--rerank', '--port', '0'], new Set(['-m'])).argv).toEqual(['serve', '--port', '0']);
    expect(llamaFlagAliases(['serve', '-to', '30', '--no-webui'])).toEqual(['serve', '--timeout', '30', '--no-web']);
    // llama-cli's switches for what this CLI does not have: dropped, -co/-fit with their on/off.
    const more = dropIgnoredLlamaFlags(['run', '--mlock', '--no-warmup', '-fit', 'off', '-co', 'on', '--color', '--log-disable', '--simple-io', '-tb', '2', '-kvu', '--cache-reuse', '256', '-v', '--nowordwrap', '--keepalive', '5m', '-n', '4'], known);
    expect(more.argv).toEqual(['run', '-n', '4']);
    expect(more.notes.map((n) => n.slice(0, n.indexOf(' ignored')))).toEqual(
      ['--mlock', '--no-warmup', '-fit off', '-co on', '--color', '--log-disable', '--simple-io', '-tb 2', '-kvu', '--cache-reuse 256', '-v', '--nowordwrap', '--keepalive 5m'].map((f) => `kail: ${f}`),
    );
    expect(llamaFlagAliases(['serve', '-ctxcp', '2'])).toEqual(['serve', '--ctx-checkpoints', '2']);
    // -ctxcp: kail serve's own (through its alias), dropped by kail run, which has no such flag.
    expect(dropIgnoredLlamaFlags(['serve', '-ctxcp', '2', '--ctx-checkpoints', '3'], new Set(['-m', '--ctx-checkpoints'])).argv).toEqual(['serve', '-ctxcp', '2', '--ctx-checkpoints', '3']);
    const cp = dropIgnoredLlamaFlags(['run', '-cnv', '-ctxcp', '4', '--swa-checkpoints', '2'], known);
    expect(cp.argv).toEqual(['run', '-cnv']);
    expect(cp.notes[0]).toBe("kail: -ctxcp 4 ignored: a conversation keeps its model's state as the chat grows here (kail serve --ctx-checkpoints keeps checkpoints per slot)");
  });

  it('reads a model name as a file of the models directory: NAME, NAME.gguf, NAME:latest, or the first split of a model pulled as NAME', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-names-'));
    try {
      const models = path.join(dir, 'models');
      fs.mkdirSync(models);
      for (const f of ['one.gguf', 'Big-00001-of-00003.gguf', 'Big-00002-of-00003.gguf', 'two-00001-of-00002.gguf', 'two-00001-of-00003.gguf']) fs.writeFileSync(path.join(models, f), '');
      expect(resolveModelArg('one', dir)).toBe(path.join(models, 'one.gguf'));
      expect(resolveModelArg('one:latest', dir)).toBe(path.join(models, 'one.gguf'));
      expect(resolveModelArg('one.gguf', dir)).toBe(path.join(models, 'one.gguf'));
      expect(resolveModelArg('Big', dir)).toBe(path.join(models, 'Big-00001-of-00003.gguf'));
      expect(() => resolveModelArg('big', dir)).toThrow(/model file not found: big/);
      // (A file that exists is taken as given; a path is left to the loader, which names it.)
      expect(resolveModelArg(path.join(models, 'one.gguf'), dir)).toBe(path.join(models, 'one.gguf'));
      expect(resolveModelArg('sub/none.gguf', dir)).toBe('sub/none.gguf');
      // Two splits sets of one name are not a pick.
      expect(() => resolveModelArg('two', dir)).toThrow(`model file not found: two (nor two.gguf in ${models}`);
      expect(() => resolveModelArg('three', dir)).toThrow(/kail list. shows the models there, .kail pull. downloads one/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects an unknown command with a non-zero exit and help', () => {
    const r = kail('frobnicate');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("unknown command 'frobnicate'");
  });
});
