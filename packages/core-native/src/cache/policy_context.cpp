// "context": predicts which experts the next tokens will need by matching the current token's
// routing against the routing of earlier tokens, and evicts the expert least expected soon.
//
// Routing is largely a function of the token and its context, and text repeats itself (names,
// numbers, code identifiers, formulas), so a token whose routing over the layers seen so far
// resembles an earlier token's tends to be followed by what followed that token. For the token
// being decoded at layer l, every earlier token u gets a similarity
//     s(u) = overlap(layers 0..l of this token, same layers of u) / experts routed so far
//          + prev_weight * overlap(all layers of the previous token, all layers of u-1) / its experts
// and a weight exp(beta * (s(u) - max s)). The context estimate of expert e's use over the next
// tokens is the weighted average, over u, of sum_{d=1..horizon} horizon_decay^(d-1) [e routed at u+d].
//
// That estimate is one feature of a linear model of the same quantity, next to recency (routed
// now, its gating probability, how long ago before that) and decayed frequency. The model's weights
// are fitted online, by ridge regression with exponential forgetting over every (layer, expert)
// once the horizon has passed, shared by all layers; until data arrives they are the context
// estimate plus a little frequency. So where routing is sticky rather than repetitive the policy
// drifts toward recency, and where neither helps toward frequency. Only the past and the current
// token's router outputs are used.
//
// The victim is the candidate with the lowest predicted use; an expert the current token has been
// routed to but not yet asked for is never chosen; recency breaks ties. Predictions are expected
// uses, so they compare across layers. Cost per routed layer: O(window * (horizon + k)) for the
// estimate plus O(n_expert * features^2) for the model.
#include "cache/policies.h"

#include <algorithm>
#include <array>
#include <limits>

namespace kail {
namespace cache {

namespace {

int popcount64(uint64_t x) { return __builtin_popcountll(x); }

// commit() counts bits in its inner loop: with x86-64's baseline that is a call into libgcc per
// word (6% of a DeepSeek-shaped replay's time), so it is built twice and picks the POPCNT one at
// load where the CPU has it (every x86-64 CPU since 2008).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KAIL_POPCNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define KAIL_POPCNT_CLONES
#endif

constexpr int NF = 6;  // features: bias, context, routed now, gating prob now, recency, frequency
using feature_vec = std::array<double, NF>;
constexpr feature_vec DEFAULT_WEIGHTS = {0.0, 1.0, 0.0, 0.0, 0.0, 0.05};

// Solves a x = b (n x n, row-major) by Gaussian elimination with partial pivoting; false if singular.
bool solve(std::array<double, NF * NF> a, feature_vec b, feature_vec & x) {
    for (int c = 0; c < NF; c++) {
        int p = c;
        for (int r = c + 1; r < NF; r++)
            if (std::fabs(a[r * NF + c]) > std::fabs(a[p * NF + c])) p = r;
        if (std::fabs(a[p * NF + c]) < 1e-12) return false;
        if (p != c) {
            for (int k = 0; k < NF; k++) std::swap(a[c * NF + k], a[p * NF + k]);
            std::swap(b[c], b[p]);
        }
        for (int r = c + 1; r < NF; r++) {
            const double f = a[r * NF + c] / a[c * NF + c];
            for (int k = c; k < NF; k++) a[r * NF + k] -= f * a[c * NF + k];
            b[r] -= f * b[c];
        }
    }
    for (int r = NF - 1; r >= 0; r--) {
        double s = b[r];
        for (int k = r + 1; k < NF; k++) s -= a[r * NF + k] * x[k];
        x[r] = s / a[r * NF + r];
    }
    return true;
}

class context_policy final : public dense_policy {
  public:
    struct options {
        int32_t window = 1024;       // tokens of history matched against
        double  beta = 10;           // sharpness of the match weights
        double  prev_weight = 0.5;   // weight of the previous token's match
        int32_t horizon = 4;         // tokens ahead the prediction covers
        double  horizon_decay = 0.5; // weight of each further token
        double  prior_half_life = 32;
        bool    learn = true;
        double  learn_half_life = 1024;  // tokens
        double  ridge = 1;               // pull toward the default weights, in tokens of data
    };

