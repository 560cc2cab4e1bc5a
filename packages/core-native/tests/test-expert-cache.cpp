// Expert-cache policies and the trace simulator: exact hit counts of LRU and Belady on textbook
// reference strings, Belady against an exhaustive search, each policy's defining behaviour on small
// hand-made traces, the policy interface as a concurrent cache uses it (candidates across layers,
// prefetched entries), option and trace validation, and the real Mixtral routing trace when the
// shared fixture is present.
#include "kail/expert_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kail/status.h"
#include "op_test_util.h"

using namespace kail;

#define CHECK_EQ(a, b)                                                                                              \
    do {                                                                                                            \
        const long long va_ = (long long)(a), vb_ = (long long)(b);                                                 \
        if (va_ != vb_) {                                                                                           \
            std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__, __LINE__, #a, va_, #b, vb_); \
            g_failures++;                                                                                           \
        }                                                                                                           \
    } while (0)

template <typename Fn>
static bool throws_code(error_code code, Fn && fn, const char * needle = nullptr) {
    try {
        fn();
    } catch (const error & e) {
        if (e.code() != code) return false;
        if (needle && std::string(e.what()).find(needle) == std::string::npos) {
            std::fprintf(stderr, "  message without '%s': %s\n", needle, e.what());
            return false;
        }
        return true;
    }
    return false;
}

// One layer, one expert per token: a classic page reference string.
static expert_trace single(const std::vector<int32_t> & refs) {
    expert_trace t;
    t.k = 1;
    for (size_t i = 0; i < refs.size(); i++) {
        t.layer.push_back(0);
        t.token.push_back(static_cast<int64_t>(i));
        t.experts.push_back(refs[i]);
        t.probs.push_back(1.0f);
    }
    return t;
}

// One layer, k experts per token.
static expert_trace rows(const std::vector<std::vector<int32_t>> & tokens) {
    expert_trace t;
    t.k = static_cast<int32_t>(tokens.empty() ? 1 : tokens[0].size());
    for (size_t i = 0; i < tokens.size(); i++) {
        t.layer.push_back(0);
        t.token.push_back(static_cast<int64_t>(i));
        for (size_t j = 0; j < tokens[i].size(); j++) {
            t.experts.push_back(tokens[i][j]);
            t.probs.push_back(j == 0 ? 0.7f : 0.3f / static_cast<float>(tokens[i].size() - 1));
        }
    }
    return t;
}

static int64_t hits(const expert_trace & t, int32_t slots, const std::string & policy) {
    return expert_cache_simulate(t, slots, policy).hits;
}

// The most hits any demand-fetch replacement can get: every victim tried at every miss, memoized
// on (position, sorted cache contents).
static int64_t optimal_hits(const std::vector<int32_t> & seq, int32_t slots) {
    std::map<std::pair<size_t, std::vector<int32_t>>, int64_t> memo;
    std::function<int64_t(size_t, std::vector<int32_t>)> go = [&](size_t i, std::vector<int32_t> cache) -> int64_t {
        if (i == seq.size()) return 0;
        std::sort(cache.begin(), cache.end());
        auto key = std::make_pair(i, cache);
        auto it = memo.find(key);
        if (it != memo.end()) return it->second;
        int64_t best = 0;
        if (std::find(cache.begin(), cache.end(), seq[i]) != cache.end()) {
            best = 1 + go(i + 1, cache);
        } else if (static_cast<int32_t>(cache.size()) < slots) {
            cache.push_back(seq[i]);
            best = go(i + 1, cache);
        } else {
            for (size_t v = 0; v < cache.size(); v++) {
                std::vector<int32_t> next = cache;
                next[v] = seq[i];
                best = std::max(best, go(i + 1, next));
            }
        }
        memo[key] = best;
        return best;
    };
    return go(0, {});
}

