import { EngineError } from '../errors';

/** The codes a tokenizer error carries (a subset of the engine's codes). */
export type TokenizerErrorCode =
  /** The GGUF metadata does not describe a valid vocabulary (missing keys, unknown pre-tokenizer…). */
  | 'KAIL_E_BAD_MODEL'
  /** A valid vocabulary of a kind this tokenizer does not implement (no_vocab, none, test). */
  | 'KAIL_E_UNSUPPORTED'
  /** A caller passed something invalid: an out-of-range token id, a template that fails. */
  | 'KAIL_E_INVALID_ARG';

export class TokenizerError extends EngineError {
  constructor(
    override readonly code: TokenizerErrorCode,
    message: string,
  ) {
    super(code, message);
    this.name = 'TokenizerError';
  }
}
