// Storage and memory bandwidth for `kail profile` (see include/kail/storage_bench.h).
#include "kail/storage_bench.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kail/status.h"

namespace kail {

namespace {
using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }
constexpr uint64_t ALIGN = 4096;
} // namespace

io_bench_result io_bench_run(const io_bench_params & p) {
    if (p.block_bytes == 0 || p.block_bytes % ALIGN) throw error(KAIL_E_INVALID_ARG, "io bench: block size must be a positive multiple of 4096");
    if (p.queue_depth < 1 || p.queue_depth > 256) throw error(KAIL_E_INVALID_ARG, "io bench: queue depth must be in 1..256");
    io_bench_result r;
    int fd = -1;
    if (p.direct) {
        fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd >= 0) r.direct = true;
        else r.note = std::string("O_DIRECT refused (") + std::strerror(errno) + "); buffered reads, page cache dropped";
    }
    if (fd < 0) fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error(KAIL_E_IO, "io bench: cannot open '" + p.path + "': " + std::strerror(errno));
    struct stat sb;
    fstat(fd, &sb);
    const uint64_t size = static_cast<uint64_t>(sb.st_size) / ALIGN * ALIGN;
    const uint64_t n_blocks = size / p.block_bytes;
    if (n_blocks < 1) {
        ::close(fd);
        throw error(KAIL_E_INVALID_ARG, "io bench: '" + p.path + "' is smaller than one block");
    }
    if (!r.direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    std::atomic<uint64_t> bytes{0}, reads{0};
    std::atomic<bool> failed{false};
    std::string err;
    std::mutex err_mu;
    const auto t0 = clock_type::now();
    auto worker = [&](int t) {
        void * buf = nullptr;
        if (posix_memalign(&buf, ALIGN, p.block_bytes) != 0) {
            failed = true;
            return;
        }
        std::mt19937_64 rng(0x9e3779b97f4a7c15ull * static_cast<uint64_t>(t + 1));
        // Sequential: thread t walks blocks t, t + qd, t + 2 qd, ... (the device sees qd streams
        // that together cover the file in order).
        uint64_t next = static_cast<uint64_t>(t);
        while (!failed.load(std::memory_order_relaxed) && since(t0) < p.seconds) {
            uint64_t blk;
            if (p.random) blk = rng() % n_blocks;
            else {
                if (next >= n_blocks) break;
                blk = next;
                next += static_cast<uint64_t>(p.queue_depth);
            }
            const ssize_t n = pread(fd, buf, p.block_bytes, static_cast<off_t>(blk * p.block_bytes));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                std::lock_guard<std::mutex> lk(err_mu);
                err = n == 0 ? "the file ends early" : std::strerror(errno);
                failed = true;
                break;
            }
            bytes += static_cast<uint64_t>(n);
            reads++;
            if (!r.direct) posix_fadvise(fd, static_cast<off_t>(blk * p.block_bytes), static_cast<off_t>(p.block_bytes), POSIX_FADV_DONTNEED);
        }
        free(buf);
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < p.queue_depth; t++) ts.emplace_back(worker, t);
    for (auto & t : ts) t.join();
    r.seconds = since(t0);
    ::close(fd);
    if (failed) throw error(KAIL_E_IO, "io bench: reading '" + p.path + "' failed: " + (err.empty() ? "out of memory" : err));
    r.bytes = bytes;
    r.reads = reads;
    return r;
}

mem_bench_result mem_bench_run(uint64_t bytes, int threads, double seconds) {
    threads = std::max(1, std::min(threads, 256));
    bytes = std::max<uint64_t>(bytes / 8 * 8, 1 << 20);
    std::vector<uint64_t> a(bytes / 8), b(bytes / 8);
    for (size_t i = 0; i < a.size(); i++) a[i] = i * 0x9e3779b97f4a7c15ull;
    mem_bench_result r;
    r.threads = threads;
    std::atomic<uint64_t> total{0};
    std::atomic<uint64_t> sink{0};
    const auto t0 = clock_type::now();
    auto reader = [&](int t) {
        const size_t n = a.size(), lo = n * t / threads, hi = n * (t + 1) / threads;
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, done = 0;
        do {
            for (size_t i = lo; i + 4 <= hi; i += 4) {
                s0 += a[i];
                s1 += a[i + 1];
                s2 += a[i + 2];
                s3 += a[i + 3];
            }
            done += (hi - lo) * 8;
        } while (since(t0) < seconds);
        sink += s0 + s1 + s2 + s3;
        total += done;
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) ts.emplace_back(reader, t);
    for (auto & t : ts) t.join();
    r.read_bytes_per_second = static_cast<double>(total) / since(t0);
    const auto t1 = clock_type::now();
    uint64_t copied = 0;
    do {
        std::memcpy(b.data(), a.data(), a.size() * 8);
        copied += a.size() * 8;
    } while (since(t1) < seconds / 2);
    r.copy_bytes_per_second = static_cast<double>(copied) / since(t1);
    if (sink.load() == 1 && b[0] == 42) r.threads = threads;  // keeps the loads and the copy
    return r;
}

} // namespace kail
