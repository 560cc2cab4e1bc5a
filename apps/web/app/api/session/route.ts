import { login, logout } from '../../_lib/proxy';

export const dynamic = 'force-dynamic';
export const runtime = 'nodejs';

/** Sign in: checks {key} against the API and sets the httpOnly session cookie. */
export function POST(req: Request): Promise<Response> {
  return login(req);
}

/** Sign out: clears the cookie. */
export function DELETE(): Response {
  return logout();
}
