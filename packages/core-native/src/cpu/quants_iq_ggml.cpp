// ggml's own quantizers for the codebook i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M), which llama-quantize writes files with: written again from ggml-quants.c
// (quantize_row_iq*_impl and the grid/neighbour tables iq2xs_init_impl and iq3xs_init_impl build)
// so that `kail quantize` gives llama.cpp's bytes. Each group of 8 (IQ3: 4) magnitudes is fitted
// to the codebook under a searched scale, weighted by the importance matrix; a group that falls
// off the grid takes the best of its nearest grid points (the neighbour lists).
//
// The lattice coordinates of the grid points come from the dequantization grids (iq_grids.h):
// each byte of an entry is a level l (IQ2: 8/25/43, IQ3_XXS: 4 + 8l, IQ3_S: 2l + 1, IQ1: -1/0/1),
// the point itself 2l + 1 per coordinate, as ggml's kgrid tables hold them. Scalar code,
// compiled like quants.cpp (no FMA contraction), so the float sums are ggml's.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "cpu/fp16.h"
#include "cpu/iq_grids.h"
#include "cpu/quants_impl.h"
#include "kail/status.h"
#include "kail/types.h"

namespace kail::cpu {

namespace {

inline uint16_t f2h(float f) { return fp32_to_fp16_sw(f); }

constexpr float GROUP_MAX_EPS_IQ3_XXS = 1e-8f;
constexpr float GROUP_MAX_EPS_IQ2_S = 1e-8f;
constexpr float GROUP_MAX_EPS_IQ1_M = 1e-7f;
constexpr float GROUP_MAX_EPS_IQ1_S = 1e-12f;
constexpr float IQ1S_DELTA = 0.125f;
constexpr float IQ1M_DELTA = 0.125f;
constexpr int NGRID_IQ1S = 2048;

// A codebook as the quantizers search it: each grid point's coordinates (2l + 1 per byte), the map
// from a point of the full lattice (its levels packed, `bits` per coordinate) to its grid index,
// or for a point off the grid -(offset + 1) into `neighbours`, which holds there the count and
// indices of the grid points nearest to it (the nearest `nwant` distances).
template <typename G>
struct codebook {
    std::vector<G>        grid;
    std::vector<int>      map;
    std::vector<uint16_t> neighbours;
};

template <typename G>
void build_codebook(codebook<G> & cb, const G * dq_grid, int grid_size, int n_coord, int bits, int kmap_size, int nwant, int (*level)(int byte)) {
    cb.grid.assign(static_cast<size_t>(grid_size), 0);
    for (int k = 0; k < grid_size; ++k) {
        G v = 0;
        for (int i = 0; i < n_coord; ++i) {
            const int l = level(static_cast<int>((static_cast<uint64_t>(dq_grid[k]) >> (8 * i)) & 0xFF));
            v |= static_cast<G>(static_cast<uint64_t>(2 * l + 1) << (8 * i));
        }
        cb.grid[static_cast<size_t>(k)] = v;
    }
    const int mask = (1 << bits) - 1;
    cb.map.assign(static_cast<size_t>(kmap_size), -1);
    for (int k = 0; k < grid_size; ++k) {
        int index = 0;
        for (int i = 0; i < n_coord; ++i) index |= ((static_cast<int>((static_cast<uint64_t>(cb.grid[k]) >> (8 * i)) & 0xFF) - 1) / 2) << (bits * i);
        cb.map[static_cast<size_t>(index)] = k;
    }
    // For each lattice point off the grid: the grid points at its nwant smallest distances, by
    // distance then index (ggml sorts (distance, index) pairs; distances are small integers, so
    // counting them gives the same lists without the sort).
    const int max_d2 = n_coord * (2 * mask) * (2 * mask);
    std::vector<int> d2(static_cast<size_t>(grid_size));
    std::vector<int> count(static_cast<size_t>(max_d2 + 1));
    for (int i = 0; i < kmap_size; ++i) {
        if (cb.map[static_cast<size_t>(i)] >= 0) continue;
        int pos[8];
        for (int k = 0; k < n_coord; ++k) pos[k] = 2 * ((i >> (bits * k)) & mask) + 1;
        std::fill(count.begin(), count.end(), 0);
        for (int j = 0; j < grid_size; ++j) {
            int d = 0;
            for (int k = 0; k < n_coord; ++k) {
                const int pg = static_cast<int8_t>((static_cast<uint64_t>(cb.grid[j]) >> (8 * k)) & 0xFF);
                d += (pg - pos[k]) * (pg - pos[k]);
            }
            d2[static_cast<size_t>(j)] = d;
            count[static_cast<size_t>(d)]++;
        }
        const size_t start = cb.neighbours.size();
        cb.map[static_cast<size_t>(i)] = -static_cast<int>(start + 1);
        cb.neighbours.push_back(0);
        int n = 0, nhave = 0;
        for (int d = 0; d <= max_d2 && nhave < nwant; ++d) {
            if (!count[static_cast<size_t>(d)]) continue;
            ++nhave;
            for (int j = 0; j < grid_size; ++j)
                if (d2[static_cast<size_t>(j)] == d) {
                    cb.neighbours.push_back(static_cast<uint16_t>(j));
                    ++n;
                }
        }
        cb.neighbours[start] = static_cast<uint16_t>(n);
    }
}

int level_iq2(int b) { return b < 17 ? 0 : b < 34 ? 1 : b < 51 ? 2 : 3; }
int level_iq1(int b) { return static_cast<int8_t>(b) + 1; }
int level_iq3xxs(int b) { return std::min(7, (b - 4) / 8); }
int level_iq3s(int b) { return (b - 1) / 2; }

// ggml's four 8-coordinate codebooks (iq2_data: IQ2_XXS, IQ2_XS, IQ1_S/IQ1_M, IQ2_S) and two
// 4-coordinate ones (iq3_data: 256 for IQ3_XXS, 512 for IQ3_S), built on first use.
const codebook<uint64_t> & iq2_codebook(uint32_t type) {
    static codebook<uint64_t> cbs[4];
    static std::once_flag once[4];
    const int gi = type == KAIL_TYPE_IQ2_XXS ? 0 : type == KAIL_TYPE_IQ2_XS ? 1 : type == KAIL_TYPE_IQ1_S || type == KAIL_TYPE_IQ1_M ? 2 : 3;
    std::call_once(once[gi], [&] {
        const int nwant = gi == 2 ? 3 : gi == 3 ? 1 : 2;
        if (gi == 0) build_codebook(cbs[0], iq2xxs_grid, 256, 8, 2, 43692, nwant, level_iq2);
        else if (gi == 1) build_codebook(cbs[1], iq2xs_grid, 512, 8, 2, 43692, nwant, level_iq2);
        else if (gi == 2) build_codebook(cbs[2], iq1s_grid, NGRID_IQ1S, 8, 2, 43692, nwant, level_iq1);
        else build_codebook(cbs[3], iq2s_grid, 1024, 8, 2, 43692, nwant, level_iq2);
    });
    return cbs[gi];
}

const codebook<uint32_t> & iq3_codebook(int grid_size) {
    static codebook<uint32_t> cbs[2];
    static std::once_flag once[2];
    const int gi = grid_size == 256 ? 0 : 1;
    std::call_once(once[gi], [&] {
        if (gi == 0) build_codebook(cbs[0], iq3xxs_grid, 256, 4, 3, 4096, 2, level_iq3xxs);
        else build_codebook(cbs[1], iq3s_grid, 512, 4, 3, 4096, 3, level_iq3s);
    });
    return cbs[gi];
}

inline int8_t coord(uint64_t g, int i) { return static_cast<int8_t>((g >> (8 * i)) & 0xFF); }

[[noreturn]] void off_grid(const char * what) {
    throw error(KAIL_E_INTERNAL, std::string(what) + ": a point not on the grid after the search (ggml aborts here)");
}

template <int N, typename G>
int find_best_neighbour(const uint16_t * neighbours, const G * grid, const float * xval, const float * weight, float scale, int8_t * L) {
    constexpr int n_coord = N;
    const int num = neighbours[0];
    float best_d2 = FLT_MAX;
    int grid_index = -1;
    for (int j = 1; j <= num; ++j) {
        const G g = grid[neighbours[j]];
        float d2 = 0;
        for (int i = 0; i < n_coord; ++i) {
            const float q = coord(g, i);
            const float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            grid_index = neighbours[j];
        }
    }
    if (grid_index < 0) off_grid("iq neighbour search");
    for (int i = 0; i < n_coord; ++i) L[i] = static_cast<int8_t>((coord(grid[grid_index], i) - 1) / 2);
    return grid_index;
}

// The signs of a group of 8 taken out (xval = |x|); with an odd count of minus signs, the least
// important one flipped, so the 7 stored bits imply the 8th (IQ2_XXS, IQ2_XS, IQ3_XXS).
uint8_t even_signs(const float * xb, const float * weight, float * xval) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
        if (xb[i] >= 0) xval[i] = xb[i];
        else {
            xval[i] = -xb[i];
            ++nflip;
            s = static_cast<uint8_t>(s | (1 << i));
        }
    }
    if (nflip % 2) {
        int imin = 0;
        float min = weight[imin] * xb[imin] * xb[imin];
        for (int i = 1; i < 8; ++i) {
            const float ax = weight[i] * xb[i] * xb[i];
            if (ax < min) {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s = static_cast<uint8_t>(s ^ (1 << imin));
    }
    return static_cast<uint8_t>(s & 127);
}

float block_sigma2(const float * xbl, float factor) {
    float sumx2 = 0;
    for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
    return factor * sumx2 / QK_K;
}

// ggml's weights for a sub-block of n: the importance values times sqrt(sigma2 + x^2), or x^2 without them.
void fill_weights(float * weight, const float * qw, const float * xb, int n, float sigma2) {
    if (qw)
        for (int i = 0; i < n; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    else
        for (int i = 0; i < n; ++i) weight[i] = xb[i] * xb[i];
}

// A sub-block scale's code under the block scale's inverse id: (2l + 1) steps, l in [0, max].
int scale_code(float id, float scale, int max) {
    const int l = nearest_int(0.5f * (id * scale - 1));
    return std::max(0, std::min(max, l));
}

void quantize_iq2_xxs_row(const float * x, block_iq2_xxs * y, int64_t n, const float * qw_row) {
    const codebook<uint64_t> & cb = iq2_codebook(KAIL_TYPE_IQ2_XXS);
    const int kMaxQ = 3;
    float scales[QK_K / 32], weight[32], xval[32], waux[32];
    int8_t L[32], Laux[32];
    uint8_t block_signs[4];
    uint32_t q2[2 * (QK_K / 32)];
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        y[ibl].d = f2h(0.f);
        std::memset(q2, 0, QK_K / 4);
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 1);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float * xb = xbl + 32 * ib;
            const float * qw = qw_row + QK_K * ibl + 32 * ib;
            for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
            for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
            for (int k = 0; k < 4; ++k) block_signs[k] = even_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 32; ++i) max = std::max(max, xval[i]);
            if (max < GROUP_MAX_EPS) {
                scales[ib] = 0;
                std::memset(L, 0, 32);
                continue;
            }
            float scale = make_qp_quants_ggml(32, kMaxQ + 1, xval, reinterpret_cast<uint8_t *>(L), weight);
            const float eff_max = scale * kMaxQ;
            if (eff_max <= 0) {
                scales[ib] = 0;
                std::memset(L, 0, 32);
                continue;
            }
            float best = 0;
            for (int is = -6; is <= 6; ++is) {
                const float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
                const float this_scale = 1 / id;
                for (int k = 0; k < 4; ++k) {
                    for (int i = 0; i < 8; ++i) {
                        const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        Laux[8 * k + i] = static_cast<int8_t>(std::max(0, std::min(kMaxQ - 1, l)));
                    }
                    uint16_t u = 0;
                    for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (Laux[8 * k + i] << 2 * i));
                    if (cb.map[u] < 0) find_best_neighbour<8>(cb.neighbours.data() - cb.map[u] - 1, cb.grid.data(), xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 32; ++i) {
                    const float w = weight[i];
                    const float q = 2 * Laux[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    std::memcpy(L, Laux, 32);
                }
            }
            if (scale > 0) {
                const float id = 1 / scale;
                for (int k = 0; k < 4; ++k) {
                    uint16_t u = 0;
                    for (int i = 0; i < 8; ++i) {
                        int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        l = std::max(0, std::min(kMaxQ - 1, l));
                        u = static_cast<uint16_t>(u | (l << 2 * i));
                    }
                    int grid_index = cb.map[u];
                    if (grid_index < 0) grid_index = find_best_neighbour<8>(cb.neighbours.data() - cb.map[u] - 1, cb.grid.data(), xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
                    for (int i = 0; i < 8; ++i) L[8 * k + i] = static_cast<int8_t>((coord(cb.grid[grid_index], i) - 1) / 2);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 32; ++i) {
                    const float w = weight[i];
                    const float q = 2 * L[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
            }
            for (int k = 0; k < 4; ++k) {
                uint16_t u = 0;
                for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (L[8 * k + i] << 2 * i));
                const int grid_index = cb.map[u];
                if (grid_index < 0) off_grid("IQ2_XXS");
                q2[2 * ib + 0] |= static_cast<uint32_t>(grid_index) << 8 * k;
                q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << 7 * k;
            }
            scales[ib] = scale;
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) {
            std::memset(y[ibl].qs, 0, QK_K / 4);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = f2h(d);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            int l = scale_code(id, scales[ib], 15);
            q2[2 * ib + 1] |= static_cast<uint32_t>(l) << 28;
        }
        std::memcpy(y[ibl].qs, q2, QK_K / 4);
    }
}

// The scale search IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S share (ggml writes it out four times): the
// `bs` values of a sub-block, in groups of G coordinates (8 for IQ2, 4 for IQ3) whose levels (2l +
// 1, l < kMaxQ) must form a grid point; scales tried at (2 kMaxQ - 1 + is * step) / max for
// is = -ntry..ntry, a group off the grid moved to its best neighbour; then the groups still off
// the grid (IQ3_S: every group) refitted at the best scale. `even`: 7 sign bits per 8 values, the
// least important value flipped to make the count of minus signs even (IQ2_XS, IQ3_XXS).
template <typename G, int N>
struct grid_search {
    static constexpr int n_coord = N;
    const codebook<G> & cb;
    int bits, kMaxQ, bs;
    bool even;
    float eps;          // a sub-block whose largest magnitude is below this is left at zero
    bool on_grid_init;  // ggml starts IQ3_S's groups off the grid, the others on it
    float step;
    int ntry;
    bool redo_all;
    const char * name;
    float weight[32], xval[32], waux[32];
    int8_t L[32], Laux[32];
    bool is_on_grid[8], is_on_grid_aux[8];
    uint8_t block_signs[4];

    // xb: the sub-block; weight must be filled. Returns false for a sub-block left at zero.
    bool run(const float * xb, float & scale_out) {
        const int ng = bs / n_coord, bs8 = bs / 8;
        for (int i = 0; i < bs; ++i) waux[i] = std::sqrt(weight[i]);
        for (int k = 0; k < bs8; ++k) {
            if (even) block_signs[k] = even_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);
            else {
                uint8_t s = 0;
                for (int i = 0; i < 8; ++i) {
                    if (xb[8 * k + i] >= 0) xval[8 * k + i] = xb[8 * k + i];
                    else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        s = static_cast<uint8_t>(s | (1 << i));
                    }
                }
                block_signs[k] = s;
            }
        }
        float max = xval[0];
        for (int i = 1; i < bs; ++i) max = std::max(max, xval[i]);
        std::memset(L, 0, static_cast<size_t>(bs));
        if (max < eps) return false;
        float best = 0;
        float scale = max / (2 * kMaxQ - 1);
        for (int k = 0; k < ng; ++k) is_on_grid[k] = on_grid_init;
        for (int is = -ntry; is <= ntry; ++is) {
            const float id = (2 * kMaxQ - 1 + is * step) / max;
            const float this_scale = 1 / id;
            for (int k = 0; k < ng; ++k) {
                for (int i = 0; i < n_coord; ++i) {
                    const int l = nearest_int(0.5f * (id * xval[n_coord * k + i] - 1));
                    Laux[n_coord * k + i] = static_cast<int8_t>(std::max(0, std::min(kMaxQ - 1, l)));
                }
                is_on_grid_aux[k] = true;
                const int u = lattice_index(Laux + n_coord * k);
                if (cb.map[static_cast<size_t>(u)] < 0) {
                    is_on_grid_aux[k] = false;
                    find_best_neighbour<N>(cb.neighbours.data() - cb.map[static_cast<size_t>(u)] - 1, cb.grid.data(), xval + n_coord * k, waux + n_coord * k, this_scale, Laux + n_coord * k);
                }
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < bs; ++i) {
                const float w = weight[i];
                const float q = 2 * Laux[i] + 1;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                for (int i = 0; i < bs; ++i) L[i] = Laux[i];
                for (int k = 0; k < ng; ++k) is_on_grid[k] = is_on_grid_aux[k];
            }
        }
        int n_not_ongrid = 0;
        for (int k = 0; k < ng; ++k)
            if (!is_on_grid[k]) ++n_not_ongrid;
        if (n_not_ongrid > 0 && scale > 0) {
            const float id = 1 / scale;
            for (int k = 0; k < ng; ++k) {
                if (!redo_all && is_on_grid[k]) continue;
                int8_t lk[8];
                for (int i = 0; i < n_coord; ++i) {
                    const int l = nearest_int(0.5f * (id * xval[n_coord * k + i] - 1));
                    lk[i] = static_cast<int8_t>(std::max(0, std::min(kMaxQ - 1, l)));
                }
                const int u = lattice_index(lk);
                int g = cb.map[static_cast<size_t>(u)];
                if (g < 0) g = find_best_neighbour<N>(cb.neighbours.data() - cb.map[static_cast<size_t>(u)] - 1, cb.grid.data(), xval + n_coord * k, waux + n_coord * k, scale, L + n_coord * k);
                for (int i = 0; i < n_coord; ++i) L[n_coord * k + i] = static_cast<int8_t>((coord(cb.grid[g], i) - 1) / 2);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < bs; ++i) {
                const float w = weight[i];
                const float q = 2 * L[i] + 1;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < bs8; ++k) block_signs[k] = static_cast<uint8_t>(even ? (~block_signs[k] & 127) : ~block_signs[k]);
        }
        scale_out = scale;
        return true;
    }

