// Model runtime binding: createModel(path, program, params) -> Model with an async forward().
#include <type_traits>
#include "addon_common.h"

#include <cmath>
#include <memory>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/residency.h"
#include "kail/types.h"

namespace kail_addon {

namespace {

double get_num(Napi::Object o, const char * key, double def) {
    Napi::Value v = o.Get(key);
    if (v.IsUndefined() || v.IsNull()) return def;
    if (!v.IsNumber()) throw kail::error(kail::KAIL_E_INVALID_ARG, std::string(key) + " must be a number");
    return v.As<Napi::Number>().DoubleValue();
}

kail::program program_from_js(Napi::Object p) {
    kail::program prog;
    Napi::Value bv = p.Get("buffers");
    Napi::Value ov = p.Get("ops");
    if (!bv.IsArray() || !ov.IsArray()) throw kail::error(kail::KAIL_E_INVALID_ARG, "program needs buffers[] and ops[]");
    Napi::Array bufs = bv.As<Napi::Array>();
    for (uint32_t i = 0; i < bufs.Length(); i++) {
        Napi::Object b = bufs.Get(i).As<Napi::Object>();
        kail::buffer_desc d;
        d.name = b.Get("name").ToString().Utf8Value();
        d.width = static_cast<int64_t>(get_num(b, "width", 0));
        d.out_rows = b.Get("outRows").ToBoolean().Value();
        if (d.width <= 0) throw kail::error(kail::KAIL_E_INVALID_ARG, "buffer '" + d.name + "' needs a positive width");
        prog.buffers.push_back(d);
    }
    Napi::Array ops = ov.As<Napi::Array>();
    for (uint32_t i = 0; i < ops.Length(); i++) {
        Napi::Object o = ops.Get(i).As<Napi::Object>();
        kail::op_desc d;
        d.type = kail::op_type_from_name(o.Get("op").ToString().Utf8Value());
        d.out = static_cast<int>(get_num(o, "out", -1));
        d.a = static_cast<int>(get_num(o, "a", -1));
        d.b = static_cast<int>(get_num(o, "b", -1));
        d.c = static_cast<int>(get_num(o, "c", -1));
        if (d.out < 0) throw kail::error(kail::KAIL_E_INVALID_ARG, "op " + std::to_string(i) + " has no output buffer");
        Napi::Value wv = o.Get("weights");
        if (wv.IsObject()) {
            Napi::Object w = wv.As<Napi::Object>();
            Napi::Array keys = w.GetPropertyNames();
            for (uint32_t k = 0; k < keys.Length(); k++) {
                std::string key = keys.Get(k).ToString().Utf8Value();
                Napi::Value val = w.Get(key);
                if (val.IsString()) d.weights[key] = val.As<Napi::String>().Utf8Value();
            }
        }
        Napi::Value pv = o.Get("params");
        if (pv.IsObject()) {
            Napi::Object pp = pv.As<Napi::Object>();
            Napi::Array keys = pp.GetPropertyNames();
            for (uint32_t k = 0; k < keys.Length(); k++) {
                std::string key = keys.Get(k).ToString().Utf8Value();
                Napi::Value val = pp.Get(key);
                if (val.IsNumber()) d.params[key] = val.As<Napi::Number>().DoubleValue();
                else if (val.IsBoolean()) d.params[key] = val.As<Napi::Boolean>().Value() ? 1.0 : 0.0;
                else throw kail::error(kail::KAIL_E_INVALID_ARG, "op " + std::to_string(i) + " parameter '" + key + "' must be a number or boolean");
            }
        }
        Napi::Value iv = o.Get("ids");
        if (iv.IsArray()) {
            Napi::Array ia = iv.As<Napi::Array>();
            for (uint32_t k = 0; k < ia.Length(); k++) {
                Napi::Value val = ia.Get(k);
                const double x = val.IsNumber() ? val.As<Napi::Number>().DoubleValue() : NAN;
                // (Integers JS holds exactly: |x| <= 2^53 - 1.)
                if (!std::isfinite(x) || std::trunc(x) != x || std::fabs(x) > 9007199254740991.0)
                    throw kail::error(kail::KAIL_E_INVALID_ARG, "op " + std::to_string(i) + " ids must be integers");
                d.ids.push_back(static_cast<int64_t>(x));
            }
        } else if (!iv.IsUndefined()) throw kail::error(kail::KAIL_E_INVALID_ARG, "op " + std::to_string(i) + " ids must be an array of integers");
        prog.ops.push_back(d);
    }
    prog.logits = static_cast<int>(get_num(p, "logits", -1));
    prog.hidden = static_cast<int>(get_num(p, "hidden", -1));
    Napi::Value kk = p.Get("kvKWidth"), kv = p.Get("kvVWidth");
    if (kk.IsArray() && kv.IsArray()) {
        Napi::Array a = kk.As<Napi::Array>(), b = kv.As<Napi::Array>();
        for (uint32_t i = 0; i < a.Length(); i++) prog.kv_k_width.push_back(static_cast<int64_t>(a.Get(i).As<Napi::Number>().Int64Value()));
        for (uint32_t i = 0; i < b.Length(); i++) prog.kv_v_width.push_back(static_cast<int64_t>(b.Get(i).As<Napi::Number>().Int64Value()));
    }
    prog.n_kv_layers = static_cast<int>(prog.kv_k_width.size());
    Napi::Value rw = p.Get("rsWidth");
    if (rw.IsArray()) {
        Napi::Array a = rw.As<Napi::Array>();
        for (uint32_t i = 0; i < a.Length(); i++) prog.rs_width.push_back(static_cast<int64_t>(a.Get(i).As<Napi::Number>().Int64Value()));
    }
    prog.n_moe_layers = static_cast<int>(get_num(p, "nMoeLayers", 0));
    prog.n_expert = static_cast<int>(get_num(p, "nExpert", 0));
    return prog;
}

bool get_bool(Napi::Object o, const char * key, bool def) {
    Napi::Value v = o.Get(key);
    if (v.IsUndefined() || v.IsNull()) return def;
    if (!v.IsBoolean()) throw kail::error(kail::KAIL_E_INVALID_ARG, std::string(key) + " must be a boolean");
    return v.As<Napi::Boolean>().Value();
}

// { files: string[], layers: [{ sliceOffset: [g, u, d], blockBytes, file: Int32Array, offset: Float64Array }] }
kail::expert_pack pack_from_js(Napi::Value v) {
    auto bad = [](const std::string & why) { return kail::error(kail::KAIL_E_INVALID_ARG, "expertPack: " + why); };
    if (!v.IsObject()) throw bad("must be an object");
    Napi::Object o = v.As<Napi::Object>();
    kail::expert_pack pk;
    Napi::Value files = o.Get("files"), layers = o.Get("layers");
    if (!files.IsArray() || !layers.IsArray()) throw bad("needs arrays 'files' and 'layers'");
    Napi::Array fa = files.As<Napi::Array>(), la = layers.As<Napi::Array>();
    for (uint32_t i = 0; i < fa.Length(); i++) {
        Napi::Value f = fa.Get(i);
        if (!f.IsString()) throw bad("files[" + std::to_string(i) + "] must be a string");
        pk.files.push_back(f.As<Napi::String>().Utf8Value());
    }
    for (uint32_t i = 0; i < la.Length(); i++) {
        Napi::Value lv = la.Get(i);
        const std::string at = "layers[" + std::to_string(i) + "]";
        if (!lv.IsObject()) throw bad(at + " must be an object");
        Napi::Object l = lv.As<Napi::Object>();
        kail::expert_pack_layer pl;
        Napi::Value so = l.Get("sliceOffset"), fi = l.Get("file"), of = l.Get("offset");
        if (!so.IsArray() || so.As<Napi::Array>().Length() != 3) throw bad(at + ".sliceOffset must be 3 numbers");
        for (uint32_t s = 0; s < 3; s++) pl.slice_offset[s] = static_cast<uint64_t>(so.As<Napi::Array>().Get(s).As<Napi::Number>().DoubleValue());
        pl.block_bytes = static_cast<uint64_t>(get_num(l, "blockBytes", 0));
        if (!fi.IsTypedArray() || fi.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) throw bad(at + ".file must be an Int32Array");
        if (!of.IsTypedArray() || of.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) throw bad(at + ".offset must be a Float64Array");
        Napi::Int32Array fa2 = fi.As<Napi::Int32Array>();
        Napi::Float64Array oa = of.As<Napi::Float64Array>();
        pl.file.assign(fa2.Data(), fa2.Data() + fa2.ElementLength());
        for (size_t k = 0; k < oa.ElementLength(); k++) pl.offset.push_back(static_cast<uint64_t>(oa[k]));
        pk.layers.push_back(std::move(pl));
    }
    if (pk.files.empty()) throw bad("no files");
    return pk;
}

kail::model_params params_from_js(const Napi::CallbackInfo & info, size_t i) {
    kail::model_params mp;
    if (info.Length() > i && info[i].IsObject()) {
        Napi::Object p = info[i].As<Napi::Object>();
        mp.n_threads = static_cast<int>(get_num(p, "threads", 0));
        mp.kv_type = static_cast<uint32_t>(get_num(p, "kvType", 1));
        mp.kv_type_v = static_cast<uint32_t>(get_num(p, "kvTypeV", mp.kv_type));
        // lora: [{path, scale}] (model_params::lora)
        const Napi::Value lv = p.Get("lora");
        if (!lv.IsUndefined()) {
            if (!lv.IsArray()) throw kail::error(kail::KAIL_E_INVALID_ARG, "lora must be an array of {path, scale}");
            Napi::Array la = lv.As<Napi::Array>();
            for (uint32_t k = 0; k < la.Length(); k++) {
                const Napi::Value e = la.Get(k);
                if (!e.IsObject() || !e.As<Napi::Object>().Get("path").IsString()) throw kail::error(kail::KAIL_E_INVALID_ARG, "lora[" + std::to_string(k) + "] needs a path");
                Napi::Object eo = e.As<Napi::Object>();
                mp.lora.push_back({eo.Get("path").As<Napi::String>().Utf8Value(), static_cast<float>(get_num(eo, "scale", 1.0))});
            }
        }
        // weightFiles: [path] (model_params::weight_files)
        const Napi::Value wv = p.Get("weightFiles");
        if (!wv.IsUndefined()) {
            if (!wv.IsArray()) throw kail::error(kail::KAIL_E_INVALID_ARG, "weightFiles must be an array of paths");
            Napi::Array wa = wv.As<Napi::Array>();
            for (uint32_t k = 0; k < wa.Length(); k++) {
                if (!wa.Get(k).IsString()) throw kail::error(kail::KAIL_E_INVALID_ARG, "weightFiles[" + std::to_string(k) + "] must be a path");
                mp.weight_files.push_back(wa.Get(k).As<Napi::String>().Utf8Value());
            }
        }
        // cvec: Float32Array (cvecNEmbd floats per layer from layer 1), cvecStart, cvecEnd (model_params::cvec)
        const Napi::Value cv = p.Get("cvec");
        if (!cv.IsUndefined()) {
            if (!cv.IsTypedArray() || cv.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
                throw kail::error(kail::KAIL_E_INVALID_ARG, "cvec must be a Float32Array");
            Napi::Float32Array fa = cv.As<Napi::Float32Array>();
            mp.cvec.assign(fa.Data(), fa.Data() + fa.ElementLength());
            mp.cvec_n_embd = static_cast<int64_t>(get_num(p, "cvecNEmbd", 0));
            if (mp.cvec_n_embd <= 0 || mp.cvec.size() % static_cast<size_t>(mp.cvec_n_embd) != 0)
                throw kail::error(kail::KAIL_E_INVALID_ARG, "cvecNEmbd must be a positive divisor of the control vector's length");
            mp.cvec_start = static_cast<int>(get_num(p, "cvecStart", 1));
            mp.cvec_end = static_cast<int>(get_num(p, "cvecEnd", 1 << 30));
        }
        mp.swa_full = p.Has("swaFull") && p.Get("swaFull").ToBoolean().Value();
        mp.use_mmap = p.Has("mmap") && p.Get("mmap").ToBoolean().Value();
        mp.n_ctx = static_cast<int64_t>(get_num(p, "nCtx", 4096));
        mp.n_seq_max = static_cast<int>(get_num(p, "nSeqMax", 1));
        mp.kv_max_bytes = static_cast<uint64_t>(get_num(p, "kvMaxBytes", 0));
        const double ram = get_num(p, "ramBytes", 0);
        if (ram < 0) throw kail::error(kail::KAIL_E_INVALID_ARG, "ramBytes must be >= 0");
        mp.ram_budget = static_cast<uint64_t>(ram);
        mp.ram_reserve = static_cast<uint64_t>(std::max(0.0, get_num(p, "ramReserveBytes", 0)));
        const double vram = get_num(p, "vramBytes", 0);
        if (vram < 0) throw kail::error(kail::KAIL_E_INVALID_ARG, "vramBytes must be >= 0");
        mp.vram_budget = static_cast<uint64_t>(vram);
        mp.vram_device = static_cast<int>(get_num(p, "vramDevice", 0));
        mp.vram_optional = get_bool(p, "vramOptional", false);
        mp.n_batch = static_cast<int64_t>(get_num(p, "nBatch", 512));
        mp.io_threads = static_cast<int>(get_num(p, "ioThreads", 4));
        mp.direct_io = get_bool(p, "directIo", true);
        mp.prefetch = get_bool(p, "prefetch", true);
        const double rb = get_num(p, "readBytes", 0);
        if (rb < 0) throw kail::error(kail::KAIL_E_INVALID_ARG, "readBytes must be >= 0");
        mp.read_bytes = static_cast<uint64_t>(rb);
        Napi::Value pol = p.Get("cachePolicy");
        if (!pol.IsUndefined() && !pol.IsNull()) {
            if (!pol.IsString()) throw kail::error(kail::KAIL_E_INVALID_ARG, "cachePolicy must be a string");
            mp.cache_policy = pol.As<Napi::String>().Utf8Value();
        }
        Napi::Value pk = p.Get("expertPack");
        if (!pk.IsUndefined() && !pk.IsNull()) mp.pack = pack_from_js(pk);
        if (mp.n_batch < 1) throw kail::error(kail::KAIL_E_INVALID_ARG, "nBatch must be >= 1");
        if (mp.io_threads < 1 || mp.io_threads > 64) throw kail::error(kail::KAIL_E_INVALID_ARG, "ioThreads must be in 1..64");
    }
    return mp;
}

Napi::Object plan_to_js(Napi::Env env, const kail::residency_plan & p) {
    Napi::Object o = Napi::Object::New(env);
    auto num = [&](const char * k, double v) { o.Set(k, Napi::Number::New(env, v)); };
    num("ramBytes", static_cast<double>(p.ram_budget));
    num("reserveBytes", static_cast<double>(p.reserve_bytes));
    num("residentBytes", static_cast<double>(p.resident_bytes));
    num("residentTensors", static_cast<double>(p.resident_tensors));
    num("loraBytes", static_cast<double>(p.lora_bytes));
    num("kvBytes", static_cast<double>(p.kv_bytes));
    num("nCtx", static_cast<double>(p.n_ctx));
    num("nSeqMax", p.n_seq_max);
    num("scratchBytes", static_cast<double>(p.scratch_bytes));
    num("nBatch", static_cast<double>(p.n_batch));
    num("fixedBytes", static_cast<double>(p.fixed_bytes));
    num("expertBytes", static_cast<double>(p.expert_bytes));
    num("nMoeLayers", p.n_moe_layers);
    num("nExpert", p.n_expert);
    num("nExpertMin", p.n_expert_min);
    num("nExpertTotal", static_cast<double>(p.n_expert_total));
    num("nExpertUsed", p.n_expert_used);
    num("expertEntryBytes", static_cast<double>(p.expert_entry_bytes));
    num("cacheBytes", static_cast<double>(p.cache_bytes));
    num("minCacheBytes", static_cast<double>(p.min_cache_bytes));
    num("cacheExperts", static_cast<double>(p.cache_experts));
    num("cacheExpertsPerLayer", p.cache_experts_per_layer);
    num("coldReadBytesPerToken", static_cast<double>(p.cold_read_bytes_per_token));
    num("vramBytes", static_cast<double>(p.vram_budget));
    num("vramCacheExperts", static_cast<double>(p.vram_cache_experts));
    num("vramCacheBytes", static_cast<double>(p.vram_cache_bytes));
    o.Set("fits", Napi::Boolean::New(env, p.fits));
    num("shortfallBytes", static_cast<double>(p.shortfall_bytes));
    o.Set("message", Napi::String::New(env, p.message));
    return o;
}

Napi::Object stream_to_js(Napi::Env env, const kail::model_stats & s) {
    const kail::expert_stream_stats & st = s.stream;
    Napi::Object o = Napi::Object::New(env);
    auto num = [&](Napi::Object t, const char * k, double v) { t.Set(k, Napi::Number::New(env, v)); };
    o.Set("directIo", Napi::Boolean::New(env, st.direct_io));
    o.Set("ioNote", Napi::String::New(env, st.io_note));
    num(o, "ioThreads", st.io_threads);
    o.Set("policy", Napi::String::New(env, st.policy));
    num(o, "residentBytes", static_cast<double>(s.resident_bytes));
    num(o, "capacityBytes", static_cast<double>(st.capacity_bytes));
    num(o, "usedBytes", static_cast<double>(st.used_bytes));
    num(o, "peakBytes", static_cast<double>(st.peak_bytes));
    num(o, "pinnedBytes", static_cast<double>(st.pinned_bytes));
    num(o, "entries", static_cast<double>(st.entries));
    num(o, "evictions", static_cast<double>(st.evictions));
    num(o, "prefetchCancelled", static_cast<double>(st.prefetch_cancelled));
    num(o, "prefetchDropped", static_cast<double>(st.prefetch_dropped));
    num(o, "readErrors", static_cast<double>(st.read_errors));
    num(o, "warmQueued", static_cast<double>(st.warm_queued));
    num(o, "warmReads", static_cast<double>(st.warm_reads));
    num(o, "warmBytes", static_cast<double>(st.warm_bytes));
    num(o, "warmUsed", static_cast<double>(st.warm_used));
    num(o, "warmCancelled", static_cast<double>(st.warm_cancelled));
    num(o, "warmPending", static_cast<double>(st.warm_pending));
    Napi::Array files = Napi::Array::New(env, st.files.size());
    for (size_t i = 0; i < st.files.size(); i++) files.Set(static_cast<uint32_t>(i), Napi::String::New(env, st.files[i]));
    o.Set("files", files);
    Napi::Object vr = Napi::Object::New(env);
    vr.Set("device", Napi::String::New(env, st.vram_device));
    num(vr, "capacityBytes", static_cast<double>(st.vram_capacity_bytes));
    num(vr, "slotBytes", static_cast<double>(st.vram_slot_bytes));
    num(vr, "usedBytes", static_cast<double>(st.vram_used_bytes));
    num(vr, "entries", static_cast<double>(st.vram_entries));
    num(vr, "uploads", static_cast<double>(st.vram_uploads));
    num(vr, "uploadBytes", static_cast<double>(st.vram_upload_bytes));
    num(vr, "uploadSeconds", st.vram_upload_seconds);
    num(vr, "evictions", static_cast<double>(st.vram_evictions));
    vr.Set("error", Napi::String::New(env, st.vram_error));
    o.Set("vram", vr);
    Napi::Array layers = Napi::Array::New(env, st.layers.size());
    for (size_t i = 0; i < st.layers.size(); i++) {
        const kail::expert_layer_stats & l = st.layers[i];
        Napi::Object t = Napi::Object::New(env);
        num(t, "accesses", static_cast<double>(l.accesses));
        num(t, "hits", static_cast<double>(l.hits));
        num(t, "misses", static_cast<double>(l.misses));
        num(t, "missesInflight", static_cast<double>(l.misses_inflight));
        num(t, "reads", static_cast<double>(l.reads));
        num(t, "bytesRead", static_cast<double>(l.bytes_read));
        num(t, "readSeconds", l.read_seconds);
        num(t, "computeSeconds", l.compute_seconds);
        num(t, "stallSeconds", l.stall_seconds);
        num(t, "prefetchReads", static_cast<double>(l.prefetch_reads));
        num(t, "prefetchBytes", static_cast<double>(l.prefetch_bytes));
        num(t, "prefetchUsed", static_cast<double>(l.prefetch_used));
        num(t, "prefetchWasted", static_cast<double>(l.prefetch_wasted));
        num(t, "predicted", static_cast<double>(l.predicted));
        num(t, "predictedCorrect", static_cast<double>(l.predicted_correct));
        num(t, "predictedActual", static_cast<double>(l.predicted_actual));
        Napi::Int32Array res = Napi::Int32Array::New(env, l.resident.size());
        for (size_t k = 0; k < l.resident.size(); k++) res[k] = l.resident[k];
        t.Set("resident", res);
        num(t, "vramReads", static_cast<double>(l.vram_reads));
        num(t, "vramBytes", static_cast<double>(l.vram_bytes));
        num(t, "vramSeconds", l.vram_seconds);
        Napi::Int32Array vres = Napi::Int32Array::New(env, l.vram_resident.size());
        for (size_t k = 0; k < l.vram_resident.size(); k++) vres[k] = l.vram_resident[k];
        t.Set("vramResident", vres);
        layers.Set(static_cast<uint32_t>(i), t);
    }
    o.Set("layers", layers);
    return o;
}

class AddonModel;

// Marks the JS objects of class Model, so that a kvSource argument is checked to be one before
// it is unwrapped.
const napi_type_tag kModelTag = {0x6b61696c4d6f6465ULL, 0x6c4b76536f757263ULL};

class ForwardWorker : public Napi::AsyncWorker {
  public:
    ForwardWorker(Napi::Env env, std::shared_ptr<kail::model> m, AddonModel * owner, Napi::Object keep,
                  std::vector<int32_t> tokens, std::vector<int32_t> pos, std::vector<int32_t> seq, std::vector<uint8_t> out,
                  std::vector<float> embd, int64_t embd_width, bool want_hidden)
        : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), model_(std::move(m)), owner_(owner),
          tokens_(std::move(tokens)), pos_(std::move(pos)), seq_(std::move(seq)), out_(std::move(out)), embd_(std::move(embd)),
          embd_width_(embd_width), want_hidden_(want_hidden) {
        keep_ = Napi::Persistent(keep);
    }
    Napi::Promise promise() { return deferred_.Promise(); }

    void Execute() override {
        capture(err_, [&] {
            kail::batch b;
            b.tokens = tokens_.data();
            b.pos = pos_.data();
            b.seq = seq_.data();
            b.output = out_.data();
            b.n = static_cast<int64_t>(tokens_.size());
            if (embd_width_ > 0) {
                b.embd = embd_.data();
                b.embd_width = embd_width_;
            }
            b.want_hidden = want_hidden_;
            model_->forward(b, logits_, &hidden_);
        });
    }
    void OnOK() override;
    void OnError(const Napi::Error & e) override;

  private:
    Napi::Promise::Deferred deferred_;
    std::shared_ptr<kail::model> model_;
    AddonModel * owner_;
    Napi::ObjectReference keep_;
    std::vector<int32_t> tokens_, pos_, seq_;
    std::vector<uint8_t> out_;
    std::vector<float> embd_;
    int64_t embd_width_ = 0;
    bool want_hidden_ = false;
    std::vector<float> logits_, hidden_;
    captured_error err_;
};

class AddonModel : public Napi::ObjectWrap<AddonModel> {
  public:
    static Napi::Function define(Napi::Env env) {
        return DefineClass(env, "Model", {
            InstanceMethod("forward", &AddonModel::forward),
            InstanceMethod("seqLen", &AddonModel::seq_len),
            InstanceMethod("seqTruncate", &AddonModel::seq_truncate),
            InstanceMethod("seqCopy", &AddonModel::seq_copy),
            InstanceMethod("seqKeepRollback", &AddonModel::seq_keep_rollback),
            InstanceMethod("seqStates", &AddonModel::seq_states),
            InstanceMethod("seqSetStates", &AddonModel::seq_set_states),
            InstanceMethod("seqShift", &AddonModel::seq_shift),
            InstanceMethod("seqState", &AddonModel::seq_state),
            InstanceMethod("setSeqState", &AddonModel::set_seq_state),
            InstanceMethod("setLoraScales", &AddonModel::set_lora_scales),
            InstanceAccessor("nLora", &AddonModel::n_lora, nullptr),
            InstanceMethod("stats", &AddonModel::stats),
            InstanceMethod("plan", &AddonModel::plan),
            InstanceMethod("cancel", &AddonModel::cancel),
            InstanceMethod("warmExperts", &AddonModel::warm_experts),
            InstanceMethod("imatrixCollect", &AddonModel::imatrix_collect),
            InstanceMethod("imatrixTake", &AddonModel::imatrix_take),
            InstanceMethod("close", &AddonModel::close),
            InstanceAccessor("nVocab", &AddonModel::n_vocab, nullptr),
            InstanceAccessor("nThreads", &AddonModel::n_threads, nullptr),
            InstanceAccessor("kvBytesPerToken", &AddonModel::kv_per_token, nullptr),
            InstanceAccessor("kvCapacityBytes", &AddonModel::kv_capacity, nullptr),
            InstanceAccessor("hiddenWidth", &AddonModel::hidden_width, nullptr),
            InstanceAccessor("inputWidth", &AddonModel::input_width, nullptr),
        });
    }

