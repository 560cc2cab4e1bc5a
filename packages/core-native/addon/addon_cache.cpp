// Expert-cache policies: the trace simulator (kail cache-sim) and the list of policies.
#include "addon_common.h"

#include <cmath>
#include <string>
#include <vector>

#include "kail/expert_cache.h"

namespace kail_addon {

namespace {

template <typename T>
T typed_field(Napi::Env env, const Napi::Object & o, const char * name, napi_typedarray_type want, const char * what) {
    Napi::Value v = o.Get(name);
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != want)
        throw make_error(env, "KAIL_E_INVALID_ARG", std::string("trace.") + name + " must be a " + what);
    return v.As<T>();
}

int32_t positive_int(Napi::Env env, const Napi::Value & v, const std::string & name, double max) {
    const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
    if (!(d >= 1 && d <= max) || std::floor(d) != d)
        throw make_error(env, "KAIL_E_INVALID_ARG", name + " must be an integer in 1.." + std::to_string(static_cast<long long>(max)));
    return static_cast<int32_t>(d);
}

// cacheSimulate(trace: {layer, token, experts, probs, k}, slots, policies): {accesses, hits}
Napi::Value cache_simulate(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        if (info.Length() < 3 || !info[0].IsObject())
            throw make_error(env, "KAIL_E_INVALID_ARG", "cacheSimulate(trace, slots, policies): trace must be an object");
        Napi::Object to = info[0].As<Napi::Object>();
        kail::expert_trace t;
        t.k = positive_int(env, to.Get("k"), "trace.k", 1024);
        Napi::Int32Array layer = typed_field<Napi::Int32Array>(env, to, "layer", napi_int32_array, "Int32Array");
        Napi::Int32Array token = typed_field<Napi::Int32Array>(env, to, "token", napi_int32_array, "Int32Array");
        Napi::Int32Array experts = typed_field<Napi::Int32Array>(env, to, "experts", napi_int32_array, "Int32Array");
        Napi::Float32Array probs = typed_field<Napi::Float32Array>(env, to, "probs", napi_float32_array, "Float32Array (empty: no probabilities)");
        t.layer.assign(layer.Data(), layer.Data() + layer.ElementLength());
        t.token.assign(token.Data(), token.Data() + token.ElementLength());
        t.experts.assign(experts.Data(), experts.Data() + experts.ElementLength());
        t.probs.assign(probs.Data(), probs.Data() + probs.ElementLength());
        const int32_t slots = positive_int(env, info[1], "slots", 1 << 20);
        if (!info[2].IsArray()) throw make_error(env, "KAIL_E_INVALID_ARG", "policies must be an array of policy names");
        Napi::Array pa = info[2].As<Napi::Array>();
        std::vector<std::string> policies;
        for (uint32_t i = 0; i < pa.Length(); i++) {
            Napi::Value v = pa.Get(i);
            if (!v.IsString()) throw make_error(env, "KAIL_E_INVALID_ARG", "policies[" + std::to_string(i) + "] must be a string");
            policies.push_back(v.As<Napi::String>().Utf8Value());
        }
        if (policies.empty()) throw make_error(env, "KAIL_E_INVALID_ARG", "policies must name at least one policy");
        const std::vector<kail::expert_cache_sim_result> res = kail::expert_cache_simulate_many(t, slots, policies);
        Napi::Object out = Napi::Object::New(env);
        out.Set("accesses", Napi::Number::New(env, static_cast<double>(res.front().accesses)));
        Napi::Object hits = Napi::Object::New(env);
        for (const auto & r : res) hits.Set(r.policy, Napi::Number::New(env, static_cast<double>(r.hits)));
        out.Set("hits", hits);
        return out;
    });
}

Napi::Value cache_policies(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        Napi::Array a = Napi::Array::New(env);
        for (const auto & n : kail::expert_cache_policy_names()) a.Set(a.Length(), Napi::String::New(env, n));
        return a;
    });
}

Napi::Value cache_default_policy(const Napi::CallbackInfo & info) {
    return Napi::String::New(info.Env(), kail::expert_cache_default_policy());
}

} // namespace

void register_cache(Napi::Env env, Napi::Object exports) {
    exports.Set("cacheSimulate", Napi::Function::New(env, cache_simulate, "cacheSimulate"));
    exports.Set("cachePolicies", Napi::Function::New(env, cache_policies, "cachePolicies"));
    exports.Set("cacheDefaultPolicy", Napi::Function::New(env, cache_default_policy, "cacheDefaultPolicy"));
}

} // namespace kail_addon
