// Tail-loss probes (EngineConfig::tail_probe, RACK-TLP, RFC 8985 §7). When the last segments of a flight
// are lost, no later segment reveals the hole, and without a probe only the RTO does. The UDP wire's
// plugin runs with a 5 ms RTO floor (host stalls made a 1 ms floor fire thousands of spurious timeouts),
// so there a lost tail cost a small collective 2-9x its time. These tests run with the same 5 ms floor
// and a 10 us RTT: a probe recovers the tail within a few RTTs, and its ACK lets RACK find every other
// segment of the lane that is missing.
#include <gtest/gtest.h>

#include <random>

#include "test_net.h"

namespace megascale::engine::testing {
namespace {

constexpr TimeNs kRtoFloor = 5'000'000;

EngineConfig probe_config(bool tail_probe, TimeNs min_ns = 0) {
  EngineConfig c = test_config();
  c.tail_probe = tail_probe;
  c.tail_probe_min_ns = min_ns;
  c.cc.rto.min_rto_ns = kRtoFloor;
  c.cc.rto.initial_rto_ns = kRtoFloor;
  return c;
}

struct Outcome {
  ConnectionStats tx;
  ConnectionStats rx;
  TimeNs took_ns = 0;  // from posting the message to the send's completion
};

// A warm-up message (so the sender has an RTT estimate, as any connection after its first ACK), then one
// message of `size` bytes A -> B under `rule`; checks that every byte arrived intact.
Outcome transfer(bool tail_probe, std::function<Fate(const Sent&)> rule, uint64_t size = 40'000,
                 TimeNs min_ns = 0) {
  TestNet net(probe_config(tail_probe, min_ns));
  auto [a, b] = net.connect_pair();
  EXPECT_NE(b, nullptr);
  if (b == nullptr) return {};
  Batch warm({4'000}, 1);
  warm.post_recvs(b);
  warm.post_sends(a);
  EXPECT_TRUE(warm.run(net, a, b));
  net.rule = std::move(rule);
  Batch batch({size}, 9);
  const TimeNs t0 = net.now;
  batch.post_recvs(b);
  batch.post_sends(a);
  EXPECT_TRUE(batch.run(net, a, b));
  batch.expect_intact(b);
  const TimeNs took = net.now - t0;
  net.run_for(2 * kRtoFloor);  // late copies still on their way arrive (and count as duplicates)
  Outcome r;
  r.took_ns = took;
  r.tx = a->stats();
  r.rx = b->stats();
  return r;
}

TEST(TailProbe, LostLastSegmentIsRecoveredByAProbeNotATimeout) {
  const Outcome off = transfer(false, drop_first_copy_of({39'000}));
  EXPECT_EQ(off.tx.timeouts, 1u);
  EXPECT_EQ(off.tx.tail_probes, 0u);
  EXPECT_GE(off.took_ns, kRtoFloor / 2);  // the jittered first timeout is at least half the floor

  const Outcome on = transfer(true, drop_first_copy_of({39'000}));
  EXPECT_EQ(on.tx.timeouts, 0u);
  EXPECT_EQ(on.tx.retransmits(), 0u);  // the probe itself repaired the tail
  EXPECT_GE(on.tx.tail_probes, 1u);
  EXPECT_LE(on.tx.tail_probes, 2u);  // one per lane with segments in flight, once
  EXPECT_LT(on.took_ns, kRtoFloor / 10) << "recovered in " << on.took_ns << " ns";
}

TEST(TailProbe, TheProbeTimeoutHasAFloor) {
  // 2 * SRTT is 20 us here; with a 1 ms floor the probe leaves 1 ms after the last ACK, still well
  // before the 5 ms RTO.
  const Outcome on = transfer(true, drop_first_copy_of({39'000}), 40'000, 1'000'000);
  EXPECT_EQ(on.tx.timeouts, 0u);
  EXPECT_GE(on.tx.tail_probes, 1u);
  EXPECT_GE(on.took_ns, 1'000'000);
  EXPECT_LT(on.took_ns, kRtoFloor / 2);
}

TEST(TailProbe, TheProbesAckRevealsTheRestOfTheLanesTail) {
  // The last six segments lost, spread over both lanes: each lane's probe repairs its newest segment,
  // and the ACK of the probe (echoing the probe's send time) shows RACK that the lane's earlier
  // segments are lost, which are then fast-retransmitted; no timeout.
  const Outcome on = transfer(true, drop_first_copy_of({34'000, 35'000, 36'000, 37'000, 38'000, 39'000}));
  EXPECT_EQ(on.tx.timeouts, 0u);
  EXPECT_EQ(on.tx.tail_probes, 2u);
  EXPECT_EQ(on.tx.retransmits_fast, 4u);
  EXPECT_LT(on.took_ns, kRtoFloor / 10) << "recovered in " << on.took_ns << " ns";
  EXPECT_EQ(on.rx.duplicates_dropped, 0u);

  const Outcome off = transfer(false, drop_first_copy_of({34'000, 35'000, 36'000, 37'000, 38'000, 39'000}));
  EXPECT_GE(off.tx.timeouts, 1u);
}

TEST(TailProbe, ALostProbeLeavesItToTheTimeout) {
  // Every copy of the last segment is lost until the third: the probe (the second copy) too.
  const Outcome on = transfer(true, [](const Sent& s) {
    Fate f;
    f.drop = s.is_data() && s.pkt.seg.offset == 39'000 && s.copy < 2;
    return f;
  });
  EXPECT_EQ(on.tx.tail_probes, 1u);  // once until an ACK makes progress
  EXPECT_EQ(on.tx.timeouts, 1u);
  EXPECT_EQ(on.tx.retransmits_rto, 1u);
}

TEST(TailProbe, NoProbesWithoutLoss) {
  const Outcome on = transfer(true, nullptr, 400'000);
  EXPECT_EQ(on.tx.tail_probes, 0u);
  EXPECT_EQ(on.tx.retransmits(), 0u);
  EXPECT_EQ(on.rx.duplicates_dropped, 0u);
}

TEST(TailProbe, AStalledReceiverGetsOneProbeRoundAndNoSpuriousRetransmissions) {
  // The receiving host stops processing for 2 ms (200 RTTs) in mid-message, then reads everything in
  // order. The probes are duplicates (one per lane, once), and the probe's late ACK must not make RACK
  // declare the originals lost: they were processed before the probe.
  const Outcome on = transfer(true, [](const Sent& s) {
    Fate f;
    if (s.is_data() && s.pkt.seg.offset >= 20'000) f.processing_delay_ns = 2'000'000;
    return f;
  });
  EXPECT_EQ(on.tx.timeouts, 0u);
  EXPECT_LE(on.tx.tail_probes, 2u);
  EXPECT_GE(on.tx.tail_probes, 1u);
  EXPECT_EQ(on.tx.retransmits(), 0u);
  EXPECT_EQ(on.rx.duplicates_dropped, on.tx.tail_probes);
}

TEST(TailProbe, RandomLossBothWaysDeliversEverythingIntact) {
  // 3% loss of every packet type in both directions, many messages of mixed sizes each way.
  TestNet net(probe_config(true));
  auto [a, b] = net.connect_pair();
  ASSERT_NE(b, nullptr);
  std::mt19937_64 rng(7);
  net.rule = [&rng](const Sent&) {
    Fate f;
    f.drop = std::uniform_real_distribution<double>(0, 1)(rng) < 0.03;
    return f;
  };
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(1 + rng() % 9'000);
  ASSERT_TRUE(exchange_both_ways(net, a, b, sizes, 3, 4));
  EXPECT_GT(a->stats().tail_probes + b->stats().tail_probes, 0u);
}

TEST(TailProbe, OffByDefault) {
  EXPECT_FALSE(EngineConfig{}.tail_probe);
}

}  // namespace
}  // namespace megascale::engine::testing
