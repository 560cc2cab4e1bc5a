import { loadBinding } from '@kailstream/core-native';
import type { NativeAddon, SystemInfo } from '@kailstream/core-native';

/** The native addon. Only the engine package talks to it; everything else goes through the engine. */
export function native(): NativeAddon {
  return loadBinding();
}

/** CPU cores and SIMD features detected at run time, and CUDA devices. */
export function systemInfo(): SystemInfo {
  return native().systemInfo();
}
