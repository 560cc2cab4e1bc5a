'use client';
import { useState, type MouseEvent } from 'react';

export interface HeatmapLayer {
  layer: number;
  /** Activations per expert index over the window. */
  counts: number[];
  /** Expert indices resident in the RAM expert cache now. */
  resident: number[];
}

export interface ExpertHeatmapProps {
  layers: HeatmapLayer[];
  /** Largest count in the window (the top of the colour scale). */
  max: number;
  /** What the window covers, for the caption ("last 60 s", "since start"). */
  windowLabel: string;
  /** Drawing width in px. Default 920. */
  width?: number;
}

// Stops of a perceptual dark-to-bright scale (inferno-like), so rare and busy experts separate.
const STOPS: [number, [number, number, number]][] = [
  [0, [22, 24, 32]],
  [0.25, [87, 16, 110]],
  [0.5, [188, 55, 84]],
  [0.75, [249, 142, 9]],
  [1, [252, 255, 164]],
];

/** Colour of a cell with count/max = frac (square-root scale: a few hot experts do not wash out the rest). */
export function heatColor(frac: number): string {
  const f = Math.sqrt(Math.min(1, Math.max(0, frac)));
  for (let i = 1; i < STOPS.length; i++) {
    const [p1, c1] = STOPS[i];
    const [p0, c0] = STOPS[i - 1];
    if (f <= p1) {
      const k = (f - p0) / (p1 - p0);
      const c = c0.map((v, j) => Math.round(v + (c1[j] - v) * k));
      return `rgb(${c[0]},${c[1]},${c[2]})`;
    }
  }
  return 'rgb(252,255,164)';
}

export function cellSize(nLayers: number, nExperts: number, width: number): { cw: number; ch: number } {
  const cw = Math.max(2, Math.min(22, Math.floor((width - 40) / Math.max(1, nExperts))));
  const ch = Math.max(4, Math.min(18, Math.floor(420 / Math.max(1, nLayers))));
  return { cw, ch };
}

interface Hover {
  layer: number;
  expert: number;
  count: number;
  resident: boolean;
  x: number;
  y: number;
}

/**
 * Layers (rows) × experts (columns), coloured by activation count over the window; experts
 * resident in the RAM cache carry a bright dot. Hovering a cell shows its count and tier.
 */
export function ExpertHeatmap({ layers, max, windowLabel, width = 920 }: ExpertHeatmapProps) {
  const [hover, setHover] = useState<Hover | null>(null);
  const nExperts = Math.max(0, ...layers.map((l) => l.counts.length));
  const { cw, ch } = cellSize(layers.length, nExperts, width);
  const left = 36;
  const top = 14;
  const w = left + nExperts * cw + 4;
  const h = top + layers.length * ch + 4;
  const residentSets = layers.map((l) => new Set(l.resident));
  const totalResident = layers.reduce((a, l) => a + l.resident.length, 0);

  const onMove = (e: MouseEvent<SVGSVGElement>) => {
    const svg = e.currentTarget;
    const r = svg.getBoundingClientRect();
    const scale = r.width / w;
    const px = (e.clientX - r.left) / scale;
    const py = (e.clientY - r.top) / scale;
    const expert = Math.floor((px - left) / cw);
    const row = Math.floor((py - top) / ch);
    if (expert < 0 || expert >= nExperts || row < 0 || row >= layers.length) return setHover(null);
    const l = layers[row];
    setHover({ layer: l.layer, expert, count: l.counts[expert] ?? 0, resident: residentSets[row].has(expert), x: e.clientX - r.left, y: e.clientY - r.top });
  };

  if (!layers.length) return <p className="muted" data-testid="heatmap-empty">No expert activity yet: load a MoE model and generate.</p>;
  return (
    <div className="heatmap" style={{ position: 'relative' }} data-testid="heatmap">
      <div className="muted" style={{ fontSize: 12, marginBottom: 4 }}>
        {`${layers.length} layers × ${nExperts} experts, ${windowLabel}; max ${max} activations per cell; ${totalResident} experts resident (dot)`}
      </div>
      <svg
        viewBox={`0 0 ${w} ${h}`}
        width={Math.min(width, w)}
        role="img"
        aria-label="expert activation heatmap"
        onMouseMove={onMove}
        onMouseLeave={() => setHover(null)}
        style={{ display: 'block', cursor: 'crosshair' }}
      >
        <text x={left} y={10} fontSize="9" fill="#8a93a6">
          expert 0
        </text>
        <text x={left + nExperts * cw} y={10} fontSize="9" fill="#8a93a6" textAnchor="end">
          {nExperts - 1}
        </text>
        {layers.map((l, row) => (
          <g key={l.layer} data-layer={l.layer}>
            <text x={left - 4} y={top + row * ch + ch / 2 + 3} fontSize="9" fill="#8a93a6" textAnchor="end">
              {l.layer}
            </text>
            {l.counts.map((c, e) => (
              <rect
                key={e}
                x={left + e * cw}
                y={top + row * ch}
                width={cw - (cw > 4 ? 1 : 0)}
                height={ch - 1}
                fill={heatColor(max > 0 ? c / max : 0)}
                data-count={c}
              />
            ))}
            {l.resident.map((e) => (
              <circle key={`r${e}`} className="resident" pointerEvents="none" cx={left + e * cw + (cw - 1) / 2} cy={top + row * ch + (ch - 1) / 2} r={Math.max(1, Math.min(cw, ch) / 5)} fill="#7fdbff" />
            ))}
          </g>
        ))}
      </svg>
      <div className="heat-scale">
        <span>0</span>
        <span className="heat-bar" style={{ background: `linear-gradient(90deg, ${[0, 0.06, 0.25, 0.56, 1].map(heatColor).join(',')})` }} />
        <span>{max}</span>
        <span style={{ marginLeft: 16 }}>
          <i className="dot" /> resident in the RAM cache
        </span>
      </div>
      {hover && (
        <div className="tooltip" data-testid="heatmap-tooltip" style={{ left: hover.x + 12, top: hover.y + 12 }}>
          layer {hover.layer}, expert {hover.expert}
          <br />
          {hover.count} activations ({windowLabel})
          <br />
          tier: {hover.resident ? 'RAM cache' : 'storage'}
        </div>
      )}
    </div>
  );
}
