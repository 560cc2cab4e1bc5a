export interface ConsoleHomeProps {
  /** Where the console's API lives. */
  apiUrl: string;
}

/** Landing page of the console; models, chat, telemetry and the expert heatmap hang off it. */
export function ConsoleHome({ apiUrl }: ConsoleHomeProps) {
  return (
    <main style={{ maxWidth: 960, margin: '0 auto', padding: 24 }}>
      <h1 style={{ fontWeight: 600 }}>KailStream</h1>
      <p>Local inference for Mixture-of-Experts models larger than memory.</p>
      <nav aria-label="sections">
        <ul>
          <li>Models</li>
          <li>Chat</li>
          <li>Telemetry</li>
          <li>Expert heatmap</li>
          <li>Keys</li>
        </ul>
      </nav>
      <p>
        API: <code data-testid="api-url">{apiUrl}</code>
      </p>
    </main>
  );
}