    AddonModel(const Napi::CallbackInfo & info) : Napi::ObjectWrap<AddonModel>(info) {
        Napi::Env env = info.Env();
        guarded(env, [&]() -> Napi::Value {
            std::string path = arg_string(info, 0, "path");
            if (info.Length() < 2 || !info[1].IsObject()) throw make_error(env, "KAIL_E_INVALID_ARG", "program must be an object");
            kail::program prog = program_from_js(info[1].As<Napi::Object>());
            kail::model_params mp = params_from_js(info, 2);
            // Streaming reads no weight through a mapping: parse, then drop it.
            kail::gguf_open_params op;
            op.map_data = mp.ram_budget == 0;
            // kvSource: a Model whose KV cache this one reads (model_params::kv_source: a Gemma 4
            // assistant draft over its target); this object keeps a reference to it.
            AddonModel * src = nullptr;
            const Napi::Value sv = info[2].IsObject() ? info[2].As<Napi::Object>().Get("kvSource") : env.Undefined();
            if (!sv.IsUndefined() && !sv.IsNull()) {
                bool is_model = false;
                if (sv.IsObject()) napi_check_object_type_tag(env, sv, &kModelTag, &is_model);
                if (!is_model) throw make_error(env, "KAIL_E_INVALID_ARG", "kvSource must be a Model");
                src = Napi::ObjectWrap<AddonModel>::Unwrap(sv.As<Napi::Object>());
                if (!src->model_) throw make_error(env, "KAIL_E_INVALID_ARG", "kvSource is a closed model");
                if (src->busy_) throw make_error(env, "KAIL_E_INVALID_ARG", "kvSource is running a forward pass");
                mp.kv_source = src->model_;
            }
            std::shared_ptr<kail::gguf_file> file(kail::gguf_file::open(path, op));
            model_ = std::make_shared<kail::model>(file, std::move(prog), mp);
            if (src) {
                src_ = src;
                src_ref_ = Napi::Persistent(sv.As<Napi::Object>());
            }
            napi_type_tag_object(env, info.This(), &kModelTag);
            return env.Undefined();
        });
    }

