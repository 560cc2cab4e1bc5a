// Writes a model into a directory laid out as an Ollama store (manifests/HOST/NAMESPACE/MODEL/TAG,
// blobs/sha256-<hex>), as `ollama pull` leaves one: for tests of importing from Ollama.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { parseOllamaName } from './ollama-store';

export function writeOllamaStoreModel(
  store: string,
  name: string,
  gguf: string,
  o: { params?: Record<string, unknown>; system?: string; license?: string; template?: string; projector?: boolean } = {},
): void {
  const n = parseOllamaName(name);
  if (!n) throw new Error(`not an Ollama name: ${name}`);
  fs.mkdirSync(path.join(store, 'blobs'), { recursive: true });
  const blob = (data: Buffer | string, mediaType: string) => {
    const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data);
    const hex = createHash('sha256').update(bytes).digest('hex');
    fs.writeFileSync(path.join(store, 'blobs', `sha256-${hex}`), bytes);
    return { mediaType, digest: `sha256:${hex}`, size: bytes.length };
  };
  const media = 'application/vnd.ollama.image.';
  const layers = [
    blob(fs.readFileSync(gguf), `${media}model`),
    ...(o.projector ? [blob('GGUF projector', `${media}projector`)] : []),
    ...(o.template !== undefined ? [blob(o.template, `${media}template`)] : []),
    ...(o.system !== undefined ? [blob(o.system, `${media}system`)] : []),
    ...(o.license !== undefined ? [blob(o.license, `${media}license`)] : []),
    ...(o.params !== undefined ? [blob(JSON.stringify(o.params), `${media}params`)] : []),
  ];
  const config = blob(JSON.stringify({ model_format: 'gguf', model_family: 'llama' }), 'application/vnd.docker.container.image.v1+json');
  const manifest = path.join(store, 'manifests', n.host, n.namespace, n.model, n.tag);
  fs.mkdirSync(path.dirname(manifest), { recursive: true });
  fs.writeFileSync(manifest, JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.docker.distribution.manifest.v2+json', config, layers }));
}
