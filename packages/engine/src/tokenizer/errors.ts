/** Stable codes of tokenizer errors, shared with the native core's codes where the meaning is the same. */
export type TokenizerErrorCode =
  /** The GGUF metadata does not describe a vocabulary this tokenizer can build. */
  | 'KAIL_E_BAD_MODEL'
  /** A caller passed something invalid: an out-of-range token id, a bad template. */
  | 'KAIL_E_INVALID_ARG';

export class TokenizerError extends Error {
  constructor(
    readonly code: TokenizerErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'TokenizerError';
  }
}