    context_policy(const std::string & name, const expert_cache_policy_params & p, const options & o) : dense_policy(name, p), o_(o) {
        words_ = (static_cast<size_t>(n_expert_) + 63) / 64;
        const size_t n_keys = static_cast<size_t>(n_layer_) * n_expert_;
        const size_t W = static_cast<size_t>(o_.window);
        ring_.assign(W * n_layer_ * words_, 0);
        sim_cur_.assign(W, 0.0);
        sim_prev_.assign(W, 0.0);
        weights_.assign(W, 0.0);
        cur_mask_.assign(static_cast<size_t>(n_layer_) * words_, 0);
        committed_.assign(static_cast<size_t>(n_layer_) * words_, 0);
        dirty_.assign(n_layer_, 0);
        pred_.assign(n_keys, 0.0);
        pred_seq_.assign(n_layer_, -1);
        pred_norm_.assign(n_layer_, -1);
        prior_.init(n_keys, o_.prior_half_life);
        last_.assign(n_keys, 0);
        routed_.assign(n_keys, 0);
        feat_.assign(n_keys, feature_vec{});
        has_feat_.assign(n_keys, 0);
        last_step_.assign(n_keys, -1);
        const size_t H = static_cast<size_t>(o_.horizon);
        sample_seq_.assign(H * n_layer_, -1);
        sample_x_.assign(H * n_keys, feature_vec{});
        sample_y_.assign(H * n_keys, 0.0);
        w_ = DEFAULT_WEIGHTS;
        ata_.fill(0);
        aty_.fill(0);
    }

    void on_route(int32_t layer, int64_t token, const int32_t * experts, const float * probs, int32_t n) override {
        begin(token);
        for (size_t k : routed_list_) routed_[k] = 0;
        routed_list_.clear();
        route_probs_.assign(static_cast<size_t>(n_expert_), 0.0);
        for (int32_t i = 0; i < n; i++) {
            if (experts[i] < 0) continue;
            const size_t k = index(layer, experts[i]);
            routed_[k] = 1;
            routed_list_.push_back(k);
            route_probs_[experts[i]] = probs ? std::min(1.0, std::max(0.0, static_cast<double>(probs[i]))) : 1.0 / n;
            mark(layer, experts[i]);
        }
        commit(layer);
        last_routed_ = layer;
        if (o_.learn) {
            observe(layer);
            featurize(layer);
        }
    }

    void on_access(int32_t layer, int32_t expert, float, int64_t token) override {
        begin(token);
        const size_t k = index(layer, expert);
        mark(layer, expert);
        prior_.add(k, step_, 1.0);
        last_[k] = ++clock_;
        routed_[k] = 0;
    }

    void on_insert(int32_t layer, int32_t expert, int64_t, bool) override {
        const size_t k = index(layer, expert);
        if (last_[k] == 0) last_[k] = ++clock_;
    }

    void on_history(int32_t layer, int32_t expert, double share) override { prior_.seed(index(layer, expert), share); }

    void on_evict(int32_t, int32_t) override {}

    size_t choose_victim(const expert_key * c, size_t n) override {
        size_t best = 0;
        double best_score = std::numeric_limits<double>::infinity();
        uint64_t best_last = std::numeric_limits<uint64_t>::max();
        for (size_t i = 0; i < n; i++) {
            const size_t k = index(c[i]);
            const double s = routed_[k] ? std::numeric_limits<double>::infinity() : score(c[i].layer, k);
            if (i == 0 || s < best_score || (s == best_score && last_[k] < best_last)) {
                best = i;
                best_score = s;
                best_last = last_[k];
            }
        }
        return best;
    }

