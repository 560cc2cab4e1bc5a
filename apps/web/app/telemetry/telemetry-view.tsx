'use client';
import { useEffect, useState } from 'react';
import type { ExpertSource, ExpertWindow, TelemetryPoint } from '@kailstream/api';

import { ExpertHeatmap } from '../_components/expert-heatmap';
import { LineChart, type Series } from '../_components/line-chart';
import { api } from '../_lib/api';
import { formatBytes, formatCount, formatPercent, formatRate } from '../_lib/format';
import { usePoll } from '../_lib/use-poll';

const TIER_COLORS: Record<string, string> = { vram: '#b48ead', ram: '#5ab0f0', kv: '#a3be8c' };
const tierColor = (t: string) => TIER_COLORS[t] ?? '#d08770';

/** Window choices for the heatmap, seconds (0 = since the model was loaded). */
export const HEATMAP_WINDOWS = [
  { seconds: 10, label: 'last 10 s' },
  { seconds: 60, label: 'last 60 s' },
  { seconds: 300, label: 'last 5 min' },
  { seconds: 0, label: 'since load' },
];

/** The chart series of a history, one function per chart so the component tests can read them. */
export function telemetrySeries(points: TelemetryPoint[]) {
  const at = <T,>(f: (p: TelemetryPoint) => T) => points.map((p) => [p.t, f(p)] as [number, T]);
  const tiers = [...new Set(points.flatMap((p) => p.tiers.map((t) => t.tier)))];
  const tierOf = (p: TelemetryPoint, tier: string) => p.tiers.find((t) => t.tier === tier);
  const memory: Series[] = [];
  for (const tier of tiers) {
    memory.push({ name: `${tier.toUpperCase()} used`, color: tierColor(tier), points: at((p) => tierOf(p, tier)?.usedBytes ?? null), area: true });
    memory.push({ name: `${tier.toUpperCase()} budget`, color: tierColor(tier), points: at((p) => tierOf(p, tier)?.budgetBytes ?? null), dashed: true });
  }
  memory.push({ name: 'KV used', color: tierColor('kv'), points: at((p) => (p.kvCapacityBytes ? p.kvUsedBytes : null)), area: true });
  memory.push({ name: 'KV capacity', color: tierColor('kv'), points: at((p) => (p.kvCapacityBytes ? p.kvCapacityBytes : null)), dashed: true });
  const hitRate: Series[] = tiers.map((tier) => ({ name: `${tier.toUpperCase()} hit rate`, color: tierColor(tier), points: at((p) => tierOf(p, tier)?.hitRate ?? null) }));
  const profiled = points.some((p) => p.storageBandwidthBytesPerSecond > 0);
  return {
    tokens: [{ name: 'tokens/s', color: '#ebcb8b', points: at((p) => p.tokensPerSecond), area: true }] as Series[],
    memory,
    hitRate,
    storage: [
      { name: 'bytes read/s', color: '#88c0d0', points: at((p) => p.bytesReadPerSecond), area: true },
      ...(profiled ? [{ name: 'profiled bandwidth', color: '#bf616a', points: at((p) => p.storageBandwidthBytesPerSecond || null), dashed: true }] : []),
    ] as Series[],
    stall: [{ name: 'I/O stall (s per s)', color: '#bf616a', points: at((p) => p.ioStallPerSecond), area: true }] as Series[],
    queue: [
      { name: 'queued', color: '#d08770', points: at((p) => p.queued) },
      { name: 'running', color: '#a3be8c', points: at((p) => p.running) },
    ] as Series[],
  };
}

export interface TelemetryChartsProps {
  points: TelemetryPoint[];
  windowSeconds: number;
  now?: number;
}

