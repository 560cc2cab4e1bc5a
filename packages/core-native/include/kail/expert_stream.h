// Expert streaming: routed experts stay on storage and are read on demand, by file offset, into a
// byte-budgeted RAM cache.
//
// Each expert's gate/up/down matrices are read straight from the GGUF file (no conversion) by a pool
// of I/O threads, with O_DIRECT into 4 KiB-aligned buffers so the page cache does not silently hold
// the model; where the filesystem refuses O_DIRECT the stream falls back to buffered reads followed
// by POSIX_FADV_DONTNEED, and says so in its stats. Demand reads go before prefetch reads.
//
// Every byte of every read buffer is counted against cache_bytes; an entry is pinned while a
// forward pass uses it and only unpinned entries are evicted. Expert bytes are never touched
// through a mapping of the file, so a file that shrinks while open gives a KAIL_E_IO naming the
// file and offset, never a SIGBUS.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kail/expert_cache.h"

namespace kail {

// Alignment of O_DIRECT reads (offset, length and buffer address).
constexpr uint64_t EXPERT_READ_ALIGN = 4096;

// The slices of one MoE layer's expert tensors in the file: expert e's matrix s (0 gate, 1 up,
// 2 down) is stride[s] bytes at offset[s] + e * stride[s] of split file[s] (0: the GGUF itself;
// i: expert_stream_params::splits[i - 1], for a model in several files).
struct expert_layer_source {
    uint64_t offset[3] = {0, 0, 0};
    uint64_t stride[3] = {0, 0, 0};
    int32_t  file[3] = {0, 0, 0};
    int32_t  n_expert = 0;
};

// Bytes one cached expert takes: its three slices rounded out to EXPERT_READ_ALIGN.
uint64_t expert_entry_bytes(const expert_layer_source & src, int32_t expert);
// The largest expert_entry_bytes() over the layer's experts.
uint64_t expert_entry_bytes_max(const expert_layer_source & src);

// An expert-major copy of a model's routed experts, written by `kail repack`: each expert's gate,
// up and down slices lie together in one EXPERT_READ_ALIGN-aligned block, so one read fetches an
// expert, and blocks may be striped over several files (one per storage device) that are read at
// once. Slices keep the GGUF's bytes exactly; only their place changes.
struct expert_pack_layer {
    uint64_t              slice_offset[3] = {0, 0, 0};  // gate, up, down within the block
    uint64_t              block_bytes = 0;              // a multiple of EXPERT_READ_ALIGN
    std::vector<int32_t>  file;                         // per expert: index into expert_pack::files
    std::vector<uint64_t> offset;                       // per expert: the block's offset (aligned)
};
struct expert_pack {
    std::vector<std::string>       files;   // empty: experts are read from the GGUF itself
    std::vector<expert_pack_layer> layers;  // one per MoE layer, as the expert_layer_source list
};

// Device memory the second tier keeps expert copies in: `bytes()` bytes, copied in and out at
// byte offsets. upload/download throw KAIL_E_IO naming the device when a copy fails.
class expert_device_memory {
  public:
    virtual ~expert_device_memory() = default;
    virtual std::string name() const = 0;  // e.g. "cuda:0 (NVIDIA H200)"
    virtual uint64_t bytes() const = 0;
    virtual void upload(uint64_t offset, const uint8_t * src, uint64_t n) = 0;
    virtual void download(uint64_t offset, uint8_t * dst, uint64_t n) = 0;
    // The stream's RAM buffers, offered when allocated (and taken back before they are freed): a
    // device may page-lock them so its copies run at the bus's speed. False where it does not;
    // copies to and from any host memory still work.
    virtual bool pin_host(void * p, uint64_t n) { (void)p; (void)n; return false; }
    virtual void unpin_host(void * p) { (void)p; }
};

// `bytes` of memory on CUDA device `device`, allocated at once. Throws KAIL_E_UNSUPPORTED when this
// build has no CUDA backend or there is no such device, KAIL_E_BUDGET when the device refuses the
// allocation (with its free and total memory).
std::shared_ptr<expert_device_memory> cuda_expert_memory(int device, uint64_t bytes);

struct expert_stream_params {
    uint64_t cache_bytes = 0;   // budget for cached experts, read buffers included
    int      io_threads = 4;    // reader threads: reads in flight at once (the queue depth)
    bool     direct_io = true;  // false: buffered reads + POSIX_FADV_DONTNEED
    bool     prefetch = true;   // false: prefetch() does nothing
    // Eviction policy: a name of include/kail/expert_cache.h ("lru", "lfu", "lrfu", "context",
    // with options as "lfu:half_life=16"); empty = expert_cache_default_policy(). "belady" is
    // refused (it needs the future).
    std::string policy;
    // Where experts are read from: the GGUF (default) or an expert pack of the same model.
    expert_pack pack;
    // A GGUF in several files: the split files after the first (gguf_file::split_path(1..)).
    std::vector<std::string> splits;
    // Largest single read (rounded down to a multiple of 4096): an entry's reads (one per slice in
    // the GGUF, one per pack block) are cut into parts of at most this size, which idle readers
    // take in parallel; 0 = uncut. `kail profile` picks the smallest block size that reaches the
    // device's bandwidth.
    uint64_t read_bytes = 0;
    // The VRAM tier (see the top of this file); null = none. Slots hold the largest entry, so
    // the tier holds bytes() / expert_entry_bytes_max() experts at most; it must hold one.
    std::shared_ptr<expert_device_memory> vram;
};

// Per MoE layer. accesses counts distinct experts per request (one forward pass asks each layer
// for each expert its tokens routed to once); hits + misses = accesses.
struct expert_layer_stats {
    uint64_t accesses = 0;
    uint64_t hits = 0;             // cached and ready when asked for
    uint64_t misses = 0;           // not ready: a read was needed or was still in flight
    uint64_t misses_inflight = 0;  // misses whose read (a prefetch) had already been issued
    uint64_t reads = 0;            // reads completed for this layer (demand and prefetch)
    uint64_t bytes_read = 0;
    double   read_seconds = 0;     // time the I/O threads spent reading for this layer
    double   compute_seconds = 0;  // time the forward pass spent computing this layer's experts
    double   stall_seconds = 0;    // time the forward pass waited with no expert of this layer ready
    uint64_t prefetch_reads = 0;   // reads issued by prefetch()
    uint64_t prefetch_bytes = 0;
    uint64_t prefetch_used = 0;    // prefetched entries later asked for
    uint64_t prefetch_wasted = 0;  // prefetched entries evicted or cancelled before any use
    // Prefetch prediction quality, over requests that had a prediction: precision =
    // predicted_correct / predicted, recall = predicted_correct / predicted_actual.
    uint64_t predicted = 0;
    uint64_t predicted_correct = 0;
    uint64_t predicted_actual = 0;
    // Entries filled from the VRAM tier (a device-to-host copy instead of a storage read: demand,
    // prefetch or warm; not counted in reads/bytes_read/read_seconds), their bytes and copy time.
    uint64_t vram_reads = 0;
    uint64_t vram_bytes = 0;
    double   vram_seconds = 0;
    // Experts of this layer whose bytes are in the RAM cache now (ascending); filled by stats().
    std::vector<int32_t> resident;
    // Experts of this layer held by the VRAM tier now (ascending); filled by stats().
    std::vector<int32_t> vram_resident;
};

struct expert_stream_stats {
    bool        direct_io = false;  // reads use O_DIRECT
    std::string io_note;            // why reads are buffered, when they are
    int         io_threads = 0;
    std::string policy;             // the eviction policy's name
    uint64_t    capacity_bytes = 0;
    uint64_t    used_bytes = 0;     // every read buffer alive (cached, loading, queued)
    uint64_t    peak_bytes = 0;
    uint64_t    pinned_bytes = 0;
    uint64_t    entries = 0;
    uint64_t    evictions = 0;
    uint64_t    prefetch_cancelled = 0;  // queued prefetches dropped unread: wrong, or room for demand reads
    uint64_t    prefetch_dropped = 0;    // predictions not read because the cache had no room
    uint64_t    read_errors = 0;
    // Warming from usage history (warm()): entries queued, read, asked for later, dropped unread,
    // and reads still queued or running now.
    uint64_t    warm_queued = 0;
    uint64_t    warm_reads = 0;
    uint64_t    warm_bytes = 0;
    uint64_t    warm_used = 0;
    uint64_t    warm_cancelled = 0;
    uint64_t    warm_pending = 0;
    std::vector<std::string> files;  // the files experts are read from
    // The VRAM tier: its device ("" without one), capacity (slots x slot size), bytes held now,
    // experts held, copies written to it (their bytes and time), slots given up, and why the
    // tier stopped (a failed copy turns it off; the stream goes on from storage).
    std::string vram_device;
    uint64_t    vram_capacity_bytes = 0;
    uint64_t    vram_slot_bytes = 0;
    uint64_t    vram_used_bytes = 0;
    uint64_t    vram_entries = 0;
    uint64_t    vram_uploads = 0;
    uint64_t    vram_upload_bytes = 0;
    double      vram_upload_seconds = 0;
    uint64_t    vram_evictions = 0;
    std::string vram_error;
    std::vector<expert_layer_stats> layers;
};

class expert_stream;

// One layer's demand in one forward pass: every expert it needs, requested at once. next() hands
// them out as they become ready (hits first), pinned until done() or the request's destruction.
class expert_request {
  public:
    struct view {
        int32_t         expert = -1;
        const uint8_t * data[3] = {nullptr, nullptr, nullptr}; // gate, up, down matrices
    };

