import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import readline from 'node:readline';

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
}

export interface RunningService {
  spec: ServiceSpec;
  child: ChildProcess;
  address: string;
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

/** Starts processes, reads their addresses, restarts those marked restart, stops them all. */
export class Supervisor {
  readonly services = new Map<string, RunningService>();
  private stopping = false;

  constructor(private readonly log: (line: string) => void = (l) => process.stdout.write(l + '\n')) {}

  async start(spec: ServiceSpec, timeoutMs = 60_000): Promise<RunningService> {
    const child = spawn(spec.command, spec.args, {
      cwd: spec.cwd,
      env: { ...process.env, ...spec.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const address = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${spec.name} did not start within ${timeoutMs} ms`)), timeoutMs);
      const fail = (why: string) => {
        clearTimeout(timer);
        reject(new Error(`${spec.name} failed to start: ${why}`));
      };
      let stderr = '';
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
            resolve(msg.address);
          }
        } catch {
          // not the address line
        }
      });
    });
    child.removeAllListeners('exit');
    child.stdout!.resume();
    child.stderr!.on('data', (d: Buffer) => process.stderr.write(`[${spec.name}] ${d}`));
    const running: RunningService = { spec, child, address, restarts: this.services.get(spec.name)?.restarts ?? 0 };
    this.services.set(spec.name, running);
    child.once('exit', (code, signal) => void this.onExit(running, code, signal));
    return running;
  }

  private async onExit(svc: RunningService, code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    if (this.stopping) return;
    this.log(`${svc.spec.name} exited (${signal ?? code})`);
    if (!svc.spec.restart) return;
    const delay = Math.min(10_000, 500 * 2 ** Math.min(svc.restarts, 4));
    await new Promise((r) => setTimeout(r, delay));
    if (this.stopping) return;
    try {
      svc.restarts++;
      const again = await this.start(svc.spec);
      again.restarts = svc.restarts;
      this.log(`${svc.spec.name} restarted at ${again.address}`);
    } catch (e) {
      this.log(`${svc.spec.name} restart failed: ${(e as Error).message}`);
    }
  }

  /** SIGTERM to every service (reverse start order), SIGKILL after graceMs. */
  async stopAll(graceMs = 5000): Promise<void> {
    this.stopping = true;
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