    std::shared_ptr<kail::model> model_;
    bool busy_ = false;
    // A draft over this model's cache (kvSource): its target, and on a target the drafts' forward
    // passes running now (its forward and cache changes wait for them: refused meanwhile).
    AddonModel * src_ = nullptr;
    Napi::ObjectReference src_ref_;
    int readers_ = 0;

  private:
    // Cache changes are refused during this model's forward and while a draft reads its cache.
    void check_mutable(Napi::Env env) {
        if (busy_) throw make_error(env, "KAIL_E_INVALID_ARG", "cannot change the KV cache during a forward pass");
        if (readers_ > 0) throw make_error(env, "KAIL_E_INVALID_ARG", "cannot change the KV cache while a draft model reads it (kvSource)");
    }

    kail::model & m(Napi::Env env) {
        if (!model_) throw make_error(env, "KAIL_E_INVALID_ARG", "model is closed");
        return *model_;
    }

    template <typename T, typename A>
    static std::vector<T> vec(Napi::Env env, Napi::Object o, const char * key) {
        Napi::Value v = o.Get(key);
        if (!v.IsTypedArray()) throw make_error(env, "KAIL_E_INVALID_ARG", std::string(key) + " must be a typed array");
        const napi_typedarray_type want = std::is_same<T, float>::value ? napi_float32_array
                                          : std::is_same<T, uint8_t>::value ? napi_uint8_array : napi_int32_array;
        if (v.As<Napi::TypedArray>().TypedArrayType() != want)
            throw make_error(env, "KAIL_E_INVALID_ARG", std::string(key) + " must be a " + (want == napi_float32_array ? "Float32Array" : want == napi_uint8_array ? "Uint8Array" : "Int32Array"));
        A a = v.As<A>();
        return std::vector<T>(a.Data(), a.Data() + a.ElementLength());
    }

