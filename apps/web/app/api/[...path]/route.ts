import { proxy } from '../../_lib/proxy';

// Reads KAIL_API_URL and the session cookie per request.
export const dynamic = 'force-dynamic';
export const runtime = 'nodejs';

type Ctx = { params: Promise<{ path: string[] }> };

async function handle(req: Request, ctx: Ctx): Promise<Response> {
  const { path } = await ctx.params;
  return proxy(req, path.join('/'));
}

export const GET = handle;
export const POST = handle;
