import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { GgmlType } from '../gguf/constants';
import { GgufWriter, kv } from '../gguf/writer';
import { writeOllamaStoreModel } from './ollama-store-testing';
import { findOllamaModel, importOllamaModel, listOllamaModels, ollamaModelId, ollamaStoreDirs, parseOllamaName } from './ollama-store';

describe("an Ollama store's models, used without downloading them again", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kail-ollama-'));
  const store = path.join(dir, 'store');
  const models = path.join(dir, 'models');
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const gguf = (name: string, template?: string) => {
    const file = path.join(dir, name);
    const w = new GgufWriter(file);
    w.set('general.architecture', kv.str('llama'));
    if (template) w.set('tokenizer.chat_template', kv.str(template));
    w.addTensor({ name: 'x', shape: [4], type: GgmlType.F32 });
    w.writeTensorData('x', new Uint8Array(16));
    w.finish();
    return file;
  };

  it('reads names as Ollama does, with its defaults', () => {
    expect(parseOllamaName('llama3.2')).toEqual({ host: 'registry.ollama.ai', namespace: 'library', model: 'llama3.2', tag: 'latest' });
    expect(parseOllamaName('jane/coder:7b')).toEqual({ host: 'registry.ollama.ai', namespace: 'jane', model: 'coder', tag: '7b' });
    expect(parseOllamaName('hf.co/Qwen/Qwen3-8B-GGUF:Q4_K_M')).toEqual({ host: 'hf.co', namespace: 'Qwen', model: 'Qwen3-8B-GGUF', tag: 'Q4_K_M' });
    for (const bad of ['', 'a/b/c/d', 'x:y:z', '../up', 'sp ace']) expect(parseOllamaName(bad)).toBeNull();
    expect(ollamaModelId('llama3.2')).toBe('llama3.2');
    expect(ollamaModelId('jane/coder:7b')).toBe('coder:7b');
    expect(ollamaStoreDirs({ OLLAMA_MODELS: '/srv/ollama' })).toEqual(['/srv/ollama']);
    expect(ollamaStoreDirs({})[0]).toBe(path.join(os.homedir(), '.ollama', 'models'));
  });

  it('imports a model as a hard link to its blob, with its Modelfile settings beside it', async () => {
    const weights = gguf('w.gguf');
    writeOllamaStoreModel(store, 'tiny', weights, { params: { temperature: 0.2, stop: ['<|end|>'] }, system: 'Be brief.', license: 'MIT', template: '{{ .Prompt }}' });
    writeOllamaStoreModel(store, 'hf.co/Jane/Repo-GGUF:Q8_0', gguf('w2.gguf', '{{ messages }}'), { projector: true, template: '{{ .Prompt }}' });
    expect(listOllamaModels([store]).map((m) => m.name)).toEqual(['hf.co/Jane/Repo-GGUF:Q8_0', 'tiny:latest']);
    const m = findOllamaModel('TINY', [path.join(dir, 'none'), store]);
    expect(m).toMatchObject({ name: 'tiny:latest', parameters: { temperature: 0.2, stop: ['<|end|>'] }, system: 'Be brief.', license: 'MIT', template: '{{ .Prompt }}', skipped: [] });
    const r = await importOllamaModel(m, models);
    expect(r).toMatchObject({ id: 'tiny', path: path.join(models, 'tiny.gguf'), linked: true });
    expect(fs.statSync(r.path).ino).toBe(fs.statSync(m.model).ino);
    expect(r.notes).toEqual([expect.stringMatching(/no chat template of its own: Ollama's Go template, kept with the model, renders its chats on Ollama's/)]);
    expect(JSON.parse(fs.readFileSync(path.join(models, 'tiny.modelfile.json'), 'utf8'))).toEqual({ system: 'Be brief.', template: '{{ .Prompt }}', parameters: { temperature: 0.2, stop: ['<|end|>'] }, license: 'MIT' });
    await expect(importOllamaModel(m, models)).rejects.toThrow(/model 'tiny' is already in .* \(--force replaces it\)/);
    const hf = await importOllamaModel(findOllamaModel('hf.co/Jane/Repo-GGUF:Q8_0', [store]), models);
    expect(hf.id).toBe('Repo-GGUF:Q8_0');
    expect(hf.notes).toEqual([expect.stringMatching(/vision projector is not brought/)]);
    expect(fs.existsSync(path.join(models, 'Repo-GGUF:Q8_0.modelfile.json'))).toBe(false);
  });

  it('copies a model it cannot link (another file system), whole or not at all', async () => {
    // (/dev/shm is a tmpfs: another file system than the temporary directory's disk, where there is one.)
    if (!fs.existsSync('/dev/shm') || fs.statSync('/dev/shm').dev === fs.statSync(dir).dev) return;
    const shm = fs.mkdtempSync('/dev/shm/kail-ollama-');
    try {
      writeOllamaStoreModel(shm, 'far:1b', gguf('far.gguf'), { system: 'Far.' });
      const r = await importOllamaModel(findOllamaModel('far:1b', [shm]), models);
      expect(r.linked).toBe(false);
      expect(fs.readFileSync(r.path)).toEqual(fs.readFileSync(path.join(dir, 'far.gguf')));
      expect(fs.readdirSync(models).filter((f) => f.endsWith('.part'))).toEqual([]);
    } finally {
      fs.rmSync(shm, { recursive: true, force: true });
    }
  });

  it('says where it looked for a model it cannot find, and what is wrong with one it cannot use', () => {
    expect(() => findOllamaModel('nope:1b', [store])).toThrow(`no Ollama model 'nope:1b' in ${store} (ollama list shows its models`);
    const manifest = path.join(store, 'manifests/registry.ollama.ai/library/broken/latest');
    fs.mkdirSync(path.dirname(manifest), { recursive: true });
    fs.writeFileSync(manifest, '{ not json');
    expect(() => findOllamaModel('broken', [store])).toThrow(/broken\/latest: not an Ollama manifest/);
    const hex = createHash('sha256').update('gone').digest('hex');
    fs.writeFileSync(manifest, JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${hex}` }] }));
    expect(() => findOllamaModel('broken', [store])).toThrow(/broken:latest: its weights .* are missing from the Ollama store/);
    fs.writeFileSync(manifest, JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.tensor', digest: `sha256:${hex}` }] }));
    expect(() => findOllamaModel('broken', [store])).toThrow(/has 0 model layers/);
    expect(listOllamaModels([store]).map((m) => m.name)).not.toContain('broken:latest');
  });
});
