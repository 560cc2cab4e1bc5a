// Option parsing, shared bookkeeping, and the recency/frequency policies: lru, lfu, lrfu.
#include "cache/policies.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

namespace kail {
namespace cache {

policy_options::policy_options(const std::string & spec) : spec_(spec) {
    const size_t colon = spec.find(':');
    base_ = spec.substr(0, colon);
    if (colon == std::string::npos) return;
    size_t pos = colon + 1;
    while (pos <= spec.size()) {
        size_t end = spec.find(',', pos);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(pos, end - pos);
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
            throw error(KAIL_E_INVALID_ARG, "cache policy '" + spec + "': option '" + item + "' is not key=value");
        const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
        char * stop = nullptr;
        errno = 0;
        const double v = std::strtod(val.c_str(), &stop);
        if (errno != 0 || stop != val.c_str() + val.size() || !std::isfinite(v))
            throw error(KAIL_E_INVALID_ARG, "cache policy '" + spec + "': option " + key + " needs a number, got '" + val + "'");
        if (kv_.count(key)) throw error(KAIL_E_INVALID_ARG, "cache policy '" + spec + "': option " + key + " given twice");
        kv_[key] = v;
        pos = end + 1;
    }
}

double policy_options::take(const char * key, double def, double lo, double hi) {
    auto it = kv_.find(key);
    if (it == kv_.end()) return def;
    const double v = it->second;
    kv_.erase(it);
    if (!(v >= lo && v <= hi))
        throw error(KAIL_E_INVALID_ARG, "cache policy '" + spec_ + "': " + key + " must be in [" + std::to_string(lo) + ", " +
                                            std::to_string(hi) + "], got " + std::to_string(v));
    return v;
}

void policy_options::finish() const {
    if (kv_.empty()) return;
    std::string names;
    for (const auto & kv : kv_) names += (names.empty() ? "" : ", ") + kv.first;
    throw error(KAIL_E_INVALID_ARG, "cache policy '" + spec_ + "': unknown option(s) " + names);
}

dense_policy::dense_policy(std::string name, const expert_cache_policy_params & params)
    : name_(std::move(name)), n_layer_(params.n_layer), n_expert_(params.n_expert) {
    if (n_layer_ <= 0 || n_expert_ <= 0 || static_cast<int64_t>(n_layer_) * n_expert_ > (int64_t(1) << 26))
        throw error(KAIL_E_INVALID_ARG, "cache policy " + name_ + ": n_layer (" + std::to_string(n_layer_) + ") and n_expert (" +
                                            std::to_string(n_expert_) + ") must be positive, at most 2^26 entries in all");
}

size_t dense_policy::index(int32_t layer, int32_t expert) const {
    if (layer < 0 || layer >= n_layer_ || expert < 0 || expert >= n_expert_)
        throw error(KAIL_E_INVALID_ARG, "cache policy " + name_ + ": expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                            " is outside " + std::to_string(n_layer_) + " layers x " + std::to_string(n_expert_) + " experts");
    return static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(expert);
}

int64_t dense_policy::step_for(int64_t token) {
    if (token != last_token_) {
        last_token_ = token;
        step_++;
    }
    return step_;
}

void decayed_counts::init(size_t n, double half_life) {
    value_.assign(n, 0.0);
    at_.assign(n, 0);
    decay_ = std::exp2(-1.0 / half_life);
    log_decay_ = std::log(decay_);
}

void decayed_counts::add(size_t i, int64_t step, double w) {
    value_[i] = value(i, step) + w;
    at_[i] = step;
}

double decayed_counts::value(size_t i, int64_t step) const {
    if (value_[i] == 0.0) return 0.0;
    return value_[i] * std::exp(log_decay_ * static_cast<double>(step - at_[i]));
}

namespace {

// Least recently used: the entry whose last access (or load) is oldest goes first.
class lru_policy final : public dense_policy {
  public:
    lru_policy(const std::string & name, const expert_cache_policy_params & p) : dense_policy(name, p) {
        last_.assign(static_cast<size_t>(n_layer_) * n_expert_, 0);
    }
    void on_access(int32_t layer, int32_t expert, float, int64_t) override { last_[index(layer, expert)] = ++clock_; }
    void on_insert(int32_t layer, int32_t expert, int64_t, bool) override {
        const size_t i = index(layer, expert);
        if (last_[i] == 0) last_[i] = ++clock_;  // a prefetch counts as a use when loaded
    }
    void on_evict(int32_t layer, int32_t expert) override { last_[index(layer, expert)] = 0; }
    size_t choose_victim(const expert_key * c, size_t n) override {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (last_[index(c[i])] < last_[index(c[best])]) best = i;
        return best;
    }

  private:
    std::vector<uint64_t> last_;
    uint64_t              clock_ = 0;
};

// Shared by lfu and lrfu: decayed counts ranked first, recency breaks ties; lrfu also weighs
// accesses by gating probability and never evicts an expert the current token has been routed to
// but not yet asked for.
class counting_policy final : public dense_policy {
  public:
    counting_policy(const std::string & name, const expert_cache_policy_params & p, double half_life, double prob_weight, bool protect_routed)
        : dense_policy(name, p), prob_weight_(prob_weight), protect_(protect_routed) {
        const size_t n = static_cast<size_t>(n_layer_) * n_expert_;
        counts_.init(n, half_life);
        last_.assign(n, 0);
        routed_.assign(n, 0);
    }
    void on_route(int32_t layer, int64_t token, const int32_t * experts, const float *, int32_t n) override {
        if (!protect_) return;
        step_for(token);
        clear_routed();
        for (int32_t i = 0; i < n; i++)
            if (experts[i] >= 0) {
                const size_t k = index(layer, experts[i]);
                routed_[k] = 1;
                routed_list_.push_back(k);
            }
    }
    void on_access(int32_t layer, int32_t expert, float prob, int64_t token) override {
        const size_t i = index(layer, expert);
        const double w = (1.0 - prob_weight_) + prob_weight_ * std::min(1.0, std::max(0.0, static_cast<double>(prob)));
        counts_.add(i, step_for(token), w);
        last_[i] = ++clock_;
        routed_[i] = 0;
    }
    void on_insert(int32_t layer, int32_t expert, int64_t, bool) override {
        const size_t i = index(layer, expert);
        if (last_[i] == 0) last_[i] = ++clock_;
    }
    void on_history(int32_t layer, int32_t expert, double share) override { counts_.seed(index(layer, expert), share); }
    void on_evict(int32_t, int32_t) override {}
    size_t choose_victim(const expert_key * c, size_t n) override {
        size_t best = 0;
        double best_score = score(c[0]);
        for (size_t i = 1; i < n; i++) {
            const double s = score(c[i]);
            if (s < best_score || (s == best_score && last_[index(c[i])] < last_[index(c[best])])) {
                best = i;
                best_score = s;
            }
        }
        return best;
    }

  private:
    double score(const expert_key & k) const {
        const size_t i = index(k);
        if (routed_[i]) return std::numeric_limits<double>::infinity();
        return counts_.value(i, step_ < 0 ? 0 : step_);
    }
    void clear_routed() {
        for (size_t k : routed_list_) routed_[k] = 0;
        routed_list_.clear();
    }

    decayed_counts        counts_;
    std::vector<uint64_t> last_;
    uint64_t              clock_ = 0;
    double                prob_weight_;
    bool                  protect_;
    std::vector<uint8_t>  routed_;
    std::vector<size_t>   routed_list_;
};

} // namespace

std::unique_ptr<expert_cache_policy> make_lru(const std::string & name, const expert_cache_policy_params & p, policy_options & o) {
    o.finish();
    return std::unique_ptr<expert_cache_policy>(new lru_policy(name, p));
}

std::unique_ptr<expert_cache_policy> make_lfu(const std::string & name, const expert_cache_policy_params & p, policy_options & o) {
    const double half_life = o.take("half_life", 32, 0.5, 1e9);
    o.finish();
    return std::unique_ptr<expert_cache_policy>(new counting_policy(name, p, half_life, 0.0, false));
}

std::unique_ptr<expert_cache_policy> make_lrfu(const std::string & name, const expert_cache_policy_params & p, policy_options & o) {
    const double half_life = o.take("half_life", 8, 0.5, 1e9);
    const double prob_weight = o.take("prob_weight", 0.5, 0, 1);
    o.finish();
    return std::unique_ptr<expert_cache_policy>(new counting_policy(name, p, half_life, prob_weight, true));
}

} // namespace cache
} // namespace kail
