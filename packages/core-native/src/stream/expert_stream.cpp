// The expert stream: RAM cache of routed experts, read by offset from the GGUF file by I/O threads.
//
// One mutex guards the cache (entries, byte accounting, queues, stats); reads run outside it. An
// entry is QUEUED (buffer allocated, waiting for a reader), READING, READY or FAILED. Requests pin
// entries; only unpinned READY entries are evicted (unpinned QUEUED prefetches may be cancelled).
// The victim among demand-used entries is the choice of an expert_cache.h policy, which hears of
// every request (on_route, on_access: distinct experts with their largest gating weight; a step is
// one forward pass) and of entries entering (on_insert when first used) and leaving (on_evict).
// Speculative (prefetched, unused) entries stay outside the policy: stale ones go first.
// Buffers are anonymous mappings of exactly the entry's size, so freeing one returns it to the
// kernel at once; an eviction that makes room for an entry of the same size hands its buffer over.
//
// The VRAM tier (params.vram) is a set of slots in device memory, each the size of the largest
// entry. A slot is reserved for a key when a storage read of it completes and the tier does not
// hold it (the reader copies the entry up, the entry pinned meanwhile), and becomes a copy others
// may use once that upload is done. An entry created for a key with a finished copy is filled by
// one download from its slot instead of storage reads. Slots being copied are busy and never
// reused; the least recently used idle copy gives its slot up. A failed copy turns the tier off
// (the entry is then read from storage); the stream never fails for the tier's sake.
#include "kail/expert_stream.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kail/expert_cache.h"
#include "kail/status.h"

namespace kail {

namespace {

constexpr uint64_t A = EXPERT_READ_ALIGN;
const char * const SLICE_NAMES[3] = {"gate", "up", "down"};

uint64_t align_down(uint64_t v) { return v & ~(A - 1); }
uint64_t align_up(uint64_t v) { return (v + A - 1) & ~(A - 1); }

// Bytes of the aligned read that covers [off, off + len).
uint64_t span_bytes(uint64_t off, uint64_t len) { return align_up(off + len) - align_down(off); }

uint64_t key_of(int layer, int32_t expert) { return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert); }

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct entry {
    enum state_t { QUEUED, READING, READY, FAILED, CANCELLED };
    int             layer = 0;
    int32_t         expert = 0;
    state_t         state = QUEUED;
    int             pins = 0;
    bool            speculative = false;  // read by prefetch() and not asked for since
    bool            stale = false;        // speculative, and its layer was asked for without it
    bool            in_policy = false;
    bool            demand = false;       // queued with demand priority
    bool            warm = false;         // read by warm() and not asked for since
    int             n_parts = 1;          // reads the entry is cut into (read_bytes), taken by readers in turn
    int             next_part = 0;        // parts handed to readers so far
    int             parts_done = 0;
    double          read_seconds = 0;
    std::string     part_error;           // the error of the lowest failed part, if any
    int             part_error_idx = -1;  // that part's index (parts are handed out in order)
    uint8_t *       buf = nullptr;
    uint64_t        bytes = 0;
    const uint8_t * data[3] = {nullptr, nullptr, nullptr};
    std::string     error;
    int             vslot = -1;           // filled by a download from this VRAM slot (busy while set)
};
using entry_ptr = std::shared_ptr<entry>;

} // namespace

uint64_t expert_entry_bytes(const expert_layer_source & src, int32_t expert) {
    uint64_t b = 0;
    for (int s = 0; s < 3; s++) b += span_bytes(src.offset[s] + static_cast<uint64_t>(expert) * src.stride[s], src.stride[s]);
    return b;
}

uint64_t expert_entry_bytes_max(const expert_layer_source & src) {
    uint64_t b = 0;
    for (int32_t e = 0; e < src.n_expert; e++) b = std::max(b, expert_entry_bytes(src, e));
    return b;
}

struct expert_stream::impl {
    std::string                      path;
    std::vector<expert_layer_source> layers;
    expert_stream_params             params;
    std::vector<std::string>         files;        // the GGUF, or the pack's stripes
    std::vector<int>                 fd_direct;    // per file; -1 without O_DIRECT
    std::vector<int>                 fd_buffered;  // per file
    bool                             packed = false;
    bool                             direct = false;  // guarded by mu
    std::string                      io_note;

    mutable std::mutex               mu;
    std::condition_variable          io_cv;     // readers wait for work
    std::condition_variable          ready_cv;  // requests wait for reads and room
    std::unordered_map<uint64_t, entry_ptr> map;
    std::deque<entry_ptr>            q_demand, q_prefetch, q_warm;
    int                              warm_reading = 0;  // warm reads in flight
    std::list<entry_ptr>             spec;      // speculative entries, oldest first
    uint64_t                         spec_bytes = 0;
    std::unique_ptr<expert_cache_policy> policy;  // ranks demand-used entries for eviction
    uint64_t                         used = 0;     // entries' buffers and spare ones
    // Buffers of cancelled predictions, counted in `used`, kept for the next entry of their size:
    // unmapping and mapping again costs a page fault per page (huge page) each time.
    std::vector<std::pair<uint64_t, uint8_t *>> spare;
    expert_stream_stats              st;
    std::vector<std::vector<uint8_t>> predicted;  // per layer: the last prediction not yet checked
    int                              protect_layer = -1;  // prefetch(): its predicted set is not evictable
    size_t                           pending_total = 0;   // experts requests wait to get room for
    int                              prefetch_reading = 0;  // prefetch reads in flight
    int64_t                          step = -1;           // forward passes seen (for the policy)
    int                              last_layer = INT_MAX;
    std::vector<expert_key>          candidates;          // pick_victim's scratch
    bool                             stop = false;
    std::vector<std::thread>         threads;

