// Lanes and congestion signals: spreading over lanes, ECN echo to the hybrid controller, DCQCN CNPs,
// repathing a lane whose path black-holes or stays congested, RTT statistics, pacing.
#include <gtest/gtest.h>

#include "megascale/congestion/config.h"
#include "test_net.h"

namespace megascale::engine::testing {
namespace {

EngineConfig lanes_config(cc::ControllerKind kind, uint32_t lanes) {
  EngineConfig c = test_config();
  c.lanes = lanes;
  c.cc.kind = kind;
  return c;
}

void send_one(TestNet& net, Connection* a, Connection* b, uint64_t size, uint64_t seed,
              TimeNs budget = 20'000'000'000) {
  Batch batch({size}, seed);
  batch.post_recvs(b);
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b, budget));
  batch.expect_intact(b);
}

TEST(Lanes, SegmentsSpreadOverEveryLaneWithDistinctPaths) {
  TestNet net(lanes_config(cc::ControllerKind::kFixedWindow, 4));
  auto [a, b] = net.connect_pair();
  send_one(net, a, b, 400'000, 1);
  uint64_t total = 0;
  for (uint32_t i = 0; i < 4; ++i) {
    const LaneStats& l = a->lane_stats(i);
    EXPECT_GT(l.segments_sent, 80u) << "lane " << i;  // 400 segments over 4 lanes
    EXPECT_EQ(l.bytes_acked, l.bytes_sent) << "lane " << i;
    EXPECT_EQ(l.in_flight_bytes, 0u);
    total += l.segments_sent;
    for (uint32_t j = 0; j < i; ++j) EXPECT_NE(l.path_id, a->lane_stats(j).path_id);
  }
  EXPECT_EQ(total, a->stats().segments_sent);
  // Every packet carried its lane's path id.
  for (const Sent& s : net.trace) {
    if (s.from == 0 && s.is_seg()) {
      ASSERT_EQ(s.tx_meta.path_id, a->lane_stats(s.pkt.hdr.lane).path_id);
      ASSERT_TRUE(s.tx_meta.ect);
    }
  }
}

TEST(Lanes, EcnMarksAreEchoedAndCutTheHybridWindow) {
  EngineConfig cfg = lanes_config(cc::ControllerKind::kHybrid, 1);
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  send_one(net, a, b, 200'000, 2);  // grow the window first
  const double before = a->lane_stats(0).cwnd_bytes;
  uint64_t marked = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    f.ce = s.is_data() && s.copy == 0;
    marked += f.ce ? 1 : 0;
    return f;
  };
  send_one(net, a, b, 50'000, 3);
  EXPECT_EQ(marked, 50u);
  EXPECT_EQ(b->stats().ce_received, 50u);
  EXPECT_EQ(a->stats().ecn_marks, 50u);  // every mark echoed exactly once (ACK ce_count)
  EXPECT_EQ(a->lane_stats(0).ecn_marks, 50u);
  EXPECT_EQ(b->stats().cnps_sent, 0u);  // CNPs are for DCQCN peers only
  EXPECT_LT(a->lane_stats(0).cwnd_bytes, before);
}

TEST(Lanes, DcqcnGetsPacedCnpsAndCutsItsRate) {
  EngineConfig cfg = lanes_config(cc::ControllerKind::kDcqcn, 2);
  cfg.cc.flow.line_rate_bps = 10e9;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  net.rule = [](const Sent& s) {
    Fate f;
    f.ce = s.is_data();
    return f;
  };
  const TimeNs t0 = net.now;
  send_one(net, a, b, 300'000, 4);
  const TimeNs elapsed = net.now - t0;
  const uint64_t cnps = b->stats().cnps_sent;
  EXPECT_GT(cnps, 0u);
  EXPECT_EQ(a->stats().cnps_received, cnps);
  // At most one CNP per lane per cnp_interval (50 us), plus the first of each lane.
  EXPECT_LE(cnps, 2 * (static_cast<uint64_t>(elapsed / cfg.cc.dcqcn.cnp_interval_ns) + 1));
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a->lane_stats(i).cnps_received, b->lane_stats(i).cnps_sent);
    EXPECT_LT(a->lane_stats(i).pacing_rate_bps, cfg.cc.flow.line_rate_bps);
  }
}

TEST(Lanes, BlackHoledPathIsAbandonedAfterRepeatedTimeouts) {
  EngineConfig cfg = lanes_config(cc::ControllerKind::kFixedWindow, 2);
  cfg.repath_rto_threshold = 3;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  const uint32_t bad_path = a->lane_stats(1).path_id;
  uint64_t eaten = 0;
  net.rule = [&](const Sent& s) {
    Fate f;
    f.drop = s.from == 0 && s.tx_meta.path_id == bad_path;  // that ECMP path lost everything
    eaten += f.drop ? 1 : 0;
    return f;
  };
  send_one(net, a, b, 100'000, 5);
  EXPECT_GT(eaten, 0u);
  EXPECT_GE(a->lane_stats(1).repaths, 1u);
  EXPECT_NE(a->lane_stats(1).path_id, bad_path);
  EXPECT_EQ(a->lane_stats(0).repaths, 0u);
  EXPECT_GE(a->lane_stats(1).timeouts, 3u);
  EXPECT_EQ(a->stats().repaths, a->lane_stats(1).repaths);
  EXPECT_GT(a->lane_stats(1).bytes_acked, 0u);  // the lane carries data again on its new path
}

TEST(Lanes, CongestedPathIsAbandonedAfterRoundsOverTargetWithEcn) {
  EngineConfig cfg = lanes_config(cc::ControllerKind::kHybrid, 2);
  cfg.repath_delay_rtts = 4;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  const uint32_t hot_path = a->lane_stats(0).path_id;
  // Packets on the hot path queue for 200 us (far over the ~25-40 us target) and get CE marks.
  net.rule = [&](const Sent& s) {
    Fate f;
    if (s.from == 0 && s.is_seg() && s.tx_meta.path_id == hot_path) {
      f.extra_delay_ns = 200'000;
      f.ce = true;
    }
    return f;
  };
  // The slow lane gets a few segments per 210 us round; keep data flowing for enough rounds.
  for (int i = 0; i < 40 && a->lane_stats(0).repaths == 0; ++i) send_one(net, a, b, 100'000, 6 + i);
  EXPECT_GE(a->lane_stats(0).repaths, 1u);
  EXPECT_NE(a->lane_stats(0).path_id, hot_path);
  EXPECT_EQ(a->lane_stats(1).repaths, 0u);
}

TEST(Lanes, CoalescedAcksStillGrowEveryLane) {
  // One ACK per 8 segments over 4 lanes: the echoed segment is always on the same lane, yet every
  // lane's delay-based window must grow from its initial 10 segments.
  EngineConfig cfg = lanes_config(cc::ControllerKind::kHybrid, 4);
  cfg.ack_every_segments = 8;
  cfg.ack_delay_ns = 5'000;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  const double initial = a->lane_stats(0).cwnd_bytes;
  send_one(net, a, b, 2'000'000, 10);
  EXPECT_LT(b->stats().acks_sent, b->stats().segments_received / 4);  // ACKs were coalesced
  // Every lane grows alike (~3.3x here); lanes fed only when they happen to hold the echoed segment
  // grow unevenly and less (1.7x..2.3x without per-lane samples).
  double lo = 1e300, hi = 0;
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_GT(a->lane_stats(i).cwnd_bytes, 2.5 * initial) << "lane " << i;
    lo = std::min(lo, a->lane_stats(i).cwnd_bytes);
    hi = std::max(hi, a->lane_stats(i).cwnd_bytes);
  }
  EXPECT_LT(hi / lo, 1.2);
}

TEST(Lanes, RttStatisticsMatchTheLinkDelay) {
  TestNet net(lanes_config(cc::ControllerKind::kFixedWindow, 2));
  net.link_delay_ns = 20'000;  // 40 us round trip
  auto [a, b] = net.connect_pair();
  send_one(net, a, b, 100'000, 7);
  const RttHistogram& h = a->stats().rtt;
  EXPECT_GT(h.count(), 50u);
  EXPECT_EQ(h.min_ns(), 40'000);  // the network adds no jitter, the receiver ACKs at once
  EXPECT_EQ(h.max_ns(), 40'000);
  EXPECT_EQ(h.percentile_ns(0.5), 40'000);
  EXPECT_EQ(h.percentile_ns(0.99), 40'000);
  EXPECT_EQ(a->lane_stats(0).rtt.count() + a->lane_stats(1).rtt.count(), h.count());
}

// Hosts that get round to packets late (a busy CPU, a descheduled progress thread) must not look like
// a congested fabric. The wire hands the kernel's receive timestamp to on_packet; the RTT sample ends
// at the ACK's arrival and the receiver's echoed delay starts at the data's arrival, so fabric delay
// (RTT - remote delay) is the link's 10 us however late either side processes. Swift on one lane:
// every ACK acknowledges one segment, so its window depends only on whether each sample was under
// target, and must come out exactly as with prompt processing.
struct LateRun {
  RttHistogram rtt, fabric, rx_delay;
  double cwnd_bytes = 0;
  uint64_t timeouts = 0;
};

LateRun run_late(TimeNs sender_late_ns, TimeNs receiver_late_ns) {
  EngineConfig cfg = lanes_config(cc::ControllerKind::kSwift, 1);
  cfg.cc.rto.initial_rto_ns = 5'000'000;  // the first timeout, before any sample, outlasts 1 ms delays
  // A steady RTT drives RTTVAR to 0 and the RTO to SRTT; the randomised first timeout (down to half
  // of it) would then fire before ACKs that are merely late. This test is about what the RTO learns.
  cfg.cc.rto.first_jitter = 0;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  net.rule = [&](const Sent& s) {
    Fate f;
    f.processing_delay_ns = s.from == 0 ? receiver_late_ns : sender_late_ns;
    return f;
  };
  send_one(net, a, b, 400'000, 9);
  LateRun r;
  r.rtt = a->stats().rtt;
  r.fabric = a->stats().fabric_delay;
  r.rx_delay = a->stats().rx_delay;
  r.cwnd_bytes = a->lane_stats(0).cwnd_bytes;
  r.timeouts = a->stats().timeouts;
  return r;
}

// The receiver's wire sends each ACK 300 us after its engine built it (an I/O thread's queue). Told
// of the wait (add_tx_wait), the wire puts it into the ACK's remote delay and the sender's fabric delay
// stays the link's 10 us; not told, those 300 us read as fabric queueing and Swift cuts the window.
TEST(Lanes, AckWaitInTheWireIsNotFabricDelay) {
  auto run = [](bool tell) {
    EngineConfig cfg = lanes_config(cc::ControllerKind::kSwift, 1);
    cfg.cc.rto.initial_rto_ns = 5'000'000;
    cfg.cc.rto.first_jitter = 0;
    TestNet net(cfg);
    auto [a, b] = net.connect_pair();
    net.tx_wait = [](int from, const TxPacket& tx) -> TimeNs {
      return from == 1 && tx.header[5] == static_cast<uint8_t>(PacketType::kAck) ? 300'000 : 0;
    };
    net.tell_engine_tx_wait = tell;
    // 100 segments; untold, the window falls below one packet and pacing stretches the run.
    send_one(net, a, b, 100'000, 9, 600'000'000'000);
    LateRun r;
    r.rtt = a->stats().rtt;
    r.fabric = a->stats().fabric_delay;
    r.cwnd_bytes = a->lane_stats(0).cwnd_bytes;
    r.timeouts = a->stats().timeouts;
    return r;
  };
  const LateRun told = run(true);
  EXPECT_GT(told.rtt.count(), 30u);
  EXPECT_EQ(told.rtt.min_ns(), 310'000);
  EXPECT_EQ(told.fabric.max_ns(), 10'000);
  EXPECT_GT(told.cwnd_bytes, 10 * 1000.0);  // every sample under target: the window grew
  const LateRun untold = run(false);
  EXPECT_EQ(untold.fabric.min_ns(), 310'000);
  EXPECT_LT(untold.cwnd_bytes, told.cwnd_bytes / 4);
}

TEST(Lanes, LateProcessingIsNotFabricDelay) {
  const LateRun prompt = run_late(0, 0);
  EXPECT_EQ(prompt.fabric.max_ns(), 10'000);
  EXPECT_EQ(prompt.rx_delay.count(), 0u);  // no receive timestamps given

  // The sender reads every ACK 500 us after it arrived: RTT and fabric delay stay the link's.
  const LateRun sender_late = run_late(500'000, 0);
  EXPECT_GT(sender_late.rtt.count(), 300u);
  EXPECT_EQ(sender_late.rtt.min_ns(), 10'000);
  EXPECT_EQ(sender_late.rtt.max_ns(), 10'000);
  EXPECT_EQ(sender_late.fabric.max_ns(), 10'000);
  EXPECT_EQ(sender_late.rx_delay.min_ns(), 500'000);
  EXPECT_EQ(sender_late.rx_delay.max_ns(), 500'000);
  EXPECT_DOUBLE_EQ(sender_late.cwnd_bytes, prompt.cwnd_bytes);
  // The RTO learns from processing time (510 us here), or it would fire before late-read ACKs.
  EXPECT_EQ(sender_late.timeouts, 0u);

  // Both hosts 500 us late: the RTT holds the receiver's delay (Swift's endpoint delay), which the
  // receiver echoes, so fabric delay is still 10 us.
  const LateRun both_late = run_late(500'000, 500'000);
  EXPECT_EQ(both_late.rtt.min_ns(), 510'000);
  EXPECT_EQ(both_late.rtt.max_ns(), 510'000);
  EXPECT_EQ(both_late.fabric.min_ns(), 10'000);
  EXPECT_EQ(both_late.fabric.max_ns(), 10'000);
  EXPECT_DOUBLE_EQ(both_late.cwnd_bytes, prompt.cwnd_bytes);
  EXPECT_EQ(both_late.timeouts, 0u);
  // The window grew: no sample read as over target.
  EXPECT_GT(prompt.cwnd_bytes, 10 * 1000.0);
}

TEST(Lanes, PacingHoldsTheLaneToItsRate) {
  EngineConfig cfg = lanes_config(cc::ControllerKind::kFixedWindow, 1);
  cfg.cc.flow.line_rate_bps = 1e9;  // 1 Gb/s: 1072 wire bytes per segment take 8.6 us
  cfg.cc.fixed.window_packets = 1000;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  const TimeNs t0 = net.now;
  send_one(net, a, b, 200'000, 8);
  const double min_ns =
      200.0 * (1000 + kSegHeaderBytes) * 8.0 - static_cast<double>(cfg.cc.pacer.burst_bytes) * 8.0;
  EXPECT_GE(static_cast<double>(net.now - t0), min_ns);
  EXPECT_LE(static_cast<double>(net.now - t0), min_ns * 1.2 + 100'000);
  EXPECT_DOUBLE_EQ(a->lane_stats(0).pacing_rate_bps, 1e9);
}

TEST(Lanes, EveryPresetControllerDeliversUnderLoss) {
  for (const std::string& name : cc::builtin_cc_config_names()) {
    auto preset = cc::builtin_cc_config(name);
    ASSERT_TRUE(preset.ok()) << name;
    EngineConfig cfg = test_config();
    cfg.cc = *preset;
    cfg.lanes = 3;
    TestNet net(cfg);
    net.rule = [](const Sent& s) {
      Fate f;
      f.drop = s.index % 17 == 5;
      f.ce = s.index % 5 == 0;
      return f;
    };
    auto [a, b] = net.connect_pair();
    ASSERT_NE(b, nullptr) << name;
    SCOPED_TRACE(name);
    send_one(net, a, b, 300'000, 9, 60'000'000'000);
    EXPECT_GT(a->stats().retransmits(), 0u);
  }
}

}  // namespace
}  // namespace megascale::engine::testing
