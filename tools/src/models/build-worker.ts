// Worker thread of writeModelParallel: generates and encodes work units for one model.
import { parentPort, workerData } from 'node:worker_threads';

import { planWithSimulation, UnitEncoder } from './build';
import type { WorkUnit, WriteModelOptions } from './build';

export interface BuildWorkerData {
  seed: number;
  config: WriteModelOptions['config'];
  fileType: WriteModelOptions['fileType'];
  simulateType?: WriteModelOptions['simulateType'];
  expertPool?: number;
}

export type BuildWorkerReply = { id: number; bytes: Uint8Array } | { id: number; error: string };

if (parentPort) {
  const port = parentPort;
  const data = workerData as BuildWorkerData;
  const { tensors } = planWithSimulation(data);
  const encoder = new UnitEncoder(data.seed, tensors, undefined, data.expertPool ?? 0);
  port.on('message', (msg: { id: number; unit: WorkUnit }) => {
    try {
      // encode() may return the encoder's scratch memory: reply with a copy, transferred.
      const bytes = encoder.encode(msg.unit).slice();
      port.postMessage({ id: msg.id, bytes } satisfies BuildWorkerReply, [bytes.buffer]);
    } catch (e) {
      port.postMessage({ id: msg.id, error: (e as Error).message } satisfies BuildWorkerReply);
    }
  });
}
