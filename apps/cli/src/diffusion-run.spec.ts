// kail run with a diffusion model (tiny-llada, tiny-dream): the diffusion loop, its flags with
// llama-diffusion-cli's names, a progress line per step, the text printed as the canvas settles,
// --json; and the flag checks.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, writeModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');
const kail = (...args: string[]) => spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });

describe('kail run with a diffusion model', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-diffusion-'));
  const llada = path.join(dir, 'llada.gguf');
  const dream = path.join(dir, 'dream.gguf');
  beforeAll(() => {
    writeModel({ config: getPreset('tiny-llada').config, fileType: 'Q8_0', seed: 3, out: llada });
    writeModel({ config: getPreset('tiny-dream').config, fileType: 'Q8_0', seed: 3, out: dream });
  }, 60_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('unmasks -n tokens over --diffusion-steps passes, with a progress line; --json gives the tokens and the settings', () => {
    const r = kail('run', '-m', llada, '-p', 'Experts stream', '-n', '16', '--diffusion-steps', '8', '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/diffusion: llada, \d+ prompt \+ 16 generated tokens, 8 steps, confidence, blocks of 32, mask token 1021/);
    expect(r.stderr).toMatch(/diffusion: 8 passes/);
    const j = kail('run', '-m', dream, '-p', 'Experts stream', '-n', '12', '--diffusion-steps', '6', '--diffusion-algorithm', '2', '--json', '-t', '2');
    expect(j.status).toBe(0);
    const out = JSON.parse(j.stdout);
    expect(out.tokens).toHaveLength(12);
    expect(out.diffusion).toEqual({ steps: 6, algorithm: 'margin', schedule: { kind: 'timestep', eps: 0.001 }, mask_token_id: 1021, shift_logits: true });
    // Temperature 0 (kail run's default): the same tokens again.
    expect(JSON.parse(kail('run', '-m', dream, '-p', 'Experts stream', '-n', '12', '--diffusion-steps', '6', '--diffusion-algorithm', 'margin', '--json', '-t', '2').stdout).tokens).toEqual(out.tokens);
  }, 60_000);

  it('prints the text as the canvas settles: the first piece while the loop still runs, together the unstreamed text; with 2>&1 no progress line inside it', async () => {
    // Three blocks of 8, 8 passes each: the first block is final after pass 8 of 24.
    const args = ['run', '-m', llada, '-p', 'Experts stream', '-n', '24', '--diffusion-block-length', '8', '--diffusion-steps', '24', '-t', '2'];
    // (--json: the loop's text at its end, detokenize of the whole generated part, as kail run printed it before.)
    const whole = JSON.parse(kail(...args, '--json').stdout).text as string;
    expect(whole.length).toBeGreaterThan(0);
    const child = spawn(process.execPath, [KAIL, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (d: Buffer) => void out.push(d));
    child.stderr.on('data', (d: Buffer) => void (err += d.toString()));
    const closed = new Promise<number | null>((res) => child.on('close', res));
    // At the first stdout the child is stopped, and what it wrote to stderr by then read: a
    // superset of what it wrote before that stdout.
    await new Promise<void>((res) =>
      child.stdout.once('data', () => {
        try {
          process.kill(child.pid!, 'SIGSTOP');
        } catch {
          // (Already gone: the checks below fail.)
        }
        res();
      }),
    );
    await new Promise((res) => setTimeout(res, 200));
    await new Promise((res) => setImmediate(res));
    const early = { out: Buffer.concat(out).toString(), err };
    try {
      process.kill(child.pid!, 'SIGCONT');
    } catch {
      // (Already gone.)
    }
    expect(await closed).toBe(0);
    const stdout = Buffer.concat(out).toString();
    expect(stdout).toBe(whole + '\n');
    // The first piece came while the loop ran: before its last progress line and its end line.
    const progressLines = (t: string) => t.split('\n').filter((l) => /^diffusion +\d+% \d+\/24/.test(l));
    expect(early.err).toMatch(/diffusion\.\.\./);
    expect(early.err).not.toMatch(/diffusion: 24 passes/);
    expect(progressLines(err).length).toBeGreaterThan(progressLines(early.err).length);
    expect(early.out.length).toBeGreaterThan(0);
    expect(early.out.length).toBeLessThan(stdout.length);
    expect(stdout.startsWith(early.out)).toBe(true);

    // stdout and stderr into one file: the text whole on its line, the progress around it.
    const file = path.join(dir, 'both.txt');
    const fd = fs.openSync(file, 'w');
    try {
      const both = spawnSync(process.execPath, [KAIL, ...args], { stdio: ['ignore', fd, fd], timeout: 120_000 });
      expect(both.status).toBe(0);
    } finally {
      fs.closeSync(fd);
    }
    const text = fs.readFileSync(file, 'utf8');
    const at = text.indexOf(whole + '\n');
    expect(at).toBeGreaterThan(0);
    expect(text[at - 1]).toBe('\n');
    expect(text.slice(at + whole.length + 1)).toMatch(/^diffusion: 24 passes \(/);
  }, 60_000);

  it('-r: the text ends with the first reverse prompt it writes (printed, as an autoregressive run prints it), the loop stops once its block settles; --json cuts text before it, finish_reason stop', () => {
    // Three blocks of 8, sampled (a varied text): a word first written in the middle block is the reverse prompt.
    const args = ['run', '-m', llada, '-p', 'Experts stream', '-n', '24', '--diffusion-block-length', '8', '--diffusion-steps', '24', '--temp', '1', '--seed', '1', '-t', '2'];
    const whole = JSON.parse(kail(...args, '--json').stdout).text as string;
    const words = [...whole.matchAll(/ [a-z]{3,}/g)].filter((m) => whole.indexOf(m[0]) === m.index && m.index > whole.length / 3 && m.index < (2 * whole.length) / 3);
    expect(words.length).toBeGreaterThan(0);
    const rp = words[0][0];
    const end = whole.indexOf(rp) + rp.length;
    const r = kail(...args, '-r', rp, '-r', 'zzz-not-written');
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(whole.slice(0, end) + '\n');
    // (Stopped before the last block: everything before the cut was settled.)
    const passes = Number(/diffusion: (\d+) passes, stopped at the reverse prompt/.exec(r.stderr)?.[1]);
    expect(passes).toBeLessThan(24);
    const j = JSON.parse(kail(...args, '-r', rp, '--json').stdout);
    expect(j).toMatchObject({ text: whole.slice(0, end - rp.length), finish_reason: 'stop', stopping_word: rp });
    expect(j.diffusion.steps).toBe(passes);
    // A reverse prompt never written changes nothing.
    const none = JSON.parse(kail(...args, '-r', 'zzz-not-written', '--json').stdout);
    expect(none).toMatchObject({ text: whole, finish_reason: 'length' });
    expect(none.stopping_word).toBeUndefined();
  }, 60_000);

  it("kail run NAME: the model's Modelfile system prompt, MESSAGE lines and template make the chat prompt, as for an autoregressive model", () => {
    fs.mkdirSync(path.join(dir, 'models'), { recursive: true });
    fs.copyFileSync(llada, path.join(dir, 'models', 'lm.gguf'));
    const template = '{{ range .Messages }}[{{ .Role }}] {{ .Content }}\n{{ end }}[assistant] ';
    fs.writeFileSync(path.join(dir, 'models', 'lm.modelfile.json'), JSON.stringify({ system: 'Be brief.', template, messages: [{ role: 'user', content: 'Earlier.' }, { role: 'assistant', content: 'Yes.' }] }));
    const flags = ['-n', '8', '--diffusion-steps', '8', '-t', '2', '--json'];
    const got = kail('run', '--data-dir', dir, 'lm', 'Hello', ...flags);
    expect(got.status).toBe(0);
    const want = JSON.parse(kail('run', '-m', llada, '-p', '[system] Be brief.\n[user] Earlier.\n[assistant] Yes.\n[user] Hello\n[assistant] ', ...flags).stdout);
    const j = JSON.parse(got.stdout);
    expect([j.prompt_tokens, j.tokens]).toEqual([want.prompt_tokens, want.tokens]);
    expect(kail('run', '--data-dir', dir, 'lm', 'Hello', '-n', '8', '--diffusion-steps', '8', '-t', '2').stderr).toContain('lm.gguf: its Modelfile settings: system prompt, template, 2 message(s)');
  }, 60_000);

  it('refuses both schedules at once, an unknown algorithm and steps the blocks do not divide, with exit 1', () => {
    for (const [args, want] of [
      [['--diffusion-eps', '0.01', '--diffusion-block-length', '4'], /give one of the diffusion eps .* and the diffusion block length/],
      [['--diffusion-algorithm', '7'], /unknown diffusion algorithm '7': 0-4 or origin/],
      [['--diffusion-block-length', '4', '--diffusion-steps', '5'], /multiple of the block count \(4/],
    ] as const) {
      const r = kail('run', '-m', llada, '-p', 'hi', '-n', '16', ...args);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(want);
    }
  }, 60_000);

  it('with -n -1 fills the rest of one pass, cut to the most blocks of 32 the steps divide', () => {
    const r = kail('run', '-m', llada, '-p', 'hi', '-n', '-1', '--diffusion-steps', '8', '-t', '2');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/diffusion: llada, \d+ prompt \+ 256 generated tokens, 8 steps, confidence, blocks of 32/);
  }, 60_000);
});