  private:
    size_t slot(int64_t seq) const { return static_cast<size_t>(seq % o_.window); }
    uint64_t * ring_at(int64_t seq, int32_t layer) { return &ring_[(slot(seq) * n_layer_ + layer) * words_]; }
    bool ring_has(int64_t seq, int32_t layer, int32_t expert) {
        return (ring_at(seq, layer)[static_cast<size_t>(expert) / 64] >> (expert % 64)) & 1;
    }

    void begin(int64_t token) {
        if (have_token_ && token == last_token_) return;
        if (have_token_) finish_token();
        have_token_ = true;
        step_for(token);
        for (size_t k : routed_list_) routed_[k] = 0;
        routed_list_.clear();
    }

    void mark(int32_t layer, int32_t expert) {
        uint64_t & w = cur_mask_[layer * words_ + static_cast<size_t>(expert) / 64];
        const uint64_t bit = uint64_t(1) << (expert % 64);
        if (!(w & bit)) {
            w |= bit;
            dirty_[layer] = 1;
        }
    }

    // Adds the layer's routing not yet counted to the similarity with every earlier token.
    KAIL_POPCNT_CLONES void commit(int32_t layer) {
        if (!dirty_[layer]) return;
        dirty_[layer] = 0;
        uint64_t * cm = &committed_[layer * words_];
        const uint64_t * m = &cur_mask_[layer * words_];
        delta_.assign(words_, 0);
        int added = 0;
        for (size_t w = 0; w < words_; w++) {
            delta_[w] = m[w] & ~cm[w];
            added += popcount64(delta_[w]);
            cm[w] |= delta_[w];
        }
        if (!added) return;
        cur_norm_ += added;
        for (int64_t s = std::max<int64_t>(0, cur_ - o_.window); s < cur_; s++) {
            const uint64_t * r = ring_at(s, layer);
            int ov = 0;
            for (size_t w = 0; w < words_; w++) ov += popcount64(r[w] & delta_[w]);
            sim_cur_[slot(s)] += ov;
        }
    }

    void finish_token() {
        for (int32_t l = 0; l < n_layer_; l++) commit(l);
        for (int64_t s = std::max<int64_t>(0, cur_ - o_.window); s < cur_; s++) sim_prev_[slot(s)] = sim_cur_[slot(s)];
        prev_norm_ = cur_norm_;
        // The token joins the history, replacing the oldest one in the window.
        std::copy(cur_mask_.begin(), cur_mask_.end(), ring_.begin() + static_cast<std::ptrdiff_t>(slot(cur_) * n_layer_ * words_));
        sim_prev_[slot(cur_)] = 0;
        cur_++;
        std::fill(sim_cur_.begin(), sim_cur_.end(), 0.0);
        std::fill(cur_mask_.begin(), cur_mask_.end(), 0);
        std::fill(committed_.begin(), committed_.end(), 0);
        cur_norm_ = 0;
        if (o_.learn) refit();
    }

    double score(int32_t layer, size_t k) {
        if (o_.learn && has_feat_[k]) {
            const feature_vec & x = feat_[k];
            double s = 0;
            for (int i = 0; i < NF; i++) s += w_[i] * x[i];
            return s;
        }
        predict(layer);
        return pred_[k] + DEFAULT_WEIGHTS[5] * prior_.value(k, step_ < 0 ? 0 : step_) / prior_.saturation();
    }

