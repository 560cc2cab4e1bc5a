'use client';
import { createTRPCClient, httpBatchLink, TRPCClientError } from '@trpc/client';
import type { AppRouter } from '@kailstream/api';

/** Everything under /api/ is the console's own server proxying to the API (same origin, session cookie). */
export const API_BASE = '/api';

type Listener = () => void;
const authListeners = new Set<Listener>();

/** Called whenever the API answers 401: the console shows its login form. */
export function onAuthRequired(fn: Listener): () => void {
  authListeners.add(fn);
  return () => authListeners.delete(fn);
}

export function signalAuthRequired(): void {
  for (const fn of authListeners) fn();
}

const fetchWatchingAuth: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  if (res.status === 401) signalAuthRequired();
  return res;
};

export const api = createTRPCClient<AppRouter>({
  links: [httpBatchLink({ url: `${API_BASE}/trpc`, fetch: fetchWatchingAuth, maxURLLength: 4000 })],
});

export type Api = typeof api;

/** A readable message for any error a call can throw (zod issues name the field). */
export function errorMessage(e: unknown): string {
  if (e instanceof TRPCClientError) {
    const issues = (e.data as { zodIssues?: { path: string; message: string }[] } | undefined)?.zodIssues;
    if (issues?.length) return issues.map((i) => `${i.path || 'input'}: ${i.message}`).join('; ');
    return e.message;
  }
  return e instanceof Error ? e.message : String(e);
}

/** Streams a chat completion through the API's OpenAI route (the proxy adds the session's key). */
export function chatStream(body: object, signal?: AbortSignal): Promise<Response> {
  return fetchWatchingAuth(`${API_BASE}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
}
