// CPU features detected at run time (cpuid + xgetbv), used to pick kernels.
#pragma once

#include <string>
#include <vector>

namespace kail {

struct cpu_features {
    bool sse3 = false, ssse3 = false, sse4_1 = false, sse4_2 = false;
    bool avx = false, avx2 = false, fma = false, f16c = false;
    bool avx_vnni = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512_vnni = false, avx512_bf16 = false;
    bool neon = false;
    // CPUs this process may run on (its affinity mask: taskset, a container's cpuset), and the
    // distinct physical cores among them; online_cores counts every CPU the kernel has online.
    int  logical_cores = 1;
    int  physical_cores = 1;
    int  online_cores = 1;
    // CPU time a cgroup allows this process, in CPUs (cgroup_cpu_quota in cgroup.h); 0: none.
    double cpu_quota = 0;
    // Compute threads when none are asked for: the physical cores, at most the quota (at least 1).
    int  default_threads = 1;
};

// Distinct (physical id, core id) pairs among the processors of /proc/cpuinfo's text that are in
// `allowed` (every processor when it is empty); 0 when the text names no cores (then count CPUs).
int count_physical_cores(const std::string & cpuinfo, const std::vector<int> & allowed);

// Detected once and cached; thread-safe.
const cpu_features & cpu_features_get();

// Names of the features present, e.g. {"avx2","fma","avx512f",...}.
std::vector<std::string> cpu_features_names(const cpu_features & f);

// The best kernel level this build can use on this CPU: "avx512", "avx2" or "scalar".
// KAIL_FORCE_ISA=scalar|avx2|avx2-novnni|avx512 lowers it (never raises it beyond what the CPU has).
const char * cpu_kernel_level();

// Whether the AVX2 level's kernels may use AVX-VNNI: the CPU has it and KAIL_FORCE_ISA is not
// avx2-novnni (the kernels of CPUs without it, measured and checked on one that has it).
bool cpu_avx2_vnni();

} // namespace kail
