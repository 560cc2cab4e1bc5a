// Expert stream: slices read by offset (O_DIRECT and buffered) match the file byte for byte, the
// byte budget holds under eviction, requests larger than the cache complete, concurrent requests
// pin and release without deadlock, prefetch is counted, and a file truncated while open fails the
// request with KAIL_E_IO naming the file and offset, after which the stream serves again; the
// VRAM tier's bookkeeping (uploads after reads, RAM misses filled from it, its LRU, a failing
// device turning it off) over device memory stood in for by host memory (test-cuda runs the real
// CUDA memory where a GPU exists).
#include "kail/cuda.h"
#include "kail/expert_stream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kail/status.h"
#include "op_test_util.h"

using namespace kail;

static uint8_t byte_at(uint64_t pos) { return static_cast<uint8_t>((pos * 2654435761u) >> 13); }

// Two "MoE layers" of 8 experts; strides and offsets deliberately not multiples of 4096.
struct test_file {
    std::string path;
    std::vector<expert_layer_source> layers;
    uint64_t size = 0;
};

static test_file make_file(const std::string & dir, const char * name) {
    test_file f;
    f.path = dir + "/" + name;
    const uint64_t strides[3] = {10000, 10000, 7000};
    uint64_t off = 1000;
    for (int l = 0; l < 2; l++) {
        expert_layer_source s;
        s.n_expert = 8;
        for (int k = 0; k < 3; k++) {
            s.offset[k] = off;
            s.stride[k] = strides[k];
            off += strides[k] * 8 + 96;
        }
        f.layers.push_back(s);
    }
    f.size = off + 500;
    std::vector<uint8_t> data(f.size);
    for (uint64_t i = 0; i < f.size; i++) data[i] = byte_at(i);
    FILE * fp = std::fopen(f.path.c_str(), "wb");
    std::fwrite(data.data(), 1, data.size(), fp);
    std::fclose(fp);
    return f;
}

static bool view_ok(const test_file & f, int layer, const expert_request::view & v) {
    for (int k = 0; k < 3; k++) {
        const uint64_t off = f.layers[layer].offset[k] + static_cast<uint64_t>(v.expert) * f.layers[layer].stride[k];
        for (uint64_t i = 0; i < f.layers[layer].stride[k]; i++)
            if (v.data[k][i] != byte_at(off + i)) return false;
    }
    return true;
}

// Requests experts of one layer, checks every byte, returns how many came back.
static int fetch(expert_stream & s, const test_file & f, int layer, std::vector<int32_t> experts) {
    expert_request r = s.request(layer, experts.data(), static_cast<int>(experts.size()));
    expert_request::view v;
    int n = 0;
    while (r.next(v)) {
        CHECK(view_ok(f, layer, v));
        r.done(v, 0.0);
        n++;
    }
    return n;
}

static uint64_t entry_max(const test_file & f) {
    uint64_t m = 0;
    for (auto & l : f.layers) m = std::max(m, expert_entry_bytes_max(l));
    return m;
}

static void test_entry_bytes() {
    expert_layer_source s;
    s.n_expert = 2;
    s.offset[0] = 4096; s.stride[0] = 4096;   // aligned: exactly one block
    s.offset[1] = 100;  s.stride[1] = 4000;   // [100, 4100): crosses a block boundary
    s.offset[2] = 4000; s.stride[2] = 200;    // [4000, 4200): crosses one too
    CHECK(expert_entry_bytes(s, 0) == 4096 + 8192 + 8192);
    // expert 1: [8192, 12288), [4100, 8100) and [4200, 4400) each lie in one block
    CHECK(expert_entry_bytes(s, 1) == 3 * 4096);
    CHECK(expert_entry_bytes_max(s) == 4096 + 8192 + 8192);
}