    // The VRAM tier (see the top of this file). vmap: key -> slot, for copies done and uploading.
    struct vslot_t {
        uint64_t                 key = 0;
        int                      busy = 0;      // copies in flight (the upload, downloads)
        bool                     filled = false;
        std::list<int>::iterator lru;           // in vlru while filled
    };
    bool                             vram_on = false;
    std::unordered_set<void *>       host_pinned;  // buffers the VRAM tier's device page-locked (pin_host)
    uint64_t                         vslot_bytes = 0;
    std::vector<vslot_t>             vslots;
    std::unordered_map<uint64_t, int> vmap;
    std::list<int>                   vlru;   // filled slots, least recently used first
    std::vector<int>                 vfree;

    ~impl() {
        {
            std::lock_guard<std::mutex> lk(mu);
            stop = true;
        }
        io_cv.notify_all();
        for (auto & t : threads) t.join();
        for (auto & kv : map) free_buffer(*kv.second);
        while (!spare.empty()) free_spare();
        for (int fd : fd_direct)
            if (fd >= 0) ::close(fd);
        for (int fd : fd_buffered)
            if (fd >= 0) ::close(fd);
    }

    // Bytes of one entry's buffer: its three aligned spans in the GGUF, or its pack block.
    uint64_t entry_bytes(int layer, int32_t expert) const {
        return packed ? params.pack.layers[layer].block_bytes : expert_entry_bytes(layers[layer], expert);
    }

    // A fresh buffer of `bytes` (not counted in `used`), offered to the VRAM tier's device to
    // page-lock; nullptr when the system refuses the memory.
    uint8_t * map_buffer(uint64_t bytes) {
        void * p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        madvise(p, bytes, MADV_HUGEPAGE);  // best effort; see load_weights in src/model/model.cpp
        if (vram_on && params.vram->pin_host(p, bytes)) host_pinned.insert(p);
        return static_cast<uint8_t *>(p);
    }

    // Gives a map_buffer() buffer counted in `used` back to the system.
    void unmap_buffer(uint8_t * p, uint64_t bytes) {
        if (host_pinned.erase(p)) params.vram->unpin_host(p);
        munmap(p, bytes);
        used -= bytes;
    }

    void free_buffer(entry & e) {
        if (!e.buf) return;
        unmap_buffer(e.buf, e.bytes);
        e.buf = nullptr;
        e.bytes = 0;
    }

    void free_spare() {
        const auto [bytes, p] = spare.back();
        spare.pop_back();
        unmap_buffer(p, bytes);
    }

    // Removes an entry from the cache's books (not its buffer).
    void unlink(const entry_ptr & e) {
        auto it = map.find(key_of(e->layer, e->expert));
        if (it != map.end() && it->second == e) map.erase(it);
        if (e->in_policy) {
            policy->on_evict(e->layer, e->expert);
            e->in_policy = false;
        }
        if (e->speculative) {
            spec.remove(e);
            spec_bytes -= e->bytes;
            e->speculative = false;
        }
    }

    bool predicted_now(int layer, int32_t expert) const {
        return layer == protect_layer && !predicted[layer].empty() && predicted[layer][expert];
    }

    // The next entry to give up for room: stale predictions first, then the policy's choice, and
    // for demand reads also fresh predictions (ready, then still queued: cancelled).
    entry_ptr pick_victim(bool for_demand) {
        for (auto & e : spec)
            if (e->stale && e->pins == 0 && e->state == entry::READY) return e;
        candidates.clear();
        for (auto & kv : map) {
            const entry & e = *kv.second;
            if (e.in_policy && e.pins == 0 && e.state == entry::READY && !predicted_now(e.layer, e.expert)) candidates.push_back({e.layer, e.expert});
        }
        if (!candidates.empty()) {
            const size_t i = policy->choose_victim(candidates.data(), candidates.size());
            if (i >= candidates.size()) throw error(KAIL_E_INTERNAL, "expert stream: the cache policy chose no candidate");
            return map.at(key_of(candidates[i].layer, candidates[i].expert));
        }
        if (!for_demand) return nullptr;
        for (auto & e : spec)
            if (e->pins == 0 && e->state == entry::READY) return e;
        for (auto & e : spec)
            if (e->pins == 0 && e->state == entry::QUEUED) return e;
        for (auto it = q_warm.rbegin(); it != q_warm.rend(); ++it)  // coldest first
            if ((*it)->pins == 0 && (*it)->state == entry::QUEUED && (*it)->warm) return *it;
        return nullptr;
    }

    void drop(const entry_ptr & v) {
        if (v->speculative) st.layers[v->layer].prefetch_wasted++;
        if (v->state == entry::QUEUED) {
            vrelease(*v);
            v->state = entry::CANCELLED;
            if (v->warm) st.warm_cancelled++;
            else st.prefetch_cancelled++;
        } else {
            st.evictions++;
        }
        unlink(v);
    }

    // A buffer of `bytes` within the budget, evicting as needed; nullptr when there is no room.
    uint8_t * alloc(uint64_t bytes, bool for_demand) {
        for (size_t i = 0; i < spare.size(); i++) {
            if (spare[i].first != bytes) continue;
            uint8_t * b = spare[i].second;
            spare.erase(spare.begin() + static_cast<std::ptrdiff_t>(i));
            return b;
        }
        while (used + bytes > params.cache_bytes) {
            if (!spare.empty()) {  // another size's spare buffer gives its room up first
                free_spare();
                continue;
            }
            entry_ptr v = pick_victim(for_demand);
            if (!v) return nullptr;
            drop(v);
            if (v->bytes == bytes) {  // hand the victim's buffer over
                uint8_t * b = v->buf;
                v->buf = nullptr;
                v->bytes = 0;
                return b;
            }
            free_buffer(*v);
        }
        uint8_t * p = map_buffer(bytes);
        if (!p) throw error(KAIL_E_BUDGET, "expert stream: cannot allocate a " + std::to_string(bytes) + "-byte read buffer: " + std::strerror(errno));
        used += bytes;
        st.peak_bytes = std::max(st.peak_bytes, used);
        return p;
    }

