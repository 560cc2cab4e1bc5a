import { parseDurationMs } from './duration';

describe('parseDurationMs (Ollama keep_alive)', () => {
  it.each([
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['300ms', 300],
    ['1.5s', 1500],
    ['-1m', -60_000],
    ['0', 0],
    ['0s', 0],
    ['300', 300_000],
    ['-1', -1000],
    [' 10s ', 10_000],
    ['2h45m30.5s', 9_930_500],
  ])('%j = %d ms', (text, ms) => {
    expect(parseDurationMs(text)).toBe(ms);
  });

  it.each(['', 'm', '5 m', '5x', '--5m', '5m-', 'forever', '1e3s'])('rejects %j', (text) => {
    expect(parseDurationMs(text)).toBeNaN();
  });
});