static void test_reads(const test_file & f, bool direct) {
    expert_stream_params p;
    p.cache_bytes = 64ull << 20;
    p.io_threads = 3;
    p.direct_io = direct;
    expert_stream s(f.path, f.layers, p);
    for (int l = 0; l < 2; l++) CHECK(fetch(s, f, l, {0, 1, 2, 3, 4, 5, 6, 7}) == 8);
    expert_stream_stats st = s.stats();
    if (direct) {
        if (!st.direct_io) std::printf("note: O_DIRECT not available here: %s\n", st.io_note.c_str());
    } else {
        CHECK(!st.direct_io);
        CHECK(!st.io_note.empty());
    }
    uint64_t bytes = 0, acc = 0, hits = 0, misses = 0;
    for (auto & l : st.layers) {
        bytes += l.bytes_read;
        acc += l.accesses;
        hits += l.hits;
        misses += l.misses;
    }
    CHECK(acc == 16 && misses == 16 && hits == 0);
    CHECK(bytes == st.used_bytes);
    CHECK(st.entries == 16);
    CHECK(st.pinned_bytes == 0);
    // Everything is cached now: all hits, nothing more read.
    CHECK(fetch(s, f, 1, {7, 3}) == 2);
    st = s.stats();
    CHECK(st.layers[1].hits == 2);
    CHECK(st.layers[0].bytes_read + st.layers[1].bytes_read == bytes);
    std::printf("reads (%s): %llu bytes in 16 experts, io %s\n", direct ? "direct requested" : "buffered", static_cast<unsigned long long>(bytes),
                st.direct_io ? "O_DIRECT" : st.io_note.c_str());
}

static void test_eviction(const test_file & f) {
    expert_stream_params p;
    p.cache_bytes = 2 * entry_max(f);  // two experts
    p.io_threads = 2;
    p.policy = "lru";
    expert_stream s(f.path, f.layers, p);
    CHECK(s.stats().policy == "lru");
    CHECK(fetch(s, f, 0, {0}) == 1);
    CHECK(fetch(s, f, 0, {1}) == 1);
    CHECK(fetch(s, f, 0, {0}) == 1);  // hit; 1 is now least recent
    CHECK(fetch(s, f, 0, {2}) == 1);  // evicts 1
    CHECK(fetch(s, f, 0, {0}) == 1);  // still cached
    expert_stream_stats st = s.stats();
    CHECK(st.layers[0].hits == 2);
    CHECK(st.layers[0].misses == 3);
    CHECK(st.evictions == 1);
    CHECK(st.used_bytes <= p.cache_bytes);
    CHECK(st.peak_bytes <= p.cache_bytes);
    // A request for more experts than the cache holds completes: reads are admitted as computed
    // experts are released.
    CHECK(fetch(s, f, 1, {0, 1, 2, 3, 4, 5, 6, 7}) == 8);
    st = s.stats();
    CHECK(st.peak_bytes <= p.cache_bytes);
    CHECK(st.entries <= 2);
    CHECK(st.pinned_bytes == 0);
}

static void test_budget_too_small(const test_file & f) {
    expert_stream_params p;
    p.cache_bytes = entry_max(f) - 1;
    bool threw = false;
    try {
        expert_stream s(f.path, f.layers, p);
    } catch (const error & e) {
        threw = e.code() == KAIL_E_BUDGET;
    }
    CHECK(threw);
    p.cache_bytes = 4 * entry_max(f);
    for (const char * bad : {"fifo", "belady", "lfu:half_lif=3"}) {
        p.policy = bad;
        threw = false;
        try {
            expert_stream s(f.path, f.layers, p);
        } catch (const error & e) {
            threw = e.code() == KAIL_E_INVALID_ARG;
        }
        CHECK(threw);
    }
}

// Every online policy keeps the budget and serves every byte right under churn.
static void test_policies(const test_file & f) {
    for (const char * name : {"lru", "lfu", "lrfu", "context", ""}) {
        expert_stream_params p;
        p.cache_bytes = 5 * entry_max(f);
        p.io_threads = 2;
        p.policy = name;
        expert_stream s(f.path, f.layers, p);
        std::mt19937 rng(7);
        for (int step = 0; step < 60; step++) {
            for (int layer = 0; layer < 2; layer++) {
                std::vector<int32_t> want;
                while (want.size() < 3) {
                    const int32_t x = static_cast<int32_t>(rng() % 8);
                    if (std::find(want.begin(), want.end(), x) == want.end()) want.push_back(x);
                }
                CHECK(fetch(s, f, layer, want) == 3);
            }
        }
        expert_stream_stats st = s.stats();
        CHECK(st.peak_bytes <= p.cache_bytes);
        CHECK(st.evictions > 0);
        CHECK(st.layers[0].hits + st.layers[0].misses == st.layers[0].accesses);
        CHECK(!st.policy.empty());
        std::printf("policy %-8s hits %llu of %llu\n", st.policy.c_str(), static_cast<unsigned long long>(st.layers[0].hits + st.layers[1].hits),
                    static_cast<unsigned long long>(st.layers[0].accesses + st.layers[1].accesses));
    }
}

