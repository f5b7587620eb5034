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
  // young_echo: the lane of the copy the late ACK echoes, and of the old segment's retransmission
  int echo_lane = -1;
  int retransmission_lane = -1;
  uint64_t repaths = 0;
};

// The sender's counters after a run, and the window of its lane `lane`.
Outcome sender_outcome(Connection* a, const EngineConfig& cfg, uint32_t lane = 0) {
  Outcome o;
  o.timeouts = a->stats().timeouts;
  o.spurious = a->stats().timeouts_spurious;
  o.repaths = a->stats().repaths;
  o.cwnd_packets = a->lane_stats(lane).cwnd_bytes / cfg.segment_bytes;
  return o;
}

// One 4-segment message. `stall`: every first copy arrives 40 ms late and every retransmission is lost
// (the receiver stalled; its data was never lost). Otherwise: every first copy is lost and every
// retransmission arrives 40 ms late (a real loss, and a slow path for the repairs).
Outcome transfer(cc::ControllerKind kind, bool stall, uint32_t repath_rto_threshold = 3) {
  EngineConfig cfg = one_lane(kind);
  cfg.repath_rto_threshold = repath_rto_threshold;
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
  return sender_outcome(a, cfg);
}

class SpuriousRto : public ::testing::TestWithParam<cc::ControllerKind> {};

TEST_P(SpuriousRto, AStalledReceiverDoesNotLeaveTheLaneAtItsFloor) {
  const Outcome o = transfer(GetParam(), /*stall=*/true);
  EXPECT_GE(o.timeouts, 5u);  // enough for the reset to the floor
  EXPECT_EQ(o.spurious, o.timeouts);  // every one of them undone
  // Back at the window the run of timeouts began with (at least), not 0.001 packets.
  EXPECT_GE(o.cwnd_packets, kInitPackets * 0.99)
      << o.cwnd_packets << " packets after " << o.timeouts << " timeouts";
}

