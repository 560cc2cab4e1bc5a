#!/usr/bin/env node
// The engine service process:
//   node packages/engine/dist/service/main.js --port 0 [--host H] [--models-dir DIR] [--model [ID=]FILE ...]
//     [--ctx N] [--seqs N] [--threads N] [--ram BYTES|N%] [--vram BYTES|N%] [--cache-type f16|q8_0|q4_0|… (KV_TYPES)] [--max-stall-ms MS] [--ctx-checkpoints N] [--data-dir DIR (its profile.json)] [--auth-token T]
//     [--pooling none|mean|cls|last] [--mmap]
// Prints one JSON line {"service":"engine","address":...} once listening, for supervisors.
import { parseArgs } from 'node:util';

import { AUTH_TOKEN_ENV, engine } from '@kailstream/proto';

import { formatBytes } from '../model/byte-size';
import { KV_TYPES, kvTypesFromFlags, parseLoraFlags, parseRamBudget, parseVramBudget, type KvType } from '../model/model';
import { parseControlVectorFlags } from '../model/control-vector';
import { describeKvOverride, parseKvOverrides } from '../model/kv-override';
import { ROPE_FLAGS, describeRopeOptions, parseRopeFlags } from '../model/rope-options';
import { hardwareProfilePath, readHardwareProfile } from '../model/hardware-profile';
import { parseChatTemplateKwargsFlag, readChatTemplateFlags } from '../tokenizer/chat-template';
import { LocalModelHost } from './model-host';
import { startEngineServer } from './engine-service';

