// LRU, until the stream takes the policies of include/kail/expert_cache.h.
#include "stream/victim_policy.h"

#include <vector>

namespace kail {

namespace {

class lru_policy final : public victim_policy {
  public:
    lru_policy(int32_t n_layer, int32_t n_expert) : n_expert_(n_expert), last_(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), 0) {}
    void on_access(int32_t layer, int32_t expert, float, int64_t) override { last_[index(layer, expert)] = ++clock_; }
    void on_insert(int32_t layer, int32_t expert, int64_t, bool) override { last_[index(layer, expert)] = ++clock_; }
    void on_evict(int32_t, int32_t) override {}
    size_t choose_victim(const stream_key * c, size_t n) override {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (last_[index(c[i].layer, c[i].expert)] < last_[index(c[best].layer, c[best].expert)]) best = i;
        return best;
    }

  private:
    size_t index(int32_t layer, int32_t expert) const { return static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(expert); }
    int32_t               n_expert_;
    std::vector<uint64_t> last_;  // per (layer, expert): the clock at its last use
    uint64_t              clock_ = 0;
};

} // namespace

std::unique_ptr<victim_policy> make_victim_policy(int32_t n_layer, int32_t n_expert) {
    return std::unique_ptr<victim_policy>(new lru_policy(n_layer, n_expert));
}

} // namespace kail
