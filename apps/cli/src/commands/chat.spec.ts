import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';

import { chatLoop, streamChat, type ChatLoopOptions, type ChatReply, type ChatSettings } from './chat';

// An API stand-in that streams a reasoning model's answer: reasoning deltas, then content.
function server(): Promise<{ url: string; close: () => void }> {
  const s = http.createServer((req, res) => {
    if (req.url === '/v1/models') return res.end(JSON.stringify({ data: [{ id: 'm' }] }));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const delta of [{ role: 'assistant', content: '' }, { reasoning_content: 'They greet; ' }, { reasoning_content: 'greet back.' }, { content: 'Hello' }, { content: '!' }])
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta }] })}\n\n`);
    res.end('data: [DONE]\n\n');
  });
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, close: () => s.close() })));
}

/** Runs the chat loop over `text` as its input: the failures it counted and what it wrote to stdout and stderr. */
async function piped(reply: ChatReply, text: string, o: Partial<ChatLoopOptions> = {}, tty = false): Promise<{ failures: number; out: string; err: string }> {
  const input = new PassThrough();
  const out = new PassThrough();
  const err = new PassThrough();
  let so = '';
  let se = '';
  out.on('data', (d) => (so += d));
  err.on('data', (d) => (se += d));
  input.end(text);
  const failures = await chatLoop(reply, { banner: 'test', ...o }, input, out, err, tty);
  return { failures, out: so, err: se };
}

describe('kail chat with a reasoning model', () => {
  it('returns the content as the reply and gives the reasoning apart', async () => {
    const api = await server();
    try {
      const thoughts: string[] = [];
      const out: string[] = [];
      const reply = await streamChat({ url: api.url, model: 'm' }, [{ role: 'user', content: 'Hi' }], (t) => out.push(t), undefined, (t) => thoughts.push(t));
      expect(reply).toBe('Hello!');
      expect(out.join('')).toBe('Hello!');
      expect(thoughts.join('')).toBe('They greet; greet back.');
    } finally {
      api.close();
    }
  });

  it('shows the reasoning dimmed on a terminal (stderr) and never in piped output', async () => {
    const api = await server();
    try {
      const reply: ChatReply = (m, onText, signal, onReasoning) => streamChat({ url: api.url, model: 'm' }, m, onText, signal, onReasoning);
      for (const tty of [true, false]) {
        const { failures, out: o, err: e } = await piped(reply, 'Hi\n', {}, tty);
        expect(failures).toBe(0);
        expect(o).toContain('Hello!');
        expect(o).not.toContain('greet back');
        if (tty) expect(e).toContain('\x1b[2mThey greet; greet back.\x1b[0m');
        else expect(e).not.toContain('greet back');
      }
      // --hidethinking (ollama run's): not on a terminal either.
      const hidden = await piped(reply, 'Hi\n', { hideThinking: true }, true);
      expect([hidden.failures, hidden.err.includes('greet back')]).toEqual([0, false]);
    } finally {
      api.close();
    }
  });
});

describe("kail chat's requests", () => {
  it("send /set parameter's values under OpenAI's and llama-server's names (num_predict as max_tokens, -1 as none)", async () => {
    const bodies: Record<string, unknown>[] = [];
    const s = http.createServer((req, res) => {
      let b = '';
      req.on('data', (d) => (b += d));
      req.on('end', () => {
        bodies.push(JSON.parse(b));
        res.end('data: [DONE]\n\n');
      });
    });
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
      const o = { url, model: 'm', maxTokens: 512, temperature: 0.7 };
      await streamChat(o, [], () => {});
      await streamChat(o, [], () => {}, undefined, undefined, { temperature: 0, top_k: 5, stop: ['END'], num_predict: 9, repeat_penalty: 1.2, seed: 3 });
      await streamChat(o, [], () => {}, undefined, undefined, { num_predict: -1, think: false });
      expect(bodies.map(({ messages: _m, model: _n, stream: _s, ...rest }) => rest)).toEqual([
        { max_tokens: 512, temperature: 0.7 },
        { max_tokens: 9, temperature: 0, top_k: 5, stop: ['END'], repeat_penalty: 1.2, seed: 3 },
        { temperature: 0.7, chat_template_kwargs: { enable_thinking: false } },
      ]);
    } finally {
      s.close();
    }
  });
});

describe('the chat loop', () => {
  /** Runs the loop over `text` piped in with a reply that echoes what it was given. */
  async function loop(text: string, o: { system?: string; first?: string } = {}) {
    const seen: { role: string; content: string }[][] = [];
    const reply: ChatReply = async (messages, onText) => {
      seen.push(messages.map((m) => ({ ...m })));
      const answer = `#${seen.length}`;
      onText(answer);
      return answer;
    };
    const { failures, out } = await piped(reply, text, o);
    return { seen, out, failures };
  }

  it('keeps the history, reads messages of several lines, clears and ends on command', async () => {
    const r = await loop('one\ntwo \\\nlines\n"""\na block\n\nof three\n"""\n/clear\nafter\n/bye\nnever\n', { system: 'S', first: 'first' });
    expect(r.failures).toBe(0);
    expect(r.out).toBe('#1\n#2\n#3\n#4\n#5\n');
    expect(r.seen[0]).toEqual([{ role: 'system', content: 'S' }, { role: 'user', content: 'first' }]);
    expect(r.seen[1].slice(-1)).toEqual([{ role: 'user', content: 'one' }]);
    expect(r.seen[1]).toHaveLength(4);
    expect(r.seen[2].slice(-3)).toEqual([{ role: 'user', content: 'one' }, { role: 'assistant', content: '#2' }, { role: 'user', content: 'two \nlines' }]);
    expect(r.seen[3].slice(-1)).toEqual([{ role: 'user', content: 'a block\n\nof three' }]);
    // /clear kept the system message only; /bye ended before "never".
    expect(r.seen[4]).toEqual([{ role: 'system', content: 'S' }, { role: 'user', content: 'after' }]);
    expect(r.seen).toHaveLength(5);
    // The input ending inside a message of several lines still sends it.
    const open = await loop('a \\\nb \\\n');
    expect(open.seen.map((m) => m.at(-1)!.content)).toEqual(['a \nb ']);
    const block = await loop('"""\nx\ny');
    expect(block.seen.map((m) => m.at(-1)!.content)).toEqual(['x\ny']);
  });

  it("takes ollama run's /set and /show: parameters for the next answers, a system message; unknown commands go nowhere", async () => {
    const calls: { messages: string[]; settings: ChatSettings | undefined }[] = [];
    const reply: ChatReply = async (messages, onText, _signal, _r, settings) => {
      calls.push({ messages: messages.map((m) => `${m.role}:${m.content}`), settings });
      onText('ok');
      return 'ok';
    };
    const { failures, err: e } = await piped(
      reply,
      [
        'one',
        '/set parameter temperature 0.25',
        '/set parameter stop END  ###',
        '/set parameter num_predict 7',
        '/set parameter top_k many',
        '/set parameter num_ctx 8192',
        '/set parameter nope 1',
        '/set system Be brief.',
        '/set nothink',
        '/show parameters',
        '/show system',
        '/etc/hosts?',
        '/?',
        'two',
        '/set system',
        '/clear',
        'three',
      ].join('\n') + '\n',
      { system: 'S' },
    );
    expect(failures).toBe(0);
    expect(calls.map((c) => c.messages)).toEqual([['system:S', 'user:one'], ['system:Be brief.', 'user:one', 'assistant:ok', 'user:two'], ['user:three']]);
    expect(calls[0].settings).toEqual({});
    expect(calls[1].settings).toEqual({ temperature: 0.25, stop: ['END', '###'], num_predict: 7, think: false });
    expect(calls[2].settings).toEqual(calls[1].settings);
    expect(e).toContain("Set parameter 'temperature' to '0.25'");
    expect(e).toContain('top_k takes an integer, got "many"');
    expect(e).toContain('num_ctx is set when the model loads, not during a chat');
    expect(e).toContain("unknown parameter 'nope'");
    expect(e).toMatch(/^temperature\s+0\.25\nstop\s+"END" "###"\nnum_predict\s+7$/m);
    expect(e).toContain('Be brief.\n');
    expect(e).toContain("unknown command '/etc/hosts?': /? lists the commands");
    expect(e).toContain('/set parameter NAME VALUE');
    expect(e).toContain('Cleared the system message.');
  });

  it("takes /load MODEL (ollama run's) where the chat can switch models, and says so where it cannot", async () => {
    const loaded: string[] = [];
    const reply: ChatReply = async (_m, onText) => {
      onText(loaded.at(-1) ?? 'first');
      return 'ok';
    };
    const load = async (m: string) => {
      if (m === 'nope') throw new Error("no model 'nope'");
      loaded.push(m);
      return `the answers now come from ${m}`;
    };
    const { failures, out: o, err: e } = await piped(reply, 'one\n/load other\ntwo\n/load nope\n/load\nthree\n', { load });
    expect(failures).toBe(0);
    expect(o).toBe('first\nother\nother\n');
    expect(e).toContain('the answers now come from other');
    expect(e).toContain("no model 'nope'");
    expect(e).toContain('usage: /load MODEL');
    expect((await piped(reply, '/load other\n')).err).toContain('/load is for kail chat');
    expect((await piped(reply, '/save mine\n')).err).toContain('/save is for kail chat');
  });

  it('a one-line """ block, blank lines skipped, a failed turn leaves no trace in the history', async () => {
    const seen: string[][] = [];
    let n = 0;
    const reply: ChatReply = async (messages, onText) => {
      seen.push(messages.map((m) => m.content));
      if (++n === 2) throw new Error('the context is full');
      onText('ok');
      return 'ok';
    };
    const { failures, err: e } = await piped(reply, '"""quoted"""\n\n  \nboom\nlast\n');
    expect(failures).toBe(1);
    expect(seen).toEqual([['quoted'], ['quoted', 'ok', 'boom'], ['quoted', 'ok', 'last']]);
    expect(e).toContain('error: the context is full');
  });
});
