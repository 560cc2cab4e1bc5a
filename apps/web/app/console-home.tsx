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
    </div>
  );
}
