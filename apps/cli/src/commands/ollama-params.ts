// Ollama's options (api/types.go) by type, as a Modelfile's PARAMETER lines and `ollama run`'s
// `/set parameter` give them: `kail create` and the chat loop read them the same way.

export type OllamaParamType = 'int' | 'float' | 'bool' | 'strings';

export const OLLAMA_PARAM_TYPES: Record<string, OllamaParamType> = {
  num_keep: 'int', seed: 'int', num_predict: 'int', top_k: 'int', repeat_last_n: 'int', mirostat: 'int', num_ctx: 'int', num_batch: 'int', num_gpu: 'int', main_gpu: 'int', num_thread: 'int',
  top_p: 'float', min_p: 'float', typical_p: 'float', temperature: 'float', repeat_penalty: 'float', presence_penalty: 'float', frequency_penalty: 'float', mirostat_tau: 'float', mirostat_eta: 'float', tfs_z: 'float',
  numa: 'bool', use_mmap: 'bool',
  stop: 'strings',
};

/** Options Ollama still reads but ignores (a warning, as `ollama create` prints). */
export const DEPRECATED_OLLAMA_PARAMS = ['penalize_newline', 'low_vram', 'f16_kv', 'logits_all', 'vocab_only', 'use_mlock'];

/** A parameter's value from its text, typed as Ollama types it; an Error naming what it takes otherwise. */
export function parseOllamaParam(key: string, raw: string): number | boolean | string {
  const type = OLLAMA_PARAM_TYPES[key];
  if (!type) throw new Error(`unknown parameter '${key}' (Ollama's parameters: ${Object.keys(OLLAMA_PARAM_TYPES).join(', ')})`);
  const v = raw.trim();
  const bad = (what: string): never => {
    throw new Error(`${key} takes ${what}, got ${JSON.stringify(raw)}`);
  };
  switch (type) {
    case 'int':
      return /^[+-]?\d+$/.test(v) ? Number(v) : bad('an integer');
    case 'float':
      return /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(v) ? Number(v) : bad('a number');
    case 'bool':
      return ['1', 't', 'T', 'true', 'TRUE', 'True'].includes(v) ? true : ['0', 'f', 'F', 'false', 'FALSE', 'False'].includes(v) ? false : bad('true or false');
    default:
      return raw;
  }
}
