// tools/clients/python/kail_client.py (Debian's python3-grpcio + python3-grpc-tools, stubs
// generated from proto/ at run time) runs a generation against a real engine and a real
// scheduler, with bearer-token auth on both. Skipped, saying why, where python3-grpc is absent.
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { LocalModelHost, startEngineServer, type RunningEngineServer } from '@kailstream/engine';
import { tempDir, writeTestModel } from '@kailstream/engine/testing';
import { engine as pb } from '@kailstream/proto';

import { startSchedulerServer, type RunningSchedulerServer } from './scheduler-service';

const CLIENT = path.resolve(__dirname, '../../../tools/clients/python/kail_client.py');

/** A Python that imports grpc and grpc_tools (Debian's lives in /usr/bin, ahead of pyenv shims). */
function findPython(): string | undefined {
  for (const py of ['/usr/bin/python3', 'python3']) {
    try {
      execFileSync(py, ['-c', 'import grpc, grpc_tools'], { stdio: 'ignore' });
      return py;
    } catch {
      // next
    }
  }
  return undefined;
}

const python = findPython();
if (!python) console.warn('python-client.spec: SKIPPED: no python3 with grpc and grpc_tools (apt-get install python3-grpcio python3-grpc-tools; tools/setup.sh does)');
const describeIfPython = python ? describe : describe.skip;

function runClient(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: Record<string, unknown>; stderr: string }> {
  return new Promise((resolve) => {
    execFile(python!, [CLIENT, ...args], { env: { ...process.env, ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      const line = stdout.trim().split('\n').at(-1) ?? '';
      let out: Record<string, unknown> = {};
      try {
        out = JSON.parse(line);
      } catch {
        out = { unparsed: stdout };
      }
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out, stderr });
    });
  });
}

describeIfPython('Python gRPC client (tools/clients/python)', () => {
  const dir = tempDir();
  const TOKEN = 'py-token-abcdef';
  let engine: RunningEngineServer;
  let sched: RunningSchedulerServer;

  beforeAll(async () => {
    const file = writeTestModel(dir, 'tiny-qwen3moe', 'F32');
    const host = new LocalModelHost({ seqsPerModel: 2, defaultContext: 256 });
    await host.loadModel(pb.LoadModelRequest.fromPartial({ path: file, id: 'tiny' }));
    engine = await startEngineServer(host, { port: 0, authToken: TOKEN });
    sched = await startSchedulerServer({ engines: [`127.0.0.1:${engine.port}`], authToken: TOKEN });
  }, 60_000);

  afterAll(async () => {
    await sched.close(100);
    await engine.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('generates through the engine and through the scheduler', async () => {
    for (const target of ['--engine', '--scheduler']) {
      const port = target === '--engine' ? engine.port : sched.port;
      const r = await runClient([target, `127.0.0.1:${port}`, '--model', 'tiny', '--prompt', 'Hello', '--max-tokens', '5'], { KAIL_GRPC_TOKEN: TOKEN });
      expect({ target, code: r.code, stderr: r.code ? r.stderr : '' }).toEqual({ target, code: 0, stderr: '' });
      expect(r.out.health).toBe('SERVING_STATUS_SERVING');
      expect(r.out.models).toEqual(['tiny']);
      expect((r.out.usage as { completion_tokens: number }).completion_tokens).toBe((r.out.tokens as number[]).length);
      expect((r.out.tokens as number[]).length).toBeGreaterThan(0);
      expect(['FINISH_REASON_LENGTH', 'FINISH_REASON_STOP']).toContain(r.out.finish_reason);
    }
  }, 60_000);

  it('reports UNAUTHENTICATED without the token', async () => {
    const r = await runClient(['--scheduler', `127.0.0.1:${sched.port}`, '--model', 'tiny', '--prompt', 'Hello', '--token', 'wrong']);
    expect(r.code).toBe(2);
    expect(r.out.error).toEqual({ code: 'UNAUTHENTICATED', details: 'the bearer token is not valid' });
  }, 60_000);
});
