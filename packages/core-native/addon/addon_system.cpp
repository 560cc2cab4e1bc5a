// System information: build, CPU features, CUDA devices.
#include "addon_common.h"

#include <vector>

#include "kail/cpu_features.h"
#include "kail/cuda.h"

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

} // namespace

void register_system(Napi::Env env, Napi::Object exports) {
    exports.Set("systemInfo", Napi::Function::New(env, system_info, "systemInfo"));
    exports.Set("cudaDequantizeQ8_0", Napi::Function::New(env, cuda_dequantize_q8_0, "cudaDequantizeQ8_0"));
}

} // namespace kail_addon
