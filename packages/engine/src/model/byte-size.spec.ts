import { formatBytes, parseByteSize } from './byte-size';

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