    expert_request(expert_request &&) noexcept;
    expert_request & operator=(expert_request &&) = delete;
    expert_request(const expert_request &) = delete;
    ~expert_request();  // unpins everything still held; reads in flight complete into the cache

    // Blocks until an expert of this request is ready and returns it (pinned); false once all
    // have been handed out. Throws KAIL_E_IO when its read failed (naming the file and offset) and
    // KAIL_E_CANCELLED when *cancel becomes true while waiting.
    bool next(view & out);
    // Unpins the expert next() handed out last and adds the compute time to the layer's stats.
    void done(const view & v, double compute_seconds);

    struct state;

  private:
    friend class expert_stream;
    explicit expert_request(std::unique_ptr<state> s);
    std::unique_ptr<state> s_;
};

class expert_stream {
  public:
    // Opens path for reading (O_DIRECT unless refused or params.direct_io is false) and starts
    // the I/O threads. Throws KAIL_E_IO if the file cannot be opened, KAIL_E_BUDGET if cache_bytes
    // cannot hold the largest expert, KAIL_E_INVALID_ARG for an unknown policy.
    expert_stream(const std::string & path, std::vector<expert_layer_source> layers, const expert_stream_params & params);
    ~expert_stream();
    expert_stream(const expert_stream &) = delete;
    expert_stream & operator=(const expert_stream &) = delete;

