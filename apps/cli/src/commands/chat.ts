import readline from 'node:readline';
import type { Command } from 'commander';

import { dataDir } from '../paths';
import { apiBaseUrl } from '../serve-state';
import { apiError, apiFetch } from './api-client';
import { OLLAMA_PARAM_TYPES, parseOllamaParam } from './ollama-params';

export interface ChatOptions {
  /** API base URL. */
  url: string;
  apiKey?: string;
  model?: string;
  system?: string;
  maxTokens?: number;
  temperature?: number;
}

export interface Msg {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** The first model the API lists. */
export async function defaultModel(o: ChatOptions): Promise<string> {
  const r = await apiFetch(o, '/v1/models');
  if (!r.ok) throw await apiError(r, `cannot list models at ${o.url}`);
  const body = (await r.json()) as { data: { id: string }[] };
  if (!body.data.length) throw new Error(`the server at ${o.url} has no model loaded (kail serve -m MODEL.gguf)`);
  return body.data[0].id;
}

/**
 * Streams one chat completion, writing deltas as they come; returns the whole reply (its content:
 * a reasoning model's reasoning goes to `onReasoning` only, and is not sent back in the history).
 */
export async function streamChat(
  o: ChatOptions & { model: string },
  messages: Msg[],
  onText: (t: string) => void,
  signal?: AbortSignal,
  onReasoning?: (t: string) => void,
  settings: ChatSettings = {},
): Promise<string> {
  const { num_predict: n, think, ...sampling } = settings;
  const maxTokens = n === undefined ? o.maxTokens : n < 0 ? undefined : n;
  if (think !== undefined) Object.assign(sampling, { chat_template_kwargs: { enable_thinking: think } });
  const r = await apiFetch(o, '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: o.model, messages, stream: true, max_tokens: maxTokens, temperature: o.temperature, ...sampling }),
    signal,
  });
  if (!r.ok || !r.body) throw await apiError(r, 'the chat failed');
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return text;
        const obj = JSON.parse(data) as { error?: { message: string }; choices?: { delta?: { content?: string; reasoning_content?: string } }[] };
        if (obj.error) throw new Error(`the server failed mid-reply: ${obj.error.message}`);
        const r = obj.choices?.[0]?.delta?.reasoning_content;
        if (r) onReasoning?.(r);
        const d = obj.choices?.[0]?.delta?.content;
        if (d) {
          text += d;
          onText(d);
        }
      }
    }
  }
  throw new Error('the stream ended without [DONE] (the server went away?)');
}

/**
 * One assistant reply to the conversation so far: streams the reply's text to `onText` (a reasoning
 * model's reasoning to `onReasoning`, where the reply separates it) and returns its content, the
 * assistant message the history keeps. Stopped through `signal`, it returns what it had or throws.
 */
export type ChatReply = (messages: Msg[], onText: (t: string) => void, signal: AbortSignal, onReasoning?: (t: string) => void, settings?: ChatSettings) => Promise<string>;

/** The parameters `/set parameter` takes during a chat (sampling and length; the others are load settings). */
export const SESSION_PARAMS = ['temperature', 'top_k', 'top_p', 'min_p', 'seed', 'num_predict', 'stop', 'repeat_penalty', 'repeat_last_n', 'presence_penalty', 'frequency_penalty'] as const;

/** What `/set parameter` changed in a chat session, by Ollama's names (each over the command's own settings). */
export type ChatSettings = { [K in (typeof SESSION_PARAMS)[number]]?: K extends 'stop' ? string[] : number } & {
  /** /set think, /set nothink: a thinking model thinks before it answers, or not (the template's enable_thinking). */
  think?: boolean;
};

const HELP = [
  'Commands:',
  '  /set parameter NAME VALUE   set a sampling parameter for the next answers (/set parameter stop A B sets the stop texts)',
  `                              (${SESSION_PARAMS.join(', ')})`,
  '  /set system TEXT            set the system message (empty: none)',
  '  /set think | nothink        a thinking model thinks before it answers, or not',
  '  /show parameters | system   what is set',
  '  /load MODEL                 the next answers come from another model (kail chat)',
  '  /save MODEL                 a new model with this chat\'s system message, parameters and messages (kail chat)',
  '  /clear                      clear the conversation (/reset)',
  '  /bye                        end (/exit, Ctrl-D)',
  '  /?                          this help (/help)',
  'A line ending in \\ continues a message; so does a block between """ lines.',
];

