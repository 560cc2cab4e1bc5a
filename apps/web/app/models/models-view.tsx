'use client';
import { useState } from 'react';
import type { ModelView } from '@kailstream/api';

import { api } from '../_lib/api';
import { formatBytes, formatCount } from '../_lib/format';
import { usePoll } from '../_lib/use-poll';
import { useAction } from '../_lib/use-action';

type Plan = Awaited<ReturnType<typeof api.models.plan.query>>;
type FileRow = Awaited<ReturnType<typeof api.models.files.query>>['files'][number];

/** Architecture, experts, quant types and sizes of one model. */
export function ModelDetails({ m, coldBytesPerToken }: { m: ModelView; coldBytesPerToken?: number }) {
  const total = m.tensorTypes.reduce((a, t) => a + t.bytes, 0) || 1;
  return (
    <dl className="details" data-testid={`details-${m.id}`}>
      <dt>architecture</dt>
      <dd>{m.embeddingOnly ? `${m.architecture} (embedding model: /v1/embeddings, no text)` : m.architecture}</dd>
      <dt>parameters</dt>
      <dd>{formatCount(m.parameterCount)}</dd>
      <dt>layers</dt>
      <dd>{m.layerCount}</dd>
      <dt>experts</dt>
      <dd>{m.expertCount ? `${m.expertUsedCount} of ${m.expertCount} per token` : 'dense'}</dd>
      <dt>context</dt>
      <dd>{m.contextLength}</dd>
      {m.kvType && (
        <>
          <dt>KV cache</dt>
          <dd>{m.kvTypeV && m.kvTypeV !== m.kvType ? `K ${m.kvType}, V ${m.kvTypeV}` : m.kvType}</dd>
        </>
      )}
      {m.loraAdapters.length > 0 && (
        <>
          <dt>LoRA</dt>
          <dd>{m.loraAdapters.map((l) => `${l.path.split('/').pop()} × ${l.scale}`).join(', ')}</dd>
        </>
      )}
      <dt>file</dt>
      <dd>{formatBytes(m.fileBytes)}</dd>
      {m.expiresAtUnixMs > 0 && (
        <>
          <dt>unloads when idle at</dt>
          <dd title="the keep-alive: kail serve --keep-alive, or a request's keep_alive">{`${new Date(m.expiresAtUnixMs).toISOString().slice(0, 19).replace('T', ' ')} UTC`}</dd>
        </>
      )}
      {m.residency && (
        <>
          <dt>resident / experts</dt>
          <dd>
            {formatBytes(m.residency.residentBytes)} / {formatBytes(m.residency.expertBytes)}
          </dd>
        </>
      )}
      {coldBytesPerToken !== undefined && (
        <>
          <dt>bytes per token (cold cache)</dt>
          <dd>{formatBytes(coldBytesPerToken)}</dd>
        </>
      )}
      {m.fileType && (
        <>
          <dt>file type</dt>
          <dd>{m.fileType}</dd>
        </>
      )}
      <dt>quant types</dt>
      <dd>
        <div className="stackbar" title="bytes per tensor type">
          {m.tensorTypes.map((t, i) => (
            <span key={t.type} style={{ width: `${(t.bytes / total) * 100}%`, background: `hsl(${(i * 67) % 360} 45% 45%)` }} />
          ))}
        </div>
        {m.tensorTypes.map((t) => `${t.type} ${formatBytes(t.bytes)}`).join(' · ')}
      </dd>
    </dl>
  );
}

/** The residency plan as a bar per tier: what sits where before anything is loaded. */
export function PlanView({ plan }: { plan: Plan }) {
  const r = plan.residency;
  if (!r) return <p className="muted">the engine returned no residency</p>;
  const rows = [
    { label: 'resident weights (RAM)', bytes: r.residentBytes, color: '#5ab0f0' },
    { label: 'RAM expert cache', bytes: r.ramExpertCacheBytes, color: '#88c0d0' },
    { label: 'VRAM expert cache', bytes: r.vramExpertCacheBytes, color: '#b48ead' },
    { label: 'KV cache', bytes: r.kvBytes, color: '#a3be8c' },
    { label: 'routed experts in the file', bytes: r.expertBytes, color: '#4c566a' },
  ];
  const max = Math.max(1, ...rows.map((x) => x.bytes));
  return (
    <div className="plan" data-testid="plan">
      <p className={plan.fits ? 'ok' : 'error'}>
        {plan.fits ? 'fits the budget' : 'does not fit'}
        {plan.detail ? `: ${plan.detail}` : ''}
      </p>
      {rows.map((x) => (
        <div key={x.label} className="planrow">
          <span className="planlabel">{x.label}</span>
          <span className="planbar">
            <span style={{ width: `${(x.bytes / max) * 100}%`, background: x.color }} />
          </span>
          <span className="planval">{formatBytes(x.bytes)}</span>
        </div>
      ))}
      <p className="muted">
        {plan.cacheExpertsPerLayer} experts per layer cached in RAM; {formatBytes(plan.coldBytesPerToken)} read per token at a cold cache
      </p>
    </div>
  );
}

