// Hardware measurements for `kail profile`: read bandwidth of a file with direct I/O at a queue
// depth and block size, and memory read bandwidth.
#pragma once

#include <cstdint>
#include <string>

namespace kail {

struct io_bench_params {
    std::string path;              // an existing file of at least block_bytes
    uint64_t    block_bytes = 1 << 20;  // bytes per read; a multiple of 4096 for direct I/O
    int         queue_depth = 1;   // reads in flight: one thread per read, each pread in a loop
    bool        random = false;    // random aligned offsets; else each thread walks its own part in order
    double      seconds = 1.0;     // stop after this long (or when a sequential pass ends)
    bool        direct = true;     // O_DIRECT; falls back to buffered + POSIX_FADV_DONTNEED if refused
};

struct io_bench_result {
    uint64_t    bytes = 0;
    uint64_t    reads = 0;
    double      seconds = 0;
    bool        direct = false;    // O_DIRECT was used
    std::string note;              // why not, when not
    double      bytes_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0; }
};

// Throws KAIL_E_IO naming the file on open or read errors, KAIL_E_INVALID_ARG on bad parameters.
io_bench_result io_bench_run(const io_bench_params & p);

struct mem_bench_result {
    double read_bytes_per_second = 0;  // all threads summing a buffer
    double copy_bytes_per_second = 0;  // one thread, memcpy (bytes copied)
    int    threads = 1;
};

// Reads a buffer of `bytes` (allocated and touched here, freed after) for about `seconds`.
mem_bench_result mem_bench_run(uint64_t bytes, int threads, double seconds);

} // namespace kail