// Timeouts that moved the lane to a new path are undone all the same: the path change does not end
// the run of timeouts (here every timeout repaths).
TEST_P(SpuriousRto, TimeoutsThatRepathedAreUndoneToo) {
  const Outcome o = transfer(GetParam(), /*stall=*/true, /*repath_rto_threshold=*/1);
  EXPECT_GE(o.timeouts, 5u);
  EXPECT_EQ(o.repaths, o.timeouts);
  EXPECT_EQ(o.spurious, o.timeouts);
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

// A receiver that stalls past the timeout, then reads the original and its retransmission in one batch
// (as the wire's receive batch does) and answers both with one ACK. That ACK must echo the original,
// the copy that was new, not the duplicate: only then does the sender see its timeout was spurious.
// One segment, so the timeout marks one and retransmits it at once (the other rules have nothing to go
// on: the retransmission left before the ACK).
TEST_P(SpuriousRto, OneAckForAnOriginalAndItsDuplicateEchoesTheOriginal) {
  const EngineConfig cfg = one_lane(GetParam());
  TestNet net(cfg);
  net.coalesce = true;
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  Batch batch({1000}, 5);
  batch.post_recvs(b);
  net.run_for(100'000);                     // the credit reaches A
  const TimeNs wake = net.now + 2'500'000;  // between the first timeout (1 ms) and the second (3 ms)
  net.rule = [&](const Sent& s) {
    Fate f;
    const TimeNs arrival = net.now + net.link_delay_ns;
    if (s.from == 0 && arrival < wake) f.processing_delay_ns = wake - arrival;
    return f;
  };
  batch.post_sends(a);
  ASSERT_TRUE(batch.run(net, a, b, 10'000'000'000));
  batch.expect_intact(b);
  EXPECT_EQ(b->stats().duplicates_dropped, 1u);
  EXPECT_EQ(a->stats().timeouts, 1u);
  EXPECT_EQ(a->stats().timeouts_spurious, 1u);
  EXPECT_GE(a->lane_stats(0).cwnd_bytes / cfg.segment_bytes, kInitPackets * 0.99);
}

// When the echo names a segment no timeout marked. Two messages on one lane: the first (`old_segments`
// segments) has every ACK lost; the second, one segment sent 0.3 ms later, is still younger than the
// base RTO (1 ms) when the timeout fires, so the timeout declares only the first message lost. Its ACK,
// which acknowledges everything, is the first news A gets, 1.5 ms late, between the first timeout and
// the second: it arrives late (`read_late` false), or it arrives in time and A's host reads it late
// (`read_late` true, as an I/O thread descheduled while the engine's timer fired; the wire's kernel
// receive timestamp tells the engine when it arrived). Its echo names the young segment, so Eifel's
// echo test cannot tell; what the ACK covers can.
struct YoungEcho {
  uint32_t old_segments = 1;
  bool read_late = false;
  uint32_t retx_reset_threshold = 5;
  uint32_t lanes = 1;
  TimeNs reo_wnd_ns = 0;              // EngineConfig::reo_wnd_ns
  uint32_t repath_rto_threshold = 3;  // EngineConfig::repath_rto_threshold
};

Outcome young_echo(cc::ControllerKind kind, const YoungEcho& how) {
  EngineConfig cfg = one_lane(kind);
  cfg.lanes = how.lanes;
  cfg.reo_wnd_ns = how.reo_wnd_ns;
  cfg.repath_rto_threshold = how.repath_rto_threshold;
  cfg.cc.rto.min_rto_ns = 1'000'000;
  for (cc::SwiftParams* s : {&cfg.cc.swift, &cfg.cc.hybrid.swift})
    s->retx_reset_threshold = how.retx_reset_threshold;
  TestNet net(cfg);
  auto [a, b] = net.connect_pair();
  EXPECT_NE(b, nullptr);
  if (b == nullptr) return {};
  Batch batch({how.old_segments * 1000ull, 1000}, 3);  // the old message, the young one
  batch.post_recvs(b);
  net.run_for(100'000);  // the credits reach A
  const auto send = [&](Batch::Msg& m) {
    auto id = a->post_send(m.data.data(), m.data.size(), m.tag);
    ASSERT_TRUE(id.ok()) << id.error().message;
    m.send_id = *id;
  };
  uint64_t next_seq = 0;  // 1 + A's highest data seq so far
  uint64_t young_seq = UINT64_MAX;
  net.rule = [&](const Sent& s) {
    Fate f;
    if (s.from == 0 && s.is_data()) next_seq = std::max(next_seq, s.pkt.seg.seq + 1);
    if (s.from != 1 || !s.is_ack()) return f;
    if (s.pkt.ack.echo_seq < young_seq) {
      f.drop = true;  // the old message's ACKs, and those of its retransmissions
    } else if (how.read_late) {
      f.processing_delay_ns = 1'500'000;
    } else {
      f.extra_delay_ns = 1'500'000;
    }
    return f;
  };
  send(batch.msgs[0]);
  net.run_for(300'000);
  young_seq = next_seq;
  send(batch.msgs[1]);
  EXPECT_TRUE(batch.run(net, a, b, 10'000'000'000));
  batch.expect_intact(b);
  int echo_lane = -1;
  int retransmission_lane = -1;
  for (const Sent& s : net.trace) {
    if (s.from == 0 && s.is_data() && s.pkt.seg.seq == young_seq && s.copy == 0) echo_lane = s.tx_meta.lane;
    if (s.from == 0 && s.is_data() && s.pkt.seg.seq < young_seq && s.copy == 1)
      retransmission_lane = s.tx_meta.lane;
  }
  // The window of the lane the retransmission took (lane 0 when none left).
  Outcome o = sender_outcome(a, cfg, static_cast<uint32_t>(std::max(retransmission_lane, 0)));
  o.echo_lane = echo_lane;
  o.retransmission_lane = retransmission_lane;
  return o;
}

// The one retransmission left after the ACK had arrived: what the ACK acknowledges is the original.
TEST_P(SpuriousRto, AnAckReadLateButStampedBeforeTheRetransmissionUndoesTheTimeout) {
  const Outcome o = young_echo(GetParam(), {.old_segments = 1, .read_late = true});
  EXPECT_EQ(o.timeouts, 1u);
  EXPECT_EQ(o.spurious, 1u);
  EXPECT_GE(o.cwnd_packets, kInitPackets * 0.99) << o.cwnd_packets << " packets";
}

// The same ACK arriving late, after the retransmission left. It echoes the young segment, sent before
// the retransmission on the same lane: had the retransmission arrived before the ACK left, it would
// have arrived after the young segment and been the echo. So the original is what it acknowledges.
TEST_P(SpuriousRto, AnAckEchoingAnEarlierCopyOnTheRetransmissionsLaneUndoesTheTimeout) {
  const Outcome o = young_echo(GetParam(), {.old_segments = 1, .read_late = false});
  EXPECT_EQ(o.timeouts, 1u);
  EXPECT_EQ(o.spurious, 1u);
  EXPECT_GE(o.cwnd_packets, kInitPackets * 0.99) << o.cwnd_packets << " packets";
}

// With two lanes the young segment and the retransmission leave on different lanes, whose relative
// order says nothing: the late ACK may acknowledge either copy, so the cut stands (no guess).
TEST_P(SpuriousRto, AnAckEchoingAnotherLaneKeepsTheCut) {
  const Outcome o = young_echo(GetParam(), {.old_segments = 1, .read_late = false, .lanes = 2});
  ASSERT_NE(o.echo_lane, o.retransmission_lane);
  EXPECT_EQ(o.timeouts, 1u);
  EXPECT_EQ(o.spurious, 0u);
  EXPECT_LT(o.cwnd_packets, kInitPackets * 0.99) << o.cwnd_packets << " packets";
}

// Copies sent closer together than the reordering window may arrive in either order (RACK's premise
// too): the young segment left 0.7 ms before the retransmission, inside a 1 ms window, so the cut stands.
TEST_P(SpuriousRto, AnEchoWithinTheReorderingWindowKeepsTheCut) {
  const Outcome o = young_echo(GetParam(), {.old_segments = 1, .read_late = false, .reo_wnd_ns = 1'000'000});
  EXPECT_EQ(o.echo_lane, o.retransmission_lane);
  EXPECT_EQ(o.timeouts, 1u);
  EXPECT_EQ(o.spurious, 0u);
}

// The timeout moves the lane to another path (repathing after 1 timeout) before the retransmission
// leaves: the echoed copy took the old path, which says nothing of the new one's order, so the cut
// stands.
TEST_P(SpuriousRto, AnEchoFromBeforeTheLanesRepathKeepsTheCut) {
  const Outcome o =
      young_echo(GetParam(), {.old_segments = 1, .read_late = false, .repath_rto_threshold = 1});
  EXPECT_EQ(o.echo_lane, o.retransmission_lane);
  EXPECT_EQ(o.repaths, 1u);
  EXPECT_EQ(o.timeouts, 1u);
  EXPECT_EQ(o.spurious, 0u);
}

// The timeout's first cut drops the window to its floor (RETX_RESET_THRESHOLD 1), so the marked segments
// wait for their retransmissions; the late ACK acknowledges segments that were never sent twice.
TEST_P(SpuriousRto, AnOriginalAcknowledgedWhileItsRetransmissionWaitsUndoesTheTimeout) {
  const Outcome o =
      young_echo(GetParam(), {.old_segments = 6, .read_late = false, .retx_reset_threshold = 1});
  EXPECT_EQ(o.timeouts, 1u);
  EXPECT_EQ(o.spurious, 1u);
  EXPECT_GE(o.cwnd_packets, kInitPackets * 0.99) << o.cwnd_packets << " packets";
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
