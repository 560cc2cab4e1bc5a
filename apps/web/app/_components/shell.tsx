'use client';
import Link from 'next/link';
import { usePathname } from 'next/navigation';
import { useEffect, useState, type ReactNode } from 'react';

import { api, errorMessage, onAuthRequired } from '../_lib/api';
import { LoginForm } from './login-form';

export const SECTIONS = [
  { href: '/models', label: 'Models' },
  { href: '/chat', label: 'Chat' },
  { href: '/telemetry', label: 'Telemetry' },
  { href: '/telemetry#heatmap', label: 'Expert heatmap' },
  { href: '/admin', label: 'Keys' },
] as const;

export function Nav({ current }: { current: string }) {
  return (
    <nav aria-label="sections" className="nav">
      <Link href="/" className="brand">
        KailStream
      </Link>
      {SECTIONS.map((s) => (
        <Link key={s.href} href={s.href} className={current === s.href ? 'active' : undefined}>
          {s.label}
        </Link>
      ))}
    </nav>
  );
}

/**
 * Page frame: navigation, and the login form instead of the page whenever the API answers 401
 * (the session is an httpOnly cookie the console's own server holds; see /api/session).
 */
export function Shell({ children }: { children: ReactNode }) {
  const pathname = usePathname() ?? '/';
  const [needLogin, setNeedLogin] = useState(false);
  const [session, setSession] = useState<{ required: boolean; name: string | null } | null>(null);

  useEffect(() => {
    // Marks the page as interactive (tests wait for it: static pages show forms before React runs).
    document.documentElement.dataset.hydrated = 'true';
    return onAuthRequired(() => setNeedLogin(true));
  }, []);
  useEffect(() => {
    api.auth.session
      .query()
      .then((s) => {
        setSession({ required: s.required, name: s.key?.name ?? null });
        if (s.required && !s.authenticated) setNeedLogin(true);
      })
      .catch((e) => {
        if (!/401|UNAUTHORIZED/i.test(errorMessage(e))) setSession(null);
      });
  }, [needLogin]);

  const logout = async () => {
    await fetch('/api/session', { method: 'DELETE' });
    setNeedLogin(true);
  };

  return (
    <>
      <header className="top">
        <Nav current={pathname} />
        {session?.name && (
          <span className="muted session">
            key: {session.name}{' '}
            <button className="link" onClick={logout}>
              sign out
            </button>
          </span>
        )}
      </header>
      <main className="page">{needLogin ? <LoginForm onDone={() => setNeedLogin(false)} /> : children}</main>
    </>
  );
}
