export interface ConsoleHomeProps {
  /** Where the console's API lives. */
  apiUrl: string;
}

const SECTIONS = [
  { href: '/models', label: 'Models', text: 'files in the models directory, the residency plan before loading, load and unload' },
  { href: '/chat', label: 'Chat', text: 'streamed chat with any loaded model; time to first token and tokens/s' },
  { href: '/telemetry', label: 'Telemetry', text: 'tokens/s, memory per tier against budgets, hit rates, storage reads, stalls, queue' },
  { href: '/telemetry#heatmap', label: 'Expert heatmap', text: 'layers × experts by activation count, resident experts marked' },
  { href: '/admin', label: 'Keys', text: 'API keys (create, list, revoke) and usage per key' },
];

/** Where each family of clients points (the same server, the same models and keys). */
export function clientEndpoints(apiUrl: string): { api: string; base: string; example: string }[] {
  return [
    { api: 'OpenAI (chat, completions, embeddings, Responses)', base: `${apiUrl}/v1`, example: `new OpenAI({ baseURL: '${apiUrl}/v1', apiKey })` },
    { api: 'Anthropic Messages', base: apiUrl, example: `new Anthropic({ baseURL: '${apiUrl}', apiKey })` },
    { api: 'Ollama (/api/chat, /api/generate, /api/tags…)', base: apiUrl, example: `new Ollama({ host: '${apiUrl}' })` },
    { api: "llama-server's (/completion, /infill, /tokenize…)", base: apiUrl, example: `curl ${apiUrl}/completion -d '{"prompt":"Hello","n_predict":16}'` },
  ];
}

/** Landing page of the console; models, chat, telemetry and the expert heatmap hang off it. */
export function ConsoleHome({ apiUrl }: ConsoleHomeProps) {
  return (
    <div style={{ maxWidth: 960 }}>
      <h1 style={{ fontWeight: 600 }}>KailStream</h1>
      <p>Local inference for Mixture-of-Experts models larger than memory.</p>
      <ul className="home">
        {SECTIONS.map((s) => (
          <li key={s.href}>
            <a href={s.href}>{s.label}</a> <span className="muted">{s.text}</span>
          </li>
        ))}
      </ul>
      <p>
        API: <code data-testid="api-url">{apiUrl}</code>
      </p>
      <h2 style={{ fontWeight: 600, fontSize: '1.1em' }}>Clients</h2>
      <table className="endpoints">
        <tbody>
          {clientEndpoints(apiUrl).map((e) => (
            <tr key={e.api}>
              <td>{e.api}</td>
              <td>
                <code>{e.example}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <p className="muted">With API keys in use, clients send one as a bearer token (Anthropic's SDK as <code>x-api-key</code>).</p>
    </div>
  );
}