    int lattice_index(const int8_t * l) const {
        int u = 0;
        for (int i = 0; i < n_coord; ++i) u |= l[i] << (bits * i);
        return u;
    }

    // Group k's grid index (L is on the grid after run()).
    int grid_index(int k) const {
        const int g = cb.map[static_cast<size_t>(lattice_index(L + n_coord * k))];
        if (g < 0) off_grid(name);
        return g;
    }
};

grid_search<uint64_t, 8> iq2_search(uint32_t type) {
    const bool xs = type == KAIL_TYPE_IQ2_XS;
    return {iq2_codebook(type), 2, 3, 16, xs, xs ? GROUP_MAX_EPS : GROUP_MAX_EPS_IQ2_S, true, 0.1f, 9, false, xs ? "IQ2_XS" : "IQ2_S", {}, {}, {}, {}, {}, {}, {}, {}};
}

grid_search<uint32_t, 4> iq3_search(bool xxs) {
    // (IQ3_S leaves only an all-zero sub-block at zero: below the smallest positive float.)
    return {iq3_codebook(xxs ? 256 : 512), 3, 8, 32, xxs, xxs ? GROUP_MAX_EPS_IQ3_XXS : std::numeric_limits<float>::denorm_min(), xxs, 0.2f, xxs ? 15 : 9, !xxs,
            xxs ? "IQ3_XXS" : "IQ3_S", {}, {}, {}, {}, {}, {}, {}, {}};
}