    entry_ptr new_entry(int layer, int32_t expert, uint8_t * buf, uint64_t bytes) {
        auto e = std::make_shared<entry>();
        e->layer = layer;
        e->expert = expert;
        e->buf = buf;
        e->bytes = bytes;
        e->n_parts = static_cast<int>(parts_of(*e).size());
        if (vram_on) {
            auto it = vmap.find(key_of(layer, expert));
            if (it != vmap.end() && vslots[it->second].filled) {
                e->vslot = it->second;
                vslots[e->vslot].busy++;
                e->n_parts = 1;  // one download
            }
        }
        map[key_of(layer, expert)] = e;
        return e;
    }

    void vrelease(entry & e) {
        if (e.vslot < 0) return;
        vslots[e.vslot].busy--;
        e.vslot = -1;
    }

    // A slot for an upload of `key`, or -1 (the tier is off, holds or is copying the key, or every
    // slot is busy). The least recently used idle copy gives its slot up.
    int vreserve(uint64_t key) {
        if (!vram_on || vmap.count(key)) return -1;
        int s = -1;
        if (!vfree.empty()) {
            s = vfree.back();
            vfree.pop_back();
        } else {
            for (auto it = vlru.begin(); it != vlru.end(); ++it) {
                if (vslots[*it].busy) continue;
                s = *it;
                vlru.erase(it);
                vmap.erase(vslots[s].key);
                vslots[s].filled = false;
                st.vram_evictions++;
                break;
            }
        }
        if (s < 0) return -1;
        vslots[s].key = key;
        vslots[s].busy = 1;
        vmap[key] = s;
        return s;
    }

    void vram_off(const std::string & why) {
        if (!vram_on) return;
        vram_on = false;
        st.vram_error = why;
    }

