// A pool of persistent worker threads for data-parallel kernels.
//
// Decode calls parallel_for hundreds of times per token, so dispatch must cost microseconds: idle
// workers spin on an atomic generation counter for a short while (KAIL_SPIN_US, default 200 µs)
// before sleeping on a condition variable, and the calling thread runs a share of the work itself.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace kail {

class threadpool {
  public:
    // fn(begin, end, thread_id) over a sub-range of task indices. thread_id is in [0, n_threads()).
    using task_fn = void (*)(void * ctx, int64_t begin, int64_t end, int thread_id);

    // n_threads <= 0 means cpu_features_get().default_threads. The calling thread is thread 0, so
    // n_threads - 1 workers are started.
    explicit threadpool(int n_threads = 0);
    ~threadpool();
    threadpool(const threadpool &) = delete;
    threadpool & operator=(const threadpool &) = delete;

    int n_threads() const;

    // Runs fn over [0, n_tasks) in chunks of `chunk` tasks (chunk <= 0 picks about four chunks
    // per thread) and returns when every chunk is done. Chunks are handed out dynamically, so a
    // thread slowed by the OS does not hold the others back. Calls from several threads at once
    // are serialised; a call from inside a task runs inline on the calling thread.
    // The first exception thrown by a task is rethrown here after all chunks have finished.
    void run(int64_t n_tasks, int64_t chunk, task_fn fn, void * ctx);

    template <typename F>
    void parallel_for(int64_t n_tasks, F && f, int64_t chunk = 0) {
        using Fn = std::remove_reference_t<F>;
        run(n_tasks, chunk,
            [](void * ctx, int64_t b, int64_t e, int tid) { (*static_cast<Fn *>(ctx))(b, e, tid); },
            const_cast<void *>(static_cast<const void *>(&f)));
    }

    struct impl;

  private:
    std::unique_ptr<impl> impl_;
};

} // namespace kail
