import { formatBytes, parseByteSize } from './byte-size';
import { parseRamBudget, parseVramBudget } from './model';

describe('parseByteSize', () => {
  it.each([
    ['4096', 4096],
    ['8G', 8 * 2 ** 30],
    ['8g', 8 * 2 ** 30],
    ['512M', 512 * 2 ** 20],
    ['1.5GiB', 1.5 * 2 ** 30],
    ['64KB', 64 * 1024],
    ['2T', 2 * 2 ** 40],
    ['100B', 100],
    [' 3 MiB ', 3 * 2 ** 20],
  ])('%s = %d bytes', (text, bytes) => {
    expect(parseByteSize(text)).toBe(bytes);
  });

  it.each(['', 'G', '-1G', '8X', '8 GG', '1e9', 'iB'])('rejects %j', (text) => {
    expect(() => parseByteSize(text)).toThrow(expect.objectContaining({ code: 'KAIL_E_INVALID_ARG' }));
  });
});

describe('formatBytes', () => {
  it('uses binary units like the native plan', () => {
    expect(formatBytes(12)).toBe('12 B');
    expect(formatBytes(780 * 1024)).toBe('780.0 KiB');
    expect(formatBytes(5.04 * 2 ** 20)).toBe('5.04 MiB');
    expect(formatBytes(8 * 2 ** 30)).toBe('8.00 GiB');
  });
});

describe('parseRamBudget', () => {
  const now = () => ({ availableBytes: 10 * 2 ** 30 + 12345, cgroup: null });
  it('takes a byte size, or a share of the memory available now rounded down to a MiB', () => {
    expect(parseRamBudget('8G', now)).toBe(8 * 2 ** 30);
    expect(parseRamBudget('50%', now)).toBe(5 * 2 ** 30);
    expect(parseRamBudget(' 12.5 % ', now)).toBe(1280 * 2 ** 20);
    expect(parseRamBudget('100%', now)).toBe(10 * 2 ** 30);
  });

  it.each([['0%', /above 0% and at most 100%/], ['101%', /above 0% and at most 100%/], ['-5%', /or a share of the memory available \(e\.g\. 80%\)/], ['lots', /not a byte size .* or a share/]])(
    'rejects %j',
    (text, msg) => {
      expect(() => parseRamBudget(text, now)).toThrow(msg);
    },
  );

  it('refuses a share smaller than a MiB', () => {
    expect(() => parseRamBudget('0.001%', () => ({ availableBytes: 2 ** 30, cgroup: null }))).toThrow(/less than 1 MiB/);
  });
});

describe('parseVramBudget', () => {
  it("takes a byte size, or a share of GPU 0's free memory; a share without a device is an error", () => {
    const gpu = () => [{ freeBytes: 80 * 2 ** 30 }, { freeBytes: 2 ** 30 }];
    expect(parseVramBudget('8G', gpu)).toBe(8 * 2 ** 30);
    expect(parseVramBudget('90%', gpu)).toBe(72 * 2 ** 30);
    expect(parseVramBudget('8G', () => [])).toBe(8 * 2 ** 30);
    expect(() => parseVramBudget('90%', () => [])).toThrow(expect.objectContaining({ code: 'KAIL_E_UNSUPPORTED', message: expect.stringMatching(/needs a CUDA device/) }));
    expect(() => parseVramBudget('120%', gpu)).toThrow(/a share of GPU 0's free memory must be above 0% and at most 100%/);
  });
});