    // Tries to start demand reads for `pending` (in order) as room allows; moves them to `held`.
    void admit(int layer, std::vector<int32_t> & pending, std::vector<entry_ptr> & held) {
        size_t i = 0;
        bool queued = false;
        for (; i < pending.size(); i++) {
            const int32_t x = pending[i];
            auto it = map.find(key_of(layer, x));
            if (it != map.end()) {  // read meanwhile by another request or a prefetch
                pin_existing(it->second);
                held.push_back(it->second);
                continue;
            }
            const uint64_t bytes = entry_bytes(layer, x);
            uint8_t * buf = alloc(bytes, true);
            if (!buf) break;
            entry_ptr e = new_entry(layer, x, buf, bytes);
            e->pins = 1;
            e->demand = true;
            policy->on_insert(layer, x, step, false);
            e->in_policy = true;
            q_demand.push_back(e);
            held.push_back(e);
            queued = true;
        }
        pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(i));
        if (queued) io_cv.notify_all();
    }

    void pin_existing(const entry_ptr & e) {
        e->pins++;
        if (e->warm) {
            st.warm_used++;
            e->warm = false;
        }
        if (e->speculative) {
            st.layers[e->layer].prefetch_used++;
            spec.remove(e);
            spec_bytes -= e->bytes;
            e->speculative = false;
            e->stale = false;
        }
        if (!e->in_policy) {
            policy->on_insert(e->layer, e->expert, step, false);
            e->in_policy = true;
        }
        if ((e->state == entry::QUEUED || (e->state == entry::READING && e->next_part < e->n_parts)) && !e->demand) {
            e->demand = true;
            q_demand.push_back(e);
            io_cv.notify_all();
        }
    }

    // One read of an entry: [file_off, file_off + len) of a file into buf + buf_off (all 4 KiB-aligned);
    // [data_lo, data_hi) are the bytes that must arrive (the rest is alignment padding).
    struct read_part {
        int      file = 0;
        int      slice = -1;  // GGUF slice (gate, up, down), -1 for a pack block
        uint64_t file_off = 0, len = 0, buf_off = 0, data_lo = 0, data_hi = 0;
        uint64_t msg_off = 0, msg_len = 0;  // the slice or block an error names
    };

    // The entry's reads: each aligned span (one per slice, or the pack block) cut into pieces of at
    // most params.read_bytes (0: uncut).
    std::vector<read_part> parts_of(const entry & e) const {
        std::vector<read_part> out;
        const uint64_t chunk = params.read_bytes >= A ? align_down(params.read_bytes) : 0;
        auto cut = [&](read_part base, uint64_t a0, uint64_t span, uint64_t lo, uint64_t hi) {
            for (uint64_t c = a0; c < a0 + span; c += chunk ? chunk : span) {
                read_part p = base;
                p.file_off = c;
                p.len = std::min(chunk ? chunk : span, a0 + span - c);
                p.buf_off = base.buf_off + (c - a0);
                p.data_lo = std::max(c, lo);
                p.data_hi = std::min(c + p.len, hi);
                out.push_back(p);
            }
        };
        if (packed) {
            const expert_pack_layer & pl = params.pack.layers[e.layer];
            read_part b;
            b.file = pl.file[e.expert];
            b.msg_off = pl.offset[e.expert];
            b.msg_len = pl.block_bytes;
            cut(b, b.msg_off, b.msg_len, b.msg_off, b.msg_off + b.msg_len);
            return out;
        }
        const expert_layer_source & src = layers[e.layer];
        uint64_t part = 0;
        for (int s = 0; s < 3; s++) {
            const uint64_t off = src.offset[s] + static_cast<uint64_t>(e.expert) * src.stride[s], len = src.stride[s];
            read_part b;
            b.slice = s;
            b.file = src.file[s];
            b.buf_off = part;
            b.msg_off = off;
            b.msg_len = len;
            cut(b, align_down(off), span_bytes(off, len), off, off + len);
            part += span_bytes(off, len);
        }
        return out;
    }

    // Reads one part; returns "" or the error.
    std::string read_part_do(const entry & e, const read_part & p, bool & direct_now, std::string & note) {
        std::string err;
        if (direct_now) {
            const int rc = read_full(p.file, true, e.buf + p.buf_off, p.len, p.file_off, p.data_hi - p.file_off, err);
            if (rc == 0) return "";
            if (rc != EINVAL) return describe_part(e, p, err);
            direct_now = false;
            note = std::string("O_DIRECT reads refused (") + std::strerror(EINVAL) + "); buffered reads + POSIX_FADV_DONTNEED";
        }
        const uint64_t n = p.data_hi - p.data_lo;
        const int rc = read_full(p.file, false, e.buf + p.buf_off + (p.data_lo - p.file_off), n, p.data_lo, n, err);
        posix_fadvise(fd_buffered[p.file], static_cast<off_t>(p.data_lo), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
        return rc == 0 ? "" : describe_part(e, p, err);
    }

    std::string describe_part(const entry & e, const read_part & p, const std::string & why) const {
        return p.slice >= 0 ? describe(e, p.slice, p.file, p.msg_off, p.msg_len, why) : describe_block(e, p.file, p.msg_off, p.msg_len, why);
    }

    std::string describe_block(const entry & e, int f, uint64_t off, uint64_t len, const std::string & why) const {
        return "expert stream: cannot read expert " + std::to_string(e.expert) + " of MoE layer " + std::to_string(e.layer) + " (" + std::to_string(len) +
               "-byte block at offset " + std::to_string(off) + ") from expert pack '" + files[f] + "': " + why;
    }

    std::string describe(const entry & e, int s, int f, uint64_t off, uint64_t len, const std::string & why) const {
        return "expert stream: cannot read expert " + std::to_string(e.expert) + " of MoE layer " + std::to_string(e.layer) + " (" + SLICE_NAMES[s] +
               " matrix, " + std::to_string(len) + " bytes at offset " + std::to_string(off) + ") from '" + files[static_cast<size_t>(f)] + "': " + why;
    }

    // Reads file f until `need` bytes are in (up to `len`); 0, EINVAL (for the O_DIRECT fallback) or -1 with err set.
    int read_full(int f, bool use_direct, uint8_t * dst, uint64_t len, uint64_t off, uint64_t need, std::string & err) const {
        const int fd = use_direct ? fd_direct[f] : fd_buffered[f];
        uint64_t got = 0;
        while (got < need) {
            const ssize_t r = pread(fd, dst + got, static_cast<size_t>(len - got), static_cast<off_t>(off + got));
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EINVAL && use_direct) return EINVAL;
                err = std::strerror(errno);
                return -1;
            }
            if (r == 0) {
                struct stat sb;
                const long long size = fstat(fd_buffered[f], &sb) == 0 ? static_cast<long long>(sb.st_size) : -1;
                err = "the file ends at " + std::to_string(size) + " bytes (truncated while open?)";
                return -1;
            }
            got += static_cast<uint64_t>(r);
        }
        return 0;
    }

    void set_views(entry & e) {
        if (packed) {
            for (int s = 0; s < 3; s++) e.data[s] = e.buf + params.pack.layers[e.layer].slice_offset[s];
            return;
        }
        const expert_layer_source & src = layers[e.layer];
        uint64_t part = 0;
        for (int s = 0; s < 3; s++) {
            const uint64_t off = src.offset[s] + static_cast<uint64_t>(e.expert) * src.stride[s];
            e.data[s] = e.buf + part + (off - align_down(off));
            part += span_bytes(off, src.stride[s]);
        }
    }

    // Prefetch reads may hold at most half the readers, so a demand read never waits for a
    // free reader behind a row of guesses.
    int prefetch_cap() const { return std::max(1, params.io_threads / 2); }
    // Warm reads leave one reader free for demand.
    int warm_cap() const { return std::max(1, params.io_threads - 1); }

    // The next part of the first entry in q that still has parts to hand out; pops entries with none left.
    entry_ptr take_part(std::deque<entry_ptr> & q, int & part) {
        while (!q.empty()) {
            entry_ptr c = q.front();
            const bool open = (c->state == entry::QUEUED || c->state == entry::READING) && c->next_part < c->n_parts;
            if (!open) {
                q.pop_front();
                continue;
            }
            part = c->next_part++;
            if (c->next_part == c->n_parts) q.pop_front();
            c->state = entry::READING;
            return c;
        }
        return nullptr;
    }

    void reader() {
        for (;;) {
            entry_ptr e;
            int part = 0;
            bool direct_now, is_prefetch = false, is_warm = false;
            int vs = -1;  // the VRAM slot the entry is copied from, if any
            {
                std::unique_lock<std::mutex> lk(mu);
                io_cv.wait(lk, [&] {
                    return stop || !q_demand.empty() || (!q_prefetch.empty() && prefetch_reading < prefetch_cap()) ||
                           (!q_warm.empty() && warm_reading < warm_cap());
                });
                if (stop) return;
                e = take_part(q_demand, part);
                if (!e && prefetch_reading < prefetch_cap() && (e = take_part(q_prefetch, part))) {
                    is_prefetch = true;
                    prefetch_reading++;
                }
                if (!e && warm_reading < warm_cap() && (e = take_part(q_warm, part))) {
                    is_warm = true;
                    warm_reading++;
                }
                if (!e) continue;
                direct_now = direct;
                vs = e->vslot;
            }
            const auto t0 = clock_type::now();
            std::string note;
            const bool was_direct = direct_now;
            const std::vector<read_part> parts = parts_of(*e);
            std::string err;
            bool from_vram = false;
            if (vs >= 0) {
                // One download from the VRAM tier; should it fail, the tier goes off and the
                // whole entry is read from storage here, its parts in turn.
                std::string verr;
                try {
                    params.vram->download(static_cast<uint64_t>(vs) * vslot_bytes, e->buf, e->bytes);
                    from_vram = true;
                } catch (const std::exception & x) {
                    verr = x.what();
                }
                if (!from_vram) {
                    {
                        std::lock_guard<std::mutex> lk(mu);
                        vram_off(verr);
                        vrelease(*e);
                    }
                    for (const read_part & p : parts)
                        if (!(err = read_part_do(*e, p, direct_now, note)).empty()) break;
                }
            } else {
                err = read_part_do(*e, parts[static_cast<size_t>(part)], direct_now, note);
            }
            const double secs = seconds_since(t0);
            bool finished = false;
            int up = -1;  // a VRAM slot this reader copies the entry into
            {
                std::lock_guard<std::mutex> lk(mu);
                if (was_direct && !direct_now && direct) {
                    direct = false;
                    io_note = note;
                }
                if (is_prefetch) prefetch_reading--;
                if (is_warm) warm_reading--;
                expert_layer_stats & ls = st.layers[e->layer];
                if (from_vram) {
                    ls.vram_seconds += secs;
                    vslot_t & v = vslots[vs];
                    if (v.filled) vlru.splice(vlru.end(), vlru, v.lru);
                    vrelease(*e);
                } else {
                    ls.read_seconds += secs;
                }
                e->parts_done++;
                if (!err.empty()) {
                    // Parts not handed out yet are not read: the entry fails as a whole. Parts are
                    // handed out in file order and read in parallel, so the one reported is the
                    // lowest failed part, whichever finished first: the same error on every run.
                    if (e->part_error_idx < 0 || part < e->part_error_idx) {
                        e->part_error = err;
                        e->part_error_idx = part;
                    }
                    e->parts_done += e->n_parts - e->next_part;
                    e->next_part = e->n_parts;
                }
                if (e->parts_done == e->n_parts) {
                    finished = true;
                    if (e->part_error.empty()) {
                        set_views(*e);
                        e->state = entry::READY;
                        if (from_vram) {
                            ls.vram_reads++;
                            ls.vram_bytes += e->bytes;
                        } else {
                            ls.reads++;
                            ls.bytes_read += e->bytes;
                            if ((up = vreserve(key_of(e->layer, e->expert))) >= 0) e->pins++;
                        }
                        if (is_warm || e->warm) {
                            st.warm_reads++;
                            st.warm_bytes += e->bytes;
                        }
                    } else {
                        e->state = entry::FAILED;
                        e->error = e->part_error;
                        st.read_errors++;
                        if (e->speculative) ls.prefetch_wasted++;
                        unlink(e);
                        free_buffer(*e);
                    }
                }
            }
            if (finished) ready_cv.notify_all();
            if (is_prefetch || is_warm || e->n_parts > 1) io_cv.notify_one();
            if (up >= 0) upload(e, up);
        }
    }

    // Copies a READY entry (pinned for it) into its reserved VRAM slot.
    void upload(const entry_ptr & e, int s) {
        const auto t0 = clock_type::now();
        std::string err;
        try {
            params.vram->upload(static_cast<uint64_t>(s) * vslot_bytes, e->buf, e->bytes);
        } catch (const std::exception & x) {
            err = x.what();
        }
        const double secs = seconds_since(t0);
        {
            std::lock_guard<std::mutex> lk(mu);
            e->pins--;
            vslot_t & v = vslots[s];
            v.busy--;
            if (err.empty()) {
                v.filled = true;
                v.lru = vlru.insert(vlru.end(), s);
                st.vram_uploads++;
                st.vram_upload_bytes += e->bytes;
                st.vram_upload_seconds += secs;
            } else {
                vmap.erase(v.key);
                vfree.push_back(s);
                vram_off(err);
            }
        }
        ready_cv.notify_all();
    }
};

