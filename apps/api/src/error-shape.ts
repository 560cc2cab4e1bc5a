// One error body per API family, chosen by the route, for the errors answered before a route's
// own code runs (missing or bad key, malformed JSON, unknown route): clients parse their own API's
// shape only (the Anthropic SDK reads error.type, ollama-js reads a string `error`).
import { anthropicError } from './anthropic/messages';
import { openAiError } from './openai/schemas';

export function errorBody(url: string, status: number, message: string, code: string | null): unknown {
  const path = url.split('?')[0];
  if (path.startsWith('/api/')) return { error: message };
  if (path === '/v1/messages' || path.startsWith('/v1/messages/')) return anthropicError(status, message);
  return openAiError(message, status < 500 ? 'invalid_request_error' : 'server_error', null, code);
}
