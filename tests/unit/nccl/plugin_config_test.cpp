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
#include "megascale/wire/udp.h"

namespace megascale::nccl {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

int usable_cpus_now() {
  return static_cast<int>(wire::usable_cpus());
}

Result<PluginConfig> load(const std::map<std::string, std::string>& vars) {
  FakeEnv env{vars};
  return load_plugin_config(env.fn());
}

// The error for these variables, or for one variable set to one value.
std::string error_for_all(const std::map<std::string, std::string>& vars) {
  auto c = load(vars);
  return c ? std::string("(accepted)") : c.error().message;
}
std::string error_for(const std::string& name, const std::string& value) {
  return error_for_all({{name, value}});
}

// Whether the INFO echo has exactly this line.
bool echoes(const PluginConfig& c, const std::string& line) {
  return std::any_of(c.settings.begin(), c.settings.end(),
                     [&](const Setting& s) { return echo_line(s) == line; });
}

TEST(PluginConfig, DefaultsWithAnEmptyEnvironment) {
  auto c = load({});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc_source, "hybrid");
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kHybrid);
  EXPECT_EQ(c->segment_bytes, 0u);  // from the MTU
  EXPECT_EQ(c->retry_budget_ns, cc::RtoParams{}.retry_budget_ns);
  EXPECT_EQ(c->cc.rto.retry_budget_ns, c->retry_budget_ns);
  EXPECT_EQ(c->rto_floor_ns, 5 * kNsPerMs);
  EXPECT_TRUE(c->tail_probe);
  EXPECT_TRUE(c->payload_crc);
  EXPECT_EQ(c->tail_probe_min_ns, kNsPerMs);
  EXPECT_EQ(c->traffic_class, -1);
  EXPECT_TRUE(c->ifname.empty());
  EXPECT_TRUE(c->stats_dir.empty());
  EXPECT_FALSE(c->stats_keep_prom);  // the textfile goes with its process
  const LayoutChoice layout = resolve_layout({}, static_cast<unsigned>(usable_cpus_now()),
                                             local_ranks_from_env([](const char*) { return nullptr; }).count);
  EXPECT_EQ(c->layout, layout.layout);  // 2 x (1 + 0) on CI's 2 CPUs
  EXPECT_EQ(c->layout.stripe_bytes, c->layout.stripes == 1 ? 1u << 20 : 256u * 1024);
  EXPECT_FALSE(c->busy_poll);
  EXPECT_EQ(c->idle_poll_ns, 50'000);
  EXPECT_EQ(c->pending_poll_ns, 1'000'000);
  EXPECT_EQ(c->stall_ns, 300'000);
  EXPECT_EQ(c->help_after_ns, 50'000);  // test() moves a wire whose thread has not for 50 us
  EXPECT_EQ(c->port_closed_fail_ns, 200 * kNsPerMs);
  EXPECT_EQ(c->gdr_copy, GdrCopyMode::kOff);  // host memory only
  EXPECT_EQ(c->gdr_copy_limits.timeout_ns, 10 * kNsPerSec);
  EXPECT_EQ(c->gdr_copy_limits.stall_after, 0u);
  EXPECT_FALSE(c->fault.enabled());
  EXPECT_TRUE(c->trace_file.empty());
  EXPECT_EQ(c->late_ack_window_ns, 5 * kNsPerSec);
  EXPECT_EQ(c->wire, WireKind::kAuto);
  // Every knob is echoed once, marked as a default: all rows but the five replaced variables and the
  // MEGASCALE_CC_* family (echoed only for the keys set); MEGASCALE_IB_* where the verbs wire is built.
  EXPECT_TRUE(c->source_ports.empty());
  ASSERT_EQ(c->settings.size(), MEGASCALE_NCCL_VERBS ? 29u : 28u);
  for (const Setting& s : c->settings) {
    EXPECT_EQ(s.name.rfind("MEGASCALE_", 0), 0u) << s.name;
    EXPECT_EQ(s.source, "default") << s.name;
    EXPECT_NE(echo_line(s).find("(default)"), std::string::npos) << echo_line(s);
  }
  EXPECT_TRUE(
      echoes(*c, "MEGASCALE_LAYOUT=" + layout.layout.text() + " (auto: " + layout.why + ") (default)"));
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

TEST(LocalRanks, LauncherVariablesThenGpusThenOne) {
  namespace fs = std::filesystem;
  const fs::path pci = fs::temp_directory_path() / ("ms-pci-" + std::to_string(::getpid()));
  fs::remove_all(pci);
  auto device = [&](const std::string& name, const char* vendor, const char* cls) {
    fs::create_directories(pci / name);
    std::ofstream(pci / name / "vendor") << vendor << "\n";
    std::ofstream(pci / name / "class") << cls << "\n";
  };
  device("0000:00:01.0", "0x8086", "0x060400");  // a bridge
  device("0000:17:00.0", "0x10de", "0x030200");  // NVIDIA 3D controller (H100)
  device("0000:2a:00.0", "0x10de", "0x030000");  // NVIDIA VGA controller
  device("0000:2b:00.0", "0x10de", "0x068000");  // NVIDIA bridge (NVSwitch): not a GPU
  device("0000:3c:00.0", "0x15b3", "0x020700");  // a ConnectX NIC
  EXPECT_EQ(count_nvidia_gpus(pci.string()), 2u);
  EXPECT_EQ(count_nvidia_gpus((pci / "missing").string()), 0u);

  auto ranks = [&](const std::map<std::string, std::string>& vars, const fs::path& dir) {
    FakeEnv env{vars};
    return local_ranks_from_env(env.fn(), dir.string());
  };
  EXPECT_EQ(ranks({}, pci).count, 2u);
  EXPECT_EQ(ranks({}, pci).source, "2 NVIDIA GPUs on this host");
  EXPECT_EQ(ranks({}, pci / "missing").count, 1u);
  EXPECT_EQ(ranks({{"LOCAL_WORLD_SIZE", "8"}}, pci).count, 8u);
  EXPECT_EQ(ranks({{"LOCAL_WORLD_SIZE", "8"}}, pci).source, "LOCAL_WORLD_SIZE");
  EXPECT_EQ(ranks({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}, pci).count, 4u);
  EXPECT_EQ(ranks({{"MPI_LOCALNRANKS", "3"}}, pci).count, 3u);
  // Ours wins; a launcher's value that is not a count is passed over.
  EXPECT_EQ(ranks({{"MEGASCALE_LOCAL_RANKS", "2"}, {"LOCAL_WORLD_SIZE", "8"}}, pci).count, 2u);
  EXPECT_EQ(ranks({{"LOCAL_WORLD_SIZE", "8(x2)"}, {"MPI_LOCALNRANKS", "6"}}, pci).count, 6u);
  EXPECT_EQ(ranks({{"LOCAL_WORLD_SIZE", "0"}}, pci).count, 2u);
  fs::remove_all(pci);
}

// Through the environment: MEGASCALE_LOCAL_RANKS reaches the layout, and a bad value is refused.
TEST(PluginConfig, LocalRanksShapeTheDefaultThreads) {
  if (usable_cpus_now() < 12) {
    GTEST_SKIP() << "needs 12 usable CPUs for a layout with I/O threads (two wires of 1 + 4 beside NCCL's "
                    "2), this host gives "
                 << usable_cpus_now();
  }
  auto alone = load({{"MEGASCALE_LOCAL_RANKS", "1"}});
  ASSERT_TRUE(alone) << alone.error().message;
  // 6 where two wires of 1 + 6 fit beside NCCL's 2 and leave 2 idle (kWideHeadroomCpus).
  EXPECT_EQ(alone->layout.io_threads, usable_cpus_now() >= 18 ? 6u : 4u);
  EXPECT_EQ(alone->layout.lanes, alone->layout.io_threads);
  auto crowded = load({{"MEGASCALE_LOCAL_RANKS", std::to_string(usable_cpus_now())}});
  ASSERT_TRUE(crowded) << crowded.error().message;
  EXPECT_EQ(crowded->layout.io_threads, 0u);
  EXPECT_EQ(crowded->layout.wires, kMinWires);  // a share of 1
}

TEST(PluginConfig, FewCpusGetNoIoThreads) {
  auto c = load({{"MEGASCALE_LOCAL_RANKS", "1"}});
  ASSERT_TRUE(c) << c.error().message;
  if (usable_cpus_now() < 12) {
    EXPECT_EQ(c->layout.io_threads, 0u);
    const unsigned spare = usable_cpus_now() > 2 ? usable_cpus_now() - 2 : 0;
    if (spare < kStripedWires) {
      EXPECT_EQ(c->layout.wires, std::clamp(spare, kMinWires, kMaxWires));
    }
  }
  EXPECT_NE(
      error_for("MEGASCALE_LOCAL_RANKS", "0").find("MEGASCALE_LOCAL_RANKS=0: must be an integer in 1..4096"),
      std::string::npos)
      << error_for("MEGASCALE_LOCAL_RANKS", "0");
}

// Set by hand to more spinning wire threads than CPUs: valid, but warned about, naming the variable.
TEST(PluginConfig, MoreStripesThanWiresAreWarnedAbout) {
  auto c = load({{"MEGASCALE_LAYOUT", "stripes=4,wires=2,io_threads=0"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->layout.stripes, 4u);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(
      c->warnings[0].find("MEGASCALE_LAYOUT=stripes=4,wires=2,io_threads=0: more stripes than the 2 wires"),
      std::string::npos)
      << c->warnings[0];
  EXPECT_EQ(c->layout.stripe_bytes, 256u * 1024);  // 1 MiB cut even
  auto three = load({{"MEGASCALE_LAYOUT", "stripes=3"}});
  ASSERT_TRUE(three) << three.error().message;
  EXPECT_EQ(three->layout.stripe_bytes, 86u * 4096);  // 1 MiB / 3, rounded up to 4 KiB
}

// The copy-stall fault does nothing without the GPU-buffer path, and says so; with it, it is echoed.
TEST(PluginConfig, CopyStallWithoutTheGpuBufferPathIsWarnedAbout) {
  auto off = load({{"MEGASCALE_FAULT_COPY_STALL", "5"}});
  ASSERT_TRUE(off) << off.error().message;
  ASSERT_EQ(off->warnings.size(), 1u);
  EXPECT_NE(off->warnings[0].find("MEGASCALE_FAULT_COPY_STALL=5 has no effect: MEGASCALE_GDR_COPY is 0"),
            std::string::npos)
      << off->warnings[0];
  auto on = load({{"MEGASCALE_FAULT_COPY_STALL", "5"},
                  {"MEGASCALE_GDR_COPY", "emulate"},
                  {"MEGASCALE_GDR_COPY_TIMEOUT_MS", "0"}});
  ASSERT_TRUE(on) << on.error().message;
  EXPECT_TRUE(on->warnings.empty());
  EXPECT_EQ(on->gdr_copy_limits.timeout_ns, 0);
  EXPECT_TRUE(echoes(
      *on, "MEGASCALE_FAULT_COPY_STALL=5 (every GPU buffer copy after these is held back) (environment)"));
  EXPECT_TRUE(
      echoes(*on,
             "MEGASCALE_GDR_COPY_TIMEOUT_MS=0 (a GPU buffer copy is waited for however long it takes) "
             "(environment)"));
}

TEST(PluginConfig, IoThreadsBeyondTheCpusAreWarnedAbout) {
  auto over = load_with_cpus(1, {{"MEGASCALE_LAYOUT", "io_threads=2,wires=1"}});
  ASSERT_TRUE(over) << over.error().message;
  EXPECT_EQ(over->layout.io_threads, 2u);
  ASSERT_EQ(over->warnings.size(), 1u);
  EXPECT_NE(over->warnings[0].find("MEGASCALE_LAYOUT=io_threads=2,wires=1: 3 wire threads"),
            std::string::npos)
      << over->warnings[0];
  EXPECT_NE(over->warnings[0].find("on 1 usable CPUs"), std::string::npos) << over->warnings[0];
  auto off = load_with_cpus(1, {{"MEGASCALE_LAYOUT", "io_threads=0"}});
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_TRUE(off->warnings.empty());
  auto unset = load_with_cpus(1, {});
  ASSERT_TRUE(unset) << unset.error().message;
  EXPECT_TRUE(unset->warnings.empty());
  if (usable_cpus_now() >= 3) {  // 1 wire x (1 + 2) threads fit
    auto fits = load_with_cpus(3, {{"MEGASCALE_LAYOUT", "io_threads=2,wires=1"}});
    ASSERT_TRUE(fits) << fits.error().message;
    EXPECT_TRUE(fits->warnings.empty());
  }
}

TEST(PluginConfig, EveryKnobReachesItsField) {
  auto c = load({{"MEGASCALE_CC", "swift"},
                 {"MEGASCALE_LAYOUT", "lanes=8,wires=3,io_threads=2,stripes=3,stripe_bytes=64K"},
                 {"MEGASCALE_SEGMENT_BYTES", "4000"},
                 {"MEGASCALE_RETRY_BUDGET_S", "2.5"},
                 {"MEGASCALE_RTO_FLOOR_US", "1000"},
                 {"MEGASCALE_TAIL_PROBE", "0"},
                 {"MEGASCALE_TAIL_PROBE_MIN_US", "250"},
                 {"MEGASCALE_PAYLOAD_CRC", "0"},
                 {"MEGASCALE_TC", "106"},
                 {"MEGASCALE_IFNAME", "^docker,lo"},
                 {"MEGASCALE_STATS_INTERVAL_S", "0.5"},
                 {"MEGASCALE_STATS_KEEP_PROM", "1"},
                 {"MEGASCALE_BUSY_POLL", "1"},
                 {"MEGASCALE_IDLE_POLL_US", "2000"},
                 {"MEGASCALE_PENDING_POLL_US", "30000"},
                 {"MEGASCALE_STALL_US", "750"},
                 {"MEGASCALE_TEST_PROGRESS_US", "0"},
                 {"MEGASCALE_PORT_CLOSED_MS", "1500"},
                 {"MEGASCALE_GDR_COPY", "1"},
                 {"MEGASCALE_GDR_COPY_TIMEOUT_MS", "2500"},
                 {"MEGASCALE_FAULT_COPY_STALL", "100"},
                 {"MEGASCALE_FAULT_DROP", "0.01"},
                 {"MEGASCALE_FAULT_SEED", "7"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kSwift);
  EXPECT_EQ(c->layout,
            (Layout{.wires = 3, .io_threads = 2, .lanes = 8, .stripes = 3, .stripe_bytes = 65536}));
  EXPECT_EQ(c->segment_bytes, 4000u);
  EXPECT_EQ(c->retry_budget_ns, 2'500'000'000);
  EXPECT_EQ(c->cc.rto.retry_budget_ns, 2'500'000'000);  // the engine's RTO gives up on this budget
  EXPECT_EQ(c->rto_floor_ns, kNsPerMs);
  EXPECT_FALSE(c->tail_probe);
  EXPECT_EQ(c->tail_probe_min_ns, 250'000);
  EXPECT_FALSE(c->payload_crc);
  EXPECT_EQ(c->traffic_class, 106);
  EXPECT_EQ(c->ifname, "^docker,lo");
  EXPECT_EQ(c->stats_interval_ns, 500'000'000);
  EXPECT_TRUE(c->stats_keep_prom);
  EXPECT_TRUE(c->busy_poll);
  EXPECT_EQ(c->idle_poll_ns, 2'000'000);
  EXPECT_EQ(c->pending_poll_ns, 30'000'000);
  EXPECT_EQ(c->help_after_ns, 0);
  EXPECT_EQ(c->stall_ns, 750'000);
  EXPECT_EQ(c->port_closed_fail_ns, 1'500'000'000);
  for (const std::string& w : c->warnings) EXPECT_EQ(w.find("more stripes"), std::string::npos) << w;
  EXPECT_EQ(c->gdr_copy, GdrCopyMode::kCuda);
  EXPECT_EQ(c->gdr_copy_limits.timeout_ns, 2500 * kNsPerMs);
  EXPECT_EQ(c->gdr_copy_limits.stall_after, 100u);
  EXPECT_DOUBLE_EQ(c->fault.drop, 0.01);
  EXPECT_EQ(c->fault.seed, 7u);
  const Setting& layout = *std::find_if(c->settings.begin(), c->settings.end(),
                                        [](const Setting& s) { return s.name == "MEGASCALE_LAYOUT"; });
  EXPECT_EQ(layout.value, "wires=3,io_threads=2,lanes=8,stripes=3,stripe_bytes=65536");
  EXPECT_EQ(layout.source, "environment");
  EXPECT_EQ(
      layout.note.rfind("given: lanes=8,wires=3,io_threads=2,stripes=3,stripe_bytes=64K; rest auto: ", 0), 0u)
      << layout.note;
}

// A silent peer is probed after a quarter of the retry budget (10 ms..1 s), and no later than the
// closed-port grace while that is on: the probe is what draws a dead peer's ICMP port unreachable.
TEST(PluginConfig, KeepaliveFollowsTheBudgetAndNeverOutwaitsTheClosedPortGrace) {
  struct Case {
    const char* budget_s;
    const char* port_closed_ms;
    TimeNs want;
  };
  for (const Case& k :
       {Case{"30", "0", kNsPerSec}, Case{"30", "200", 200 * kNsPerMs}, Case{"0.4", "0", 100 * kNsPerMs},
        Case{"0.4", "50", 50 * kNsPerMs}, Case{"0.01", "0", 10 * kNsPerMs}, Case{"30", "1", 10 * kNsPerMs},
        Case{"30", "5000", kNsPerSec}}) {
    auto c = load({{"MEGASCALE_RETRY_BUDGET_S", k.budget_s}, {"MEGASCALE_PORT_CLOSED_MS", k.port_closed_ms}});
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->keepalive_interval_ns(), k.want) << k.budget_s << " s, " << k.port_closed_ms << " ms";
  }
}

// The floor never exceeds the preset's ceiling: by default it shrinks to it, and a larger value is
// refused naming the ceiling. The echo gives the timeout's real floor, the larger of it and min_rto.
TEST(PluginConfig, RtoFloorStaysUnderThePresetsCeiling) {
  auto c = load({{"MEGASCALE_CC_RTO_MAX_RTO_MS", "2"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->rto_floor_ns, 2 * kNsPerMs);
  const std::string message =
      error_for_all({{"MEGASCALE_CC_RTO_MAX_RTO_MS", "2"}, {"MEGASCALE_RTO_FLOOR_US", "3000"}});
  EXPECT_NE(message.find("MEGASCALE_RTO_FLOOR_US=3000: must be an integer in 0..2000"), std::string::npos)
      << message;
  auto low = load({{"MEGASCALE_RTO_FLOOR_US", "0"}, {"MEGASCALE_CC_RTO_MIN_RTO_US", "300"}});
  ASSERT_TRUE(low) << low.error().message;
  EXPECT_EQ(low->rto_floor_ns, 0);
  EXPECT_TRUE(echoes(*low, "MEGASCALE_RTO_FLOOR_US=0 (timeouts at least 300 us) (environment)"));
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
  EXPECT_TRUE(echoes(*c, "MEGASCALE_CC_SWIFT_BASE_TARGET_US=50 (environment)"));
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
      {"MEGASCALE_SEGMENT_BYTES", "10", "64..65000"},
      {"MEGASCALE_SEGMENT_BYTES", "70000", "64..65000"},
      {"MEGASCALE_RETRY_BUDGET_S", "0", "seconds"},
      {"MEGASCALE_RETRY_BUDGET_S", "-1", "seconds"},
      {"MEGASCALE_RETRY_BUDGET_S", "nan", "seconds"},
      {"MEGASCALE_RETRY_BUDGET_S", "1e9", "seconds"},
      {"MEGASCALE_RTO_FLOOR_US", "-1", "0..1000000"},
      {"MEGASCALE_RTO_FLOOR_US", "1000001", "0..1000000 (the preset's max_rto)"},
      {"MEGASCALE_RTO_FLOOR_US", "5ms", "0..1000000"},
      {"MEGASCALE_TAIL_PROBE", "2", "0 or 1"},
      {"MEGASCALE_PAYLOAD_CRC", "2", "0 or 1"},
      {"MEGASCALE_TAIL_PROBE_MIN_US", "-5", "0..1000000"},
      {"MEGASCALE_TAIL_PROBE_MIN_US", "1ms", "0..1000000"},
      {"MEGASCALE_TC", "256", "0..255"},
      {"MEGASCALE_TC", "-3", "0..255"},
      {"MEGASCALE_STATS_INTERVAL_S", "soon", "seconds"},
      {"MEGASCALE_BUSY_POLL", "maybe", "0 or 1"},
      {"MEGASCALE_IDLE_POLL_US", "-1", "0..1000000"},
      {"MEGASCALE_IDLE_POLL_US", "1000001", "0..1000000"},
      {"MEGASCALE_PENDING_POLL_US", "-5", "0..10000000"},
      {"MEGASCALE_PENDING_POLL_US", "10000001", "0..10000000"},
      {"MEGASCALE_STALL_US", "-1", "0..1000000"},
      {"MEGASCALE_STALL_US", "1000001", "0..1000000"},
      {"MEGASCALE_TEST_PROGRESS_US", "-1", "0..1000000"},
      {"MEGASCALE_TEST_PROGRESS_US", "1000001", "0..1000000"},
      {"MEGASCALE_PORT_CLOSED_MS", "-1", "0..3600000"},
      {"MEGASCALE_PORT_CLOSED_MS", "0.5", "0..3600000"},
      {"MEGASCALE_LAYOUT", "wires=0", "wires must be an integer in 1..16"},
      {"MEGASCALE_GDR_COPY", "2", "0, 1 or emulate"},
      {"MEGASCALE_GDR_COPY", "yes", "0, 1 or emulate"},
      {"MEGASCALE_GDR_COPY_TIMEOUT_MS", "-1", "0..3600000"},
      {"MEGASCALE_GDR_COPY_TIMEOUT_MS", "10s", "0..3600000"},
      {"MEGASCALE_FAULT_COPY_STALL", "-2", "0..1099511627776"},
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
  auto c = load({{"MEGASCALE_SOURCE_PORTS", "49152,49170,50001,60000"}, {"MEGASCALE_LAYOUT", "wires=1"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->source_ports, (std::vector<uint16_t>{49152, 49170, 50001, 60000}));
  EXPECT_TRUE(echoes(*c, "MEGASCALE_SOURCE_PORTS=49152,49170,50001,60000 (environment)"));
  // wires and lanes left out: one wire per device and 4 lanes, whatever the CPUs.
  auto one = load({{"MEGASCALE_SOURCE_PORTS", "49152,49170,50001,60000"}});
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->layout.wires, 1u);
  EXPECT_EQ(one->layout.lanes, 4u);
  struct Case {
    std::map<std::string, std::string> vars;
    const char* value;
    const char* why;
  };
  const Case cases[] = {
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,3,4"}, {"MEGASCALE_LAYOUT", "wires=4"}},
       "1,2,3,4",
       "needs MEGASCALE_LAYOUT wires=1 (now 4)"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,3"}, {"MEGASCALE_LAYOUT", "wires=1"}},
       "1,2,3",
       "3 ports for MEGASCALE_LAYOUT lanes=4"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2"}, {"MEGASCALE_LAYOUT", "wires=1,lanes=2"}}, "", "(accepted)"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,2,4"}, {"MEGASCALE_LAYOUT", "wires=1"}}, "1,2,2,4", "listed twice"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,0,3,4"}, {"MEGASCALE_LAYOUT", "wires=1"}},
       "1,0,3,4",
       "'0' is not a port"},
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,x,4"}, {"MEGASCALE_LAYOUT", "wires=1"}},
       "1,2,x,4",
       "'x' is not a port"},
      {{{"MEGASCALE_SOURCE_PORTS", "70000"}, {"MEGASCALE_LAYOUT", "wires=1,lanes=1"}}, "70000", "1..65535"},
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

TEST(PluginConfig, TraceFilePatternIsExpandedAndItsDirectoryChecked) {
  EXPECT_EQ(expand_file_pattern("/t/ms-%h-%p.json", "node7", 4242), "/t/ms-node7-4242.json");
  EXPECT_EQ(expand_file_pattern("a%%b%x%", "h", 1), "a%b%x%");  // %% is one %, others stay as written
  const std::string dir = ::testing::TempDir();
  auto c = load({{"MEGASCALE_TRACE_FILE", dir + "/trace-%p.json"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->trace_file, dir + "/trace-" + std::to_string(::getpid()) + ".json");
  EXPECT_TRUE(c->warnings.empty());
  // Without %p the ranks of a host write one file: accepted, with a warning that says so.
  auto shared = load({{"MEGASCALE_TRACE_FILE", dir + "/trace.json"}});
  ASSERT_TRUE(shared) << shared.error().message;
  ASSERT_EQ(shared->warnings.size(), 1u);
  EXPECT_NE(shared->warnings[0].find("has no %p"), std::string::npos) << shared->warnings[0];
  // A directory that does not exist is refused with the variable named; set but empty is unset.
  const std::string message =
      error_for("MEGASCALE_TRACE_FILE", dir + "/no-such-dir-" + std::to_string(::getpid()) + "/t-%p");
  EXPECT_NE(message.find("MEGASCALE_TRACE_FILE="), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  auto empty = load({{"MEGASCALE_TRACE_FILE", ""}});
  ASSERT_TRUE(empty) << empty.error().message;
  EXPECT_TRUE(empty->trace_file.empty());
}

TEST(PluginConfig, DefaultSegmentFitsTheMtu) {
  // IP (20 or 40) + UDP (8) + the engine's 72-byte segment header must fit; 32 KiB cap, 512 floor.
  EXPECT_EQ(default_segment_bytes(1500, false), 1400u);
  EXPECT_EQ(default_segment_bytes(1500, true), 1380u);
  EXPECT_EQ(default_segment_bytes(4200, false), 4100u);
  EXPECT_EQ(default_segment_bytes(9000, false), 8900u);
  EXPECT_EQ(default_segment_bytes(65536, false), 61440u);  // loopback: the cap
  EXPECT_EQ(default_segment_bytes(576, false), 512u);
}

}  // namespace
}  // namespace megascale::nccl
