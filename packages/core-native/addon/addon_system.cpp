// System information: build, CPU features, CUDA devices.
#include "addon_common.h"

#include <functional>
#include <vector>

#include "kail/cgroup.h"
#include "kail/cpu_features.h"
#include "kail/cuda.h"
#include "kail/storage_bench.h"

namespace kail_addon {

namespace {

Napi::Value system_info(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        const kail::cpu_features & f = kail::cpu_features_get();
        Napi::Object o = Napi::Object::New(env);
        Napi::Array feats = Napi::Array::New(env);
        uint32_t i = 0;
        for (auto & n : kail::cpu_features_names(f)) feats.Set(i++, Napi::String::New(env, n));
        o.Set("simd", feats);
        o.Set("kernelLevel", Napi::String::New(env, kail::cpu_kernel_level()));
        o.Set("logicalCores", Napi::Number::New(env, f.logical_cores));
        o.Set("physicalCores", Napi::Number::New(env, f.physical_cores));
        o.Set("onlineCores", Napi::Number::New(env, f.online_cores));
        o.Set("cpuQuota", Napi::Number::New(env, f.cpu_quota));
        o.Set("defaultThreads", Napi::Number::New(env, f.default_threads));
        o.Set("cudaCompiled", Napi::Boolean::New(env, kail::cuda_compiled()));
        Napi::Array devs = Napi::Array::New(env);
        int n = kail::cuda_device_count();
        for (int d = 0; d < n; d++) {
            kail::cuda_device_info di;
            if (!kail::cuda_device_info_get(d, di)) continue;
            Napi::Object od = Napi::Object::New(env);
            od.Set("index", Napi::Number::New(env, di.index));
            od.Set("name", Napi::String::New(env, di.name));
            od.Set("totalBytes", Napi::Number::New(env, static_cast<double>(di.total_bytes)));
            od.Set("freeBytes", Napi::Number::New(env, static_cast<double>(di.free_bytes)));
            od.Set("computeCapability", Napi::String::New(env, std::to_string(di.cc_major) + "." + std::to_string(di.cc_minor)));
            devs.Set(devs.Length(), od);
        }
        o.Set("cudaDevices", devs);
        return o;
    });
}

// cudaDequantizeQ8_0(blocks: Uint8Array) -> Float32Array; throws KAIL_E_UNSUPPORTED without a device.
Napi::Value cuda_dequantize_q8_0(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        if (info.Length() < 1 || !info[0].IsTypedArray())
            throw make_error(env, "KAIL_E_INVALID_ARG", "blocks must be a Uint8Array");
        Napi::Uint8Array in = info[0].As<Napi::Uint8Array>();
        if (in.ByteLength() % 34 != 0)
            throw make_error(env, "KAIL_E_INVALID_ARG", "blocks length must be a multiple of 34 (Q8_0 block size)");
        int64_t nb = static_cast<int64_t>(in.ByteLength() / 34);
        Napi::Float32Array out = Napi::Float32Array::New(env, static_cast<size_t>(nb * 32));
        std::string err;
        if (!kail::cuda_dequantize_q8_0(0, in.Data(), nb, out.Data(), err))
            throw make_error(env, "KAIL_E_UNSUPPORTED", err);
        return out;
    });
}

// Runs a bench off the JS thread; resolves with the object to_js builds.
template <typename R>
class BenchWorker : public Napi::AsyncWorker {
  public:
    BenchWorker(Napi::Env env, std::function<R()> run, std::function<Napi::Value(Napi::Env, const R &)> to_js)
        : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), run_(std::move(run)), to_js_(std::move(to_js)) {}
    Napi::Promise promise() { return deferred_.Promise(); }
    void Execute() override { capture(err_, [&] { r_ = run_(); }); }
    void OnOK() override {
        if (err_.set) deferred_.Reject(make_error(Env(), err_.code.c_str(), err_.message).Value());
        else deferred_.Resolve(to_js_(Env(), r_));
    }
    void OnError(const Napi::Error & e) override { deferred_.Reject(e.Value()); }

  private:
    Napi::Promise::Deferred deferred_;
    std::function<R()> run_;
    std::function<Napi::Value(Napi::Env, const R &)> to_js_;
    R r_;
    captured_error err_;
};

double opt_num(Napi::Object o, const char * k, double def) {
    Napi::Value v = o.Get(k);
    if (v.IsUndefined()) return def;
    if (!v.IsNumber()) throw kail::error(kail::KAIL_E_INVALID_ARG, std::string(k) + " must be a number");
    return v.As<Napi::Number>().DoubleValue();
}

