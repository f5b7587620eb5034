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
  GetEnvFn fn() const {
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
  const ThreadLayout layout =
      thread_layout(static_cast<unsigned>(usable_cpus_now()),
                    local_ranks_from_env([](const char*) { return nullptr; }).count, -1, -1, -1);
  EXPECT_EQ(c->threads_per_device, layout.wires);
  EXPECT_EQ(c->io_threads, layout.io_threads);
  EXPECT_EQ(c->stripes, layout.stripes);  // 1 on CI's 2 CPUs; 4 on a share of 8-11
  EXPECT_EQ(c->stripe_bytes, layout.stripes == 1 ? 1u << 20 : 256u * 1024);
  EXPECT_EQ(c->lanes, default_lanes(layout));  // 4, or one per I/O thread
  EXPECT_FALSE(c->busy_poll);
  EXPECT_EQ(c->idle_poll_ns, 50'000);
  EXPECT_EQ(c->pending_poll_ns, 1'000'000);
  EXPECT_EQ(c->stall_ns, 300'000);
  EXPECT_EQ(c->port_closed_fail_ns, 200 * kNsPerMs);
  EXPECT_EQ(c->gdr_copy, GdrCopyMode::kOff);  // host memory only
  EXPECT_EQ(c->gdr_copy_limits.timeout_ns, 10 * kNsPerSec);
  EXPECT_EQ(c->gdr_copy_limits.stall_after, 0u);
  EXPECT_FALSE(c->fault.enabled());
  EXPECT_TRUE(c->trace_file.empty());
  EXPECT_EQ(c->late_ack_window_ns, 5 * kNsPerSec);
  // Every knob is echoed once, marked as a default.
  EXPECT_TRUE(c->source_ports.empty());
  ASSERT_EQ(c->echo.size(), 29u);
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

// The default layout from the rank's share of the CPUs, less the 2 NCCL keeps busy.
TEST(ThreadLayout, FollowsTheCpuShareOfEachLocalRank) {
  struct Case {
    unsigned cpus, ranks;
    uint32_t wires, io;    // MEGASCALE_LANES unset
    uint32_t wires4, io4;  // MEGASCALE_LANES=4
    uint32_t stripes = 1;
  };
  for (const Case& k : {
           Case{2, 1, 2, 0, 2, 0},     // the CI VM: no I/O threads, at least 2 wires (they sleep when idle)
           Case{16, 4, 2, 0, 2, 0},    // 4 ranks on the 16-CPU H100 host: 2 to spare, 2 wires (measured best)
           Case{5, 1, 3, 0, 3, 0},     // 3 to spare: a wire each
           Case{6, 1, 4, 0, 4, 0},     // 4 to spare: not room for 1 + 4, so 4 wires of one thread
           Case{7, 1, 4, 0, 4, 0},     // 5 to spare: room for 1 + 4, not for two such wires
           Case{8, 1, 6, 0, 6, 0, 4},  // 6 to spare: 6 wires, each comm over 4 of them
           Case{11, 1, 6, 0, 6, 0, 4},  // 9 to spare: the same
           Case{12, 1, 2, 4, 2, 4},     // 10 to spare: two wires with an I/O thread per lane
           Case{16, 2, 6, 0, 6, 0, 4},  // 2 ranks on a 16-CPU H200 host: 6 x (1 + 0), 4 stripes, measured
                                        // best there
           Case{15, 1, 2, 4, 2, 4},     // 13 to spare: not room for 2 x (1 + 6), so two wires of 1 + 4
           Case{16, 1, 2, 4, 2, 4},   // 14 to spare: 2 x (1 + 6) would leave none idle, so two wires of 1 + 4
           Case{18, 1, 2, 6, 2, 4},   // 16 to spare: two wires of 1 + 6 and 2 CPUs idle (1 + 4 with 4 lanes)
           Case{32, 2, 2, 4, 2, 4},   // 2 ranks on the 32-CPU H200 host (2 x (1 + 4): steady, and faster
                                      // below 1 MiB)
           Case{128, 8, 2, 3, 2, 3},  // an 8-GPU node: more than 2 ranks, half the share spins
           Case{64, 4, 2, 3, 2, 3},   // 4 ranks on the 64-CPU 4 x H200 host (2 x (1 + 3) measured best)
           Case{32, 4, 6, 0, 6, 0, 4},  // 4 ranks, share 8: below kHalfShareMinCpus, as 2 ranks on 16
           Case{96, 3, 2, 6, 2, 4},  // 3 ranks, share 32: half is 16, two wires of 1 + 6 (1 + 4 with 4 lanes)
           Case{64, 2, 2, 6, 2, 4},  // 2 ranks on the 64-CPU host: 4 x (1 + 6) fit, 2 x (1 + 6) measured best
           Case{256, 1, 2, 6, 2, 4},  // at most 2 wires with I/O threads
           Case{16, 16, 2, 0, 2, 0},  // one CPU each
           Case{16, 64, 2, 0, 2, 0},  // more ranks than CPUs: a share of 1
       }) {
    for (const int lanes : {-1, 4}) {
      const ThreadLayout t = thread_layout(k.cpus, k.ranks, lanes, -1, -1);
      const std::string what = std::to_string(k.cpus) + " CPUs, " + std::to_string(k.ranks) +
                               " ranks, lanes " + std::to_string(lanes) + ": " + t.why;
      EXPECT_EQ(t.wires, lanes < 0 ? k.wires : k.wires4) << what;
      EXPECT_EQ(t.io_threads, lanes < 0 ? k.io : k.io4) << what;
      EXPECT_EQ(t.stripes, k.stripes) << what;
      EXPECT_LE(t.io_threads == 0 ? 0u : t.wires * (1 + t.io_threads), std::max(1u, k.cpus / k.ranks))
          << "the default never spins more threads than the share";
      if (t.io_threads == 0 && t.wires > kMinDefaultWires) {
        EXPECT_LE(t.wires + kNcclBusyThreads, k.cpus / k.ranks)
            << "more wires only where the share holds them";
      }
    }
  }
  // Lanes unset: one per I/O thread where a wire has more than 4.
  EXPECT_EQ(default_lanes(thread_layout(64, 2, -1, -1, -1)), 6u);
  EXPECT_EQ(default_lanes(thread_layout(32, 2, -1, -1, -1)), 4u);
  EXPECT_EQ(default_lanes(thread_layout(16, 2, -1, -1, -1)), 4u);
  EXPECT_EQ(default_lanes(thread_layout(2, 1, -1, -1, -1)), 4u);
  EXPECT_EQ(default_lanes(thread_layout(64, 4, -1, -1, -1)), 3u);  // a lane per I/O thread
  // A wire count or I/O threads the user set take the usual rules, not the half share.
  EXPECT_EQ(thread_layout(64, 4, -1, 2, -1).io_threads, 6u);
  EXPECT_EQ(thread_layout(64, 4, -1, -1, 6).io_threads, 6u);
  // 8 lanes set on a wide share: still at most 6 I/O threads a wire.
  EXPECT_EQ(thread_layout(64, 2, 8, -1, -1).io_threads, 6u);
  // One I/O thread per lane socket at most.
  EXPECT_EQ(thread_layout(64, 1, 2, -1, -1).io_threads, 2u);
  EXPECT_EQ(thread_layout(64, 1, 2, -1, -1).wires, 2u);
  // The echo says why.
  const ThreadLayout t = thread_layout(16, 2, 4, -1, -1);
  EXPECT_EQ(
      t.why,
      "16 usable CPUs / 2 local ranks = 8 each, 2 left to NCCL: 6 wires x (1 + 0 I/O threads), each comm "
      "over 4 of them");
  EXPECT_EQ(thread_layout(6, 1, 4, -1, -1).why,
            "6 usable CPUs / 1 local rank = 6 each, 2 left to NCCL: 4 wires x (1 + 0 I/O threads)");
  // Wires or I/O threads the user set: no stripes unless MEGASCALE_STRIPES says so.
  EXPECT_EQ(thread_layout(16, 2, -1, 4, -1).stripes, 1u);
  EXPECT_EQ(thread_layout(16, 2, -1, -1, 0).stripes, 1u);
  EXPECT_EQ(thread_layout(12, 1, 4, -1, -1).why,
            "12 usable CPUs / 1 local rank = 12 each, 2 left to NCCL: 2 wires x (1 + 4 I/O threads)");
  // A cgroup quota that limits the CPUs is named (wire::CpuBudget::note()): a pod limited to 8 CPUs on
  // a 128-CPU host with 8 ranks gets two wire threads per rank that sleep when idle, not 2 x (1 + 4).
  const ThreadLayout pod = thread_layout(8, 8, 4, -1, -1,
                                         "cgroup CPU quota 8 in /sys/fs/cgroup/cpu.max, 128 in "
                                         "the affinity mask");
  EXPECT_EQ(
      pod.why,
      "8 usable CPUs (cgroup CPU quota 8 in /sys/fs/cgroup/cpu.max, 128 in the affinity mask) / 8 local "
      "ranks = 1 each, 2 left to NCCL: 2 wires x (1 + 0 I/O threads)");
  EXPECT_EQ(thread_layout(32, 2, -1, -1, -1).why,
            "32 usable CPUs / 2 local ranks = 16 each, 2 left to NCCL: 2 wires x (1 + 4 I/O threads)");
  EXPECT_EQ(
      thread_layout(128, 8, -1, -1, -1).why,
      "128 usable CPUs / 8 local ranks = 16 each, half of it spinning with 8 local ranks: 2 wires x (1 + 3 "
      "I/O threads)");
}

TEST(ThreadLayout, ASetValueIsKeptAndTheOtherFittedAroundIt) {
  // MEGASCALE_NTHREADS=2 on a share of 16 (14 to spare): 7 threads a wire, so 4 I/O threads (one per lane).
  EXPECT_EQ(thread_layout(16, 1, 4, 2, -1).io_threads, 4u);
  // MEGASCALE_NTHREADS=4 on a share of 8 (6 to spare): 1 thread a wire, no I/O threads.
  EXPECT_EQ(thread_layout(16, 2, 4, 4, -1).io_threads, 0u);
  // MEGASCALE_NTHREADS=3 on a share of 8: 2 threads a wire, 1 I/O thread.
  EXPECT_EQ(thread_layout(16, 2, 4, 3, -1).io_threads, 1u);
  // MEGASCALE_IO_THREADS=2 on a share of 32 (30 to spare): as many 3-thread wires as fit, at most 2.
  EXPECT_EQ(thread_layout(32, 1, 4, -1, 2).wires, 2u);
  // MEGASCALE_NTHREADS=4 on that share: the wires the user set, with I/O threads fitted to them.
  EXPECT_EQ(thread_layout(32, 1, -1, 4, -1).wires, 4u);
  EXPECT_EQ(thread_layout(32, 1, -1, 4, -1).io_threads, 6u);
  EXPECT_EQ(thread_layout(16, 2, 4, -1, 2).wires, 2u);
  EXPECT_EQ(thread_layout(2, 1, 4, -1, 2).wires, 1u);
  // MEGASCALE_IO_THREADS=0: a wire per CPU to spare, 2..4.
  EXPECT_EQ(thread_layout(2, 1, 4, -1, 0).wires, 2u);
  EXPECT_EQ(thread_layout(16, 4, 4, -1, 0).wires, 2u);
  EXPECT_EQ(thread_layout(64, 1, 4, -1, 0).wires, 4u);
  // Both set: both kept.
  const ThreadLayout both = thread_layout(2, 1, 4, 8, 3);
  EXPECT_EQ(both.wires, 8u);
  EXPECT_EQ(both.io_threads, 3u);
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
  EXPECT_EQ(alone->io_threads, usable_cpus_now() >= 18 ? 6u : 4u);
  EXPECT_EQ(alone->lanes, alone->io_threads);
  auto crowded = load({{"MEGASCALE_LOCAL_RANKS", std::to_string(usable_cpus_now())}});
  ASSERT_TRUE(crowded) << crowded.error().message;
  EXPECT_EQ(crowded->io_threads, 0u);
  EXPECT_EQ(crowded->threads_per_device, kMinDefaultWires);  // a share of 1
}

TEST(PluginConfig, FewCpusGetNoIoThreads) {
  auto c = load({{"MEGASCALE_LOCAL_RANKS", "1"}});
  ASSERT_TRUE(c) << c.error().message;
  if (usable_cpus_now() < 12) {
    EXPECT_EQ(c->io_threads, 0u);
    const unsigned spare = usable_cpus_now() > 2 ? usable_cpus_now() - 2 : 0;
    EXPECT_EQ(c->threads_per_device, std::clamp(spare, kMinDefaultWires, kMaxDefaultWires));
  }
  EXPECT_NE(
      error_for("MEGASCALE_LOCAL_RANKS", "0").find("MEGASCALE_LOCAL_RANKS=0: must be an integer in 1..4096"),
      std::string::npos)
      << error_for("MEGASCALE_LOCAL_RANKS", "0");
}

// Set by hand to more spinning wire threads than CPUs: valid, but warned about, naming the variable.
TEST(PluginConfig, MoreStripesThanWiresAreWarnedAbout) {
  auto c = load({{"MEGASCALE_STRIPES", "4"}, {"MEGASCALE_NTHREADS", "2"}, {"MEGASCALE_IO_THREADS", "0"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->stripes, 4u);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("MEGASCALE_STRIPES=4: more stripes than the 2 wires"), std::string::npos)
      << c->warnings[0];
  EXPECT_EQ(c->stripe_bytes, 256u * 1024);  // 1 MiB cut even
  auto three = load({{"MEGASCALE_STRIPES", "3"}});
  ASSERT_TRUE(three) << three.error().message;
  EXPECT_EQ(three->stripe_bytes, 86u * 4096);  // 1 MiB / 3, rounded up to 4 KiB
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
  bool stall = false, timeout = false;
  for (const std::string& line : on->echo) {
    stall |=
        line == "MEGASCALE_FAULT_COPY_STALL=5 (every GPU buffer copy after these is held back) (environment)";
    timeout |= line ==
               "MEGASCALE_GDR_COPY_TIMEOUT_MS=0 (a GPU buffer copy is waited for however long it takes) "
               "(environment)";
  }
  EXPECT_TRUE(stall);
  EXPECT_TRUE(timeout);
}

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
                 {"MEGASCALE_RTO_FLOOR_US", "1000"},
                 {"MEGASCALE_TAIL_PROBE", "0"},
                 {"MEGASCALE_TAIL_PROBE_MIN_US", "250"},
                 {"MEGASCALE_PAYLOAD_CRC", "0"},
                 {"MEGASCALE_TC", "106"},
                 {"MEGASCALE_IFNAME", "^docker,lo"},
                 {"MEGASCALE_STATS_INTERVAL_S", "0.5"},
                 {"MEGASCALE_NTHREADS", "3"},
                 {"MEGASCALE_IO_THREADS", "2"},
                 {"MEGASCALE_BUSY_POLL", "1"},
                 {"MEGASCALE_IDLE_POLL_US", "2000"},
                 {"MEGASCALE_PENDING_POLL_US", "30000"},
                 {"MEGASCALE_STALL_US", "750"},
                 {"MEGASCALE_PORT_CLOSED_MS", "1500"},
                 {"MEGASCALE_STRIPES", "3"},
                 {"MEGASCALE_STRIPE_BYTES", "65536"},
                 {"MEGASCALE_GDR_COPY", "1"},
                 {"MEGASCALE_GDR_COPY_TIMEOUT_MS", "2500"},
                 {"MEGASCALE_FAULT_COPY_STALL", "100"},
                 {"MEGASCALE_FAULT_DROP", "0.01"},
                 {"MEGASCALE_FAULT_SEED", "7"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->cc.kind, cc::ControllerKind::kSwift);
  EXPECT_EQ(c->lanes, 8u);
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
  EXPECT_EQ(c->threads_per_device, 3u);
  EXPECT_EQ(c->io_threads, 2u);
  EXPECT_TRUE(c->busy_poll);
  EXPECT_EQ(c->idle_poll_ns, 2'000'000);
  EXPECT_EQ(c->pending_poll_ns, 30'000'000);
  EXPECT_EQ(c->stall_ns, 750'000);
  EXPECT_EQ(c->port_closed_fail_ns, 1'500'000'000);
  EXPECT_EQ(c->stripes, 3u);
  EXPECT_EQ(c->stripe_bytes, 65536u);
  for (const std::string& w : c->warnings) EXPECT_EQ(w.find("MEGASCALE_STRIPES"), std::string::npos) << w;
  EXPECT_EQ(c->gdr_copy, GdrCopyMode::kCuda);
  EXPECT_EQ(c->gdr_copy_limits.timeout_ns, 2500 * kNsPerMs);
  EXPECT_EQ(c->gdr_copy_limits.stall_after, 100u);
  EXPECT_DOUBLE_EQ(c->fault.drop, 0.01);
  EXPECT_EQ(c->fault.seed, 7u);
  bool lanes_echoed = false;
  for (const std::string& line : c->echo) lanes_echoed |= line == "MEGASCALE_LANES=8 (environment)";
  EXPECT_TRUE(lanes_echoed);
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
  bool echoed = false;
  for (const std::string& line : low->echo)
    echoed |= line == "MEGASCALE_RTO_FLOOR_US=0 (timeouts at least 300 us) (environment)";
  EXPECT_TRUE(echoed);
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
      {"MEGASCALE_NTHREADS", "0", "1..16"},
      {"MEGASCALE_IO_THREADS", "65", "0..64"},
      {"MEGASCALE_BUSY_POLL", "maybe", "0 or 1"},
      {"MEGASCALE_IDLE_POLL_US", "-1", "0..1000000"},
      {"MEGASCALE_IDLE_POLL_US", "1000001", "0..1000000"},
      {"MEGASCALE_PENDING_POLL_US", "-5", "0..10000000"},
      {"MEGASCALE_PENDING_POLL_US", "10000001", "0..10000000"},
      {"MEGASCALE_STALL_US", "-1", "0..1000000"},
      {"MEGASCALE_STALL_US", "1000001", "0..1000000"},
      {"MEGASCALE_PORT_CLOSED_MS", "-1", "0..3600000"},
      {"MEGASCALE_PORT_CLOSED_MS", "0.5", "0..3600000"},
      {"MEGASCALE_STRIPES", "0", "1..8"},
      {"MEGASCALE_STRIPES", "9", "1..8"},
      {"MEGASCALE_STRIPE_BYTES", "4095", "4096..1073741824"},
      {"MEGASCALE_STRIPE_BYTES", "1M", "4096..1073741824"},
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
  auto c = load({{"MEGASCALE_SOURCE_PORTS", "49152,49170,50001,60000"}, {"MEGASCALE_NTHREADS", "1"}});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->source_ports, (std::vector<uint16_t>{49152, 49170, 50001, 60000}));
  bool echoed = false;
  for (const std::string& line : c->echo) {
    echoed |= line == "MEGASCALE_SOURCE_PORTS=49152,49170,50001,60000 (environment)";
  }
  EXPECT_TRUE(echoed);
  // MEGASCALE_NTHREADS unset: one wire per device, whatever the CPUs.
  auto one = load({{"MEGASCALE_SOURCE_PORTS", "49152,49170,50001,60000"}});
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->threads_per_device, 1u);
  struct Case {
    std::map<std::string, std::string> vars;
    const char* value;
    const char* why;
  };
  const Case cases[] = {
      {{{"MEGASCALE_SOURCE_PORTS", "1,2,3,4"}, {"MEGASCALE_NTHREADS", "4"}},
       "1,2,3,4",
       "MEGASCALE_NTHREADS=1 (now 4)"},
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
