// `kail create NAME -f Modelfile`, as `ollama create`: reads an Ollama Modelfile, uploads the GGUF
// file of its FROM line and its ADAPTER files to the running API as blobs (one it already holds is
// not sent again), then asks the API's /api/create for the model, printing Ollama's status lines.
// The Modelfile is read as Ollama's parser reads it (parser/parser.go: instructions in any case, a
// value to the end of its line, or in "…" / """…""" over several lines, closed at a line's end).
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';

import { formatBytes } from '@kailstream/engine/core';
import { OllamaTemplate } from '@kailstream/engine/ollama-template';

import { dataDir } from '../paths';
import { createProgress, type Progress } from '../progress';
import { apiBaseUrl } from '../serve-state';
import { apiError, apiFetch, type ApiTarget } from './api-client';
import { DEPRECATED_OLLAMA_PARAMS, OLLAMA_PARAM_TYPES, parseOllamaParam } from './ollama-params';

export interface ModelfileCommand {
  /** The instruction, lower case ('from', 'parameter', 'system', …). */
  name: string;
  /** PARAMETER's name, MESSAGE's role. */
  key?: string;
  /** The value, unquoted. */
  args: string;
  line: number;
}

const INSTRUCTIONS = ['from', 'parameter', 'system', 'message', 'adapter', 'license', 'template', 'requires', 'draft', 'renderer', 'parser'];
const ROLES = ['system', 'user', 'assistant'];

/** A Modelfile that cannot be used: the message names its line. */
export class ModelfileError extends Error {}

/** A value as Ollama's parser takes it: "…" or """…""" unquoted; null while a quote is still open. */
function unquote(s: string): string | null {
  for (const q of ['"""', '"']) if (s.startsWith(q)) return s.length >= 2 * q.length && s.endsWith(q) ? s.slice(q.length, -q.length) : null;
  return s;
}

/** The instructions of a Modelfile, in order; a ModelfileError naming the line for what Ollama refuses too. */
export function parseModelfile(text: string): ModelfileCommand[] {
  const src = text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
  const out: ModelfileCommand[] = [];
  let i = 0;
  let line = 1;
  const fail = (at: number, msg: string): never => {
    throw new ModelfileError(`Modelfile line ${at}: ${msg}`);
  };
  const take = (re: RegExp) => {
    const start = i;
    while (i < src.length && re.test(src[i])) i++;
    return src.slice(start, i);
  };
  const blank = (c: string | undefined) => c === ' ' || c === '\t';
  while (i < src.length) {
    const c = src[i];
    if (c === '\n') {
      line++;
      i++;
      continue;
    }
    if (blank(c)) {
      i++;
      continue;
    }
    if (c === '#') {
      while (i < src.length && src[i] !== '\n') i++;
      continue;
    }
    const at = line;
    const word = take(/[A-Za-z]/);
    const name = word.toLowerCase();
    if (!INSTRUCTIONS.includes(name))
      fail(at, `unknown instruction ${JSON.stringify(word || src.slice(i).split('\n')[0].slice(0, 20))}: a line is FROM, PARAMETER, SYSTEM, MESSAGE, ADAPTER, LICENSE, TEMPLATE or REQUIRES, or a # comment`);
    if (!blank(src[i])) fail(at, `${word} takes a value after a space`);
    take(/[ \t]/);
    let key: string | undefined;
    if (name === 'parameter') {
      key = take(/[A-Za-z0-9_]/);
      if (!key || !blank(src[i])) fail(at, `PARAMETER takes a name and a value, as in PARAMETER temperature 0.7`);
      take(/[ \t]/);
    } else if (name === 'message') {
      key = take(/[A-Za-z]/);
      if (!ROLES.includes(key) || !blank(src[i])) fail(at, `MESSAGE takes a role (system, user or assistant) and the text, as in MESSAGE user Hello`);
      take(/[ \t]/);
    }
    // The value runs to the first line end where its quotes are closed.
    const start = i;
    let value: string | null = null;
    for (;;) {
      const nl = src.indexOf('\n', i);
      const end = nl < 0 ? src.length : nl;
      value = unquote(src.slice(start, end).trim());
      if (value !== null || nl < 0) {
        i = end;
        break;
      }
      i = nl + 1;
    }
    if (value === null) fail(at, `the quote that opens ${word}'s value is never closed: a line must end with the same quotes (" or """)`);
    line += src.slice(start, i).split('\n').length - 1;
    out.push({ name, ...(key !== undefined ? { key } : {}), args: value!, line: at });
  }
  if (!out.some((c) => c.name === 'from')) throw new ModelfileError('the Modelfile has no FROM line (FROM ./model.gguf, or FROM the name of a model)');
  return out;
}

