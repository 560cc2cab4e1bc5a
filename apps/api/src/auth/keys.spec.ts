import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { KeyStore } from './keys';

describe('KeyStore', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-keys-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('creates a key shown once, stores only its hash, verifies it and refuses others', () => {
    const file = path.join(dir, 'a', 'keys.sqlite');
    const store = KeyStore.open(file);
    const k = store.create('alice');
    expect(k.key).toMatch(/^ks-[A-Za-z0-9_-]{43}$/);
    expect(k.key.startsWith(k.prefix)).toBe(true);
    expect(store.verify(k.key)).toMatchObject({ id: k.id, name: 'alice' });
    expect(store.verify(k.key.slice(0, -1) + (k.key.endsWith('A') ? 'B' : 'A'))).toBeNull();
    expect(store.verify('')).toBeNull();
    expect(store.list()).toEqual([expect.objectContaining({ id: k.id, name: 'alice', prefix: k.prefix, revokedAt: null })]);
    store.close();
    // The secret is not in the file.
    const raw = fs.readFileSync(file);
    expect(raw.includes(Buffer.from(k.key))).toBe(false);
  });

  it('refuses a key file that is not a database, naming it, and leaves it as it is', () => {
    const file = path.join(dir, 'garbage.sqlite');
    const bytes = 'these were keys once '.repeat(300);
    fs.writeFileSync(file, bytes);
    expect(() => KeyStore.open(file)).toThrow(/^cannot open the key store .*garbage\.sqlite: file is not a database; restore it from a backup, or move it away to start with no keys/);
    expect(fs.readFileSync(file, 'utf8')).toBe(bytes);
  });

  it('revokes by id or listed prefix, and a revoke in one handle is seen by another at once', () => {
    const file = path.join(dir, 'b.sqlite');
    const server = KeyStore.open(file);
    const cli = KeyStore.open(file);
    const a = server.create('a');
    const b = server.create('b');
    expect(server.activeCount()).toBe(2);
    expect(cli.revoke(a.id)).toBe(true);
    expect(server.verify(a.key)).toBeNull();
    expect(cli.revoke(a.id)).toBe(false); // already revoked
    expect(cli.revoke(b.prefix)).toBe(true);
    expect(server.activeCount()).toBe(0);
    expect(server.list().every((k) => k.revokedAt !== null)).toBe(true);
    expect(cli.revoke('no-such-key')).toBe(false);
    server.close();
    cli.close();
  });

  it('records usage per key, summing across calls', () => {
    const store = KeyStore.open(path.join(dir, 'c.sqlite'));
    const a = store.create('a');
    const b = store.create('b');
    store.recordUsage(a.id, { requests: 1, promptTokens: 10, completionTokens: 5 });
    store.recordUsage(a.id, { requests: 1, promptTokens: 3, completionTokens: 2 });
    expect(store.usage()).toEqual([
      { id: a.id, name: 'a', prefix: a.prefix, revoked: false, requests: 2, promptTokens: 13, completionTokens: 7 },
      { id: b.id, name: 'b', prefix: b.prefix, revoked: false, requests: 0, promptTokens: 0, completionTokens: 0 },
    ]);
    expect(store.list()[0].lastUsedAt).not.toBeNull();
    store.close();
  });

  it('rejects empty and over-long names with a clear message', () => {
    const store = KeyStore.open(path.join(dir, 'd.sqlite'));
    expect(() => store.create('  ')).toThrow(/non-empty name/);
    expect(() => store.create('x'.repeat(101))).toThrow(/at most 100/);
    store.close();
  });

  it('names the file when it cannot be opened', () => {
    const notADir = path.join(dir, 'file');
    fs.writeFileSync(notADir, 'x');
    expect(() => KeyStore.open(path.join(notADir, 'keys.sqlite'))).toThrow(/cannot open the key store .*file\/keys\.sqlite/);
  });
});