// ---- requests -----------------------------------------------------------------------------------

struct expert_request::state {
    std::shared_ptr<expert_stream::impl> s;
    int                        layer = 0;
    std::vector<entry_ptr>     held;     // pinned, not handed out yet
    std::vector<entry_ptr>     handed;   // pinned, handed out by next()
    std::vector<int32_t>       pending;  // not cached and no room yet
    const std::atomic<bool> *  cancel = nullptr;
};

expert_request::expert_request(std::unique_ptr<state> s) : s_(std::move(s)) {}
expert_request::expert_request(expert_request && o) noexcept : s_(std::move(o.s_)) {}

expert_request::~expert_request() {
    if (!s_) return;
    expert_stream::impl & m = *s_->s;
    {
        std::lock_guard<std::mutex> lk(m.mu);
        for (auto & e : s_->held) e->pins--;
        for (auto & e : s_->handed) e->pins--;
        m.pending_total -= s_->pending.size();
    }
    m.ready_cv.notify_all();
}

bool expert_request::next(view & out) {
    expert_stream::impl & m = *s_->s;
    std::unique_lock<std::mutex> lk(m.mu);
    bool waited = false;
    clock_type::time_point t0;
    for (;;) {
        if (!s_->pending.empty()) {
            const size_t before = s_->pending.size();
            m.admit(s_->layer, s_->pending, s_->held);
            m.pending_total -= before - s_->pending.size();
        }
        for (size_t i = 0; i < s_->held.size(); i++) {
            entry_ptr e = s_->held[i];
            if (e->state == entry::FAILED) {
                const std::string msg = e->error;
                s_->held.erase(s_->held.begin() + static_cast<std::ptrdiff_t>(i));
                e->pins--;
                if (waited) m.st.layers[s_->layer].stall_seconds += seconds_since(t0);
                throw error(KAIL_E_IO, msg);
            }
        }
        for (size_t i = 0; i < s_->held.size(); i++) {
            entry_ptr e = s_->held[i];
            if (e->state != entry::READY) continue;
            s_->held.erase(s_->held.begin() + static_cast<std::ptrdiff_t>(i));
            s_->handed.push_back(e);
            out.expert = e->expert;
            for (int k = 0; k < 3; k++) out.data[k] = e->data[k];
            if (waited) m.st.layers[s_->layer].stall_seconds += seconds_since(t0);
            return true;
        }
        if (s_->held.empty() && s_->pending.empty()) return false;
        if (s_->cancel && s_->cancel->load(std::memory_order_relaxed)) {
            if (waited) m.st.layers[s_->layer].stall_seconds += seconds_since(t0);
            throw error(KAIL_E_CANCELLED, "forward cancelled");
        }
        if (!waited) {
            waited = true;
            t0 = clock_type::now();
        }
        m.ready_cv.wait_for(lk, std::chrono::milliseconds(20));
    }
}

