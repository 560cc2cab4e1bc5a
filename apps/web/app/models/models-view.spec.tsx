import { renderToString } from 'react-dom/server';
import type { ModelView } from '@kailstream/api';

import { LoraScales, ModelDetails, PlanView, PullList } from './models-view';

const model: ModelView = {
  id: 'tiny',
  path: '/m/tiny.gguf',
  architecture: 'qwen3moe',
  parameterCount: 1_500_000,
  fileBytes: 6 * 1024 * 1024,
  contextLength: 512,
  expertCount: 8,
  expertUsedCount: 2,
  layerCount: 4,
  loaded: false,
  embeddingOnly: false,
  expiresAtUnixMs: 0,
  kvType: '',
  kvTypeV: '',
  loraAdapters: [],
  residency: { residentBytes: 1024 * 1024, expertBytes: 5 * 1024 * 1024, kvBytes: 0, ramExpertCacheBytes: 0, vramExpertCacheBytes: 0 },
  fileType: 'Q4_K_M',
  tensorTypes: [
    { type: 'Q4_K', bytes: 5 * 1024 * 1024 },
    { type: 'F32', bytes: 1024 * 1024 },
  ],
};

describe('models page parts', () => {
  it('shows architecture, experts, quant types, sizes and bytes per token', () => {
    const html = renderToString(<ModelDetails m={model} coldBytesPerToken={3 * 1024} />);
    expect(html).toContain('qwen3moe');
    expect(html).toContain('2 of 8 per token');
    expect(html).toContain('Q4_K 5.00 MiB · F32 1.00 MiB');
    expect(html).toContain('<dt>file type</dt><dd>Q4_K_M</dd>');
    expect(renderToString(<ModelDetails m={{ ...model, fileType: '' }} />)).not.toContain('file type');
    expect(html).toContain('6.00 MiB');
    expect(html).toContain('3.00 KiB');
    // A model that stays loaded says nothing of unloading; one with a keep-alive says when.
    expect(html).not.toContain('unloads when idle');
    expect(html).not.toContain('KV cache');
    const kept = renderToString(<ModelDetails m={{ ...model, loaded: true, kvType: 'q8_0', expiresAtUnixMs: Date.UTC(2026, 11, 2, 5, 7, 30) }} />);
    expect(kept).toContain('<dt>KV cache</dt><dd>q8_0</dd>');
    const split = renderToString(<ModelDetails m={{ ...model, loaded: true, kvType: 'q8_0', kvTypeV: 'q4_0' }} />);
    expect(split).toContain('<dt>KV cache</dt><dd>K q8_0, V q4_0</dd>');
    expect(split).not.toContain('LoRA');
    const tuned = renderToString(<ModelDetails m={{ ...model, loaded: true, loraAdapters: [{ path: '/models/style.gguf', scale: 0.5 }] }} />);
    expect(tuned).toContain('<dt>LoRA</dt><dd>style.gguf × 0.5</dd>');
    // The scales are editable on a loaded model with adapters, and nothing shows without.
    const form = renderToString(<LoraScales m={{ id: 'm', loraAdapters: [{ path: '/models/style.gguf', scale: 0.5 }] }} onSaved={() => undefined} />);
    expect(form).toContain('aria-label="scale of LoRA adapter 0"');
    expect(form).toContain('value="0.5"');
    expect(form).toContain('Set LoRA scales');
    expect(renderToString(<LoraScales m={{ id: 'm', loraAdapters: [] }} onSaved={() => undefined} />)).toBe('');
    const encoder = renderToString(<ModelDetails m={{ ...model, architecture: 'nomic-bert', expertCount: 0, embeddingOnly: true }} />);
    expect(encoder).toContain('nomic-bert (embedding model: /v1/embeddings, no text)');
    expect(html).not.toContain('embedding model');
    expect(kept).toContain('unloads when idle at');
    expect(kept).toContain('2026-12-02 05:07:30 UTC');
  });

  it('draws the plan per tier and says when it does not fit', () => {
    const plan = {
      residency: { residentBytes: 2048, expertBytes: 8192, kvBytes: 1024, ramExpertCacheBytes: 4096, vramExpertCacheBytes: 0 },
      cacheExpertsPerLayer: 3,
      coldBytesPerToken: 512,
      fits: false,
      detail: 'short by 1 KiB',
      plan: null,
    };
    const html = renderToString(<PlanView plan={plan} />);
    expect(html).toContain('does not fit<!-- -->: short by 1 KiB');
    for (const s of ['2.00 KiB', '8.00 KiB', '1.00 KiB', '4.00 KiB', '0 B']) expect(html).toContain(s);
    expect(html).toContain('3<!-- --> experts per layer cached in RAM');
    // The largest row (experts in the file) spans the full bar.
    expect(html).toContain('width:100%');
  });

  it('shows each pull: its file and progress, what it pulled, or why it failed', () => {
    const job = { ref: 'team/moe-GGUF:Q4_K_M', file: 'moe-Q4_K_M-00001-of-00002.gguf', done: 512 * 1024 * 1024, total: 2048 * 1024 * 1024, files: 2, filesDone: 0, id: '', error: '', startedAtUnixMs: 1 };
    const html = renderToString(
      <PullList
        jobs={[
          { ...job, status: 'pulling' },
          { ...job, ref: 'a/b', status: 'done', id: 'moe-Q4_K_M', file: 'moe-Q4_K_M.gguf', startedAtUnixMs: 2 },
          { ...job, ref: 'c/d:IQ1_S', status: 'failed', error: "no GGUF model file for 'IQ1_S'", startedAtUnixMs: 3 },
          { ...job, ref: 'e/f', status: 'pulling', file: '', done: 0, total: 0, startedAtUnixMs: 4 },
        ]}
      />,
    );
    expect(html).toContain('moe-Q4_K_M-00001-of-00002.gguf (1 of 2): <!-- -->25% · 512 MiB of 2.00 GiB');
    expect(html).toContain('pulled as <!-- -->moe-Q4_K_M<!-- --> (<!-- -->moe-Q4_K_M.gguf<!-- -->)');
    expect(html).toContain('<span class="error">no GGUF model file for &#x27;IQ1_S&#x27;</span>');
    expect(html).toContain('reading the repository');
    expect(renderToString(<PullList jobs={[]} />)).toBe('');
  });
});
