// Other names of loaded models, as llama-server's --alias gives its model (`kail serve --alias`):
// a request whose body names an alias is served by the model it stands for, on every route that
// names a model (OpenAI's and Anthropic's `model`, Ollama's `model`/`name`/`source`/`from`,
// llama-server's), and /v1/models lists each model's aliases as llama-server does.
import type { FastifyInstance } from 'fastify';

/** Routes whose body names a model to make or fetch, not one to serve: an alias there is a name like any other. */
const NAMING_ROUTES: ReadonlySet<string> = new Set(['/api/pull', '/api/create', '/api/delete']);

export class ModelAliases {
  private readonly byName: ReadonlyMap<string, string>;

  constructor(aliases: Readonly<Record<string, string>>) {
    this.byName = new Map(Object.entries(aliases));
  }

  /** The id an alias stands for (given as set, or with Ollama's `:latest` tag), else undefined. */
  idFor(name: string): string | undefined {
    return this.byName.get(name) ?? (name.endsWith(':latest') ? this.byName.get(name.slice(0, -7)) : undefined);
  }

  /** A model's aliases, in the order given. */
  of(id: string): string[] {
    return [...this.byName].filter(([, i]) => i === id).map(([n]) => n);
  }

  /** Reads the aliases in request bodies as the ids they stand for (a hook that runs before every route's handler). */
  register(app: FastifyInstance): void {
    if (this.byName.size === 0) return;
    app.addHook('preHandler', async (req) => {
      const route = req.url.split('?')[0];
      if (route.startsWith('/trpc/')) return;
      const body = req.body as Record<string, unknown> | undefined;
      if (!body || typeof body !== 'object' || Array.isArray(body)) return;
      const keys = route === '/api/create' ? ['from'] : NAMING_ROUTES.has(route) ? [] : ['model', 'name', 'source'];
      for (const k of keys) {
        const v = body[k];
        const id = typeof v === 'string' ? this.idFor(v) : undefined;
        if (id !== undefined) body[k] = id;
      }
    });
  }
}