    // Fills pred_ for the layer: the context estimate. It is kept for the token unless the layer is
    // the one being routed now and its routing changed, so victims in other layers (one budget for
    // all) cost no extra pass.
    void predict(int32_t layer) {
        for (int32_t l = 0; l < n_layer_; l++)
            if (dirty_[l]) commit(l);
        if (pred_seq_[layer] == cur_ && (layer != last_routed_ || pred_norm_[layer] == cur_norm_)) return;
        pred_seq_[layer] = cur_;
        pred_norm_[layer] = cur_norm_;
        double * pred = &pred_[static_cast<size_t>(layer) * n_expert_];
        std::fill(pred, pred + n_expert_, 0.0);
        const int64_t lo = std::max<int64_t>(1, cur_ - o_.window + 1), hi = cur_ - 2;
        if (hi < lo) return;
        const double inv_cur = cur_norm_ > 0 ? 1.0 / cur_norm_ : 0.0;
        const double inv_prev = prev_norm_ > 0 ? o_.prev_weight / prev_norm_ : 0.0;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t u = lo; u <= hi; u++) {
            const double s = sim_cur_[slot(u)] * inv_cur + sim_prev_[slot(u - 1)] * inv_prev;
            weights_[slot(u)] = s;
            mx = std::max(mx, s);
        }
        double total = 0;
        for (int64_t u = lo; u <= hi; u++) {
            const double w = std::exp(o_.beta * (weights_[slot(u)] - mx));
            weights_[slot(u)] = w;
            total += w;
        }
        // The sum over (u, d) grouped by the later token v = u + d: v's routing is walked once, with
        // the weights of the tokens it follows by d = 1..horizon (each times horizon_decay^(d-1)).
        // O(window * (horizon + k)) rather than O(window * horizon * k).
        const int64_t v_hi = std::min<int64_t>(hi + o_.horizon, cur_ - 1);
        for (int64_t v = lo + 1; v <= v_hi; v++) {
            double c = 0, g = 1;
            for (int64_t d = 1; d <= o_.horizon && v - d >= lo; d++, g *= o_.horizon_decay)
                if (v - d <= hi) c += weights_[slot(v - d)] * g;
            if (c == 0) continue;
            const uint64_t * r = ring_at(v, layer);
            for (size_t wd = 0; wd < words_; wd++)
                for (uint64_t bits = r[wd]; bits; bits &= bits - 1) pred[wd * 64 + static_cast<size_t>(__builtin_ctzll(bits))] += c;
        }
        for (int32_t e = 0; e < n_expert_; e++) pred[e] /= total;
    }

    // The layer's routing at this token is the answer for the samples taken at this layer over
    // the last `horizon` tokens; the one taken `horizon` tokens ago is complete and is learned.
    void observe(int32_t layer) {
        const size_t H = static_cast<size_t>(o_.horizon);
        const size_t ne = static_cast<size_t>(n_expert_);
        double g = 1;
        for (int64_t d = 1; d <= o_.horizon; d++, g *= o_.horizon_decay) {
            const int64_t s = cur_ - d;
            if (s < 0) break;
            const size_t q = static_cast<size_t>(s) % H * n_layer_ + layer;
            if (sample_seq_[q] != s) continue;
            double * y = &sample_y_[q * ne];
            for (size_t i = 0; i < routed_list_.size(); i++) y[routed_list_[i] - static_cast<size_t>(layer) * ne] += g;
            if (d < o_.horizon) continue;
            const feature_vec * x = &sample_x_[q * ne];
            for (size_t e = 0; e < ne; e++) {
                for (int i = 0; i < NF; i++) {
                    aty_[i] += x[e][i] * y[e];
                    for (int j = 0; j < NF; j++) ata_[i * NF + j] += x[e][i] * x[e][j];
                }
            }
            samples_ += static_cast<double>(ne);
            sample_seq_[q] = -1;
        }
    }

    // Features of every expert of the layer, right after its routing at this token: used to rank
    // its experts from now on, and kept as a sample until its answer is known.
    void featurize(int32_t layer) {
        predict(layer);
        const size_t ne = static_cast<size_t>(n_expert_);
        const size_t q = static_cast<size_t>(cur_) % static_cast<size_t>(o_.horizon) * n_layer_ + layer;
        sample_seq_[q] = cur_;
        for (size_t e = 0; e < ne; e++) {
            const size_t k = static_cast<size_t>(layer) * ne + e;
            const bool now = route_probs_[e] > 0 || routed_[k];
            feature_vec & x = feat_[k];
            x[0] = 1.0;
            x[1] = pred_[k];
            x[2] = now ? 1.0 : 0.0;
            x[3] = route_probs_[e];
            x[4] = last_step_[k] < 0 ? 0.0 : std::exp2(-static_cast<double>(cur_ - 1 - last_step_[k]));
            x[5] = prior_.value(k, step_ < 0 ? 0 : step_) / prior_.saturation();
            has_feat_[k] = 1;
            sample_x_[q * ne + e] = x;
            sample_y_[q * ne + e] = 0.0;
            if (now) last_step_[k] = cur_;
        }
    }

