import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getPreset, writeControlVector, writeModel } from '@kailstream/tools';

const KAIL = path.resolve(__dirname, '../bin/kail.js');
const VOCAB = path.resolve(__dirname, '../../../../shared/fixtures/tokenizers/ggml-vocab-qwen2.gguf');

function kail(...args: string[]) {
  return spawnSync(process.execPath, [KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
}

describe('kail model commands', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-cli-'));
  let model: string;
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('run --demo writes the built-in model once and generates text, with JSON for scripts', () => {
    const r = kail('run', '--demo', '--data-dir', dir, '-p', 'Hello', '-n', '8', '--json');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.tokens).toHaveLength(out.finish_reason === 'length' ? 8 : out.tokens.length);
    expect(typeof out.text).toBe('string');
    expect(out.timings.prompt_tps).toBeGreaterThan(0);
    model = out.model;
    expect(fs.existsSync(model)).toBe(true);
    // Greedy runs repeat exactly.
    const again = JSON.parse(kail('run', '-m', model, '-p', 'Hello', '-n', '8', '--json').stdout);
    expect(again.tokens).toEqual(out.tokens);
  });

  it('run computes in place without loading the gRPC stack (grpc-js, protobuf, the generated contracts), which only slows its start', () => {
    // A preload that lists, at exit, every module file the process loaded.
    const hook = path.join(dir, 'list-modules.js');
    fs.writeFileSync(hook, "process.on('exit', () => process.stderr.write('MODULES ' + JSON.stringify(Object.keys(require.cache)) + '\\n'));\n");
    const loaded = (...args: string[]) => {
      const r = spawnSync(process.execPath, ['-r', hook, KAIL, ...args], { encoding: 'utf8', timeout: 120_000 });
      expect(r.status).toBe(0);
      const line = r.stderr.split('\n').find((l) => l.startsWith('MODULES '));
      return JSON.parse(line!.slice('MODULES '.length)) as string[];
    };
    const grpc = (files: string[]) => files.filter((f) => /[\\/](@grpc|protobufjs|@bufbuild|grpc-health-check)[\\/]|[\\/]packages[\\/]proto[\\/]/.test(f));
    const run = loaded('run', '-m', model, '-p', 'Hello', '-n', '2', '--json');
    expect(run.some((f) => /batch-engine/.test(f))).toBe(true);  // the list is real: the engine is in it
    expect(grpc(run)).toEqual([]);
    expect(grpc(loaded('--version'))).toEqual([]);
  });

  it('run streams text and prints tokens/s; --chat applies the template', () => {
    const r = kail('run', '-m', model, '-p', 'Hi', '-n', '4', '--chat');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('<|im_start|>user');
    expect(r.stderr).toMatch(/prompt: \d+ tokens, [\d.]+ tokens\/s \| generation: \d+ tokens, [\d.]+ tokens\/s/);
  });

  it('takes a model by its name in the models directory, as ollama run does: kail run NAME [PROMPT], -m NAME, inspect NAME', () => {
    const name = path.basename(model, '.gguf');
    expect(path.dirname(model)).toBe(path.join(dir, 'models'));
    // -m NAME (or NAME:latest) is the file of that name.
    expect(JSON.parse(kail('run', '--data-dir', dir, '-m', `${name}:latest`, '-p', 'Hello', '-n', '2', '--json').stdout).model).toBe(model);
    // kail run NAME PROMPT: one chat answer (the whole of it), as --chat gives it; the answer alone on stdout.
    const flags = ['-c', '96', '--json'];
    const viaFlag = JSON.parse(kail('run', '--data-dir', dir, '-m', model, '--chat', '-p', 'Why is the sky blue?', '-n', '-1', ...flags).stdout);
    const viaName = JSON.parse(kail('run', '--data-dir', dir, name, 'Why', 'is', 'the', 'sky', 'blue?', ...flags).stdout);
    expect(viaName.tokens).toEqual(viaFlag.tokens);
    // As ollama run: a file (or a shell pipe) on stdin is the prompt, before the words after the model.
    const fromStdin = (text: string, ...args: string[]) => {
      fs.writeFileSync(path.join(dir, 'stdin.txt'), text);
      const fd = fs.openSync(path.join(dir, 'stdin.txt'), 'r');
      try {
        return JSON.parse(spawnSync(process.execPath, [KAIL, 'run', '--data-dir', dir, name, ...args, ...flags], { encoding: 'utf8', timeout: 120_000, stdio: [fd, 'pipe', 'pipe'] }).stdout);
      } finally {
        fs.closeSync(fd);
      }
    };
    expect(fromStdin('Why is the sky blue?').tokens).toEqual(viaName.tokens);
    expect(fromStdin('Why is the', 'sky', 'blue?').tokens).toEqual(viaName.tokens);
    expect(kail('run', '--data-dir', dir, name, 'Why is the sky blue?', '-n', '3').stdout).not.toContain('<|im_start|>');
    // kail run NAME: a conversation on stdin.
    const conv = spawnSync(process.execPath, [KAIL, 'run', '--data-dir', dir, name, '-n', '2'], { encoding: 'utf8', timeout: 120_000, input: 'Hi\n' });
    expect(conv.stderr).toMatch(/conversation: 1 turn/);
    const inspect = spawnSync(process.execPath, [KAIL, 'inspect', name, '--json'], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, KAIL_DATA_DIR: dir } });
    expect(JSON.parse(inspect.stdout).path).toBe(model);
    // A name found nowhere, or the model or prompt given twice, is an error naming it.
    expect(kail('run', '--data-dir', dir, '-m', 'nope', '-p', 'x').stderr).toContain(`model file not found: nope (nor nope.gguf in ${path.join(dir, 'models')}`);
    expect(kail('run', '--data-dir', dir, name, '-m', model).stderr).toContain('give the model once');
    expect(kail('run', '--data-dir', dir, name, 'Hi', '-p', 'Ho').stderr).toContain('give the prompt once');
  });

  it("kail run NAME applies the model's Modelfile settings (ID.modelfile.json, as kail create keeps them) as ollama run does; its flags win", () => {
    fs.copyFileSync(model, path.join(dir, 'models', 'mario.gguf'));
    const template = '{{ range .Messages }}[{{ .Role }}] {{ .Content }}\n{{ end }}[assistant] ';
    const settings = { system: 'You are Mario.', template, messages: [{ role: 'user', content: 'Earlier.' }, { role: 'assistant', content: 'Yes.' }], parameters: { num_predict: 3, temperature: 0, top_k: 1, stop: ['zz'] } };
    fs.writeFileSync(path.join(dir, 'models', 'mario.modelfile.json'), JSON.stringify(settings));
    // What the Modelfile's template makes of the chat, given raw to the same file.
    const raw = (system: string, n: string) => JSON.parse(kail('run', '-m', model, '-p', `[system] ${system}\n[user] Earlier.\n[assistant] Yes.\n[user] Hello\n[assistant] `, '-n', n, '--temp', '0', '--json').stdout);
    const got = JSON.parse(kail('run', '--data-dir', dir, 'mario', 'Hello', '--json').stdout);
    const want = raw('You are Mario.', '3');
    expect([got.prompt_tokens, got.tokens]).toEqual([want.prompt_tokens, want.tokens]);
    expect(got.tokens.length).toBeLessThanOrEqual(3);
    const said = kail('run', '--data-dir', dir, 'mario', 'Hello');
    expect(said.stderr).toContain('mario.gguf: its Modelfile settings: system prompt, template, 2 message(s), num_predict 3, temperature 0, top_k 1');
    expect(said.stderr).toContain('note: PARAMETER stop has no kail run flag: not applied');
    // The command line wins: -sys and -n.
    const own = JSON.parse(kail('run', '--data-dir', dir, 'mario', 'Hello', '-sys', 'Mine.', '-n', '2', '--json').stdout);
    const ownWant = raw('Mine.', '2');
    expect([own.prompt_tokens, own.tokens]).toEqual([ownWant.prompt_tokens, ownWant.tokens]);
    // A damaged settings file is said and skipped.
    fs.writeFileSync(path.join(dir, 'models', 'mario.modelfile.json'), '{ not json');
    const damaged = kail('run', '--data-dir', dir, 'mario', 'Hello', '-n', '1');
    expect(damaged.status).toBe(0);
    expect(damaged.stderr).toMatch(/note: .*mario\.modelfile\.json cannot be read \(.*\): the model runs without its Modelfile settings/);
    fs.rmSync(path.join(dir, 'models', 'mario.gguf'));
    fs.rmSync(path.join(dir, 'models', 'mario.modelfile.json'));
  });

  it("run -cnv (llama-cli's conversation mode): a chat in this process whose turns keep the cache of the ones before; -sys, -f, /clear", () => {
    const chat = (input: string, ...flags: string[]) => {
      const r = spawnSync(process.execPath, [KAIL, 'run', '-m', model, '-cnv', '-sys', 'Be brief.', '-n', '6', ...flags], { encoding: 'utf8', timeout: 120_000, input });
      expect(r.stderr).not.toMatch(/error/);
      return r;
    };
    const r = chat('Hi\nTell me \\\nmore\n/clear\nHi\n', '--json');
    expect(r.status).toBe(0);
    const turns = r.stdout.trim().split('\n').map((l) => JSON.parse(l)) as { turn: number; prompt_tokens: number[]; prompt_cached: number; tokens: number[]; text: string }[];
    expect(turns.map((t) => t.turn)).toEqual([0, 1, 2]);
    // The first turn is what a single --chat prompt with that system message computes.
    const one = JSON.parse(kail('run', '-m', model, '--chat', '-sys', 'Be brief.', '-p', 'Hi', '-n', '6', '--json').stdout);
    expect(turns[0].prompt_tokens).toEqual(one.prompt_tokens);
    expect(turns[0].tokens).toEqual(one.tokens);
    expect(turns[0].prompt_cached).toBe(0);
    // The second turn's prompt holds the first (the message of two lines joined) and keeps its cache.
    expect(turns[1].prompt_cached).toBeGreaterThanOrEqual(turns[0].prompt_tokens.length);
    expect(turns[1].prompt_tokens.slice(0, turns[1].prompt_cached)).toEqual(turns[0].prompt_tokens.concat(turns[0].tokens).slice(0, turns[1].prompt_cached));
    // llama-cli's -st: one turn (the first message read, or -p's), then the end; -no-cnv: no conversation.
    for (const st of [chat('Hi\nmore\n', '-st', '--json'), chat('more\n', '-st', '-p', 'Hi', '--json')]) {
      expect(st.stdout.trim().split('\n').map((l) => JSON.parse(l).tokens)).toEqual([turns[0].tokens]);
      expect(st.status).toBe(0);
    }
    const plain = spawnSync(process.execPath, [KAIL, 'run', model, '-no-cnv', '-n', '2', '--json'], { encoding: 'utf8', timeout: 120_000, input: 'Hi\n' });
    expect(JSON.parse(plain.stdout).tokens).toHaveLength(2);
    const text = kail('run', '-m', model, '-cnv', '-n', '1', '--json').stdout; // (no input: no turns)
    expect(text).toBe('');
    // After /clear the same message again: the same prompt and answer, its start kept from before.
    expect(turns[2].prompt_tokens).toEqual(turns[0].prompt_tokens);
    expect(turns[2].tokens).toEqual(turns[0].tokens);
    expect(turns[2].prompt_cached).toBeGreaterThan(0);
    // ollama run's /set: the next answers take the parameter and the system message (here as one --chat prompt would).
    const set = chat('Hi\n/set parameter num_predict 2\n/set system Be terse.\n/clear\nHi\n', '--json');
    const st = set.stdout.trim().split('\n').map((l) => JSON.parse(l)) as typeof turns;
    expect(st[0].tokens).toEqual(turns[0].tokens);
    const terse = JSON.parse(kail('run', '-m', model, '--chat', '-sys', 'Be terse.', '-p', 'Hi', '-n', '2', '--json').stdout);
    expect([st[1].prompt_tokens, st[1].tokens]).toEqual([terse.prompt_tokens, terse.tokens]);
    expect(set.stderr).toContain("Set parameter 'num_predict' to '2'");
    // Streamed on stdout, the totals on stderr; -f gives the first message.
    fs.writeFileSync(path.join(dir, 'first.txt'), 'Hi\n');
    const s = chat('', '-f', path.join(dir, 'first.txt'));
    expect(s.status).toBe(0);
    expect(s.stdout).toBe(turns[0].text + '\n');
    expect(s.stderr).toMatch(/conversation: 1 turn\(s\) \| prompts: \d+ tokens, 0 kept from earlier turns/);
    const both = kail('run', '-m', model, '-p', 'a', '-f', path.join(dir, 'first.txt'));
    expect(both.status).not.toBe(0);
    expect(both.stderr).toMatch(/-p or -f, not both/);
  });

  it("run --think (ollama run's) and --chat-template-kwargs (llama.cpp's) reach the template; a chat's /set nothink too", () => {
    const t = path.join(dir, 'thinking.jinja');
    fs.writeFileSync(t, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if not enable_thinking %}<nothink>{% endif %}{% if reasoning_effort is defined %}<effort {{ reasoning_effort }}>{% endif %}<assistant>");
    const prompt = (...flags: string[]) => {
      const r = kail('run', '-m', model, '--chat', '-p', 'Hi', '-n', '1', '--json', '--chat-template-file', t, ...flags);
      expect(r.stderr).not.toMatch(/error/);
      return (JSON.parse(r.stdout) as { prompt_tokens: number[] }).prompt_tokens;
    };
    const plain = prompt();
    const off = prompt('--think=false');
    expect(off).not.toEqual(plain);
    expect(prompt('--chat-template-kwargs', '{"enable_thinking": false}')).toEqual(off);
    expect(prompt('--think')).toEqual(plain);
    const high = prompt('--think', 'high');
    expect(high.length).toBeGreaterThan(plain.length);
    expect(prompt('--chat-template-kwargs', '{"reasoning_effort": "high"}')).toEqual(high);
    const cnv = spawnSync(process.execPath, [KAIL, 'run', '-m', model, '-cnv', '-n', '1', '--json', '--chat-template-file', t], { encoding: 'utf8', timeout: 120_000, input: '/set nothink\nHi\n' });
    expect((JSON.parse(cnv.stdout.trim()) as { prompt_tokens: number[] }).prompt_tokens).toEqual(off);
    // A template whose generation prompt opens <think>: the answer (never closing it) is all reasoning,
    // which a pipe does not get (kail chat's way), while --json keeps the text.
    const opens = path.join(dir, 'opens.jinja');
    fs.writeFileSync(opens, '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant><think>\n');
    const run = (...flags: string[]) => spawnSync(process.execPath, [KAIL, 'run', '-m', model, '-cnv', '-n', '3', '--ignore-eos', '--chat-template-file', opens, ...flags], { encoding: 'utf8', timeout: 120_000, input: 'Hi\n' });
    const thought = JSON.parse(run('--json').stdout.trim()) as { text: string };
    expect(thought.text.length).toBeGreaterThan(0);
    expect(thought.text).not.toContain('</think>');
    expect(run().stdout).toBe('\n');
    // So does `kail run MODEL PROMPT`'s one answer, as ollama run's.
    const once = spawnSync(process.execPath, [KAIL, 'run', model, 'Hi', '-n', '3', '--ignore-eos', '--chat-template-file', opens], { encoding: 'utf8', timeout: 120_000 });
    expect([once.status, once.stdout]).toEqual([0, '\n']);
    expect(kail('run', '-m', model, '--chat', '-p', 'Hi', '--think', 'maybe').stderr).toMatch(/--think takes true, false, high, medium or low, got 'maybe'/);
    expect(kail('run', '-m', model, '-p', 'Hi', '--think=false').stderr).toMatch(/--think and --chat-template-kwargs go with --chat or --conversation/);
  });

  it("run --chat-template / --chat-template-file (llama.cpp's) render the chat in place of the model's template; a broken one is an error", () => {
    const t = path.join(dir, 'plain.jinja');
    fs.writeFileSync(t, "{% for m in messages %}<<{{ m.role }}>> {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<<assistant>> {% endif %}");
    const r = kail('run', '-m', model, '--chat', '-sys', 'S', '-p', 'Hi', '-n', '1', '--chat-template-file', t);
    expect(r.status).toBe(0);
    expect(r.stdout.startsWith('<<system>> S\n<<user>> Hi\n<<assistant>> ')).toBe(true);
    const c = spawnSync(process.execPath, [KAIL, 'run', '-m', model, '-cnv', '-n', '2', '--json', '--chat-template', 'chatml'], { encoding: 'utf8', input: 'Hi\n' });
    const tokens = JSON.parse(c.stdout).prompt_tokens as number[];
    expect(JSON.parse(kail('tokenize', '-m', model, '--parse-special', '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n').stdout)).toEqual(tokens);
    const bad = kail('run', '-m', model, '--chat', '--chat-template', '{% if %}');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/--chat-template: cannot parse chat template/);
    expect(kail('run', '-m', model, '--chat-template', 'chatml').stderr).toMatch(/--chat-template goes with --chat or --conversation/);
  });

  it("run -r (llama-cli's reverse prompt) stops at a text and prints it; escapes in -p as llama.cpp processes them unless --no-escape", () => {
    const json = (...flags: string[]) => JSON.parse(kail('run', '-m', model, '-p', 'Hello', '-n', '40', '--json', ...flags).stdout);
    const full = json();
    const word = /[A-Za-z]{3,}/.exec(full.text.slice(4))![0];
    const at = full.text.indexOf(word);
    const stopped = json('-r', word);
    expect(stopped.finish_reason).toBe('stop');
    expect(stopped.stopping_word).toBe(word);
    expect(stopped.text).toBe(full.text.slice(0, at));
    expect(full.tokens.slice(0, stopped.tokens.length)).toEqual(stopped.tokens);
    const printed = kail('run', '-m', model, '-p', 'Hello', '-n', '40', '-r', 'zzzzzz', '-r', word);
    expect(printed.stdout).toBe('Hello' + full.text.slice(0, at) + word + '\n');
    // "\n" in -p is a newline, as llama-cli reads it; --no-escape keeps the backslash.
    const newline = JSON.parse(kail('tokenize', '-m', model, 'a\nb').stdout);
    expect(JSON.parse(kail('run', '-m', model, '-p', 'a\\nb', '-n', '1', '--json').stdout).prompt_tokens.slice(-newline.length)).toEqual(newline);
    expect(JSON.parse(kail('run', '-m', model, '-p', 'a\\nb', '-n', '1', '--json', '--no-escape').stdout).prompt_tokens.slice(-newline.length)).not.toEqual(newline);
    const empty = kail('run', '-m', model, '-r', '');
    expect(empty.status).not.toBe(0);
    expect(empty.stderr).toMatch(/--reverse-prompt takes a non-empty text/);
  });

  it("run takes llama-cli's sampler flags: Mirostat at entropy 0 picks greedily, DRY changes a greedy answer, bad values are errors", () => {
    const tokens = (...flags: string[]) => {
      const r = kail('run', '-m', model, '-p', 'Hello', '-n', '48', '--json', ...flags);
      expect(r.stderr).toBe('');
      return JSON.parse(r.stdout).tokens as number[];
    };
    const greedy = tokens();
    expect(tokens('--temp', '1.5', '--seed', '3', '--mirostat', '2', '--mirostat-ent', '0', '--mirostat-lr', '0')).toEqual(greedy);
    expect(tokens('--dry-multiplier', '100', '--dry-allowed-length', '1', '--dry-penalty-last-n', '-1', '--dry-sequence-breaker', 'none')).not.toEqual(greedy);
    expect(tokens('--repeat-penalty', '5', '--repeat-last-n', '0')).toEqual(greedy);
    const bad = kail('run', '-m', model, '-n', '1', '--mirostat', '3');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/--mirostat must be an integer in 0\.\.2/);
    // llama.cpp's -s -1: a random seed (at temperature 0 still the greedy answer); below -1 an error.
    expect(tokens('--seed', '-1', '--temp', '0')).toEqual(greedy);
    const badSeed = kail('run', '-m', model, '-n', '1', '--seed', '-2');
    expect(badSeed.status).not.toBe(0);
    expect(badSeed.stderr).toContain("--seed must be an integer in -1..4294967295, got '-2'");
    // --samplers orders the chain; adaptive_p in it draws by adaptive-p, reproducibly for a seed.
    const adaptive = ['--temp', '1', '--seed', '7', '--samplers', 'top_k;temperature;adaptive_p', '--adaptive-target', '0.3', '--adaptive-decay', '0.5'];
    expect(tokens(...adaptive)).toEqual(tokens(...adaptive));
    expect(tokens('--temp', '0', '--samplers', 'top_k;temperature')).toEqual(greedy);
    const badOrder = kail('run', '-m', model, '-p', 'Hello', '-n', '1', '--samplers', 'top_k;bogus');
    expect(badOrder.status).not.toBe(0);
    expect(badOrder.stdout).toBe('');
    expect(badOrder.stderr).toMatch(/samplers must be a list .* got \["top_k","bogus"\]/);
  });

  it('run --grammar / --grammar-file / -j hold the output to a GBNF grammar or a JSON schema; bad ones are errors naming the place', () => {
    const g = 'root ::= "Answer: " ("yes" | "no") " (" [0-9]{1,2} "%)"';
    for (const seed of ['1', '2', '3']) {
      const r = kail('run', '-m', model, '-p', 'Hello', '-n', '40', '--temp', '1', '--seed', seed, '--grammar', g, '--json');
      expect(r.stderr).toBe('');
      const out = JSON.parse(r.stdout);
      expect(out.text).toMatch(/^Answer: (yes|no) \([0-9]{1,2}%\)$/);
      expect(out.finish_reason).toBe('stop');
    }
    const file = path.join(dir, 'list.gbnf');
    fs.writeFileSync(file, '# a list\nroot ::= item{2,3}\nitem ::= "- " [a-z]{1,6} "\\n"\n');
    const l = JSON.parse(kail('run', '-m', model, '-p', 'List:', '-n', '60', '--grammar-file', file, '--json').stdout);
    expect(l.text).toMatch(/^(- [a-z]{1,6}\n){2,3}$/);
    const bad = kail('run', '-m', model, '-n', '4', '--grammar', 'root ::= "a"\nitem ::= [b');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/grammar: unexpected end of input in a character class at line 2, column 12/);
    expect(kail('run', '-m', model, '-n', '4', '--grammar-file', path.join(dir, 'none.gbnf')).stderr).toMatch(/--grammar-file: cannot read .*none\.gbnf: ENOENT/);
    // llama-cli's -j: one JSON value of a schema (any type at the top).
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 }, tag: { type: 'string', pattern: '^[a-z]{2,4}$' } }, required: ['n', 'tag'] };
    for (const seed of ['1', '2']) {
      const j = JSON.parse(kail('run', '-m', model, '-p', 'JSON:', '-n', '120', '--temp', '1', '--seed', seed, '-j', JSON.stringify(schema), '--json').stdout);
      const v = JSON.parse(j.text);
      expect(v.n >= 1 && v.n <= 9 && /^[a-z]{2,4}$/.test(v.tag)).toBe(true);
    }
    const num = JSON.parse(kail('run', '-m', model, '-p', 'N:', '-n', '20', '--temp', '1', '--seed', '5', '-j', '{"type":"integer","minimum":10,"maximum":99}', '--json').stdout);
    expect(num.finish_reason).toBe('stop');
    expect(Number(num.text)).toBeGreaterThanOrEqual(10);
    expect(Number(num.text)).toBeLessThanOrEqual(99);
    expect(kail('run', '-m', model, '-n', '4', '-j', '{nope').stderr).toMatch(/--json-schema: not JSON/);
    expect(kail('run', '-m', model, '-n', '4', '-j', '{}', '--grammar', 'root ::= "a"').stderr).toMatch(/give one of --grammar, --grammar-file, --json-schema \(--format\) and --json-schema-file/);
    // ollama run's --format: a schema as -j, or json (an object).
    const viaFormat = JSON.parse(kail('run', '-m', model, '-p', 'N:', '-n', '20', '--temp', '1', '--seed', '5', '--format', '{"type":"integer","minimum":10,"maximum":99}', '--json').stdout);
    expect(viaFormat.text).toBe(num.text);
    expect(JSON.parse(kail('run', '-m', model, '-p', 'J:', '-n', '6', '--format', 'json', '--json').stdout).text).toMatch(/^\s*\{/);
    expect(kail('run', '-m', model, '-n', '4', '--format', '{nope').stderr).toMatch(/--format: not JSON/);
  });

  it('plan without --ram or a profile plans against 80% of the memory available now, saying so; --ram takes a share too', () => {
    const r = kail('plan', '-m', model, '--data-dir', dir, '--json');
    expect(r.status).toBe(0);
    const m = /--ram ([\d.]+) GiB: 80% of the ([\d.]+) GiB available now/.exec(r.stderr);
    expect(m).not.toBeNull();
    expect(Math.abs(Number(m![1]) - 0.8 * Number(m![2]))).toBeLessThan(0.02);
    expect(r.stderr).toContain('profile.json: kail profile measures the machine');
    const p = JSON.parse(r.stdout);
    expect(p.ramBytes / 2 ** 30).toBeCloseTo(Number(m![1]), 1);
    expect(p.fits).toBe(true);
    // --ram as a share of the memory available now.
    const half = JSON.parse(kail('plan', '-m', model, '--ram', '40%', '--json').stdout).ramBytes;
    expect(half / 2 ** 30).toBeCloseTo(Number(m![2]) * 0.4, 0);
    expect(kail('plan', '-m', model, '--ram', '0%').stderr).toContain("--ram: '0%': a share of the memory available must be above 0% and at most 100%");
  });

  it('--cache-type q8_0: run and bench with a Q8_0 KV cache, plan counts it at 34 bytes per 32 values; a bad type is an error', () => {
    const r = kail('run', '-m', model, '-p', 'Hello', '-n', '8', '--cache-type', 'q8_0', '--json');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).tokens).toHaveLength(8);
    expect(kail('bench', '-m', model, '-p', '8', '-n', '4', '--cache-type', 'q8_0', '--json').status).toBe(0);
    const plan = (t: string) => JSON.parse(kail('plan', '-m', model, '--ram', '1G', '--reserve', '0', '--ctx', '256', '--cache-type', t, '--json').stdout).kvBytes as number;
    expect(plan('q8_0') / plan('f16')).toBeCloseTo(34 / 64, 6);
    expect(plan('q4_0') / plan('f16')).toBeCloseTo(18 / 64, 6);
    const bad = kail('run', '-m', model, '-n', '1', '--cache-type', 'q4_k');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--cache-type must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q4_k'");
  });

  it("-ctk/-ctv (--cache-type-k/-v): K's and V's types apart, each defaulting to --cache-type, in run, plan and inspect", () => {
    const r = kail('run', '-m', model, '-p', 'Hello', '-n', '8', '-ctk', 'q8_0', '-ctv', 'q4_0', '--json');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).tokens).toHaveLength(8);
    const plan = (...a: string[]) => JSON.parse(kail('plan', '-m', model, '--ram', '1G', '--reserve', '0', '--ctx', '256', ...a, '--json').stdout).kvBytes as number;
    const f16 = plan();
    expect(plan('-ctk', 'q8_0', '-ctv', 'q4_0') / f16).toBeCloseTo((34 + 18) / 128, 6);
    expect(plan('--cache-type', 'q8_0', '--cache-type-v', 'q4_0') / f16).toBeCloseTo((34 + 18) / 128, 6);
    expect(plan('--cache-type-v', 'q4_0') / f16).toBeCloseTo((64 + 18) / 128, 6);
    expect(kail('inspect', model, '-ctk', 'q8_0', '-ctv', 'q4_0').stdout).toMatch(/kv cache .* per token \(K q8_0, V q4_0, all layers\)/);
    const bad = kail('run', '-m', model, '-n', '1', '-ctv', 'q4_k');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--cache-type-v must be f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, got 'q4_k'");
  });

  it("run --context-shift goes on past the context (llama-cli's), dropping half of what follows --keep; without it the output stops there", () => {
    const base = ['run', '-m', model, '-p', 'Hello there', '-n', '40', '-c', '24', '--ignore-eos', '--json'];
    const plain = JSON.parse(kail(...base).stdout);
    const n = plain.prompt_tokens.length;
    expect(plain.tokens).toHaveLength(24 - n);
    expect(plain.finish_reason).toBe('length');
    expect(plain.context_shifted).toBe(0);
    const shifted = JSON.parse(kail(...base, '--context-shift', '--keep', '2').stdout);
    expect(shifted.tokens).toHaveLength(40);
    expect(shifted.context_shifted).toBeGreaterThan(0);
    expect(shifted.tokens.slice(0, plain.tokens.length)).toEqual(plain.tokens);
    // gpt-oss's sliding-window layers keep a ring: a shift needs --swa-full (llama.cpp's), which keeps every position.
    const oss = path.join(dir, 'oss.gguf');
    writeModel({ config: getPreset('tiny-gpt-oss').config, fileType: 'F32', seed: 2, out: oss });
    // (The ring holds the window and a batch of 512: a context of 1100 is past twice that.)
    const ring = kail('run', '-m', oss, '-p', 'Hello there', '-n', '1200', '-c', '1100', '--ignore-eos', '--context-shift');
    expect(ring.status).not.toBe(0);
    expect(ring.stderr).toContain('--swa-full');
    // (kail plan counts those layers' KV at the full context with --swa-full.)
    const kvOf = (...extra: string[]) => JSON.parse(kail('plan', '-m', oss, '--ram', '1G', '-c', '1100', '--json', ...extra).stdout).kvBytes as number;
    expect(kvOf('--swa-full')).toBeGreaterThan(kvOf());
    const full = JSON.parse(kail('run', '-m', oss, '-p', 'Hello there', '-n', '1200', '-c', '1100', '--ignore-eos', '--context-shift', '--swa-full', '--json').stdout);
    expect(full.tokens).toHaveLength(1200);
    expect(full.context_shifted).toBeGreaterThan(0);
    const r = kail('run', '-m', model, '-p', 'Hi', '-n', '4', '--keep', 'x');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('--keep');
  });

  it("run --prompt-cache reuses the prompt's KV cache from a file (llama-cli's), with the same tokens; -ro leaves it; another model's file is an error", () => {
    const cache = path.join(dir, 'prompt.cache');
    const run = (prompt: string, ...extra: string[]) => kail('run', '-m', model, '-p', prompt, '-n', '6', '--ignore-eos', '--json', '--prompt-cache', cache, ...extra);
    const p = 'Once upon a time there was a mixture of experts';
    const first = JSON.parse(run(p).stdout);
    expect(first.prompt_cached).toBe(0);
    expect(fs.existsSync(cache)).toBe(true);
    const second = JSON.parse(run(p).stdout);
    expect(second.prompt_cached).toBe(first.prompt_tokens.length - 1);
    expect(second.tokens).toEqual(first.tokens);
    const before = fs.readFileSync(cache);
    const longer = JSON.parse(run(p + ' who lived in a router', '--prompt-cache-ro').stdout);
    expect(longer.prompt_cached).toBe(first.prompt_tokens.length);
    expect(fs.readFileSync(cache).equals(before)).toBe(true);
    const plain = JSON.parse(kail('run', '-m', model, '-p', p + ' who lived in a router', '-n', '6', '--ignore-eos', '--json').stdout);
    expect(longer.tokens).toEqual(plain.tokens);
    // --prompt-cache-all: the file then holds the generated tokens too (all but the last, never fed).
    const all = path.join(dir, 'prompt-all.cache');
    const withAll = JSON.parse(kail('run', '-m', model, '-p', p, '-n', '6', '--ignore-eos', '--json', '--prompt-cache', all, '--prompt-cache-all').stdout);
    const buf = fs.readFileSync(all);
    const header = JSON.parse(buf.subarray(12, 12 + buf.readUInt32LE(8)).toString('utf8'));
    expect(header.tokens).toEqual([...withAll.prompt_tokens, ...withAll.tokens.slice(0, 5)]);
    const other = path.join(dir, 'other-llama.gguf');
    writeModel({ config: getPreset('tiny-llama').config, fileType: 'F32', seed: 2, out: other });
    const bad = kail('run', '-m', other, '-p', p, '-n', '2', '--prompt-cache', cache);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/slot file .*prompt\.cache: saved for another model/);
  });

  it("run --control-vector / --control-vector-scaled FNAME SCALE / --control-vector-layer-range (llama.cpp's) steer the output; strength 0 changes nothing; a vector of another size is an error", () => {
    const cfg = getPreset('tiny-qwen3moe').config;
    const m = path.join(dir, 'cv-model.gguf');
    writeModel({ config: cfg, fileType: 'F32', seed: 3, out: m });
    const cv = path.join(dir, 'cv.gguf');
    writeControlVector({ config: cfg, out: cv, seed: 5, std: 2 });
    const base = ['run', '-m', m, '-p', 'Hello there', '-n', '8', '--ignore-eos', '--json'];
    const plain = JSON.parse(kail(...base).stdout).tokens;
    const steered = kail(...base, '--control-vector', cv);
    expect(steered.status).toBe(0);
    expect(JSON.parse(steered.stdout).tokens).not.toEqual(plain);
    expect(JSON.parse(kail(...base, '--control-vector-scaled', cv, '0').stdout).tokens).toEqual(plain);
    // Layer 1 is the only one with a direction in a 2-layer model: a range past it changes nothing.
    expect(JSON.parse(kail(...base, '--control-vector', cv, '--control-vector-layer-range', '2', '3').stdout).tokens).toEqual(plain);
    const bad = kail(...base, '--control-vector', path.join(dir, 'cv-narrow.gguf'));
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('control vector');
    writeControlVector({ config: { ...cfg, dim: 128 }, out: path.join(dir, 'cv-narrow.gguf') });
    expect(kail(...base, '--control-vector', path.join(dir, 'cv-narrow.gguf')).stderr).toContain("control vector n_embd 128 does not match the model's 256");
  });

  it('logits writes n_tokens x n_vocab float32 and a JSON sidecar', () => {
    const out = path.join(dir, 'l.f32');
    const r = kail('logits', '-m', model, '--tokens', '1,2,3,4', '--out', out);
    expect(r.status).toBe(0);
    const meta = JSON.parse(fs.readFileSync(path.join(dir, 'l.json'), 'utf8'));
    expect(meta.n_tokens).toBe(4);
    expect(fs.statSync(out).size).toBe(4 * meta.n_vocab * 4);
  });

  it('tokenize works on a vocabulary-only file', () => {
    const r = kail('tokenize', '-m', VOCAB, 'Hello world', '--no-add-special');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual([9707, 1879]);
  });

  it('inspect and bench report on the model', () => {
    const i = JSON.parse(kail('inspect', model, '--json').stdout);
    expect(i.architecture).toBe('qwen3moe');
    expect(i.expertCount).toBeGreaterThan(1);
    expect(i.bytesPerToken).toBeLessThan(i.fileBytes);
    const b = JSON.parse(kail('bench', '-m', model, '-p', '16', '-n', '4', '--json').stdout);
    expect(b.prompt_tps).toBeGreaterThan(0);
    expect(b.gen_tps).toBeGreaterThan(0);
    expect(b.depth).toBe(0);
    // -d (llama-bench's depth): a row per depth, labelled as llama-bench labels its tests.
    const d = JSON.parse(kail('bench', '-m', model, '-p', '16', '-n', '4', '-d', '0,48', '--json').stdout);
    expect(d.rows.map((x: { depth: number }) => x.depth)).toEqual([0, 48]);
    const t = kail('bench', '-m', model, '-p', '16', '-n', '4', '-d', '48');
    // (The generation follows the prompt: it runs at depth 48 + 16, and the text says so as -o md does.)
    expect(t.stdout).toMatch(/^pp16 @ d48: [\d.]+ tokens\/s\ntg4 @ d64: [\d.]+ tokens\/s$/m);
    const tmd = kail('bench', '-m', model, '-p', '16', '-n', '4', '-d', '48', '-o', 'md').stdout.trim().split('\n').slice(2).map((l) => l.split('|')[7].trim());
    expect(tmd).toEqual(['pp16 @ d48', 'tg4 @ d64']);
    expect(kail('bench', '-m', model, '-d', '8', '--parallel', '2').stderr).toContain('--n-depth does not combine with --parallel');
    // Lists and ranges (llama-bench's), a row per combination; -o md prints each test once.
    const md = kail('bench', '-m', model, '-p', '8-16+8', '-n', '0,4', '-r', '2', '-o', 'md');
    expect(md.status).toBe(0);
    const tests = md.stdout.trim().split('\n').slice(2).map((l) => l.split('|').map((c) => c.trim()));
    expect(tests.map((c) => c[7])).toEqual(['pp8', 'tg4 @ d8', 'pp16', 'tg4 @ d16']);
    for (const c of tests) expect(c[8]).toMatch(/^[\d.]+ ± [\d.]+$/);
    const jl = kail('bench', '-m', model, '-p', '0', '-n', '4', '-d', '0,8', '-o', 'jsonl').stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(jl.map((x: { test: string }) => x.test)).toEqual(['tg4 @ d1', 'tg4 @ d9']);
    expect(kail('bench', '-m', model, '-p', '0', '-n', '0').stderr).toContain('nothing to measure: -p and -n are both 0');
    expect(kail('bench', '-m', model, '-p', '8,16', '--parallel', '2').stderr).toContain('-p and -n take one value each with --parallel');
    expect(kail('bench', '-m', model, '-o', 'xml').stderr).toContain("--output must be one of text, md, csv, json, jsonl, got 'xml'");
    // -pg (llama-bench's): prompt and generation as one test, after the -p/-n rows.
    const pg = kail('bench', '-m', model, '-p', '8', '-n', '4', '-pg', '8,4', '-o', 'md');
    expect(pg.stdout.trim().split('\n').slice(2).map((l) => l.split('|')[7].trim())).toEqual(['pp8', 'tg4 @ d8', 'pp8+tg4']);
    expect(kail('bench', '-m', model, '-p', '8', '-n', '4', '-pg', '8,4').stdout).toMatch(/^pp8\+tg4: [\d.]+ tokens\/s$/m);
  });

  it('bench --parallel decodes several sequences per pass, one row per count', () => {
    const r = kail('bench', '-m', model, '-p', '8', '-n', '6', '--parallel', '1,3', '--feed', 'random', '--json');
    expect(r.status).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.rows.map((x: { sequences: number }) => x.sequences)).toEqual([1, 3]);
    expect(j.rows[0].speedup).toBe(1);
    expect(j.rows[1].experts_per_layer).toBeGreaterThan(j.rows[0].experts_per_layer);
    const t = kail('bench', '-m', model, '-p', '8', '-n', '4', '--parallel', '2');
    expect(t.stdout).toMatch(/\| sequences \| pp tokens\/s \| tg tokens\/s \| ms per pass/);
    expect(t.stdout).toMatch(/^\| 2 \| /m);
    const bad = kail('bench', '-m', model, '--parallel', '1,x');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--parallel must be a comma-separated list of integers in 1..256, got '1,x'");
    expect(kail('bench', '-m', model, '--parallel', '2', '--lookup').stderr).toContain('--parallel does not combine with');
  });

  it("run --mtp / bench --mtp draft with a DeepSeek-V4 file's own MTP block (the target giving the streams it reads): plain greedy's tokens", () => {
    const ds4 = path.join(dir, 'ds4.gguf');
    writeModel({ config: getPreset('tiny-deepseek4').config, fileType: 'Q8_0', seed: 3, out: ds4 });
    const plain = JSON.parse(kail('run', '-m', ds4, '-p', 'Hello world', '-n', '12', '--ignore-eos', '--json').stdout);
    const r = kail('run', '-m', ds4, '-p', 'Hello world', '-n', '12', '--ignore-eos', '--json', '--mtp', '--spec-k', '3');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).tokens).toEqual(plain.tokens);
    const b = kail('bench', '-m', ds4, '-p', '8', '-n', '12', '--mtp', '--json');
    expect(b.status).toBe(0);
    const j = JSON.parse(b.stdout);
    expect(j.mtp).toBe(true);
    expect(j.speculative.tokens).toEqual(j.baseline.tokens);
    expect(j.speculative.speculative.draftedTokens).toBeGreaterThan(0);
  });

  it("run --draft / bench --draft with a Gemma 4 assistant draft (reading its target's KV cache): plain greedy's tokens; the draft alone is refused", () => {
    const target = path.join(dir, 'g4.gguf');
    const draft = path.join(dir, 'g4-assistant.gguf');
    writeModel({ config: getPreset('tiny-gemma4').config, fileType: 'Q8_0', seed: 3, out: target });
    writeModel({ config: getPreset('tiny-gemma4-assistant').config, fileType: 'Q8_0', seed: 3, out: draft });
    const plain = JSON.parse(kail('run', '-m', target, '-p', 'Hello world', '-n', '12', '--ignore-eos', '--json').stdout);
    const r = kail('run', '-m', target, '-p', 'Hello world', '-n', '12', '--ignore-eos', '--json', '--draft', draft, '--spec-k', '3');
    expect(r.status).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.tokens).toEqual(plain.tokens);
    expect([j.speculative.mode, j.speculative.draftedTokens > 0]).toEqual(['assistant', true]);
    const b = JSON.parse(kail('bench', '-m', target, '-p', '8', '-n', '12', '--draft', draft, '--json').stdout);
    expect(b.speculative.tokens).toEqual(b.baseline.tokens);
    expect(b.speculative.speculative.mode).toBe('assistant');
    const alone = kail('run', '-m', draft, '-p', 'Hello', '-n', '2');
    expect(alone.status).not.toBe(0);
    expect(alone.stderr).toMatch(/attends over its target's KV cache/);
  });

  it("run --draft / bench --draft with a DFlash draft (its target's layers into its own cache, a block per pass): plain greedy's tokens; inspect and the draft alone", () => {
    const target = path.join(dir, 'qwen3.gguf');
    const draft = path.join(dir, 'dflash.gguf');
    writeModel({ config: getPreset('tiny-qwen3').config, fileType: 'Q8_0', seed: 3, out: target });
    writeModel({ config: getPreset('tiny-dflash').config, fileType: 'Q8_0', seed: 3, out: draft });
    const plain = JSON.parse(kail('run', '-m', target, '-p', 'Hello world', '-n', '12', '--ignore-eos', '--json').stdout);
    const r = kail('run', '-m', target, '-p', 'Hello world', '-n', '12', '--ignore-eos', '--json', '--draft', draft, '--spec-k', '5');
    expect(r.status).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.tokens).toEqual(plain.tokens);
    expect([j.speculative.mode, j.speculative.draftedTokens > 0]).toEqual(['dflash', true]);
    const b = JSON.parse(kail('bench', '-m', target, '-p', '8', '-n', '12', '--draft', draft, '--json').stdout);
    expect(b.speculative.tokens).toEqual(b.baseline.tokens);
    expect(b.speculative.speculative.mode).toBe('dflash');
    // Its cache: 2 blocks x 2 kv heads x 64 x (K + V), f16.
    expect(JSON.parse(kail('inspect', draft, '--json').stdout).kvCache.bytesPerToken).toBe(2 * 2 * 64 * 2 * 2);
    const alone = kail('run', '-m', draft, '-p', 'Hello', '-n', '2');
    expect(alone.status).not.toBe(0);
    expect(alone.stderr).toMatch(/no token_embd.weight of its own: it takes its target's/);
  });

  it('inspect reports the KV cache per token; on an MLA file, the latent cache against a per-head one', () => {
    const i = JSON.parse(kail('inspect', model, '--json').stdout);
    expect(i.kvCache.kvType).toBe('f16');
    expect(i.kvCache.bytesPerToken).toBeGreaterThan(0);
    expect(i.kvCache.mla).toBeUndefined();
    expect(i.kvCache.recurrentBytesPerSequence).toBe(0);
    // A Qwen3.5 file: the attention block's rows per token, and each delta-net block's state per sequence.
    const q35 = path.join(dir, 'q35.gguf');
    writeModel({ config: getPreset('tiny-qwen35moe').config, fileType: 'Q8_0', seed: 3, out: q35 });
    const r = JSON.parse(kail('inspect', q35, '--json').stdout);
    // 1 attention block x 2 kv heads x 64 x (K + V) f16; 3 delta-net blocks x (3 x 512 conv inputs + 4 heads x 64 x 64) F32.
    expect(r.kvCache.bytesPerToken).toBe(2 * 64 * 2 * 2);
    expect(r.kvCache.recurrentBytesPerSequence).toBe(3 * (3 * 512 + 4 * 64 * 64) * 4);
    expect(kail('inspect', q35).stdout).toMatch(/recurrent state 210\.00 KiB per sequence/);
    // MiniMax-01: a 64 x 64 state per head (8 heads) in each lightning block (blocks 0 and 2 of 4), no convolution.
    const mm = path.join(dir, 'mm.gguf');
    writeModel({ config: getPreset('tiny-minimax-01-interval').config, fileType: 'Q8_0', seed: 3, out: mm });
    expect(JSON.parse(kail('inspect', mm, '--json').stdout).kvCache.recurrentBytesPerSequence).toBe(2 * 8 * 64 * 64 * 4);
    // Mamba-2 without attention: no KV rows, 4 blocks x (3 x 768 conv inputs + 8 heads x 64 x 64) F32.
    const m2 = path.join(dir, 'm2.gguf');
    writeModel({ config: getPreset('tiny-mamba2').config, fileType: 'Q8_0', seed: 3, out: m2 });
    const m2i = kail('inspect', m2);
    expect(m2i.stdout).toMatch(/kv cache +none \(no attention layers\)/);
    expect(m2i.stdout).toMatch(/recurrent state 548\.00 KiB per sequence/);
    const ds = path.join(dir, 'ds3.gguf');
    writeModel({ config: getPreset('tiny-deepseek3').config, fileType: 'F16', seed: 3, out: ds });
    const j = JSON.parse(kail('inspect', ds, '--json').stdout);
    // 3 layers x (kv_lora 256 + rope 32) f16; per head (4 heads): nope 64 + value 64, rope once.
    expect(j.kvCache.bytesPerToken).toBe(3 * (256 + 32) * 2);
    expect(j.kvCache.mla.absorbed).toBe(j.kvCache.bytesPerToken);
    expect(j.kvCache.mla.naiveShared).toBe(3 * (4 * 128 + 32) * 2);
    // With --cache-type q8_0: 34 bytes per 32 values, the per-head comparison in the same type.
    const q = JSON.parse(kail('inspect', ds, '--json', '--cache-type', 'q8_0').stdout);
    expect(q.kvCache).toMatchObject({ kvType: 'q8_0', bytesPerToken: (3 * (256 + 32) * 34) / 32 });
    expect(q.kvCache.mla.absorbed).toBe(q.kvCache.bytesPerToken);
    expect(q.kvCache.mla.naiveShared).toBe((3 * (4 * 128 + 32) * 34) / 32);
    const text = kail('inspect', ds).stdout;
    expect(text).toMatch(/kv cache\s+1\.69 KiB per token \(f16, all layers\)/);
    expect(text).toContain('MLA latent cache (kv_lora 256 + rope 32 per layer)');
    // A vocabulary-only file has no KV line, and inspect still works.
    const v = JSON.parse(kail('inspect', VOCAB, '--json').stdout);
    expect(v.kvCache).toBeNull();
  });

  it('inspect and plan on an encoder-decoder (t5) file: the decoder per generated token, the encoder and the cross rows per prompt', () => {
    const t5 = path.join(dir, 't5.gguf');
    writeModel({ config: getPreset('tiny-t5').config, fileType: 'F32', seed: 3, out: t5 });
    const text = kail('inspect', t5).stdout;
    // 3 encoder and 2 decoder blocks, a K and a V row of 4 heads x 48 per layer in F16.
    expect(text).toMatch(/layers +3 encoder, 2 decoder\n/);
    expect(text).toMatch(/bytes\/token +0\.01 GiB of weights read per generated token \(the decoder's; 0\.01 GiB once per prompt: the encoder's and the cross-attention K\/V\)/);
    expect(text).toMatch(/kv cache +1\.50 KiB per generated token \(f16, decoder self-attention, 2 layers\)\n +\+ 1\.50 KiB per prompt token \(cross-attention, 2 layers\), and 2\.25 KiB per prompt token while it encodes \(encoder, 3 layers; freed after\)/);
    const plan = kail('plan', '-m', t5, '--ram', '1G', '--ctx', '256', '--seqs', '2').stdout;
    // Per sequence the most it holds: 256 prompt tokens encoding, (3 + 2) x 768 bytes each.
    expect(plan).toMatch(/KV cache +1\.88 MiB \(256 tokens x 2 sequences\)\n +\(per sequence: 3\.8 KiB per prompt token while it encodes, encoder \+ cross-attention rows; then 1\.5 KiB per prompt token, cross-attention, \+ 1\.5 KiB per generated token, decoder; prompt \+ generated <= 256\)/);
    expect(plan).toMatch(/weights read +8\.51 MiB once per prompt \(encoder, 3 layers, and the cross-attention K\/V\), 7\.26 MiB per generated token \(decoder, 2 layers\)/);
  });

  it('bad input gets a clear error and a non-zero exit', () => {
    const missing = kail('run', '-m', path.join(dir, 'nope.gguf'), '-n', '1');
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toContain('model file not found');
    const notGguf = path.join(dir, 'bad.gguf');
    fs.writeFileSync(notGguf, 'this is not a model');
    const bad = kail('inspect', notGguf);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/GGUF/);
    const badTokens = kail('logits', '-m', model, '--tokens', '1,x', '--out', path.join(dir, 'x.f32'));
    expect(badTokens.stderr).toContain("'x' is not a token id");
    // A file the command reads or writes that cannot be one: named with the flag, before any work;
    // an empty --tokens (or item) is not token 0.
    const cases: [string[], string][] = [
      [['logits', '-m', model, '--tokens', '', '--out', path.join(dir, 'x.f32')], '--tokens is empty'],
      [['logits', '-m', model, '--tokens', '1,,2', '--out', path.join(dir, 'x.f32')], "--tokens: '' is not a token id"],
      [['logits', '-m', model, '--tokens', '1', '--out', dir], `--out: ${dir} is a directory; name a file`],
      [['logits', '-m', model, '--tokens', '1', '--out', path.join(dir, 'none', 'x.f32')], `--out: ${path.join(dir, 'none', 'x.f32')}: cannot write in ${path.join(dir, 'none')}: no such file (ENOENT)`],
      [['run', '-m', model, '-p', 'x', '--ram', '0'], "--ram: '0' is no budget"],
      [['run', '-m', model, '-p', 'x', '--cache-policy', 'fifo'], "--cache-policy: unknown cache policy 'fifo'"],
    ];
    for (const [args, message] of cases) {
      const r = kail(...args);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(message);
    }
    expect(fs.existsSync(path.join(dir, 'x.f32'))).toBe(false);
  });
});