static void test_concurrent(const test_file & f) {
    expert_stream_params p;
    p.cache_bytes = 4 * entry_max(f);
    p.io_threads = 4;
    expert_stream s(f.path, f.layers, p);
    std::atomic<int> bad{0}, served{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++) {
        ts.emplace_back([&, t] {
            std::mt19937 rng(1234 + t);
            for (int it = 0; it < 150; it++) {
                const int layer = static_cast<int>(rng() % 2);
                std::vector<int32_t> want;
                const int n = 1 + static_cast<int>(rng() % 3);
                while (static_cast<int>(want.size()) < n) {
                    int32_t x = static_cast<int32_t>(rng() % 8);
                    if (std::find(want.begin(), want.end(), x) == want.end()) want.push_back(x);
                }
                expert_request r = s.request(layer, want.data(), n);
                expert_request::view v;
                int got = 0;
                while (r.next(v)) {
                    if (!view_ok(f, layer, v)) bad++;
                    if (rng() % 4 == 0) std::this_thread::yield();
                    r.done(v, 0.0);
                    got++;
                }
                if (got != n) bad++;
                served += got;
                if (it % 10 == 0) s.prefetch(1 - layer, want.data(), n);
            }
        });
    }
    for (auto & th : ts) th.join();
    expert_stream_stats st = s.stats();
    CHECK(bad == 0);
    CHECK(st.peak_bytes <= p.cache_bytes);
    CHECK(st.pinned_bytes == 0);
    uint64_t acc = 0, hm = 0;
    for (auto & l : st.layers) {
        acc += l.accesses;
        hm += l.hits + l.misses;
    }
    CHECK(acc == hm);
    CHECK(acc == static_cast<uint64_t>(served.load()));
    std::printf("concurrent: %d experts served to 4 threads, %llu evictions, peak %llu of %llu bytes\n", served.load(),
                static_cast<unsigned long long>(st.evictions), static_cast<unsigned long long>(st.peak_bytes), static_cast<unsigned long long>(p.cache_bytes));
}

