export type * from './addon-types';
export { NATIVE_ERROR_CODES, NativeLoadError, isNativeError } from './errors';
export type { NativeErrorCode } from './errors';
export { NATIVE_PATH_ENV, bindingCandidates, loadBinding } from './load-binding';
