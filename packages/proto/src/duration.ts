// Durations as the services' flags and Ollama's keep_alive take them.

/**
 * A duration in milliseconds as Ollama's keep_alive takes it: Go's time.ParseDuration ("5m",
 * "1h30m", "300ms", "-1s", "0") or a bare number of seconds ("300", "-1"). NaN when malformed.
 */
export function parseDurationMs(text: string): number {
  const t = text.trim();
  if (/^[-+]?\d+(\.\d+)?$/.test(t)) return Number(t) * 1000;
  const m = /^([-+]?)((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+$/.exec(t);
  if (!m) return NaN;
  const unit: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, μs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  let ms = 0;
  for (const p of t.slice(m[1].length).matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/g)) ms += Number(p[1]) * unit[p[2]];
  return m[1] === '-' ? -ms : ms;
}
