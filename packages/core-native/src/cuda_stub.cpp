// Without the CUDA backend these entry points report "no device"; with it, src/cuda/*.cu
// defines them and this file compiles to nothing.
#include "kail/cuda.h"

#ifndef KAIL_HAVE_CUDA
namespace kail {
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
bool cuda_device_info_get(int, cuda_device_info &) { return false; }
bool cuda_dequantize_q8_0(int, const void *, int64_t, float *, std::string & err) {
    err = "this build has no CUDA backend (nvcc was not found when it was built)";
    return false;
}
static bool no_backend(std::string & err) {
    err = "this build has no CUDA backend (nvcc was not found when it was built)";
    return false;
}
bool cuda_malloc(int, size_t, void **, std::string & err) { return no_backend(err); }
void cuda_free(int, void *) {}
bool cuda_copy_to_device(int, void *, const void *, size_t, std::string & err) { return no_backend(err); }
bool cuda_copy_to_host(int, void *, const void *, size_t, std::string & err) { return no_backend(err); }
bool cuda_host_register(int, void *, size_t, std::string & err) { return no_backend(err); }
void cuda_host_unregister(int, void *) {}
} // namespace kail
#endif
