'use client';
import { useRef, useState, type FormEvent } from 'react';

import { api, chatStream } from '../_lib/api';
import { formatMs } from '../_lib/format';
import { SseParser, streamTiming, type ChatChunk, type StreamTiming } from '../_lib/sse';
import { usePoll } from '../_lib/use-poll';

interface Msg {
  role: 'system' | 'user' | 'assistant';
  content: string;
  /** A reasoning model's thinking (the API's reasoning_content), shown folded above the answer. */
  reasoning?: string;
  timing?: StreamTiming;
}

export interface Sampling {
  temperature: number;
  topP: number;
  maxTokens: number;
  /** Empty = random. */
  seed: string;
  /** The answer's form: free text, one JSON object, or a GBNF grammar's text. */
  format: 'text' | 'json' | 'grammar';
  grammar: string;
}

export const DEFAULT_SAMPLING: Sampling = { temperature: 0.7, topP: 0.95, maxTokens: 256, seed: '', format: 'text', grammar: 'root ::= ("yes" | "no") ", because " [^.\n]+ "."' };

/** The OpenAI request body the playground sends. */
export function chatRequest(model: string, messages: Msg[], s: Sampling) {
  const body: Record<string, unknown> = {
    model,
    messages: messages.map(({ role, content }) => ({ role, content })),
    temperature: s.temperature,
    top_p: s.topP,
    max_tokens: s.maxTokens,
  };
  if (s.seed.trim() !== '') body.seed = Number(s.seed);
  if (s.format === 'json') body.response_format = { type: 'json_object' };
  // (llama-server's field, which the API takes on its OpenAI routes too.)
  if (s.format === 'grammar' && s.grammar.trim() !== '') body.grammar = s.grammar;
  return body;
}

export function TimingLine({ t }: { t: StreamTiming }) {
  return (
    <div className="muted timing" data-testid="timing">
      TTFT {formatMs(t.ttftMs)} · {t.tokensPerSecond === null ? '–' : t.tokensPerSecond.toFixed(1)} tokens/s · {t.completionTokens} tokens in {formatMs(t.totalMs)}
    </div>
  );
}