function int(name: string, v: string, min: number): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}, got '${v}'`);
  return n;
}

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      model: { type: 'string', multiple: true, default: [] },
      'models-dir': { type: 'string' },
      ctx: { type: 'string', default: '4096' },
      threads: { type: 'string', default: '0' },
      seqs: { type: 'string', default: '8' },
      ram: { type: 'string' },
      // The VRAM tier's budget for a streaming model (needs --ram or the profile's budget, and a CUDA device).
      vram: { type: 'string' },
      // The KV cache's type for every model this engine loads (KV_TYPES: f16, q8_0, q4_0, ...).
      // Unset: f16, or f32 for an embedding model (EngineModel's default).
      'cache-type': { type: 'string' },
      // K's and V's types apart (llama.cpp's -ctk/-ctv); each defaults to --cache-type.
      'cache-type-k': { type: 'string' },
      'cache-type-v': { type: 'string' },
      // LoRA adapters for the --model files loaded at start (llama.cpp's --lora / --lora-scaled).
      lora: { type: 'string', multiple: true, default: [] },
      'lora-scaled': { type: 'string', multiple: true, default: [] },
      // llama-server's: the adapters load at scale 0 (requests' `lora` or POST /lora-adapters apply them).
      'lora-init-without-apply': { type: 'boolean', default: false },
      // Control vectors for the --model files (llama.cpp's --control-vector / -scaled FNAME:SCALE / -layer-range START:END).
      'control-vector': { type: 'string', multiple: true, default: [] },
      'control-vector-scaled': { type: 'string', multiple: true, default: [] },
      'control-vector-layer-range': { type: 'string' },
      // llama-server's --context-shift: generations that fill the context drop old tokens and go on.
      'context-shift': { type: 'boolean', default: false },
      // llama-server's --pooling none|mean|cls|last: what embeddings pool, over each file's pooling_type.
      pooling: { type: 'string' },
      // llama.cpp's --swa-full: sliding-window layers keep every position (gpt-oss can then shift).
      'swa-full': { type: 'boolean', default: false },
      // llama.cpp's --override-kv KEY=TYPE:VALUE[,...]: metadata the engine's models read in place of their files'.
      'override-kv': { type: 'string', multiple: true, default: [] },
      // In memory, compute from the file's mapping instead of a copy in huge pages.
      mmap: { type: 'boolean', default: false },
      // llama.cpp's RoPE context flags (--rope-scaling, --rope-scale, --rope-freq-base, ..., --yarn-*) for every model.
      ...Object.fromEntries(ROPE_FLAGS.map((f) => [f, { type: 'string' as const }])),
      // llama-server's --slot-save-path: where POST /slots/ID?action=save|restore keeps slot files.
      'slot-save-path': { type: 'string' },
      'max-waiting': { type: 'string', default: '64' },
      // While streams decode, the longest one pass spends on arriving prompts (0 = no limit).
      'max-stall-ms': { type: 'string', default: '500' },
      'ctx-checkpoints': { type: 'string', default: '2' },
      'auth-token': { type: 'string' },
      // llama-server's --chat-template (Jinja source, or chatml) and --chat-template-file: every model's chat template.
      'chat-template': { type: 'string' },
      'chat-template-file': { type: 'string' },
      // llama-server's --chat-template-kwargs JSON: variables every chat renders with, under a request's own.
      'chat-template-kwargs': { type: 'string' },
      'data-dir': { type: 'string' },
      // Speculative decoding for the --model files (llama-server's -md; kail run's --draft/--lookup/--mtp/--spec-k).
      draft: { type: 'string' },
      lookup: { type: 'boolean', default: false },
      mtp: { type: 'boolean', default: false },
      'spec-k': { type: 'string' },
    },
  });
  function poolingFlag(v: string | undefined): 'none' | 'mean' | 'cls' | 'last' | undefined {
    if (v === undefined) return undefined;
    if (v !== 'none' && v !== 'mean' && v !== 'cls' && v !== 'last') throw new Error(`--pooling must be none, mean, cls or last, got '${v}' (rank: a reranker's own head answers /rerank)`);
    return v;
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got '${values.port}'`);
  const cacheType = (flag: 'cache-type' | 'cache-type-k' | 'cache-type-v'): KvType | undefined => {
    const t = values[flag] as KvType | undefined;
    if (t !== undefined && !KV_TYPES.includes(t)) throw new Error(`--${flag} must be ${KV_TYPES.join(', ')}, got '${t}'`);
    return t;
  };
  const kvOverrides = parseKvOverrides(values['override-kv']);
  for (const o of kvOverrides) process.stderr.write(`engine: ${describeKvOverride(o)}\n`);
  const rope = parseRopeFlags(Object.fromEntries(ROPE_FLAGS.map((f) => [f, (values as Record<string, unknown>)[f] as string | undefined])));
  if (rope) process.stderr.write(`engine: every model loads with ${describeRopeOptions(rope)}\n`);
  const { kvType, kvTypeV } = kvTypesFromFlags(cacheType('cache-type'), cacheType('cache-type-k'), cacheType('cache-type-v'));
  // The hardware profile in the data directory (kail profile) supplies budgets and bandwidth.
  // A profile that cannot be read does not keep the engine down: it serves as without one (no
  // default budgets), says why, and `kail profile` writes a good one.
  let profile: ReturnType<typeof readHardwareProfile> = null;
  try {
    profile = values['data-dir'] ? readHardwareProfile(values['data-dir']) : null;
  } catch (e) {
    process.stderr.write(`engine: ignoring the hardware profile: ${(e as Error).message}\n`);
  }
  if (profile) process.stderr.write(`engine: hardware profile ${hardwareProfilePath(values['data-dir']!)} (RAM budget ${profile.defaults.ramBytes} bytes, I/O depth ${profile.defaults.ioThreads})\n`);
  const chatTemplate = readChatTemplateFlags(values['chat-template'], values['chat-template-file']);
  if (chatTemplate !== undefined) process.stderr.write(`engine: every model renders chats with ${values['chat-template-file'] ? `the template in ${values['chat-template-file']}` : 'the --chat-template given'}\n`);
  const chatTemplateKwargs = values['chat-template-kwargs'] !== undefined ? parseChatTemplateKwargsFlag(values['chat-template-kwargs']) : undefined;
  if (chatTemplateKwargs) process.stderr.write(`engine: every chat renders with ${JSON.stringify(chatTemplateKwargs)} under the request's chat_template_kwargs\n`);
  const host = new LocalModelHost({
    chatTemplate,
    chatTemplateKwargs,
    profile: profile ?? undefined,
    profileFile: values['data-dir'] ? hardwareProfilePath(values['data-dir']) : undefined,
    defaultContext: int('ctx', values.ctx, 1),
    threads: int('threads', values.threads, 0),
    seqsPerModel: int('seqs', values.seqs, 1),
    maxWaitingPerModel: int('max-waiting', values['max-waiting'], 0),
    maxDecodeStallMs: int('max-stall-ms', values['max-stall-ms'], 0),
    contextCheckpoints: int('ctx-checkpoints', values['ctx-checkpoints'], 0),
    modelsDir: values['models-dir'],
    defaultRamBudgetBytes: values.ram ? parseRamBudget(values.ram) : undefined,
    defaultVramBudgetBytes: values.vram ? parseVramBudget(values.vram) : undefined,
    loadOptions: { kvType, kvTypeV, ...(values['swa-full'] ? { swaFull: true } : {}), ...(kvOverrides.length ? { kvOverrides } : {}), ...(values.mmap ? { mmap: true } : {}), ...(rope ? { rope } : {}) },
    contextShift: values['context-shift'],
    slotSavePath: values['slot-save-path'],
    pooling: poolingFlag(values.pooling),
  });
  if ([values.draft !== undefined, values.lookup, values.mtp].filter(Boolean).length > 1) throw new Error('give one of --draft FILE, --lookup and --mtp');
  const specK = values['spec-k'] === undefined ? 0 : int('spec-k', values['spec-k'], 1);
  if (specK > 32) throw new Error(`--spec-k must be 1..32, got '${values['spec-k']}'`);
  const speculation = { draftPath: values.draft ?? '', lookupDecoding: values.lookup, mtpDecoding: values.mtp, speculativeK: specK };
  const lora = parseLoraFlags(values.lora, values['lora-scaled']).map((l) => (values['lora-init-without-apply'] ? { ...l, scale: 0 } : l));
  const controlVectors = parseControlVectorFlags(values['control-vector'], values['control-vector-scaled']).map((c) => ({ path: c.path, scale: c.scale ?? 1 }));
  const rangeFlag = values['control-vector-layer-range'];
  const cvRange = rangeFlag === undefined ? [0, 0] : rangeFlag.split(':').map(Number);
  if (cvRange.length !== 2 || !cvRange.every(Number.isInteger)) throw new Error(`--control-vector-layer-range takes START:END, got '${rangeFlag}'`);
  for (const m of values.model) {
    // id=path or just path
    const eq = m.indexOf('=');
    const [id, file] = eq > 0 && !m.slice(0, eq).includes('/') ? [m.slice(0, eq), m.slice(eq + 1)] : ['', m];
    const info = await host.loadModel(engine.LoadModelRequest.fromPartial({ path: file, id, lora, ...speculation, controlVectors, controlVectorLayerStart: cvRange[0], controlVectorLayerEnd: cvRange[1] }));
    const budget = info.ramBudgetBytes ? `, experts streaming within a ${formatBytes(info.ramBudgetBytes)} RAM budget` : '';
    const spec = values.draft ? `, speculating with the draft ${values.draft}` : values.lookup ? ', speculating with prompt lookup' : values.mtp ? ", speculating with the file's MTP block" : '';
    process.stderr.write(`engine: loaded ${info.id} (${info.architecture}, ${info.layerCount} layers${budget}${spec}) from ${info.path}\n`);
  }
  const authToken = values['auth-token'] ?? process.env[AUTH_TOKEN_ENV] ?? '';
  const running = await startEngineServer(host, { host: values.host, port, authToken });
  process.stdout.write(JSON.stringify({ service: 'engine', address: `${running.host}:${running.port}`, pid: process.pid, auth: authToken !== '' }) + '\n');
  const stop = () => {
    running.close().then(() => process.exit(0));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch((e) => {
  process.stderr.write(`engine: ${(e as Error).message}\n`);
  process.exit(1);
});
