// Policy registry, trace checking and the demand-fetch simulator.
#include "kail/expert_cache.h"

#include <algorithm>
#include <numeric>

#include "cache/policies.h"
#include "kail/status.h"

namespace kail {

const std::vector<std::string> & expert_cache_policy_names() {
    static const std::vector<std::string> names = {"lru", "lfu", "lrfu", "context", "belady"};
    return names;
}

const char * expert_cache_default_policy() { return "context"; }

std::unique_ptr<expert_cache_policy> expert_cache_policy_init(const std::string & name, const expert_cache_policy_params & params,
                                                              const expert_trace * future) {
    cache::policy_options o(name);
    const std::string & base = o.base();
    if (base == "lru") return cache::make_lru(name, params, o);
    if (base == "lfu") return cache::make_lfu(name, params, o);
    if (base == "lrfu") return cache::make_lrfu(name, params, o);
    if (base == "context") return cache::make_context(name, params, o);
    if (base == "belady") return cache::make_belady(name, params, o, future);
    std::string known;
    for (const auto & n : expert_cache_policy_names()) known += (known.empty() ? "" : ", ") + n;
    throw error(KAIL_E_INVALID_ARG, "unknown cache policy '" + base + "' (known: " + known + ")");
}

namespace {

std::string record_name(size_t r, const expert_trace & t) {
    return "record " + std::to_string(r) + " (token " + std::to_string(t.token[r]) + ", layer " + std::to_string(t.layer[r]) + ")";
}

// Layer and expert counts implied by a checked trace.
expert_cache_policy_params trace_shape(const expert_trace & t) {
    expert_cache_policy_params p;
    p.n_layer = 1;
    p.n_expert = 1;
    for (int32_t l : t.layer) p.n_layer = std::max(p.n_layer, l + 1);
    for (int32_t e : t.experts) p.n_expert = std::max(p.n_expert, e + 1);
    return p;
}

} // namespace

expert_trace expert_trace_sorted(const expert_trace & in) {
    constexpr int32_t MAX_LAYERS = 1 << 12, MAX_EXPERTS = 1 << 16;
    const size_t n = in.layer.size();
    if (in.k < 1 || in.k > 1024) throw error(KAIL_E_INVALID_ARG, "trace: k (experts per record) must be in 1..1024, got " + std::to_string(in.k));
    const size_t k = static_cast<size_t>(in.k);
    if (in.token.size() != n || in.experts.size() != n * k || (!in.probs.empty() && in.probs.size() != n * k))
        throw error(KAIL_E_INVALID_ARG, "trace: " + std::to_string(n) + " records need " + std::to_string(n) + " tokens and " +
                                            std::to_string(n * k) + " experts (and probs, when given); got " + std::to_string(in.token.size()) +
                                            ", " + std::to_string(in.experts.size()) + " and " + std::to_string(in.probs.size()));
    for (size_t r = 0; r < n; r++) {
        if (in.layer[r] < 0 || in.layer[r] >= MAX_LAYERS)
            throw error(KAIL_E_INVALID_ARG, "trace: " + record_name(r, in) + ": layer must be in 0.." + std::to_string(MAX_LAYERS - 1));
        if (in.token[r] < 0) throw error(KAIL_E_INVALID_ARG, "trace: " + record_name(r, in) + ": token must be >= 0");
        for (size_t j = 0; j < k; j++) {
            const int32_t e = in.experts[r * k + j];
            if (e >= MAX_EXPERTS)
                throw error(KAIL_E_INVALID_ARG, "trace: " + record_name(r, in) + ": expert " + std::to_string(e) + " is above " +
                                                    std::to_string(MAX_EXPERTS - 1));
            if (e < 0) continue;
            for (size_t i = 0; i < j; i++)
                if (in.experts[r * k + i] == e)
                    throw error(KAIL_E_INVALID_ARG, "trace: " + record_name(r, in) + ": expert " + std::to_string(e) + " appears twice");
            if (!in.probs.empty() && !(in.probs[r * k + j] >= 0.0f && in.probs[r * k + j] <= 1.0f))
                throw error(KAIL_E_INVALID_ARG, "trace: " + record_name(r, in) + ": gating probability must be in [0, 1]");
        }
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return in.token[a] != in.token[b] ? in.token[a] < in.token[b] : in.layer[a] < in.layer[b];
    });
    for (size_t i = 1; i < n; i++)
        if (in.token[order[i]] == in.token[order[i - 1]] && in.layer[order[i]] == in.layer[order[i - 1]])
            throw error(KAIL_E_INVALID_ARG, "trace: " + record_name(order[i], in) + " repeats " + record_name(order[i - 1], in));
    expert_trace out;
    out.k = in.k;
    out.layer.resize(n);
    out.token.resize(n);
    out.experts.resize(n * k);
    out.probs.resize(n * k);
    for (size_t i = 0; i < n; i++) {
        const size_t r = order[i];
        out.layer[i] = in.layer[r];
        out.token[i] = in.token[r];
        std::copy_n(in.experts.begin() + static_cast<std::ptrdiff_t>(r * k), k, out.experts.begin() + static_cast<std::ptrdiff_t>(i * k));
        if (in.probs.empty()) {
            size_t used = 0;
            for (size_t j = 0; j < k; j++) used += in.experts[r * k + j] >= 0;
            std::fill_n(out.probs.begin() + static_cast<std::ptrdiff_t>(i * k), k, used ? 1.0f / static_cast<float>(used) : 0.0f);
        } else {
            std::copy_n(in.probs.begin() + static_cast<std::ptrdiff_t>(r * k), k, out.probs.begin() + static_cast<std::ptrdiff_t>(i * k));
        }
    }
    return out;
}

