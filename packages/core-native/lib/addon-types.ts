// The whole native surface as TypeScript sees it: one hand-written type, kept in step with
// addon/*.cpp. Everything the engine calls on the addon goes through this interface.

export interface CudaDeviceInfo {
  index: number;
  name: string;
  totalBytes: number;
  freeBytes: number;
  computeCapability: string;
}

export interface SystemInfo {
  /** SIMD features detected at run time, e.g. ["avx2", "fma", "avx512f", "avx512_vnni"]. */
  simd: string[];
  /** Kernel level in use: "avx512", "avx2" or "scalar" (KAIL_FORCE_ISA can lower it). */
  kernelLevel: 'avx512' | 'avx2' | 'scalar';
  logicalCores: number;
  physicalCores: number;
  /** True when the addon was built with the CUDA backend. */
  cudaCompiled: boolean;
  cudaDevices: CudaDeviceInfo[];
}

export interface AddonSystem {
  systemInfo(): SystemInfo;
  /** Dequantizes Q8_0 blocks on GPU 0; throws KAIL_E_UNSUPPORTED without a device. */
  cudaDequantizeQ8_0(blocks: Uint8Array): Float32Array;
}

export type NativeAddon = AddonSystem;
