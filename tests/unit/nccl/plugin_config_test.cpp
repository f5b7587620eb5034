// The plugin's MEGASCALE_* variables (collectives/nccl/src/config.h): defaults, every knob parsed into
// its field, and every bad value refused with a message naming the variable, the value and what is
// allowed (NCCL shows it as the WARN that explains a failed init).
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "config.h"

namespace megascale::nccl {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  GetEnvFn fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

Result<PluginConfig> load(const std::map<std::string, std::string>& vars) {
  FakeEnv env{vars};
  return load_plugin_config(env.fn());
}

// The error for one variable set to one value.
std::string error_for(const std::string& name, const std::string& value) {
  auto c = load({{name, value}});
  return c ? std::string("(accepted)") : c.error().message;
}

TEST(PluginConfig, DefaultsWithAnEmptyEnvironment) {
  auto c = load({});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc_source, "hybrid");
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kHybrid);
  EXPECT_EQ(c->lanes, 4u);
  EXPECT_EQ(c->segment_bytes, 0u);  // from the MTU
  EXPECT_EQ(c->retry_budget_ns, cc::RtoParams{}.retry_budget_ns);
  EXPECT_EQ(c->cc.rto.retry_budget_ns, c->retry_budget_ns);
  EXPECT_EQ(c->traffic_class, -1);
  EXPECT_TRUE(c->ifname.empty());
  EXPECT_TRUE(c->stats_dir.empty());
  EXPECT_EQ(c->threads_per_device, 4u);
  EXPECT_FALSE(c->busy_poll);
  EXPECT_EQ(c->test_poll_ns, 8'000);
  EXPECT_FALSE(c->fault.enabled());
  // Every knob is echoed once, marked as a default.
  EXPECT_TRUE(c->source_ports.empty());
  ASSERT_EQ(c->echo.size(), 14u);
  for (const std::string& line : c->echo) {
    EXPECT_EQ(line.rfind("MEGASCALE_", 0), 0u) << line;
    EXPECT_NE(line.find("(default)"), std::string::npos) << line;
  }
}

// The config loaded while this thread may run on n CPUs only (its affinity, restored afterwards).
Result<PluginConfig> load_with_cpus(int n, const std::map<std::string, std::string>& vars) {
  cpu_set_t saved, set;
  EXPECT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&set);
  for (int cpu = 0, added = 0; cpu < CPU_SETSIZE && added < n; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &set);
      ++added;
    }
  }
  EXPECT_EQ(CPU_COUNT(&set), n);
  EXPECT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
  auto c = load(vars);
  EXPECT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  return c;
}

// Unset, MEGASCALE_IO_THREADS follows the CPUs the calling thread may run on: 0 below
// kIoThreadsMinCpus, 2 from there.
uint32_t default_io_threads_with_cpus(int n) {
  auto c = load_with_cpus(n, {});
  EXPECT_TRUE(c) << c.error().message;
  return c ? c->io_threads : 99u;
}

int usable_cpus_now() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

TEST(PluginConfig, IoThreadsDefaultIsZeroOnFewCpus) {
  EXPECT_EQ(default_io_threads_with_cpus(1), 0u);
  const int below = std::min(usable_cpus_now(), static_cast<int>(kIoThreadsMinCpus) - 1);
  EXPECT_EQ(default_io_threads_with_cpus(below), 0u);
}

TEST(PluginConfig, IoThreadsDefaultIsTwoOnEnoughCpus) {
  if (usable_cpus_now() < static_cast<int>(kIoThreadsMinCpus)) {
    GTEST_SKIP() << "needs " << kIoThreadsMinCpus << " usable CPUs, this host gives " << usable_cpus_now();
  }
  EXPECT_EQ(default_io_threads_with_cpus(static_cast<int>(kIoThreadsMinCpus)), 2u);
}

// Set by hand to more spinning wire threads than CPUs: valid, but warned about, naming the variable.
TEST(PluginConfig, IoThreadsBeyondTheCpusAreWarnedAbout) {
  auto over = load_with_cpus(1, {{"MEGASCALE_IO_THREADS", "2"}, {"MEGASCALE_NTHREADS", "1"}});
  ASSERT_TRUE(over) << over.error().message;
  EXPECT_EQ(over->io_threads, 2u);
  ASSERT_EQ(over->warnings.size(), 1u);
  EXPECT_NE(over->warnings[0].find("MEGASCALE_IO_THREADS=2: 3 wire threads"), std::string::npos)
      << over->warnings[0];
  EXPECT_NE(over->warnings[0].find("on 1 usable CPUs"), std::string::npos) << over->warnings[0];
  auto off = load_with_cpus(1, {{"MEGASCALE_IO_THREADS", "0"}});
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_TRUE(off->warnings.empty());
  auto unset = load_with_cpus(1, {});
  ASSERT_TRUE(unset) << unset.error().message;
  EXPECT_TRUE(unset->warnings.empty());
  if (usable_cpus_now() >= 3) {  // 1 wire x (1 + 2) threads fit
    auto fits = load_with_cpus(3, {{"MEGASCALE_IO_THREADS", "2"}, {"MEGASCALE_NTHREADS", "1"}});
    ASSERT_TRUE(fits) << fits.error().message;
    EXPECT_TRUE(fits->warnings.empty());
  }
}

