import type { Command } from 'commander';
import os from 'node:os';

import { VERSION, formatBytes, memoryNow, systemInfo } from '@kailstream/engine/core';

export function registerVersion(program: Command): void {
  program
    .command('version')
    .description('print the version, the native kernel level and CPU/GPU features')
    .option('--json', 'print one JSON object')
    .action((opts: { json?: boolean }) => {
      let native: ReturnType<typeof systemInfo> | { error: string };
      try {
        native = systemInfo();
      } catch (e) {
        native = { error: (e as Error).message };
      }
      let memory: (ReturnType<typeof memoryNow> & { totalBytes: number }) | null = null;
      try {
        memory = { totalBytes: os.totalmem(), ...memoryNow() };
      } catch {
        // the cgroup reader is native: unavailable without the addon
      }
      if (opts.json) {
        process.stdout.write(JSON.stringify({ version: VERSION, node: process.version, native, memory }) + '\n');
        return;
      }
      process.stdout.write(`kail ${VERSION} (node ${process.version})\n`);
      if ('error' in native) {
        process.stdout.write(`native core: unavailable\n${native.error}\n`);
        return;
      }
      const limits = [
        ...(native.logicalCores < native.onlineCores ? [`of ${native.onlineCores} online`] : []),
        ...(native.cpuQuota > 0 ? [`CPU quota ${native.cpuQuota.toFixed(2).replace(/\.?0+$/, '')}`] : []),
      ];
      process.stdout.write(
        `native core: kernels ${native.kernelLevel}; ${native.physicalCores} physical / ${native.logicalCores} logical cores` +
          (limits.length ? ` (${limits.join(', ')})` : '') +
          `; ${native.defaultThreads} compute thread${native.defaultThreads === 1 ? '' : 's'} by default\n`,
      );
      if (memory) {
        const c = memory.cgroup;
        process.stdout.write(
          `memory: ${formatBytes(memory.availableBytes)} available of ${formatBytes(memory.totalBytes)}` +
            (c ? ` (the memory cgroup ${c.dir} limits this process to ${formatBytes(c.limitBytes)}, ${formatBytes(c.headroomBytes)} of it free)` : '') +
            '\n',
        );
      }
      process.stdout.write(`SIMD: ${native.simd.join(' ')}\n`);
      process.stdout.write(
        `CUDA: ${native.cudaCompiled ? 'compiled' : 'not compiled'}; ` +
          (native.cudaDevices.length ? native.cudaDevices.map((d) => `${d.name} (${(d.totalBytes / 2 ** 30).toFixed(1)} GiB)`).join(', ') : 'no device') +
          '\n',
      );
    });
}
