// Statistics of a serving benchmark's token timestamps (serve-bench.ts).

/**
 * Aggregate tokens/s while every stream decodes: tokens emitted after the last stream's first token
 * and up to the first stream's last token, over that window. `times` holds each stream's token
 * timestamps in ms. Null when a stream has no token or the window holds fewer tokens than streams.
 * Unlike streams / mean inter-token gap, it leaves out the passes that prefilled the prompt of a
 * stream admitted late (those stall every running stream for a pass).
 */
export function steadyRate(times: number[][]): number | null {
  if (!times.length || times.some((t) => t.length === 0)) return null;
  const start = Math.max(...times.map((t) => t[0]));
  const end = Math.min(...times.map((t) => t[t.length - 1]));
  if (!(end > start)) return null;
  const tokens = times.reduce((a, t) => a + t.filter((x) => x > start && x <= end).length, 0);
  return tokens >= times.length ? tokens / ((end - start) / 1000) : null;
}
