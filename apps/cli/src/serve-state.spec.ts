import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { SERVE_STATE_FILE } from './paths';
import { apiBaseUrl } from './serve-state';

describe("the API a client command (kail chat, create, show) talks to", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-state-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is --url, else $KAIL_API_URL, else the server of the data directory (its loopback address for HTTPS), else 127.0.0.1:8080', () => {
    expect(apiBaseUrl(undefined, dir, {})).toBe('http://127.0.0.1:8080');
    // (This process stands for a running kail serve: its pid is alive.)
    fs.writeFileSync(path.join(dir, SERVE_STATE_FILE), JSON.stringify({ pid: process.pid, services: { api: { address: 'https://127.0.0.1:9443', local: 'http://127.0.0.1:9444' } } }));
    expect(apiBaseUrl(undefined, dir, {})).toBe('http://127.0.0.1:9444');
    expect(apiBaseUrl(undefined, dir, { KAIL_API_URL: 'http://gpu-box:8080/' })).toBe('http://gpu-box:8080');
    expect(apiBaseUrl('http://other:1/', dir, { KAIL_API_URL: 'http://gpu-box:8080' })).toBe('http://other:1');
    expect(apiBaseUrl(undefined, dir, { KAIL_API_URL: '' })).toBe('http://127.0.0.1:9444');
  });
});
