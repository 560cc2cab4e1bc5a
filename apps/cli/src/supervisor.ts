import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import readline from 'node:readline';

import * as grpc from '@grpc/grpc-js';
import { bearerClientOptions, engine as pb, scheduler as spb } from '@kailstream/proto';

/** How to start one service process. */
export interface ServiceSpec {
  name: string;
  command: string;
  args: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Restart when it exits unexpectedly (the engine). */
  restart?: boolean;
  /** Reads the service address: from its first JSON stdout line (default) or a fixed value. */
  fixedAddress?: string;
  /** Resolves when the service is ready (for services that print no JSON line). */
  waitReady?: () => Promise<void>;
  /** Runs when it exits unexpectedly, before a restart (the engine keeper stops recording). */
  onExit?: (svc: RunningService) => void;
  /** Runs after a restart, before 'restarted' is emitted (re-register, reload models). */
  afterRestart?: (svc: RunningService) => Promise<void>;
}

export interface RunningService {
  spec: ServiceSpec;
  child: ChildProcess;
  address: string;
  /** The rest of its start line (the API's `local`, say); empty for a fixed address. */
  info: Record<string, unknown>;
  restarts: number;
}

/** A free TCP port on host (bound then released). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts processes, reads their addresses, restarts those marked restart, stops them all.
 * Events: 'exit' (svc, code|signal) when a service dies, 'restarted' (svc) once a restarted
 * service is back and its afterRestart hook ran, 'restart-failed' (name, error).
 */
export class Supervisor extends EventEmitter {
  readonly services = new Map<string, RunningService>();
  private stopping = false;

  constructor(private readonly log: (line: string) => void = (l) => process.stdout.write(l + '\n')) {
    super();
  }

  async start(spec: ServiceSpec, timeoutMs = 60_000): Promise<RunningService> {
    const child = spawn(spec.command, spec.args, {
      cwd: spec.cwd,
      env: { ...process.env, ...spec.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // What it printed while starting: part of the error if it fails, shown once it is up.
    let stderr = '';
    let info: Record<string, unknown> = {};
    const address = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`${spec.name} did not start within ${timeoutMs} ms`));
      }, timeoutMs);
      const fail = (why: string) => {
        clearTimeout(timer);
        reject(new Error(`${spec.name} failed to start: ${why}`));
      };
      child.stderr!.on('data', (d: Buffer) => {
        stderr = (stderr + d.toString()).slice(-4000);
      });
      child.once('exit', (code, signal) => fail(`exited with ${signal ?? code}${stderr ? `: ${stderr.trim()}` : ''}`));
      if (spec.fixedAddress !== undefined) {
        (spec.waitReady ? spec.waitReady() : Promise.resolve()).then(
          () => {
            clearTimeout(timer);
            resolve(spec.fixedAddress!);
          },
          (e: Error) => fail(e.message),
        );
        return;
      }
      const rl = readline.createInterface({ input: child.stdout! });
      rl.on('line', (line) => {
        try {
          const msg = JSON.parse(line) as { address?: string };
          if (msg.address) {
            clearTimeout(timer);
            rl.close();
            info = msg;
            resolve(msg.address);
          }
        } catch {
          // not the address line
        }
      });
    });
    child.removeAllListeners('exit');
    child.stdout!.resume();
    child.stderr!.removeAllListeners('data');
    // (A profile it ignored, say: not only on failure.)
    for (const line of stderr.trimEnd().split('\n')) if (line.trim()) process.stderr.write(`[${spec.name}] ${line}\n`);
    child.stderr!.on('data', (d: Buffer) => process.stderr.write(`[${spec.name}] ${d}`));
    const running: RunningService = { spec, child, address, info, restarts: this.services.get(spec.name)?.restarts ?? 0 };
    this.services.set(spec.name, running);
    child.once('exit', (code, signal) => void this.onExit(running, code, signal));
    return running;
  }

  private async onExit(svc: RunningService, code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    if (this.stopping) return;
    this.log(`${svc.spec.name} exited (${signal ?? code})`);
    this.emit('exit', svc, signal ?? code);
    svc.spec.onExit?.(svc);
    if (!svc.spec.restart) return;
    // Back off 0.5 s, 1 s, 2 s, ... up to 10 s between attempts, so a crash loop does not spin.
    for (let attempt = 0; !this.stopping; attempt++) {
      const delay = Math.min(10_000, 500 * 2 ** Math.min(svc.restarts + attempt, 4));
      await new Promise((r) => setTimeout(r, delay));
      if (this.stopping) return;
      try {
        const again = await this.start(svc.spec);
        again.restarts = svc.restarts + 1;
        this.log(`${svc.spec.name} restarted at ${again.address}`);
        if (svc.spec.afterRestart) await svc.spec.afterRestart(again);
        this.emit('restarted', again);
        return;
      } catch (e) {
        this.log(`${svc.spec.name} restart failed: ${(e as Error).message}`);
        this.emit('restart-failed', svc.spec.name, e);
        // A start that failed after spawning left a dead child; the next attempt replaces it.
      }
    }
  }

  /** SIGTERM to every service (reverse start order), SIGKILL after graceMs. */
  async stopAll(graceMs = 5000): Promise<void> {
    this.stopping = true;
    this.emit('stopping');
    const all = [...this.services.values()].reverse();
    await Promise.all(
      all.map(
        (s) =>
          new Promise<void>((resolve) => {
            if (s.child.exitCode !== null || s.child.signalCode !== null) return resolve();
            const t = setTimeout(() => s.child.kill('SIGKILL'), graceMs);
            s.child.once('exit', () => {
              clearTimeout(t);
              resolve();
            });
            s.child.kill('SIGTERM');
          }),
      ),
    );
  }
}

