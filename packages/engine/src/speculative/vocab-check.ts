import { EngineError } from '../errors';
import type { Tokenizer } from '../tokenizer/tokenizer';

/**
 * Refuses a draft whose vocabulary differs from the target's: the draft proposes token ids and the
 * target judges them, so an id must mean the same text (and the same special/control role) in
 * both. Compares the size, then every token's text and attribute bits; names the first mismatch.
 */
export function checkVocabCompatible(target: Tokenizer, draft: Tokenizer, names = { target: 'target', draft: 'draft' }): void {
  const tv = target.vocab;
  const dv = draft.vocab;
  const refuse = (why: string) =>
    new EngineError('KAIL_E_INVALID_ARG', `the draft model cannot draft for this target: ${why} (${names.draft} vs ${names.target}); a draft needs the same vocabulary`);
  if (tv.nTokens !== dv.nTokens) throw refuse(`the vocabularies have ${dv.nTokens} and ${tv.nTokens} tokens`);
  if (tv.type !== dv.type) throw refuse(`the tokenizer types differ ('${dv.type}' vs '${tv.type}')`);
  for (let id = 0; id < tv.nTokens; id++) {
    if (tv.tokenText(id) !== dv.tokenText(id))
      throw refuse(`token ${id} is ${JSON.stringify(dv.tokenText(id))} in the draft and ${JSON.stringify(tv.tokenText(id))} in the target`);
    if (tv.tokenAttr(id) !== dv.tokenAttr(id)) throw refuse(`token ${id} (${JSON.stringify(tv.tokenText(id))}) has attributes ${dv.tokenAttr(id)} in the draft and ${tv.tokenAttr(id)} in the target`);
  }
}