void quantize_iq2_xs_row(const float * x, block_iq2_xs * y, int64_t n, const float * qw_row) {
    grid_search<uint64_t, 8> gs = iq2_search(KAIL_TYPE_IQ2_XS);
    float scales[QK_K / 16];
    uint16_t q2[2 * (QK_K / 16)];
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        y[ibl].d = f2h(0.f);
        std::memset(q2, 0, QK_K / 4);
        std::memset(y[ibl].scales, 0, QK_K / 32);
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 1);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float * xb = xbl + 16 * ib;
            const float * qw = qw_row + QK_K * ibl + 16 * ib;
            for (int i = 0; i < 16; ++i) gs.weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
            float scale;
            if (!gs.run(xb, scale)) {
                scales[ib] = 0;
                continue;
            }
            for (int k = 0; k < 2; ++k) q2[2 * ib + k] = static_cast<uint16_t>(gs.grid_index(k) | (gs.block_signs[k] << 9));
            scales[ib] = scale;
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) {
            std::memset(y[ibl].qs, 0, QK_K / 4);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = f2h(d);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            int l = scale_code(id, scales[ib], 15);
            if (ib % 2 == 0) y[ibl].scales[ib / 2] = static_cast<uint8_t>(l);
            else y[ibl].scales[ib / 2] = static_cast<uint8_t>(y[ibl].scales[ib / 2] | (l << 4));
        }
        std::memcpy(y[ibl].qs, q2, QK_K / 4);
    }
}

