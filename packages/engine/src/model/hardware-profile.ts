// The hardware profile (`kail profile`): measured RAM, memory bandwidth, CPU, GPUs and each storage
// path's direct-I/O read bandwidth at several block sizes and queue depths, plus the defaults a run
// takes from it (RAM budget, I/O threads) and why. Stored as <data dir>/profile.json.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { IoBenchResult } from '@kailstream/core-native';

import { EngineError, toEngineError } from '../errors';
import { native } from '../native';
import { formatBytes, shareOfBytes } from './byte-size';
import { DEFAULT_RAM_SHARE, limitingCgroup, memoryNow, type MemoryNow } from './model';

export const HARDWARE_PROFILE_FORMAT = 'kailstream-hardware-profile';
export const HARDWARE_PROFILE_VERSION = 1;
export const HARDWARE_PROFILE_FILE = 'profile.json';

export interface StorageMeasurement {
  pattern: 'sequential' | 'random';
  blockBytes: number;
  queueDepth: number;
  /** The median of the rounds' bandwidths. */
  bytesPerSecond: number;
  /** Seconds measured, all rounds together. */
  seconds: number;
  /** Each round's bandwidth, in the order measured (absent in profiles written before rounds). */
  rounds?: number[];
}

export interface StorageProfile {
  /** The directory measured (the temp file lived there). */
  path: string;
  /** O_DIRECT worked there. */
  directIo: boolean;
  note: string;
  testFileBytes: number;
  /** A model file read in place of writing a test file (absent when a test file was written). */
  probeFile?: string;
  results: StorageMeasurement[];
  /** Best sequential bandwidth measured. */
  sequentialBytesPerSecond: number;
  /** Best random bandwidth with blocks of randomBlockBytes (the size nearest a typical expert). */
  randomBytesPerSecond: number;
  randomBlockBytes: number;
  /** Smallest queue depth reaching 90% of randomBytesPerSecond. */
  queueDepth: number;
  /** Smallest random-read block reaching 90% of the best block size's bandwidth at queueDepth. */
  readBytes: number;
}

export interface GpuProfile {
  index: number;
  name: string;
  totalBytes: number;
  freeBytes: number;
  /** freeBytes less headroom for a display and the driver (max(512 MiB, 5% of total)). */
  usableBytes: number;
}

export interface HardwareProfile {
  format: typeof HARDWARE_PROFILE_FORMAT;
  version: typeof HARDWARE_PROFILE_VERSION;
  measured: string;
  host: string;
  cpu: { model: string; logicalCores: number; physicalCores: number; simd: string[]; kernelLevel: string };
  memory: { totalBytes: number; availableBytes: number; readBytesPerSecond: number; copyBytesPerSecond: number; threads: number };
  gpus: GpuProfile[];
  storage: StorageProfile[];
  /** What runs take when their flags are absent, and why. */
  defaults: { ramBytes: number; ioThreads: number; readBytes: number; storagePath: string; why: { ramBytes: string; ioThreads: string; readBytes: string } };
}

export interface ProfileOptions {
  /** Directories to measure (a temp file is written in each, then removed). Default: [os.tmpdir()]. */
  storagePaths?: string[];
  /** Size of each temp file. Default 256 MiB (larger than any drive cache we can avoid is not the point: O_DIRECT skips the page cache). */
  testFileBytes?: number;
  /**
   * Read the largest GGUF file in the storage path (or one directory down), when it is at least
   * max(1 GiB, 4 x testFileBytes), in place of writing a test file. Default true: a virtual disk
   * can serve a small file written a moment ago from its host's cache, several times faster than
   * it reads a model (measured: 4.82 GiB/s from a 256 MiB test file, 1.9-2.5 from a 16.9 GB model).
   */
  modelFiles?: boolean;
  /** Seconds per measurement, all its rounds together. Default 0.5. */
  seconds?: number;
  /**
   * Storage measurements are taken in this many rounds, each round measuring every block size and
   * queue depth once, and each keeps the median of its rounds: a virtual disk's speed drifts and
   * jumps within seconds, and one short sample per setting made the chosen I/O depth flip between
   * runs. Default 3.
   */
  rounds?: number;
  /** Block sizes for random reads. Default 64 KiB, 1 MiB, 4 MiB. */
  randomBlocks?: number[];
  /** Queue depths. Default 1, 2, 4, 8, 16. */
  queueDepths?: number[];
  /** Share of available RAM the default budget takes, 0..1. Default 0.8. */
  ramShare?: number;
  /** One line per step (progress). */
  log?: (line: string) => void;
}

