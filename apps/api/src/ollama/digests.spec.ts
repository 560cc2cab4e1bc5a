import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { DIGESTS_FILE, ModelDigests } from './digests';

describe('model digests (/api/tags, /api/ps)', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-digests-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

  it("hashes a file once in the background, again when it changes, and keeps digests across restarts", async () => {
    const file = path.join(dir, 'a.gguf');
    const body = Buffer.alloc(9 << 20, 7); // (more than one 4 MiB read)
    fs.writeFileSync(file, body);
    const store = path.join(dir, DIGESTS_FILE);
    const d = new ModelDigests(store);
    expect(d.of(file)).toBe('');
    await d.idle();
    expect(d.of(file)).toBe(sha(body));
    // A restart reads them back: nothing to hash.
    const again = new ModelDigests(store);
    expect(again.of(file)).toBe(sha(body));
    // Rewritten (another size): hashed again.
    fs.writeFileSync(file, 'other');
    expect(again.of(file)).toBe('');
    await again.idle();
    expect(again.of(file)).toBe(sha('other'));
    // Same size, another mtime: hashed again too.
    fs.writeFileSync(file, 'OTHER');
    fs.utimesSync(file, new Date(2020, 1, 1), new Date(2020, 1, 1));
    expect(again.of(file)).toBe('');
    await again.idle();
    expect(again.of(file)).toBe(sha('OTHER'));
  });

  it('takes a digest known another way, refuses one that is not 64 hex digits, forgets deleted files, and survives a damaged store', async () => {
    const store = path.join(dir, DIGESTS_FILE);
    const [a, b] = [path.join(dir, 'a.gguf'), path.join(dir, 'b.gguf')];
    fs.writeFileSync(a, 'a');
    fs.writeFileSync(b, 'b');
    const d = new ModelDigests(store);
    d.remember(a, 'f'.repeat(64));
    expect(d.of(a)).toBe('f'.repeat(64));
    d.remember(b, 'not hex');
    expect(d.of(b)).toBe('');
    await d.idle();
    fs.rmSync(a);
    d.remember(b, sha('b'));
    expect(Object.keys(JSON.parse(fs.readFileSync(store, 'utf8')))).toEqual([b]);
    // Missing or not a file: no digest, nothing queued.
    expect(d.of(path.join(dir, 'none.gguf'))).toBe('');
    expect(d.of(dir)).toBe('');
    // A damaged store loses its bad entries only.
    fs.writeFileSync(store, JSON.stringify({ [b]: { ...JSON.parse(fs.readFileSync(store, 'utf8'))[b] }, x: { sha256: 'zz' }, y: null }));
    expect(new ModelDigests(store).of(b)).toBe(sha('b'));
    fs.writeFileSync(store, '{not json');
    const fresh = new ModelDigests(store);
    expect(fresh.of(b)).toBe('');
    await fresh.idle();
    expect(fresh.of(b)).toBe(sha('b'));
    // No data directory: in memory.
    const mem = new ModelDigests(null);
    mem.of(b);
    await mem.idle();
    expect(mem.of(b)).toBe(sha('b'));
  });
});
