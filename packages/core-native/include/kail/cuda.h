// CUDA backend entry points. Present in every build: without CUDA (or without a device) they
// report that no device is available rather than failing to link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kail {

struct cuda_device_info {
    int         index = -1;
    std::string name;
    size_t      total_bytes = 0;
    size_t      free_bytes = 0;
    int         cc_major = 0, cc_minor = 0;
};

// True when this build includes the CUDA backend.
bool cuda_compiled();

// Number of usable devices (0 without CUDA, driver or device).
int cuda_device_count();

// Fills info for device `index`; returns false if there is no such device.
bool cuda_device_info_get(int index, cuda_device_info & info);

// Dequantizes n_blocks Q8_0 blocks (34 bytes each, 32 values) on device `device` and copies the
// floats back: a real kernel used by tests to check the device path against the CPU one.
// Returns false with `err` set when no device is available or a CUDA call fails.
bool cuda_dequantize_q8_0(int device, const void * blocks, int64_t n_blocks, float * out, std::string & err);

// Device memory for the VRAM expert tier (expert_stream.h): one allocation, synchronous copies in
// and out. Each returns false with `err` set when there is no such device, the allocation is
// refused or a CUDA call fails. Safe to call from any thread (each call selects the device).
bool cuda_malloc(int device, size_t bytes, void ** out, std::string & err);
void cuda_free(int device, void * p);
bool cuda_copy_to_device(int device, void * dst, const void * src, size_t bytes, std::string & err);
bool cuda_copy_to_host(int device, void * dst, const void * src, size_t bytes, std::string & err);
// Page-locks host memory [p, p + bytes) for device `device`'s copies (cudaHostRegister), so they
// run by DMA instead of through the driver's pageable staging; false with `err` set where it cannot.
bool cuda_host_register(int device, void * p, size_t bytes, std::string & err);
void cuda_host_unregister(int device, void * p);

} // namespace kail