function FileCard({ f, onLoaded }: { f: FileRow; onLoaded: () => void }) {
  const [ctx, setCtx] = useState(f.info?.contextLength ? Math.min(4096, f.info.contextLength) : 4096);
  const [ramMiB, setRamMiB] = useState(0);
  const [plan, setPlan] = useState<Plan | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const { error, run } = useAction();
  const input = () => ({ path: f.path, contextLength: ctx, ramBudgetBytes: Math.round(ramMiB * 1024 * 1024) });
  const busyWith = async (what: string, fn: () => Promise<void>) => {
    setBusy(what);
    await run(fn);
    setBusy(null);
  };
  const doPlan = () => busyWith('planning…', async () => setPlan(await api.models.plan.query(input())));
  const doLoad = () =>
    busyWith('loading…', async () => {
      await api.models.load.mutate({ ...input(), id: f.id });
      setPlan(null);
      onLoaded();
    });
  return (
    <div className="card" data-testid={`file-${f.id}`}>
      <div className="row spread">
        <h3>{f.id}</h3>
        <span className="muted">{f.sizeBytes ? formatBytes(f.sizeBytes) : f.path}</span>
      </div>
      {f.error ? <p className="error">{f.error}</p> : f.info && <ModelDetails m={f.info} coldBytesPerToken={plan?.coldBytesPerToken} />}
      {!f.error && !f.info?.loaded && (
        <div className="row">
          <label>
            context <input type="number" min={0} value={ctx} onChange={(e) => setCtx(Number(e.target.value))} style={{ width: 80 }} aria-label="context length" />
          </label>
          <label>
            RAM budget MiB (0 = engine default){' '}
            <input type="number" min={0} value={ramMiB} onChange={(e) => setRamMiB(Number(e.target.value))} style={{ width: 90 }} aria-label="RAM budget" />
          </label>
          <button onClick={doPlan} disabled={!!busy}>
            Plan
          </button>
          <button onClick={doLoad} disabled={!!busy || !plan} title={plan ? 'load with this plan' : 'plan first'}>
            Load
          </button>
          {busy && <span className="muted">{busy}</span>}
        </div>
      )}
      {f.info?.loaded && <p className="ok">loaded</p>}
      {plan && <PlanView plan={plan} />}
      {error && <p className="error">{error}</p>}
    </div>
  );
}

/** A GGUF file anywhere the engine can read it (outside the models directory too). */
function PathCard({ onLoaded }: { onLoaded: () => void }) {
  const [text, setText] = useState('');
  const [path, setPath] = useState('');
  const id = path.split('/').pop()!.replace(/\.gguf$/i, '').replace(/[^A-Za-z0-9._:-]/g, '-');
  return (
    <div>
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          setPath(text.trim());
        }}
      >
        <input value={text} onChange={(e) => setText(e.target.value)} placeholder="/path/to/model.gguf on the engine's machine" style={{ flex: 1, minWidth: 320 }} aria-label="model path" />
        <button type="submit" disabled={!text.trim()}>
          Open
        </button>
      </form>
      {path && <FileCard key={path} f={{ path, id, sizeBytes: 0, architecture: '', error: '', info: null }} onLoaded={onLoaded} />}
    </div>
  );
}

type PullJob = Awaited<ReturnType<typeof api.models.pulls.query>>[number];

/** The console's pulls: each with its file, progress or end (pure: the page polls them). */
export function PullList({ jobs }: { jobs: readonly PullJob[] }) {
  if (!jobs.length) return null;
  return (
    <ul className="pulls" data-testid="pulls">
      {jobs.map((j) => (
        <li key={`${j.ref}-${j.startedAtUnixMs}`}>
          <strong>{j.ref}</strong>{' '}
          {j.status === 'pulling' && (
            <span>
              {j.file ? `${j.file}${j.files > 1 ? ` (${j.filesDone + 1} of ${j.files})` : ''}: ` : 'reading the repository… '}
              {j.total > 0 ? `${((100 * j.done) / j.total).toFixed(0)}% · ${formatBytes(j.done)} of ${formatBytes(j.total)}` : j.file ? formatBytes(j.done) : ''}
            </span>
          )}
          {j.status === 'done' && <span>pulled as {j.id} ({j.file}): load it from the files below</span>}
          {j.status === 'failed' && <span className="error">{j.error}</span>}
        </li>
      ))}
    </ul>
  );
}

