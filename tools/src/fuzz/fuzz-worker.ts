// Child process of the semantic fuzz harness (semantic-fuzz.ts): for each model file it is sent,
// does what serving it would do (inspect the metadata, load, tokenize, evaluate a few tokens,
// detokenize, render the chat template, for MoE files load again with experts streaming, and with
// `mtp` run the file's MTP block over the target's hidden rows as speculation does) and
// answers with the first error, or success with whether every logit was finite. Runs as
// `node --conditions=@kailstream/source -r ./ts-register.cjs fuzz-worker.ts` with an IPC channel.
import fs from 'node:fs';

import { ChatTemplate, EngineModel, SpeculativeDecoder, dflashRow, diffusionGenerateWith, draftLayersOf, generate, kvCacheReport, openGgufMetadata, summarize, type LoadModelOptions } from '@kailstream/engine';

export interface FuzzJob {
  id: string;
  path: string;
  /** Also load with a RAM budget (expert streaming). Default true. */
  streaming?: boolean;
  /** Also load the file's MTP block as a draft and run it over the target's hidden rows. */
  mtp?: boolean;
  /**
   * The file is a draft over this target's KV cache (a Gemma 4 assistant): load the target, then the
   * file with kvSource, and run its rows as speculation does.
   */
  kvTarget?: string;
  /**
   * The file is a draft that reads this target's hidden states into a cache of its own (a DFlash
   * draft): load the target with the draft's layers, then the file over it, run a block as
   * speculation does and generate a few greedy tokens speculating with it.
   */
  hiddenTarget?: string;
}

export interface FuzzJobResult {
  id: string;
  ok: boolean;
  /** Stage of the first failure, or 'done'. */
  stage: string;
  code?: string;
  name?: string;
  message?: string;
  /** All logits finite (successful runs). */
  finite?: boolean;
  /** Peak resident memory of the worker during the job (MiB). */
  peakRssMb: number;
  ms: number;
}

function resetPeakRss(): void {
  try {
    fs.writeFileSync('/proc/self/clear_refs', '5');
  } catch {
    // not Linux, or not allowed: the peak then covers the worker's life
  }
}

function peakRssMb(): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m) return Math.round(Number(m[1]) / 1024);
  } catch {
    // fall through
  }
  return Math.round(process.memoryUsage().rss / 2 ** 20);
}

const finite = (a: Float32Array) => a.every((v) => Number.isFinite(v));

/**
 * The last token's logits after `toks`: an EAGLE-3 draft (which runs bound to a target) is fed
 * feature rows as speculation feeds it, [target features | g_prev] (a fixed ramp here).
 */
function evalLast(model: EngineModel, seq: number, toks: number[]): Promise<Float32Array> {
  if (!model.eagle3) return model.evaluate(seq, toks, 'last');
  const w = model.runtime.inputWidth;
  const n = toks.length;
  const start = model.runtime.seqLen(seq);
  return model.forwardBatch({
    tokens: Int32Array.from(toks),
    pos: Int32Array.from(toks, (_, i) => start + i),
    seq: new Int32Array(n).fill(seq),
    output: Uint8Array.from(toks, (_, i) => (i === n - 1 ? 1 : 0)),
    embd: Float32Array.from({ length: n * w }, (_, i) => Math.sin(i * 0.37)),
  });
}

/** What a client reads before loading: the metadata's summary and the KV cache report. */
function inspect(path: string): void {
  const f = openGgufMetadata(path);
  try {
    summarize(f);
    kvCacheReport(f);
  } finally {
    f.close();
  }
}

/** Up to 4 tokens of a short text with the file's special tokens (one token 0 when it gives none). */
function probeTokens(m: EngineModel): number[] {
  const toks = m.tokenizer.tokenize('Hello world, the expert', { addSpecial: true }).slice(0, 4);
  return toks.length ? toks : [0];
}

/** A job's answer before the worker adds its id, peak memory and time. */
type JobOutcome = Omit<FuzzJobResult, 'id' | 'peakRssMb' | 'ms'>;

/** A job that threw at `stage`: the error's code, name and message. */
function failed(stage: string, e: unknown): JobOutcome {
  const err = e as { code?: unknown; name?: unknown; message?: unknown };
  return { ok: false, stage, code: typeof err?.code === 'string' ? err.code : undefined, name: typeof err?.name === 'string' ? err.name : undefined, message: String(err?.message ?? e) };
}