namespace {

expert_cache_sim_result simulate_sorted(const expert_trace & t, const expert_cache_policy_params & shape, int32_t slots, const std::string & name) {
    std::unique_ptr<expert_cache_policy> policy = expert_cache_policy_init(name, shape, &t);
    expert_cache_sim_result res;
    res.policy = name;
    res.layer_accesses.assign(shape.n_layer, 0);
    res.layer_hits.assign(shape.n_layer, 0);
    const size_t k = static_cast<size_t>(t.k);
    std::vector<uint8_t> resident(static_cast<size_t>(shape.n_layer) * shape.n_expert, 0);
    std::vector<std::vector<expert_key>> cached(shape.n_layer);  // resident experts per layer
    std::vector<int32_t> routed;
    std::vector<float> probs;
    for (size_t r = 0; r < t.layer.size(); r++) {
        const int32_t layer = t.layer[r];
        const int64_t token = t.token[r];
        routed.clear();
        probs.clear();
        for (size_t j = 0; j < k; j++)
            if (t.experts[r * k + j] >= 0) {
                routed.push_back(t.experts[r * k + j]);
                probs.push_back(t.probs[r * k + j]);
            }
        if (routed.empty()) continue;
        policy->on_route(layer, token, routed.data(), probs.data(), static_cast<int32_t>(routed.size()));
        auto & in_layer = cached[layer];
        for (size_t j = 0; j < routed.size(); j++) {
            const int32_t e = routed[j];
            uint8_t & res_flag = resident[static_cast<size_t>(layer) * shape.n_expert + e];
            res.accesses++;
            res.layer_accesses[layer]++;
            policy->on_access(layer, e, probs[j], token);
            if (res_flag) {
                res.hits++;
                res.layer_hits[layer]++;
                continue;
            }
            if (static_cast<int32_t>(in_layer.size()) >= slots) {
                const size_t v = policy->choose_victim(in_layer.data(), in_layer.size());
                if (v >= in_layer.size())
                    throw error(KAIL_E_INTERNAL, "cache policy " + name + " chose victim " + std::to_string(v) + " of " + std::to_string(in_layer.size()));
                const expert_key victim = in_layer[v];
                in_layer[v] = in_layer.back();
                in_layer.pop_back();
                resident[static_cast<size_t>(victim.layer) * shape.n_expert + victim.expert] = 0;
                policy->on_evict(victim.layer, victim.expert);
                res.evictions++;
            }
            in_layer.push_back({layer, e});
            res_flag = 1;
            policy->on_insert(layer, e, token, false);
        }
    }
    return res;
}

} // namespace

std::vector<expert_cache_sim_result> expert_cache_simulate_many(const expert_trace & trace, int32_t slots_per_layer,
                                                                const std::vector<std::string> & policies) {
    if (slots_per_layer < 1) throw error(KAIL_E_INVALID_ARG, "cache simulation: slots per layer must be >= 1, got " + std::to_string(slots_per_layer));
    const expert_trace sorted = expert_trace_sorted(trace);
    const expert_cache_policy_params shape = trace_shape(sorted);
    // Every name is checked before any replay, so a typo fails fast.
    for (const auto & name : policies) expert_cache_policy_init(name, shape, &sorted);
    std::vector<expert_cache_sim_result> out;
    out.reserve(policies.size());
    for (const auto & name : policies) out.push_back(simulate_sorted(sorted, shape, slots_per_layer, name));
    return out;
}

expert_cache_sim_result expert_cache_simulate(const expert_trace & trace, int32_t slots_per_layer, const std::string & policy) {
    return expert_cache_simulate_many(trace, slots_per_layer, {policy}).front();
}

} // namespace kail
