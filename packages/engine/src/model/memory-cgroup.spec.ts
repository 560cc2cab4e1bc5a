// cgroupMemoryLimit over fake /proc and /sys trees: the v2 and v1 layouts, a container's cgroup
// namespace and the host's view of it, limits on an ancestor, memory.high, page cache counted as
// reclaimable, and no limit at all. Then the live machine: whatever it is, the answer is consistent.
import fs from 'node:fs';
import path from 'node:path';

import { tempDir } from '../testing';
import { cgroupMemoryLimit } from './memory-cgroup';
import { memoryNow } from './model';

const GIB = 2 ** 30;
const MIB = 2 ** 20;
const V1_NONE = '9223372036854771712';

function tree(files: Record<string, string>): string {
  const root = tempDir('kail-cgroup-');
  for (const [f, text] of Object.entries(files)) {
    fs.mkdirSync(path.join(root, path.dirname(f)), { recursive: true });
    fs.writeFileSync(path.join(root, f), text);
  }
  return root;
}

const mountinfo = (...lines: string[]) => ['22 1 0:21 / /proc rw - proc proc rw', ...lines].join('\n') + '\n';
const V2_MOUNT = '30 22 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate';
const v2stat = (file: number) => `anon 1000\nfile ${file}\nactive_file ${file / 2}\ninactive_file ${file / 2}\nshmem 0\n`;