export function TelemetryCharts({ points, windowSeconds, now }: TelemetryChartsProps) {
  const s = telemetrySeries(points);
  const common = { windowSeconds, now };
  const last = points.at(-1);
  return (
    <div className="grid2" data-testid="charts">
      <LineChart title="Generation (tokens/s, all engines)" series={s.tokens} format={(v) => formatCount(v)} testId="chart-tokens" {...common} />
      <LineChart title="Memory per tier against its budget" series={s.memory} format={formatBytes} testId="chart-memory" {...common} />
      <LineChart title="Expert-cache hit rate per tier" series={s.hitRate} format={formatPercent} yMax={1} testId="chart-hits" {...common} />
      <LineChart
        title={`Storage read rate${last && last.storageBandwidthBytesPerSecond ? '' : ' (bandwidth not profiled)'}`}
        series={s.storage}
        format={formatRate}
        testId="chart-storage"
        {...common}
      />
      <LineChart title="I/O stall (seconds waiting on storage per second)" series={s.stall} format={(v) => v.toFixed(2)} testId="chart-stall" {...common} />
      <LineChart title="Queue depth and running requests" series={s.queue} format={(v) => v.toFixed(0)} testId="chart-queue" {...common} />
    </div>
  );
}

type Queue = Awaited<ReturnType<typeof api.requests.queue.query>>;
/** Each loaded model's slots, as they arrive over tRPC (the engine's SlotState, serialized). */
type ModelSlots = Awaited<ReturnType<typeof api.telemetry.slots.query>>[number];
type SlotView = ModelSlots['slots'][number];

/** The scheduler's engines: health, models and running requests each. */
export function EngineStrip({ queue }: { queue: Queue }) {
  return (
    <div className="row" data-testid="engines">
      {queue.engines.map((e) => (
        <span key={e.engineId} className="card" style={{ margin: 0, padding: '4px 10px' }}>
          <span className={e.serving ? 'ok' : 'error'}>{e.serving ? '●' : '○'}</span> {e.address} · {e.models.join(', ') || 'no model'} · {e.running} running
        </span>
      ))}
      <span className="muted">
        queue {queue.queued}
        {queue.capacity ? ` of ${queue.capacity}` : ''}
      </span>
    </div>
  );
}

/** What a slot is doing, in words. */
export function slotState(s: SlotView): string {
  if (!s.processing) return 'idle';
  if (s.promptTokensProcessed < s.promptTokens) return `prompt ${formatCount(s.promptTokensProcessed)} / ${formatCount(s.promptTokens)}`;
  return 'generating';
}