static void test_textbook_strings() {
    // Silberschatz's reference string with 3 frames: LRU 12 faults, OPT 9 (of 20 references).
    const expert_trace t = single({7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1});
    CHECK_EQ(expert_cache_simulate(t, 3, "lru").accesses, 20);
    CHECK_EQ(hits(t, 3, "lru"), 20 - 12);
    CHECK_EQ(hits(t, 3, "belady"), 20 - 9);
    // Belady's anomaly string: OPT faults 7 with 3 frames and 6 with 4; LRU 10 and 8.
    const expert_trace b = single({1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5});
    CHECK_EQ(hits(b, 3, "belady"), 12 - 7);
    CHECK_EQ(hits(b, 4, "belady"), 12 - 6);
    CHECK_EQ(hits(b, 3, "lru"), 12 - 10);
    CHECK_EQ(hits(b, 4, "lru"), 12 - 8);
    // A cyclic scan one larger than the cache: LRU never hits, OPT keeps slots-1 of the loop.
    std::vector<int32_t> loop;
    for (int r = 0; r < 10; r++)
        for (int e = 0; e < 4; e++) loop.push_back(e);
    CHECK_EQ(hits(single(loop), 3, "lru"), 0);
    CHECK_EQ(hits(single(loop), 3, "belady"), optimal_hits(loop, 3));
}

static void test_belady_is_optimal() {
    std::mt19937 rng(7);
    for (int round = 0; round < 60; round++) {
        const int n = 8 + static_cast<int>(rng() % 7), n_exp = 3 + static_cast<int>(rng() % 3);
        const int32_t slots = 1 + static_cast<int32_t>(rng() % 3);
        std::vector<int32_t> seq;
        for (int i = 0; i < n; i++) seq.push_back(static_cast<int32_t>(rng() % n_exp));
        const expert_trace t = single(seq);
        const int64_t opt = optimal_hits(seq, slots);
        CHECK_EQ(hits(t, slots, "belady"), opt);
        for (const auto & p : expert_cache_policy_names()) CHECK(hits(t, slots, p) <= opt);
    }
}

// Layers have their own slots; tokens are replayed in order whatever the record order.
static void test_layers_and_order() {
    expert_trace t;
    t.k = 2;
    // Layer 1 thrashes (3 experts cycling through 2 slots), layer 0 repeats one pair; records
    // are given layer-major and out of token order on purpose.
    const int T = 6;
    for (int l = 1; l >= 0; l--)
        for (int i = T - 1; i >= 0; i--) {
            t.layer.push_back(l);
            t.token.push_back(i);
            if (l == 0) {
                t.experts.push_back(4);
                t.experts.push_back(5);
            } else {
                t.experts.push_back(i % 3);
                t.experts.push_back((i + 1) % 3);
            }
            t.probs.push_back(0.6f);
            t.probs.push_back(0.4f);
        }
    const expert_cache_sim_result r = expert_cache_simulate(t, 2, "lru");
    CHECK_EQ(r.accesses, 2 * 2 * T);
    CHECK_EQ(r.layer_hits[0], 2 * (T - 1));
    // Layer 1, LRU with 2 slots: tokens {0,1} {1,2} {2,0} {0,1} ...: each token hits the expert it
    // shares with the previous one.
    CHECK_EQ(r.layer_hits[1], T - 1);
    CHECK_EQ(r.hits, r.layer_hits[0] + r.layer_hits[1]);
    const expert_trace sorted = expert_trace_sorted(t);
    for (size_t i = 1; i < sorted.token.size(); i++)
        CHECK(sorted.token[i - 1] < sorted.token[i] || (sorted.token[i - 1] == sorted.token[i] && sorted.layer[i - 1] < sorted.layer[i]));
}

// Within a token, experts are accessed in the router's order and nothing is pinned: plain LRU can
// evict the token's next expert to load the first; policies that read on_route do not.
static void test_flattened_token() {
    const expert_trace t = rows({{0, 1}, {2, 0}});
    CHECK_EQ(hits(t, 2, "lru"), 0);
    CHECK_EQ(hits(t, 2, "belady"), 1);
    CHECK_EQ(hits(t, 2, "lrfu"), 1);
    CHECK_EQ(hits(t, 2, "context"), 1);
    // Padding (-1) is skipped: records with fewer experts.
    expert_trace p = rows({{0, -1}, {0, 1}, {1, -1}});
    CHECK_EQ(expert_cache_simulate(p, 1, "lru").accesses, 4);
    CHECK_EQ(hits(p, 1, "lru"), 2);
}

