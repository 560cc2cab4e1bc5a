// Eviction policies of the routed-expert RAM cache, and a trace simulator that measures them
// against Belady's optimal replacement (MIN).
//
// A policy only ranks entries; the cache owns residency, pinning and bytes. The cache tells the
// policy what the router chose (on_route), which experts were asked for (on_access), and what it
// loaded or dropped (on_insert / on_evict), then asks it to pick a victim among the entries it may
// evict (choose_victim). Candidates can belong to several layers (one byte budget for the whole
// model), so every policy's ranking is comparable across layers. Pinned entries (in use) and loads
// in flight are simply never offered as candidates; prefetched entries not yet used arrive through
// on_insert(..., prefetched = true) with no access.
//
// Policies are not thread-safe: a concurrent cache calls them under its own lock. Calls follow the
// order of decoding: tokens never go back, and within a token layers come in model order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kail {

struct expert_key {
    int32_t layer  = 0;
    int32_t expert = 0;
};

struct expert_cache_policy_params {
    int32_t n_layer  = 0;  // layer ids are 0 .. n_layer-1
    int32_t n_expert = 0;  // expert ids per layer are 0 .. n_expert-1
};

class expert_cache_policy {
  public:
    virtual ~expert_cache_policy() = default;

    // The policy's name as given to expert_cache_policy_init (options included).
    virtual const std::string & name() const = 0;

    // The router's whole choice for `token` at `layer` (n experts, gating probabilities or null),
    // before any of them is looked up. Optional for the cache; policies that match routing
    // context use it, the others ignore it.
    virtual void on_route(int32_t layer, int64_t token, const int32_t * experts, const float * probs, int32_t n) {}

    // `expert` of `layer` is asked for by `token`, whether it is cached or not.
    virtual void on_access(int32_t layer, int32_t expert, float gating_prob, int64_t token) = 0;

    // The entry became resident: loaded on demand, or prefetched (not asked for yet).
    virtual void on_insert(int32_t layer, int32_t expert, int64_t token, bool prefetched) = 0;

    // The entry left the cache.
    virtual void on_evict(int32_t layer, int32_t expert) = 0;

    // Usage remembered from earlier runs, before the first token: `expert` of `layer` was used by
    // this share of tokens (0..1, decayed over runs). Frequency policies start their counts where
    // that rate settles; recency-only policies ignore it.
    virtual void on_history(int32_t layer, int32_t expert, double share) {}

    // The index in candidates[0..n) of the entry to evict. Candidates are resident and evictable
    // (n >= 1); they may span layers. The cache evicts it and then calls on_evict.
    virtual size_t choose_victim(const expert_key * candidates, size_t n) = 0;
};

// Access trace for the simulator: one record per (token, layer), k expert slots per record.
// Expert ids < 0 are padding (records with fewer experts). Tokens are global decode steps:
// the caller numbers them across prompts/problems in the order they were decoded.
struct expert_trace {
    int32_t              k = 0;
    std::vector<int32_t> layer;    // n records
    std::vector<int64_t> token;    // n records
    std::vector<int32_t> experts;  // n * k, in the router's order (highest probability first)
    std::vector<float>   probs;    // n * k gating probabilities, or empty (then 1/k each)
};

// Policy names: "lru", "lfu", "lrfu", "context" (the default), "belady" (offline: needs the
// future, simulator only). A name may carry options, "lfu:half_life=16" or
// "context:window=512,beta=8"; unknown names or options throw KAIL_E_INVALID_ARG.
const std::vector<std::string> & expert_cache_policy_names();
const char * expert_cache_default_policy();

// future: the trace the policy will see, in simulation order (expert_trace_sorted); required by
// "belady", ignored by the online policies.
std::unique_ptr<expert_cache_policy> expert_cache_policy_init(const std::string & name, const expert_cache_policy_params & params,
                                                              const expert_trace * future = nullptr);

// Checks a trace (sizes, ids, one record per (token, layer), no expert twice in a record) and
// returns it ordered for replay: by token, then layer. Throws KAIL_E_INVALID_ARG naming the record.
expert_trace expert_trace_sorted(const expert_trace & trace);

struct expert_cache_sim_result {
    std::string          policy;
    int64_t              accesses = 0;
    int64_t              hits = 0;
    int64_t              evictions = 0;
    std::vector<int64_t> layer_accesses;  // per layer
    std::vector<int64_t> layer_hits;
    double hit_rate() const { return accesses > 0 ? static_cast<double>(hits) / static_cast<double>(accesses) : 0.0; }
};

// Replays the trace through a cache of slots_per_layer experts per layer (demand fetch): records
// in token order, then layer; within a record, experts in the router's order, one access each.
// A miss loads the expert into a slot, evicting the policy's choice among the layer's resident
// experts when the layer is full. Nothing is pinned between accesses, so an expert used earlier in
// the same token may be evicted for the next one, as in Belady's model.
expert_cache_sim_result expert_cache_simulate(const expert_trace & trace, int32_t slots_per_layer, const std::string & policy);

// The same for several policies over one checked, sorted copy of the trace.
std::vector<expert_cache_sim_result> expert_cache_simulate_many(const expert_trace & trace, int32_t slots_per_layer,
                                                                const std::vector<std::string> & policies);

} // namespace kail
