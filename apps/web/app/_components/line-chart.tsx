import { useId } from 'react';

export interface Series {
  name: string;
  color: string;
  /** [unix ms, value]; null values break the line (no data at that sample). */
  points: [number, number | null][];
  /** Dashed, for budgets and limits. */
  dashed?: boolean;
  /** Fill the area under the line. */
  area?: boolean;
}

export interface LineChartProps {
  title: string;
  series: Series[];
  /** Formats axis and legend values. */
  format?: (v: number) => string;
  /** Fixed y range top (e.g. 1 for ratios); default: the data's max with headroom. */
  yMax?: number;
  /** Seconds the x axis spans, ending now. Default 60. */
  windowSeconds?: number;
  /** The right edge of the x axis (unix ms); default: the newest point. */
  now?: number;
  width?: number;
  height?: number;
  testId?: string;
}

const PAD = { left: 72, right: 10, top: 8, bottom: 20 };

/** Split a series into runs of consecutive non-null points (one SVG path each). */
export function runs(points: [number, number | null][]): [number, number][][] {
  const out: [number, number][][] = [];
  let cur: [number, number][] = [];
  for (const [t, v] of points) {
    if (v === null || !Number.isFinite(v)) {
      if (cur.length) out.push(cur);
      cur = [];
    } else cur.push([t, v]);
  }
  if (cur.length) out.push(cur);
  return out;
}

/** A "nice" axis top above max: 1, 2, 2.5 or 5 times a power of ten. */
export function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max * 1.05) return m * p;
  return 10 * p;
}

/** A time-series line chart in plain SVG: no chart library, scales to its container's width. */
export function LineChart({ title, series, format = (v) => v.toFixed(1), yMax, windowSeconds = 60, now, width = 460, height = 150, testId }: LineChartProps) {
  const clip = useId().replace(/:/g, '');
  const all = series.flatMap((s) => s.points);
  const tEnd = now ?? (all.length ? Math.max(...all.map((p) => p[0])) : 0);
  const tStart = tEnd - windowSeconds * 1000;
  const dataMax = Math.max(0, ...all.map((p) => (p[1] === null || !Number.isFinite(p[1]) ? 0 : p[1])));
  const top = yMax ?? niceMax(dataMax);
  const w = width - PAD.left - PAD.right;
  const h = height - PAD.top - PAD.bottom;
  const x = (t: number) => PAD.left + ((t - tStart) / (tEnd - tStart || 1)) * w;
  const y = (v: number) => PAD.top + h - (Math.min(v, top) / top) * h;
  const ticks = [0, top / 2, top];
  const latest = (s: Series) => {
    for (let i = s.points.length - 1; i >= 0; i--) if (s.points[i][1] !== null) return s.points[i][1] as number;
    return null;
  };
  return (
    <figure className="chart" data-testid={testId} style={{ margin: 0 }}>
      <figcaption className="chart-title">{title}</figcaption>
      <svg viewBox={`0 0 ${width} ${height}`} width="100%" role="img" aria-label={title}>
        <defs>
          <clipPath id={clip}>
            <rect x={PAD.left} y={PAD.top - 1} width={w} height={h + 2} />
          </clipPath>
        </defs>
        {ticks.map((v) => (
          <g key={v}>
            <line x1={PAD.left} x2={PAD.left + w} y1={y(v)} y2={y(v)} stroke="#2a2f3a" />
            <text x={PAD.left - 6} y={y(v) + 4} textAnchor="end" fontSize="10" fill="#8a93a6">
              {format(v)}
            </text>
          </g>
        ))}
        <text x={PAD.left} y={height - 4} fontSize="10" fill="#8a93a6">
          −{windowSeconds}s
        </text>
        <text x={PAD.left + w} y={height - 4} fontSize="10" fill="#8a93a6" textAnchor="end">
          now
        </text>
        <g clipPath={`url(#${clip})`}>
          {series.map((s) =>
            runs(s.points).map((r, i) => {
              const d = r.map(([t, v], j) => `${j ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join('');
              return (
                <g key={`${s.name}-${i}`} data-series={s.name}>
                  {s.area && r.length > 1 && (
                    <path d={`${d}L${x(r[r.length - 1][0]).toFixed(1)},${y(0)}L${x(r[0][0]).toFixed(1)},${y(0)}Z`} fill={s.color} opacity={0.15} />
                  )}
                  <path d={d} fill="none" stroke={s.color} strokeWidth={1.6} strokeDasharray={s.dashed ? '5 4' : undefined} />
                </g>
              );
            }),
          )}
        </g>
      </svg>
      <div className="legend">
        {series.map((s) => {
          const v = latest(s);
          return (
            <span key={s.name} className="legend-item">
              <i style={{ background: s.color, opacity: s.dashed ? 0.6 : 1 }} />
              {s.name} <b data-legend={s.name}>{v === null ? '–' : format(v)}</b>
            </span>
          );
        })}
      </div>
    </figure>
  );
}