void expert_request::done(const view & v, double compute_seconds) {
    expert_stream::impl & m = *s_->s;
    {
        std::lock_guard<std::mutex> lk(m.mu);
        for (size_t i = 0; i < s_->handed.size(); i++) {
            if (s_->handed[i]->expert != v.expert) continue;
            s_->handed[i]->pins--;
            s_->handed.erase(s_->handed.begin() + static_cast<std::ptrdiff_t>(i));
            break;
        }
        m.st.layers[s_->layer].compute_seconds += compute_seconds;
    }
    m.ready_cv.notify_all();
}

// ---- the stream ---------------------------------------------------------------------------------

expert_stream::expert_stream(const std::string & path, std::vector<expert_layer_source> layers, const expert_stream_params & params)
    : impl_(std::make_shared<impl>()) {
    impl & m = *impl_;
    m.path = path;
    m.layers = std::move(layers);
    m.params = params;
    m.params.io_threads = std::max(1, std::min(params.io_threads, 64));
    int32_t max_expert = 1;
    for (auto & l : m.layers) max_expert = std::max(max_expert, l.n_expert);
    expert_cache_policy_params pp;
    pp.n_layer = static_cast<int32_t>(std::max<size_t>(1, m.layers.size()));
    pp.n_expert = max_expert;
    m.policy = expert_cache_policy_init(params.policy.empty() ? expert_cache_default_policy() : params.policy, pp);
    if (m.policy->name() == "belady") throw error(KAIL_E_INVALID_ARG, "expert stream: belady needs the future; it is for cache-sim only");
    m.st.layers.resize(m.layers.size());
    m.predicted.resize(m.layers.size());
    m.st.capacity_bytes = m.params.cache_bytes;
    m.packed = !m.params.pack.files.empty();
    if (m.packed) {
        const expert_pack & pk = m.params.pack;
        if (pk.layers.size() != m.layers.size())
            throw error(KAIL_E_INVALID_ARG, "expert pack: " + std::to_string(pk.layers.size()) + " MoE layers, the model has " + std::to_string(m.layers.size()));
        for (size_t l = 0; l < pk.layers.size(); l++) {
            const expert_pack_layer & pl = pk.layers[l];
            const expert_layer_source & src = m.layers[l];
            const std::string at = "expert pack, MoE layer " + std::to_string(l) + ": ";
            if (pl.block_bytes == 0 || pl.block_bytes % A != 0) throw error(KAIL_E_INVALID_ARG, at + "block size " + std::to_string(pl.block_bytes) + " is not a positive multiple of 4096");
            for (int s = 0; s < 3; s++)
                if (pl.slice_offset[s] + src.stride[s] > pl.block_bytes) throw error(KAIL_E_INVALID_ARG, at + std::string(SLICE_NAMES[s]) + " slice passes the block's end");
            if (pl.file.size() != static_cast<size_t>(src.n_expert) || pl.offset.size() != static_cast<size_t>(src.n_expert))
                throw error(KAIL_E_INVALID_ARG, at + "needs " + std::to_string(src.n_expert) + " expert blocks");
            for (int32_t e = 0; e < src.n_expert; e++)
                if (pl.file[e] < 0 || static_cast<size_t>(pl.file[e]) >= pk.files.size() || pl.offset[e] % A != 0)
                    throw error(KAIL_E_INVALID_ARG, at + "expert " + std::to_string(e) + " has a bad file index or an unaligned offset");
        }
        m.files = pk.files;
    } else {
        m.files = {path};
        m.files.insert(m.files.end(), m.params.splits.begin(), m.params.splits.end());
        for (size_t l = 0; l < m.layers.size(); l++)
            for (int s = 0; s < 3; s++)
                if (m.layers[l].file[s] < 0 || static_cast<size_t>(m.layers[l].file[s]) >= m.files.size())
                    throw error(KAIL_E_INVALID_ARG, "expert stream: MoE layer " + std::to_string(l) + "'s " + SLICE_NAMES[s] + " slices name file " +
                                                        std::to_string(m.layers[l].file[s]) + " of " + std::to_string(m.files.size()));
    }
    uint64_t largest = 0;
    for (size_t l = 0; l < m.layers.size(); l++) largest = std::max(largest, m.packed ? m.params.pack.layers[l].block_bytes : expert_entry_bytes_max(m.layers[l]));
    if (largest > m.params.cache_bytes)
        throw error(KAIL_E_BUDGET, "expert stream: a cache of " + std::to_string(m.params.cache_bytes) + " bytes cannot hold one expert (" + std::to_string(largest) + " bytes)");
    if (m.params.vram) {
        const uint64_t n_slots = m.params.vram->bytes() / largest;
        if (n_slots == 0)
            throw error(KAIL_E_BUDGET, "expert stream: a VRAM tier of " + std::to_string(m.params.vram->bytes()) + " bytes on " + m.params.vram->name() +
                                           " cannot hold one expert (" + std::to_string(largest) + " bytes)");
        m.vram_on = true;
        m.vslot_bytes = largest;
        m.vslots.resize(static_cast<size_t>(n_slots));
        for (uint64_t i = n_slots; i-- > 0;) m.vfree.push_back(static_cast<int>(i));
        m.st.vram_device = m.params.vram->name();
        m.st.vram_capacity_bytes = n_slots * largest;
        m.st.vram_slot_bytes = largest;
    }
    m.direct = m.params.direct_io;
    if (!m.params.direct_io) m.io_note = "direct I/O off by request; buffered reads + POSIX_FADV_DONTNEED";
    for (const std::string & f : m.files) {
        const int fb = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
        if (fb < 0) throw error(KAIL_E_IO, "expert stream: cannot open '" + f + "': " + std::strerror(errno));
        m.fd_buffered.push_back(fb);
        int fdd = -1;
        if (m.params.direct_io) {
            fdd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
            if (fdd < 0 && m.direct) {
                m.direct = false;
                m.io_note = std::string("O_DIRECT refused by the filesystem of '") + f + "' (open: " + std::strerror(errno) + "); buffered reads + POSIX_FADV_DONTNEED";
            }
        }
        m.fd_direct.push_back(fdd);
    }
    for (int i = 0; i < m.params.io_threads; i++) m.threads.emplace_back([p = impl_.get()] { p->reader(); });
}

