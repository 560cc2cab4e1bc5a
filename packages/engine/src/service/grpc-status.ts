import { status, type ServiceError, Metadata } from '@grpc/grpc-js';

import { type EngineErrorCode, toEngineError } from '../errors';

// The one place engine errors become gRPC status codes.
const CODE_TO_STATUS: Record<EngineErrorCode, status> = {
  KAIL_E_BAD_MODEL: status.INVALID_ARGUMENT,
  KAIL_E_IO: status.UNAVAILABLE,
  KAIL_E_BUDGET: status.RESOURCE_EXHAUSTED,
  KAIL_E_INVALID_ARG: status.INVALID_ARGUMENT,
  KAIL_E_UNSUPPORTED: status.UNIMPLEMENTED,
  KAIL_E_CANCELLED: status.CANCELLED,
  KAIL_E_NOT_FOUND: status.NOT_FOUND,
  KAIL_E_ALREADY_EXISTS: status.ALREADY_EXISTS,
  KAIL_E_CONTEXT_OVERFLOW: status.OUT_OF_RANGE,
  KAIL_E_INTERNAL: status.INTERNAL,
};

/** Converts any error into a gRPC ServiceError whose metadata carries the stable `kail-code`. */
export function toServiceError(e: unknown): ServiceError {
  const err = toEngineError(e);
  const metadata = new Metadata();
  metadata.set('kail-code', err.code);
  return Object.assign(new Error(err.message), {
    code: CODE_TO_STATUS[err.code] ?? status.INTERNAL,
    details: err.message,
    metadata,
  });
}
