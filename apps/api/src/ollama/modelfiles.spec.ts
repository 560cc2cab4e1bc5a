import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';

import { blobDigest, BlobStore, ModelfileStore } from './modelfiles';

describe("Ollama create's stores", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-modelfiles-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('keeps Modelfiles across restarts, drops empty ones, survives a damaged file and odd ids', () => {
    const file = path.join(dir, 'm.json');
    const a = new ModelfileStore(file);
    a.set('terse', { system: 'Be brief.', parameters: { temperature: 0.2, stop: ['x'] } });
    a.set('__proto__', { system: 'odd id' });
    a.set('empty', { parameters: {}, messages: undefined });
    a.copy('terse', 'terse2');
    const b = new ModelfileStore(file);
    expect(b.get('terse')).toEqual({ system: 'Be brief.', parameters: { temperature: 0.2, stop: ['x'] } });
    expect(b.get('terse2')).toEqual(b.get('terse'));
    expect(b.get('__proto__')).toEqual({ system: 'odd id' });
    expect(b.get('empty')).toBeUndefined();
    expect(b.get('toString')).toBeUndefined();
    b.delete('terse');
    expect(new ModelfileStore(file).get('terse')).toBeUndefined();
    fs.writeFileSync(file, '{ not json');
    const notes: string[] = [];
    expect(new ModelfileStore(file, null, (m) => notes.push(m)).get('terse2')).toBeUndefined();
    const aside = fs.readdirSync(dir).filter((f) => f.startsWith('m.json.damaged-'));
    expect(aside).toHaveLength(1);
    expect(fs.readFileSync(path.join(dir, aside[0]), 'utf8')).toBe('{ not json');
    expect(notes).toHaveLength(1);
    expect(notes[0]).toContain(`${file} is damaged (`);
    expect(notes[0]).toContain(`: moved it to ${path.join(dir, aside[0])}; starting without it`);
  });

  it("keeps a models-directory model's settings next to its file (ID.modelfile.json), and moves older entries there", () => {
    const file = path.join(dir, 'side.json');
    const models = path.join(dir, 'models');
    fs.mkdirSync(models);
    // Kept in the data directory's file before the sidecars: one of a model now in the models directory, one not.
    fs.writeFileSync(file, JSON.stringify({ old: { system: 'From before.' }, elsewhere: { system: 'Loaded by -m.' } }));
    fs.writeFileSync(path.join(models, 'old.gguf'), 'GGUF');
    fs.writeFileSync(path.join(models, 'new.gguf'), 'GGUF');
    const s = new ModelfileStore(file, models);
    expect(JSON.parse(fs.readFileSync(path.join(models, 'old.modelfile.json'), 'utf8'))).toEqual({ system: 'From before.' });
    expect(JSON.parse(fs.readFileSync(file, 'utf8'))).toEqual({ elsewhere: { system: 'Loaded by -m.' } });
    expect([s.get('old')?.system, s.get('elsewhere')?.system]).toEqual(['From before.', 'Loaded by -m.']);
    s.set('new', { system: 'Be brief.', parameters: { temperature: 0 } });
    expect(JSON.parse(fs.readFileSync(path.join(models, 'new.modelfile.json'), 'utf8'))).toEqual({ system: 'Be brief.', parameters: { temperature: 0 } });
    expect(JSON.parse(fs.readFileSync(file, 'utf8'))).not.toHaveProperty('new');
    // The file gone (kail rm, or by hand, taking the sidecar): a new file of that name starts clean.
    fs.rmSync(path.join(models, 'new.gguf'));
    fs.rmSync(path.join(models, 'new.modelfile.json'));
    fs.writeFileSync(path.join(models, 'new.gguf'), 'GGUF');
    expect(s.get('new')).toBeUndefined();
    // Settings emptied: the sidecar goes; a damaged sidecar reads as none.
    s.set('old', {});
    expect(fs.existsSync(path.join(models, 'old.modelfile.json'))).toBe(false);
    fs.writeFileSync(path.join(models, 'old.modelfile.json'), '{ nope');
    expect(s.get('old')).toBeUndefined();
    s.copy('elsewhere', 'new');
    expect(JSON.parse(fs.readFileSync(path.join(models, 'new.modelfile.json'), 'utf8'))).toEqual({ system: 'Loaded by -m.' });
  });

  it('takes a blob only when the whole body has the digest it was named by', async () => {
    const blobs = new BlobStore(path.join(dir, 'blobs'));
    const body = Buffer.from('GGUF and then some bytes');
    const hex = createHash('sha256').update(body).digest('hex');
    expect(blobDigest(`sha256:${hex}`)).toBe(hex);
    expect(blobDigest(`sha256-${hex}`)).toBe(hex);
    expect(blobDigest('sha256:../../etc/passwd')).toBeNull();
    expect(blobDigest(`SHA256:${hex}`)).toBeNull();
    const wrong = await blobs.put(hex, Readable.from([body.subarray(0, 10)]));
    expect(wrong.ok).toBe(false);
    expect(blobs.has(hex)).toBe(false);
    expect(fs.readdirSync(blobs.dir)).toEqual([]);
    const right = await blobs.put(hex, Readable.from([body.subarray(0, 10), body.subarray(10)]));
    expect(right).toEqual({ ok: true, bytes: body.length });
    expect(fs.readFileSync(blobs.path(hex))).toEqual(body);
  });
});