TEST(PluginConfig, EveryKnobReachesItsField) {
  auto c = load({{"MEGASCALE_CC", "swift"},
                 {"MEGASCALE_LANES", "8"},
                 {"MEGASCALE_SEGMENT_BYTES", "4000"},
                 {"MEGASCALE_RETRY_BUDGET_S", "2.5"},
                 {"MEGASCALE_TC", "106"},
                 {"MEGASCALE_IFNAME", "^docker,lo"},
                 {"MEGASCALE_STATS_INTERVAL_S", "0.5"},
                 {"MEGASCALE_NTHREADS", "3"},
                 {"MEGASCALE_IO_THREADS", "2"},
                 {"MEGASCALE_BUSY_POLL", "1"},
                 {"MEGASCALE_TEST_POLL_US", "0"},
                 {"MEGASCALE_FAULT_DROP", "0.01"},
                 {"MEGASCALE_FAULT_SEED", "7"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kSwift);
  EXPECT_EQ(c->lanes, 8u);
  EXPECT_EQ(c->segment_bytes, 4000u);
  EXPECT_EQ(c->retry_budget_ns, 2'500'000'000);
  EXPECT_EQ(c->cc.rto.retry_budget_ns, 2'500'000'000);  // the engine's RTO gives up on this budget
  EXPECT_EQ(c->traffic_class, 106);
  EXPECT_EQ(c->ifname, "^docker,lo");
  EXPECT_EQ(c->stats_interval_ns, 500'000'000);
  EXPECT_EQ(c->threads_per_device, 3u);
  EXPECT_EQ(c->io_threads, 2u);
  EXPECT_TRUE(c->busy_poll);
  EXPECT_EQ(c->test_poll_ns, 0);
  EXPECT_DOUBLE_EQ(c->fault.drop, 0.01);
  EXPECT_EQ(c->fault.seed, 7u);
  bool lanes_echoed = false;
  for (const std::string& line : c->echo) lanes_echoed |= line == "MEGASCALE_LANES=8 (environment)";
  EXPECT_TRUE(lanes_echoed);
}

TEST(PluginConfig, CcTakesAYamlFile) {
  const std::string path = ::testing::TempDir() + "/plugin_cc_test.yaml";
  {
    std::ofstream out(path);
    out << "controller: fixed\nfixed:\n  window_packets: 32\n";
  }
  auto c = load({{"MEGASCALE_CC", path}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kFixedWindow);
  EXPECT_DOUBLE_EQ(c->cc.fixed.window_packets, 32);
  std::remove(path.c_str());
}

// One knob of the preset from the environment, on top of MEGASCALE_CC, echoed in the INFO lines.
TEST(PluginConfig, PerKeyCcVariablesTuneThePreset) {
  auto c = load({{"MEGASCALE_CC", "swift"}, {"MEGASCALE_CC_SWIFT_BASE_TARGET_US", "50"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kSwift);
  EXPECT_EQ(c->cc.swift.base_target_ns, 50'000);
  bool echoed = false;
  for (const std::string& line : c->echo)
    echoed |= line == "MEGASCALE_CC_SWIFT_BASE_TARGET_US=50 (environment)";
  EXPECT_TRUE(echoed);
  const std::string message = error_for("MEGASCALE_CC_SWIFT_BETA", "7");
  EXPECT_NE(message.find("MEGASCALE_CC_SWIFT_BETA=7"), std::string::npos) << message;
}

TEST(PluginConfig, BadValuesAreRefusedNamingVariableAndValue) {
  struct Case {
    const char* name;
    const char* value;
    const char* allowed;  // part of the message saying what is allowed
  };
  const Case cases[] = {
      {"MEGASCALE_LANES", "0", "1..64"},
      {"MEGASCALE_LANES", "65", "1..64"},
      {"MEGASCALE_LANES", "4x", "1..64"},
      {"MEGASCALE_SEGMENT_BYTES", "10", "64..65000"},
      {"MEGASCALE_SEGMENT_BYTES", "70000", "64..65000"},
      {"MEGASCALE_RETRY_BUDGET_S", "0", "seconds"},
      {"MEGASCALE_RETRY_BUDGET_S", "-1", "seconds"},
      {"MEGASCALE_RETRY_BUDGET_S", "nan", "seconds"},
      {"MEGASCALE_RETRY_BUDGET_S", "1e9", "seconds"},
      {"MEGASCALE_TC", "256", "0..255"},
      {"MEGASCALE_TC", "-3", "0..255"},
      {"MEGASCALE_STATS_INTERVAL_S", "soon", "seconds"},
      {"MEGASCALE_NTHREADS", "0", "1..16"},
      {"MEGASCALE_IO_THREADS", "65", "0..64"},
      {"MEGASCALE_BUSY_POLL", "maybe", "0 or 1"},
      {"MEGASCALE_TEST_POLL_US", "-1", "0..10000"},
      {"MEGASCALE_CC", "no-such-preset", ""},
      {"MEGASCALE_FAULT_DROP", "1.5", "[0, 1]"},
  };
  for (const Case& k : cases) {
    const std::string message = error_for(k.name, k.value);
    EXPECT_NE(message.find(std::string(k.name) + "=" + k.value), std::string::npos) << message;
    EXPECT_NE(message.find(k.allowed), std::string::npos) << message;
  }
}

TEST(PluginConfig, SourcePortsNeedOnePerLaneAndOneWirePerDevice) {
  auto c = load({{"MEGASCALE_SOURCE_PORTS", "49152,49170,50001,60000"}, {"MEGASCALE_NTHREADS", "1"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->source_ports, (std::vector<uint16_t>{49152, 49170, 50001, 60000}));
  bool echoed = false;
  for (const std::string& line : c->echo) {
    echoed |= line == "MEGASCALE_SOURCE_PORTS=49152,49170,50001,60000 (environment)";
  }
  EXPECT_TRUE(echoed);
  struct Case {
    std::map<std::string, std::string> vars;
    const char* value;
    const char* why;
  };
  const Case cases[] = {
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,3,4"}}, "1,2,3,4", "MEGASCALE_NTHREADS=1 (now 4)"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,3"}, {"MEGASCALE_NTHREADS", "1"}},
       "1,2,3",
       "3 ports for MEGASCALE_LANES=4"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2"}, {"MEGASCALE_NTHREADS", "1"}, {"MEGASCALE_LANES", "2"}},
       "",
       "(accepted)"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,2,4"}, {"MEGASCALE_NTHREADS", "1"}}, "1,2,2,4", "listed twice"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,0,3,4"}, {"MEGASCALE_NTHREADS", "1"}}, "1,0,3,4", "'0' is not a port"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,x,4"}, {"MEGASCALE_NTHREADS", "1"}}, "1,2,x,4", "'x' is not a port"},
      {{{"MEGASCALE_SOURCE_PORTS", "70000"}, {"MEGASCALE_NTHREADS", "1"}, {"MEGASCALE_LANES", "1"}},
       "70000",
       "1..65535"},
  };
  for (const Case& k : cases) {
    auto r = load(k.vars);
    const std::string message = r ? std::string("(accepted)") : r.error().message;
    if (*k.value) {
      EXPECT_NE(message.find(std::string("MEGASCALE_SOURCE_PORTS=") + k.value), std::string::npos) << message;
    }
    EXPECT_NE(message.find(k.why), std::string::npos) << message;
  }
}

TEST(PluginConfig, StatsDirIsCreatedOrRefused) {
  const std::string dir = ::testing::TempDir() + "/plugin_stats_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto c = load({{"MEGASCALE_STATS_DIR", dir}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->stats_dir, dir);
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  std::filesystem::remove_all(dir);
  // A path under a regular file can never be a directory.
  const std::string file = ::testing::TempDir() + "/plugin_stats_file_" + std::to_string(::getpid());
  { std::ofstream(file) << "x"; }
  const std::string message = error_for("MEGASCALE_STATS_DIR", file + "/sub");
  EXPECT_NE(message.find("MEGASCALE_STATS_DIR=" + file + "/sub"), std::string::npos) << message;
  std::remove(file.c_str());
}

TEST(PluginConfig, DefaultSegmentFitsTheMtu) {
  // IP (20 or 40) + UDP (8) + the engine's 72-byte segment header must fit; 32 KiB cap, 512 floor.
  EXPECT_EQ(default_segment_bytes(1500, false), 1400u);
  EXPECT_EQ(default_segment_bytes(1500, true), 1380u);
  EXPECT_EQ(default_segment_bytes(4200, false), 4100u);
  EXPECT_EQ(default_segment_bytes(9000, false), 8900u);
  EXPECT_EQ(default_segment_bytes(65536, false), 32768u);
  EXPECT_EQ(default_segment_bytes(576, false), 512u);
}

}  // namespace
}  // namespace megascale::nccl