/**
 * A draft bound to its target, as speculation serves it: the file inspected, the target loaded
 * (stage 'target-load', with `targetOptions`, read after the inspection), then the draft over it
 * (stage 'load', `draftOptions`), then `body`, which names each further stage it enters with `at`
 * and answers whether every logit was finite. The first error is the job's; both models are closed.
 */
async function runDraftOverTarget(
  path: string,
  targetPath: string,
  targetOptions: () => LoadModelOptions,
  draftOptions: (target: EngineModel) => LoadModelOptions,
  body: (target: EngineModel, draft: EngineModel, at: (stage: string) => void) => Promise<boolean>,
): Promise<JobOutcome> {
  let stage = 'inspect';
  let target: EngineModel | undefined;
  let draft: EngineModel | undefined;
  try {
    inspect(path);
    const topts = targetOptions();
    stage = 'target-load';
    target = EngineModel.load(targetPath, { threads: 1, nSeqMax: 2, nCtx: 64, ...topts });
    stage = 'load';
    draft = EngineModel.load(path, { threads: 1, nSeqMax: 2, nCtx: 64, ...draftOptions(target) });
    const allFinite = await body(target, draft, (s) => {
      stage = s;
    });
    return { ok: true, stage: 'done', finite: allFinite };
  } catch (e) {
    return failed(stage, e);
  } finally {
    try {
      draft?.close();
      target?.close();
    } catch {
      // already failing
    }
  }
}

/**
 * A draft over a target's KV cache (a Gemma 4 assistant), as speculation serves it: the target
 * decodes a few tokens with its hidden rows, the draft takes a row at the target's length (the next
 * token with the target's last hidden row), then a chained row fed its own h_next.
 */
function runOverTarget(job: FuzzJob & { kvTarget: string }): Promise<JobOutcome> {
  return runDraftOverTarget(job.path, job.kvTarget, () => ({}), (target) => ({ kvSource: target }), async (target, draft, at) => {
    at('tokenize');
    const toks = probeTokens(draft);
    at('eval');
    const { hidden } = await target.evaluateWithHidden(0, toks, 'all');
    const w = target.hiddenWidth;
    const row = (tok: number, embd: Float32Array) =>
      draft.forwardBatchWithHidden({ tokens: Int32Array.of(tok), pos: Int32Array.of(toks.length), seq: Int32Array.of(0), output: Uint8Array.of(1), embd });
    const a = await row(draft.nVocab - 1, hidden.slice((toks.length - 1) * w));
    const b = await row(toks[0], a.hidden);
    const allFinite = finite(a.logits) && finite(b.logits) && finite(b.hidden);
    at('detokenize');
    draft.tokenizer.detokenize([...toks, draft.nVocab - 1, draft.tokenizer.nTokens - 1]);
    at('chat-template');
    ChatTemplate.fromTokenizer(draft.tokenizer).render([{ role: 'user', content: 'Hi' }]);
    return allFinite;
  });
}

/**
 * A DFlash draft over its target, as speculation serves it: the target (its layers' inputs as hidden
 * rows) decodes a few tokens, the draft takes their feature rows and a noise block [last token,
 * masks] in one pass, then greedy generation speculates with it.
 */
function runDflashOverTarget(job: FuzzJob & { hiddenTarget: string }): Promise<JobOutcome> {
  const targetOptions = (): LoadModelOptions => {
    const layers = draftLayersOf(job.path);
    return layers ? { extractLayers: layers } : {};
  };
  return runDraftOverTarget(job.path, job.hiddenTarget, targetOptions, () => ({ embeddingsFrom: job.hiddenTarget }), async (target, draft, at) => {
    at('speculate');
    const spec = new SpeculativeDecoder(target, { draft, k: 3, adaptive: false });
    at('tokenize');
    const toks = probeTokens(draft);
    at('eval');
    const { hidden } = await target.evaluateWithHidden(0, toks, 'all');
    target.truncate(0, 0);
    const w = draft.runtime.inputWidth;
    const f = target.hiddenWidth;
    const n = toks.length - 1;
    const B = Math.min(4, draft.dflash?.blockSize ?? 4);
    const embd = new Float32Array((n + B) * w);
    for (let i = 0; i < n + B; i++) dflashRow(embd, i, w, draft.hparams.nEmbd, i < n ? hidden.subarray(i * f, (i + 1) * f) : null);
    const mask = draft.dflash?.maskToken ?? 0;
    const out = await draft.forwardBatch({
      tokens: Int32Array.from({ length: n + B }, (_, i) => (i === n ? toks[n] : mask)),
      pos: Int32Array.from({ length: n + B }, (_, i) => i),
      seq: new Int32Array(n + B),
      output: Uint8Array.from({ length: n + B }, (_, i) => (i > n ? 1 : 0)),
      embd,
    });
    draft.truncate(0, 0);
    const allFinite = finite(out);
    at('generate');
    await generate(target, toks, { maxTokens: 6, sampling: { temperature: 0 }, speculative: spec });
    at('detokenize');
    draft.tokenizer.detokenize([...toks, draft.nVocab - 1, draft.tokenizer.nTokens - 1]);
    return allFinite;
  });
}

