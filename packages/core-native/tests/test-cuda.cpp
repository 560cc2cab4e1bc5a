// Runs the Q8_0 dequantize kernel on a GPU and compares with the CPU definition, and the VRAM
// tier's device memory: copies round-trip byte for byte, out-of-range copies are refused, and an
// expert stream with the tier fills RAM misses from the device with the file's exact bytes.
// Skips (exit 77) without a CUDA build or device; never fails for lack of one.
#include "kail/cuda.h"
#include "kail/expert_stream.h"
#include "kail/status.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static uint16_t f32_to_f16_bits(float f) {
    // Exact for the small powers of two used below.
    uint32_t x; std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = ((x >> 23) & 0xff), mant = x & 0x7fffff;
    int e = static_cast<int>(exp) - 127 + 15;
    return static_cast<uint16_t>(sign | (e << 10) | (mant >> 13));
}

// Copies back into page-locked host memory (pin_host) give the same bytes; and how fast copies back
// run into pageable and into page-locked buffers (printed, not checked: a measurement).
static int test_vram_pinned_copies() {
    const uint64_t n = 64ull << 20;
    std::shared_ptr<kail::expert_device_memory> m = kail::cuda_expert_memory(0, n);
    void * p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    uint8_t * h = static_cast<uint8_t *>(p);
    std::vector<uint8_t> a(n);
    for (uint64_t i = 0; i < n; i++) a[i] = static_cast<uint8_t>((i * 2246822519u) >> 11);
    m->upload(0, a.data(), n);
    auto rate = [&]() {
        double best = 0;
        for (int r = 0; r < 3; r++) {
            const auto t0 = std::chrono::steady_clock::now();
            for (uint64_t off = 0; off < n; off += 4ull << 20) m->download(off, h + off, 4ull << 20);  // expert-sized copies
            best = std::max(best, static_cast<double>(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
        }
        return best;
    };
    const double pageable = rate();
    const bool pinned = m->pin_host(h, n);
    const double locked = rate();
    const bool same = std::memcmp(a.data(), h, n) == 0;
    if (pinned) m->unpin_host(h);
    munmap(p, n);
    std::printf("vram copies back in 4 MiB pieces: %.1f GB/s into pageable memory, %.1f GB/s into page-locked memory (pinned: %s)\n", pageable, locked,
                pinned ? "yes" : "no");
    if (!pinned || !same) { std::fprintf(stderr, "vram: %s\n", !pinned ? "pin_host refused" : "copies into page-locked memory differ"); return 1; }
    return 0;
}

static int test_vram_memory() {
    const uint64_t n = 3u << 20;
    std::shared_ptr<kail::expert_device_memory> m = kail::cuda_expert_memory(0, n);
    std::vector<uint8_t> a(n), b(n, 0);
    for (uint64_t i = 0; i < n; i++) a[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    m->upload(0, a.data(), n / 2);
    m->upload(n / 2, a.data() + n / 2, n - n / 2);
    m->download(4096, b.data() + 4096, n - 4096);
    if (std::memcmp(a.data() + 4096, b.data() + 4096, n - 4096) != 0) { std::fprintf(stderr, "vram: round trip differs\n"); return 1; }
    bool refused = false;
    try {
        m->download(n - 10, b.data(), 11);
    } catch (const kail::error &) {
        refused = true;
    }
    if (!refused) { std::fprintf(stderr, "vram: a copy past the end was not refused\n"); return 1; }
    std::printf("vram memory on %s: %llu bytes round-trip\n", m->name().c_str(), static_cast<unsigned long long>(n));
    return test_vram_pinned_copies();
}

// Two layers of 8 experts in a file; RAM holds 2, VRAM all 16.
static int test_vram_stream() {
    char tmpl[] = "/tmp/kail-test-cuda-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) return 1;
    const uint64_t stride = 50000, size = 3 * 16 * stride + 8192;
    std::vector<uint8_t> data(size);
    for (uint64_t i = 0; i < size; i++) data[i] = static_cast<uint8_t>((i * 40503u) >> 7);
    if (write(fd, data.data(), size) != static_cast<ssize_t>(size)) return 1;
    close(fd);
    std::vector<kail::expert_layer_source> layers(2);
    for (int l = 0; l < 2; l++) {
        layers[l].n_expert = 8;
        for (int s = 0; s < 3; s++) {
            layers[l].offset[s] = 100 + (static_cast<uint64_t>(l) * 3 + s) * 8 * stride;
            layers[l].stride[s] = stride;
        }
    }
    const uint64_t em = std::max(kail::expert_entry_bytes_max(layers[0]), kail::expert_entry_bytes_max(layers[1]));
    kail::expert_stream_params p;
    p.cache_bytes = 2 * em;
    p.io_threads = 2;
    // LRU, so the second round misses RAM every time (16 experts cycled through 2 slots) and each
    // miss is filled from VRAM; the default policy may keep an expert it predicts.
    p.policy = "lru";
    p.vram = kail::cuda_expert_memory(0, 16 * em);
    int bad = 0;
    {
        kail::expert_stream s(tmpl, layers, p);
        for (int round = 0; round < 2; round++)
            for (int l = 0; l < 2; l++)
                for (int32_t x = 0; x < 8; x++) {
                    kail::expert_request r = s.request(l, &x, 1);
                    kail::expert_request::view v;
                    while (r.next(v)) {
                        for (int k = 0; k < 3; k++)
                            if (std::memcmp(v.data[k], data.data() + layers[l].offset[k] + static_cast<uint64_t>(x) * stride, stride) != 0) bad++;
                        r.done(v, 0);
                    }
                    if (round == 0)  // let the upload land before the expert leaves RAM
                        for (int i = 0; i < 2000 && s.stats().vram_uploads < static_cast<uint64_t>(l * 8 + x + 1); i++)
                            std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
        const kail::expert_stream_stats st = s.stats();
        uint64_t reads = 0, vreads = 0, hits = 0;
        for (auto & l : st.layers) {
            reads += l.reads;
            vreads += l.vram_reads;
            hits += l.hits;
        }
        std::printf("vram stream on %s: %llu storage reads, %llu fills from VRAM, %llu RAM hits, %llu uploads, error '%s'\n", st.vram_device.c_str(),
                    static_cast<unsigned long long>(reads), static_cast<unsigned long long>(vreads), static_cast<unsigned long long>(hits),
                    static_cast<unsigned long long>(st.vram_uploads), st.vram_error.c_str());
        if (reads != 16 || vreads != 16 || !st.vram_error.empty()) bad++;
    }
    std::remove(tmpl);
    if (bad) { std::fprintf(stderr, "vram stream: %d failed checks\n", bad); return 1; }
    return 0;
}

int main() {
    if (!kail::cuda_compiled()) { std::printf("SKIP: built without CUDA\n"); return 77; }
    if (kail::cuda_device_count() == 0) { std::printf("SKIP: no CUDA device\n"); return 77; }
    kail::cuda_device_info info;
    kail::cuda_device_info_get(0, info);
    std::printf("device 0: %s, %zu MiB\n", info.name.c_str(), info.total_bytes >> 20);
    const int64_t nb = 1000;
    std::vector<uint8_t> blocks(nb * 34);
    std::vector<float> expect(nb * 32);
    for (int64_t b = 0; b < nb; b++) {
        float d = std::ldexp(1.0f, static_cast<int>(b % 7) - 3);
        uint16_t h = f32_to_f16_bits(d);
        std::memcpy(&blocks[b * 34], &h, 2);
        for (int i = 0; i < 32; i++) {
            int8_t q = static_cast<int8_t>((b * 31 + i * 17) % 255 - 127);
            blocks[b * 34 + 2 + i] = static_cast<uint8_t>(q);
            expect[b * 32 + i] = d * q;
        }
    }
    std::vector<float> out(nb * 32);
    std::string err;
    if (!kail::cuda_dequantize_q8_0(0, blocks.data(), nb, out.data(), err)) { std::fprintf(stderr, "cuda: %s\n", err.c_str()); return 1; }
    for (size_t i = 0; i < out.size(); i++) {
        if (out[i] != expect[i]) { std::fprintf(stderr, "mismatch at %zu: %f vs %f\n", i, out[i], expect[i]); return 1; }
    }
    std::printf("cuda dequantize_q8_0 matches CPU on %lld values\n", static_cast<long long>(nb * 32));
    return test_vram_memory() || test_vram_stream();
}