const MIB = 2 ** 20;
/** Random-read block the default I/O depth is chosen at: near one Q4_K expert of a 30B-A3B-class model. */
export const TYPICAL_EXPERT_BYTES = 2 * MIB;

async function writeTestFile(file: string, bytes: number): Promise<void> {
  const fd = fs.openSync(file, 'w', 0o600);
  try {
    const chunk = Buffer.alloc(8 * MIB);
    for (let i = 0; i < chunk.length; i += 4) chunk.writeUInt32LE((i * 2654435761) >>> 0, i);
    for (let off = 0; off < bytes; off += chunk.length) fs.writeSync(fd, chunk, 0, Math.min(chunk.length, bytes - off), off);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

async function ioBench(o: Parameters<ReturnType<typeof native>['ioBench']>[0]): Promise<IoBenchResult> {
  try {
    return await native().ioBench(o);
  } catch (e) {
    throw toEngineError(e);
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const GIB = 1024 * MIB;

/** The largest regular .gguf file in dir or its subdirectories (one level), if at least `min` bytes. */
function largestModelFile(dir: string, min: number): { file: string; bytes: number } | null {
  let best: { file: string; bytes: number } | null = null;
  const consider = (file: string) => {
    try {
      const st = fs.statSync(file);
      if (st.isFile() && st.size >= min && (!best || st.size > best.bytes)) best = { file, bytes: st.size };
    } catch {
      // unreadable or gone: not a candidate
    }
  };
  const list = (d: string) => {
    try {
      return fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return [];
    }
  };
  for (const e of list(dir)) {
    const p = path.join(dir, e.name);
    if (e.isFile() && e.name.toLowerCase().endsWith('.gguf')) consider(p);
    else if (e.isDirectory()) for (const f of list(p)) if (f.isFile() && f.name.toLowerCase().endsWith('.gguf')) consider(path.join(p, f.name));
  }
  return best;
}

/** Measures the machine. Temp files are removed even when a measurement fails. */
export async function measureHardware(opts: ProfileOptions = {}): Promise<HardwareProfile> {
  const log = opts.log ?? (() => undefined);
  const seconds = opts.seconds ?? 0.5;
  const asked = opts.testFileBytes ?? 256 * MIB;
  // (Smaller, the file fits the drive's own cache and random reads at depth 16 have too few blocks.)
  if (!(Number.isFinite(asked) && asked >= 16 * MIB)) throw new EngineError('KAIL_E_INVALID_ARG', `the test file size must be at least 16 MiB, got ${asked} bytes`);
  const fileBytes = Math.floor(asked / MIB) * MIB;
  const blocks = opts.randomBlocks ?? [64 * 1024, MIB, 4 * MIB];
  const depths = opts.queueDepths ?? [1, 2, 4, 8, 16];
  const rounds = opts.rounds ?? 3;
  if (!(Number.isInteger(rounds) && rounds >= 1 && rounds <= 20)) throw new EngineError('KAIL_E_INVALID_ARG', `rounds must be an integer in [1, 20], got ${rounds}`);
  const ramShare = opts.ramShare ?? DEFAULT_RAM_SHARE;
  if (!(ramShare > 0 && ramShare <= 1)) throw new EngineError('KAIL_E_INVALID_ARG', `ramShare must be in (0, 1], got ${ramShare}`);
  for (const b of blocks) if (!(Number.isInteger(b) && b > 0 && b % 4096 === 0)) throw new EngineError('KAIL_E_INVALID_ARG', `block size ${b} is not a positive multiple of 4096`);
  const storagePaths = opts.storagePaths?.length ? opts.storagePaths : [os.tmpdir()];
  // (Checked before anything is measured.)
  for (const dir of storagePaths) if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new EngineError('KAIL_E_INVALID_ARG', `storage path ${dir} is not a directory`);

  const sys = native().systemInfo();
  const cpuModel = os.cpus()[0]?.model ?? 'unknown';
  log(`cpu: ${cpuModel}, ${sys.physicalCores} physical / ${sys.logicalCores} logical cores${sys.logicalCores < sys.onlineCores ? ` of ${sys.onlineCores} online` : ''}${sys.cpuQuota > 0 ? `, CPU quota ${sys.cpuQuota}` : ''}, ${sys.defaultThreads} compute thread${sys.defaultThreads === 1 ? '' : 's'} by default, SIMD ${sys.simd.join(' ')} (kernels ${sys.kernelLevel})`);
  const total = os.totalmem();
  const now = memoryNow();
  const available = now.availableBytes;
  const cgroup = limitingCgroup(now);
  log(
    `memory: ${formatBytes(total)} total, ${formatBytes(available)} available` +
      (cgroup ? ` (the memory cgroup ${cgroup.dir} limits this process to ${formatBytes(cgroup.limitBytes)})` : '') +
      '; measuring bandwidth ...',
  );
  const mem = await native().memBench({ bytes: Math.min(256 * MIB, Math.floor(available / 8)), threads: sys.defaultThreads, seconds });
  log(`memory: read ${formatBytes(mem.readBytesPerSecond)}/s (${mem.threads} threads), copy ${formatBytes(mem.copyBytesPerSecond)}/s (1 thread)`);
  const gpus: GpuProfile[] = sys.cudaDevices.map((d) => ({
    index: d.index,
    name: d.name,
    totalBytes: d.totalBytes,
    freeBytes: d.freeBytes,
    usableBytes: Math.max(0, d.freeBytes - Math.max(512 * MIB, Math.round(0.05 * d.totalBytes))),
  }));
  log(gpus.length ? `gpus: ${gpus.map((g) => `${g.name} ${formatBytes(g.usableBytes)} usable`).join(', ')}` : 'gpus: none');

  const storage: StorageProfile[] = [];
  for (const dir of storagePaths) {
    const model = opts.modelFiles === false ? null : largestModelFile(dir, Math.max(GIB, 4 * fileBytes));
    const file = model?.file ?? path.join(dir, `.kail-profile-${process.pid}-${Date.now()}.tmp`);
    const results: StorageMeasurement[] = [];
    let direct = true;
    let note = '';
    try {
      if (model) log(`storage ${dir}: reading ${model.file} (${formatBytes(model.bytes)}) in place of a test file ...`);
      else {
        log(`storage ${dir}: writing a ${formatBytes(fileBytes)} test file ...`);
        await writeTestFile(file, fileBytes);
      }
      const runs: [StorageMeasurement['pattern'], number, number][] = [
        ['sequential', 4 * MIB, 1],
        ['sequential', MIB, 4],
        ...blocks.flatMap((b) => depths.map((q): [StorageMeasurement['pattern'], number, number] => ['random', b, q])),
      ];
      const measured = runs.map(([pattern, blockBytes, queueDepth]): StorageMeasurement => ({ pattern, blockBytes, queueDepth, bytesPerSecond: 0, seconds: 0, rounds: [] }));
      for (let round = 0; round < rounds; round++) {
        for (const m of measured) {
          const r = await ioBench({ path: file, blockBytes: m.blockBytes, queueDepth: m.queueDepth, random: m.pattern === 'random', seconds: seconds / rounds, direct: true });
          direct &&= r.direct;
          note ||= r.note;
          m.rounds!.push(r.seconds > 0 ? r.bytes / r.seconds : 0);
          m.seconds += r.seconds;
        }
        if (round < rounds - 1) log(`storage ${dir}: round ${round + 1} of ${rounds} measured`);
      }
      for (const m of measured) {
        m.bytesPerSecond = median(m.rounds!);
        results.push(m);
        const spread = rounds > 1 ? ` (median of ${rounds}: ${m.rounds!.map((x) => formatBytes(x)).join(', ')})` : '';
        log(`storage ${dir}: ${m.pattern} ${formatBytes(m.blockBytes)} blocks, queue depth ${m.queueDepth}: ${formatBytes(m.bytesPerSecond)}/s${direct ? '' : ' (buffered)'}${spread}`);
      }
    } finally {
      if (!model) fs.rmSync(file, { force: true });
    }
    const seq = Math.max(...results.filter((r) => r.pattern === 'sequential').map((r) => r.bytesPerSecond));
    const randomBlockBytes = blocks.reduce((a, b) => (Math.abs(Math.log(b / TYPICAL_EXPERT_BYTES)) < Math.abs(Math.log(a / TYPICAL_EXPERT_BYTES)) ? b : a));
    const atBlock = results.filter((r) => r.pattern === 'random' && r.blockBytes === randomBlockBytes).sort((a, b) => a.queueDepth - b.queueDepth);
    const best = Math.max(...atBlock.map((r) => r.bytesPerSecond));
    const qd = atBlock.find((r) => r.bytesPerSecond >= 0.9 * best)?.queueDepth ?? 4;
    // Read size: the smallest block that, at that depth, reaches 90% of the best any block size does.
    const atDepth = results.filter((r) => r.pattern === 'random' && r.queueDepth === qd).sort((a, b) => a.blockBytes - b.blockBytes);
    const bestAtDepth = Math.max(...atDepth.map((r) => r.bytesPerSecond));
    const readBytes = atDepth.find((r) => r.bytesPerSecond >= 0.9 * bestAtDepth)?.blockBytes ?? MIB;
    storage.push({ path: path.resolve(dir), directIo: direct, note, testFileBytes: model?.bytes ?? fileBytes, ...(model ? { probeFile: model.file } : {}), results, sequentialBytesPerSecond: seq, randomBytesPerSecond: best, randomBlockBytes, queueDepth: qd, readBytes });
  }
  const fastest = storage.reduce((a, b) => (b.randomBytesPerSecond > a.randomBytesPerSecond ? b : a));
  const ramBytes = shareOfBytes(available, ramShare);
  return {
    format: HARDWARE_PROFILE_FORMAT,
    version: HARDWARE_PROFILE_VERSION,
    measured: new Date().toISOString(),
    host: os.hostname(),
    cpu: { model: cpuModel, logicalCores: sys.logicalCores, physicalCores: sys.physicalCores, simd: sys.simd, kernelLevel: sys.kernelLevel },
    memory: { totalBytes: total, availableBytes: available, readBytesPerSecond: mem.readBytesPerSecond, copyBytesPerSecond: mem.copyBytesPerSecond, threads: mem.threads },
    gpus,
    storage,
    defaults: {
      ramBytes,
      // At least two readers: the expert stream lets prefetch reads hold at most half of them, and with
      // one reader a demand read waits behind a prefetch already reading (measured on the test VM,
      // whose disk reaches its best random bandwidth at depth 1: 8-layer Qwen3-30B-A3B shape, Q4_K,
      // --ram 1500M, 2 threads, random feed: 24.4/25.9 t/s with one reader, 28.2/29.0 with two).
      ioThreads: Math.max(2, fastest.queueDepth),
      readBytes: fastest.readBytes,
      storagePath: fastest.path,
      why: {
        ramBytes: `${Math.round(ramShare * 100)}% of the ${formatBytes(available)} available when profiled${cgroup ? ` (under the memory cgroup ${cgroup.dir}'s ${formatBytes(cgroup.limitBytes)} limit)` : ''}`,
        ioThreads:
          `the smallest queue depth reaching 90% of the best random-read bandwidth (${formatBytes(fastest.randomBytesPerSecond)}/s) with ${formatBytes(fastest.randomBlockBytes)} blocks on ${fastest.path}` +
          (fastest.queueDepth < 2 ? ` was ${fastest.queueDepth}; at least 2, so a demand read never waits behind a prefetch read` : ''),
        readBytes: `the smallest block reaching 90% of the best block size's random-read bandwidth at queue depth ${fastest.queueDepth} on ${fastest.path}`,
      },
    },
  };
}

export function hardwareProfilePath(dataDir: string): string {
  return path.join(dataDir, HARDWARE_PROFILE_FILE);
}

export function writeHardwareProfile(dataDir: string, p: HardwareProfile): string {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = hardwareProfilePath(dataDir);
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(p, null, 2) + '\n');
  fs.renameSync(tmp, file);
  return file;
}

/** The profile in dataDir, or null when there is none; a file that is not one is an error naming it. */
export function readHardwareProfile(dataDir: string): HardwareProfile | null {
  const file = hardwareProfilePath(dataDir);
  if (!fs.existsSync(file)) return null;
  let p: HardwareProfile;
  try {
    p = JSON.parse(fs.readFileSync(file, 'utf8')) as HardwareProfile;
  } catch (e) {
    throw new EngineError('KAIL_E_INVALID_ARG', `hardware profile ${file} is not JSON: ${(e as Error).message}; run kail profile again`);
  }
  if (p?.format !== HARDWARE_PROFILE_FORMAT || p.version !== HARDWARE_PROFILE_VERSION || !p.defaults || !(p.defaults.ramBytes > 0) || !(p.defaults.ioThreads >= 1))
    throw new EngineError('KAIL_E_INVALID_ARG', `hardware profile ${file} is not a ${HARDWARE_PROFILE_FORMAT} v${HARDWARE_PROFILE_VERSION} file; run kail profile again`);
  if (!(p.defaults.readBytes >= 0)) {
    // Written before the read size was measured: reads stay uncut.
    p.defaults.readBytes = 0;
    p.defaults.why = { ...p.defaults.why, readBytes: 'not measured by this profile (run kail profile again); reads uncut' };
  }
  return p;
}

/** What a run uses when its flags are absent, given a profile: each value with its reason. */
export interface ProfileDefaults {
  /** Undefined: the whole model fits the profiled budget, so nothing streams. */
  ramBytes?: number;
  ioThreads: number;
  readBytes?: number;
  /** The VRAM tier's budget when experts stream and the profile found a GPU (its first device's usable memory). */
  vramBytes?: number;
  lines: string[];
}

/**
 * The profile's RAM budget, or, where less memory is available now than when it was profiled, the
 * profile's share of what is available now: other programs hold more, a memory cgroup (a
 * container's limit, which /proc/meminfo does not show) leaves less, or the profile was taken
 * elsewhere (a shared data directory). Planning past it swaps or gets the run OOM-killed. A
 * shortfall of less than a tenth keeps the profile's budget. now: memoryNow(); null takes the
 * profile's budget as it is.
 */
export function profileRamBudget(p: HardwareProfile, file: string, now: MemoryNow | null = memoryNow()): { bytes: number; why: string } {
  const profiled = { bytes: p.defaults.ramBytes, why: `from ${file}: ${p.defaults.why.ramBytes}` };
  if (!now) return profiled;
  // A hand-edited profile may lack the memory record: then the default share.
  const profiledAvailable = Number(p.memory?.availableBytes);
  const share = profiledAvailable > 0 ? Math.min(1, p.defaults.ramBytes / profiledAvailable) : DEFAULT_RAM_SHARE;
  const bytes = shareOfBytes(now.availableBytes, share);
  // Available memory moves by tens of MiB from one run to the next: only a shortfall of more than
  // a tenth re-plans, so repeated runs keep one budget (the share leaves room for the rest).
  if (bytes >= 0.9 * profiled.bytes) return profiled;
  const pct = `${(100 * share).toFixed(0)}%`;
  const c = limitingCgroup(now);
  return {
    bytes,
    why: c
      ? `${pct} of the ${formatBytes(c.headroomBytes)} the memory cgroup ${c.dir} leaves (limit ${formatBytes(c.limitBytes)}, ` +
        `${formatBytes(c.usedBytes - c.reclaimableBytes)} in use), less than ${file}'s ${formatBytes(profiled.bytes)}`
      : `${pct} of the ${formatBytes(now.availableBytes)} available now, less than ${file}'s ${formatBytes(profiled.bytes)} ` +
        (profiledAvailable > 0 ? `(profiled with ${formatBytes(profiledAvailable)} available)` : '(the profile records no available memory)'),
  };
}

export function profileDefaults(
  p: HardwareProfile,
  file: string,
  modelBytes: number,
  given: { ramBytes?: number; ioThreads?: number; readBytes?: number; vramBytes?: number },
  /** Bytes of the profiled GPU's memory that models loaded already hold (their VRAM tiers): the tier gets the rest. */
  vramHeldBytes = 0,
  /** Memory available now; undefined: memoryNow(), read only when the RAM budget is not given; null: the profile's budget as it is. */
  now?: MemoryNow | null,
): ProfileDefaults {
  const lines: string[] = [];
  let ramBytes = given.ramBytes;
  if (ramBytes === undefined) {
    const budget = profileRamBudget(p, file, now);
    if (modelBytes > budget.bytes) {
      ramBytes = budget.bytes;
      lines.push(`--ram ${formatBytes(ramBytes)} ${budget.why}; the model (${formatBytes(modelBytes)}) is larger, so experts stream`);
    } else {
      lines.push(`no --ram: the model (${formatBytes(modelBytes)}) fits the budget ${formatBytes(budget.bytes)} ${budget.why}, so it runs in memory`);
    }
  }
  let ioThreads = given.ioThreads ?? p.defaults.ioThreads;
  if (given.ioThreads === undefined && ramBytes !== undefined) lines.push(`--io-threads ${ioThreads} from ${file}: ${p.defaults.why.ioThreads}`);
  ioThreads = Math.max(1, Math.min(64, ioThreads));
  let readBytes = given.readBytes;
  if (readBytes === undefined && ramBytes !== undefined) {
    readBytes = p.defaults.readBytes;
    lines.push(`--read-size ${formatBytes(readBytes)} from ${file}: ${p.defaults.why.readBytes}`);
  }
  let vramBytes = given.vramBytes;
  const gpu = p.gpus?.[0];
  if (vramBytes === undefined && ramBytes !== undefined && gpu && gpu.usableBytes > 0) {
    const why = `GPU #${gpu.index} ${gpu.name}'s free memory when profiled, less headroom for a display and the driver`;
    if (vramHeldBytes <= 0) {
      vramBytes = gpu.usableBytes;
      lines.push(`--vram ${formatBytes(vramBytes)} from ${file}: ${why}`);
    } else {
      vramBytes = Math.max(0, gpu.usableBytes - vramHeldBytes);
      lines.push(`--vram ${formatBytes(vramBytes)} from ${file}: ${why} (${formatBytes(gpu.usableBytes)}), less the ${formatBytes(vramHeldBytes)} the loaded models' VRAM tiers hold`);
    }
  }
  return { ramBytes, ioThreads, readBytes, vramBytes, lines };
}
