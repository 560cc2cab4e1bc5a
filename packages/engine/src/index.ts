export { native, systemInfo } from './native';
export type { SystemInfo } from '@kailstream/core-native';
