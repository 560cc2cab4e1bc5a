// What the CLI's clients of the HTTP API (kail create, kail show) share: the API's address and
// key, fetch with an unreachable API told as such, and an answer's error as a message.

export interface ApiTarget {
  /** Base URL, no trailing slash (apiBaseUrl). */
  url: string;
  apiKey?: string;
}

const authHeaders = (api: ApiTarget): Record<string, string> => (api.apiKey ? { authorization: `Bearer ${api.apiKey}` } : {});

/** fetch of a route of the API, with its key; a refused or unreachable API is an error saying what to do. */
export async function apiFetch(api: ApiTarget, route: string, init: RequestInit & { duplex?: 'half' } = {}): Promise<Response> {
  try {
    return await fetch(`${api.url}${route}`, { ...init, headers: { ...authHeaders(api), ...((init.headers as Record<string, string>) ?? {}) } });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(`cannot reach the API at ${api.url} (${cause?.code ?? cause?.message ?? (e as Error).message}): start kail serve, or give --url`);
  }
}

/** The error an API answer carries (Ollama's {error} or OpenAI's {error:{message}}), else its status. */
export async function apiError(r: Response, what: string): Promise<Error> {
  const text = await r.text().catch(() => '');
  let message = text.trim();
  try {
    const b = JSON.parse(text) as { error?: string | { message?: string } };
    message = typeof b.error === 'string' ? b.error : (b.error?.message ?? message);
  } catch {
    // not JSON: the text as it came
  }
  return new Error(`${what}: HTTP ${r.status}${message ? `: ${message}` : ''}`);
}
