// Victim choice of the expert stream's RAM cache, behind an interface shaped like
// include/kail/expert_cache.h's expert_cache_policy, so the stream can switch to those policies in
// one place (make_victim_policy).
//
// The stream calls it under its lock. It sees demand traffic only: for each request the layer's
// distinct experts with their largest gating weight in the batch (on_route, then on_access per
// expert), on_insert when an expert enters the policy's books (read on demand, or a prediction
// first asked for), on_evict when it leaves. Steps count forward passes (a decode step is one
// token); within a step, layers come in order. Speculative (prefetched, unused) entries stay
// outside the policy: the stream evicts stale predictions before asking here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kail {

struct stream_key {
    int32_t layer = 0;
    int32_t expert = 0;
};

class victim_policy {
  public:
    virtual ~victim_policy() = default;
    virtual void on_route(int32_t layer, int64_t step, const int32_t * experts, const float * probs, int32_t n) {}
    virtual void on_access(int32_t layer, int32_t expert, float prob, int64_t step) = 0;
    virtual void on_insert(int32_t layer, int32_t expert, int64_t step, bool prefetched) = 0;
    virtual void on_evict(int32_t layer, int32_t expert) = 0;
    // Index in candidates[0..n) (n >= 1: resident, unpinned, ready) of the entry to evict.
    virtual size_t choose_victim(const stream_key * candidates, size_t n) = 0;
};

std::unique_ptr<victim_policy> make_victim_policy(int32_t n_layer, int32_t n_expert);

} // namespace kail