// ioBench({path, blockBytes, queueDepth, random, seconds, direct}) -> Promise<{bytes, reads, seconds, direct, note}>
Napi::Value io_bench(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        if (info.Length() < 1 || !info[0].IsObject()) throw make_error(env, "KAIL_E_INVALID_ARG", "ioBench(options) needs an object");
        Napi::Object o = info[0].As<Napi::Object>();
        kail::io_bench_params p;
        p.path = o.Get("path").IsString() ? o.Get("path").As<Napi::String>().Utf8Value() : throw make_error(env, "KAIL_E_INVALID_ARG", "path must be a string");
        p.block_bytes = static_cast<uint64_t>(opt_num(o, "blockBytes", 1 << 20));
        p.queue_depth = static_cast<int>(opt_num(o, "queueDepth", 1));
        p.seconds = opt_num(o, "seconds", 1);
        p.random = o.Get("random").ToBoolean().Value();
        p.direct = o.Get("direct").IsUndefined() ? true : o.Get("direct").ToBoolean().Value();
        auto * w = new BenchWorker<kail::io_bench_result>(
            env, [p] { return kail::io_bench_run(p); },
            [](Napi::Env e, const kail::io_bench_result & r) -> Napi::Value {
                Napi::Object out = Napi::Object::New(e);
                out.Set("bytes", Napi::Number::New(e, static_cast<double>(r.bytes)));
                out.Set("reads", Napi::Number::New(e, static_cast<double>(r.reads)));
                out.Set("seconds", Napi::Number::New(e, r.seconds));
                out.Set("direct", Napi::Boolean::New(e, r.direct));
                out.Set("note", Napi::String::New(e, r.note));
                return out;
            });
        Napi::Promise pr = w->promise();
        w->Queue();
        return pr;
    });
}

// memBench({bytes, threads, seconds}) -> Promise<{readBytesPerSecond, copyBytesPerSecond, threads}>
Napi::Value mem_bench(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        Napi::Object o = info.Length() > 0 && info[0].IsObject() ? info[0].As<Napi::Object>() : Napi::Object::New(env);
        const uint64_t bytes = static_cast<uint64_t>(opt_num(o, "bytes", 256.0 * (1 << 20)));
        const int threads = static_cast<int>(opt_num(o, "threads", 1));
        const double seconds = opt_num(o, "seconds", 1);
        auto * w = new BenchWorker<kail::mem_bench_result>(
            env, [=] { return kail::mem_bench_run(bytes, threads, seconds); },
            [](Napi::Env e, const kail::mem_bench_result & r) -> Napi::Value {
                Napi::Object out = Napi::Object::New(e);
                out.Set("readBytesPerSecond", Napi::Number::New(e, r.read_bytes_per_second));
                out.Set("copyBytesPerSecond", Napi::Number::New(e, r.copy_bytes_per_second));
                out.Set("threads", Napi::Number::New(e, r.threads));
                return out;
            });
        Napi::Promise pr = w->promise();
        w->Queue();
        return pr;
    });
}

} // namespace

// cgroupMemoryLimit(fsRoot?: string) -> { dir, version, limitBytes, usedBytes, reclaimableBytes, headroomBytes } | null
Napi::Value cgroup_memory_limit(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        std::string root = "/";
        if (info.Length() > 0 && !info[0].IsUndefined()) {
            if (!info[0].IsString()) throw make_error(env, "KAIL_E_INVALID_ARG", "fsRoot must be a string");
            root = info[0].As<Napi::String>().Utf8Value();
        }
        kail::cgroup_memory_limit l;
        if (!kail::cgroup_memory_limit_get(l, root)) return env.Null();
        Napi::Object o = Napi::Object::New(env);
        o.Set("dir", Napi::String::New(env, l.dir));
        o.Set("version", Napi::Number::New(env, l.version));
        o.Set("limitBytes", Napi::Number::New(env, l.limit_bytes));
        o.Set("usedBytes", Napi::Number::New(env, l.used_bytes));
        o.Set("reclaimableBytes", Napi::Number::New(env, l.reclaimable_bytes));
        o.Set("headroomBytes", Napi::Number::New(env, l.headroom_bytes));
        return o;
    });
}

void register_system(Napi::Env env, Napi::Object exports) {
    exports.Set("systemInfo", Napi::Function::New(env, system_info, "systemInfo"));
    exports.Set("cgroupMemoryLimit", Napi::Function::New(env, cgroup_memory_limit, "cgroupMemoryLimit"));
    exports.Set("ioBench", Napi::Function::New(env, io_bench, "ioBench"));
    exports.Set("memBench", Napi::Function::New(env, mem_bench, "memBench"));
    exports.Set("cudaDequantizeQ8_0", Napi::Function::New(env, cuda_dequantize_q8_0, "cudaDequantizeQ8_0"));
}

} // namespace kail_addon