/** What a Modelfile asks of /api/create, with the local files it needs uploaded. */
export interface CreatePlan {
  /** FROM a model the server has (by name). */
  from?: string;
  /** FROM a local GGUF file. */
  file?: string;
  /** ADAPTER files (GGUF LoRA adapters). */
  adapters: string[];
  system?: string;
  /** TEMPLATE: an Ollama (Go) template that renders the model's chats. */
  template?: string;
  parameters: Record<string, unknown>;
  messages: { role: string; content: string }[];
  license: string[];
  /** Lines that were read but have no effect (deprecated parameters), to print. */
  warnings: string[];
}

/** A FROM/ADAPTER path as Ollama expands it: absolute, ~ or ~/… (home), else relative to the Modelfile's directory. */
export function expandModelfilePath(p: string, relativeDir: string): string {
  if (p === '~' || p.startsWith('~/')) return path.join(os.homedir(), p.slice(1));
  return path.resolve(relativeDir, p);
}

const looksLikePath = (p: string) => /^(\.{1,2}[/\\]|[/\\~])/.test(p) || /\.(gguf|bin|safetensors)$/i.test(p);

/** Checks a local model file is one whole GGUF file, with a message saying what to do otherwise. */
function checkGguf(file: string, at: number, what: string): void {
  const fd = fs.openSync(file, 'r');
  const magic = Buffer.alloc(4);
  try {
    fs.readSync(fd, magic, 0, 4, 0);
  } finally {
    fs.closeSync(fd);
  }
  if (magic.toString('latin1') !== 'GGUF')
    throw new ModelfileError(`Modelfile line ${at}: ${what} ${file} is not a GGUF file${/\.safetensors$/i.test(file) ? ' (safetensors are not imported: convert the model to GGUF first, e.g. with llama.cpp\'s convert_hf_to_gguf.py)' : ''}`);
}

/** The GGUF file a FROM line names: the file, or the one GGUF file of a directory. */
function fromFile(p: string, at: number): string {
  let file = p;
  if (fs.statSync(p).isDirectory()) {
    const ggufs = fs.readdirSync(p).filter((n) => n.toLowerCase().endsWith('.gguf'));
    if (ggufs.length !== 1)
      throw new ModelfileError(
        `Modelfile line ${at}: FROM ${p} is a directory with ${ggufs.length ? `${ggufs.length} GGUF files (${ggufs.slice(0, 4).join(', ')}${ggufs.length > 4 ? ', …' : ''})` : 'no GGUF file'}: name the file${fs.readdirSync(p).some((n) => n.endsWith('.safetensors')) ? ' (safetensors are not imported: convert the model to GGUF first)' : ''}`,
      );
    file = path.join(p, ggufs[0]);
  }
  if (/-\d{5}-of-\d{5}\.gguf$/i.test(file))
    throw new ModelfileError(`Modelfile line ${at}: FROM ${file} is one split of a model: kail create takes a whole GGUF file (join the splits with kail gguf-split --merge FIRST_SPLIT OUT.gguf, or put the split files in the models directory as they are)`);
  checkGguf(file, at, 'FROM');
  return file;
}