static void test_prefetch(const test_file & f) {
    expert_stream_params p;
    p.cache_bytes = 5 * entry_max(f);  // 5 to 6 experts (sizes differ with alignment)
    p.io_threads = 2;
    expert_stream s(f.path, f.layers, p);
    const int32_t guess[2] = {2, 3};
    s.prefetch(1, guess, 2);
    for (int i = 0; i < 500 && s.stats().layers[1].reads < 2; i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CHECK(fetch(s, f, 1, {2, 5}) == 2);
    expert_stream_stats st = s.stats();
    const expert_layer_stats & l = st.layers[1];
    CHECK(l.prefetch_reads == 2);
    CHECK(l.prefetch_used == 1);
    CHECK(l.hits == 1 && l.misses == 1);
    CHECK(l.predicted == 2 && l.predicted_correct == 1 && l.predicted_actual == 2);
    // The wrong guess (3) is the first to go when room is needed.
    for (int32_t x = 0; x < 8 && s.stats().evictions == 0; x++) fetch(s, f, 0, {x});
    st = s.stats();
    CHECK(st.evictions == 1);
    CHECK(st.layers[1].prefetch_wasted == 1);
    CHECK(fetch(s, f, 1, {2, 5}) == 2);
    CHECK(s.stats().layers[1].hits == 3);  // 2 and 5 survived
}

static void test_truncation(const test_file & f) {
    const std::string copy = f.path + ".trunc";
    {
        std::vector<uint8_t> data(f.size);
        for (uint64_t i = 0; i < f.size; i++) data[i] = byte_at(i);
        FILE * fp = std::fopen(copy.c_str(), "wb");
        std::fwrite(data.data(), 1, data.size(), fp);
        std::fclose(fp);
    }
    test_file g = f;
    g.path = copy;
    expert_stream_params p;
    p.cache_bytes = 2 * entry_max(g);
    expert_stream s(copy, g.layers, p);
    CHECK(fetch(s, g, 0, {0}) == 1);
    // Cut the file in the middle of layer 1's gate experts.
    const uint64_t cut = g.layers[1].offset[0] + 3 * g.layers[1].stride[0];
    CHECK(truncate(copy.c_str(), static_cast<off_t>(cut)) == 0);
    bool io = false;
    std::string msg;
    try {
        fetch(s, g, 1, {6});
    } catch (const error & e) {
        io = e.code() == KAIL_E_IO;
        msg = e.what();
    }
    CHECK(io);
    CHECK(msg.find(copy) != std::string::npos);
    CHECK(msg.find("offset " + std::to_string(g.layers[1].offset[0] + 6 * g.layers[1].stride[0])) != std::string::npos);
    CHECK(msg.find("ends at " + std::to_string(cut)) != std::string::npos);
    std::printf("truncated: %s\n", msg.c_str());
    // Experts before the cut still stream; after the file is restored, the rest does too.
    CHECK(fetch(s, g, 0, {1, 2}) == 2);
    {
        std::vector<uint8_t> data(f.size);
        for (uint64_t i = 0; i < f.size; i++) data[i] = byte_at(i);
        int fd = ::open(copy.c_str(), O_WRONLY);
        CHECK(pwrite(fd, data.data() + cut, f.size - cut, static_cast<off_t>(cut)) == static_cast<ssize_t>(f.size - cut));
        ::close(fd);
    }
    CHECK(fetch(s, g, 1, {6, 7}) == 2);
    expert_stream_stats st = s.stats();
    CHECK(st.read_errors == 1);
    CHECK(st.pinned_bytes == 0);
    CHECK(st.used_bytes <= p.cache_bytes);
    // A file deleted while open keeps serving from its open descriptor.
    CHECK(unlink(copy.c_str()) == 0);
    CHECK(fetch(s, g, 1, {1, 2, 3}) == 3);
}

// Warming: only free room is filled (nothing evicted), reads finish in the background, warmed
// experts are hits with the right bytes, and a later demand read that needs room still succeeds.
static void test_warm(const test_file & f) {
    expert_stream_params p;
    p.cache_bytes = entry_max(f) * 5;
    p.io_threads = 2;
    p.prefetch = false;
    p.policy = "lfu";
    expert_stream s(f.path, f.layers, p);
    std::vector<expert_key> keys;
    std::vector<double> shares;
    for (int e = 0; e < 8; e++) {
        keys.push_back({0, e});
        shares.push_back(1.0 - e / 8.0);
    }
    s.warm(keys.data(), shares.data(), keys.size());
    expert_stream_stats st = s.stats();
    CHECK(st.warm_queued == 5);  // 5 fit, never evicting
    CHECK(st.used_bytes <= p.cache_bytes);
    for (int i = 0; i < 500 && s.stats().warm_pending > 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    st = s.stats();
    CHECK(st.warm_pending == 0);
    CHECK(st.warm_reads == 5);
    CHECK(st.evictions == 0);
    CHECK(fetch(s, f, 0, {0, 1, 2}) == 3);
    st = s.stats();
    CHECK(st.layers[0].hits == 3);
    CHECK(st.warm_used == 3);
    // Demand for experts not warmed evicts by policy: the seeded hot ones (0, 1, 2 just used) stay.
    CHECK(fetch(s, f, 1, {6, 7}) == 2);
    CHECK(fetch(s, f, 0, {0, 1}) == 2);
    CHECK(s.stats().layers[0].hits == 5);
    // Out-of-range keys are refused.
    expert_key bad{0, 99};
    bool threw = false;
    try {
        s.warm(&bad, nullptr, 1);
    } catch (const error & e) {
        threw = e.code() == KAIL_E_INVALID_ARG;
    }
    CHECK(threw);
}

// An expert pack: blocks of the same bytes in two striped files give views equal to the GGUF's.
static void test_pack(const test_file & f, const std::string & dir) {
    expert_pack pk;
    pk.files = {dir + "/stripe0.kxp", dir + "/stripe1.kxp"};
    std::vector<std::vector<uint8_t>> data(2);
    for (size_t l = 0; l < f.layers.size(); l++) {
        const expert_layer_source & src = f.layers[l];
        expert_pack_layer pl;
        pl.slice_offset[0] = 0;
        pl.slice_offset[1] = (src.stride[0] + 63) / 64 * 64;
        pl.slice_offset[2] = (pl.slice_offset[1] + src.stride[1] + 63) / 64 * 64;
        pl.block_bytes = (pl.slice_offset[2] + src.stride[2] + 4095) / 4096 * 4096;
        for (int32_t e = 0; e < src.n_expert; e++) {
            const int fi = static_cast<int>((l * src.n_expert + e) % 2);
            pl.file.push_back(fi);
            pl.offset.push_back(data[fi].size());
            std::vector<uint8_t> block(pl.block_bytes, 0);
            for (int k = 0; k < 3; k++)
                for (uint64_t i = 0; i < src.stride[k]; i++) block[pl.slice_offset[k] + i] = byte_at(src.offset[k] + e * src.stride[k] + i);
            data[fi].insert(data[fi].end(), block.begin(), block.end());
        }
        pk.layers.push_back(pl);
    }
    for (int i = 0; i < 2; i++) {
        FILE * fp = std::fopen(pk.files[i].c_str(), "wb");
        std::fwrite(data[i].data(), 1, data[i].size(), fp);
        std::fclose(fp);
    }
    expert_stream_params p;
    p.cache_bytes = pk.layers[0].block_bytes * 3;
    p.io_threads = 2;
    p.pack = pk;
    {
        expert_stream s(f.path, f.layers, p);
        CHECK(fetch(s, f, 0, {0, 1, 2, 3, 4, 5, 6, 7}) == 8);
        CHECK(fetch(s, f, 1, {7, 3}) == 2);
        const expert_stream_stats st = s.stats();
        CHECK(st.files == pk.files);
        CHECK(st.layers[0].bytes_read == st.layers[0].reads * pk.layers[0].block_bytes);  // one read per expert
        CHECK(st.read_errors == 0);
    }
    {
        expert_stream_params cut = p;
        cut.read_bytes = 8192;
        cut.io_threads = 3;
        expert_stream s(f.path, f.layers, cut);
        CHECK(fetch(s, f, 0, {0, 1, 2, 3}) == 4);
        CHECK(fetch(s, f, 1, {5, 6}) == 2);
    }
    // A table pointing past the end fails the read naming the pack file; bad tables are refused.
    expert_stream_params q = p;
    q.pack.layers[0].offset[5] = 1 << 30;
    {
        expert_stream s(f.path, f.layers, q);
        bool named = false;
        try {
            fetch(s, f, 0, {5});
        } catch (const error & e) {
            named = e.code() == KAIL_E_IO && std::string(e.what()).find("expert pack '" + pk.files[1]) != std::string::npos;
        }
        CHECK(named);
    }
    q = p;
    q.pack.layers[1].offset[2] = 100;  // unaligned
    bool refused = false;
    try {
        expert_stream s(f.path, f.layers, q);
    } catch (const error & e) {
        refused = e.code() == KAIL_E_INVALID_ARG;
    }
    CHECK(refused);
    for (auto & fn : pk.files) std::remove(fn.c_str());
}

// Device memory for the VRAM tier's bookkeeping tests on machines without a GPU: host bytes,
// copies counted, and a switch that makes copies fail as a broken device would.
class host_device_memory final : public expert_device_memory {
  public:
    explicit host_device_memory(uint64_t n) : mem_(n) {}
    std::string name() const override { return "test-host"; }
    uint64_t bytes() const override { return mem_.size(); }
    void upload(uint64_t off, const uint8_t * src, uint64_t n) override {
        if (fail.load()) throw error(KAIL_E_IO, "test-host: upload refused");
        std::memcpy(mem_.data() + off, src, n);
        uploads++;
    }
    void download(uint64_t off, uint8_t * dst, uint64_t n) override {
        if (fail.load()) throw error(KAIL_E_IO, "test-host: download refused");
        std::memcpy(dst, mem_.data() + off, n);
        downloads++;
    }
    // Page-locking, as a GPU offers it: every buffer pinned must be unpinned before it is freed.
    bool pin_host(void * p, uint64_t) override {
        std::lock_guard<std::mutex> lk(pin_mu_);
        pins++;
        return pinned_.insert(p).second;
    }
    void unpin_host(void * p) override {
        std::lock_guard<std::mutex> lk(pin_mu_);
        if (pinned_.erase(p) == 0) unknown_unpins++;
    }
    size_t pinned_now() {
        std::lock_guard<std::mutex> lk(pin_mu_);
        return pinned_.size();
    }
    std::atomic<bool> fail{false};
    std::atomic<int>  uploads{0}, downloads{0}, pins{0}, unknown_unpins{0};

  private:
    std::vector<uint8_t> mem_;
    std::mutex pin_mu_;
    std::set<void *> pinned_;
};

// Uploads run after the read that fetched the entry; wait for n of them.
static bool wait_uploads(expert_stream & s, uint64_t n) {
    for (int i = 0; i < 2000; i++) {
        if (s.stats().vram_uploads >= n) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

// Prefetch reads and the uploads after reads finish on the reader threads after the fetches that
// asked for them have returned: wait until nothing is pinned and no read or upload has moved for
// 20 ms (a prefetch read that lands pins its entry again while it is uploaded).
static bool wait_quiet(expert_stream & s) {
    uint64_t last = ~uint64_t(0);
    int still = 0;
    for (int i = 0; i < 5000 && still < 20; i++) {
        const expert_stream_stats st = s.stats();
        uint64_t moved = st.vram_uploads + st.evictions;
        for (const auto & l : st.layers) moved += l.reads + l.vram_reads;
        still = st.pinned_bytes == 0 && moved == last ? still + 1 : 0;
        last = moved;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return still >= 20;
}

static void test_vram_threads(const test_file & f, std::shared_ptr<expert_device_memory> dev);

static void test_vram(const test_file & f) {
    const uint64_t em = entry_max(f);
    {
        // RAM holds 2 experts, VRAM 4: reads go up, RAM misses come back down, LRU in VRAM.
        auto dev = std::make_shared<host_device_memory>(4 * em + 100);
        expert_stream_params p;
        p.cache_bytes = 2 * em;
        p.io_threads = 2;
        p.policy = "lru";
        p.vram = dev;
        expert_stream s(f.path, f.layers, p);
        expert_stream_stats st = s.stats();
        CHECK(st.vram_device == "test-host");
        CHECK(st.vram_capacity_bytes == 4 * em);
        CHECK(st.vram_slot_bytes == em);
        // Each upload done before the next fetch: an entry pinned for its upload is not evicted,
        // which would change which two stay in RAM.
        for (int32_t x : {0, 1, 2, 3}) {
            CHECK(fetch(s, f, 0, {x}) == 1);
            CHECK(wait_uploads(s, static_cast<uint64_t>(x) + 1));
        }
        st = s.stats();
        CHECK(st.layers[0].reads == 4 && st.layers[0].vram_reads == 0);
        CHECK(st.vram_entries == 4 && st.vram_used_bytes == 4 * em);
        CHECK(st.layers[0].vram_resident == std::vector<int32_t>({0, 1, 2, 3}));
        CHECK(st.layers[0].resident == std::vector<int32_t>({2, 3}));
        // 0 and 1 left RAM: filled from VRAM, byte-exact (fetch checks), no storage read.
        CHECK(fetch(s, f, 0, {0}) == 1);
        CHECK(fetch(s, f, 0, {1, 0}) == 2);
        st = s.stats();
        CHECK(st.layers[0].reads == 4);
        CHECK(st.layers[0].vram_reads == 2);
        CHECK(st.layers[0].vram_bytes == expert_entry_bytes(f.layers[0], 0) + expert_entry_bytes(f.layers[0], 1));
        CHECK(st.layers[0].misses == 6 && st.layers[0].hits == 1);
        CHECK(dev->downloads.load() == 2);
        CHECK(st.vram_uploads == 4);  // copies already there are not uploaded again
        // VRAM's LRU order is now 2, 3, 0, 1: two new experts take 2's and 3's slots.
        CHECK(fetch(s, f, 1, {5}) == 1);
        CHECK(fetch(s, f, 1, {6}) == 1);
        CHECK(wait_uploads(s, 6));
        st = s.stats();
        CHECK(st.vram_evictions == 2);
        CHECK(st.layers[0].vram_resident == std::vector<int32_t>({0, 1}));
        CHECK(st.layers[1].vram_resident == std::vector<int32_t>({5, 6}));
        CHECK(st.peak_bytes <= p.cache_bytes);
        CHECK(st.vram_error.empty());
        // A device that fails: the tier turns off, the request still gets the right bytes from storage.
        dev->fail = true;
        CHECK(fetch(s, f, 0, {0}) == 1);
        st = s.stats();
        CHECK(st.vram_error.find("download refused") != std::string::npos);
        CHECK(st.layers[0].reads == 5);
        CHECK(fetch(s, f, 0, {2, 3}) == 2);  // no more copies either way
        st = s.stats();
        CHECK(st.vram_uploads == 6);
        CHECK(st.read_errors == 0);
    }
    {
        // A tier smaller than one expert is refused with numbers.
        expert_stream_params p;
        p.cache_bytes = 2 * em;
        p.vram = std::make_shared<host_device_memory>(em - 1);
        bool threw = false;
        try {
            expert_stream s(f.path, f.layers, p);
        } catch (const error & e) {
            threw = e.code() == KAIL_E_BUDGET && std::string(e.what()).find("VRAM tier of " + std::to_string(em - 1) + " bytes") != std::string::npos;
        }
        CHECK(threw);
    }
    test_vram_threads(f, std::make_shared<host_device_memory>(5 * em));
    // The same on a real GPU's memory where there is one (CUDA copies from several reader threads).
    if (cuda_device_count() > 0) test_vram_threads(f, cuda_expert_memory(0, 5 * em));
}

// Many threads, small RAM and VRAM (5 experts of device memory in `dev`), prefetch on: every byte
// right, the budget held, no hang.
static void test_vram_threads(const test_file & f, std::shared_ptr<expert_device_memory> dev) {
    const uint64_t em = entry_max(f);
    {
        expert_stream_params p;
        p.cache_bytes = 3 * em;
        p.io_threads = 3;
        p.vram = dev;
        expert_stream s(f.path, f.layers, p);
        std::vector<std::thread> ts;
        std::atomic<int> got{0};
        for (int t = 0; t < 3; t++)
            ts.emplace_back([&, t] {
                std::mt19937 rng(static_cast<unsigned>(t + 7));
                for (int i = 0; i < 60; i++) {
                    const int layer = static_cast<int>(rng() % 2);
                    const int32_t a = static_cast<int32_t>(rng() % 8), b = static_cast<int32_t>((a + 1 + rng() % 7) % 8);
                    const int32_t c = static_cast<int32_t>(rng() % 8);
                    s.prefetch(1 - layer, &c, 1);
                    got += fetch(s, f, layer, {a, b});
                }
            });
        for (auto & t : ts) t.join();
        CHECK(got.load() == 3 * 60 * 2);
        CHECK(wait_quiet(s));
        const expert_stream_stats st = s.stats();
        uint64_t vr = 0;
        for (auto & l : st.layers) vr += l.vram_reads;
        CHECK(vr > 0);
        CHECK(st.peak_bytes <= p.cache_bytes);
        CHECK(st.vram_entries <= 5);
        CHECK(st.pinned_bytes == 0);
        std::printf("vram tier on %s: %llu RAM fills from VRAM, %llu uploads, %llu VRAM evictions under 3 threads\n", st.vram_device.c_str(), static_cast<unsigned long long>(vr),
                    static_cast<unsigned long long>(st.vram_uploads), static_cast<unsigned long long>(st.vram_evictions));
    }
    // The stream offered its buffers for pinning and took every one back before freeing it.
    if (auto * h = dynamic_cast<host_device_memory *>(dev.get())) {
        CHECK(h->pins.load() > 0);
        CHECK(h->pinned_now() == 0);
        CHECK(h->unknown_unpins.load() == 0);
    }
}

// Reads cut into 4 KiB parts taken by several readers give the same bytes, GGUF and buffered alike.
static void test_parts(const test_file & f) {
    for (bool direct : {true, false}) {
        expert_stream_params p;
        p.cache_bytes = entry_max(f) * 4;
        p.io_threads = 4;
        p.direct_io = direct;
        p.read_bytes = 4096 + 100;  // rounded down to 4096
        expert_stream s(f.path, f.layers, p);
        CHECK(fetch(s, f, 0, {0, 1, 2, 3, 4, 5, 6, 7}) == 8);
        CHECK(fetch(s, f, 1, {7, 6, 5}) == 3);
        const expert_stream_stats st = s.stats();
        CHECK(st.layers[0].reads == 8);  // entries, not parts
        CHECK(st.read_errors == 0);
    }
}

// Guesses a layer then does not ask for are cancelled while no reader has begun them (they would
// take the disk from the reads that are needed); their buffers serve the next entries, the byte
// budget holds, and every byte read is right. Which guesses a reader has begun is a race, so the
// rounds go on until one cancels (nearly always the first: one reader, seven guesses queued).
static void test_prefetch_cancel(const test_file & f) {
    uint64_t cancelled = 0;
    int round = 0;
    for (; round < 50 && cancelled == 0; round++) {
        expert_stream_params p;
        p.cache_bytes = 16 * entry_max(f);
        p.io_threads = 1;  // one prefetch read at a time: the other guesses wait in the queue
        expert_stream s(f.path, f.layers, p);
        const int32_t guess[7] = {0, 1, 2, 3, 4, 5, 6};
        s.prefetch(1, guess, 7);
        CHECK(fetch(s, f, 1, {7}) == 1);
        CHECK(wait_quiet(s));
        expert_stream_stats st = s.stats();
        cancelled = st.prefetch_cancelled;
        CHECK(cancelled <= 7);
        CHECK(st.layers[1].prefetch_reads == 7);
        CHECK(st.layers[1].prefetch_wasted == cancelled);
        CHECK(st.layers[1].reads == 1 + 7 - cancelled);  // the asked expert, and the guesses begun
        // The cancelled guesses, asked for now, are read into the buffers they left.
        CHECK(fetch(s, f, 1, {0, 1, 2, 3, 4, 5, 6}) == 7);
        CHECK(fetch(s, f, 0, {0, 1, 2, 3, 4, 5, 6, 7}) == 8);
        st = s.stats();
        CHECK(st.layers[1].reads == 8);
        CHECK(st.peak_bytes <= p.cache_bytes);
        CHECK(st.used_bytes <= p.cache_bytes);
        CHECK(st.read_errors == 0);
    }
    CHECK(cancelled > 0);
    std::printf("prefetch cancel: %llu of 7 wrong guesses cancelled unread (round %d)\n", static_cast<unsigned long long>(cancelled), round);
}

int main() {
    char tmpl[] = "/tmp/kail-test-stream-XXXXXX";
    const char * env_dir = std::getenv("KAIL_TEST_TMPDIR");
    std::string dir;
    if (env_dir) dir = env_dir;
    else {
        char * d = mkdtemp(tmpl);
        if (!d) return 1;
        dir = d;
    }
    const test_file f = make_file(dir, "experts.bin");
    test_entry_bytes();
    test_reads(f, true);
    test_reads(f, false);
    test_eviction(f);
    test_budget_too_small(f);
    test_policies(f);
    test_concurrent(f);
    test_prefetch(f);
    test_prefetch_cancel(f);
    test_truncation(f);
    test_warm(f);
    test_pack(f, dir);
    test_parts(f);
    test_vram(f);
    std::remove(f.path.c_str());
    if (!env_dir) rmdir(dir.c_str());
    if (g_failures) {
        std::fprintf(stderr, "test-expert-stream: %d failure(s)\n", g_failures);
        return 1;
    }
    std::printf("test-expert-stream: ok\n");
    return 0;
}
