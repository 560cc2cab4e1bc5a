// The VRAM tier's device memory on a CUDA GPU: one allocation for the whole budget, synchronous
// copies through the CUDA runtime (kail/cuda.h; without a CUDA build every call reports so).
#include <string>

#include "kail/cuda.h"
#include "kail/expert_stream.h"
#include "kail/status.h"

namespace kail {

namespace {

class cuda_memory final : public expert_device_memory {
  public:
    cuda_memory(int device, std::string name, void * base, uint64_t bytes) : device_(device), name_(std::move(name)), base_(base), bytes_(bytes) {}
    ~cuda_memory() override { cuda_free(device_, base_); }

    std::string name() const override { return name_; }
    uint64_t bytes() const override { return bytes_; }

    void upload(uint64_t offset, const uint8_t * src, uint64_t n) override {
        check(offset, n);
        std::string err;
        if (!cuda_copy_to_device(device_, static_cast<uint8_t *>(base_) + offset, src, n, err))
            throw error(KAIL_E_IO, "VRAM tier on " + name_ + ": copy of " + std::to_string(n) + " bytes to the device failed: " + err);
    }

    void download(uint64_t offset, uint8_t * dst, uint64_t n) override {
        check(offset, n);
        std::string err;
        if (!cuda_copy_to_host(device_, dst, static_cast<const uint8_t *>(base_) + offset, n, err))
            throw error(KAIL_E_IO, "VRAM tier on " + name_ + ": copy of " + std::to_string(n) + " bytes from the device failed: " + err);
    }

    // Measured on an H200 (session 34): copies back into pageable buffers moved about 3.5 GB/s.
    bool pin_host(void * p, uint64_t n) override {
        std::string err;
        return cuda_host_register(device_, p, static_cast<size_t>(n), err);
    }
    void unpin_host(void * p) override { cuda_host_unregister(device_, p); }

  private:
    void check(uint64_t offset, uint64_t n) const {
        if (offset > bytes_ || n > bytes_ - offset)
            throw error(KAIL_E_INTERNAL, "VRAM tier on " + name_ + ": copy of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) + " passes its " +
                                             std::to_string(bytes_) + " bytes");
    }

    int         device_;
    std::string name_;
    void *      base_;
    uint64_t    bytes_;
};

} // namespace

std::shared_ptr<expert_device_memory> cuda_expert_memory(int device, uint64_t bytes) {
    if (!cuda_compiled()) throw error(KAIL_E_UNSUPPORTED, "a VRAM tier needs the CUDA backend, and this build has none (nvcc was not found when it was built)");
    const int n = cuda_device_count();
    if (device < 0 || device >= n)
        throw error(KAIL_E_UNSUPPORTED, "a VRAM tier needs a CUDA device, and there is no device " + std::to_string(device) + " (" + std::to_string(n) +
                                            (n == 1 ? " device" : " devices") + " found)");
    if (bytes == 0) throw error(KAIL_E_INVALID_ARG, "a VRAM tier of 0 bytes");
    cuda_device_info info;
    cuda_device_info_get(device, info);
    const std::string name = "cuda:" + std::to_string(device) + " (" + info.name + ")";
    void * base = nullptr;
    std::string err;
    if (!cuda_malloc(device, static_cast<size_t>(bytes), &base, err)) throw error(KAIL_E_BUDGET, "VRAM tier on " + name + ": " + err);
    return std::make_shared<cuda_memory>(device, name, base, bytes);
}

} // namespace kail
