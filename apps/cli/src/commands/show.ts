// `kail show NAME`, as `ollama show`: a served model as the API's /api/show describes it (model,
// capabilities, parameters, system prompt, license), or one part alone (--modelfile, --parameters,
// --system, --template, --license), e.g. to start a Modelfile for `kail create` from it.
import type { Command } from 'commander';

import { dataDir } from '../paths';
import { apiBaseUrl } from '../serve-state';
import { apiError, apiFetch, type ApiTarget } from './api-client';

/** The part of /api/show's answer this prints. */
export interface ShowResponse {
  modelfile: string;
  parameters: string;
  template: string;
  system: string;
  license: string;
  details: { format?: string; family?: string; parameter_size?: string; quantization_level?: string };
  model_info: Record<string, unknown>;
  capabilities?: string[];
  messages?: { role: string; content: string }[];
}

export async function showModel(api: ApiTarget, name: string, verbose = false): Promise<ShowResponse> {
  const r = await apiFetch(api, '/api/show', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: name, verbose }) });
  if (!r.ok) throw await apiError(r, `showing '${name}'`);
  return (await r.json()) as ShowResponse;
}

/** Ollama's layout: sections of indented two-column rows. */
export function formatShow(s: ShowResponse, verbose = false): string {
  const arch = String(s.model_info['general.architecture'] ?? s.details.family ?? '');
  const info = (k: string) => s.model_info[`${arch}.${k}`];
  const experts = info('expert_count');
  const model: [string, unknown][] = [
    ['architecture', arch],
    ['parameters', s.details.parameter_size],
    ['context length', info('context_length')],
    ['layers', info('block_count')],
    ['experts', experts ? `${String(info('expert_used_count'))} of ${String(experts)} per token` : undefined],
    ['quantization', s.details.quantization_level],
  ];
  const rows = (r: [string, unknown][]) => {
    const kept = r.filter(([, v]) => v !== undefined && v !== '');
    const w = Math.max(...kept.map(([k]) => k.length)) + 4;
    return kept.map(([k, v]) => `    ${k.padEnd(w)}${String(v)}`);
  };
  const indent = (text: string) => text.trimEnd().split('\n').map((l) => `    ${l}`);
  const out = ['  Model', ...rows(model), ''];
  if (s.capabilities?.length) out.push('  Capabilities', ...s.capabilities.map((c) => `    ${c}`), '');
  if (s.parameters.trim()) out.push('  Parameters', ...indent(s.parameters.replace(/^(\S+)\s+/gm, (_m, k: string) => `${k.padEnd(16)}`)), '');
  if (s.system.trim()) out.push('  System', ...indent(s.system), '');
  if (s.messages?.length) out.push('  Messages', ...s.messages.flatMap((m) => indent(`${m.role}: ${m.content}`)), '');
  if (s.license.trim()) out.push('  License', ...indent(s.license.split('\n').slice(0, verbose ? undefined : 2).join('\n')), '');
  if (verbose) {
    const other = Object.entries(s.model_info).filter(([k]) => k !== 'general.architecture');
    if (other.length) out.push('  Metadata', ...rows(other), '');
  }
  return out.join('\n');
}

const PARTS = ['modelfile', 'parameters', 'system', 'template', 'license'] as const;

interface ShowCliOpts {
  modelfile?: boolean;
  parameters?: boolean;
  system?: boolean;
  template?: boolean;
  license?: boolean;
  verbose?: boolean;
  json?: boolean;
  url?: string;
  apiKey?: string;
  dataDir?: string;
}

export function registerShow(program: Command): void {
  program
    .command('show')
    .argument('<name>', 'a model the server serves or has in its models directory')
    .description("describe a model as ollama show does, through the running server's API: architecture, parameters, context, experts, quantization, capabilities, its Modelfile settings; or one part alone")
    .option('--modelfile', 'print its Modelfile (a start for kail create -f)')
    .option('--parameters', 'print its parameters')
    .option('--system', 'print its system prompt')
    .option('--template', 'print its chat template')
    .option('--license', 'print its license')
    .option('-v, --verbose', 'also every metadata row and the whole license')
    .option('--json', "print the API's answer as JSON")
    .option('--url <url>', 'API base URL (default: $KAIL_API_URL, else the server running on the data directory, else http://127.0.0.1:8080)')
    .option('--api-key <key>', 'API key (default: $KAIL_API_KEY)')
    .option('--data-dir <dir>', 'data directory (to find the running server)')
    .action(async (name: string, o: ShowCliOpts) => {
      const parts = PARTS.filter((p) => o[p]);
      if (parts.length > 1) throw new Error(`give one of ${parts.map((p) => `--${p}`).join(', ')}`);
      const s = await showModel({ url: apiBaseUrl(o.url, dataDir(o.dataDir)), apiKey: o.apiKey ?? process.env.KAIL_API_KEY }, name, o.verbose);
      const text = o.json ? JSON.stringify(s, null, 2) : parts.length ? s[parts[0]] : formatShow(s, o.verbose);
      process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
    });
}