void quantize_iq2_s_row(const float * x, block_iq2_s * y, int64_t n, const float * qw_row) {
    grid_search<uint64_t, 8> gs = iq2_search(KAIL_TYPE_IQ2_S);
    float scales[QK_K / 16];
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        std::memset(&y[ibl], 0, sizeof(block_iq2_s));
        y[ibl].d = f2h(0.f);
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 2);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float * xb = xbl + 16 * ib;
            if (qw_row) {
                const float * qw = qw_row + QK_K * ibl + 16 * ib;
                for (int i = 0; i < 16; ++i) gs.weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
            } else {
                for (int i = 0; i < 16; ++i) gs.weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
            }
            float scale;
            if (!gs.run(xb, scale)) {
                scales[ib] = 0;
                continue;
            }
            for (int k = 0; k < 2; ++k) {
                const int i8 = 2 * ib + k;
                const int g = gs.grid_index(k);
                y[ibl].qs[i8] = static_cast<uint8_t>(g & 255);
                y[ibl].qh[i8 / 4] = static_cast<uint8_t>(y[ibl].qh[i8 / 4] | ((g >> 8) << 2 * (i8 % 4)));
                y[ibl].qs[QK_K / 8 + i8] = gs.block_signs[k];
            }
            scales[ib] = scale;
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        y[ibl].d = f2h(d * 0.9875f);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            int l = scale_code(id, scales[ib], 15);
            if (ib % 2 == 0) y[ibl].scales[ib / 2] = static_cast<uint8_t>(l);
            else y[ibl].scales[ib / 2] = static_cast<uint8_t>(y[ibl].scales[ib / 2] | (l << 4));
        }
    }
}

