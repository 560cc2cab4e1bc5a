#include "kail/cgroup.h"
#include "kail/cpu_features.h"
#include "kail/types.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// A fake /proc and /sys under a temp directory, for cgroup_cpu_quota.
struct fake_root {
    fs::path dir;
    fake_root() {
        char tmpl[] = "/tmp/kail-cpu-XXXXXX";
        dir = mkdtemp(tmpl);
    }
    ~fake_root() { std::error_code ec; fs::remove_all(dir, ec); }
    void put(const std::string & rel, const std::string & text) {
        fs::path p = dir / rel;
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text;
    }
};

int check_quota(const char * what, double got, double want) {
    if (got > want - 1e-9 && got < want + 1e-9) return 0;
    std::fprintf(stderr, "cgroup_cpu_quota %s: %g, expected %g\n", what, got, want);
    return 1;
}

int test_cpu_limits() {
    int fails = 0;
    // /proc/cpuinfo of 2 sockets x 2 cores x 2 threads; CPUs 0-7, siblings (0,4) (1,5) (2,6) (3,7).
    std::string info;
    for (int p = 0; p < 8; p++)
        info += "processor\t: " + std::to_string(p) + "\nvendor_id\t: x\nphysical id\t: " + std::to_string((p % 4) / 2) +
                "\ncore id\t\t: " + std::to_string(p % 2) + "\n\n";
    struct { std::vector<int> allowed; int want; } cases[] = {{{}, 4}, {{0, 4}, 1}, {{0, 1, 4, 5}, 2}, {{0, 2}, 2}, {{3}, 1}};
    for (auto & c : cases)
        if (kail::count_physical_cores(info, c.allowed) != c.want) {
            std::fprintf(stderr, "count_physical_cores over %zu CPUs: %d, expected %d\n", c.allowed.size(), kail::count_physical_cores(info, c.allowed), c.want);
            fails++;
        }
    if (kail::count_physical_cores("processor : 0\nBogoMIPS : 50\n", {}) != 0) { std::fprintf(stderr, "cores counted without core ids\n"); fails++; }

    const std::string v2 = "30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    {   // v2: the tighter of the group's and its parent's cpu.max.
        fake_root r;
        r.put("proc/self/cgroup", "0::/kube/pod1\n");
        r.put("proc/self/mountinfo", v2);
        r.put("sys/fs/cgroup/kube/cpu.max", "250000 100000\n");
        r.put("sys/fs/cgroup/kube/pod1/cpu.max", "max 100000\n");
        fails += check_quota("v2 parent", kail::cgroup_cpu_quota(r.dir.string()), 2.5);
        r.put("sys/fs/cgroup/kube/pod1/cpu.max", "150000 100000\n");
        fails += check_quota("v2 child", kail::cgroup_cpu_quota(r.dir.string()), 1.5);
    }
    {   // v1 inside a container: the mount's root is the container's group.
        fake_root r;
        r.put("proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
        r.put("proc/self/mountinfo", "31 30 0:28 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n"
                                     "32 30 0:29 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
        r.put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "200000\n");
        r.put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
        fails += check_quota("v1 container", kail::cgroup_cpu_quota(r.dir.string()), 2);
        r.put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
        fails += check_quota("v1 unlimited", kail::cgroup_cpu_quota(r.dir.string()), 0);
    }
    {   // No quota anywhere, and no /proc at all.
        fake_root r;
        r.put("proc/self/cgroup", "0::/user.slice\n");
        r.put("proc/self/mountinfo", v2);
        r.put("sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
        fails += check_quota("v2 max", kail::cgroup_cpu_quota(r.dir.string()), 0);
        fails += check_quota("no proc", kail::cgroup_cpu_quota((r.dir / "nothing").string()), 0);
    }
    return fails;
}

} // namespace

int main() {
    const kail::cpu_features & f = kail::cpu_features_get();
    int fails = 0;
    if (f.logical_cores < 1 || f.physical_cores < 1 || f.physical_cores > f.logical_cores || f.logical_cores > f.online_cores) {
        std::fprintf(stderr, "bad core counts %d/%d/%d\n", f.physical_cores, f.logical_cores, f.online_cores);
        fails++;
    }
    if (f.default_threads < 1 || f.default_threads > f.physical_cores || (f.cpu_quota > 0 && f.default_threads > std::max(1.0, f.cpu_quota))) {
        std::fprintf(stderr, "bad default threads %d (physical %d, quota %g)\n", f.default_threads, f.physical_cores, f.cpu_quota);
        fails++;
    }
    fails += test_cpu_limits();
    // Implications that hold on every real CPU: a kernel level never exceeds what was detected.
    const char * lvl = kail::cpu_kernel_level();
    if (std::strcmp(lvl, "avx512") == 0 && !(f.avx512f && f.avx2)) { std::fprintf(stderr, "avx512 level without avx512f\n"); fails++; }
    if (std::strcmp(lvl, "avx2") == 0 && !f.avx2) { std::fprintf(stderr, "avx2 level without avx2\n"); fails++; }
    if (f.avx2 && !f.avx) { std::fprintf(stderr, "avx2 without avx\n"); fails++; }
    std::printf("kernel level %s, cores %d physical / %d logical of %d online, quota %g, default threads %d, features:", lvl, f.physical_cores, f.logical_cores, f.online_cores, f.cpu_quota, f.default_threads);
    for (auto & n : kail::cpu_features_names(f)) std::printf(" %s", n.c_str());
    std::printf("\n");
    // Type table: ggml's block layouts.
    struct { uint32_t t; int64_t bs; size_t ts; } expect[] = {
        {kail::KAIL_TYPE_F32, 1, 4}, {kail::KAIL_TYPE_F16, 1, 2}, {kail::KAIL_TYPE_BF16, 1, 2},
        {kail::KAIL_TYPE_Q4_0, 32, 18}, {kail::KAIL_TYPE_Q4_1, 32, 20}, {kail::KAIL_TYPE_Q5_0, 32, 22},
        {kail::KAIL_TYPE_Q5_1, 32, 24}, {kail::KAIL_TYPE_Q8_0, 32, 34}, {kail::KAIL_TYPE_Q2_K, 256, 84},
        {kail::KAIL_TYPE_Q3_K, 256, 110}, {kail::KAIL_TYPE_Q4_K, 256, 144}, {kail::KAIL_TYPE_Q5_K, 256, 176},
        {kail::KAIL_TYPE_Q6_K, 256, 210}, {kail::KAIL_TYPE_Q8_K, 256, 292},
    };
    for (auto & e : expect) {
        const kail::type_traits * tr = kail::type_traits_get(e.t);
        if (!tr || tr->block_size != e.bs || tr->type_size != e.ts) {
            std::fprintf(stderr, "type %u has wrong traits\n", e.t);
            fails++;
        }
    }
    if (kail::type_traits_get(4) != nullptr || kail::type_traits_get(1000) != nullptr) { std::fprintf(stderr, "retired/unknown id accepted\n"); fails++; }
    if (kail::row_size(kail::KAIL_TYPE_Q4_K, 512) != 288 || kail::row_size(kail::KAIL_TYPE_Q4_K, 100) != 0) { std::fprintf(stderr, "row_size wrong\n"); fails++; }
    return fails ? 1 : 0;
}
