import { bearerClientOptions } from '@kailstream/proto';

/** Options for clients the scheduler opens to engines (with their bearer token, when set). */
export const clientOptions = (token: string | undefined) => bearerClientOptions(token);
