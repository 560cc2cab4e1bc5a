/**
 * The sidecar of a models-directory file with its Modelfile settings (ID.modelfile.json: system
 * prompt, template, default options, opening messages, license), which the API's Ollama create
 * writes and reads and `kail run NAME` applies; the engine carries it along when the model is
 * copied or deleted. Here, apart from the model host, so that the CLI reads it without loading
 * the gRPC service.
 */
export function modelfileSidecar(modelFile: string): string {
  return modelFile.replace(/\.gguf$/, '') + '.modelfile.json';
}
