import path from 'node:path';

/** Directory holding the .proto sources (for server reflection and other-language clients). */
export const protoRoot = path.resolve(__dirname, '../../../proto');

/** The .proto files of each service, relative to protoRoot. */
export const protoFiles = {
  common: 'kailstream/common/v1/common.proto',
  engine: 'kailstream/engine/v1/engine.proto',
  scheduler: 'kailstream/scheduler/v1/scheduler.proto',
} as const;
