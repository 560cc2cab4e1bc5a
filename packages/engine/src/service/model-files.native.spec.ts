import fs from 'node:fs';
import path from 'node:path';
import { engine as pb } from '@kailstream/proto';

import { EngineError } from '../errors';
import { tempDir, writeTestModel } from '../testing';
import { LocalModelHost } from './model-host';

// Ollama's create brings an uploaded GGUF into the models directory through importModelFile.
describe('importing a GGUF file into the models directory', () => {
  it('checks the header, links the file in, and refuses what it cannot take', async () => {
    const dir = tempDir();
    const models = `${dir}/models`;
    fs.mkdirSync(models);
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 64, modelsDir: models });
    try {
      const src = writeTestModel(dir, 'tiny-llama', 'Q8_0', 2);
      await host.importModelFile(src, 'imported');
      expect(fs.statSync(`${models}/imported.gguf`).size).toBe(fs.statSync(src).size);
      expect((await host.listModelFiles()).files.map((f) => f.id)).toContain('imported');
      const refuse = async (p: Promise<void>, code: string, why: RegExp) => {
        await expect(p).rejects.toMatchObject({ code });
        await expect(p).rejects.toThrow(why);
      };
      await refuse(host.importModelFile(src, 'imported'), 'KAIL_E_ALREADY_EXISTS', /already in the models directory/);
      await refuse(host.importModelFile('relative.gguf', 'x'), 'KAIL_E_INVALID_ARG', /must be absolute/);
      await refuse(host.importModelFile(`${dir}/none.gguf`, 'x'), 'KAIL_E_NOT_FOUND', /does not exist/);
      fs.writeFileSync(`${dir}/junk.gguf`, 'not a gguf file at all');
      await expect(host.importModelFile(`${dir}/junk.gguf`, 'x')).rejects.toBeInstanceOf(EngineError);
      expect(fs.existsSync(`${models}/x.gguf`)).toBe(false);
      await refuse(host.importModelFile(src, '../escape'), 'KAIL_E_INVALID_ARG', /destination must be a model id/);
    } finally {
      await host.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

// Large models come in splits (PREFIX-00001-of-0000N.gguf, llama.cpp's gguf-split): one model.
describe('a split model in the models directory', () => {
  it('is listed once, as its first split, with every split in its size; loads by that id; delete takes all splits', async () => {
    const dir = tempDir();
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 64, modelsDir: dir });
    try {
      const whole = writeTestModel(dir, 'tiny-qwen3moe', 'Q8_0', 3, ['--split-max-tensors', '10']);
      const first = whole.replace(/\.gguf$/, '-00001-of-00003.gguf');
      const all = [1, 2, 3].map((i) => whole.replace(/\.gguf$/, `-0000${i}-of-00003.gguf`));
      expect(all.every((f) => fs.existsSync(f))).toBe(true);
      const files = (await host.listModelFiles()).files;
      expect(files.map((f) => f.path)).toEqual([first]);
      expect(files[0].error).toBe('');
      expect(files[0].sizeBytes).toBe(all.reduce((a, f) => a + fs.statSync(f).size, 0));
      const info = await host.loadModel(pb.LoadModelRequest.fromPartial({ path: files[0].id }));
      expect(Number(info.fileBytes)).toBe(files[0].sizeBytes);
      await expect(host.copyModelFile(files[0].id, 'copy')).rejects.toThrow(/split over 3 files/);
      await expect(host.importModelFile(first, 'whole')).rejects.toThrow(/is split over 3 files, which find each other by name/);
      // A later split alone is not a model: deleting it would break the one it belongs to.
      const second = path.basename(all[1], '.gguf');
      await expect(host.deleteModelFile(second)).rejects.toThrow(`'${second}' is split 2 of 3 of the model '${files[0].id}': remove that`);
      expect(all.every((f) => fs.existsSync(f))).toBe(true);
      await host.deleteModelFile(files[0].id);
      expect(all.some((f) => fs.existsSync(f))).toBe(false);
    } finally {
      await host.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

// What Ollama's create keeps for a model (ID.modelfile.json, written by the API) follows its file.
describe("a model's Modelfile sidecar in the models directory", () => {
  it('is copied with the model and deleted with it, and never listed as a model', async () => {
    const dir = tempDir();
    const host = new LocalModelHost({ seqsPerModel: 1, defaultContext: 64, modelsDir: dir });
    try {
      fs.copyFileSync(writeTestModel(tempDir(), 'tiny-llama', 'Q8_0', 2), `${dir}/a.gguf`);
      fs.writeFileSync(`${dir}/a.modelfile.json`, JSON.stringify({ system: 'Be brief.' }));
      await host.copyModelFile('a', 'b');
      expect(JSON.parse(fs.readFileSync(`${dir}/b.modelfile.json`, 'utf8'))).toEqual({ system: 'Be brief.' });
      expect((await host.listModelFiles()).files.map((f) => f.id)).toEqual(['a', 'b']);
      await host.deleteModelFile('b');
      expect(fs.existsSync(`${dir}/b.gguf`) || fs.existsSync(`${dir}/b.modelfile.json`)).toBe(false);
      expect(fs.existsSync(`${dir}/a.modelfile.json`)).toBe(true);
      // A model without one copies without one.
      fs.rmSync(`${dir}/a.modelfile.json`);
      await host.copyModelFile('a', 'c');
      expect(fs.existsSync(`${dir}/c.modelfile.json`)).toBe(false);
    } finally {
      await host.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
