import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';

import { chatLoop, streamChat } from './chat';

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
      for (const tty of [true, false]) {
        const input = new PassThrough();
        const out = new PassThrough();
        const err = new PassThrough();
        let o = '';
        let e = '';
        out.on('data', (d) => (o += d));
        err.on('data', (d) => (e += d));
        input.end('Hi\n');
        expect(await chatLoop({ url: api.url }, input, out, err, tty)).toBe(0);
        expect(o).toContain('Hello!');
        expect(o).not.toContain('greet back');
        if (tty) expect(e).toContain('\x1b[2mThey greet; greet back.\x1b[0m');
        else expect(e).not.toContain('greet back');
      }
    } finally {
      api.close();
    }
  });
});