void quantize_iq3_xxs_row(const float * x, block_iq3_xxs * y, int64_t n, const float * qw_row) {
    grid_search<uint32_t, 4> s = iq3_search(true);
    float scales[QK_K / 32];
    uint8_t q3[3 * (QK_K / 8) + QK_K / 32];
    uint32_t scales_and_signs[QK_K / 32];
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        y[ibl].d = f2h(0.f);
        std::memset(q3, 0, sizeof q3);
        std::memset(scales_and_signs, 0, sizeof scales_and_signs);
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 2);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float * xb = xbl + 32 * ib;
            fill_weights(s.weight, qw_row ? qw_row + QK_K * ibl + 32 * ib : nullptr, xb, 32, sigma2);
            float scale;
            if (!s.run(xb, scale)) {
                scales[ib] = 0;
                continue;
            }
            for (int k = 0; k < 8; ++k) q3[8 * ib + k] = static_cast<uint8_t>(s.grid_index(k));
            scales_and_signs[ib] = s.block_signs[0] | (s.block_signs[1] << 7) | (s.block_signs[2] << 14) | (s.block_signs[3] << 21);
            scales[ib] = scale;
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) {
            std::memset(y[ibl].qs, 0, sizeof y[ibl].qs);
            continue;
        }
        const float d = max_scale / 31;
        y[ibl].d = f2h(d * 1.0125f);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            int l = scale_code(id, scales[ib], 15);
            scales_and_signs[ib] |= static_cast<uint32_t>(l) << 28;
        }
        std::memcpy(q3 + QK_K / 4, scales_and_signs, sizeof scales_and_signs);
        std::memcpy(y[ibl].qs, q3, sizeof y[ibl].qs);
    }
}

void quantize_iq3_s_row(const float * x, block_iq3_s * y, int64_t n, const float * qw_row) {
    const int block_size = 32, bs4 = block_size / 4, bs8 = block_size / 8;
    grid_search<uint32_t, 4> s = iq3_search(false);
    float scales[QK_K / 32];
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        std::memset(&y[ibl], 0, sizeof(block_iq3_s));
        y[ibl].d = f2h(0.f);
        uint8_t * qs = y[ibl].qs;
        uint8_t * qh = y[ibl].qh;
        uint8_t * signs = y[ibl].signs;
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 2);
        for (int ib = 0; ib < QK_K / block_size; ++ib) {
            const float * xb = xbl + block_size * ib;
            fill_weights(s.weight, qw_row ? qw_row + QK_K * ibl + block_size * ib : nullptr, xb, block_size, sigma2);
            float scale;
            // (A sub-block of zeros leaves its qs, signs and qh bits at zero and does not move on.)
            if (!s.run(xb, scale)) {
                scales[ib] = 0;
                continue;
            }
            for (int k = 0; k < bs4; ++k) {
                const int g = s.grid_index(k);
                qs[k] = static_cast<uint8_t>(g & 255);
                qh[(ib * bs4 + k) / 8] = static_cast<uint8_t>(qh[(ib * bs4 + k) / 8] | ((g >> 8) << ((ib * bs4 + k) % 8)));
            }
            qs += bs4;
            for (int k = 0; k < bs8; ++k) signs[k] = s.block_signs[k];
            signs += bs8;
            scales[ib] = scale;
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        y[ibl].d = f2h(d * 1.033f);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / block_size; ib += 2) {
            int l1 = scale_code(id, scales[ib + 0], 15);
            int l2 = scale_code(id, scales[ib + 1], 15);
            y[ibl].scales[ib / 2] = static_cast<uint8_t>(l1 | (l2 << 4));
        }
    }
}

