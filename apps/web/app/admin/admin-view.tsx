'use client';
import { useState } from 'react';

import { api } from '../_lib/api';
import { useAction } from '../_lib/use-action';
import { usePoll } from '../_lib/use-poll';

type Created = Awaited<ReturnType<typeof api.keys.create.mutate>>;

/** Usage rows from the key store, shown whatever their columns are (requests, tokens, …). */
export function UsageTable({ rows }: { rows: Record<string, unknown>[] }) {
  if (!rows.length) return <p className="muted">No usage recorded yet.</p>;
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  return (
    <table className="table" data-testid="usage">
      <thead>
        <tr>
          {cols.map((c) => (
            <th key={c}>{c}</th>
          ))}
        </tr>
      </thead>
      <tbody>
        {rows.map((r, i) => (
          <tr key={i}>
            {cols.map((c) => (
              <td key={c}>{r[c] == null ? '' : String(r[c])}</td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function AdminView() {
  const keys = usePoll(() => api.keys.list.query(), 5000);
  const usage = usePoll(() => api.keys.usage.query(), 5000);
  const [name, setName] = useState('');
  const [created, setCreated] = useState<Created | null>(null);
  const { error, run, submit } = useAction();
  const create = async () => {
    // Whether this console is signed in with a key: without one (the API was open), the first
    // key closes the API to it, and the next poll would swap this page for the login form and
    // take the key, shown only once, off the screen. So the console signs in with the new key.
    const before = await api.auth.session.query();
    const made = await api.keys.create.mutate({ name });
    const signIn = before.authenticated ? null : await fetch('/api/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: made.key }) });
    setCreated(made);
    setName('');
    keys.refresh();
    // (The key is shown all the same.)
    if (signIn && !signIn.ok) throw new Error(`the key was created, but the console could not sign in with it (${signIn.status}): copy it, then sign in`);
  };
  const revoke = (id: string) =>
    run(async () => {
      await api.keys.revoke.mutate({ id });
      keys.refresh();
    });
  return (
    <div>
      <h1>API keys</h1>
      <form onSubmit={submit(create)} className="row">
        <input value={name} onChange={(e) => setName(e.target.value)} placeholder="name (who or what uses it)" aria-label="key name" />
        <button type="submit" disabled={!name.trim()}>
          Create key
        </button>
      </form>
      {created && (
        <div className="card created" data-testid="created-key">
          <p>
            Key <b>{created.name}</b> created. Copy it now: it is shown only this once. (If this console
            had no key, it is signed in with this one.)
          </p>
          <code className="secret">{created.key}</code>{' '}
          <button onClick={() => void navigator.clipboard?.writeText(created.key)}>Copy</button>{' '}
          <button className="link" onClick={() => setCreated(null)}>
            done
          </button>
        </div>
      )}
      {error && <p className="error">{error}</p>}
      {keys.error && <p className="error">{keys.error}</p>}
      <table className="table" data-testid="keys">
        <thead>
          <tr>
            <th>name</th>
            <th>prefix</th>
            <th>created</th>
            <th>last used</th>
            <th>status</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {keys.data?.map((k) => (
            <tr key={k.id}>
              <td>{k.name}</td>
              <td>
                <code>{k.prefix}…</code>
              </td>
              <td>{k.createdAt ?? ''}</td>
              <td>{k.lastUsedAt ?? 'never'}</td>
              <td>{k.revokedAt ? `revoked ${k.revokedAt}` : 'active'}</td>
              <td>{!k.revokedAt && <button onClick={() => revoke(k.id)}>Revoke</button>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Usage per key</h2>
      {usage.error ? <p className="error">{usage.error}</p> : <UsageTable rows={usage.data ?? []} />}
    </div>
  );
}