expert_stream::~expert_stream() = default;

int expert_stream::n_layers() const { return static_cast<int>(impl_->layers.size()); }
const std::string & expert_stream::path() const { return impl_->path; }

expert_request expert_stream::request(int layer, const int32_t * experts, int n, const std::atomic<bool> * cancel, const float * probs) {
    impl & m = *impl_;
    if (layer < 0 || layer >= n_layers()) throw error(KAIL_E_INVALID_ARG, "expert stream: layer " + std::to_string(layer) + " out of range");
    std::unique_ptr<expert_request::state> s(new expert_request::state);
    s->s = impl_;
    s->layer = layer;
    s->cancel = cancel;
    std::lock_guard<std::mutex> lk(m.mu);
    expert_layer_stats & ls = m.st.layers[layer];
    std::vector<uint8_t> & pred = m.predicted[layer];
    std::vector<uint8_t> asked(static_cast<size_t>(m.layers[layer].n_expert), 0);
    for (int i = 0; i < n; i++) {
        const int32_t x = experts[i];
        if (x < 0 || x >= m.layers[layer].n_expert) throw error(KAIL_E_INVALID_ARG, "expert stream: expert " + std::to_string(x) + " out of range");
        asked[x] = 1;
    }
    if (!pred.empty()) {
        for (int32_t x = 0; x < m.layers[layer].n_expert; x++) {
            ls.predicted += pred[x];
            ls.predicted_correct += pred[x] & asked[x];
            ls.predicted_actual += asked[x];
        }
        pred.clear();
    }
    // The policy hears of the request first: the distinct experts and their weights.
    if (layer <= m.last_layer) m.step++;
    m.last_layer = layer;
    std::vector<int32_t> distinct;
    std::vector<float> dprobs;
    std::vector<uint8_t> seen(asked.size(), 0);
    for (int i = 0; i < n; i++) {
        if (seen[experts[i]]) continue;
        seen[experts[i]] = 1;
        distinct.push_back(experts[i]);
        dprobs.push_back(probs ? probs[i] : 1.0f);
    }
    m.policy->on_route(layer, m.step, distinct.data(), probs ? dprobs.data() : nullptr, static_cast<int32_t>(distinct.size()));
    for (size_t i = 0; i < distinct.size(); i++) {
        const int32_t x = distinct[i];
        m.policy->on_access(layer, x, dprobs[i], m.step);
        ls.accesses++;
        auto it = m.map.find(key_of(layer, x));
        if (it == m.map.end()) {
            ls.misses++;
            s->pending.push_back(x);
            continue;
        }
        const entry_ptr & e = it->second;
        if (e->state == entry::READY) ls.hits++;
        else {
            ls.misses++;
            ls.misses_inflight++;
        }
        m.pin_existing(e);
        s->held.push_back(e);
    }
    // Predictions for this layer that it did not ask for were wrong: one no reader has begun is
    // cancelled (its bytes would take the disk from the reads this and the next layer need); one
    // being read or read goes first when room is needed.
    std::vector<entry_ptr> wrong;
    for (auto & e : m.spec) {
        if (e->layer != layer || asked[e->expert]) continue;
        if (e->state == entry::QUEUED && e->pins == 0) wrong.push_back(e);
        else e->stale = true;
    }
    for (auto & e : wrong) {
        m.drop(e);
        m.spare.emplace_back(e->bytes, e->buf);
        e->buf = nullptr;
        e->bytes = 0;
    }
    m.admit(layer, s->pending, s->held);
    m.pending_total += s->pending.size();
    return expert_request(std::move(s));
}