    // Decays the statistics by one token and re-solves the ridge regression.
    void refit() {
        const double keep = std::exp2(-1.0 / o_.learn_half_life);
        for (double & v : ata_) v *= keep;
        for (double & v : aty_) v *= keep;
        samples_ *= keep;
        const double lambda = o_.ridge * static_cast<double>(n_layer_) * n_expert_;
        std::array<double, NF * NF> a = ata_;
        feature_vec b = aty_;
        for (int i = 0; i < NF; i++) {
            a[i * NF + i] += lambda;
            b[i] += lambda * DEFAULT_WEIGHTS[i];
        }
        feature_vec w;
        if (solve(a, b, w)) w_ = w;
    }

    options               o_;
    size_t                words_ = 1;
    std::vector<uint64_t> ring_;       // window x n_layer x words: routing of the last tokens
    std::vector<double>   sim_cur_;    // per ring slot: overlap with the current token so far
    std::vector<double>   sim_prev_;   // per ring slot: overlap with the previous token (all layers)
    std::vector<double>   weights_;
    std::vector<uint64_t> cur_mask_;   // n_layer x words: the current token's routing so far
    std::vector<uint64_t> committed_;  // the part of cur_mask_ already in sim_cur_
    std::vector<uint64_t> delta_;
    std::vector<uint8_t>  dirty_;
    int64_t               cur_ = 0;    // tokens finished so far = sequence number of the current one
    int64_t               cur_norm_ = 0, prev_norm_ = 0;
    bool                  have_token_ = false;
    int32_t               last_routed_ = -1;
    std::vector<double>   pred_;       // n_layer x n_expert context estimates
    std::vector<int64_t>  pred_seq_, pred_norm_;
    decayed_counts        prior_;
    std::vector<uint64_t> last_;
    uint64_t              clock_ = 0;
    std::vector<uint8_t>  routed_;
    std::vector<size_t>   routed_list_;
    std::vector<double>   route_probs_;
    // The model: features per key, pending samples per (token mod horizon, layer), statistics.
    std::vector<feature_vec> feat_;
    std::vector<uint8_t>     has_feat_;
    std::vector<int64_t>     last_step_;
    std::vector<int64_t>     sample_seq_;
    std::vector<feature_vec> sample_x_;
    std::vector<double>      sample_y_;
    std::array<double, NF * NF> ata_;
    feature_vec              aty_;
    double                   samples_ = 0;
    feature_vec              w_;
};

} // namespace

std::unique_ptr<expert_cache_policy> make_context(const std::string & name, const expert_cache_policy_params & p, policy_options & o) {
    context_policy::options c;
    c.window = static_cast<int32_t>(o.take("window", c.window, 4, 1 << 16));
    c.beta = o.take("beta", c.beta, 0, 1000);
    c.prev_weight = o.take("prev_weight", c.prev_weight, 0, 100);
    c.horizon = static_cast<int32_t>(o.take("horizon", c.horizon, 1, 64));
    c.horizon_decay = o.take("horizon_decay", c.horizon_decay, 0, 1);
    c.prior_half_life = o.take("prior_half_life", c.prior_half_life, 0.5, 1e9);
    c.learn = o.take("learn", 1, 0, 1) >= 0.5;
    c.learn_half_life = o.take("learn_half_life", c.learn_half_life, 1, 1e9);
    c.ridge = o.take("ridge", c.ridge, 0, 1e9);
    o.finish();
    return std::unique_ptr<expert_cache_policy>(new context_policy(name, p, c));
}

} // namespace cache
} // namespace kail