    Napi::Value forward(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            m(env);
            if (busy_) throw make_error(env, "KAIL_E_INVALID_ARG", "a forward pass is already running on this model");
            if (readers_ > 0) throw make_error(env, "KAIL_E_INVALID_ARG", "a draft model is reading this model's KV cache (kvSource): its forward pass must end first");
            if (src_ && !src_->model_) throw make_error(env, "KAIL_E_INVALID_ARG", "this draft model reads another model's KV cache (kvSource), but its target was closed");
            if (src_ && src_->busy_) throw make_error(env, "KAIL_E_INVALID_ARG", "this draft model reads another model's KV cache (kvSource), whose forward pass is running");
            if (info.Length() < 1 || !info[0].IsObject()) throw make_error(env, "KAIL_E_INVALID_ARG", "batch must be an object");
            Napi::Object b = info[0].As<Napi::Object>();
            auto tokens = vec<int32_t, Napi::Int32Array>(env, b, "tokens");
            auto pos = vec<int32_t, Napi::Int32Array>(env, b, "pos");
            auto seq = vec<int32_t, Napi::Int32Array>(env, b, "seq");
            auto out = vec<uint8_t, Napi::Uint8Array>(env, b, "output");
            if (pos.size() != tokens.size() || seq.size() != tokens.size() || out.size() != tokens.size())
                throw make_error(env, "KAIL_E_INVALID_ARG", "tokens, pos, seq and output must have the same length");
            // Hidden-state rows in (a multi-token-prediction head's input) and out (the trunk's).
            std::vector<float> embd;
            int64_t embd_width = 0;
            if (b.Has("embd") && !b.Get("embd").IsUndefined() && !b.Get("embd").IsNull()) {
                embd = vec<float, Napi::Float32Array>(env, b, "embd");
                if (tokens.empty() || embd.size() % tokens.size() != 0)
                    throw make_error(env, "KAIL_E_INVALID_ARG", "embd must hold the same number of floats for every token");
                embd_width = static_cast<int64_t>(embd.size() / tokens.size());
            }
            const bool want_hidden = b.Has("hidden") && b.Get("hidden").ToBoolean().Value();
            busy_ = true;
            if (src_) src_->readers_++;
            auto * w = new ForwardWorker(env, model_, this, Value(), std::move(tokens), std::move(pos), std::move(seq), std::move(out),
                                         std::move(embd), embd_width, want_hidden);
            Napi::Promise p = w->promise();
            w->Queue();
            return p;
        });
    }

