// EngineConfig::grow_connection_state: a connection whose arrays start small and double on demand sends
// exactly the packets of one allocated whole. A lossy, reordering two-way run with more outstanding
// segments, sends and receives than the arrays start with (16) is run both ways and the traces compared
// byte for byte and time for time.
#include <gtest/gtest.h>

#include <vector>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

struct Outcome {
  uint64_t trace_hash = 0;
  uint64_t packets = 0;
  uint64_t retransmits = 0;
  TimeNs end = 0;
};

Outcome lossy_run(bool grow, uint32_t window_segments) {
  EngineConfig cfg = test_config(7);
  cfg.lanes = 2;
  cfg.window_segments = window_segments;
  cfg.grow_connection_state = grow;
  cfg.cc.fixed.window_packets = 128;  // far more than the 16 entries the ring starts with
  EngineConfig peer = test_config(8);
  peer.window_segments = window_segments;
  peer.grow_connection_state = grow;
  peer.cc.fixed.window_packets = 128;
  TestNet net(cfg, peer);
  // The same network script in both runs: 3% drop, 5% CE, 8% delayed up to 40 us.
  net.rule = scripted_network(11, 3, 8, 92, 40'000);
  auto [a, b] = net.connect_pair();
  Outcome out;
  if (b == nullptr) return out;
  // 40 messages each way (more requests than the slab starts with); 200 KB ones keep far more than 16
  // segments of 1000 bytes in flight.
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back(i % 8 == 0 ? 200'000 : 3'000 + 977 * static_cast<uint64_t>(i));
  EXPECT_TRUE(exchange_both_ways(net, a, b, sizes, 1, 2, 60'000'000'000));
  out.trace_hash = net.trace_hash();
  out.packets = net.transmitted;
  out.retransmits = a->stats().retransmits() + b->stats().retransmits();
  out.end = net.now;
  return out;
}

TEST(GrowConnectionState, SamePacketsAsWholeArrays) {
  const Outcome whole = lossy_run(false, 4096);
  const Outcome grown = lossy_run(true, 4096);
  EXPECT_GT(whole.packets, 2'000u);
  EXPECT_GT(whole.retransmits, 10u);  // loss recovery (the retransmission queue) is exercised
  EXPECT_EQ(whole.trace_hash, grown.trace_hash);
  EXPECT_EQ(whole.packets, grown.packets);
  EXPECT_EQ(whole.retransmits, grown.retransmits);
  EXPECT_EQ(whole.end, grown.end);
}

TEST(GrowConnectionState, SmallWindowCapsTheRingTheSameWay) {
  // A 32-segment window: the ring stops doubling at the window and the sender stalls on it as before.
  const Outcome whole = lossy_run(false, 32);
  const Outcome grown = lossy_run(true, 32);
  EXPECT_GT(whole.packets, 2'000u);
  EXPECT_EQ(whole.trace_hash, grown.trace_hash);
  EXPECT_EQ(whole.end, grown.end);
}

}  // namespace
}  // namespace megascale::engine::testing
