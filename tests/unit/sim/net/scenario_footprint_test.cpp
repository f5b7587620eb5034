// A scenario's footprint before it runs: element counts, the partitions that get elements (threads
// beyond them would idle), a memory estimate, and the warnings or refusal `megascale sim` prints.
#include <gtest/gtest.h>

#include <string>

#include "megascale/sim/scenario.h"

namespace megascale::sim {
namespace {

SimScenario scenario(const std::string& fabric, uint32_t threads) {
  const std::string text =
      "name: t\nfabric: " + fabric +
      "\nworkload: {kind: permutation, bytes: 100000}\nthreads: " + std::to_string(threads) + "\n";
  auto s = parse_sim_scenario(text, "t.yaml");
  EXPECT_TRUE(s.ok()) << s.error().message;
  return *s;
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(ScenarioFootprint, CountsTheElementsAndTheConnections) {
  auto f = scenario_footprint(scenario("star:64", 1));
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->hosts, 64u);
  EXPECT_EQ(f->switches, 1u);
  EXPECT_EQ(f->links, 64u);
  EXPECT_EQ(f->flows, 64u);  // a permutation: every host sends to one other
  EXPECT_EQ(f->connections, 64u);
  EXPECT_EQ(f->busy_partitions, 1u);
  EXPECT_GT(f->estimated_bytes, 64 * f->connections);
}

TEST(ScenarioFootprint, MoreThreadsThanPartitionsWithElementsAreSaid) {
  // A star's switch sits in partition 0 and its 8 hosts in equal blocks: 8 partitions at most.
  auto f = scenario_footprint(scenario("star:8", 32));
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->partitions, 32u);
  EXPECT_EQ(f->busy_partitions, 8u);
  auto w = check_footprint(*f, MemInfo{.total_bytes = 64 * kGiB, .available_bytes = 64 * kGiB});
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_EQ(w->size(), 1u);
  EXPECT_NE(w->at(0).find("threads 32: the fabric splits into 8 partitions with elements"), std::string::npos)
      << w->at(0);
  EXPECT_NE(w->at(0).find("8 threads will do work and 24 will only wait"), std::string::npos) << w->at(0);

  auto fits = scenario_footprint(scenario("star:8", 4));
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->busy_partitions, 4u);
  auto none = check_footprint(*fits, MemInfo{.total_bytes = 64 * kGiB, .available_bytes = 64 * kGiB});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(ScenarioFootprint, AFabricLargerThanMemoryIsRefusedAndOneLargerThanWhatIsFreeWarned) {
  auto f = scenario_footprint(scenario("star:200000", 1));
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_GT(f->estimated_bytes, 2 * kGiB);
  auto refused = check_footprint(*f, MemInfo{.total_bytes = 2 * kGiB, .available_bytes = kGiB});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("will not fit in memory: about"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("200000 hosts"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("2.0 GiB (MemTotal)"), std::string::npos) << refused.error().message;

  auto warned = check_footprint(*f, MemInfo{.total_bytes = 4096 * kGiB, .available_bytes = kGiB});
  ASSERT_TRUE(warned) << warned.error().message;
  ASSERT_EQ(warned->size(), 1u);
  EXPECT_NE(warned->at(0).find("more than the 1.0 GiB available now"), std::string::npos) << warned->at(0);

  // Unknown memory (no /proc/meminfo): nothing to compare with.
  auto unknown = check_footprint(*f, MemInfo{});
  ASSERT_TRUE(unknown);
  EXPECT_TRUE(unknown->empty());
}

TEST(ScenarioFootprint, MeminfoIsReadInBytes) {
  const MemInfo m =
      parse_meminfo("MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:    8192000 kB\n");
  EXPECT_EQ(m.total_bytes, 16384000ULL << 10);
  EXPECT_EQ(m.available_bytes, 8192000ULL << 10);
  EXPECT_EQ(parse_meminfo("garbage\n").total_bytes, 0u);
}

}  // namespace
}  // namespace megascale::sim
