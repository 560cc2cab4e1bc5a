#include "kail/cgroup.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kail {

namespace {

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    size_t b = 0;
    for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
    out.push_back(s.substr(b));
    return out;
}

bool has_token(const std::string & list, const char * tok) {
    for (auto & t : split(list, ',')) if (t == tok) return true;
    return false;
}

// mountinfo escapes a space, tab, newline and backslash as \ooo.
std::string unescape(const std::string & s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        auto digit = [&](size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
        if (s[i] == '\\' && digit(i + 1) && digit(i + 2) && digit(i + 3)) {
            out.push_back(static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8)));
            i += 3;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

// One group's quota in CPUs, 0 when it sets none.
double group_quota(const cgroup_dir & g) {
    bool ok = false;
    if (g.version == 2) {
        std::istringstream in(read_sys_file(g.path + "/cpu.max", ok));
        std::string quota;
        double period = 0;
        if (!ok || !(in >> quota >> period) || quota == "max" || period <= 0) return 0;
        double q = std::atof(quota.c_str());
        return q > 0 ? q / period : 0;
    }
    double q = std::atof(read_sys_file(g.path + "/cpu.cfs_quota_us", ok).c_str());
    if (!ok || q <= 0) return 0;
    double period = std::atof(read_sys_file(g.path + "/cpu.cfs_period_us", ok).c_str());
    return ok && period > 0 ? q / period : 0;
}

// A number file: "max" is no limit (-1); missing is -2.
double number_file(const std::string & path) {
    bool ok = false;
    std::string v = read_sys_file(path, ok);
    if (!ok) return -2;
    return v == "max" ? -1 : std::atof(v.c_str());
}

double stat_value(const std::string & stat, const std::string & key) {
    std::istringstream in(stat);
    std::string k;
    double v = 0, sum = 0;
    while (in >> k >> v) if (k == key) sum += v;
    return sum;
}

} // namespace

std::string read_sys_file(const std::string & path, bool & ok) {
    std::ifstream in(path);
    ok = static_cast<bool>(in);
    if (!ok) return {};
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::vector<cgroup_dir> cgroup_dirs(const char * controller, const std::string & fs_root) {
    std::vector<cgroup_dir> out;
    std::string root = fs_root;
    while (!root.empty() && root.back() == '/') root.pop_back();
    bool ok = false;
    std::string own_text = read_sys_file(root + "/proc/self/cgroup", ok);
    if (!ok) return out;
    std::string mounts = read_sys_file(root + "/proc/self/mountinfo", ok);
    if (!ok) return out;
    std::istringstream mi(mounts);
    std::string line;
    while (std::getline(mi, line)) {
        // "id parent maj:min root mountpoint opts [optional...] - fstype source superopts"
        std::vector<std::string> f = split(line, ' ');
        size_t dash = 5;
        while (dash < f.size() && f[dash] != "-") dash++;
        if (dash + 1 >= f.size()) continue;
        const std::string & fstype = f[dash + 1];
        std::string super = dash + 3 < f.size() ? f[dash + 3] : "";
        int version = fstype == "cgroup2" ? 2 : fstype == "cgroup" && has_token(super, controller) ? 1 : 0;
        if (!version) continue;
        // This process's group in that hierarchy: "0::/path" (v2), "N:cpu,cpuacct:/path" (v1).
        std::string own;
        bool found = false;
        std::istringstream oc(own_text);
        std::string l;
        while (!found && std::getline(oc, l)) {
            size_t a = l.find(':'), b = a == std::string::npos ? a : l.find(':', a + 1);
            if (b == std::string::npos) continue;
            std::string ctrls = l.substr(a + 1, b - a - 1);
            if (version == 2 ? ctrls.empty() : has_token(ctrls, controller)) { own = l.substr(b + 1); found = true; }
        }
        if (!found) continue;
        // Inside a cgroup namespace the mount's root is the group itself; on the host it is "/".
        std::string mroot = unescape(f[3]);
        std::string rel = mroot == "/" ? own : own == mroot || own.rfind(mroot + "/", 0) == 0 ? own.substr(mroot.size()) : "/";
        std::string top = root + unescape(f[4]);
        while (top.size() > 1 && top.back() == '/') top.pop_back();
        std::string dir = top + (rel == "/" ? "" : rel);
        for (;;) {
            out.push_back({dir, version});
            if (dir.size() <= top.size()) break;
            dir = dir.substr(0, dir.rfind('/'));
        }
    }
    return out;
}

double cgroup_cpu_quota(const std::string & fs_root) {
    double best = 0;
    for (auto & g : cgroup_dirs("cpu", fs_root)) {
        double q = group_quota(g);
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    return best;
}

bool cgroup_memory_limit_get(cgroup_memory_limit & out, const std::string & fs_root) {
    const double no_limit = 1152921504606846976.0; // 2^60: v1 writes LONG_MAX rounded to a page
    bool found = false;
    for (auto & g : cgroup_dirs("memory", fs_root)) {
        double limit;
        if (g.version == 2) {
            double mx = number_file(g.path + "/memory.max"), hi = number_file(g.path + "/memory.high");
            limit = -1;
            for (double v : {mx, hi}) if (v >= 0 && (limit < 0 || v < limit)) limit = v;
        } else {
            limit = number_file(g.path + "/memory.limit_in_bytes");
        }
        if (limit < 0 || limit >= no_limit) continue;
        double used = number_file(g.path + (g.version == 2 ? "/memory.current" : "/memory.usage_in_bytes"));
        if (used < 0) used = 0;
        bool ok = false;
        std::string stat = read_sys_file(g.path + "/memory.stat", ok);
        double file = g.version == 2 ? stat_value(stat, "active_file") + stat_value(stat, "inactive_file")
                                     : stat_value(stat, "total_active_file") + stat_value(stat, "total_inactive_file");
        double reclaimable = file < used ? file : used;
        double headroom = limit - (used - reclaimable);
        if (headroom < 0) headroom = 0;
        if (!found || headroom < out.headroom_bytes) {
            out = {g.path, g.version, limit, used, reclaimable, headroom};
            found = true;
        }
    }
    return found;
}

} // namespace kail
