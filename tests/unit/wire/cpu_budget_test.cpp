// The CPUs a process can use: its cgroup's CPU quota, read from a fake /proc and /sys tree in cgroup v2
// (the smallest quota along the cgroup's ancestors, inside a cgroup namespace or not) and v1 layouts,
// and none when nothing is set or the files are missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

namespace fs = std::filesystem;

class FakeTree {
 public:
  FakeTree() {
    char tmpl[] = "/tmp/cpu_budget_test.XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  ~FakeTree() { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) const {
    fs::create_directories(fs::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  double quota(std::string* source = nullptr) const { return cgroup_cpu_quota(root_, source); }

 private:
  std::string root_;
};

// A mountinfo line: mount id, parent, major:minor, root, mount point, options, "-", type, source,
// super options (proc(5)).
std::string mount_line(const std::string& root, const std::string& point, const std::string& type,
                       const std::string& super_options) {
  return "30 23 0:26 " + root + " " + point + " rw,nosuid,nodev,noexec,relatime shared:4 - " + type + " " +
         type + " " + super_options + "\n";
}

TEST(CpuBudget, CgroupV2TakesTheSmallestQuotaAlongTheAncestors) {
  FakeTree t;
  t.write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  t.write("/proc/self/mountinfo", mount_line("/", "/proc", "proc", "rw") +
                                      mount_line("/", "/sys/fs/cgroup", "cgroup2", "rw,nsdelegate"));
  t.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  t.write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "400000 100000\n");
  t.write("/sys/fs/cgroup/kubepods/cpu.max", "1200000 100000\n");
  std::string source;
  EXPECT_DOUBLE_EQ(t.quota(&source), 4.0);
  EXPECT_EQ(source, "/sys/fs/cgroup/kubepods/pod1/cpu.max");
}

TEST(CpuBudget, CgroupV2InsideACgroupNamespace) {
  FakeTree t;
  // A container with its own cgroup namespace sees its cgroup as "/" at the mount's top.
  t.write("/proc/self/cgroup", "0::/\n");
  t.write("/proc/self/mountinfo", mount_line("/", "/sys/fs/cgroup", "cgroup2", "rw"));
  t.write("/sys/fs/cgroup/cpu.max", "250000 100000\n");
  EXPECT_DOUBLE_EQ(t.quota(), 2.5);
}

TEST(CpuBudget, CgroupV1CpuHierarchy) {
  FakeTree t;
  t.write("/proc/self/cgroup", "5:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
  t.write("/proc/self/mountinfo",
          mount_line("/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") +
              mount_line("/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct") +
              mount_line("/", "/sys/fs/cgroup/unified", "cgroup2", "rw"));
  t.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  t.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  t.write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  t.write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  std::string source;
  EXPECT_DOUBLE_EQ(t.quota(&source), 1.5);
  EXPECT_EQ(source, "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us");
}

TEST(CpuBudget, CgroupV1MountedAtTheCgroupItself) {
  FakeTree t;
  // Docker without a cgroup namespace on v1: the mount's root is the container's cgroup.
  t.write("/proc/self/cgroup", "3:cpu,cpuacct:/docker/abc\n");
  t.write("/proc/self/mountinfo",
          mount_line("/docker/abc", "/sys/fs/cgroup/cpu", "cgroup", "rw,cpu,cpuacct"));
  t.write("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "800000\n");
  t.write("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(t.quota(), 8.0);
}

TEST(CpuBudget, NoQuota) {
  FakeTree t;
  EXPECT_EQ(t.quota(), 0.0) << "no /proc files at all";
  t.write("/proc/self/cgroup", "0::/user.slice\n");
  t.write("/proc/self/mountinfo", mount_line("/", "/sys/fs/cgroup", "cgroup2", "rw"));
  EXPECT_EQ(t.quota(), 0.0) << "no cpu.max (the cpu controller is not enabled)";
  t.write("/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  EXPECT_EQ(t.quota(), 0.0) << "cpu.max says max";
  t.write("/sys/fs/cgroup/user.slice/cpu.max", "garbage\n");
  EXPECT_EQ(t.quota(), 0.0) << "an unreadable cpu.max";
}

TEST(CpuBudget, ThisProcess) {
  const CpuBudget b = cpu_budget();
  EXPECT_GE(b.affinity, 1u);
  EXPECT_GE(b.usable, 1u);
  EXPECT_LE(b.usable, b.affinity);
  EXPECT_EQ(usable_cpus(), b.usable);
  if (b.quota_cpus > 0) {
    EXPECT_FALSE(b.quota_source.empty());
  }
  std::printf("[   NOTE   ] this process: %u CPUs in the affinity mask, quota %g (%s), usable %u\n",
              b.affinity, b.quota_cpus, b.quota_source.empty() ? "none" : b.quota_source.c_str(), b.usable);
}

}  // namespace
}  // namespace megascale::wire
