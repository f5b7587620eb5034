// A delay-based lane must not be pinned at its floor by this host's own scheduling, and a lane that is
// pinned there while ACKs keep arriving is counted (EngineConfig::floor_stall_ns), since neither the
// RTO nor the retry budget ever fires for it. Found as the NCCL conformance throughput case at 246 B of
// window (4 lanes x 0.001 x 61,440 B) for 15-20 s on a loaded 2-core host.
#include <gtest/gtest.h>

#include <vector>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

constexpr double kInitPackets = 10;

EngineConfig hybrid_lanes(uint32_t lanes) {
  EngineConfig c = test_config();
  c.lanes = lanes;
  c.cc.kind = cc::ControllerKind::kHybrid;
  c.cc.hybrid.swift.init_cwnd_packets = kInitPackets;
  c.repath_delay_rtts = 0;
  return c;
}

// A receiver descheduled for 5 ms: one segment on each of 4 lanes, sent 1 ms apart, all read (and
// answered by one coalesced ACK) when it runs again. The ACK echoes the last segment and its receiver
// delay (2 ms); the other lanes' samples hold up to 3 ms more of that receiver's time. Those samples
// bound the fabric delay from above and must cut nothing: the fabric took 10 us.
TEST(FloorStall, ADescheduledReceiversCoalescedAckCutsNoLane) {
  EngineConfig cfg = hybrid_lanes(4);
  cfg.cc.rto.min_rto_ns = cfg.cc.rto.initial_rto_ns = 50'000'000;  // no timeout within the stall
  cfg.tail_probe = false;
  TestNet net(cfg);
  net.coalesce = true;
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  const TimeNs start = net.now + 1'000'000;
  const TimeNs wake = start + 5'000'000;
  net.rule = [&](const Sent& s) {
    Fate f;
    if (s.is_data()) f.processing_delay_ns = wake - (net.now + net.link_delay_ns);
    return f;
  };
  std::vector<std::vector<uint8_t>> src(4, std::vector<uint8_t>(100, 7)), dst(4, std::vector<uint8_t>(100));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b->post_recv(dst[i].data(), dst[i].size(), i).ok());
  net.run_for(start - net.now);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(a->post_send(src[i].data(), src[i].size(), i).ok());
    net.run_for(1'000'000);
  }
  net.run_for(10'000'000);
  ASSERT_EQ(a->stats().bytes_acked, 400u);
  for (uint32_t lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(a->lane_stats(lane).segments_acked, 1u) << "lane " << lane;
    EXPECT_GE(a->lane_stats(lane).cwnd_bytes, kInitPackets * cfg.segment_bytes) << "lane " << lane;
  }
  EXPECT_EQ(a->stats().floor_stalls, 0u);
}

// A path whose fabric delay stays over the target at every window keeps a hybrid lane at its floor
// while ACKs flow: counted once for the stay, on the lane, the connection and the endpoint.
struct StallOutcome {
  uint64_t lane = 0, conn = 0, endpoint = 0;
  uint64_t acked = 0;
};

StallOutcome slow_path(cc::ControllerKind kind, TimeNs floor_stall_ns) {
  EngineConfig cfg = hybrid_lanes(1);
  cfg.cc.kind = kind;
  cfg.floor_stall_ns = floor_stall_ns;
  for (cc::SwiftParams* s : {&cfg.cc.swift, &cfg.cc.hybrid.swift}) s->min_cwnd_packets = 0.5;
  TestNet net(cfg);
  net.link_delay_ns = 500'000;  // 1 ms RTT: far over the 150 us most a target reaches (25 + 125 us)
  auto [a, b] = net.connect_pair();
  StallOutcome o;
  if (b == nullptr) return o;
  std::vector<uint8_t> src(400'000, 1), dst(400'000);
  EXPECT_TRUE(b->post_recv(dst.data(), dst.size(), 1).ok());
  EXPECT_TRUE(a->post_send(src.data(), src.size(), 1).ok());
  net.run_for(300'000'000);
  o.lane = a->lane_stats(0).floor_stalls;
  o.conn = a->stats().floor_stalls;
  o.endpoint = net.ep[0]->stats().floor_stalls;
  o.acked = a->stats().bytes_acked;
  return o;
}

TEST(FloorStall, ALaneAtItsFloorWhileAcksFlowIsCountedOnce) {
  const StallOutcome o = slow_path(cc::ControllerKind::kHybrid, 50'000'000);
  EXPECT_GT(o.acked, 10'000u);  // ACKs kept coming: the lane crawled, it did not stop
  EXPECT_EQ(o.lane, 1u);
  EXPECT_EQ(o.conn, 1u);
  EXPECT_EQ(o.endpoint, 1u);
}

TEST(FloorStall, NotCountedWhenSwitchedOffOrForAControllerWithoutAFloor) {
  EXPECT_EQ(slow_path(cc::ControllerKind::kHybrid, 0).conn, 0u);
  EXPECT_EQ(slow_path(cc::ControllerKind::kFixedWindow, 50'000'000).conn, 0u);
}

}  // namespace
}  // namespace megascale::engine::testing