    Napi::Value seq_len(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            return Napi::Number::New(info.Env(), static_cast<double>(m(info.Env()).seq_len(static_cast<int>(arg_number(info, 0, "seq")))));
        });
    }
    Napi::Value seq_truncate(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            check_mutable(info.Env());
            const int64_t kept = m(info.Env()).seq_truncate(static_cast<int>(arg_number(info, 0, "seq")), static_cast<int64_t>(arg_number(info, 1, "len")));
            return Napi::Number::New(info.Env(), static_cast<double>(kept));
        });
    }
    Napi::Value set_lora_scales(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            if (busy_) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "cannot change LoRA scales during a forward pass");
            if (readers_ > 0) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "cannot change LoRA scales while a draft model reads this model (kvSource)");
            if (info.Length() < 2 || !info[1].IsArray()) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "setLoraScales(seq, scales[])");
            Napi::Array a = info[1].As<Napi::Array>();
            std::vector<float> scales;
            for (uint32_t k = 0; k < a.Length(); k++) {
                const Napi::Value v = a.Get(k);
                if (!v.IsNumber()) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "LoRA scales must be numbers");
                scales.push_back(v.As<Napi::Number>().FloatValue());
            }
            m(info.Env()).set_lora_scales(static_cast<int>(arg_number(info, 0, "seq")), scales);
            return info.Env().Undefined();
        });
    }
    Napi::Value n_lora(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), m(info.Env()).n_lora()); });
    }
    Napi::Value seq_shift(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            check_mutable(info.Env());
            const int64_t len = m(info.Env()).seq_shift(static_cast<int>(arg_number(info, 0, "seq")), static_cast<int64_t>(arg_number(info, 1, "keep")),
                                                        static_cast<int64_t>(arg_number(info, 2, "discard")));
            return Napi::Number::New(info.Env(), static_cast<double>(len));
        });
    }
    Napi::Value seq_state(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            if (busy_) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "cannot read the KV cache during a forward pass");
            const std::vector<uint8_t> s = m(info.Env()).seq_state(static_cast<int>(arg_number(info, 0, "seq")));
            return Napi::Buffer<uint8_t>::Copy(info.Env(), s.data(), s.size());
        });
    }
    Napi::Value set_seq_state(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            check_mutable(info.Env());
            if (info.Length() < 2 || !info[1].IsTypedArray()) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "setSeqState(seq, bytes: Uint8Array)");
            Napi::Uint8Array a = info[1].As<Napi::Uint8Array>();
            m(info.Env()).set_seq_state(static_cast<int>(arg_number(info, 0, "seq")), a.Data(), a.ByteLength());
            return info.Env().Undefined();
        });
    }
    Napi::Value seq_keep_rollback(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            check_mutable(info.Env());
            if (info.Length() < 2 || !info[1].IsBoolean()) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "seqKeepRollback(seq, on: boolean)");
            m(info.Env()).seq_keep_rollback(static_cast<int>(arg_number(info, 0, "seq")), info[1].As<Napi::Boolean>().Value());
            return info.Env().Undefined();
        });
    }
    Napi::Value seq_states(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            if (busy_) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "cannot read the recurrent states during a forward pass");
            const std::vector<float> s = m(info.Env()).seq_states(static_cast<int>(arg_number(info, 0, "seq")));
            Napi::Float32Array out = Napi::Float32Array::New(info.Env(), s.size());
            std::memcpy(out.Data(), s.data(), s.size() * sizeof(float));
            return out;
        });
    }
    Napi::Value seq_set_states(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            check_mutable(info.Env());
            if (info.Length() < 3 || !info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
                throw make_error(info.Env(), "KAIL_E_INVALID_ARG", "seqSetStates(seq, len, states: Float32Array)");
            Napi::Float32Array a = info[2].As<Napi::Float32Array>();
            const int64_t len = m(info.Env()).seq_set_states(static_cast<int>(arg_number(info, 0, "seq")), static_cast<int64_t>(arg_number(info, 1, "len")), a.Data(), a.ElementLength());
            return Napi::Number::New(info.Env(), static_cast<double>(len));
        });
    }
    Napi::Value seq_copy(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value {
            check_mutable(info.Env());
            m(info.Env()).seq_copy(static_cast<int>(arg_number(info, 0, "src")), static_cast<int>(arg_number(info, 1, "dst")));
            return info.Env().Undefined();
        });
    }
    Napi::Value stats(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            kail::model_stats s = m(env).stats();
            Napi::Object o = Napi::Object::New(env);
            o.Set("forwardCalls", Napi::Number::New(env, static_cast<double>(s.forward_calls)));
            o.Set("tokens", Napi::Number::New(env, static_cast<double>(s.tokens)));
            o.Set("computeSeconds", Napi::Number::New(env, s.compute_seconds));
            o.Set("kvBytes", Napi::Number::New(env, static_cast<double>(m(env).kv_bytes_used())));
            Napi::Float64Array counts = Napi::Float64Array::New(env, s.expert_counts.size());
            for (size_t i = 0; i < s.expert_counts.size(); i++) counts[i] = static_cast<double>(s.expert_counts[i]);
            o.Set("expertCounts", counts);
            o.Set("scratchBytes", Napi::Number::New(env, static_cast<double>(s.scratch_bytes)));
            o.Set("rollbackBytes", Napi::Number::New(env, static_cast<double>(s.rollback_bytes)));
            o.Set("stream", s.streaming ? Napi::Value(stream_to_js(env, s)) : env.Null());
            return o;
        });
    }
    Napi::Value plan(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            kail::model & mm = m(env);
            if (!mm.stats().streaming) return env.Null();
            return plan_to_js(env, mm.plan());
        });
    }
    // warmExperts(layers: Int32Array, experts: Int32Array, shares: Float64Array): hottest first.
    Napi::Value warm_experts(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            kail::model & mm = m(env);
            if (info.Length() < 3 || !info[0].IsTypedArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray())
                throw make_error(env, "KAIL_E_INVALID_ARG", "warmExperts(layers: Int32Array, experts: Int32Array, shares: Float64Array)");
            Napi::Int32Array l = info[0].As<Napi::Int32Array>(), e = info[1].As<Napi::Int32Array>();
            Napi::Float64Array sh = info[2].As<Napi::Float64Array>();
            if (l.ElementLength() != e.ElementLength() || sh.ElementLength() != e.ElementLength())
                throw make_error(env, "KAIL_E_INVALID_ARG", "warmExperts: layers, experts and shares differ in length");
            std::vector<kail::expert_key> keys(e.ElementLength());
            std::vector<double> shares(sh.Data(), sh.Data() + sh.ElementLength());
            for (size_t i = 0; i < keys.size(); i++) keys[i] = {l[i], e[i]};
            mm.warm_experts(keys, shares);
            return env.Undefined();
        });
    }
    // imatrixCollect(on: boolean): start (clearing) or stop gathering importance-matrix statistics.
    Napi::Value imatrix_collect(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            if (info.Length() < 1 || !info[0].IsBoolean()) throw make_error(env, "KAIL_E_INVALID_ARG", "imatrixCollect(on: boolean)");
            m(env).imatrix_collect(info[0].As<Napi::Boolean>().Value());
            return env.Undefined();
        });
    }
    // imatrixTake(clear = true): { [weight name]: { sums: Float32Array (n_mat * ne0), counts: Float64Array (n_mat) } },
    // cleared unless clear is false.
    Napi::Value imatrix_take(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            const bool clear = info.Length() < 1 || info[0].IsUndefined() || info[0].ToBoolean().Value();
            std::map<std::string, kail::imatrix_stats> all = m(env).imatrix_take(clear);
            Napi::Object o = Napi::Object::New(env);
            for (auto & [name, e] : all) {
                Napi::Object t = Napi::Object::New(env);
                Napi::Float32Array sums = Napi::Float32Array::New(env, e.sums.size());
                std::memcpy(sums.Data(), e.sums.data(), e.sums.size() * sizeof(float));
                Napi::Float64Array counts = Napi::Float64Array::New(env, e.counts.size());
                for (size_t i = 0; i < e.counts.size(); i++) counts[i] = static_cast<double>(e.counts[i]);
                t.Set("sums", sums);
                t.Set("counts", counts);
                o.Set(name, t);
            }
            return o;
        });
    }
    Napi::Value cancel(const Napi::CallbackInfo & info) {
        if (model_) model_->cancel();
        return info.Env().Undefined();
    }
    Napi::Value close(const Napi::CallbackInfo & info) {
        // A running forward keeps its own reference; the memory goes when it finishes.
        model_.reset();
        return info.Env().Undefined();
    }
    Napi::Value n_vocab(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), static_cast<double>(m(info.Env()).n_vocab())); });
    }
    Napi::Value n_threads(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), m(info.Env()).n_threads()); });
    }
    Napi::Value hidden_width(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), static_cast<double>(m(info.Env()).hidden_width())); });
    }
    Napi::Value input_width(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), static_cast<double>(m(info.Env()).input_width())); });
    }
    Napi::Value kv_per_token(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), static_cast<double>(m(info.Env()).kv_bytes_per_token())); });
    }
    Napi::Value kv_capacity(const Napi::CallbackInfo & info) {
        return guarded(info.Env(), [&]() -> Napi::Value { return Napi::Number::New(info.Env(), static_cast<double>(m(info.Env()).kv_bytes_capacity())); });
    }
};

