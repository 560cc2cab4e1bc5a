// CUDA kernels. Compiled only when KAIL_CUDA is on (nvcc found).
#include "kail/cuda.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace kail {

namespace {

// One thread per value: block b holds a half scale followed by 32 int8 quants.
__global__ void dequantize_q8_0_kernel(const uint8_t * __restrict__ blocks, int64_t n_blocks, float * __restrict__ out) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t n = n_blocks * 32;
    if (i >= n) return;
    const uint8_t * blk = blocks + (i / 32) * 34;
    __half d;
    memcpy(&d, blk, sizeof d);
    const int8_t q = static_cast<int8_t>(blk[2 + (i % 32)]);
    out[i] = __half2float(d) * static_cast<float>(q);
}

bool check(cudaError_t e, const char * what, std::string & err) {
    if (e == cudaSuccess) return true;
    err = std::string(what) + ": " + cudaGetErrorString(e);
    return false;
}

} // namespace

bool cuda_compiled() { return true; }

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

bool cuda_device_info_get(int index, cuda_device_info & info) {
    if (index < 0 || index >= cuda_device_count()) return false;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return false;
    info.index = index;
    info.name = prop.name;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.total_bytes = prop.totalGlobalMem;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        info.free_bytes = free_b;
        info.total_bytes = total_b;
    }
    return true;
}

bool cuda_dequantize_q8_0(int device, const void * blocks, int64_t n_blocks, float * out, std::string & err) {
    if (device < 0 || device >= cuda_device_count()) {
        err = "no CUDA device " + std::to_string(device);
        return false;
    }
    if (!check(cudaSetDevice(device), "cudaSetDevice", err)) return false;
    const size_t in_bytes = static_cast<size_t>(n_blocks) * 34;
    const size_t out_bytes = static_cast<size_t>(n_blocks) * 32 * sizeof(float);
    uint8_t * d_in = nullptr;
    float * d_out = nullptr;
    bool ok = check(cudaMalloc(&d_in, in_bytes), "cudaMalloc", err) &&
              check(cudaMalloc(&d_out, out_bytes), "cudaMalloc", err) &&
              check(cudaMemcpy(d_in, blocks, in_bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D", err);
    if (ok) {
        const int64_t n = n_blocks * 32;
        const int threads = 256;
        const int grid = static_cast<int>((n + threads - 1) / threads);
        dequantize_q8_0_kernel<<<grid, threads>>>(d_in, n_blocks, d_out);
        ok = check(cudaGetLastError(), "kernel launch", err) &&
             check(cudaMemcpy(out, d_out, out_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H", err);
    }
    cudaFree(d_in);
    cudaFree(d_out);
    return ok;
}

namespace {
bool select_device(int device, std::string & err) {
    if (device < 0 || device >= cuda_device_count()) {
        err = "no CUDA device " + std::to_string(device) + " (" + std::to_string(cuda_device_count()) + " found)";
        return false;
    }
    return check(cudaSetDevice(device), "cudaSetDevice", err);
}
} // namespace

bool cuda_malloc(int device, size_t bytes, void ** out, std::string & err) {
    *out = nullptr;
    if (!select_device(device, err)) return false;
    if (cudaMalloc(out, bytes) != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        err = "cannot allocate " + std::to_string(bytes) + " bytes on CUDA device " + std::to_string(device) + " (" + std::to_string(free_b) + " free of " +
              std::to_string(total_b) + ")";
        *out = nullptr;
        return false;
    }
    return true;
}

void cuda_free(int device, void * p) {
    if (!p) return;
    if (cudaSetDevice(device) == cudaSuccess) cudaFree(p);
    cudaGetLastError();
}

bool cuda_copy_to_device(int device, void * dst, const void * src, size_t bytes, std::string & err) {
    return select_device(device, err) && check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D", err);
}

bool cuda_copy_to_host(int device, void * dst, const void * src, size_t bytes, std::string & err) {
    return select_device(device, err) && check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H", err);
}

bool cuda_host_register(int device, void * p, size_t bytes, std::string & err) {
    return select_device(device, err) && check(cudaHostRegister(p, bytes, cudaHostRegisterDefault), "cudaHostRegister", err);
}

void cuda_host_unregister(int device, void * p) {
    if (p && cudaSetDevice(device) == cudaSuccess) cudaHostUnregister(p);
    cudaGetLastError();
}

} // namespace kail