static void test_lfu_decay() {
    // 0 four times, then 1 and 2: frequency keeps 0 where recency drops it.
    const expert_trace t = single({0, 0, 0, 0, 1, 2, 0});
    CHECK_EQ(hits(t, 2, "lru"), 3);
    CHECK_EQ(hits(t, 2, "lfu"), 4);
    CHECK_EQ(hits(t, 2, "lfu:half_life=1000"), 4);
    // With counts halving twice a token, 0's past no longer outweighs 1's one recent use.
    CHECK_EQ(hits(t, 2, "lfu:half_life=0.5"), 3);
}

// A routing pattern that repeats (a phrase said again) is what context matching is for: after the
// first pass it should approach Belady, where LRU and LFU thrash.
static void test_context_learns_repeats() {
    std::vector<std::vector<int32_t>> phrase = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {1, 2}, {3, 4}, {5, 6}, {7, 0}};
    std::vector<std::vector<int32_t>> tokens;
    for (int r = 0; r < 12; r++) tokens.insert(tokens.end(), phrase.begin(), phrase.end());
    expert_trace t = rows(tokens);
    // Two layers so matching has more than one layer to go on.
    const size_t n = t.layer.size();
    for (size_t i = 0; i < n; i++) {
        t.layer.push_back(1);
        t.token.push_back(t.token[i]);
        t.experts.push_back((t.experts[2 * i] + 3) % 8);
        t.experts.push_back((t.experts[2 * i + 1] + 3) % 8);
        t.probs.push_back(0.7f);
        t.probs.push_back(0.3f);
    }
    for (int32_t slots : {3, 4, 5}) {
        const int64_t lru = hits(t, slots, "lru"), lfu = hits(t, slots, "lfu"), ctx = hits(t, slots, "context"), opt = hits(t, slots, "belady");
        std::printf("  repeating phrase, %d slots: lru %lld lfu %lld context %lld belady %lld\n", slots, (long long)lru, (long long)lfu,
                    (long long)ctx, (long long)opt);
        CHECK(ctx > lru && ctx > lfu);
        CHECK(ctx >= opt * 85 / 100);
    }
}

// The interface as the concurrent byte-budgeted cache uses it: candidates from several layers,
// prefetched entries never accessed, victims always among the candidates offered.
static void test_interface() {
    expert_cache_policy_params p;
    p.n_layer = 3;
    p.n_expert = 70;  // more than one 64-bit word of routing per layer
    for (const auto & name : expert_cache_policy_names()) {
        if (name == "belady") continue;
        auto pol = expert_cache_policy_init(name, p);
        CHECK(pol->name() == name);
        for (int64_t tok = 0; tok < 20; tok++)
            for (int32_t l = 0; l < 3; l++) {
                const int32_t ex[2] = {static_cast<int32_t>((tok * 7 + l) % 70), static_cast<int32_t>((tok * 13 + 5 * l + 1) % 70)};
                const float pr[2] = {0.8f, 0.2f};
                pol->on_route(l, tok, ex, pr, 2);
                for (int j = 0; j < 2; j++) {
                    pol->on_access(l, ex[j], pr[j], tok);
                    pol->on_insert(l, ex[j], tok, false);
                }
                const expert_key cands[4] = {{0, 69}, {1, ex[0]}, {2, 3}, {l, ex[1]}};
                const size_t v = pol->choose_victim(cands, 4);
                CHECK(v < 4);
                pol->on_evict(cands[v].layer, cands[v].expert);
            }
        // A prefetched entry (inserted, never asked for) is a fine victim next to a hot one.
        pol->on_insert(2, 68, 20, true);
        const int32_t hot[1] = {67};
        const float one[1] = {1.0f};
        for (int64_t tok = 20; tok < 24; tok++) {
            pol->on_route(2, tok, hot, one, 1);
            pol->on_access(2, 67, 1.0f, tok);
            pol->on_insert(2, 67, tok, false);
        }
        const expert_key pair[2] = {{2, 67}, {2, 68}};
        if (name == "lru" || name == "lfu" || name == "lrfu") CHECK(pol->choose_victim(pair, 2) == 1);
        CHECK(pol->choose_victim(pair, 1) == 0);
        CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { pol->on_access(3, 0, 1.0f, 30); }, "outside"));
        CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { pol->on_access(0, 70, 1.0f, 30); }, "outside"));
    }
    // The routed-but-not-yet-asked-for expert of the current token is never the victim.
    for (const char * name : {"lrfu", "context"}) {
        auto pol = expert_cache_policy_init(name, p);
        const int32_t ex[2] = {1, 2};
        const float pr[2] = {0.5f, 0.5f};
        pol->on_route(0, 0, ex, pr, 2);
        pol->on_access(0, 1, 0.5f, 0);
        const expert_key c[2] = {{0, 2}, {0, 9}};
        CHECK(pol->choose_victim(c, 2) == 1);
    }
}

