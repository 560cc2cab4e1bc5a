#include "kail/threadpool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#define KAIL_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define KAIL_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define KAIL_CPU_RELAX() ((void)0)
#endif

#include "kail/cpu_features.h"
#include "kail/status.h"

namespace kail {

namespace {

thread_local const threadpool::impl * tl_pool = nullptr;
thread_local int tl_thread_id = 0;

int default_spin_us() {
    if (const char * s = std::getenv("KAIL_SPIN_US")) {
        const int v = std::atoi(s);
        if (v >= 0) return v;
    }
    return 200;
}

} // namespace

// A job is published with a seqlock: `gen` is odd while the main thread writes the job fields and
// even once they are stable. Workers copy the fields, re-check `gen`, then claim chunks through
// `work`, which carries the job's generation in its upper half so a late worker can never run a
// chunk of a job it did not read. The caller waits until `done` reaches the task count.
struct threadpool::impl {
    int n_threads = 1;
    int spin_us = 200;
    std::vector<std::thread> workers;
    std::mutex call_mtx;

    alignas(64) std::atomic<uint64_t> gen{0};
    std::atomic<task_fn> job_fn{nullptr};
    std::atomic<void *> job_ctx{nullptr};
    std::atomic<int64_t> job_n{0};
    std::atomic<int64_t> job_chunk{1};

    alignas(64) std::atomic<uint64_t> work{0};  // (gen << 32) | next task index
    alignas(64) std::atomic<int64_t> done{0};

    alignas(64) std::mutex sleep_mtx;
    std::condition_variable sleep_cv;
    std::atomic<int> sleepers{0};
    std::atomic<bool> stop{false};

    std::mutex err_mtx;
    std::exception_ptr first_error;

    struct job {
        uint64_t gen;
        task_fn fn;
        void * ctx;
        int64_t n, chunk;
    };

    void run_chunks(const job & j, int tid) {
        const uint64_t tag = (j.gen & 0xffffffffu) << 32;
        uint64_t w = work.load(std::memory_order_relaxed);
        for (;;) {
            if ((w & ~0xffffffffull) != tag) return;
            const int64_t b = static_cast<int64_t>(w & 0xffffffffu);
            if (b >= j.n) return;
            const int64_t e = std::min(j.n, b + j.chunk);
            if (!work.compare_exchange_weak(w, tag | static_cast<uint64_t>(e), std::memory_order_acq_rel,
                                            std::memory_order_relaxed))
                continue;
            try {
                j.fn(j.ctx, b, e, tid);
            } catch (...) {
                std::lock_guard<std::mutex> lk(err_mtx);
                if (!first_error) first_error = std::current_exception();
            }
            done.fetch_add(e - b, std::memory_order_acq_rel);
            w = work.load(std::memory_order_relaxed);
        }
    }

