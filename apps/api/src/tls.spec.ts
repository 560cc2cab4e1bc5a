import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

import { parseApiConfig } from './env';
import { startApi } from './server';

/** A GET over HTTPS trusting only `ca`: status and body. */
function httpsGet(url: string, ca: Buffer, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    https
      .get(url, { ca, headers }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

// HTTPS (llama-server's --ssl-key-file / --ssl-cert-file): the API serves TLS with the given key
// and certificate, and the same routes in plain HTTP on a loopback port for this machine's
// console and CLI; bad files are errors naming the flag.
describe('the API over HTTPS', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-tls-'));
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  beforeAll(() => {
    // A self-signed certificate for 127.0.0.1, as a team would make one (or bring their CA's).
    const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], { encoding: 'utf8', timeout: 60_000 });
    if (r.status !== 0) throw new Error(`openssl: ${r.stderr}`);
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('serves TLS with the certificate, keys required as ever; plain HTTP only on its loopback port', async () => {
    const api = await startApi(parseApiConfig({ port: 0, dataDir: dir, sslKeyFile: key, sslCertFile: cert, staticKeys: ['sk-1'] }));
    try {
      expect(api.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const ca = fs.readFileSync(cert);
      expect(await httpsGet(`${api.url}/health`, ca)).toMatchObject({ status: 200 });
      expect((await httpsGet(`${api.url}/v1/models`, ca)).status).toBe(401);
      expect(await httpsGet(`${api.url}/v1/models`, ca, { authorization: 'Bearer sk-1' })).toEqual({ status: 200, body: JSON.stringify({ object: 'list', data: [] }) });
      // A client that does not trust the certificate is refused by its own TLS check.
      await expect(fetch(`${api.url}/health`)).rejects.toThrow();
      // Plain HTTP on the TLS port is not served.
      await expect(fetch(api.url.replace('https:', 'http:') + '/health').then((r) => r.status)).rejects.toThrow();
      // The loopback port: the same routes and the same keys.
      expect(api.localUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect((await fetch(`${api.localUrl}/health`)).status).toBe(200);
      expect((await fetch(`${api.localUrl}/v1/models`)).status).toBe(401);
      expect((await fetch(`${api.localUrl}/v1/models`, { headers: { authorization: 'Bearer sk-1' } })).status).toBe(200);
    } finally {
      await api.close();
    }
  });

  it('refuses half a configuration or files that are not a key and its certificate, naming them', async () => {
    expect(() => parseApiConfig({ sslKeyFile: key })).toThrow('HTTPS needs both the key (--ssl-key-file) and the certificate (--ssl-cert-file)');
    await expect(startApi(parseApiConfig({ port: 0, sslKeyFile: path.join(dir, 'none.pem'), sslCertFile: cert }))).rejects.toThrow(/--ssl-key-file: cannot read .*none.pem: ENOENT/);
    fs.writeFileSync(path.join(dir, 'junk.pem'), 'not a certificate');
    await expect(startApi(parseApiConfig({ port: 0, sslKeyFile: key, sslCertFile: path.join(dir, 'junk.pem') }))).rejects.toThrow(/--ssl-cert-file: .*junk.pem is not a PEM file/);
    // (The certificate given as the key: no private key in it.)
    await expect(startApi(parseApiConfig({ port: 0, sslKeyFile: cert, sslCertFile: cert }))).rejects.toThrow(/HTTPS: the key .* and the certificate .* do not make a TLS server/);
  });
});