    // Requests `n` distinct experts of `layer` at once: hits are pinned, misses are read with
    // demand priority as fast as the budget lets them in (evicting unpinned entries by policy).
    // probs (may be null): each expert's gating weight, for the policy. cancel may be null.
    expert_request request(int layer, const int32_t * experts, int n, const std::atomic<bool> * cancel = nullptr, const float * probs = nullptr);

    // A prediction of `layer`'s next request: experts not cached are read at low priority, only
    // into room that holds no other fresh prediction, and are evicted first if never used; those
    // the layer's next request does not ask for are cancelled if no reader has begun them. Also
    // records the prediction for precision/recall.
    void prefetch(int layer, const int32_t * experts, int n);

    // Warms the cache from usage history: seeds the policy with each listed expert's historical
    // share of tokens (shares may be null), then queues reads of the experts in the given order
    // (hottest first) into free room only, never evicting. The reads run in the background below
    // demand and prefetch reads and leave one reader free for demand; a demand read that needs
    // room cancels queued warm reads, coldest first. Call before the first request.
    void warm(const expert_key * experts, const double * shares, size_t n);

    expert_stream_stats stats() const;
    int n_layers() const;
    const std::string & path() const;

    struct impl;

  private:
    std::shared_ptr<impl> impl_;
};

} // namespace kail
