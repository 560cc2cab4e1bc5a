// Victim choice of the expert stream's RAM cache, behind a small interface so the cache can switch
// to the policies of include/kail/expert_cache.h in one place (make_victim_policy).
//
// The policy sees demand traffic only: an expert enters it when a forward pass first asks for it
// (insert) and is touched on every later request (access). Speculative (prefetched, not yet used)
// entries are kept outside it by the stream, which evicts stale predictions before asking here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kail {

class victim_policy {
  public:
    virtual ~victim_policy() = default;
    virtual void insert(int layer, int32_t expert) = 0;
    virtual void access(int layer, int32_t expert) = 0;
    virtual void erase(int layer, int32_t expert) = 0;
    // The entry to evict among those `evictable` accepts (not pinned, not loading); false if none.
    virtual bool victim(const std::function<bool(int, int32_t)> & evictable, int & layer, int32_t & expert) = 0;
};

std::unique_ptr<victim_policy> make_victim_policy();

} // namespace kail
