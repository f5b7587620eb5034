// Spurious retransmission timeouts (Eifel: detection RFC 3522, response RFC 4015). A receiver that stalls
// (a descheduled thread on a busy host) holds every ACK back for many RTOs; the sender times out again
// and again, and after Swift's RETX_RESET_THRESHOLD timeouts its window is at the floor (0.001 packets),
// paced at one segment per 1,000 RTTs. When the stalled originals are finally acknowledged, the ACK
// echoes their first transmission's timestamp: the timeouts were spurious, and their cuts are undone.
// A genuine loss is acknowledged through the retransmission's timestamp and keeps its cut. Found as
// the NCCL conformance throughput case stalling for 30 s with I/O threads on a 2-core CI machine.
#include <gtest/gtest.h>

#include <string>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

constexpr double kInitPackets = 8;

EngineConfig one_lane(cc::ControllerKind kind) {
  EngineConfig c = test_config();
  c.lanes = 1;
  c.cc.kind = kind;
  c.cc.flow.base_rtt_ns = 10'000;
  c.cc.rto.first_jitter = 0;  // timeouts at 1, 3, 7, 15, 31 ms: five by the time the stall ends
  for (cc::SwiftParams* s : {&c.cc.swift, &c.cc.hybrid.swift}) {
    s->init_cwnd_packets = kInitPackets;
    s->min_cwnd_packets = 0.001;
    s->retx_reset_threshold = 5;
  }
  return c;
}

struct Outcome {
  uint64_t timeouts = 0;
  uint64_t spurious = 0;
  double cwnd_packets = 0;  // the lane's window after the transfer
};

// One 4-segment message. `stall`: every first copy arrives 40 ms late and every retransmission is lost
// (the receiver stalled; its data was never lost). Otherwise: every first copy is lost and every
// retransmission arrives 40 ms late (a real loss, and a slow path for the repairs).
Outcome transfer(cc::ControllerKind kind, bool stall) {
  const EngineConfig cfg = one_lane(kind);
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  EXPECT_NE(b, nullptr);
  if (b == nullptr) return {};
  net.rule = [stall](const Sent& s) {
    Fate f;
    if (!s.is_data()) return f;
    const bool original = s.copy == 0;
    if (original == stall) {
      f.extra_delay_ns = 40'000'000;
    } else {
      f.drop = true;
    }
    // Later retransmissions of the real loss get through at once, so the transfer ends.
    if (!stall && s.copy >= 6) f = Fate{};
    return f;
  };
  Batch batch({4000}, 7);
  batch.post_recvs(b);
  batch.post_sends(a);
  EXPECT_TRUE(batch.run(net, a, b, 60'000'000'000));
  batch.expect_intact(b);
  Outcome o;
  o.timeouts = a->stats().timeouts;
  o.spurious = a->stats().timeouts_spurious;
  o.cwnd_packets = a->lane_stats(0).cwnd_bytes / cfg.segment_bytes;
  return o;
}

class SpuriousRto : public ::testing::TestWithParam<cc::ControllerKind> {};

TEST_P(SpuriousRto, AStalledReceiverDoesNotLeaveTheLaneAtItsFloor) {
  const Outcome o = transfer(GetParam(), /*stall=*/true);
  EXPECT_GE(o.timeouts, 5u);  // enough for the reset to the floor
  EXPECT_GE(o.spurious, 1u);
  // Back at the window the run of timeouts began with (at least), not 0.001 packets.
  EXPECT_GE(o.cwnd_packets, kInitPackets * 0.99)
      << o.cwnd_packets << " packets after " << o.timeouts << " timeouts";
}

TEST_P(SpuriousRto, ARealLossKeepsItsCut) {
  const Outcome o = transfer(GetParam(), /*stall=*/false);
  EXPECT_GE(o.timeouts, 5u);
  EXPECT_EQ(o.spurious, 0u);
  EXPECT_LT(o.cwnd_packets, kInitPackets * 0.5)
      << o.cwnd_packets << " packets after " << o.timeouts << " timeouts";
}

// The safety net under the undo: a lane never waits longer to send than the RTO ceiling. Swift at a
// 0.0001-packet window over a 10 ms RTT paces one segment per 100 s, and with a 1 ns target every ACK
// reads as over it, so the window stays there; with a 200 ms ceiling a three-segment message finishes
// within about a second of virtual time.
TEST(PacingCap, NoLaneWaitsLongerThanTheRtoCeiling) {
  EngineConfig c = one_lane(cc::ControllerKind::kSwift);
  c.cc.flow.base_rtt_ns = 10'000'000;
  c.cc.swift.init_cwnd_packets = 0.0001;
  c.cc.swift.min_cwnd_packets = 0.0001;
  c.cc.swift.base_target_ns = 1;
  c.cc.swift.per_hop_ns = 0;
  c.cc.swift.fs_range_ns = 0;
  c.cc.pacer.burst_bytes = 1;  // strictly paced
  c.cc.rto.max_rto_ns = 200'000'000;
  TestNet net(c);
  net.link_delay_ns = 5'000'000;  // a 10 ms RTT, so the samples keep the pacing RTT where it started
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  EXPECT_GE(a->lane_stats(0).pacing_rate_bps, 8.0 * (c.segment_bytes + kSegHeaderBytes) / 0.2 * 0.999);
  Batch batch({3000}, 5);
  batch.post_recvs(b);
  batch.post_sends(a);
  const TimeNs t0 = net.now;
  ASSERT_TRUE(batch.run(net, a, b, 30'000'000'000));
  batch.expect_intact(b);
  EXPECT_LT(net.now - t0, 1'000'000'000) << "virtual ns";  // uncapped: two gaps of ~100 s
}

std::string controller_name(const ::testing::TestParamInfo<cc::ControllerKind>& p) {
  return p.param == cc::ControllerKind::kSwift ? "Swift" : "Hybrid";
}

INSTANTIATE_TEST_SUITE_P(Controllers, SpuriousRto,
                         ::testing::Values(cc::ControllerKind::kSwift, cc::ControllerKind::kHybrid),
                         controller_name);

}  // namespace
}  // namespace megascale::engine::testing
