// Control vectors (llama.cpp's --control-vector / --control-vector-scaled / --control-vector-layer-range,
// common_control_vector_load): GGUF files of F32 `direction.N` vectors (N = 1.. the layer after
// whose block the vector is added to the residual stream; repeng and llama.cpp's cvector-generator
// write them), each scaled and all summed. A file llama.cpp would skip (no vectors, a layer index
// 0 or not a number, a non-F32 or non-1-D tensor, sizes that differ) is refused here, naming it.
import { EngineError, toEngineError } from '../errors';
import { native } from '../native';
import { MAX_LAYERS } from './hparams';

export interface ControlVectorSpec {
  path: string;
  /** Strength (llama.cpp's SCALE); default 1. */
  scale?: number;
}

/** The summed vectors: nEmbd floats per layer from layer 1 (llama_set_adapter_cvec's data). */
export function readControlVectors(specs: readonly ControlVectorSpec[]): { data: Float32Array; nEmbd: number } {
  let nEmbd = -1;
  let data = new Float32Array(0);
  for (const s of specs) {
    const scale = s.scale ?? 1;
    if (!Number.isFinite(scale)) throw new EngineError('KAIL_E_INVALID_ARG', `control vector ${s.path}: the scale must be a finite number, got ${scale}`);
    let file;
    try {
      file = native().openGguf(s.path, { mapData: false });
    } catch (e) {
      const err = toEngineError(e);
      throw new EngineError(err.code, `control vector ${s.path}: ${err.message}`);
    }
    try {
      const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `control vector ${s.path}: ${why}`);
      if (file.tensors.length === 0) throw bad('no direction tensors');
      for (const t of file.tensors) {
        const m = /^direction\.(\d+)$/.exec(t.name);
        if (!m) throw bad(`tensor '${t.name}' is not direction.<layer>`);
        const layer = Number(m[1]);
        if (layer === 0) throw bad('direction.0: layer indices start at 1');
        if (layer > MAX_LAYERS) throw bad(`${t.name}: no model has ${layer} layers (at most ${MAX_LAYERS})`);
        if (t.type !== 0) throw bad(`${t.name} is not F32`);
        if (t.dims.length !== 1) throw bad(`${t.name} is not one-dimensional`);
        const n = t.dims[0];
        if (nEmbd === -1) nEmbd = n;
        else if (n !== nEmbd) throw bad(`${t.name} has ${n} values, other directions ${nEmbd}`);
        if (data.length < layer * n) {
          const grown = new Float32Array(layer * n);
          grown.set(data);
          data = grown;
        }
        const src = new Float32Array(Uint8Array.from(file.tensorData(t.name)).buffer);
        const dst = data.subarray((layer - 1) * n, layer * n);
        for (let j = 0; j < n; j++) dst[j] += src[j] * scale;
      }
    } finally {
      file.close();
    }
  }
  return { data, nEmbd };
}

/**
 * llama.cpp's --control-vector-scaled arguments (FNAME SCALE) and --control-vector (FNAME, scale 1),
 * the scaled ones given as FNAME:SCALE strings.
 */
export function parseControlVectorFlags(plain: readonly string[], scaled: readonly string[]): ControlVectorSpec[] {
  return [
    ...plain.map((path) => ({ path, scale: 1 })),
    ...parseScaledFiles(scaled, (item) => `--control-vector-scaled takes FNAME SCALE, got '${item.replace(/:([^:]*)$/, ' $1')}'`),
  ];
}

/** FNAME:SCALE items of a llama.cpp --*-scaled flag as {path, scale}; `bad` words the error for one that is not. */
export function parseScaledFiles(items: readonly string[], bad: (item: string) => string): { path: string; scale: number }[] {
  return items.map((item) => {
    const i = item.lastIndexOf(':');
    const scale = i > 0 ? Number(item.slice(i + 1)) : NaN;
    if (i <= 0 || item.slice(i + 1).trim() === '' || !Number.isFinite(scale)) throw new EngineError('KAIL_E_INVALID_ARG', bad(item));
    return { path: item.slice(0, i), scale };
  });
}