describe('cgroupMemoryLimit', () => {
  const roots: string[] = [];
  const mk = (files: Record<string, string>) => {
    const r = tree(files);
    roots.push(r);
    return r;
  };
  afterAll(() => roots.forEach((r) => fs.rmSync(r, { recursive: true, force: true })));

  it('reads a v2 limit on an ancestor, counting its page cache as reclaimable', () => {
    const root = mk({
      'proc/self/cgroup': '0::/system.slice/app.service\n',
      'proc/self/mountinfo': mountinfo(V2_MOUNT),
      'sys/fs/cgroup/cgroup.controllers': 'cpu memory io\n',
      'sys/fs/cgroup/system.slice/memory.max': String(6 * GIB),
      'sys/fs/cgroup/system.slice/memory.current': String(2 * GIB),
      'sys/fs/cgroup/system.slice/memory.stat': v2stat(GIB),
      'sys/fs/cgroup/system.slice/app.service/memory.max': 'max',
      'sys/fs/cgroup/system.slice/app.service/memory.high': 'max',
      'sys/fs/cgroup/system.slice/app.service/memory.current': String(GIB),
      'sys/fs/cgroup/system.slice/app.service/memory.stat': v2stat(0),
    });
    const l = cgroupMemoryLimit(root)!;
    expect(l).not.toBeNull();
    expect(l.dir).toBe(path.join(root, 'sys/fs/cgroup/system.slice'));
    expect(l.version).toBe(2);
    expect(l.limitBytes).toBe(6 * GIB);
    expect(l.usedBytes).toBe(2 * GIB);
    expect(l.reclaimableBytes).toBe(GIB);
    expect(l.headroomBytes).toBe(5 * GIB); // 6 GiB - (2 GiB - 1 GiB of page cache)
  });

  it('takes the group leaving the least room, and memory.high when it is below memory.max', () => {
    const root = mk({
      'proc/self/cgroup': '0::/a/b\n',
      'proc/self/mountinfo': mountinfo(V2_MOUNT),
      'sys/fs/cgroup/a/memory.max': String(8 * GIB),
      'sys/fs/cgroup/a/memory.current': String(7 * GIB),
      'sys/fs/cgroup/a/memory.stat': v2stat(0),
      'sys/fs/cgroup/a/b/memory.max': String(4 * GIB),
      'sys/fs/cgroup/a/b/memory.high': String(3 * GIB),
      'sys/fs/cgroup/a/b/memory.current': String(512 * MIB),
      'sys/fs/cgroup/a/b/memory.stat': v2stat(0),
    });
    const l = cgroupMemoryLimit(root)!;
    // a: 8 - 7 = 1 GiB of room; b: 3 GiB (high) - 0.5 = 2.5 GiB. a is tighter.
    expect(l.dir).toBe(path.join(root, 'sys/fs/cgroup/a'));
    expect(l.headroomBytes).toBe(GIB);
    fs.writeFileSync(path.join(root, 'sys/fs/cgroup/a/memory.current'), String(GIB));
    const b = cgroupMemoryLimit(root)!;
    expect(b.dir).toBe(path.join(root, 'sys/fs/cgroup/a/b'));
    expect(b.limitBytes).toBe(3 * GIB);
    expect(b.headroomBytes).toBe(2.5 * GIB);
  });

  it('reads v1 inside a container (the mount root is the container\'s group) and on the host', () => {
    const id = '/docker/0123abcd';
    const files = {
      'proc/self/cgroup': `12:pids:${id}\n5:memory:${id}\n1:name=systemd:${id}\n0::/\n`,
      'proc/self/mountinfo': mountinfo(
        `31 30 0:28 ${id} /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory`,
        `32 30 0:29 ${id} /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids`,
      ),
      'sys/fs/cgroup/memory/memory.limit_in_bytes': String(2 * GIB),
      'sys/fs/cgroup/memory/memory.usage_in_bytes': String(GIB),
      'sys/fs/cgroup/memory/memory.stat': `cache 800\nrss 200\ntotal_active_file ${128 * MIB}\ntotal_inactive_file ${384 * MIB}\n`,
    };
    const l = cgroupMemoryLimit(mk(files))!;
    expect(l.version).toBe(1);
    expect(l.limitBytes).toBe(2 * GIB);
    expect(l.headroomBytes).toBe(1.5 * GIB);

    // The host's view: the hierarchy mounted at its root, the group a directory below it.
    const host = mk({
      'proc/self/cgroup': `5:memory:${id}\n`,
      'proc/self/mountinfo': mountinfo('31 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory'),
      'sys/fs/cgroup/memory/memory.limit_in_bytes': V1_NONE,
      'sys/fs/cgroup/memory/memory.usage_in_bytes': String(10 * GIB),
      'sys/fs/cgroup/memory/memory.stat': 'total_active_file 0\ntotal_inactive_file 0\n',
      [`sys/fs/cgroup/memory${id}/memory.limit_in_bytes`]: String(2 * GIB),
      [`sys/fs/cgroup/memory${id}/memory.usage_in_bytes`]: String(GIB),
      [`sys/fs/cgroup/memory${id}/memory.stat`]: 'total_active_file 0\ntotal_inactive_file 0\n',
    });
    const h = cgroupMemoryLimit(host)!;
    expect(h.dir).toBe(path.join(host, `sys/fs/cgroup/memory${id}`));
    expect(h.headroomBytes).toBe(GIB);
  });

  it('is null with no limit set, no memory hierarchy, or no /proc', () => {
    const unlimited = mk({
      'proc/self/cgroup': '4:memory:/user\n0::/user\n',
      'proc/self/mountinfo': mountinfo(V2_MOUNT, '34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory'),
      'sys/fs/cgroup/user/memory.max': 'max',
      'sys/fs/cgroup/user/memory.current': String(GIB),
      'sys/fs/cgroup/user/memory.stat': v2stat(0),
      'sys/fs/cgroup/memory/user/memory.limit_in_bytes': V1_NONE,
      'sys/fs/cgroup/memory/user/memory.usage_in_bytes': String(GIB),
      'sys/fs/cgroup/memory/user/memory.stat': '',
      'sys/fs/cgroup/memory/memory.limit_in_bytes': V1_NONE,
    });
    expect(cgroupMemoryLimit(unlimited)).toBeNull();
    expect(cgroupMemoryLimit(mk({ 'proc/self/cgroup': '0::/\n', 'proc/self/mountinfo': mountinfo() }))).toBeNull();
    expect(cgroupMemoryLimit(mk({}))).toBeNull();
  });

  it('reads a hierarchy mounted at a path with a space (mountinfo escapes it as \\040)', () => {
    const root = mk({
      'proc/self/cgroup': '0::/g\n',
      'proc/self/mountinfo': mountinfo('30 22 0:27 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw'),
      'sys/fs/my cgroup/g/memory.max': String(GIB),
      'sys/fs/my cgroup/g/memory.current': String(256 * MIB),
      'sys/fs/my cgroup/g/memory.stat': v2stat(0),
    });
    const l = cgroupMemoryLimit(root)!;
    expect(l.dir).toBe(path.join(root, 'sys/fs/my cgroup/g'));
    expect(l.headroomBytes).toBe(768 * MIB);
  });

  it('never reports negative room for a group over its limit', () => {
    const root = mk({
      'proc/self/cgroup': '0::/g\n',
      'proc/self/mountinfo': mountinfo(V2_MOUNT),
      'sys/fs/cgroup/g/memory.max': String(GIB),
      'sys/fs/cgroup/g/memory.current': String(2 * GIB),
      'sys/fs/cgroup/g/memory.stat': v2stat(0),
    });
    expect(cgroupMemoryLimit(root)!.headroomBytes).toBe(0);
  });

  it('on this machine: the memory available now is within the cgroup headroom when there is a limit', () => {
    const l = cgroupMemoryLimit();
    const avail = memoryNow().availableBytes;
    expect(avail).toBeGreaterThan(0);
    if (l) expect(avail).toBeLessThanOrEqual(l.headroomBytes);
  });
});