export interface ChatLoopOptions {
  system?: string;
  /** Messages every reply is given after the system message, before the turns (a Modelfile's MESSAGE lines, as Ollama adds them). */
  opening?: readonly Msg[];
  /** The first line on a terminal: what is chatting with what. */
  banner: string;
  /** A first user message, answered before any input is read (llama-cli's -p in conversation mode). */
  first?: string;
  /** One answer, then the chat ends (llama-cli's --single-turn): `first`'s, or the first message read. */
  singleTurn?: boolean;
  /** A reasoning model's thinking is not shown on a terminal either (ollama run's --hidethinking). */
  hideThinking?: boolean;
  /** `/load MODEL` (ollama run's): the answers from then on come from that model; resolves to the line to show. */
  load?: (model: string) => Promise<string>;
  /** `/save MODEL` (ollama run's): a new model with this chat's system message, parameters and messages; resolves to the line to show. */
  save?: (model: string, chat: { system?: string; settings: ChatSettings; messages: Msg[] }) => Promise<string>;
}

/** Multi-line messages: a line ending in a backslash goes on (llama-cli), as does a block between """ lines (Ollama). */
class MessageReader {
  private lines: string[] | null = null;
  private block = false;

  /** The message a line completes, or null while one is being continued. */
  push(raw: string): string | null {
    if (this.block) {
      const end = raw.trimEnd();
      if (!end.endsWith('"""')) return this.add(raw);
      this.block = false;
      // (The lines holding only the quotes add no empty first or last line.)
      const last = end.slice(0, -3);
      return this.finish(last || null);
    }
    const start = raw.trimStart();
    if (!this.lines && start.startsWith('"""')) {
      const rest = start.slice(3);
      if (rest.trimEnd().endsWith('"""')) return rest.trimEnd().slice(0, -3);
      this.block = true;
      this.lines = [];
      return rest ? this.add(rest) : null;
    }
    if (raw.endsWith('\\')) return this.add(raw.slice(0, -1));
    return this.lines ? this.finish(raw) : raw;
  }

  get continuing(): boolean {
    return this.lines !== null;
  }

  /** At the end of the input: the message being continued, as it stands, else null. */
  flush(): string | null {
    if (!this.lines) return null;
    this.block = false;
    return this.finish(null);
  }

  private add(line: string): null {
    (this.lines ??= []).push(line);
    return null;
  }

  private finish(line: string | null): string {
    const text = [...(this.lines ?? []), ...(line === null ? [] : [line])].join('\n');
    this.lines = null;
    return text;
  }
}

/**
 * Where an answer goes as it streams: its text to `out`; a reasoning model's thinking, on a
 * terminal, dimmed to `err` before it (`reasoning` is undefined without one: a pipe gets the answer only).
 */
export function answerDisplay(out: NodeJS.WritableStream, err: NodeJS.WritableStream, tty: boolean): { text: (t: string) => void; reasoning?: (t: string) => void; end: () => void } {
  let thinking = false;
  return {
    text: (t) => {
      if (thinking) err.write('\x1b[0m\n');
      thinking = false;
      out.write(t);
    },
    reasoning: tty
      ? (t) => {
          if (!thinking) err.write('\x1b[2m');
          thinking = true;
          err.write(t);
        }
      : undefined,
    end: () => {
      if (thinking) err.write('\x1b[0m');
      thinking = false;
    },
  };
}

/**
 * The chat loop: each input message is a user turn; the reply streams to `out`. On a terminal it
 * prompts with "> " and knows /reset (/clear) and /exit (/bye); without one (a pipe) it reads line
 * by line and prints each reply on its own line(s), so it can be scripted and tested. A line ending
 * in a backslash, or a block between """ lines, is one message of several lines. Returns the
 * number of turns that failed.
 */