    // Waits for a stable generation other than `seen`; returns false on stop.
    bool wait_job(uint64_t seen, job & out) {
        auto changed = [&] {
            const uint64_t g = gen.load(std::memory_order_acquire);
            return g != seen && !(g & 1);
        };
        for (;;) {
            if (stop.load(std::memory_order_acquire)) return false;
            if (!changed()) {
                const auto t0 = std::chrono::steady_clock::now();
                const auto limit = std::chrono::microseconds(spin_us);
                int spins = 0;
                while (!changed()) {
                    KAIL_CPU_RELAX();
                    if (++spins == 64) {
                        spins = 0;
                        if (stop.load(std::memory_order_relaxed)) return false;
                        if (std::chrono::steady_clock::now() - t0 > limit) break;
                    }
                }
                if (!changed()) {
                    std::unique_lock<std::mutex> lk(sleep_mtx);
                    sleepers.fetch_add(1, std::memory_order_seq_cst);
                    sleep_cv.wait(lk, [&] { return changed() || stop.load(std::memory_order_seq_cst); });
                    sleepers.fetch_sub(1, std::memory_order_relaxed);
                    if (stop.load()) return false;
                }
            }
            // Seqlock read of the job fields.
            const uint64_t g = gen.load(std::memory_order_acquire);
            if (g == seen || (g & 1)) continue;
            out.fn = job_fn.load(std::memory_order_relaxed);
            out.ctx = job_ctx.load(std::memory_order_relaxed);
            out.n = job_n.load(std::memory_order_relaxed);
            out.chunk = job_chunk.load(std::memory_order_relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (gen.load(std::memory_order_relaxed) != g) continue;
            out.gen = g;
            return true;
        }
    }

    void worker_main(int tid) {
        tl_pool = this;
        tl_thread_id = tid;
        uint64_t seen = 0;
        job j{};
        while (wait_job(seen, j)) {
            seen = j.gen;
            run_chunks(j, tid);
        }
    }
};

threadpool::threadpool(int n_threads) : impl_(new impl) {
    if (n_threads <= 0) n_threads = cpu_features_get().default_threads;
    n_threads = std::max(1, std::min(n_threads, 512));
    impl_->n_threads = n_threads;
    impl_->spin_us = default_spin_us();
    impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
    for (int t = 1; t < n_threads; t++) impl_->workers.emplace_back([this, t] { impl_->worker_main(t); });
}

threadpool::~threadpool() {
    {
        std::lock_guard<std::mutex> lk(impl_->sleep_mtx);
        impl_->stop.store(true, std::memory_order_seq_cst);
    }
    impl_->sleep_cv.notify_all();
    for (auto & th : impl_->workers) th.join();
}

int threadpool::n_threads() const { return impl_->n_threads; }

void threadpool::run(int64_t n_tasks, int64_t chunk, task_fn fn, void * ctx) {
    if (n_tasks <= 0) return;
    if (n_tasks >= (int64_t(1) << 31)) throw error(KAIL_E_INVALID_ARG, "threadpool: too many tasks");
    impl & p = *impl_;
    if (chunk <= 0) chunk = std::max<int64_t>(1, n_tasks / (int64_t(p.n_threads) * 4));
    // Single thread, nested call, or a job of one chunk: run inline.
    if (p.n_threads == 1 || tl_pool == &p || n_tasks <= chunk) {
        fn(ctx, 0, n_tasks, tl_pool == &p ? tl_thread_id : 0);
        return;
    }
    std::lock_guard<std::mutex> call_lock(p.call_mtx);
    const impl * saved_pool = tl_pool;
    const int saved_tid = tl_thread_id;
    tl_pool = &p;
    tl_thread_id = 0;

    const uint64_t g0 = p.gen.load(std::memory_order_relaxed);
    p.gen.store(g0 + 1, std::memory_order_relaxed);  // odd: fields being written
    std::atomic_thread_fence(std::memory_order_release);
    p.job_fn.store(fn, std::memory_order_relaxed);
    p.job_ctx.store(ctx, std::memory_order_relaxed);
    p.job_n.store(n_tasks, std::memory_order_relaxed);
    p.job_chunk.store(chunk, std::memory_order_relaxed);
    p.done.store(0, std::memory_order_relaxed);
    const uint64_t g = g0 + 2;
    p.work.store((g & 0xffffffffu) << 32, std::memory_order_relaxed);
    p.gen.store(g, std::memory_order_seq_cst);  // even: published
    if (p.sleepers.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lk(p.sleep_mtx);
        p.sleep_cv.notify_all();
    }

    impl::job j{g, fn, ctx, n_tasks, chunk};
    p.run_chunks(j, 0);
    int spins = 0;
    while (p.done.load(std::memory_order_acquire) < n_tasks) {
        KAIL_CPU_RELAX();
        if (++spins > 100000) std::this_thread::yield();
    }
    tl_pool = saved_pool;
    tl_thread_id = saved_tid;

    std::exception_ptr err;
    {
        std::lock_guard<std::mutex> lk(p.err_mtx);
        err = p.first_error;
        p.first_error = nullptr;
    }
    if (err) std::rethrow_exception(err);
}

} // namespace kail