/** Turns a Modelfile's instructions into a create plan, checking what can be checked here. */
export function planCreate(cmds: readonly ModelfileCommand[], relativeDir: string): CreatePlan {
  const plan: CreatePlan = { adapters: [], parameters: {}, messages: [], license: [], warnings: [] };
  let fromLine = 0;
  for (const c of cmds) {
    const fail = (msg: string): never => {
      throw new ModelfileError(`Modelfile line ${c.line}: ${msg}`);
    };
    switch (c.name) {
      case 'from': {
        if (fromLine) fail(`a second FROM (the first is on line ${fromLine}): kail create makes a model from one GGUF file or one model`);
        fromLine = c.line;
        if (!c.args) fail('FROM takes a GGUF file or the name of a model');
        const p = expandModelfilePath(c.args, relativeDir);
        if (fs.existsSync(p)) plan.file = fromFile(p, c.line);
        else if (looksLikePath(c.args)) fail(`FROM ${c.args}: there is no such file (${p})`);
        else plan.from = c.args;
        break;
      }
      case 'adapter': {
        const p = expandModelfilePath(c.args, relativeDir);
        if (!fs.existsSync(p) || !fs.statSync(p).isFile()) fail(`ADAPTER ${c.args}: there is no such file (${p}); an adapter is a GGUF LoRA file`);
        checkGguf(p, c.line, 'ADAPTER');
        plan.adapters.push(p);
        break;
      }
      case 'system':
        plan.system = c.args;
        break;
      case 'license':
        plan.license.push(c.args);
        break;
      case 'message':
        plan.messages.push({ role: c.key!, content: c.args });
        break;
      case 'template':
        // Ollama's Go template, checked here as Ollama's create checks it ('' keeps the model's).
        try {
          if (c.args) new OllamaTemplate(c.args);
        } catch (e) {
          fail(`TEMPLATE: ${(e as Error).message}`);
        }
        plan.template = c.args || undefined;
        break;
      case 'draft':
        fail('DRAFT is not supported by kail create: a draft model for speculative decoding is given when serving (kail serve -m MODEL --draft DRAFT.gguf)');
        break;
      case 'renderer':
      case 'parser':
        fail(`${c.name.toUpperCase()} names one of Ollama's built-in Go renderers and parsers, which KailStream does not have: it renders with the GGUF's chat template and parses its output itself; remove the line`);
        break;
      case 'requires':
        // The Ollama version the model needs: checked for form, then of no use here.
        if (!/^v?\d+(\.\d+){0,2}(-[0-9A-Za-z.-]+)?$/.test(c.args.trim())) fail(`REQUIRES takes a version, as in REQUIRES 0.14.0; got ${JSON.stringify(c.args)}`);
        break;
      case 'parameter': {
        const key = c.key!;
        if (DEPRECATED_OLLAMA_PARAMS.includes(key)) {
          plan.warnings.push(`warning: parameter ${key} is deprecated (line ${c.line}); it is ignored`);
          break;
        }
        let v: number | boolean | string;
        try {
          v = parseOllamaParam(key, c.args);
        } catch (e) {
          return fail((e as Error).message.startsWith('unknown') ? (e as Error).message : `PARAMETER ${(e as Error).message}`);
        }
        if (OLLAMA_PARAM_TYPES[key] === 'strings') plan.parameters[key] = [...((plan.parameters[key] as string[] | undefined) ?? []), v];
        else plan.parameters[key] = v;
        break;
      }
    }
  }
  return plan;
}

/** SHA-256 of a file, as "sha256:<hex>", with a progress bar for a large one. */
export async function fileDigest(file: string): Promise<string> {
  const size = fs.statSync(file).size;
  const hash = createHash('sha256');
  const bar = size >= 64 << 20 ? createProgress({ label: `hashing ${path.basename(file)}`, total: size, format: formatBytes }) : undefined;
  let done = 0;
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 4 << 20 })) {
    hash.update(chunk as Buffer);
    done += (chunk as Buffer).length;
    bar?.update(done);
  }
  bar?.done();
  return `sha256:${hash.digest('hex')}`;
}

/** Uploads a file as a blob unless the API holds it already; says which. */
export async function pushBlob(api: ApiTarget, file: string, digest: string): Promise<'present' | 'uploaded'> {
  const head = await apiFetch(api, `/api/blobs/${digest}`, { method: 'HEAD' });
  if (head.status === 200) return 'present';
  if (head.status !== 404) throw await apiError(head, `checking blob ${digest}`);
  const size = fs.statSync(file).size;
  const bar = createProgress({ label: `copying ${path.basename(file)}`, total: size, format: formatBytes });
  let done = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      done += chunk.length;
      bar.update(done);
      cb(null, chunk);
    },
  });
  const body = fs.createReadStream(file, { highWaterMark: 4 << 20 });
  const sent = pipeline(body, counter).catch(() => {});
  const r = await apiFetch(api, `/api/blobs/${digest}`, { method: 'POST', body: counter as unknown as RequestInit['body'], duplex: 'half', headers: { 'content-type': 'application/octet-stream' } });
  await sent;
  if (r.status !== 201 && r.status !== 200) throw await apiError(r, `uploading ${file}`);
  bar.done();
  return 'uploaded';
}

export interface CreateOptions {
  quantize?: string;
  log?: (line: string) => void;
}

/**
 * Creates model `name` on the API from a Modelfile's plan: uploads the files it needs, then
 * /api/create; returns the status lines the API answered.
 */