static void test_validation() {
    const expert_trace t = single({0, 1, 0});
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_simulate(t, 2, "fifo"); }, "unknown cache policy 'fifo'"));
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_simulate(t, 2, "lfu:halflife=3"); }, "unknown option(s) halflife"));
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_simulate(t, 2, "lfu:half_life=abc"); }, "needs a number"));
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_simulate(t, 2, "lfu:half_life=0"); }, "half_life must be in"));
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_simulate(t, 2, "lfu:half_life"); }, "not key=value"));
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_simulate(t, 0, "lru"); }, "slots"));
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_cache_policy_init("belady", {1, 2}); }, "future"));
    CHECK(hits(t, 2, "context:window=8,beta=4,horizon=2,learn=0") == 1);

    expert_trace dup = rows({{3, 3}});
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_trace_sorted(dup); }, "expert 3 appears twice"));
    expert_trace rep = single({0, 1});
    rep.token[1] = 0;
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_trace_sorted(rep); }, "repeats"));
    expert_trace shape = single({0, 1});
    shape.experts.push_back(2);
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_trace_sorted(shape); }, "need"));
    expert_trace neg = single({0, 1});
    neg.layer[1] = -1;
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_trace_sorted(neg); }, "layer must be"));
    expert_trace prob = single({0, 1});
    prob.probs[0] = 1.5f;
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { expert_trace_sorted(prob); }, "gating probability"));
    // Probabilities are optional.
    expert_trace noprob = single({0, 1, 0});
    noprob.probs.clear();
    CHECK(hits(noprob, 2, "context") == 1);
    // Belady checks that what it is fed is the trace it was built with.
    const expert_trace sorted = expert_trace_sorted(t);
    auto bel = expert_cache_policy_init("belady", {1, 2}, &sorted);
    bel->on_access(0, 0, 1.0f, 0);
    CHECK(throws_code(KAIL_E_INVALID_ARG, [&] { bel->on_access(0, 0, 1.0f, 1); }, "differs"));
}

// ---------------------------------------------------------------------------------------------
// The real trace: shared/fixtures/routing/mixtral-8x7b-gsm8k.jsonl (JSON lines with problem_id,
// token_idx, layer, experts, gating_probs). token_idx restarts for every problem, so tokens are
// numbered in (problem_id, token_idx) order.

static bool json_numbers(const std::string & line, const char * key, std::vector<double> & out) {
    out.clear();
    const std::string pat = std::string("\"") + key + "\"";
    size_t p = line.find(pat);
    if (p == std::string::npos) return false;
    p = line.find(':', p + pat.size());
    if (p == std::string::npos) return false;
    p++;
    while (p < line.size() && line[p] == ' ') p++;
    const bool array = p < line.size() && line[p] == '[';
    if (array) p++;
    while (p < line.size()) {
        while (p < line.size() && (line[p] == ' ' || line[p] == ',')) p++;
        if (p >= line.size() || line[p] == ']') break;
        char * end = nullptr;
        const double v = std::strtod(line.c_str() + p, &end);
        if (end == line.c_str() + p) return false;
        out.push_back(v);
        p = static_cast<size_t>(end - line.c_str());
        if (!array) break;
    }
    return !out.empty();
}

