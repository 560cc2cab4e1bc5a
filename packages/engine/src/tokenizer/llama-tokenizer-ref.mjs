#!/usr/bin/env node
// llama.cpp's own tokenizer, for parity tests: the node-llama-cpp devDependency (CPU prebuilt,
// never built or downloaded) loads a vocabulary and answers for it. Run as a child process so
// node-llama-cpp's native library never shares a process with our addon or with jest.
//
//   node llama-tokenizer-ref.mjs JOB.json
//     JOB.json: [{"model": "v.gguf", "nVocab": 32000, "texts": ["..."], "ids": [[1, 2], ...]}, ...]
//               (optional per job: "metadataOverrides", llama.cpp's kv overrides, e.g.
//               {"tokenizer": {"ggml": {"pre": "falcon"}}}, which llama.cpp echoes on stdout, so the
//               answer is stdout's last line; "nVocab": 0 skips the per-token answers)
//     stdout:   one object per job: {"tokenize": [[...]], "tokenizeSpecial": [[...]],
//               "detokenize": ["..."], "detokenizeSpecial": ["..."], "attrs": [...], "eog": [...],
//               "bos", "eos", "eot", "nl", "addBos", "addEos"}
// tokenize is llama.cpp's common_tokenize(text, add_special=false, parse_special=false|true);
// detokenize is llama_detokenize(ids, remove_special=false, unparse_special=false|true).
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = 'true';

import fs from 'node:fs';
import path from 'node:path';

const jobs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const { getLlama } = await import('node-llama-cpp');
const llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, progressLogs: false, logLevel: 'error' });
const results = [];
/** node-llama-cpp's kv-override list ([key, value, type?]; type 0: an integer, 1: a float) of a nested object. */
function overridesList(o, prefix = []) {
  return Object.entries(o ?? {}).flatMap(([k, v]) =>
    v !== null && typeof v === 'object' ? overridesList(v, [...prefix, k]) : [[[...prefix, k].join('.'), v, ...(typeof v === 'number' ? [Number.isInteger(v) ? 0 : 1] : [])]],
  );
}
for (const job of jobs) {
  // llama.cpp's model (node-llama-cpp's AddonModel, what llama.loadModel wraps) straight: loadModel
  // first reads the whole file in JavaScript and simulates memory placement (~0.2 s a vocabulary, 3/4
  // of a load), for nothing a vocabulary-only load uses. Vocab-only files have no tensors; llama.cpp
  // complains about that after it has read the vocabulary.
  const list = overridesList(job.metadataOverrides);
  const m = new llama._bindings.AddonModel(path.resolve(job.model), {
    addonExports: llama._bindings,
    vocabOnly: true,
    ...(list.length ? { overridesList: list } : {}),
  });
  if (!(await m.init())) throw new Error(`llama.cpp failed to load ${job.model}`);
  const all = Array.from({ length: job.nVocab }, (_, i) => i);
  results.push({
    tokenize: job.texts.map((t) => Array.from(m.tokenize(t, false))),
    tokenizeSpecial: job.texts.map((t) => Array.from(m.tokenize(t, true))),
    detokenize: job.ids.map((ids) => m.detokenize(Uint32Array.from(ids), false)),
    detokenizeSpecial: job.ids.map((ids) => m.detokenize(Uint32Array.from(ids), true)),
    attrs: all.map((i) => m.getTokenAttributes(i)),
    eog: all.filter((i) => m.isEogToken(i)),
    bos: m.tokenBos(),
    eos: m.tokenEos(),
    eot: m.eotToken(),
    nl: m.tokenNl(),
    addBos: m.shouldPrependBosToken(),
    addEos: m.shouldAppendEosToken(),
  });
  await m.dispose();
}
process.stdout.write(JSON.stringify(results));
await llama.dispose();
