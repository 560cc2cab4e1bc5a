import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';

/** A key as listed: never the secret itself. */
export interface ApiKeyInfo {
  id: string;
  name: string;
  /** First characters of the key (`ks-` + 8), enough to recognise it in a list. */
  prefix: string;
  /** ISO-8601. */
  createdAt: string;
  /** ISO-8601; null while the key is valid. */
  revokedAt: string | null;
  /** ISO-8601 of the last verified use; null if never used. */
  lastUsedAt: string | null;
}

/** What `create` returns: the only time the full key is shown. */
export interface CreatedApiKey {
  id: string;
  name: string;
  key: string;
  prefix: string;
  createdAt: string;
}

export interface UsageDelta {
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

export interface KeyUsage extends UsageDelta {
  id: string;
  name: string;
  prefix: string;
  revoked: boolean;
}

/** The file name of the key store inside the data directory. */
export const KEYS_FILE = 'keys.sqlite';

const KEY_PREFIX = 'ks-';
const NAME_MAX = 100;

function sha256(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/**
 * API keys and their usage in one SQLite file (better-sqlite3, synchronous). A key is 32 random
 * bytes (base64url, prefixed `ks-`); only its SHA-256 is stored, and `verify` compares hashes in
 * constant time. Several processes may open the same file (the API serving, `kail keys` revoking):
 * WAL mode and a busy timeout make that safe, and `verify` reads the table each time so a revoke
 * made by another process takes effect on the next request.
 */
export class KeyStore {
  private constructor(private readonly db: Database.Database) {}

  /** Opens (creating if needed) the store at `file`; its directory is created too. */
  static open(file: string): KeyStore {
    let db: Database.Database | undefined;
    try {
      fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
      db = new Database(file);
      db.pragma('journal_mode = WAL');
      db.pragma('busy_timeout = 5000');
      db.exec(`
      CREATE TABLE IF NOT EXISTS api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        prefix TEXT NOT NULL,
        hash BLOB NOT NULL UNIQUE,
        created_at TEXT NOT NULL,
        revoked_at TEXT,
        last_used_at TEXT
      );
      CREATE TABLE IF NOT EXISTS key_usage (
        key_id TEXT PRIMARY KEY REFERENCES api_keys(id),
        requests INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0
      );
    `);
    } catch (e) {
      db?.close();
      // Never started without its keys: that would open the API to anyone.
      const damaged = /^SQLITE_(NOTADB|CORRUPT)/.test((e as { code?: string }).code ?? '');
      throw new Error(
        `cannot open the key store ${file}: ${(e as Error).message}` +
          (damaged ? '; restore it from a backup, or move it away to start with no keys (each key then has to be created again)' : ''),
      );
    }
    return new KeyStore(db);
  }

  /** Creates a key named `name` (1-100 characters). The returned `key` is not stored and cannot be shown again. */
  create(name: string): CreatedApiKey {
    const n = name.trim();
    if (!n) throw new Error('a key needs a non-empty name');
    if (n.length > NAME_MAX) throw new Error(`a key name has at most ${NAME_MAX} characters (got ${n.length})`);
    const key = KEY_PREFIX + randomBytes(32).toString('base64url');
    const id = randomUUID();
    const prefix = key.slice(0, KEY_PREFIX.length + 8);
    const createdAt = new Date().toISOString();
    this.db
      .prepare('INSERT INTO api_keys (id, name, prefix, hash, created_at) VALUES (?, ?, ?, ?, ?)')
      .run(id, n, prefix, sha256(key), createdAt);
    return { id, name: n, key, prefix, createdAt };
  }

  /** Every key, revoked ones included, oldest first. */
  list(): ApiKeyInfo[] {
    const rows = this.db
      .prepare('SELECT id, name, prefix, created_at, revoked_at, last_used_at FROM api_keys ORDER BY created_at, rowid')
      .all() as { id: string; name: string; prefix: string; created_at: string; revoked_at: string | null; last_used_at: string | null }[];
    return rows.map((r) => ({ id: r.id, name: r.name, prefix: r.prefix, createdAt: r.created_at, revokedAt: r.revoked_at, lastUsedAt: r.last_used_at }));
  }

  /** Number of keys that are not revoked (auth is required as soon as this is above 0). */
  activeCount(): number {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL').get() as { n: number }).n;
  }

  /**
   * Revokes a key by id (or by its unique id prefix / listed prefix, for the CLI). Returns false
   * when no valid key matched; throws when the reference is ambiguous.
   */
  revoke(id: string): boolean {
    const ref = id.trim();
    if (!ref) return false;
    const matches = this.db
      .prepare("SELECT id FROM api_keys WHERE revoked_at IS NULL AND (id = ? OR prefix = ? OR id LIKE ? || '%')")
      .all(ref, ref, ref) as { id: string }[];
    const exact = matches.find((m) => m.id === ref);
    if (!exact && matches.length > 1) throw new Error(`"${ref}" matches ${matches.length} keys; give more of the id`);
    const target = exact ?? matches[0];
    if (!target) return false;
    this.db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ?').run(new Date().toISOString(), target.id);
    return true;
  }

  /** The key's info when `key` is a valid (not revoked) key, else null. */
  verify(key: string): ApiKeyInfo | null {
    if (typeof key !== 'string' || !key.startsWith(KEY_PREFIX)) return null;
    const h = sha256(key);
    const row = this.db
      .prepare('SELECT id, name, prefix, hash, created_at, revoked_at, last_used_at FROM api_keys WHERE hash = ?')
      .get(h) as { id: string; name: string; prefix: string; hash: Buffer; created_at: string; revoked_at: string | null; last_used_at: string | null } | undefined;
    // The lookup is by hash (an index), so timing reveals nothing about the key; the constant-time
    // compare guards against a lookup that ever matched on less than the whole hash.
    if (!row || row.hash.length !== h.length || !timingSafeEqual(row.hash, h) || row.revoked_at) return null;
    return { id: row.id, name: row.name, prefix: row.prefix, createdAt: row.created_at, revokedAt: null, lastUsedAt: row.last_used_at };
  }

  /** Adds to a key's usage counters and marks it used now. */
  recordUsage(id: string, delta: UsageDelta): void {
    const clean = (v: number) => (Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);
    this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO key_usage (key_id, requests, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?)
           ON CONFLICT(key_id) DO UPDATE SET requests = requests + excluded.requests,
             prompt_tokens = prompt_tokens + excluded.prompt_tokens, completion_tokens = completion_tokens + excluded.completion_tokens`,
        )
        .run(id, clean(delta.requests), clean(delta.promptTokens), clean(delta.completionTokens));
      this.db.prepare('UPDATE api_keys SET last_used_at = ? WHERE id = ?').run(new Date().toISOString(), id);
    })();
  }

  /** Usage per key (zeros for unused keys), oldest key first. */
  usage(): KeyUsage[] {
    const rows = this.db
      .prepare(
        `SELECT k.id, k.name, k.prefix, k.revoked_at, COALESCE(u.requests, 0) AS requests,
                COALESCE(u.prompt_tokens, 0) AS prompt_tokens, COALESCE(u.completion_tokens, 0) AS completion_tokens
         FROM api_keys k LEFT JOIN key_usage u ON u.key_id = k.id ORDER BY k.created_at, k.rowid`,
      )
      .all() as { id: string; name: string; prefix: string; revoked_at: string | null; requests: number; prompt_tokens: number; completion_tokens: number }[];
    return rows.map((r) => ({
      id: r.id, name: r.name, prefix: r.prefix, revoked: r.revoked_at !== null,
      requests: r.requests, promptTokens: r.prompt_tokens, completionTokens: r.completion_tokens,
    }));
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
