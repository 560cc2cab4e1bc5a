// Internal to src/cache: option parsing, shared bookkeeping and the policy factories.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kail/expert_cache.h"
#include "kail/status.h"

namespace kail {
namespace cache {

// "name:key=value,key=value" -> name and options. take() consumes an option; finish() rejects
// any option nobody took, so a typo never silently falls back to a default.
class policy_options {
  public:
    explicit policy_options(const std::string & spec);
    const std::string & base() const { return base_; }
    double take(const char * key, double def, double lo, double hi);
    void finish() const;

  private:
    std::string                   spec_;
    std::string                   base_;
    std::map<std::string, double> kv_;
};

// Dense per-(layer, expert) state with checked ids, and the decode step (tokens seen so far).
class dense_policy : public expert_cache_policy {
  public:
    dense_policy(std::string name, const expert_cache_policy_params & params);
    const std::string & name() const override { return name_; }

  protected:
    size_t  index(int32_t layer, int32_t expert) const;
    size_t  index(const expert_key & k) const { return index(k.layer, k.expert); }
    // Advances the step when `token` differs from the last one seen; returns the step.
    int64_t step_for(int64_t token);

    std::string name_;
    int32_t     n_layer_;
    int32_t     n_expert_;
    int64_t     step_ = -1;
    int64_t     last_token_ = INT64_MIN;
};

// Exponentially decayed access counts: each access adds its weight, and a count halves every
// half_life tokens. Kept for every expert, resident or not, so an expert evicted and asked for
// again comes back with its history.
class decayed_counts {
  public:
    void   init(size_t n, double half_life);
    void   add(size_t i, int64_t step, double w);
    double value(size_t i, int64_t step) const;
    // The value a count settles at when the expert is used once every token.
    double saturation() const { return 1.0 / (1.0 - decay_); }
    // Starts a count at what `share` (accesses per token) settles at, before the first token.
    void   seed(size_t i, double share) {
        value_[i] = std::max(0.0, std::min(1.0, share)) * saturation();
        at_[i] = 0;
    }

  private:
    std::vector<double>  value_;
    std::vector<int64_t> at_;
    double               decay_ = 0.5;  // per token
    double               log_decay_ = 0;
};

std::unique_ptr<expert_cache_policy> make_lru(const std::string & name, const expert_cache_policy_params & p, policy_options & o);
std::unique_ptr<expert_cache_policy> make_lfu(const std::string & name, const expert_cache_policy_params & p, policy_options & o);
std::unique_ptr<expert_cache_policy> make_lrfu(const std::string & name, const expert_cache_policy_params & p, policy_options & o);
std::unique_ptr<expert_cache_policy> make_context(const std::string & name, const expert_cache_policy_params & p, policy_options & o);
std::unique_ptr<expert_cache_policy> make_belady(const std::string & name, const expert_cache_policy_params & p, policy_options & o,
                                                 const expert_trace * future);

} // namespace cache
} // namespace kail
