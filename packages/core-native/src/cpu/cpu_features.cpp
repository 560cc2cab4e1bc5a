#include "kail/cpu_features.h"

#include "kail/cgroup.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#ifdef __linux__
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define KAIL_X86 1
#endif

namespace kail {

namespace {

#if KAIL_X86
void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

unsigned long long xgetbv0() {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<unsigned long long>(edx) << 32) | eax;
}
#endif

// CPUs in this thread's affinity mask (empty when it cannot be read).
std::vector<int> allowed_cpus() {
    std::vector<int> ids;
#ifdef __linux__
    const int max_cpus = 8192;
    cpu_set_t * set = CPU_ALLOC(max_cpus);
    size_t size = CPU_ALLOC_SIZE(max_cpus);
    if (set && sched_getaffinity(0, size, set) == 0)
        for (int i = 0; i < max_cpus; i++) if (CPU_ISSET_S(i, size, set)) ids.push_back(i);
    if (set) CPU_FREE(set);
#endif
    return ids;
}

} // namespace

int count_physical_cores(const std::string & cpuinfo, const std::vector<int> & allowed) {
    std::set<std::pair<int, int>> cores;
    std::set<int> ok(allowed.begin(), allowed.end());
    int proc = -1, phys = 0;
    std::istringstream in(cpuinfo);
    std::string line;
    auto value = [&] { size_t c = line.find(':'); return c == std::string::npos ? -1 : std::atoi(line.c_str() + c + 1); };
    while (std::getline(in, line)) {
        if (line.rfind("processor", 0) == 0) proc = value();
        else if (line.rfind("physical id", 0) == 0) phys = value();
        else if (line.rfind("core id", 0) == 0 && (ok.empty() || ok.count(proc))) cores.insert({phys, value()});
    }
    return static_cast<int>(cores.size());
}

namespace {

cpu_features detect() {
    cpu_features f;
    unsigned hc = std::thread::hardware_concurrency();
    f.online_cores = hc ? static_cast<int>(hc) : 1;
    std::vector<int> allowed = allowed_cpus();
    f.logical_cores = allowed.empty() ? f.online_cores : static_cast<int>(allowed.size());
    bool ok = false;
    int physical = count_physical_cores(read_sys_file("/proc/cpuinfo", ok), allowed);
    f.physical_cores = physical > 0 && physical < f.logical_cores ? physical : f.logical_cores;
    f.cpu_quota = cgroup_cpu_quota("/");
    f.default_threads = f.physical_cores;
    if (f.cpu_quota > 0) f.default_threads = std::max(1, std::min(f.default_threads, static_cast<int>(f.cpu_quota + 1e-6)));
#if KAIL_X86
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    cpuid(1, 0, r);
    f.sse3 = r[2] & (1u << 0);
    f.ssse3 = r[2] & (1u << 9);
    f.fma = r[2] & (1u << 12);
    f.sse4_1 = r[2] & (1u << 19);
    f.sse4_2 = r[2] & (1u << 20);
    bool osxsave = r[2] & (1u << 27);
    bool avx_cpu = r[2] & (1u << 28);
    f.f16c = r[2] & (1u << 29);
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;
    bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
    f.avx = avx_cpu && os_avx;
    if (!f.avx) { f.fma = false; f.f16c = false; }
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        f.avx2 = f.avx && (r[1] & (1u << 5));
        f.avx512f = os_avx512 && (r[1] & (1u << 16));
        f.avx512dq = f.avx512f && (r[1] & (1u << 17));
        f.avx512bw = f.avx512f && (r[1] & (1u << 30));
        f.avx512vl = f.avx512f && (r[1] & (1u << 31));
        f.avx512_vnni = f.avx512f && (r[2] & (1u << 11));
        cpuid(7, 1, r);
        f.avx_vnni = f.avx2 && (r[0] & (1u << 4));
        f.avx512_bf16 = f.avx512f && (r[0] & (1u << 5));
    }
#elif defined(__aarch64__)
    f.neon = true;
#endif
    return f;
}

} // namespace

const cpu_features & cpu_features_get() {
    static const cpu_features f = detect();
    return f;
}

std::vector<std::string> cpu_features_names(const cpu_features & f) {
    std::vector<std::string> out;
    auto add = [&](bool on, const char * name) { if (on) out.emplace_back(name); };
    add(f.sse3, "sse3"); add(f.ssse3, "ssse3"); add(f.sse4_1, "sse4_1"); add(f.sse4_2, "sse4_2");
    add(f.avx, "avx"); add(f.avx2, "avx2"); add(f.fma, "fma"); add(f.f16c, "f16c");
    add(f.avx_vnni, "avx_vnni");
    add(f.avx512f, "avx512f"); add(f.avx512bw, "avx512bw"); add(f.avx512vl, "avx512vl");
    add(f.avx512dq, "avx512dq"); add(f.avx512_vnni, "avx512_vnni"); add(f.avx512_bf16, "avx512_bf16");
    add(f.neon, "neon");
    return out;
}

const char * cpu_kernel_level() {
    static const char * level = [] {
        const cpu_features & f = cpu_features_get();
        int best = 0; // 0 scalar, 1 avx2, 2 avx512
        if (f.avx2 && f.fma && f.f16c) best = 1;
        if (best == 1 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) best = 2;
        if (const char * force = std::getenv("KAIL_FORCE_ISA")) {
            int want = std::strcmp(force, "scalar") == 0 ? 0 : std::strcmp(force, "avx2") == 0 || std::strcmp(force, "avx2-novnni") == 0 ? 1 : 2;
            if (want < best) best = want;
        }
        return best == 2 ? "avx512" : best == 1 ? "avx2" : "scalar";
    }();
    return level;
}

bool cpu_avx2_vnni() {
    static const bool vnni = [] {
        const char * force = std::getenv("KAIL_FORCE_ISA");
        return cpu_features_get().avx_vnni && !(force && std::strcmp(force, "avx2-novnni") == 0);
    }();
    return vnni;
}

} // namespace kail
