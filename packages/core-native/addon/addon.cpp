// Module entry: every subsystem adds itself to `exports` here.
#include "addon_common.h"

namespace kail_addon {

std::string arg_string(const Napi::CallbackInfo & info, size_t i, const char * name) {
    if (info.Length() <= i || !info[i].IsString())
        throw make_error(info.Env(), "KAIL_E_INVALID_ARG", std::string(name) + " must be a string");
    return info[i].As<Napi::String>().Utf8Value();
}

double arg_number(const Napi::CallbackInfo & info, size_t i, const char * name) {
    if (info.Length() <= i || !info[i].IsNumber())
        throw make_error(info.Env(), "KAIL_E_INVALID_ARG", std::string(name) + " must be a number");
    return info[i].As<Napi::Number>().DoubleValue();
}

} // namespace kail_addon

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
    kail_addon::register_system(env, exports);
    kail_addon::register_quants(env, exports);
    kail_addon::register_gguf(env, exports);
    kail_addon::register_model(env, exports);
    kail_addon::register_cache(env, exports);
    return exports;
}

NODE_API_MODULE(kail_native, Init)