export async function chatLoop(reply: ChatReply, o: ChatLoopOptions, input: NodeJS.ReadableStream, out: NodeJS.WritableStream, err: NodeJS.WritableStream, tty: boolean): Promise<number> {
  // The turns; the system message (o.system, or /set system) goes before them.
  const history: Msg[] = [];
  let system = o.system;
  const settings: ChatSettings = {};
  const rl = readline.createInterface({ input, output: tty ? out : undefined, terminal: tty });
  const reader = new MessageReader();
  const prompt = () => {
    if (!tty) return;
    rl.setPrompt(reader.continuing ? '. ' : '> ');
    rl.prompt();
  };
  const say = (l: string): void => void err.write(l + '\n');
  if (tty) err.write(`${o.banner}; /? lists the commands, /bye or Ctrl-D ends, """ or a trailing \\ continues a message\n`);
  let failures = 0;
  let aborter: AbortController | undefined;
  // Ctrl-C during a reply stops the reply; at the prompt it ends the chat.
  rl.on('SIGINT', () => (aborter ? aborter.abort() : rl.close()));
  const turn = async (text: string) => {
    history.push({ role: 'user', content: text });
    aborter = new AbortController();
    try {
      // On a terminal a reasoning model's thinking shows dimmed before the answer; a pipe gets the answer only.
      const shown = answerDisplay(out, err, tty && !o.hideThinking);
      const answer = await reply([...(system ? [{ role: 'system' as const, content: system }] : []), ...(o.opening ?? []), ...history], shown.text, aborter.signal, shown.reasoning, { ...settings });
      shown.end();
      out.write('\n');
      if (aborter.signal.aborted) err.write('(reply stopped)\n');
      history.push({ role: 'assistant', content: answer });
    } catch (e) {
      history.pop();
      failures++;
      out.write('\n');
      err.write(`error: ${aborter.signal.aborted ? 'reply stopped' : (e as Error).message}\n`);
    } finally {
      aborter = undefined;
    }
  };
  // A line that starts with / is a command, as in ollama run (an unknown one says so and goes nowhere).
  const command = (line: string): void | Promise<void> => {
    const [cmd, sub, ...rest] = line.split(/\s+/);
    if (cmd === '/load') {
      if (!sub) return say('usage: /load MODEL');
      if (!o.load) return say('/load is for kail chat: kail run computes with the one model it loaded (/bye, then kail run another)');
      return o.load(sub).then(say, (e: Error) => say(e.message));
    }
    if (cmd === '/save') {
      if (!sub) return say('usage: /save MODEL');
      if (!o.save) return say('/save is for kail chat: it makes the model on the server (kail create does it from a Modelfile)');
      return o.save(sub, { system, settings: { ...settings }, messages: [...history] }).then(say, (e: Error) => say(e.message));
    }
    if (cmd === '/reset' || cmd === '/clear') {
      history.length = 0;
      return say('(conversation cleared)');
    }
    if (cmd === '/?' || cmd === '/help') return say(HELP.join('\n'));
    if (cmd === '/set' && sub === 'system') {
      system = line.replace(/^\/set\s+system\s*/, '') || undefined;
      return say(system ? 'Set system message.' : 'Cleared the system message.');
    }
    if (cmd === '/set' && sub === 'parameter') {
      const [key, ...words] = rest;
      if (!key || !words.length) return say('usage: /set parameter NAME VALUE');
      if (!(SESSION_PARAMS as readonly string[]).includes(key))
        return say(`${key in OLLAMA_PARAM_TYPES ? `${key} is set when the model loads, not during a chat` : `unknown parameter '${key}'`}: /set parameter takes ${SESSION_PARAMS.join(', ')}`);
      try {
        const k = key as (typeof SESSION_PARAMS)[number];
        if (k === 'stop') settings.stop = words;
        else settings[k] = parseOllamaParam(k, words.join(' ')) as number;
      } catch (e) {
        return say((e as Error).message);
      }
      return say(`Set parameter '${key}' to '${words.join(', ')}'`);
    }
    if (cmd === '/set' && (sub === 'think' || sub === 'nothink')) {
      settings.think = sub === 'think';
      return say(sub === 'think' ? 'Set thinking on.' : 'Set thinking off.');
    }
    if (cmd === '/show' && sub === 'system') return say(system ?? 'No system message was specified.');
    if (cmd === '/show' && sub === 'parameters') {
      const set = Object.entries(settings);
      return say(set.length ? set.map(([k, v]) => `${k.padEnd(20)}${Array.isArray(v) ? v.map((x) => JSON.stringify(x)).join(' ') : String(v)}`).join('\n') : "No parameters were set in this chat (the command's own apply).");
    }
    if (cmd === '/set' || cmd === '/show') return say(`usage: ${cmd === '/set' ? '/set parameter NAME VALUE, /set system TEXT, /set think, /set nothink' : '/show parameters, /show system'}`);
    say(`unknown command '${cmd}': /? lists the commands`);
  };
  // (Lines that arrive during the first turn wait in the iterator.)
  const lines = rl[Symbol.asyncIterator]();
  let answered = false;
  if (o.first) {
    await turn(o.first);
    answered = true;
  }
  const more = () => !(o.singleTurn && answered);
  if (more()) prompt();
  for (let next = more() ? await lines.next() : null; next && !next.done; next = await lines.next()) {
    const raw = next.value;
    const continuing = reader.continuing;
    const line = continuing ? null : raw.trim();
    if (line === '/exit' || line === '/quit' || line === '/bye') break;
    if (line?.startsWith('/')) {
      await command(line);
      prompt();
      continue;
    }
    const text = reader.push(raw);
    if (text !== null && text.trim()) {
      await turn(text);
      answered = true;
      if (!more()) break;
    }
    prompt();
  }
  // (The input ended inside a message of several lines: it is still a message.)
  const rest = reader.flush();
  if (rest !== null && rest.trim() && more()) await turn(rest);
  rl.close();
  return failures;
}