export async function createModel(api: ApiTarget, name: string, plan: CreatePlan, o: CreateOptions = {}): Promise<string[]> {
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  for (const w of plan.warnings) log(w);
  if (o.quantize && !plan.file) throw new Error('--quantize needs FROM a GGUF file (F32, F16 or BF16), which is quantized as it is imported; to quantize a model of the server, kail quantize its file');
  log('gathering model components');
  const upload = async (file: string) => {
    const digest = await fileDigest(file);
    log(`${(await pushBlob(api, file, digest)) === 'present' ? 'using existing layer' : 'copied'} ${digest} (${path.basename(file)}, ${formatBytes(fs.statSync(file).size)})`);
    return digest;
  };
  const body: Record<string, unknown> = { model: name, stream: true };
  if (plan.file) {
    const base = path.basename(plan.file);
    body.files = { [base.toLowerCase().endsWith('.gguf') ? base : `${base}.gguf`]: await upload(plan.file) };
  } else body.from = plan.from;
  if (plan.adapters.length) {
    const adapters: Record<string, string> = {};
    // (Keyed by file name: two of one name from different directories are told apart.)
    for (const [i, a] of plan.adapters.entries()) adapters[path.basename(a) in adapters ? `${i}-${path.basename(a)}` : path.basename(a)] = await upload(a);
    body.adapters = adapters;
  }
  if (plan.system !== undefined) body.system = plan.system;
  if (plan.template) body.template = plan.template;
  if (Object.keys(plan.parameters).length) body.parameters = plan.parameters;
  if (plan.messages.length) body.messages = plan.messages;
  if (plan.license.length) body.license = plan.license;
  if (o.quantize) body.quantize = o.quantize;
  const r = await apiFetch(api, '/api/create', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw await apiError(r, `creating '${name}'`);
  // The statuses as they come; a status with total and completed (a quantization) is a progress bar.
  const statuses: string[] = [];
  let bar: { status: string; p: Progress } | null = null;
  const line = (l: string) => {
    if (!l.trim()) return;
    const m = JSON.parse(l) as { status?: string; error?: string; total?: number; completed?: number };
    if (m.error) throw new Error(`creating '${name}': ${m.error}`);
    if (!m.status) return;
    if (m.total !== undefined && m.completed !== undefined) {
      if (bar?.status !== m.status) bar = { status: m.status, p: createProgress({ label: m.status, total: m.total, format: formatBytes }) };
      bar.p.update(m.completed);
      return;
    }
    if (bar) bar.p.done();
    bar = null;
    if (statuses.at(-1) === m.status) return;
    statuses.push(m.status);
    log(m.status);
  };
  let held = '';
  for await (const chunk of r.body ?? []) {
    held += Buffer.from(chunk as Uint8Array).toString('utf8');
    const lines = held.split('\n');
    held = lines.pop()!;
    for (const l of lines) line(l);
  }
  line(held);
  return statuses;
}

interface CreateCliOpts {
  file?: string;
  quantize?: string;
  url?: string;
  apiKey?: string;
  dataDir?: string;
}

export function registerCreate(program: Command): void {
  program
    .command('create')
    .argument('<name>', "the new model's name")
    .description(
      "make a model from an Ollama Modelfile (as ollama create): FROM a GGUF file (uploaded to the server's data directory, which keeps one copy per content) or a model of the server, with SYSTEM, PARAMETER, MESSAGE, ADAPTER and LICENSE kept for it; through the running server's API",
    )
    .option('-f, --file <modelfile>', 'the Modelfile (default: ./Modelfile)')
    .option('-q, --quantize <type>', 'quantize the FROM file (F32, F16 or BF16 GGUF) to TYPE as it is imported (Q4_K_M, Q8_0, …)')
    .option('--url <url>', 'API base URL (default: $KAIL_API_URL, else the server running on the data directory, else http://127.0.0.1:8080)')
    .option('--api-key <key>', 'API key (default: $KAIL_API_KEY)')
    .option('--data-dir <dir>', 'data directory (to find the running server)')
    .action(async (name: string, o: CreateCliOpts) => {
      const file = path.resolve(o.file ?? 'Modelfile');
      let text: string;
      try {
        text = fs.readFileSync(file, 'utf8');
      } catch (e) {
        throw new Error(`cannot read the Modelfile ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}${o.file ? '' : ' (give one with -f FILE)'}`);
      }
      const plan = planCreate(parseModelfile(text), path.dirname(file));
      await createModel({ url: apiBaseUrl(o.url, dataDir(o.dataDir)), apiKey: o.apiKey ?? process.env.KAIL_API_KEY }, name, plan, { quantize: o.quantize });
    });
}