export function ChatView() {
  // (Embedding models generate no text: not offered here.)
  const models = usePoll(async () => (await api.models.loaded.query()).filter((m) => !m.embeddingOnly), 5000);
  const [model, setModel] = useState('');
  const [sampling, setSampling] = useState<Sampling>(DEFAULT_SAMPLING);
  const [system, setSystem] = useState('');
  const [messages, setMessages] = useState<Msg[]>([]);
  const [input, setInput] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const abort = useRef<AbortController | null>(null);
  const chosen = model || models.data?.[0]?.id || '';

  const send = async (e: FormEvent) => {
    e.preventDefault();
    if (!input.trim() || !chosen) return;
    const history: Msg[] = [...messages, { role: 'user', content: input }];
    const prompt: Msg[] = system.trim() ? [{ role: 'system', content: system }, ...history] : history;
    setMessages([...history, { role: 'assistant', content: '' }]);
    setInput('');
    setError(null);
    setBusy(true);
    const ac = new AbortController();
    abort.current = ac;
    const start = performance.now();
    let first: number | null = null;
    let text = '';
    let reasoning = '';
    let tokens = 0;
    let usageTokens: number | null = null;
    const update = (timing?: StreamTiming) => setMessages([...history, { role: 'assistant', content: text, reasoning: reasoning || undefined, timing }]);
    try {
      const res = await chatStream(chatRequest(chosen, prompt, sampling), ac.signal);
      if (!res.ok || !res.body) {
        const b = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
        throw new Error(b?.error?.message ?? `the API answered ${res.status}`);
      }
      const parser = new SseParser();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const ev of parser.push(value) as ChatChunk[]) {
          if (ev.error) throw new Error(ev.error.message);
          const r = ev.choices?.[0]?.delta?.reasoning_content;
          if (r) {
            if (first === null) first = performance.now();
            reasoning += r;
            tokens++;
          }
          const d = ev.choices?.[0]?.delta?.content;
          if (d) {
            if (first === null) first = performance.now();
            text += d;
            tokens++;
          }
          if (ev.usage) usageTokens = ev.usage.completion_tokens;
        }
        update(streamTiming(start, first, performance.now(), usageTokens ?? tokens));
      }
      update(streamTiming(start, first, performance.now(), usageTokens ?? tokens));
    } catch (err) {
      if ((err as Error).name !== 'AbortError') setError((err as Error).message);
    } finally {
      setBusy(false);
      abort.current = null;
    }
  };

  const num = (k: keyof Sampling) => (e: { target: { value: string } }) => setSampling({ ...sampling, [k]: k === 'seed' ? e.target.value : Number(e.target.value) });

  return (
    <div className="chatgrid">
      <div>
        <h1>Chat</h1>
        <div className="messages" data-testid="messages">
          {messages.map((m, i) => (
            <div key={i} className={`msg ${m.role}`} data-role={m.role}>
              <div className="who">{m.role}</div>
              {m.reasoning && (
                <details className="reasoning muted" data-testid="reasoning">
                  <summary>reasoning</summary>
                  <div className="text">{m.reasoning}</div>
                </details>
              )}
              <div className="text">{m.content || (busy && i === messages.length - 1 ? '…' : '')}</div>
              {m.timing && <TimingLine t={m.timing} />}
            </div>
          ))}
          {!messages.length && <p className="muted">Pick a loaded model and say something.</p>}
        </div>
        <form onSubmit={send} className="row">
          <textarea value={input} onChange={(e) => setInput(e.target.value)} rows={2} style={{ flex: 1 }} placeholder="Message" aria-label="message"
            onKeyDown={(e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); (e.currentTarget.form as HTMLFormElement).requestSubmit(); } }} />
          {busy ? (
            <button type="button" onClick={() => abort.current?.abort()}>
              Stop
            </button>
          ) : (
            <button type="submit" disabled={!chosen || !input.trim()}>
              Send
            </button>
          )}
        </form>
        {error && <p className="error">{error}</p>}
      </div>
      <aside className="card">
        <h3>Settings</h3>
        <label>
          model
          <select value={chosen} onChange={(e) => setModel(e.target.value)} aria-label="model">
            {!models.data?.length && <option value="">no model loaded</option>}
            {models.data?.map((m) => (
              <option key={m.id} value={m.id}>
                {m.id}
              </option>
            ))}
          </select>
        </label>
        <label>
          temperature {sampling.temperature}
          <input type="range" min={0} max={2} step={0.05} value={sampling.temperature} onChange={num('temperature')} aria-label="temperature" />
        </label>
        <label>
          top_p {sampling.topP}
          <input type="range" min={0.05} max={1} step={0.05} value={sampling.topP} onChange={num('topP')} aria-label="top_p" />
        </label>
        <label>
          max tokens <input type="number" min={1} max={32768} value={sampling.maxTokens} onChange={num('maxTokens')} aria-label="max tokens" />
        </label>
        <label>
          seed <input type="text" inputMode="numeric" placeholder="random" value={sampling.seed} onChange={num('seed')} aria-label="seed" />
        </label>
        <label>
          answer
          <select value={sampling.format} onChange={(e) => setSampling({ ...sampling, format: e.target.value as Sampling['format'] })} aria-label="answer format">
            <option value="text">free text</option>
            <option value="json">a JSON object</option>
            <option value="grammar">a GBNF grammar</option>
          </select>
        </label>
        {sampling.format === 'grammar' && (
          <label>
            grammar
            <textarea rows={4} value={sampling.grammar} onChange={(e) => setSampling({ ...sampling, grammar: e.target.value })} aria-label="grammar" spellCheck={false} />
          </label>
        )}
        <label>
          system prompt
          <textarea rows={3} value={system} onChange={(e) => setSystem(e.target.value)} aria-label="system prompt" />
        </label>
        <button type="button" onClick={() => setMessages([])} disabled={busy}>
          Clear
        </button>
      </aside>
    </div>
  );
}