interface ChatCliOpts {
  url?: string;
  apiKey?: string;
  model?: string;
  system?: string;
  maxTokens?: string;
  temperature?: string;
  dataDir?: string;
  hidethinking?: boolean;
}

export function registerChat(program: Command): void {
  program
    .command('chat')
    .description('chat with a served model through the API (streaming); reads stdin line by line when it is not a terminal')
    .option('--url <url>', 'API base URL (default: $KAIL_API_URL, else the server running on the data directory, else http://127.0.0.1:8080)')
    .option('--api-key <key>', 'API key (default: $KAIL_API_KEY)')
    .option('-m, --model <id>', 'model id (default: the first the API lists)')
    .option('--system <text>', 'system message')
    .option('--max-tokens <n>', 'tokens per reply', '512')
    .option('--temperature <t>', 'sampling temperature 0..2', '0.7')
    .option('--hidethinking', "a reasoning model's thinking is not shown, on a terminal either (ollama run's)")
    .option('--data-dir <dir>', 'data directory (to find the running server)')
    .action(async (c: ChatCliOpts) => {
      const maxTokens = Number(c.maxTokens);
      if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new Error(`--max-tokens must be a positive integer, got '${c.maxTokens}'`);
      const temperature = Number(c.temperature);
      if (!Number.isFinite(temperature) || temperature < 0 || temperature > 2) throw new Error(`--temperature must be in 0..2, got '${c.temperature}'`);
      const url = apiBaseUrl(c.url, dataDir(c.dataDir));
      const api: ChatOptions = { url, apiKey: c.apiKey ?? process.env.KAIL_API_KEY, model: c.model, system: c.system, maxTokens, temperature };
      let model = api.model ?? (await defaultModel(api));
      const load = async (name: string) => {
        const r = await apiFetch(api, `/v1/models/${name}`);
        if (r.status === 404) throw new Error(`no model '${name}' at ${url} (kail list shows the models directory; /load takes a name the server lists)`);
        if (!r.ok) throw await apiError(r, `/load ${name}`);
        model = name;
        return `the answers now come from ${name}`;
      };
      // (As ollama run's /save: the model it chats with, under this chat's settings, its messages kept as the opening ones.)
      const save = async (name: string, chat: { system?: string; settings: ChatSettings; messages: Msg[] }) => {
        const { think: _think, ...parameters } = chat.settings;
        const body = { model: name, from: model, stream: false, ...(chat.system ? { system: chat.system } : {}), ...(Object.keys(parameters).length ? { parameters } : {}), ...(chat.messages.length ? { messages: chat.messages } : {}) };
        const r = await apiFetch(api, '/api/create', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        if (!r.ok) throw await apiError(r, `/save ${name}`);
        return `Created new model '${name}'`;
      };
      const failures = await chatLoop(
        (messages, onText, signal, onReasoning, settings) => streamChat({ ...api, model }, messages, onText, signal, onReasoning, settings),
        { system: api.system, banner: `chatting with ${model} at ${url}`, hideThinking: c.hidethinking, load, save },
        process.stdin,
        process.stdout,
        process.stderr,
        !!process.stdin.isTTY && !!process.stdout.isTTY,
      );
      if (failures > 0) throw new Error(`${failures} turn(s) failed`);
    });
}