// iq1_find_best_neighbour2: the grid point nearest (weighted) to xval at `scale`, each coordinate
// read through xg (the shifted ternary values).
int iq1_best_neighbour(const uint16_t * neighbours, const uint64_t * grid, const float * xval, const float * weight, float scale, const float * xg, int8_t * L) {
    const int num = neighbours[0];
    float best_score = FLT_MAX;
    int grid_index = -1;
    for (int j = 1; j <= num; ++j) {
        const uint64_t g = grid[neighbours[j]];
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float q = xg[(coord(g, i) - 1) / 2];
            const float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_score) {
            best_score = d2;
            grid_index = neighbours[j];
        }
    }
    // (ggml then scans the whole grid, reading past xval: only reached when every distance above
    // is infinite or NaN, which finite weights never give.)
    if (grid_index < 0) off_grid("IQ1 neighbour search");
    for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((coord(grid[grid_index], i) - 1) / 2);
    return grid_index;
}

// The values of a sub-block sorted ascending with their indices, ties in their order (glibc's
// qsort, a merge sort, is stable for these sizes).
void sort_pairs(const float * xb, int n, int * idx) {
    for (int j = 0; j < n; ++j) idx[j] = j;
    std::stable_sort(idx, idx + n, [&](int a, int b) { return xb[a] < xb[b]; });
}

void quantize_iq1_s_row(const float * x, block_iq1_s * y, int64_t n, const float * qw_row) {
    const codebook<uint64_t> & cb = iq2_codebook(KAIL_TYPE_IQ1_S);
    const int block_size = 32;
    const float x_p[3] = {-1 + IQ1S_DELTA, IQ1S_DELTA, 1 + IQ1S_DELTA};
    const float x_m[3] = {-1 - IQ1S_DELTA, -IQ1S_DELTA, 1 - IQ1S_DELTA};
    float scales[QK_K / 32], weight[32], sumx[33], sumw[33];
    int8_t L[32], shifts[QK_K / 32];
    int idx[32];
    uint16_t index[4];
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        y[ibl].d = f2h(0.f);
        std::memset(y[ibl].qs, 0, QK_K / 8);
        std::memset(y[ibl].qh, 0, QK_K / 16);
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 2);
        for (int ib = 0; ib < QK_K / block_size; ++ib) {
            const float * xb = xbl + block_size * ib;
            const float * qw = qw_row + QK_K * ibl + block_size * ib;
            for (int i = 0; i < block_size; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
            float max = std::fabs(xb[0]);
            for (int i = 1; i < block_size; ++i) max = std::max(max, std::fabs(xb[i]));
            if (max < GROUP_MAX_EPS_IQ1_S) {
                scales[ib] = 0;
                shifts[ib] = 1;
                std::memset(L, 1, block_size);
                continue;
            }
            // Every split of the sorted values into -1 / 0 / +1, with the prefix sums.
            sort_pairs(xb, block_size, idx);
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < block_size; ++j) {
                const int i = idx[j];
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            float best_score = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_shift = 0;
            for (int i1 = 0; i1 <= block_size; ++i1) {
                for (int i2 = i1; i2 <= block_size; ++i2) {
                    float sumqx = (sumx[i1] - sumx[0]) * x_p[0] + (sumx[i2] - sumx[i1]) * x_p[1] + (sumx[block_size] - sumx[i2]) * x_p[2];
                    float sumq2 = (sumw[i1] - sumw[0]) * x_p[0] * x_p[0] + (sumw[i2] - sumw[i1]) * x_p[1] * x_p[1] + (sumw[block_size] - sumw[i2]) * x_p[2] * x_p[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = 1;
                    }
                    sumqx = (sumx[i1] - sumx[0]) * x_m[0] + (sumx[i2] - sumx[i1]) * x_m[1] + (sumx[block_size] - sumx[i2]) * x_m[2];
                    sumq2 = (sumw[i1] - sumw[0]) * x_m[0] * x_m[0] + (sumw[i2] - sumw[i1]) * x_m[1] * x_m[1] + (sumw[block_size] - sumw[i2]) * x_m[2] * x_m[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = -1;
                    }
                }
            }
            if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
                scales[ib] = 0;
                shifts[ib] = 1;
                std::memset(L, 1, block_size);
                continue;
            }
            for (int j = 0; j < besti1; ++j) L[idx[j]] = 0;
            for (int j = besti1; j < besti2; ++j) L[idx[j]] = 1;
            for (int j = besti2; j < block_size; ++j) L[idx[j]] = 2;
            if (scale < 0) {
                for (int j = 0; j < block_size; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
                scale = -scale;
                best_shift = -best_shift;
            }
            bool all_on_grid = true;
            const float * xx = best_shift == 1 ? x_p : x_m;
            for (int k = 0; k < block_size / 8; ++k) {
                uint16_t u = 0;
                for (int j = 0; j < 8; ++j) u = static_cast<uint16_t>(u | (L[8 * k + j] << 2 * j));
                int grid_index = cb.map[u];
                if (grid_index < 0) {
                    all_on_grid = false;
                    grid_index = iq1_best_neighbour(cb.neighbours.data() - cb.map[u] - 1, cb.grid.data(), xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
                }
                index[k] = static_cast<uint16_t>(grid_index);
            }
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < block_size / 8; ++k) {
                    for (int j = 0; j < 8; ++j) {
                        const float w = weight[8 * k + j];
                        const float q = xx[(coord(cb.grid[index[k]], j) - 1) / 2];
                        sumqx += w * q * xb[8 * k + j];
                        sumq2 += w * q * q;
                    }
                }
                if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
            }
            uint16_t h = 0;
            for (int k = 0; k < block_size / 8; ++k) {
                y[ibl].qs[(block_size / 8) * ib + k] = static_cast<uint8_t>(index[k] & 255);
                h = static_cast<uint16_t>(h | ((index[k] >> 8) << 3 * k));
            }
            y[ibl].qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = static_cast<int8_t>(best_shift);
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 15;
        y[ibl].d = f2h(d * 1.125f);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / block_size; ++ib) {
            int l = scale_code(id, scales[ib], 7);
            if (shifts[ib] == -1) l |= 8;
            y[ibl].qh[ib] = static_cast<uint16_t>(y[ibl].qh[ib] | (l << 12));
        }
    }
}

