// The memory limit the cgroups over this process set (cgroupMemoryLimit), and a memory cgroup to
// run a command under a real cap, for tests and benchmarks: cgroup v2
// (memory.max, memory.peak) where the unified hierarchy has the memory controller, else v1
// (memory.limit_in_bytes, memory.max_usage_in_bytes). Page cache the group's processes read is
// charged to the group; pages cached earlier by another group stay charged there, so evict a file
// first (evictFromPageCache). Swap is turned off for the group, so the cap cannot leak to swap.
// Needs root (or a delegated subtree); createMemoryCgroup returns a reason instead when it cannot.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import type { CgroupMemoryLimit } from '@kailstream/core-native';

import { native } from '../native';

export interface MemoryCgroup {
  dir: string;
  version: 1 | 2;
  /** Sets the cap (bytes); 0 = none. */
  setLimit(bytes: number): void;
  /** Peak memory charged to the group (processes and page cache), bytes. */
  peak(): number;
  /** Times the group hit its cap and the kernel OOM-killed something in it. */
  oomKills(): number;
  /** Runs a command with its process moved into the group first (synchronously). */
  run(command: string, args: string[], opts?: { timeoutMs?: number; env?: NodeJS.ProcessEnv }): SpawnSyncReturns<string>;
  remove(): void;
}

const read = (f: string) => fs.readFileSync(f, 'utf8').trim();

function ownCgroup(controller: string | null): string | null {
  for (const line of read('/proc/self/cgroup').split('\n')) {
    const [, ctrls, p] = line.split(':');
    if (controller === null ? ctrls === '' : ctrls.split(',').includes(controller)) return p;
  }
  return null;
}

function mk(parent: string, name: string): string {
  const dir = path.join(parent, name);
  fs.mkdirSync(dir);
  return dir;
}

/** A new memory cgroup named `name` under this process's own, or a reason why there is none. */
export function createMemoryCgroup(name: string): MemoryCgroup | string {
  const reasons: string[] = [];
  // v2: the unified hierarchy with the memory controller available.
  for (const mount of ['/sys/fs/cgroup', '/sys/fs/cgroup/unified']) {
    const own = ownCgroup(null);
    if (own === null || !fs.existsSync(path.join(mount, 'cgroup.controllers'))) continue;
    const parent = path.join(mount, own);
    try {
      if (!read(path.join(parent, 'cgroup.controllers')).split(/\s+/).includes('memory')) {
        reasons.push(`${parent}: no memory controller in cgroup v2`);
        continue;
      }
      // A v2 group with processes cannot enable controllers for children: use a sibling subtree.
      fs.writeFileSync(path.join(parent, 'cgroup.subtree_control'), '+memory');
      const dir = mk(parent, name);
      const g = group(dir, 2);
      g.setLimit(0);
      return g;
    } catch (e) {
      reasons.push(`cgroup v2 at ${parent}: ${(e as Error).message}`);
    }
  }
  const own = ownCgroup('memory');
  const v1 = own === null ? null : path.join('/sys/fs/cgroup/memory', own);
  if (v1 && fs.existsSync(path.join(v1, 'memory.limit_in_bytes'))) {
    try {
      const dir = mk(v1, name);
      try {
        fs.writeFileSync(path.join(dir, 'memory.swappiness'), '0');
      } catch {
        // some kernels refuse swappiness in non-root groups; the cap still holds RAM
      }
      return group(dir, 1);
    } catch (e) {
      reasons.push(`cgroup v1 at ${v1}: ${(e as Error).message}`);
    }
  } else {
    reasons.push('no cgroup v1 memory hierarchy');
  }
  return `memory cgroups are not writable here (${reasons.join('; ')})`;
}

function group(dir: string, version: 1 | 2): MemoryCgroup {
  const f = (n: string) => path.join(dir, n);
  return {
    dir,
    version,
    setLimit(bytes) {
      if (version === 2) {
        fs.writeFileSync(f('memory.max'), bytes > 0 ? String(bytes) : 'max');
        if (fs.existsSync(f('memory.swap.max'))) fs.writeFileSync(f('memory.swap.max'), '0');
      } else {
        fs.writeFileSync(f('memory.limit_in_bytes'), bytes > 0 ? String(bytes) : '-1');
      }
    },
    peak() {
      if (version === 2) return Number(read(fs.existsSync(f('memory.peak')) ? f('memory.peak') : f('memory.current')));
      return Number(read(f('memory.max_usage_in_bytes')));
    },
    oomKills() {
      const file = version === 2 ? f('memory.events') : f('memory.oom_control');
      const m = /oom_kill (\d+)/.exec(read(file));
      return m ? Number(m[1]) : 0;
    },
    run(command, args, opts = {}) {
      return spawnSync('sh', ['-c', `echo $$ > '${f('cgroup.procs')}' && exec "$@"`, 'sh', command, ...args], {
        encoding: 'utf8',
        timeout: opts.timeoutMs ?? 120_000,
        env: opts.env ?? process.env,
        maxBuffer: 64 << 20,
      });
    },
    remove() {
      for (let i = 0; i < 50; i++) {
        try {
          fs.rmdirSync(dir);
          return;
        } catch {
          spawnSync('sleep', ['0.05']);
        }
      }
    },
  };
}

export type { CgroupMemoryLimit } from '@kailstream/core-native';

/**
 * The tightest memory limit on this process: over its memory cgroup and that group's ancestors, in
 * the v2 hierarchy and the v1 memory hierarchy, the group leaving the least headroom; null where no
 * group sets one (or cgroups cannot be read). A container's memory limit (docker --memory, a
 * Kubernetes pod's limits) is one of these: /proc/meminfo does not show it, and a process that
 * plans by MemAvailable alone is OOM-killed there. Read by the native core (include/kail/cgroup.h),
 * which reads the CPU quota the same way. fsRoot is for tests (a fake /proc and /sys).
 */
export function cgroupMemoryLimit(fsRoot = '/'): CgroupMemoryLimit | null {
  return native().cgroupMemoryLimit(fsRoot);
}

/**
 * Drops a file's pages from the page cache (wherever they are charged), with dd's nocache. Dirty
 * pages (a file just written) are flushed first: POSIX_FADV_DONTNEED skips them.
 */
export function evictFromPageCache(file: string): void {
  const fd = fs.openSync(file, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  const r = spawnSync('dd', [`if=${file}`, 'iflag=nocache', 'count=0', 'status=none']);
  if (r.status !== 0) throw new Error(`cannot evict ${file} from the page cache: ${r.stderr?.toString() ?? r.error?.message}`);
}

/**
 * Evicts a file from the page cache and reads it back whole, so its pages are cached the way a
 * read leaves them (the state after a reboot), not the way its writer left them. On Linux 6.18
 * ext4 a read fills the cache with large folios, and matrix x vector over an mmap of them ran
 * 61-62 GB/s against 48-51 GB/s over a just-written copy of the same file (2 threads, Q4_K
 * experts of the Mixtral shape, AMD EPYC VM, measured 2026-12-04): benchmarks of files the
 * project has just written call this first so they do not measure the writer's page layout.
 */
export function rereadIntoPageCache(file: string): void {
  evictFromPageCache(file);
  const fd = fs.openSync(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(16 << 20);
    let pos = 0;
    for (;;) {
      const n = fs.readSync(fd, buf, 0, buf.length, pos);
      if (n <= 0) break;
      pos += n;
    }
  } finally {
    fs.closeSync(fd);
  }
}
