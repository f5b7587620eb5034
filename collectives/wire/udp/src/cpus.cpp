// The CPUs a process can use: its affinity mask capped by its cgroup's CPU quota (see udp.h).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream s(text);
  while (std::getline(s, item, sep)) out.push_back(item);
  return out;
}

bool has_item(const std::string& list, const std::string& item) {
  const std::vector<std::string> items = split(list, ',');
  return std::find(items.begin(), items.end(), item) != items.end();
}

// Where a hierarchy is mounted (proc(5), /proc/[pid]/mountinfo: "... root mount-point options ... -
// fstype source super-options"): cgroup2, or the cgroup v1 hierarchy holding the cpu controller.
struct Mount {
  std::string root, point;
};

bool find_mount(const std::string& mountinfo, bool v2, Mount& out) {
  std::istringstream lines(mountinfo);
  std::string line;
  while (std::getline(lines, line)) {
    const std::vector<std::string> f = split(line, ' ');
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string& fstype = *(dash + 1);
    const std::string& super_options = *(dash + 3);
    if ((v2 && fstype == "cgroup2") || (!v2 && fstype == "cgroup" && has_item(super_options, "cpu"))) {
      out = Mount{f[3], f[4]};
      return true;
    }
  }
  return false;
}

// The cgroup's directory: the mount point plus the process's cgroup path below the mount's root.
std::string cgroup_dir(const std::string& prefix, const Mount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && rel.compare(0, m.root.size(), m.root) == 0) rel = rel.substr(m.root.size());
  if (!rel.empty() && rel.back() == '/') rel.pop_back();
  return prefix + m.point + (rel == "/" ? "" : rel);
}

// CPUs the quota in `dir` allows (quota / period), 0 for none: v2's cpu.max "max 100000" or "200000
// 100000", v1's cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.
double quota_in(const std::string& dir, bool v2) {
  double quota = -1, period = 0;
  if (v2) {
    std::istringstream s(read_text(dir + "/cpu.max"));
    std::string q;
    if (!(s >> q >> period) || q == "max") return 0;
    quota = std::strtod(q.c_str(), nullptr);
  } else {
    std::istringstream q(read_text(dir + "/cpu.cfs_quota_us"));
    std::istringstream p(read_text(dir + "/cpu.cfs_period_us"));
    if (!(q >> quota) || !(p >> period)) return 0;
  }
  return quota > 0 && period > 0 ? quota / period : 0;
}

}  // namespace

double cgroup_cpu_quota(const std::string& prefix, std::string* source) {
  // /proc/self/cgroup (cgroups(7)): "0::/path" for cgroup v2, "N:controller,...:/path" for v1.
  const std::string cgroups = read_text(prefix + "/proc/self/cgroup");
  const std::string mountinfo = read_text(prefix + "/proc/self/mountinfo");
  double best = 0;
  std::istringstream lines(cgroups);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    if (!v2 && !has_item(controllers, "cpu")) continue;
    Mount m;
    if (!find_mount(mountinfo, v2, m)) continue;
    // The limit that binds is the smallest along the cgroup and its ancestors up to the mount.
    const std::string top = prefix + m.point;
    for (std::string dir = cgroup_dir(prefix, m, line.substr(b + 1));; dir = dir.substr(0, dir.rfind('/'))) {
      const double q = quota_in(dir, v2);
      if (q > 0 && (best == 0 || q < best)) {
        best = q;
        if (source != nullptr) *source = dir.substr(prefix.size()) + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us");
      }
      if (dir.size() <= top.size() || dir.rfind('/') == std::string::npos) break;
    }
  }
  return best;
}

CpuBudget cpu_budget() {
  CpuBudget b;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    b.affinity = static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
  } else {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    b.affinity = n > 0 ? static_cast<unsigned>(n) : 1u;
  }
  b.quota_cpus = cgroup_cpu_quota("", &b.quota_source);
  b.usable = b.affinity;
  if (b.quota_cpus > 0) {
    b.usable = std::min(b.usable, std::max(1u, static_cast<unsigned>(std::ceil(b.quota_cpus))));
  }
  return b;
}

std::string CpuBudget::note() const {
  if (quota_cpus <= 0 || usable >= affinity) return {};
  std::ostringstream s;
  s << "cgroup CPU quota " << quota_cpus << " in " << quota_source << ", " << affinity
    << " in the affinity mask";
  return s.str();
}

unsigned usable_cpus() {
  return cpu_budget().usable;
}

}  // namespace megascale::wire