static bool load_jsonl(const std::string & path, expert_trace & trace, int64_t & n_tokens) {
    std::ifstream f(path);
    if (!f) return false;
    struct rec {
        double problem = 0, token = 0;
        int32_t layer = 0;
        std::vector<double> experts, probs;
    };
    std::vector<rec> recs;
    std::string line;
    std::vector<double> v;
    size_t k = 0;
    while (std::getline(f, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        rec r;
        r.problem = json_numbers(line, "problem_id", v) ? v[0] : 0;
        if (!json_numbers(line, "token_idx", v)) return false;
        r.token = v[0];
        if (!json_numbers(line, "layer", v)) return false;
        r.layer = static_cast<int32_t>(v[0]);
        if (!json_numbers(line, "experts", r.experts)) return false;
        json_numbers(line, "gating_probs", r.probs);
        k = std::max(k, r.experts.size());
        recs.push_back(std::move(r));
    }
    std::map<std::pair<double, double>, int64_t> step;
    for (const auto & r : recs) step[{r.problem, r.token}] = 0;
    n_tokens = 0;
    for (auto & kv : step) kv.second = n_tokens++;
    trace = expert_trace();
    trace.k = static_cast<int32_t>(k);
    for (const auto & r : recs) {
        trace.layer.push_back(r.layer);
        trace.token.push_back(step[{r.problem, r.token}]);
        for (size_t j = 0; j < k; j++) {
            trace.experts.push_back(j < r.experts.size() ? static_cast<int32_t>(r.experts[j]) : -1);
            trace.probs.push_back(j < r.probs.size() ? static_cast<float>(r.probs[j]) : 0.0f);
        }
    }
    return true;
}

static std::string fixture_path() {
    if (const char * p = std::getenv("KAIL_ROUTING_TRACE")) return p;
    // The fixtures sit next to the checkout (../shared from the repository root), or inside it.
    std::string root = __FILE__;  // <root>/packages/core-native/tests/test-expert-cache.cpp
    for (int i = 0; i < 4; i++) root = root.substr(0, root.find_last_of('/'));
    const std::string rel = "/shared/fixtures/routing/mixtral-8x7b-gsm8k.jsonl";
    const std::string outside = root.substr(0, root.find_last_of('/')) + rel;
    return std::ifstream(outside).good() ? outside : root + rel;
}

// Returns false when the fixture is missing (that part is skipped).
static bool test_real_trace() {
    const std::string path = fixture_path();
    expert_trace t;
    int64_t n_tokens = 0;
    if (!load_jsonl(path, t, n_tokens)) {
        std::printf("  real trace: %s not found, skipped\n", path.c_str());
        return false;
    }
    CHECK_EQ(t.layer.size(), 7889);
    CHECK_EQ(n_tokens, 247);  // 168 + 79 tokens: token_idx restarts per problem
    // Hits per slot count, from the issue: LRU 43/57/69/80 %, Belady 62/75/84/90 %.
    const int64_t lru_hits[4] = {6758, 9060, 10936, 12626}, opt_hits[4] = {9810, 11777, 13185, 14222};
    std::printf("  %s\n  slots    lru    lfu   lrfu context belady  context closes\n", path.c_str());
    for (int32_t slots = 3; slots <= 6; slots++) {
        const auto r = expert_cache_simulate_many(t, slots, {"lru", "lfu", "lrfu", expert_cache_default_policy(), "belady"});
        CHECK_EQ(r[0].accesses, 15778);
        CHECK_EQ(r[0].hits, lru_hits[slots - 3]);
        CHECK_EQ(r[4].hits, opt_hits[slots - 3]);
        const double gap = static_cast<double>(r[3].hits - r[0].hits) / static_cast<double>(r[4].hits - r[0].hits);
        std::printf("  %5d %6.3f %6.3f %6.3f %7.3f %6.3f  %.2f of the LRU-Belady gap (target 0.50)\n", slots, r[0].hit_rate(), r[1].hit_rate(),
                    r[2].hit_rate(), r[3].hit_rate(), r[4].hit_rate(), gap);
        for (int i = 0; i < 4; i++) CHECK(r[i].hits <= r[4].hits);
        CHECK(r[3].hits > r[1].hits && r[3].hits > r[2].hits);
        // A regression floor under what the default reaches today (0.41..0.48); the 0.50
        // is not met on this trace, see packages/core-native/src/cache/README.md.
        CHECK(gap >= 0.38);
    }
    return true;
}

int main() {
    test_textbook_strings();
    test_belady_is_optimal();
    test_layers_and_order();
    test_flattened_token();
    test_lfu_decay();
    test_context_learns_repeats();
    test_interface();
    test_validation();
    test_real_trace();
    if (g_failures) {
        std::fprintf(stderr, "test-expert-cache: %d check(s) failed\n", g_failures);
        return 1;
    }
    std::printf("test-expert-cache: ok\n");
    return 0;
}
