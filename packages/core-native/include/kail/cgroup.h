// What the cgroups over this process allow it: CPU time (a quota) and memory (a limit). A
// container's limits (docker --cpus/--memory, a Kubernetes pod's limits) are cgroups, and neither
// /proc/cpuinfo nor /proc/meminfo shows them. Both cgroup v2 and v1 hierarchies are read, through
// /proc/self/cgroup and /proc/self/mountinfo (a cgroup namespace's root or the host's view), from
// the process's group up to the hierarchy's root, keeping the tightest group. fs_root (a fake
// /proc and /sys) is for tests.
#pragma once

#include <string>
#include <vector>

namespace kail {

// The whole text of a small /proc or /sys file, trailing newlines and spaces dropped; ok = false
// (and "") when it cannot be read.
std::string read_sys_file(const std::string & path, bool & ok);

struct cgroup_dir {
    std::string path;
    int version = 2; // 1 or 2
};

// The process's groups in every hierarchy that has `controller` ("cpu", "memory"; v2 always
// counts), innermost first, each up to its hierarchy's mount point. Empty when none can be read.
std::vector<cgroup_dir> cgroup_dirs(const char * controller, const std::string & fs_root = "/");

// The tightest CPU quota over those groups, in CPUs: v2 cpu.max, v1 cpu.cfs_quota_us /
// cpu.cfs_period_us; 0 when none is set.
double cgroup_cpu_quota(const std::string & fs_root = "/");

struct cgroup_memory_limit {
    std::string dir;  // the group leaving the least room
    int version = 0;
    double limit_bytes = 0;       // v2 memory.max or memory.high when lower; v1 memory.limit_in_bytes
    double used_bytes = 0;        // memory.current / memory.usage_in_bytes, page cache included
    double reclaimable_bytes = 0; // its file page cache (active + inactive), reclaimed before an OOM kill
    double headroom_bytes = 0;    // limit - (used - reclaimable), at least 0
};

// The group leaving the least memory headroom; false when no group sets a limit.
bool cgroup_memory_limit_get(cgroup_memory_limit & out, const std::string & fs_root = "/");

} // namespace kail