void quantize_iq1_m_row(const float * x, block_iq1_m * y, int64_t n, const float * qw_row) {
    const codebook<uint64_t> & cb = iq2_codebook(KAIL_TYPE_IQ1_M);
    const int block_size = 16;
    const float x_p[3] = {-1 + IQ1M_DELTA, IQ1M_DELTA, 1 + IQ1M_DELTA};
    const float x_m[3] = {-1 - IQ1M_DELTA, -IQ1M_DELTA, 1 - IQ1M_DELTA};
    const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[QK_K / 16], weight[16], sumqx[4], sumq2[4];
    int8_t L[16], shifts[QK_K / 16];
    int idx[16];
    uint16_t index[2];
    const float * xx;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        std::memset(y[ibl].qs, 0, QK_K / 8);
        std::memset(y[ibl].qh, 0, QK_K / 16);
        std::memset(y[ibl].scales, 0, QK_K / 32);
        float max_scale = 0;
        const float * xbl = x + QK_K * ibl;
        const float sigma2 = block_sigma2(xbl, 2);
        auto weights_of = [&](int ib, const float * xb) { fill_weights(weight, qw_row ? qw_row + QK_K * ibl + block_size * ib : nullptr, xb, block_size, sigma2); };
        for (int ib = 0; ib < QK_K / block_size; ++ib) {
            const float * xb = xbl + block_size * ib;
            weights_of(ib, xb);
            float max = std::fabs(xb[0]);
            for (int i = 1; i < block_size; ++i) max = std::max(max, std::fabs(xb[i]));
            if (max < GROUP_MAX_EPS_IQ1_M) {
                scales[ib] = 0;
                shifts[ib] = 0;
                std::memset(L, 1, block_size);
                continue;
            }
            sort_pairs(xb, block_size, idx);
            float best_score = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_k = -1;
            // k: the signs of the two halves' shifts (0 ++, 1 +-, 2 -+, 3 --); prefix sums per half.
            {
                float px[2][17], pw[2][17];
                px[0][0] = px[1][0] = 0;
                pw[0][0] = pw[1][0] = 0;
                for (int j = 0; j < block_size; ++j) {
                    const int i = idx[j];
                    const int h = i < block_size / 2 ? 0 : 1;
                    px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                    px[1 - h][j + 1] = px[1 - h][j];
                    pw[h][j + 1] = pw[h][j] + weight[i];
                    pw[1 - h][j + 1] = pw[1 - h][j];
                }
                const float txs[2] = {px[0][block_size], px[1][block_size]};
                const float tws[2] = {pw[0][block_size], pw[1][block_size]};
                const float p2 = x_p[2], m2 = x_m[2];
                const float cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1];
                const float cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
                const float cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1];
                const float cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
                for (int i1 = 0; i1 <= block_size; ++i1) {
                    for (int i2 = i1; i2 <= block_size; ++i2) {
                        float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
                        for (int h = 0; h < 2; ++h) {
                            const float sx = px[h][i1] + px[h][i2];
                            qx_p[h] = txs[h] * p2 - sx;
                            qx_m[h] = txs[h] * m2 - sx;
                            q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                            q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                        }
                        sumqx[0] = qx_p[0] + qx_p[1];
                        sumqx[1] = qx_p[0] + qx_m[1];
                        sumqx[2] = qx_m[0] + qx_p[1];
                        sumqx[3] = qx_m[0] + qx_m[1];
                        sumq2[0] = q2_p[0] + q2_p[1];
                        sumq2[1] = q2_p[0] + q2_m[1];
                        sumq2[2] = q2_m[0] + q2_p[1];
                        sumq2[3] = q2_m[0] + q2_m[1];
                        for (int k = 0; k < 4; ++k) {
                            if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                                scale = sumqx[k] / sumq2[k];
                                best_score = scale * sumqx[k];
                                besti1 = i1;
                                besti2 = i2;
                                best_k = k;
                            }
                        }
                    }
                }
            }
            if (besti1 < 0 || besti2 < 0 || best_k < 0) {
                scales[ib] = 0;
                shifts[ib] = 0;
                std::memset(L, 1, block_size);
                continue;
            }
            for (int j = 0; j < besti1; ++j) L[idx[j]] = 0;
            for (int j = besti1; j < besti2; ++j) L[idx[j]] = 1;
            for (int j = besti2; j < block_size; ++j) L[idx[j]] = 2;
            if (scale < 0) {
                for (int j = 0; j < block_size; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
                scale = -scale;
                best_k = best_k == 0 ? 3 : best_k == 1 ? 2 : best_k == 2 ? 1 : 0;
            }
            bool all_on_grid = true;
            for (int k = 0; k < block_size / 8; ++k) {
                xx = k == 0 ? (best_k < 2 ? x_p : x_m) : (best_k % 2 == 0 ? x_p : x_m);
                uint16_t u = 0;
                for (int j = 0; j < 8; ++j) u = static_cast<uint16_t>(u | (L[8 * k + j] << 2 * j));
                int grid_index = cb.map[u];
                if (grid_index < 0) {
                    all_on_grid = false;
                    grid_index = iq1_best_neighbour(cb.neighbours.data() - cb.map[u] - 1, cb.grid.data(), xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
                }
                index[k] = static_cast<uint16_t>(grid_index);
            }
            if (!all_on_grid) {
                float sumqx_f = 0, sumq2_f = 0;
                for (int k = 0; k < block_size / 8; ++k) {
                    xx = k == 0 ? (best_k < 2 ? x_p : x_m) : (best_k % 2 == 0 ? x_p : x_m);
                    for (int j = 0; j < 8; ++j) {
                        const float w = weight[8 * k + j];
                        const float q = xx[(coord(cb.grid[index[k]], j) - 1) / 2];
                        sumqx_f += w * q * xb[8 * k + j];
                        sumq2_f += w * q * q;
                    }
                }
                if (sumqx_f > 0 && sumq2_f > 0) scale = sumqx_f / sumq2_f;
            }
            y[ibl].qs[2 * ib + 0] = static_cast<uint8_t>(index[0] & 255);
            y[ibl].qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
            y[ibl].qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
            scales[ib] = scale;
            shifts[ib] = static_cast<int8_t>(best_k);
            max_scale = std::max(max_scale, scale);
        }
        if (!max_scale) continue;
        uint16_t sc[4];
        std::memcpy(sc, y[ibl].scales, sizeof sc);
        float d = max_scale / 15;
        const float id = 1 / d;
        float sumqx_f = 0, sumq2_f = 0;
        for (int ib = 0; ib < QK_K / block_size; ++ib) {
            int l = scale_code(id, scales[ib], 7);
            sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l << 3 * (ib % 4)));
            y[ibl].qh[ib] = static_cast<uint8_t>(y[ibl].qh[ib] | masks[shifts[ib]]);
            const float * xb = xbl + block_size * ib;
            weights_of(ib, xb);
            for (int k = 0; k < block_size / 8; ++k) {
                xx = k == 0 ? (shifts[ib] < 2 ? x_p : x_m) : (shifts[ib] % 2 == 0 ? x_p : x_m);
                const uint64_t g = cb.grid[y[ibl].qs[2 * ib + k] + ((y[ibl].qh[ib] << (8 - 4 * k)) & 0x700)];
                for (int j = 0; j < 8; ++j) {
                    const float w = weight[8 * k + j];
                    const float q = xx[(coord(g, j) - 1) / 2] * (2 * l + 1);
                    sumqx_f += w * q * xb[8 * k + j];
                    sumq2_f += w * q * q;
                }
            }
        }
        if (sumq2_f > 0) d = sumqx_f / sumq2_f;
        const uint16_t s16 = f2h(d * 1.1125f);
        sc[0] = static_cast<uint16_t>(sc[0] | ((s16 & 0x000f) << 12));
        sc[1] = static_cast<uint16_t>(sc[1] | ((s16 & 0x00f0) << 8));
        sc[2] = static_cast<uint16_t>(sc[2] | ((s16 & 0x0f00) << 4));
        sc[3] = static_cast<uint16_t>(sc[3] | ((s16 & 0xf000) << 0));
        std::memcpy(y[ibl].scales, sc, sizeof sc);
    }
}

} // namespace

