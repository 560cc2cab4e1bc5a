import fs from 'node:fs';
import type { Command } from 'commander';
import { formatBytes, hardwareProfilePath, measureHardware, parseByteSize, profileRamBudget, readHardwareProfile, writeHardwareProfile, type HardwareProfile } from '@kailstream/engine/core';

import { dataDir } from '../paths';

/** What a run takes now when less memory is available than the profile assumed (profileRamBudget), else nothing. */
function ramNow(file: string, p: HardwareProfile): string[] {
  const now = profileRamBudget(p, file);
  return now.bytes < p.defaults.ramBytes ? [`  now --ram      ${formatBytes(now.bytes)}: ${now.why}`] : [];
}

function showLines(file: string, p: HardwareProfile): string[] {
  const b = formatBytes;
  const lines = [
    `profile          ${file} (measured ${p.measured} on ${p.host})`,
    `cpu              ${p.cpu.model}: ${p.cpu.physicalCores} physical / ${p.cpu.logicalCores} logical cores, ${p.cpu.simd.join(' ')} (kernels ${p.cpu.kernelLevel})`,
    `memory           ${b(p.memory.totalBytes)} total, ${b(p.memory.availableBytes)} available; read ${b(p.memory.readBytesPerSecond)}/s (${p.memory.threads} threads), copy ${b(p.memory.copyBytesPerSecond)}/s`,
    `gpus             ${p.gpus.length ? p.gpus.map((g) => `#${g.index} ${g.name}: ${b(g.totalBytes)}, ${b(g.usableBytes)} usable`).join('; ') : 'none'}`,
  ];
  for (const s of p.storage) {
    lines.push(
      `storage          ${s.path}: sequential ${b(s.sequentialBytesPerSecond)}/s, random ${b(s.randomBlockBytes)} blocks ${b(s.randomBytesPerSecond)}/s ` +
        `(queue depth ${s.queueDepth}), ${s.directIo ? 'O_DIRECT' : `buffered: ${s.note}`}` +
        (s.probeFile ? `, read from ${s.probeFile}` : ''),
    );
  }
  lines.push(
    `default --ram    ${b(p.defaults.ramBytes)}: ${p.defaults.why.ramBytes}`,
    ...ramNow(file, p),
    `default --io-threads ${p.defaults.ioThreads}: ${p.defaults.why.ioThreads}`,
    `default --read-size ${b(p.defaults.readBytes)}: ${p.defaults.why.readBytes}`,
    p.gpus.length && p.gpus[0].usableBytes > 0
      ? `default --vram   ${b(p.gpus[0].usableBytes)} when experts stream: GPU #${p.gpus[0].index}'s free memory when profiled, less max(512 MiB, 5%) for a display and the driver`
      : 'default --vram   none: no CUDA device (or no CUDA backend in this build)',
  );
  return lines;
}

export function registerProfile(program: Command): void {
  program
    .command('profile')
    .description('measure RAM, memory bandwidth, CPU, GPUs and storage read bandwidth (O_DIRECT); write <data dir>/profile.json, whose defaults run/bench/plan use')
    .option('--storage <dir>', 'a storage path to measure (a temp file is written there, then removed), repeatable; default: the data directory', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option('--file-size <bytes>', 'test file size per storage path, at least 16M (default 256M)', (v: string) => {
      const n = parseByteSize(v);
      if (n < 16 * 2 ** 20) throw new Error(`--file-size must be at least 16M, got '${v}'`);
      return n;
    })
    .option('--no-model-files', 'always write a test file; by default the largest .gguf of at least max(1G, 4 x --file-size) in the path (or one directory down) is read in its place')
    .option('--seconds <s>', 'seconds per measurement, its rounds together (default 0.5)', (v: string) => {
      const n = Number(v);
      if (!(n > 0 && n <= 60)) throw new Error(`--seconds must be a number in (0, 60], got '${v}'`);
      return n;
    })
    .option('--rounds <n>', 'storage is measured in this many interleaved rounds and each setting keeps the median (default 3)', (v: string) => {
      const n = Number(v);
      if (!(Number.isInteger(n) && n >= 1 && n <= 20)) throw new Error(`--rounds must be an integer in [1, 20], got '${v}'`);
      return n;
    })
    .option('--ram-share <f>', 'share of available RAM the default budget takes (default 0.8)', (v: string) => {
      const n = Number(v);
      if (!(n > 0 && n <= 1)) throw new Error(`--ram-share must be a number in (0, 1], got '${v}'`);
      return n;
    })
    .option('--show', 'print the stored profile and what it chose, and why; measure nothing')
    .option('--json', 'print the profile as JSON')
    .option('--data-dir <dir>', 'data directory')
    .action(async (o: { storage: string[]; fileSize?: number; seconds?: number; ramShare?: number; rounds?: number; modelFiles?: boolean; show?: boolean; json?: boolean; dataDir?: string }) => {
      const dir = dataDir(o.dataDir);
      if (o.show) {
        const p = readHardwareProfile(dir);
        if (!p) throw new Error(`no hardware profile at ${hardwareProfilePath(dir)}; run kail profile first`);
        process.stdout.write(o.json ? JSON.stringify(p) + '\n' : showLines(hardwareProfilePath(dir), p).join('\n') + '\n');
        return;
      }
      if (!o.storage.length) fs.mkdirSync(dir, { recursive: true });
      const tty = process.stderr.isTTY;
      // On a terminal each step rewrites one status line; elsewhere (logs, CI) every step is a plain line.
      const log = (l: string) => process.stderr.write(tty ? `\r\x1b[K${l}` : `${l}\n`);
      const p = await measureHardware({
        storagePaths: o.storage.length ? o.storage : [dir],
        testFileBytes: o.fileSize,
        modelFiles: o.modelFiles,
        seconds: o.seconds,
        rounds: o.rounds,
        ramShare: o.ramShare,
        log,
      });
      if (tty) process.stderr.write('\n');
      const file = writeHardwareProfile(dir, p);
      process.stdout.write(o.json ? JSON.stringify(p) + '\n' : showLines(file, p).join('\n') + '\n');
    });
}
