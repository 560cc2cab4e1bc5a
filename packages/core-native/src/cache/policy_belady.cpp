// Belady's MIN: evict the entry asked for again farthest in the future (or never). Optimal for a
// demand-fetch cache, so the simulator reports it as the bound the online policies chase. It reads
// the future from the trace it was built with and checks every access against it.
#include "cache/policies.h"

#include <limits>

namespace kail {
namespace cache {

namespace {

class belady_policy final : public dense_policy {
  public:
    belady_policy(const std::string & name, const expert_cache_policy_params & p, const expert_trace & future) : dense_policy(name, p) {
        const size_t n_keys = static_cast<size_t>(n_layer_) * n_expert_;
        const size_t n_rec = future.layer.size();
        const size_t k = static_cast<size_t>(future.k);
        // Positions of every access in replay order, grouped per key (counting sort).
        std::vector<uint32_t> count(n_keys + 1, 0);
        for (size_t r = 0; r < n_rec; r++)
            for (size_t j = 0; j < k; j++) {
                const int32_t e = future.experts[r * k + j];
                if (e >= 0) count[index(future.layer[r], e) + 1]++;
            }
        for (size_t i = 0; i < n_keys; i++) count[i + 1] += count[i];
        first_.assign(count.begin(), count.end());
        next_.assign(n_keys, 0);
        for (size_t i = 0; i < n_keys; i++) next_[i] = first_[i];
        pos_.resize(count[n_keys]);
        sequence_.resize(count[n_keys]);
        std::vector<uint32_t> fill(count.begin(), count.end() - 1);
        uint64_t t = 0;
        for (size_t r = 0; r < n_rec; r++)
            for (size_t j = 0; j < k; j++) {
                const int32_t e = future.experts[r * k + j];
                if (e < 0) continue;
                const size_t key = index(future.layer[r], e);
                pos_[fill[key]++] = t;
                sequence_[t] = key;
                t++;
            }
    }

    void on_access(int32_t layer, int32_t expert, float, int64_t) override {
        const size_t key = index(layer, expert);
        if (cursor_ >= sequence_.size() || sequence_[cursor_] != key)
            throw error(KAIL_E_INVALID_ARG, "belady: access " + std::to_string(cursor_) + " (layer " + std::to_string(layer) + ", expert " +
                                                std::to_string(expert) + ") differs from the trace it was built with");
        next_[key]++;
        cursor_++;
    }
    void on_insert(int32_t, int32_t, int64_t, bool) override {}
    void on_evict(int32_t, int32_t) override {}
    size_t choose_victim(const expert_key * c, size_t n) override {
        size_t best = 0;
        uint64_t best_next = next_use(c[0]);
        for (size_t i = 1; i < n && best_next != NEVER; i++) {
            const uint64_t u = next_use(c[i]);
            if (u > best_next) {
                best = i;
                best_next = u;
            }
        }
        return best;
    }

  private:
    static constexpr uint64_t NEVER = std::numeric_limits<uint64_t>::max();
    uint64_t next_use(const expert_key & k) const {
        const size_t key = index(k);
        return next_[key] < first_[key + 1] ? pos_[next_[key]] : NEVER;
    }

    std::vector<uint32_t> first_;     // per key: its first slot in pos_ (n_keys + 1 bounds)
    std::vector<uint32_t> next_;      // per key: slot in pos_ of its next access
    std::vector<uint64_t> pos_;       // access positions, grouped by key
    std::vector<size_t>   sequence_;  // key of every access, in order
    uint64_t              cursor_ = 0;
};

} // namespace

std::unique_ptr<expert_cache_policy> make_belady(const std::string & name, const expert_cache_policy_params & p, policy_options & o,
                                                 const expert_trace * future) {
    o.finish();
    if (!future)
        throw error(KAIL_E_INVALID_ARG, "cache policy belady needs the future trace: it is offline, for the simulator only");
    if (future->experts.size() >= (uint64_t(1) << 32)) throw error(KAIL_E_INVALID_ARG, "belady: trace too long (2^32 accesses at most)");
    return std::unique_ptr<expert_cache_policy>(new belady_policy(name, p, *future));
}

} // namespace cache
} // namespace kail