bool iq_ggml_needs_weights(uint32_t type) {
    return type == KAIL_TYPE_IQ2_XXS || type == KAIL_TYPE_IQ2_XS || type == KAIL_TYPE_IQ1_S;
}

void quantize_iq_ggml_row(uint32_t type, const float * x, void * y, int64_t n, const float * qw) {
    switch (type) {
        case KAIL_TYPE_IQ2_XXS: quantize_iq2_xxs_row(x, static_cast<block_iq2_xxs *>(y), n, qw); break;
        case KAIL_TYPE_IQ2_XS: quantize_iq2_xs_row(x, static_cast<block_iq2_xs *>(y), n, qw); break;
        case KAIL_TYPE_IQ2_S: quantize_iq2_s_row(x, static_cast<block_iq2_s *>(y), n, qw); break;
        case KAIL_TYPE_IQ3_XXS: quantize_iq3_xxs_row(x, static_cast<block_iq3_xxs *>(y), n, qw); break;
        case KAIL_TYPE_IQ3_S: quantize_iq3_s_row(x, static_cast<block_iq3_s *>(y), n, qw); break;
        case KAIL_TYPE_IQ1_S: quantize_iq1_s_row(x, static_cast<block_iq1_s *>(y), n, qw); break;
        case KAIL_TYPE_IQ1_M: quantize_iq1_m_row(x, static_cast<block_iq1_m *>(y), n, qw); break;
        default: throw error(KAIL_E_INTERNAL, "quantize_iq_ggml_row: not a codebook i-quant");
    }
}

} // namespace kail::cpu
