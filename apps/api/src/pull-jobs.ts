// Pulls the console starts (tRPC models.pull): a Hugging Face repository's GGUF into the models
// directory, as `kail pull` fetches it (tools/src/models/pull.ts), in the background while the
// console polls their progress (models.pulls). One job per reference at a time; the last 20 kept.
import path from 'node:path';

/** A pull as the console shows it. */
export interface PullJob {
  ref: string;
  status: 'pulling' | 'done' | 'failed';
  /** The file being fetched (the last one when done). */
  file: string;
  /** Bytes of that file so far, and its size (0: not known yet). */
  done: number;
  total: number;
  /** Files of the model, and how many are in. */
  files: number;
  filesDone: number;
  /** The model's id in the models directory, once done. */
  id: string;
  error: string;
  startedAtUnixMs: number;
}

const KEEP = 20;

export class PullJobs {
  private readonly jobs: PullJob[] = [];

  /** `modelsDir` null: the API has no data directory, and pulling is refused. */
  constructor(private readonly modelsDir: string | null) {}

  get enabled(): boolean {
    return this.modelsDir !== null;
  }

  list(): PullJob[] {
    return this.jobs.map((j) => ({ ...j }));
  }

  /**
   * Starts pulling `ref` (USER/REPO[:QUANT] or hf.co/USER/REPO[:QUANT]) and returns its job at
   * once; a pull of the same reference still running is returned instead of a second one. A
   * reference that is not one, or no data directory, is an Error with a message for the console.
   */
  start(ref: string): PullJob {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const tools = require('@kailstream/tools') as typeof import('@kailstream/tools');
    if (!this.modelsDir) throw new Error('pulling needs a data directory (kail serve --data-dir)');
    const name = ref.trim();
    if (!tools.parseRepoRef(name)) throw new Error(`'${ref}' is not a Hugging Face repository: give USER/REPO[:QUANT], e.g. Qwen/Qwen3-30B-A3B-GGUF:Q4_K_M`);
    const running = this.jobs.find((j) => j.ref === name && j.status === 'pulling');
    if (running) return { ...running };
    const job: PullJob = { ref: name, status: 'pulling', file: '', done: 0, total: 0, files: 0, filesDone: 0, id: '', error: '', startedAtUnixMs: Date.now() };
    this.jobs.unshift(job);
    this.jobs.splice(KEEP);
    const dir = this.modelsDir;
    void (async () => {
      try {
        const plan = await tools.planRepoPull(name, undefined);
        job.files = plan.files.length;
        const r = await tools.runPull(plan, dir, {
          events: {
            start: (f) => Object.assign(job, { file: f.name, done: 0, total: f.size ?? 0 }),
            progress: (_f, done, total) => Object.assign(job, { done, total }),
            end: (f, how) => {
              if (!how.error) Object.assign(job, { file: f.name, filesDone: job.filesDone + 1, done: f.size ?? job.done, total: f.size ?? job.total });
            },
          },
        });
        Object.assign(job, { status: 'done', id: r.id, file: path.basename(r.files[0].path) });
      } catch (e) {
        Object.assign(job, { status: 'failed', error: (e as Error).message });
      }
    })();
    return { ...job };
  }
}
