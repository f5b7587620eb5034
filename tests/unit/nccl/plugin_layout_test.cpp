// MEGASCALE_LAYOUT (collectives/nccl/src/layout.h): its syntax, every bad value's message, the old
// layout variables refused naming the replacement, and the automatic rule's picks.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config.h"
#include "layout.h"

namespace megascale::nccl {
namespace {

Layout resolve(const std::string& text, unsigned cpus, unsigned ranks) {
  auto req = parse_layout(text);
  EXPECT_TRUE(req) << req.error().message;
  return resolve_layout(req ? *req : LayoutRequest{}, cpus, ranks).layout;
}

// The picks of the rule as it stood before it was written as one rule (five branches), recorded from
// that code for the host kinds named below and for CPU shares 2, 4, 6, 8, 16 with 1, 2 and 8 local
// ranks, with lanes left out and with lanes=4. The rule must keep every one.
TEST(LayoutRule, KeepsThePicksOfTheFiveBranchRule) {
  struct Case {
    unsigned cpus, ranks;
    const char* given;
    const char* picked;
  };
  // Host kinds: the CI VM (2 CPUs), 16-CPU H100/H200 hosts with 1, 2, 4 ranks, 32- and 64-CPU H200
  // hosts with 2 and 4 ranks, an 8-GPU node (128 CPUs), and the shares between them.
  const Case cases[] = {
      {2, 1, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {2, 1, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 4, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 4, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {5, 1, "", "wires=3,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {5, 1, "lanes=4", "wires=3,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {6, 1, "", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {6, 1, "lanes=4", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {7, 1, "", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {7, 1, "lanes=4", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {8, 1, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {8, 1, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {11, 1, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {11, 1, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {12, 1, "", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {12, 1, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 2, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {16, 2, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {15, 1, "", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {15, 1, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 1, "", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 1, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {18, 1, "", "wires=2,io_threads=6,lanes=6,stripes=1,stripe_bytes=1048576"},
      {18, 1, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {32, 2, "", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {32, 2, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {128, 8, "", "wires=2,io_threads=3,lanes=3,stripes=1,stripe_bytes=1048576"},
      {128, 8, "lanes=4", "wires=2,io_threads=3,lanes=4,stripes=1,stripe_bytes=1048576"},
      {64, 4, "", "wires=2,io_threads=3,lanes=3,stripes=1,stripe_bytes=1048576"},
      {64, 4, "lanes=4", "wires=2,io_threads=3,lanes=4,stripes=1,stripe_bytes=1048576"},
      {32, 4, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {32, 4, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {96, 3, "", "wires=2,io_threads=6,lanes=6,stripes=1,stripe_bytes=1048576"},
      {96, 3, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {64, 2, "", "wires=2,io_threads=6,lanes=6,stripes=1,stripe_bytes=1048576"},
      {64, 2, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {256, 1, "", "wires=2,io_threads=6,lanes=6,stripes=1,stripe_bytes=1048576"},
      {256, 1, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 16, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 16, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 64, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 64, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {2, 1, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {2, 1, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {4, 1, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {4, 1, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {6, 1, "", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {6, 1, "lanes=4", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {8, 1, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {8, 1, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {16, 1, "", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 1, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {4, 2, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {4, 2, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {8, 2, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {8, 2, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {12, 2, "", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {12, 2, "lanes=4", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 2, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {16, 2, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {32, 2, "", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {32, 2, "lanes=4", "wires=2,io_threads=4,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 8, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {16, 8, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {32, 8, "", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {32, 8, "lanes=4", "wires=2,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {48, 8, "", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {48, 8, "lanes=4", "wires=4,io_threads=0,lanes=4,stripes=1,stripe_bytes=1048576"},
      {64, 8, "", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {64, 8, "lanes=4", "wires=6,io_threads=0,lanes=4,stripes=4,stripe_bytes=262144"},
      {128, 8, "", "wires=2,io_threads=3,lanes=3,stripes=1,stripe_bytes=1048576"},
      {128, 8, "lanes=4", "wires=2,io_threads=3,lanes=4,stripes=1,stripe_bytes=1048576"},
  };
  for (const Case& k : cases) {
    const LayoutChoice c = resolve_layout(*parse_layout(k.given), k.cpus, k.ranks);
    EXPECT_EQ(c.layout.text(), k.picked)
        << k.cpus << " CPUs, " << k.ranks << " ranks, '" << k.given << "': " << c.why;
    // The rule never spins more threads than the share, and adds wires only where the share holds them.
    const Layout& t = c.layout;
    EXPECT_LE(t.io_threads == 0 ? 0u : t.wires * (1 + t.io_threads), c.cpu_share) << k.picked;
    if (t.io_threads == 0 && t.wires > kMinWires) {
      EXPECT_LE(t.wires + kNcclBusyThreads, c.cpu_share) << k.picked;
    }
  }
}

TEST(LayoutRule, ExplainsItsPick) {
  EXPECT_EQ(
      resolve_layout({}, 16, 2).why,
      "16 usable CPUs / 2 local ranks = 8 each, 2 left to NCCL: 6 wires x (1 + 0 I/O threads), each comm "
      "over 4 of them");
  EXPECT_EQ(resolve_layout({}, 6, 1).why,
            "6 usable CPUs / 1 local rank = 6 each, 2 left to NCCL: 4 wires x (1 + 0 I/O threads)");
  EXPECT_EQ(
      resolve_layout({}, 128, 8).why,
      "128 usable CPUs / 8 local ranks = 16 each, half of it spinning with 8 local ranks: 2 wires x (1 + 3 "
      "I/O threads)");
  // A cgroup quota that limits the CPUs is named (wire::CpuBudget::note()).
  EXPECT_EQ(
      resolve_layout({}, 8, 8, "cgroup CPU quota 8 in /sys/fs/cgroup/cpu.max").why,
      "8 usable CPUs (cgroup CPU quota 8 in /sys/fs/cgroup/cpu.max) / 8 local ranks = 1 each, 2 left to "
      "NCCL: 2 wires x (1 + 0 I/O threads)");
}

TEST(LayoutRule, KeysGivenAreKeptAndTheRestFittedAroundThem) {
  // wires=2 on a share of 16 (14 to spare): 7 threads a wire, so 4 I/O threads (one per lane).
  EXPECT_EQ(resolve("lanes=4,wires=2", 16, 1).io_threads, 4u);
  // wires=4 on a share of 8 (6 to spare): 1 thread a wire, no I/O threads; wires=3: 2 a wire, 1 I/O thread.
  EXPECT_EQ(resolve("lanes=4,wires=4", 16, 2).io_threads, 0u);
  EXPECT_EQ(resolve("lanes=4,wires=3", 16, 2).io_threads, 1u);
  // io_threads=2 on a share of 32: as many 3-thread wires as fit, at most 2; on 2 CPUs, 1.
  EXPECT_EQ(resolve("io_threads=2", 32, 1).wires, 2u);
  EXPECT_EQ(resolve("io_threads=2", 2, 1).wires, 1u);
  // wires=4 on a share of 32: the wires given, with up to 6 I/O threads each and a lane per I/O thread.
  EXPECT_EQ(resolve("wires=4", 32, 1), (Layout{4, 6, 6, 1, 1 << 20}));
  // io_threads=0: a wire per CPU to spare, 2..4, and no stripes.
  EXPECT_EQ(resolve("io_threads=0", 2, 1).wires, 2u);
  EXPECT_EQ(resolve("io_threads=0", 64, 1), (Layout{4, 0, 4, 1, 1 << 20}));
  EXPECT_EQ(resolve("wires=4", 16, 2).stripes, 1u);
  // wires or io_threads given: the usual fit, not the half share.
  EXPECT_EQ(resolve("wires=2", 64, 4).io_threads, 6u);
  EXPECT_EQ(resolve("io_threads=6", 64, 4).io_threads, 6u);
  // The I/O threads are at most the lanes.
  EXPECT_EQ(resolve("lanes=8", 64, 2).io_threads, 6u);
  EXPECT_EQ(resolve("lanes=2", 64, 1), (Layout{2, 2, 2, 1, 1 << 20}));
  // Stripes given: stripe_bytes cuts 1 MiB over them unless given too.
  EXPECT_EQ(resolve("stripes=3", 2, 1).stripe_bytes, 86u * 4096);
  EXPECT_EQ(resolve("stripes=3,stripe_bytes=1M", 2, 1).stripe_bytes, 1u << 20);
  // All given: all kept.
  EXPECT_EQ(resolve("wires=8,io_threads=3,lanes=5,stripes=2,stripe_bytes=8192", 2, 1),
            (Layout{8, 3, 5, 2, 8192}));
}

TEST(LayoutSyntax, GoodValues) {
  EXPECT_TRUE(parse_layout("")->empty());
  EXPECT_TRUE(parse_layout("auto")->empty());
  const LayoutRequest r = *parse_layout("stripe_bytes=512K,wires=16,io_threads=0,lanes=64,stripes=8");
  EXPECT_EQ(r.wires, 16u);
  EXPECT_EQ(r.io_threads, 0u);
  EXPECT_EQ(r.lanes, 64u);
  EXPECT_EQ(r.stripes, 8u);
  EXPECT_EQ(r.stripe_bytes, 512u * 1024);
  EXPECT_EQ(parse_layout("stripe_bytes=4096")->stripe_bytes, 4096u);
  EXPECT_EQ(parse_layout("stripe_bytes=2M")->stripe_bytes, 2u << 20);
  EXPECT_EQ(parse_layout("stripe_bytes=1G")->stripe_bytes, 1u << 30);
  // The echo's text parses back to the same layout.
  const Layout l{3, 2, 8, 3, 65536};
  EXPECT_EQ(resolve(l.text(), 2, 1), l);
}

TEST(LayoutSyntax, EachBadValueNamesTheKeyAndWhatIsAllowed) {
  const std::map<std::string, std::string> cases = {
      {"wires=0", "MEGASCALE_LAYOUT=wires=0: wires must be an integer in 1..16"},
      {"wires=17", "MEGASCALE_LAYOUT=wires=17: wires must be an integer in 1..16"},
      {"wires=4x", "MEGASCALE_LAYOUT=wires=4x: wires must be an integer in 1..16"},
      {"wires=-1", "MEGASCALE_LAYOUT=wires=-1: wires must be an integer in 1..16"},
      {"wires=", "MEGASCALE_LAYOUT=wires=: wires must be an integer in 1..16"},
      {"io_threads=65", "MEGASCALE_LAYOUT=io_threads=65: io_threads must be an integer in 0..64"},
      {"lanes=0", "MEGASCALE_LAYOUT=lanes=0: lanes must be an integer in 1..64"},
      {"lanes=65", "MEGASCALE_LAYOUT=lanes=65: lanes must be an integer in 1..64"},
      {"stripes=9", "MEGASCALE_LAYOUT=stripes=9: stripes must be an integer in 1..8"},
      {"stripe_bytes=4095",
       "MEGASCALE_LAYOUT=stripe_bytes=4095: stripe_bytes must be a byte count in 4096..1073741824 (K, M, G "
       "suffixes: 512K)"},
      {"stripe_bytes=2G",
       "MEGASCALE_LAYOUT=stripe_bytes=2G: stripe_bytes must be a byte count in 4096..1073741824 (K, M, G "
       "suffixes: 512K)"},
      {"stripe_bytes=1T",
       "MEGASCALE_LAYOUT=stripe_bytes=1T: stripe_bytes must be a byte count in 4096..1073741824 (K, M, G "
       "suffixes: 512K)"},
      {"threads=4",
       "MEGASCALE_LAYOUT=threads=4: unknown key 'threads' (keys: wires, io_threads, lanes, stripes, "
       "stripe_bytes)"},
      {"wires=2,wires=4", "MEGASCALE_LAYOUT=wires=2,wires=4: wires is given twice"},
      {"wires",
       "MEGASCALE_LAYOUT=wires: 'wires' is not key=value (keys: wires, io_threads, lanes, stripes, "
       "stripe_bytes; or auto)"},
      {"wires=2,",
       "MEGASCALE_LAYOUT=wires=2,: '' is not key=value (keys: wires, io_threads, lanes, stripes, "
       "stripe_bytes; or auto)"},
      {"AUTO",
       "MEGASCALE_LAYOUT=AUTO: 'AUTO' is not key=value (keys: wires, io_threads, lanes, stripes, "
       "stripe_bytes; or auto)"},
  };
  for (const auto& [text, message] : cases) {
    auto r = parse_layout(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().message, message);
  }
}

// Through load_plugin_config: the layout knob reaches PluginConfig::layout, and each old variable fails
// init naming MEGASCALE_LAYOUT and the key that replaces it.
TEST(LayoutKnob, OldVariablesAreRefusedNamingTheReplacement) {
  const std::map<std::string, std::string> replaced = {
      {"MEGASCALE_NTHREADS", "wires=4"},
      {"MEGASCALE_IO_THREADS", "io_threads=2"},
      {"MEGASCALE_LANES", "lanes=4"},
      {"MEGASCALE_STRIPES", "stripes=2"},
      {"MEGASCALE_STRIPE_BYTES", "stripe_bytes=512K"},
  };
  for (const auto& [name, example] : replaced) {
    auto c = load_plugin_config([&](const char* n) -> const char* { return name == n ? "2" : nullptr; });
    ASSERT_FALSE(c) << name;
    EXPECT_EQ(c.error().message,
              name + " is replaced by MEGASCALE_LAYOUT (e.g. MEGASCALE_LAYOUT=" + example + ")");
    // The suggested value is itself a valid layout.
    EXPECT_TRUE(parse_layout(example)) << example;
  }
  auto bad = load_plugin_config([](const char* n) -> const char* {
    return std::string(n) == "MEGASCALE_LAYOUT" ? "wires=99" : nullptr;
  });
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "MEGASCALE_LAYOUT=wires=99: wires must be an integer in 1..16");
  auto set = load_plugin_config([](const char* n) -> const char* {
    return std::string(n) == "MEGASCALE_LAYOUT" ? "wires=3,io_threads=0,lanes=2,stripes=2,stripe_bytes=8K"
                                                : nullptr;
  });
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->layout, (Layout{3, 0, 2, 2, 8192}));
}

}  // namespace
}  // namespace megascale::nccl