/** Starts a pull of a Hugging Face repository's GGUF into the models directory (kail pull's). */
function PullForm({ onStarted }: { onStarted: () => void }) {
  const [ref, setRef] = useState('');
  const { error, submit } = useAction();
  const start = async () => {
    await api.models.pull.mutate({ ref: ref.trim() });
    setRef('');
    onStarted();
  };
  return (
    <form className="row" onSubmit={submit(start)}>
      <input value={ref} onChange={(e) => setRef(e.target.value)} placeholder="USER/REPO[:QUANT], e.g. Qwen/Qwen3-30B-A3B-GGUF:Q4_K_M" style={{ flex: 1, minWidth: 320 }} aria-label="Hugging Face repository" />
      <button type="submit" disabled={!ref.trim()}>
        Pull
      </button>
      {error && <span className="error">{error}</span>}
    </form>
  );
}

/** A loaded model's LoRA scales, editable (they become the scales of requests that give none). */
export function LoraScales({ m, onSaved }: { m: { id: string; loraAdapters: { path: string; scale: number }[] }; onSaved: () => void }) {
  const [scales, setScales] = useState(() => m.loraAdapters.map((l) => String(l.scale)));
  const { error, submit } = useAction();
  if (!m.loraAdapters.length) return null;
  const valid = scales.every((x) => x.trim() !== '' && Number.isFinite(Number(x)));
  const save = async () => {
    await api.models.setLora.mutate({ id: m.id, lora: scales.map((x, id) => ({ id, scale: Number(x) })) });
    onSaved();
  };
  return (
    <form className="row" aria-label={`LoRA scales of ${m.id}`} onSubmit={submit(save)}>
      {m.loraAdapters.map((l, i) => (
        <label key={i}>
          {l.path.split('/').pop()}{' '}
          <input
            value={scales[i]}
            onChange={(e) => setScales(scales.map((x, j) => (j === i ? e.target.value : x)))}
            inputMode="decimal"
            size={5}
            aria-label={`scale of LoRA adapter ${i}`}
          />
        </label>
      ))}
      <button type="submit" disabled={!valid}>
        Set LoRA scales
      </button>
      {error && <span className="error">{error}</span>}
    </form>
  );
}

export function ModelsView() {
  const files = usePoll(() => api.models.files.query(), 5000);
  const loaded = usePoll(() => api.models.loaded.query(), 5000);
  const pulls = usePoll(() => api.models.pulls.query(), 1000);
  const { error, run } = useAction();
  const refresh = () => {
    files.refresh();
    loaded.refresh();
  };
  const unload = (id: string) =>
    run(async () => {
      await api.models.unload.mutate({ id });
      refresh();
    });
  return (
    <div>
      <h1>Models</h1>
      <h2>Loaded</h2>
      {loaded.error && <p className="error">{loaded.error}</p>}
      {error && <p className="error">{error}</p>}
      {loaded.data && !loaded.data.length && <p className="muted">No model is loaded.</p>}
      <div data-testid="loaded">
        {loaded.data?.map((m) => (
          <div className="card" key={m.id} data-testid={`loaded-${m.id}`}>
            <div className="row spread">
              <h3>{m.id}</h3>
              <button onClick={() => unload(m.id)}>Unload</button>
            </div>
            <ModelDetails m={m} />
            <LoraScales m={m} onSaved={refresh} />
          </div>
        ))}
      </div>
      <h2>Files{files.data?.modelsDir ? ` in ${files.data.modelsDir}` : ''}</h2>
      {files.error && <p className="error">{files.error}</p>}
      {files.data && !files.data.files.length && <p className="muted">No .gguf files in the models directory.</p>}
      {files.data?.files.map((f) => <FileCard key={f.path} f={f} onLoaded={refresh} />)}
      <h2>Another file</h2>
      <PathCard onLoaded={refresh} />
      <h2>Pull from Hugging Face</h2>
      <PullForm onStarted={() => pulls.refresh()} />
      <PullList jobs={pulls.data ?? []} />
    </div>
  );
}
