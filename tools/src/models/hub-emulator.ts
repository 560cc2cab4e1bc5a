// A local stand-in for Hugging Face's model API, for tests of pulling (tools/src/models/pull.ts):
// `api/models/team/moe-GGUF/refs`, the commit's recursive tree with each file's LFS SHA-256,
// `team/moe-GGUF/resolve/COMMIT/PATH` redirecting to a store that takes ranges, and a way to
// break a download off midway.
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** The commit the emulated repository's main branch points at. */
export const HUB_COMMIT = 'a'.repeat(40);
const COMMIT = HUB_COMMIT;

export interface Hub {
  url: string;
  /** Range headers the store saw, per file. */
  ranges: string[];
  /** Bytes the store sent. */
  sent: number;
  /** Each request's Authorization header ('' without one), in order. */
  auth: string[];
  /** Break the next download of this file off after this many bytes. */
  breakAt: Map<string, number>;
  close(): void;
}

export function startHubEmulator(files: Record<string, Buffer>, listed: Record<string, { sha256?: string; size?: number }> = {}): Promise<Hub> {
  const state = { ranges: [] as string[], sent: 0, breakAt: new Map<string, number>(), auth: [] as string[] };
  const s = http.createServer((req, res) => {
    state.auth.push(req.headers.authorization ?? '');
    const u = new URL(req.url!, 'http://x');
    if (u.pathname === '/api/models/team/moe-GGUF/refs') return res.end(JSON.stringify({ branches: [{ name: 'dev', targetCommit: 'b'.repeat(40) }, { name: 'main', targetCommit: COMMIT }], tags: [] }));
    if (u.pathname === `/api/models/team/moe-GGUF/tree/${COMMIT}` && u.searchParams.get('recursive') === 'true') {
      const tree = Object.entries(files).map(([p, b]) => ({
        type: 'file',
        path: p,
        size: b.length,
        lfs: { oid: listed[p]?.sha256 ?? createHash('sha256').update(b).digest('hex'), size: listed[p]?.size ?? b.length },
      }));
      return res.end(JSON.stringify([{ type: 'directory', path: 'sub' }, { type: 'file', path: 'README.md', size: 3, oid: 'f'.repeat(40) }, ...tree]));
    }
    const resolve = `/team/moe-GGUF/resolve/${COMMIT}/`;
    if (u.pathname.startsWith(resolve)) {
      res.writeHead(302, { location: `/store/${u.pathname.slice(resolve.length)}` });
      return res.end();
    }
    if (u.pathname.startsWith('/store/')) {
      const name = decodeURIComponent(u.pathname.slice('/store/'.length));
      const b = files[name];
      if (!b) {
        res.writeHead(404);
        return res.end('not found');
      }
      const range = req.headers.range;
      let start = 0;
      if (range) {
        state.ranges.push(`${name} ${range}`);
        start = Number(/^bytes=(\d+)-$/.exec(range)![1]);
        if (start >= b.length) {
          res.writeHead(416);
          return res.end();
        }
        res.writeHead(206, { 'content-length': b.length - start, 'content-range': `bytes ${start}-${b.length - 1}/${b.length}` });
      } else res.writeHead(200, { 'content-length': b.length });
      const cut = state.breakAt.get(name);
      if (cut !== undefined) {
        state.breakAt.delete(name);
        state.sent += cut - start;
        res.write(b.subarray(start, cut), () => res.destroy());
        return;
      }
      state.sent += b.length - start;
      return res.end(b.subarray(start));
    }
    res.writeHead(404);
    res.end('{"error":"Repository not found"}');
  });
  return new Promise((resolve) =>
    s.listen(0, '127.0.0.1', () =>
      resolve(Object.assign(state, { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, close: () => s.close() }) as Hub),
    ),
  );
}