async function run(job: FuzzJob): Promise<JobOutcome> {
  if (job.kvTarget) return runOverTarget({ ...job, kvTarget: job.kvTarget });
  if (job.hiddenTarget) return runDflashOverTarget({ ...job, hiddenTarget: job.hiddenTarget });
  let stage = 'inspect';
  let model: EngineModel | undefined;
  try {
    inspect(job.path);
    stage = 'load';
    model = EngineModel.load(job.path, { threads: 1, nSeqMax: 2 });
    stage = 'tokenize';
    const toks = probeTokens(model);
    stage = 'eval';
    let allFinite = finite(await evalLast(model, 0, toks));
    // (An encoder or a diffusion model takes a sequence whole: the last token goes in as a sequence of its own.)
    allFinite = finite(await evalLast(model, model.encoder || model.diffusion ? 1 : 0, [model.nVocab - 1])) && allFinite;
    if (model.diffusion) {
      // A diffusion model's text comes from its loop (the file's mask token, shift_logits).
      stage = 'diffusion';
      model.truncate(0, 0);
      await diffusionGenerateWith(model, toks, 4, { steps: 2, schedule: { kind: 'timestep', eps: 0.001 } });
    }
    stage = 'detokenize';
    model.tokenizer.detokenize([...toks, model.nVocab - 1, model.tokenizer.nTokens - 1]);
    stage = 'chat-template';
    ChatTemplate.fromTokenizer(model.tokenizer).render([{ role: 'user', content: 'Hi' }]);
    // (Gate-less experts, nomic-bert-moe's, do not stream: the engine refuses a RAM budget for them.)
    const moe = model.program.nMoeLayers > 0 && !model.program.ops.some((op) => op.op === 'moe' && op.params?.act === 2);
    model.close();
    model = undefined;
    if (moe && job.streaming !== false) {
      stage = 'stream-load';
      model = EngineModel.load(job.path, { threads: 1, ramBytes: 2 ** 30, directIo: false, nCtx: 64, nBatch: 8 });
      stage = 'stream-eval';
      allFinite = finite(await model.evaluate(0, toks, 'last')) && allFinite;
      model.close();
      model = undefined;
    }
    if (job.mtp) {
      // What --mtp serves: the target giving the hidden rows its MTP block reads, then the block
      // over (token at p, hidden row of p-1; zeros at 0).
      stage = 'mtp-load';
      model = EngineModel.load(job.path, { threads: 1, nCtx: 64, nextnHidden: true });
      const draft = EngineModel.load(job.path, { threads: 1, nCtx: 64, mtp: true });
      try {
        stage = 'mtp-eval';
        const { hidden } = await model.evaluateWithHidden(0, toks, 'all');
        const w = draft.runtime.inputWidth;
        if (w !== model.hiddenWidth) throw new Error(`the MTP block reads ${w} floats per row, the target gives ${model.hiddenWidth}`);
        const embd = new Float32Array(toks.length * w);
        embd.set(hidden.subarray(0, (toks.length - 1) * w), w);
        const n = toks.length;
        const out = await draft.forwardBatch({ tokens: Int32Array.from(toks), pos: Int32Array.from(toks.keys()), seq: new Int32Array(n), output: new Uint8Array(n).fill(1), embd });
        allFinite = finite(out) && allFinite;
      } finally {
        draft.close();
      }
      model.close();
      model = undefined;
    }
    return { ok: true, stage: 'done', finite: allFinite };
  } catch (e) {
    return failed(stage, e);
  } finally {
    try {
      model?.close();
    } catch {
      // already failing
    }
  }
}

if (require.main === module) {
  process.on('message', (job: FuzzJob) => {
    resetPeakRss();
    const t0 = Date.now();
    void run(job).then((r) => process.send!({ id: job.id, ...r, peakRssMb: peakRssMb(), ms: Date.now() - t0 } satisfies FuzzJobResult));
  });
  process.send!({ ready: true });
}
