// Stored responses of the Responses API (`store: true`): what GET /v1/responses/{id}, its
// input_items and a later request's previous_response_id read. Each response is visible only to
// the key that made it; the oldest are dropped past a count and a byte bound. In memory, or (with
// a data directory) in an SQLite file there, so that they outlive a restart and are shared by the
// API processes that open it.
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { engine as pb } from '@kailstream/proto';

/** Bounds on the responses kept. */
export const STORE_LIMITS = { responses: 1000, bytes: 64 << 20 };

/** The file in the data directory. */
export const RESPONSES_FILE = 'responses.sqlite';

export interface StoredResponse {
  tenant: string;
  response: Record<string, unknown>;
  /** The request's input items as OpenAI lists them. */
  input: Record<string, unknown>[];
  /** The conversation up to and including this response's output (its instructions excluded). */
  conversation: pb.ChatMessage[];
}

export interface ResponseStore {
  put(id: string, tenant: string, response: Record<string, unknown>, conversation: pb.ChatMessage[], input?: Record<string, unknown>[]): void;
  get(id: string, tenant: string): StoredResponse | undefined;
  delete(id: string, tenant: string): boolean;
  readonly size: number;
  close(): void;
}

/** Roughly what an entry holds, for the byte bound. */
function entryBytes(response: Record<string, unknown>, conversation: pb.ChatMessage[], input: Record<string, unknown>[]): number {
  return JSON.stringify(response).length + JSON.stringify(input).length + conversation.reduce((a, m) => a + m.content.length + m.reasoningContent.length + m.toolCallsJson.length + 64, 0);
}

/** Responses in this process's memory, lost at restart. */
export class MemoryResponseStore implements ResponseStore {
  private readonly entries = new Map<string, StoredResponse & { bytes: number }>();
  private bytes = 0;

  constructor(private readonly limits = STORE_LIMITS) {}

  put(id: string, tenant: string, response: Record<string, unknown>, conversation: pb.ChatMessage[], input: Record<string, unknown>[] = []): void {
    const bytes = entryBytes(response, conversation, input);
    this.entries.set(id, { tenant, response, input, conversation, bytes });
    this.bytes += bytes;
    for (const [old, e] of this.entries) {
      if (this.entries.size <= 1 || (this.entries.size <= this.limits.responses && this.bytes <= this.limits.bytes)) break;
      this.entries.delete(old);
      this.bytes -= e.bytes;
    }
  }

  get(id: string, tenant: string): StoredResponse | undefined {
    const e = this.entries.get(id);
    return e && e.tenant === tenant ? { tenant, response: e.response, input: e.input, conversation: e.conversation } : undefined;
  }

  delete(id: string, tenant: string): boolean {
    const e = this.entries.get(id);
    if (!e || e.tenant !== tenant) return false;
    this.entries.delete(id);
    this.bytes -= e.bytes;
    return true;
  }

  get size(): number {
    return this.entries.size;
  }

  close(): void {}
}

/**
 * Responses in an SQLite file (better-sqlite3, WAL, as the key store): they outlive a restart and
 * every API process that opens the file sees them. A row that no longer parses (a file edited by
 * hand) reads as absent.
 */
export class SqliteResponseStore implements ResponseStore {
  private constructor(
    private readonly db: Database.Database,
    private readonly limits: typeof STORE_LIMITS,
  ) {}

  /**
   * Opens (creating if needed) the store at `file`. A file that is not an SQLite database (or a
   * damaged one) is moved aside as FILE.unreadable-TIME, kept for whoever wants it back, and a new
   * store starts: stored responses are a cache of past answers, not a reason to stay down.
   * `onNote` hears that it happened.
   */
  static open(file: string, limits = STORE_LIMITS, onNote?: (message: string) => void): SqliteResponseStore {
    try {
      return SqliteResponseStore.openOnce(file, limits);
    } catch (e) {
      const code = (e as { cause?: { code?: string } }).cause?.code ?? '';
      if (!/^SQLITE_(NOTADB|CORRUPT)/.test(code) || !fs.existsSync(file)) throw e;
      const aside = `${file}.unreadable-${new Date().toISOString().replace(/[:.]/g, '-')}`;
      fs.renameSync(file, aside);
      for (const ext of ['-wal', '-shm']) if (fs.existsSync(file + ext)) fs.renameSync(file + ext, aside + ext);
      onNote?.(`${(e as Error).message}; moved it to ${aside} and started an empty response store`);
      return SqliteResponseStore.openOnce(file, limits);
    }
  }

  private static openOnce(file: string, limits: typeof STORE_LIMITS): SqliteResponseStore {
    let db: Database.Database | undefined;
    try {
      fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
      db = new Database(file);
      db.pragma('journal_mode = WAL');
      db.pragma('busy_timeout = 5000');
      db.exec(`
        CREATE TABLE IF NOT EXISTS responses (
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          id TEXT NOT NULL UNIQUE,
          tenant TEXT NOT NULL,
          bytes INTEGER NOT NULL,
          response TEXT NOT NULL,
          input TEXT NOT NULL,
          conversation TEXT NOT NULL
        );
      `);
    } catch (e) {
      db?.close();
      throw new Error(`cannot open the response store ${file}: ${(e as Error).message}`, { cause: e });
    }
    return new SqliteResponseStore(db, limits);
  }

  put(id: string, tenant: string, response: Record<string, unknown>, conversation: pb.ChatMessage[], input: Record<string, unknown>[] = []): void {
    const bytes = entryBytes(response, conversation, input);
    const tx = this.db.transaction(() => {
      this.db
        .prepare('INSERT OR REPLACE INTO responses (id, tenant, bytes, response, input, conversation) VALUES (?, ?, ?, ?, ?, ?)')
        .run(id, tenant, bytes, JSON.stringify(response), JSON.stringify(input), JSON.stringify(conversation.map((m) => pb.ChatMessage.toJSON(m))));
      // The oldest go first, past either bound (the newest always stays).
      const { n, total } = this.db.prepare('SELECT COUNT(*) AS n, COALESCE(SUM(bytes), 0) AS total FROM responses').get() as { n: number; total: number };
      let count = n;
      let sum = total;
      if (count <= this.limits.responses && sum <= this.limits.bytes) return;
      const rows = this.db.prepare('SELECT seq, bytes FROM responses ORDER BY seq').all() as { seq: number; bytes: number }[];
      const drop = this.db.prepare('DELETE FROM responses WHERE seq = ?');
      for (const r of rows) {
        if (count <= 1 || (count <= this.limits.responses && sum <= this.limits.bytes)) break;
        drop.run(r.seq);
        count--;
        sum -= r.bytes;
      }
    });
    tx();
  }

  get(id: string, tenant: string): StoredResponse | undefined {
    const row = this.db.prepare('SELECT tenant, response, input, conversation FROM responses WHERE id = ?').get(id) as
      | { tenant: string; response: string; input: string; conversation: string }
      | undefined;
    if (!row || row.tenant !== tenant) return undefined;
    try {
      const conversation = (JSON.parse(row.conversation) as unknown[]).map((m) => pb.ChatMessage.fromJSON(m));
      return { tenant, response: JSON.parse(row.response), input: JSON.parse(row.input), conversation };
    } catch {
      return undefined;
    }
  }

  delete(id: string, tenant: string): boolean {
    return this.db.prepare('DELETE FROM responses WHERE id = ? AND tenant = ?').run(id, tenant).changes > 0;
  }

  get size(): number {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM responses').get() as { n: number }).n;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