/** Each loaded model's sequence slots: the request in each, its progress, and the KV cache it holds. */
export function SlotTable({ models }: { models: ModelSlots[] }) {
  if (!models.length) return <p className="muted">no model loaded</p>;
  const engines = new Set(models.map((m) => m.engineId)).size;
  return (
    <div data-testid="slots">
      {models.map((m) => (
        <div key={`${m.engineId} ${m.model}`} className="card">
          <strong>{m.model}</strong>
          {engines > 1 ? <span className="muted"> ({m.engineId})</span> : null}{' '}
          <span className="muted">
            {m.slots.filter((s) => s.processing).length} of {m.slots.length} slots busy
          </span>
          <table>
            <thead>
              <tr>
                <th>slot</th>
                <th>state</th>
                <th>request</th>
                <th>generated</th>
                <th>left</th>
                <th>KV cache</th>
                <th>temperature</th>
              </tr>
            </thead>
            <tbody>
              {m.slots.map((s) => (
                <tr key={s.id}>
                  <td>{s.id}</td>
                  <td className={s.processing ? 'ok' : 'muted'}>{slotState(s)}</td>
                  <td>{s.requestId || '—'}</td>
                  <td>{s.processing ? formatCount(s.decodedTokens) : '—'}</td>
                  <td>{s.processing ? formatCount(s.remainingTokens) : '—'}</td>
                  <td>
                    {formatCount(s.cachedTokens)} / {formatCount(s.nCtx)} tokens
                  </td>
                  <td>{s.sampling ? s.sampling.temperature.toFixed(2) : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ))}
    </div>
  );
}

/** Which loaded model the heatmap shows; hidden while only one model reports. */
export function HeatmapModelPicker({ sources, value, onChange }: { sources: ExpertSource[]; value: ExpertSource | null; onChange: (v: ExpertSource) => void }) {
  if (sources.length < 2) return null;
  const engines = new Set(sources.map((x) => x.engineId)).size;
  const selected = value ? sources.findIndex((x) => x.engineId === value.engineId && x.model === value.model) : -1;
  return (
    <label className="muted">
      model{' '}
      <select value={Math.max(0, selected)} onChange={(e) => onChange(sources[Number(e.target.value)])} aria-label="heatmap model">
        {sources.map((x, i) => (
          <option key={`${x.engineId} ${x.model}`} value={i}>
            {x.model}
            {engines > 1 ? ` (${x.engineId})` : ''}
          </option>
        ))}
      </select>
    </label>
  );
}

export function TelemetryView() {
  const [windowSeconds, setWindowSeconds] = useState(60);
  const [heatWindow, setHeatWindow] = useState(60);
  // The heatmap's model (null = the first that reports one).
  const [heatSource, setHeatSource] = useState<ExpertSource | null>(null);
  const hist = usePoll(() => api.telemetry.history.query({ seconds: windowSeconds }), 1000, [windowSeconds]);
  const experts = usePoll<ExpertWindow | null>(
    () => api.telemetry.experts.query({ windowSeconds: heatWindow, ...(heatSource ?? {}) }),
    1000,
    [heatWindow, heatSource],
  );
  const sources = experts.data?.sources ?? [];
  // The chosen model was unloaded: fall back to the first one.
  useEffect(() => {
    if (heatSource && experts.data === null) setHeatSource(null);
  }, [heatSource, experts.data]);
  const queue = usePoll(() => api.requests.queue.query(), 2000);
  const slots = usePoll(() => api.telemetry.slots.query(), 1000);
  const points = hist.data?.points ?? [];
  const last = points.at(-1);
  const heatLabel = HEATMAP_WINDOWS.find((w) => w.seconds === heatWindow)?.label ?? `${heatWindow} s`;
  return (
    <div>
      <div className="row spread">
        <h1>Telemetry</h1>
        <label className="muted">
          charts over{' '}
          <select value={windowSeconds} onChange={(e) => setWindowSeconds(Number(e.target.value))} aria-label="chart window">
            <option value={30}>30 s</option>
            <option value={60}>60 s</option>
            <option value={300}>5 min</option>
          </select>
        </label>
      </div>
      {hist.error && <p className="error">{hist.error}</p>}
      {hist.data?.status.error && <p className="error">telemetry: {hist.data.status.error}</p>}
      <p className="muted" data-testid="telemetry-summary">
        {last
          ? `${last.models.join(', ') || 'no model loaded'} · ${last.engines} engine(s) · ${formatCount(last.tokensGenerated)} tokens generated · ${formatBytes(last.bytesRead)} read from storage` +
            last.speculative
              .map((s) => ` · ${s.model} speculative (${s.mode}): ${formatCount(s.accepted)} of ${formatCount(s.drafted)} drafted tokens accepted, ${s.tokensPerPass.toFixed(2)} tokens per pass`)
              .join('')
          : 'waiting for the first sample…'}
      </p>
      {queue.data && <EngineStrip queue={queue.data} />}
      <TelemetryCharts points={points} windowSeconds={windowSeconds} now={last?.t} />
      <section id="slots" style={{ marginTop: 24 }}>
        <h2>Slots</h2>
        {slots.error && <p className="error">{slots.error}</p>}
        {slots.data && <SlotTable models={slots.data} />}
      </section>
      <section id="heatmap" style={{ marginTop: 24 }}>
        <div className="row spread">
          <h2>Expert heatmap{experts.data?.model ? ` · ${experts.data.model}` : ''}</h2>
          <HeatmapModelPicker sources={sources} value={experts.data ?? heatSource} onChange={setHeatSource} />
          <label className="muted">
            window{' '}
            <select value={heatWindow} onChange={(e) => setHeatWindow(Number(e.target.value))} aria-label="heatmap window">
              {HEATMAP_WINDOWS.map((w) => (
                <option key={w.seconds} value={w.seconds}>
                  {w.label}
                </option>
              ))}
            </select>
          </label>
        </div>
        {experts.error && <p className="error">{experts.error}</p>}
        <ExpertHeatmap layers={experts.data?.layers ?? []} max={experts.data?.max ?? 0} windowLabel={heatLabel} />
      </section>
    </div>
  );
}
