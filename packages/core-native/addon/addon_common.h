// Node-API glue helpers shared by the addon's files. Only addon/ includes napi.h.
#pragma once

#include <napi.h>

#include <exception>
#include <string>

#include "kail/status.h"

namespace kail_addon {

// Builds a JS Error with a stable `code` property.
inline Napi::Error make_error(Napi::Env env, const char * code, const std::string & message) {
    Napi::Error e = Napi::Error::New(env, message);
    e.Set("code", Napi::String::New(env, code));
    return e;
}

// Runs fn, turning kail::error and any other C++ exception into a thrown JS error with a code.
// Every synchronous entry point goes through this, so a C++ failure never aborts the process.
template <typename Fn>
Napi::Value guarded(Napi::Env env, Fn && fn) {
    try {
        return fn();
    } catch (const Napi::Error &) {
        throw;
    } catch (const kail::error & e) {
        throw make_error(env, kail::error_code_name(e.code()), e.what());
    } catch (const std::bad_alloc &) {
        throw make_error(env, "KAIL_E_BUDGET", "out of memory");
    } catch (const std::exception & e) {
        throw make_error(env, "KAIL_E_INTERNAL", e.what());
    } catch (...) {
        throw make_error(env, "KAIL_E_INTERNAL", "unknown native error");
    }
}

// For AsyncWorker::Execute(): captures any exception as (code, message).
struct captured_error {
    bool        set = false;
    std::string code;
    std::string message;
};

template <typename Fn>
void capture(captured_error & out, Fn && fn) {
    try {
        fn();
    } catch (const kail::error & e) {
        out = {true, kail::error_code_name(e.code()), e.what()};
    } catch (const std::bad_alloc &) {
        out = {true, "KAIL_E_BUDGET", "out of memory"};
    } catch (const std::exception & e) {
        out = {true, "KAIL_E_INTERNAL", e.what()};
    } catch (...) {
        out = {true, "KAIL_E_INTERNAL", "unknown native error"};
    }
}

// Argument helpers that throw a KAIL_E_INVALID_ARG JS error naming the argument.
std::string arg_string(const Napi::CallbackInfo & info, size_t i, const char * name);
double arg_number(const Napi::CallbackInfo & info, size_t i, const char * name);

// Each subsystem registers its functions/classes on the exports object.
void register_system(Napi::Env env, Napi::Object exports);
void register_quants(Napi::Env env, Napi::Object exports);
void register_gguf(Napi::Env env, Napi::Object exports);
void register_model(Napi::Env env, Napi::Object exports);
void register_cache(Napi::Env env, Napi::Object exports);

} // namespace kail_addon
