import { bindingCandidates, loadBinding, NativeLoadError } from './index';

describe('native addon', () => {
  it('loads from the local build and reports SIMD features detected at run time', () => {
    const info = loadBinding().systemInfo();
    expect(info.logicalCores).toBeGreaterThanOrEqual(1);
    expect(info.physicalCores).toBeGreaterThanOrEqual(1);
    expect(['avx512', 'avx2', 'scalar']).toContain(info.kernelLevel);
    // Compare with the kernel's own view of the CPU flags, where /proc/cpuinfo exists.
    const fs = require('node:fs') as typeof import('node:fs');
    if (fs.existsSync('/proc/cpuinfo')) {
      const flags = new Set(fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m)?.[1].trim().split(/\s+/));
      expect(info.simd.includes('avx2')).toBe(flags.has('avx2'));
      expect(info.simd.includes('avx512f')).toBe(flags.has('avx512f'));
      expect(info.simd.includes('avx512_vnni')).toBe(flags.has('avx512_vnni'));
    }
  });

  it('counts only the CPUs this process may run on, and defaults to that many compute threads', () => {
    const info = loadBinding().systemInfo();
    expect(info.logicalCores).toBeLessThanOrEqual(info.onlineCores);
    expect(info.defaultThreads).toBeGreaterThanOrEqual(1);
    expect(info.defaultThreads).toBeLessThanOrEqual(info.physicalCores);
    const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
    const fs = require('node:fs') as typeof import('node:fs');
    const path = require('node:path') as typeof import('node:path');
    const os = require('node:os') as typeof import('node:os');
    const dist = path.resolve(__dirname, '../dist/index.js');
    if (spawnSync('taskset', ['-V']).status !== 0 || !fs.existsSync(dist)) {
      // eslint-disable-next-line no-console
      console.log('affinity check skipped: no taskset or no dist build');
      return;
    }
    // One CPU of the mask (taskset -c N), as a container's cpuset or taskset leaves a process.
    const script = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kail-aff-')), 'info.js');
    fs.writeFileSync(script, `console.log(JSON.stringify(require(${JSON.stringify(dist)}).loadBinding().systemInfo()))`);
    const cpu = String(spawnSync('taskset', ['-pc', String(process.pid)], { encoding: 'utf8' }).stdout.split(':').pop()!.trim().split(/[,-]/)[0]);
    const r = spawnSync('taskset', ['-c', cpu, process.execPath, script], { encoding: 'utf8' });
    fs.rmSync(path.dirname(script), { recursive: true, force: true });
    expect(r.stderr).toBe('');
    const one = JSON.parse(r.stdout);
    expect([one.logicalCores, one.physicalCores, one.defaultThreads, one.onlineCores]).toEqual([1, 1, 1, info.onlineCores]);
  });

  it('quantizes in slices on several threads to the same bytes as on one, for every format it writes', () => {
    const addon = loadBinding();
    // 700 blocks of 256 (or 5600 of 32): two whole 64 Ki-value slices and a partial one.
    const n = 256 * 700;
    const x = new Float32Array(n);
    let s = 12345;
    for (let i = 0; i < n; i++) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      x[i] = ((s / 2 ** 32) * 2 - 1) * (i % 997 === 0 ? 40 : 1);
    }
    x.fill(0, 1000, 1300);
    let formats = 0;
    for (let type = 0; type < 64; type++) {
      let one: Uint8Array;
      try {
        one = addon.quantize(type, x);
      } catch (e) {
        expect((e as { code?: string }).code).toMatch(/KAIL_E_(UNSUPPORTED|INVALID_ARG)/);
        continue;
      }
      formats++;
      for (const threads of [2, 3]) expect(Buffer.from(addon.quantize(type, x, threads)).equals(Buffer.from(one))).toBe(true);
    }
    expect(formats).toBeGreaterThanOrEqual(20);
    expect(() => addon.quantize(8, x, 0)).toThrow(/threads/);
  });

  it('converts between types slice by slice: dequantize then quantize on any thread count, the file quantizer for IQ4', () => {
    const addon = loadBinding();
    const n = 256 * 700;
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = Math.sin(i * 0.37) * (i % 501 === 0 ? 9 : 1);
    const f16 = addon.quantize(1, x);
    const xs = addon.dequantize(1, f16, n);
    // F16 -> Q4_K / Q8_0 / F32 / BF16: what dequantize and quantize give, on 1, 2 and 3 threads.
    for (const to of [12, 8, 0, 30]) {
      const want = to === 0 ? new Uint8Array(xs.buffer) : addon.quantize(to, xs);
      for (const threads of [1, 2, 3]) expect(Buffer.from(addon.convert(1, f16, n, to, threads)).equals(Buffer.from(want))).toBe(true);
    }
    // From F32 itself, and requantizing (Q8_0 -> Q6_K).
    expect(Buffer.from(addon.convert(0, new Uint8Array(x.buffer), n, 14, 2)).equals(Buffer.from(addon.quantize(14, x)))).toBe(true);
    const q8 = addon.quantize(8, x);
    expect(Buffer.from(addon.convert(8, q8, n, 14)).equals(Buffer.from(addon.quantize(14, addon.dequantize(8, q8, n))))).toBe(true);
    // IQ4_XS through ggml's search: not the test writer's (quantize's) bytes, but as close or closer.
    const iq = addon.convert(0, new Uint8Array(x.buffer), n, 23, 2);
    expect(iq.byteLength).toBe((n / 256) * 136);
    const err = (q: Uint8Array) => addon.dequantize(23, q, n).reduce((a, v, i) => a + (v - x[i]) ** 2, 0);
    expect(err(iq)).toBeLessThanOrEqual(err(addon.quantize(23, x)) * 1.02);
    // IQ2_XXS is written only with importance values (as ggml asserts); Q8_K (an activation type) never.
    expect(() => addon.convert(1, f16, n, 16)).toThrow(/IQ2_XXS needs an importance matrix/);
    expect(addon.convert(1, f16, n, 16, 1, new Float32Array(256).fill(1)).byteLength).toBe((n / 256) * 66);
    expect(() => addon.convert(1, f16, n, 16, 1, new Float32Array(100))).toThrow(/an importance matrix of 100 values does not give whole rows of IQ2_XXS blocks/);
    expect(() => addon.convert(1, f16, n, 15)).toThrow(/Q8_K is not written here/);
    expect(() => addon.convert(1, f16.subarray(2), n, 12)).toThrow(/are 358400 bytes, got 358398/);
    expect(() => addon.convert(1, f16, n - 32, 12)).toThrow(/not whole blocks of F16 \(1\) and Q4_K \(256\)/);
    expect(() => addon.convert(1, f16, n, 12, 0)).toThrow(/convert: threads must be 1 to 1024, got 0/);
  });

  it('fails with one error listing every attempt when nothing loads', () => {
    const env = { KAIL_NATIVE_PATH: '/nonexistent/kail_native.node' };
    expect(bindingCandidates(env)[0].path).toBe('/nonexistent/kail_native.node');
    // A fresh module registry so the cached addon is not reused.
    jest.isolateModules(() => {
      const fs = require('node:fs') as typeof import('node:fs');
      const spy = jest.spyOn(fs, 'existsSync').mockReturnValue(false);
      try {
        const mod = require('./load-binding') as typeof import('./load-binding');
        let err: unknown;
        try {
          mod.loadBinding(env);
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(Error);
        expect((err as NativeLoadError).code).toBe('KAIL_E_NATIVE_LOAD');
        expect((err as NativeLoadError).attempts).toHaveLength(3);
        expect((err as Error).message).toContain('/nonexistent/kail_native.node');
        expect((err as Error).message).toContain('build/addon/Release/kail_native.node');
        expect((err as Error).message).toContain('nx run core-native:build-native');
      } finally {
        spy.mockRestore();
      }
    });
  });

  it('runs the CUDA kernel where a GPU exists, and says why not elsewhere', () => {
    const addon = loadBinding();
    const info = addon.systemInfo();
    const block = new Uint8Array(34);
    block[0] = 0x00; block[1] = 0x3c; // fp16 1.0
    for (let i = 0; i < 32; i++) block[2 + i] = (i - 16) & 0xff;
    if (info.cudaDevices.length === 0) {
      expect(() => addon.cudaDequantizeQ8_0(block)).toThrow(/CUDA/);
      return;
    }
    const out = addon.cudaDequantizeQ8_0(block);
    expect(Array.from(out)).toEqual(Array.from({ length: 32 }, (_, i) => i - 16));
  });
});