void expert_stream::warm(const expert_key * experts, const double * shares, size_t n) {
    impl & m = *impl_;
    std::lock_guard<std::mutex> lk(m.mu);
    std::vector<entry_ptr> queued;
    for (size_t i = 0; i < n; i++) {
        const expert_key k = experts[i];
        if (k.layer < 0 || k.layer >= n_layers() || k.expert < 0 || k.expert >= m.layers[k.layer].n_expert)
            throw error(KAIL_E_INVALID_ARG, "expert stream: warm(): expert " + std::to_string(k.expert) + " of MoE layer " + std::to_string(k.layer) + " out of range");
        if (shares) m.policy->on_history(k.layer, k.expert, shares[i]);
        if (m.map.count(key_of(k.layer, k.expert))) continue;
        const uint64_t bytes = m.entry_bytes(k.layer, k.expert);
        if (m.used + bytes > m.params.cache_bytes) continue;  // never evicts; a smaller entry may still fit
        uint8_t * p = m.map_buffer(bytes);
        if (!p) break;
        m.used += bytes;
        m.st.peak_bytes = std::max(m.st.peak_bytes, m.used);
        entry_ptr e = m.new_entry(k.layer, k.expert, p, bytes);
        e->warm = true;
        m.q_warm.push_back(e);
        queued.push_back(e);
        m.st.warm_queued++;
    }
    // Coldest first into the policy, so recency-only policies keep the hottest longest.
    for (auto it = queued.rbegin(); it != queued.rend(); ++it) {
        m.policy->on_insert((*it)->layer, (*it)->expert, m.step, true);
        (*it)->in_policy = true;
    }
    if (!queued.empty()) m.io_cv.notify_all();
}

void expert_stream::prefetch(int layer, const int32_t * experts, int n) {
    impl & m = *impl_;
    if (layer < 0 || layer >= n_layers()) throw error(KAIL_E_INVALID_ARG, "expert stream: layer " + std::to_string(layer) + " out of range");
    std::lock_guard<std::mutex> lk(m.mu);
    std::vector<uint8_t> & pred = m.predicted[layer];
    pred.assign(static_cast<size_t>(m.layers[layer].n_expert), 0);
    for (int i = 0; i < n; i++)
        if (experts[i] >= 0 && experts[i] < m.layers[layer].n_expert) pred[experts[i]] = 1;
    // Room a waiting demand read needs is not for guesses.
    if (!m.params.prefetch || m.pending_total > 0) {
        if (m.params.prefetch) m.st.prefetch_dropped += static_cast<uint64_t>(n);
        return;
    }
    m.protect_layer = layer;
    bool queued = false;
    for (int i = 0; i < n; i++) {
        const int32_t x = experts[i];
        if (x < 0 || x >= m.layers[layer].n_expert || m.map.count(key_of(layer, x))) continue;
        const uint64_t bytes = m.entry_bytes(layer, x);
        // Predictions may take at most half the cache, so a wrong guess never flushes it.
        uint8_t * buf = m.spec_bytes + bytes <= m.params.cache_bytes / 2 ? m.alloc(bytes, false) : nullptr;
        if (!buf) {
            m.st.prefetch_dropped++;
            continue;
        }
        entry_ptr e = m.new_entry(layer, x, buf, bytes);
        e->speculative = true;
        m.spec.push_back(e);
        m.spec_bytes += bytes;
        m.q_prefetch.push_back(e);
        m.st.layers[layer].prefetch_reads++;
        m.st.layers[layer].prefetch_bytes += bytes;
        queued = true;
    }
    m.protect_layer = -1;
    if (queued) m.io_cv.notify_all();
}

expert_stream_stats expert_stream::stats() const {
    const impl & m = *impl_;
    std::lock_guard<std::mutex> lk(m.mu);
    expert_stream_stats s = m.st;
    s.direct_io = m.direct;
    s.io_note = m.direct ? "" : m.io_note;
    s.io_threads = m.params.io_threads;
    s.policy = m.policy->name();
    s.capacity_bytes = m.params.cache_bytes;
    s.used_bytes = m.used;
    s.entries = m.map.size();
    s.pinned_bytes = 0;
    for (auto & kv : m.map) {
        const entry & e = *kv.second;
        if (e.pins > 0) s.pinned_bytes += e.bytes;
        if (e.state == entry::READY && e.layer >= 0 && static_cast<size_t>(e.layer) < s.layers.size()) s.layers[e.layer].resident.push_back(e.expert);
    }
    s.vram_entries = 0;
    for (const auto & v : m.vslots) {
        if (!v.filled) continue;
        s.vram_entries++;
        const int layer = static_cast<int>(v.key >> 32);
        if (layer >= 0 && static_cast<size_t>(layer) < s.layers.size()) s.layers[layer].vram_resident.push_back(static_cast<int32_t>(v.key & 0xffffffffu));
    }
    s.vram_used_bytes = s.vram_entries * m.vslot_bytes;
    for (auto & l : s.layers) {
        std::sort(l.resident.begin(), l.resident.end());
        std::sort(l.vram_resident.begin(), l.vram_resident.end());
    }
    s.warm_pending = 0;
    for (auto & e : m.q_warm)
        if (e->state == entry::QUEUED || e->state == entry::READING) s.warm_pending++;
    s.warm_pending += static_cast<uint64_t>(m.warm_reading);
    s.files = m.files;
    return s;
}

} // namespace kail
