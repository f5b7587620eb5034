// Determinism: the same seed and the same inputs give the same packets, byte for byte; another seed
// gives other connection and path ids.
#include <gtest/gtest.h>

#include <set>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

struct RunResult {
  uint64_t trace_hash = 0;
  uint64_t packets = 0;
  ConnId a_id = 0, b_id = 0;
  uint32_t path0 = 0;
  TimeNs end = 0;
};

// A lossy, reordering, two-way run driven entirely by `seed` (engine) and a fixed network script.
RunResult lossy_run(uint64_t seed) {
  EngineConfig cfg = test_config(seed);
  cfg.lanes = 3;
  cfg.cc.kind = cc::ControllerKind::kHybrid;
  TestNet net(cfg, test_config(seed + 1000));
  // The network's randomness is the same in every run: 4% drop, 6% CE, 10% delayed up to 30 us.
  net.rule = scripted_network(5, 4, 10, 90, 30'000);
  auto [a, b] = net.connect_pair();
  RunResult res;
  if (b == nullptr) return res;
  std::vector<uint64_t> sizes = {0, 1, 5'000, 77'777, 1'000, 30'000};
  EXPECT_TRUE(exchange_both_ways(net, a, b, sizes, 1, 2, 60'000'000'000));
  a->close(net.now);
  net.run_until(
      [&] { return a->state() == ConnectionState::kClosed && b->state() == ConnectionState::kClosed; },
      net.now + 10'000'000'000);
  res.trace_hash = net.trace_hash();
  res.packets = net.transmitted;
  res.a_id = a->id();
  res.b_id = b->id();
  res.path0 = a->lane_stats(0).path_id;
  res.end = net.now;
  return res;
}

TEST(Determinism, SameSeedSamePacketTrace) {
  const RunResult r1 = lossy_run(42);
  const RunResult r2 = lossy_run(42);
  EXPECT_GT(r1.packets, 100u);
  EXPECT_EQ(r1.trace_hash, r2.trace_hash);
  EXPECT_EQ(r1.packets, r2.packets);
  EXPECT_EQ(r1.a_id, r2.a_id);
  EXPECT_EQ(r1.b_id, r2.b_id);
  EXPECT_EQ(r1.end, r2.end);
}

TEST(Determinism, OtherSeedOtherIdsAndPaths) {
  const RunResult r1 = lossy_run(42);
  const RunResult r3 = lossy_run(43);
  EXPECT_NE(r1.a_id, r3.a_id);
  EXPECT_NE(r1.b_id, r3.b_id);
  EXPECT_NE(r1.path0, r3.path0);
  EXPECT_NE(r1.trace_hash, r3.trace_hash);  // ids are in every header
}

TEST(Determinism, ConnectionIdsAreNonzeroAndDistinct) {
  auto ep = Endpoint::create(test_config(7));
  ASSERT_TRUE(ep.ok());
  std::set<ConnId> ids;
  for (uint32_t p = 0; p < 200; ++p) {
    auto id = (*ep)->connect(0, p);
    ASSERT_TRUE(id.ok());
    EXPECT_NE(*id, 0u);
    ids.insert(*id);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ((*ep)->connection_count(), 200u);
  for (ConnId id : ids) ASSERT_NE((*ep)->connection(id), nullptr);
}

}  // namespace
}  // namespace megascale::engine::testing