function unary<Req, Res>(fn: (req: Req, md: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: Res) => void) => unknown, req: Req, timeoutMs: number): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r))));
}

export interface EngineKeeperOptions {
  /** How often the engine's loaded models are recorded (ms). Default 2000. */
  pollMs?: number;
  /** Bearer token of the engine and scheduler (their --auth-token). */
  token?: string;
  log?: (line: string) => void;
}

/**
 * Keeps a supervised engine whole across restarts: remembers which models it has loaded (also
 * those loaded later through LoadModel), and after a restart loads them again with the same
 * context and RAM budget and registers the engine with the scheduler again. Use
 * `afterRestart` as the engine spec's hook.
 */
export class EngineKeeper {
  private readonly models = new Map<string, pb.LoadModelRequest>();
  private timer: NodeJS.Timeout | undefined;
  /**
   * From the engine's exit until afterRestart is over: what a restarted engine lists before its
   * models are reloaded (only those of its command line) is not recorded, or they would be
   * forgotten (a poll between the new process's start and the reload, rare on an idle machine).
   */
  private restarting = false;
  private readonly opts: EngineKeeperOptions;

  constructor(
    private engineAddress: string,
    private readonly schedulerAddress: () => string | undefined,
    opts: EngineKeeperOptions = {},
  ) {
    this.opts = opts;
  }

  /** Starts recording the models of the engine at `address`. */
  track(address: string): void {
    this.engineAddress = address;
    this.start();
  }

  /** Starts recording the engine's models. */
  start(): void {
    this.stop();
    const poll = () => void this.record().catch(() => undefined);
    poll();
    this.timer = setInterval(poll, this.opts.pollMs ?? 2000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** The engine spec's onExit hook: stops recording until afterRestart has reloaded the models. */
  readonly onExit = (): void => {
    this.restarting = true;
  };

  /** Models it would reload, by id. */
  remembered(): pb.LoadModelRequest[] {
    return [...this.models.values()];
  }

  private engineClient(address = this.engineAddress): pb.EngineServiceClient {
    return new pb.EngineServiceClient(address, grpc.credentials.createInsecure(), bearerClientOptions(this.opts.token));
  }

  async record(): Promise<void> {
    if (this.restarting) return;
    const c = this.engineClient();
    try {
      const res = await unary<pb.ListModelsRequest, pb.ListModelsResponse>(c.listModels.bind(c), {}, 2000);
      if (this.restarting) return;
      // An unload is remembered too: only what is loaded now is reloaded.
      this.models.clear();
      for (const m of res.models)
        // (With its LoRA adapters at the scales it was loaded with.)
        this.models.set(m.id, pb.LoadModelRequest.fromPartial({ path: m.path, id: m.id, contextLength: m.contextLength, ramBudgetBytes: m.ramBudgetBytes, lora: m.loraAdapters }));
    } finally {
      c.close();
    }
  }

  /** The engine spec's afterRestart hook: reload what it had, then register it with the scheduler. */
  readonly afterRestart = async (svc: RunningService): Promise<void> => {
    this.engineAddress = svc.address;
    const log = this.opts.log ?? (() => undefined);
    const c = this.engineClient(svc.address);
    try {
      for (const req of this.models.values()) {
        try {
          await unary<pb.LoadModelRequest, pb.LoadModelResponse>(c.loadModel.bind(c), req, 300_000);
          log(`engine: reloaded ${req.id}`);
        } catch (e) {
          // Models from its command line are back already.
          if ((e as grpc.ServiceError).code !== grpc.status.ALREADY_EXISTS) log(`engine: reloading ${req.id} failed: ${(e as Error).message}`);
        }
      }
    } finally {
      c.close();
      this.restarting = false;
    }
    const sched = this.schedulerAddress();
    if (!sched) return;
    const s = new spb.SchedulerServiceClient(sched, grpc.credentials.createInsecure(), bearerClientOptions(this.opts.token));
    try {
      await unary<spb.RegisterEngineRequest, spb.RegisterEngineResponse>(s.registerEngine.bind(s), { address: svc.address, slots: 0 }, 10_000);
      log(`engine: registered again with the scheduler at ${sched}`);
    } finally {
      s.close();
    }
  };
}