void ForwardWorker::OnOK() {
    Napi::Env env = Env();
    owner_->busy_ = false;
    if (owner_->src_) owner_->src_->readers_--;
    if (err_.set) {
        deferred_.Reject(make_error(env, err_.code.c_str(), err_.message).Value());
        return;
    }
    Napi::Float32Array out = Napi::Float32Array::New(env, logits_.size());
    std::copy(logits_.begin(), logits_.end(), out.Data());
    if (!want_hidden_) {
        deferred_.Resolve(out);
        return;
    }
    Napi::Float32Array h = Napi::Float32Array::New(env, hidden_.size());
    std::copy(hidden_.begin(), hidden_.end(), h.Data());
    Napi::Object r = Napi::Object::New(env);
    r.Set("logits", out);
    r.Set("hidden", h);
    deferred_.Resolve(r);
}

void ForwardWorker::OnError(const Napi::Error & e) {
    owner_->busy_ = false;
    if (owner_->src_) owner_->src_->readers_--;
    deferred_.Reject(e.Value());
}

// planModel(path, program, params) -> the residency plan for params.ramBytes, from the tensor table
// alone (nothing is mapped or read).
Napi::Value plan_model(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        std::string path = arg_string(info, 0, "path");
        if (info.Length() < 2 || !info[1].IsObject()) throw make_error(env, "KAIL_E_INVALID_ARG", "program must be an object");
        kail::program prog = program_from_js(info[1].As<Napi::Object>());
        kail::model_params mp = params_from_js(info, 2);
        kail::gguf_open_params op;
        op.map_data = false;
        std::unique_ptr<kail::gguf_file> file = kail::gguf_file::open(path, op);
        return plan_to_js(env, kail::residency_plan_compute(*file, prog, mp));
    });
}

// kvCacheBytes(program, params) -> the KV cache at params.nCtx for params.nSeqMax sequences (the
// runtime's kv_bytes_capacity), so a load can be refused before anything is allocated.
Napi::Value kv_cache_bytes(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        if (info.Length() < 1 || !info[0].IsObject()) throw make_error(env, "KAIL_E_INVALID_ARG", "program must be an object");
        kail::program prog = program_from_js(info[0].As<Napi::Object>());
        kail::model_params mp = params_from_js(info, 1);
        kail::check_kv_type(prog, mp.kv_type, mp.kv_type_v);
        const uint64_t b = kail::kv_bytes_per_sequence(prog, mp.n_ctx, mp.n_batch, mp.kv_type, mp.kv_type_v, mp.swa_full) * static_cast<uint64_t>(std::max(0, mp.n_seq_max));
        return Napi::Number::New(env, static_cast<double>(b));
    });
}

} // namespace

void register_model(Napi::Env env, Napi::Object exports) {
    exports.Set("Model", AddonModel::define(env));
    exports.Set("planModel", Napi::Function::New(env, plan_model, "planModel"));
    exports.Set("kvCacheBytes", Napi::Function::New(env, kv_cache_bytes, "kvCacheBytes"));
}

} // namespace kail_addon
