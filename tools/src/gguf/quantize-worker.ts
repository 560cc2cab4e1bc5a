// Runs quantizeModel on a worker thread (quantizeModelInWorker), so a server's event loop keeps
// answering while a model quantizes: posts progress, then the report or the error's message.
import { parentPort, workerData } from 'node:worker_threads';

import { quantizeModel, type QuantizeOptions } from './quantize';

export interface QuantizeWorkerData {
  input: string;
  output: string | undefined;
  opts: Omit<QuantizeOptions, 'log' | 'progress'>;
}

const { input, output, opts } = workerData as QuantizeWorkerData;
try {
  const report = quantizeModel(input, output, { ...opts, progress: (done, total, tensor) => parentPort!.postMessage({ progress: { done, total, tensor } }) });
  parentPort!.postMessage({ report });
} catch (e) {
  parentPort!.postMessage({ error: (e as Error).message });
}
