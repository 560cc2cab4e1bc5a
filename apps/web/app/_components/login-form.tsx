'use client';
import { useState, type FormEvent } from 'react';

/** Asks for an API key; the console's server checks it against the API and keeps it in an httpOnly cookie. */
export function LoginForm({ onDone }: { onDone: () => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const r = await fetch('/api/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key }) });
      const body = (await r.json().catch(() => ({}))) as { error?: string };
      if (!r.ok) throw new Error(body.error ?? `sign-in failed (${r.status})`);
      setKey('');
      onDone();
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form onSubmit={submit} className="card" style={{ maxWidth: 480 }} data-testid="login">
      <h2>API key required</h2>
      <p className="muted">This server requires an API key. Create one with <code>kail keys create NAME</code> and paste it here.</p>
      <input type="password" autoComplete="off" placeholder="ks-…" value={key} onChange={(e) => setKey(e.target.value)} aria-label="API key" style={{ width: '100%' }} />
      <div style={{ marginTop: 8 }}>
        <button type="submit" disabled={busy || !key.trim()}>
          Sign in
        </button>
      </div>
      {error && <p className="error">{error}</p>}
    </form>
  );
}
