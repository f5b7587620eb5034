// HybridController: the 2x2 law of congestion/README.md ("Hybrid"), its once-per-RTT decrease budget
// and max_mdf bound, the alpha estimator, loss handling, pacing below one packet, and fairness in a
// small fluid model of one bottleneck.
#include "megascale/congestion/hybrid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "megascale/congestion/fixed_window.h"
#include "megascale/congestion/swift.h"

namespace megascale::cc {
namespace {

constexpr TimeNs kRttNs = 20'000;  // constant RTT sample used by most tests (below every target)
constexpr uint32_t kMss = 4096;

FlowParams test_flow() {
  return FlowParams{.line_rate_bps = gbps(100), .mss_bytes = kMss, .base_rtt_ns = 10'000, .hops = 0};
}

AckSample ack(TimeNs rtt_ns, bool ecn = false) {
  return AckSample{.acked_bytes = kMss, .acked_packets = 1, .rtt_ns = rtt_ns, .ecn_ce = ecn};
}

// Target for the controller's current window, as the hybrid computes it (Swift §3.5).
double target_of(const HybridParams& p, const HybridController& cc, uint8_t hops = 0) {
  return swift_target_delay_ns(p.swift, cc.cwnd_packets(), hops);
}

// Brings alpha down to (1 - g)^rounds without touching the window: the first call opens a round of
// one base RTT, the second closes `rounds` rounds that saw no ECN. Returns the time of the second call.
TimeNs decay_alpha(HybridController& cc, int rounds) {
  cc.on_timer(0);
  const TimeNs now = rounds * test_flow().base_rtt_ns;
  cc.on_timer(now);
  return now;
}

TEST(HybridTest, StartsAtInitialWindowWithAlphaOne) {
  HybridParams p;
  HybridController cc(p, test_flow());
  EXPECT_EQ(cc.kind(), ControllerKind::kHybrid);
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), p.swift.init_cwnd_packets);
  EXPECT_DOUBLE_EQ(cc.cwnd_bytes(), p.swift.init_cwnd_packets * kMss);
  EXPECT_DOUBLE_EQ(cc.alpha(), 1.0);
  EXPECT_EQ(cc.next_timer_ns(), kNever);
}

// --- The four cases -----------------------------------------------------------------------------

TEST(HybridTest, BelowTargetNoEcnIsSwiftAdditiveIncrease) {
  HybridParams p;
  HybridController cc(p, test_flow());
  ASSERT_LT(static_cast<double>(kRttNs), target_of(p, cc));
  cc.on_ack(0, ack(kRttNs));
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), 10 + p.swift.ai_packets / 10);  // ai/cwnd per acked packet
  EXPECT_EQ(cc.state().decreases, 0u);

  // Below one packet the increase is ai per acked packet (Swift Algorithm 1).
  p.swift.init_cwnd_packets = 0.25;
  HybridController small(p, test_flow());
  small.on_ack(0, AckSample{.acked_bytes = 2 * kMss, .acked_packets = 2, .rtt_ns = kRttNs});
  EXPECT_DOUBLE_EQ(small.cwnd_packets(), 0.25 + 2 * p.swift.ai_packets);
}

TEST(HybridTest, BelowTargetWithEcnCutsByHalfAlpha) {
  HybridParams p;
  HybridController cc(p, test_flow());
  const TimeNs now = decay_alpha(cc, 10);
  const double alpha = std::pow(1 - p.g, 10);
  ASSERT_NEAR(cc.alpha(), alpha, 1e-12);
  ASSERT_GT(alpha / 2, p.ecn_min_cut);

  cc.on_ack(now, ack(kRttNs, /*ecn=*/true));
  EXPECT_NEAR(cc.cwnd_packets(), 10 * (1 - alpha / 2), 1e-12);
  EXPECT_EQ(cc.state().decreases, 1u);
}

TEST(HybridTest, BelowTargetWithEcnCutsAtLeastEcnMinCut) {
  HybridParams p;
  p.g = 0.5;  // alpha = 2^-10 after ten quiet rounds: alpha/2 is far below ecn_min_cut
  HybridController cc(p, test_flow());
  const TimeNs now = decay_alpha(cc, 10);
  ASSERT_LT(cc.alpha() / 2, p.ecn_min_cut);
  cc.on_ack(now, ack(kRttNs, /*ecn=*/true));
  EXPECT_NEAR(cc.cwnd_packets(), 10 * (1 - p.ecn_min_cut), 1e-12);
}

TEST(HybridTest, AboveTargetNoEcnIsSwiftDelayProportionalCut) {
  HybridParams p;
  HybridController cc(p, test_flow());
  const double target = target_of(p, cc);
  const double delay = 60'000;
  ASSERT_GT(delay, target);
  const double factor = 1 - p.swift.beta * (delay - target) / delay;
  ASSERT_GT(factor, 1 - p.swift.max_mdf);  // the proportional term, not the bound, decides here

  cc.on_ack(0, ack(static_cast<TimeNs>(delay)));
  EXPECT_NEAR(cc.cwnd_packets(), 10 * factor, 1e-12);
  EXPECT_EQ(cc.state().decreases, 1u);

  // A far larger delay is bounded by max_mdf.
  HybridController far(p, test_flow());
  far.on_ack(0, ack(10'000'000));
  EXPECT_NEAR(far.cwnd_packets(), 10 * (1 - p.swift.max_mdf), 1e-12);
}

TEST(HybridTest, AboveTargetWithEcnTakesTheLargerCutOnce) {
  HybridParams p;
  const double alpha = std::pow(1 - p.g, 10);
  const double ecn_cut = alpha / 2;  // ~0.26

  // Delay 60 us: Swift's proportional cut (~0.35) is the larger one.
  {
    HybridController cc(p, test_flow());
    const TimeNs now = decay_alpha(cc, 10);
    const double target = target_of(p, cc);
    const double delay_cut = p.swift.beta * (60'000 - target) / 60'000;
    ASSERT_GT(delay_cut, ecn_cut);
    cc.on_ack(now, ack(60'000, /*ecn=*/true));
    EXPECT_NEAR(cc.cwnd_packets(), 10 * (1 - delay_cut), 1e-12);
    EXPECT_EQ(cc.state().decreases, 1u);
  }
  // Delay 40 us: just over target, the ECN cut is the larger one; never the product of both.
  {
    HybridController cc(p, test_flow());
    const TimeNs now = decay_alpha(cc, 10);
    const double target = target_of(p, cc);
    ASSERT_GT(40'000, target);
    const double delay_cut = p.swift.beta * (40'000 - target) / 40'000;
    ASSERT_GT(ecn_cut, delay_cut);
    ASSERT_GT(delay_cut, 0);
    cc.on_ack(now, ack(40'000, /*ecn=*/true));
    EXPECT_NEAR(cc.cwnd_packets(), 10 * (1 - ecn_cut), 1e-12);
    EXPECT_GT(cc.cwnd_packets(), 10 * (1 - ecn_cut) * (1 - delay_cut) + 1e-6);
    EXPECT_EQ(cc.state().decreases, 1u);
  }
  // Both at their largest are still bounded by max_mdf.
  {
    p.swift.max_mdf = 0.3;
    HybridController cc(p, test_flow());  // alpha = 1: the ECN cut alone would be 0.5
    cc.on_ack(0, ack(10'000'000, /*ecn=*/true));
    EXPECT_NEAR(cc.cwnd_packets(), 10 * 0.7, 1e-12);
  }
}

// --- ECN reacts before delay builds -------------------------------------------------------------

// Twenty ACKs 1 us apart at a constant RTT far below target; one of them (the 10th) carries the mark.
// Swift, which ignores ECN, grows on every one of them (Algorithm 1: cwnd += ai/cwnd per packet).
TEST(HybridTest, EcnCutsWithinOneRttWhereSwiftWouldGrow) {
  for (const bool use_cnp : {false, true}) {
    SCOPED_TRACE(use_cnp ? "CNP" : "ECN echo");
    HybridParams p;
    HybridController cc(p, test_flow());
    double swift_cwnd = p.swift.init_cwnd_packets;
    for (int i = 0; i < 20; ++i) {
      const TimeNs now = i * 1'000;
      ASSERT_LT(static_cast<double>(kRttNs), target_of(p, cc));
      swift_cwnd += p.swift.ai_packets / swift_cwnd;
      const double before = cc.cwnd_packets();
      if (i == 10 && use_cnp) {
        cc.on_cnp(now);
      } else {
        cc.on_ack(now, ack(kRttNs, /*ecn=*/i == 10 && !use_cnp));
      }
      if (i == 10) {
        EXPECT_NEAR(cc.cwnd_packets(), before * (1 - std::max(1.0 / 2, p.ecn_min_cut)), 1e-12);
      } else {
        EXPECT_GT(cc.cwnd_packets(), before);  // unmarked ACKs still grow the window
      }
    }
    EXPECT_GT(swift_cwnd, p.swift.init_cwnd_packets + 1.5);  // Swift: 20 increases, ~1.8 packets
    EXPECT_LT(cc.cwnd_packets(), 0.6 * swift_cwnd);
    EXPECT_EQ(cc.state().decreases, 1u);
  }
}

// --- Once per RTT, never more than max_mdf ------------------------------------------------------

TEST(HybridTest, EcnOnEveryAckCutsOncePerRtt) {
  HybridParams p;
  p.swift.init_cwnd_packets = 1000;
  p.swift.max_cwnd_packets = 1000;
  HybridController cc(p, test_flow());
  std::vector<double> cwnd_at;  // after the ACK at t = i us
  for (int i = 0; i <= 100; ++i) {
    const double before = cc.cwnd_packets();
    cc.on_ack(i * 1'000, ack(kRttNs, /*ecn=*/true));
    const bool rtt_boundary = i % (kRttNs / 1'000) == 0;
    if (rtt_boundary) {
      EXPECT_LT(cc.cwnd_packets(), before) << "t=" << i << "us";
    } else {
      EXPECT_EQ(cc.cwnd_packets(), before) << "t=" << i << "us";  // marked ACKs hold, never grow
    }
    cwnd_at.push_back(cc.cwnd_packets());
  }
  EXPECT_EQ(cc.state().decreases, 6u);  // t = 0, 20, 40, 60, 80, 100 us
  // Over any window of one RTT the window loses at most max_mdf.
  for (size_t i = 0; i + 19 < cwnd_at.size(); ++i) {
    const double start = i == 0 ? 1000 : cwnd_at[i - 1];
    EXPECT_GE(cwnd_at[i + 19], start * (1 - p.swift.max_mdf) - 1e-9);
  }
}

TEST(HybridTest, AllDecreaseCausesShareOneCutPerRtt) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(10'000'000, /*ecn=*/true));  // huge delay and a mark: one max_mdf cut
  const double after_first = cc.cwnd_packets();
  EXPECT_NEAR(after_first, 10 * (1 - p.swift.max_mdf), 1e-12);

  // Every other cause within the same RTT (the RTT sample is now 10 ms) is absorbed.
  cc.on_cnp(1'000);
  cc.on_fast_recovery(2'000);
  cc.on_rto(3'000);
  cc.on_ack(4'000, ack(10'000'000, /*ecn=*/true));
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), after_first);
  EXPECT_EQ(cc.state().decreases, 1u);

  // One RTT after the cut, the next one is allowed.
  cc.on_fast_recovery(10'000'000);
  EXPECT_NEAR(cc.cwnd_packets(), after_first * (1 - p.swift.max_mdf), 1e-12);
  EXPECT_EQ(cc.state().decreases, 2u);
}

// --- Alpha --------------------------------------------------------------------------------------

TEST(HybridTest, AlphaDecaysByOneMinusGPerRttWithoutEcn) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(kRttNs));
  for (int k = 1; k <= 40; ++k) {
    cc.on_ack(k * kRttNs, ack(kRttNs));
    EXPECT_NEAR(cc.alpha(), std::pow(1 - p.g, k), 1e-12) << "round " << k;
  }
}

TEST(HybridTest, AlphaRisesTowardOneWithEcnEveryRtt) {
  HybridParams p;
  HybridController cc(p, test_flow());
  const TimeNs start = decay_alpha(cc, 100);
  const double alpha0 = std::pow(1 - p.g, 100);
  ASSERT_NEAR(cc.alpha(), alpha0, 1e-12);
  // ACKs every 5 us, all marked, RTT 20 us: every round has F = 1.
  double last = cc.alpha();
  for (int k = 1; k <= 120; ++k) {
    for (int j = 0; j < 4; ++j) cc.on_ack(start + (k - 1) * kRttNs + j * 5'000, ack(kRttNs, true));
    cc.on_timer(start + k * kRttNs);
    const double expected = 1 - (1 - alpha0) * std::pow(1 - p.g, k);
    EXPECT_NEAR(cc.alpha(), expected, 1e-12) << "round " << k;
    EXPECT_GT(cc.alpha(), last);
    last = cc.alpha();
  }
  EXPECT_GT(cc.alpha(), 0.99);
}

TEST(HybridTest, AlphaFollowsTheMarkedFraction) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(kRttNs, true));  // opens the round: 1 marked of 1
  cc.on_ack(5'000, ack(kRttNs));    // 1 of 2
  cc.on_ack(10'000, AckSample{.acked_bytes = 2 * kMss,
                              .acked_packets = 2,
                              .rtt_ns = kRttNs,
                              .ecn_ce = true,
                              .ce_packets = 1});  // counted marks: 2 of 4
  cc.on_timer(kRttNs);
  EXPECT_NEAR(cc.alpha(), (1 - p.g) * 1.0 + p.g * 0.5, 1e-12);

  // A round with a CNP has F = 1 whatever its ACKs said.
  HybridController cnp(p, test_flow());
  decay_alpha(cnp, 20);
  const double a0 = cnp.alpha();
  const TimeNs t = 20 * test_flow().base_rtt_ns;
  cnp.on_ack(t, ack(kRttNs));  // RTT sample 20 us from here on
  cnp.on_cnp(t + 1'000);
  cnp.on_ack(t + 2'000, ack(kRttNs));
  cnp.on_timer(t + kRttNs);
  EXPECT_NEAR(cnp.alpha(), (1 - p.g) * a0 + p.g, 1e-12);
}

// --- Loss ---------------------------------------------------------------------------------------

TEST(HybridTest, FastRecoveryCutsMaxMdfOncePerRtt) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(kRttNs));
  const double w = cc.cwnd_packets();
  cc.on_fast_recovery(1'000);
  EXPECT_NEAR(cc.cwnd_packets(), w * (1 - p.swift.max_mdf), 1e-12);
  cc.on_fast_recovery(2'000);
  EXPECT_NEAR(cc.cwnd_packets(), w * (1 - p.swift.max_mdf), 1e-12);
  cc.on_fast_recovery(1'000 + kRttNs);
  EXPECT_NEAR(cc.cwnd_packets(), w * (1 - p.swift.max_mdf) * (1 - p.swift.max_mdf), 1e-12);
}

TEST(HybridTest, RepeatedRtosResetToMinCwndAndAckClearsTheCount) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(kRttNs));
  TimeNs now = 0;
  for (uint32_t i = 1; i < p.swift.retx_reset_threshold; ++i) {
    now += kRttNs;
    cc.on_rto(now);
    EXPECT_EQ(cc.retransmit_count(), i);
    EXPECT_GT(cc.cwnd_packets(), p.swift.min_cwnd_packets);
  }
  cc.on_ack(now, ack(kRttNs));  // progress: the count starts over
  EXPECT_EQ(cc.retransmit_count(), 0u);
  for (uint32_t i = 1; i <= p.swift.retx_reset_threshold; ++i) cc.on_rto(now + i);  // same RTT
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), p.swift.min_cwnd_packets);
}

// --- Pacing, target, signal details -------------------------------------------------------------

TEST(HybridTest, PacesBelowOnePacketExactlyAsSwift) {
  HybridParams p;
  p.swift.init_cwnd_packets = 0.4;
  HybridController cc(p, test_flow());
  cc.on_ack(0, AckSample{.acked_packets = 0, .rtt_ns = kRttNs});  // an RTT sample that acks nothing
  ASSERT_DOUBLE_EQ(cc.cwnd_packets(), 0.4);
  EXPECT_NEAR(cc.pacing_rate_bps(), 0.4 * kMss * 8 / (kRttNs * 1e-9), 1e-3);
  EXPECT_DOUBLE_EQ(cc.state().pacing_rate_bps, cc.pacing_rate_bps());

  p.swift.init_cwnd_packets = 1;
  HybridController one(p, test_flow());
  EXPECT_DOUBLE_EQ(one.pacing_rate_bps(), gbps(100));
}

TEST(HybridTest, TargetUsesFlowAndTopologyScaling) {
  HybridParams p;
  HybridController cc(p, test_flow());
  const double t0 = swift_target_delay_ns(p.swift, 10, 0);
  const double t3 = swift_target_delay_ns(p.swift, 10, 3);
  EXPECT_DOUBLE_EQ(cc.state().target_delay_ns, t0);
  ASSERT_GT(t3, t0);
  // A delay between the two targets is congestion with no hop count, and fine over three hops.
  const auto between = static_cast<TimeNs>((t0 + t3) / 2);
  HybridController three(p, test_flow());
  AckSample a = ack(between);
  a.hops = 3;
  three.on_ack(0, a);
  EXPECT_GT(three.cwnd_packets(), 10);
  EXPECT_DOUBLE_EQ(three.state().target_delay_ns, swift_target_delay_ns(p.swift, three.cwnd_packets(), 3));
  cc.on_ack(0, ack(between));
  EXPECT_LT(cc.cwnd_packets(), 10);
}

TEST(HybridTest, FabricDelayExcludesRemoteDelay) {
  HybridParams p;
  HybridController cc(p, test_flow());
  AckSample a = ack(200'000);
  a.remote_delay_ns = 190'000;  // the receiver was slow; the fabric was not
  cc.on_ack(0, a);
  EXPECT_GT(cc.cwnd_packets(), 10);

  p.swift.use_fabric_delay = false;
  HybridController whole(p, test_flow());
  whole.on_ack(0, a);
  EXPECT_LT(whole.cwnd_packets(), 10);
}

// Swift §3.1-§3.3: only fabric delay cuts. A sample that only bounds the fabric delay from above (the
// receiver's delay for it was not echoed: AckSample::delay_upper_bound) increases below the target,
// holds above it, and an ECN mark on it still cuts as DCQCN's R_C does.
AckSample bound(TimeNs rtt_ns, bool ecn = false) {
  AckSample a = ack(rtt_ns, ecn);
  a.delay_upper_bound = true;
  return a;
}

TEST(HybridTest, AnUpperBoundOverTheTargetHoldsWithoutEcn) {
  HybridParams p;
  HybridController cc(p, test_flow());
  for (TimeNs t = 0; t < 100'000'000; t += 1'000'000) cc.on_ack(t, bound(5'000'000));
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), 10);
  EXPECT_EQ(cc.state().decreases, 0u);
  // Below the target a bound grows the window as an exact sample does.
  HybridController exact(p, test_flow());
  cc.on_ack(100'000'000, bound(kRttNs));
  exact.on_ack(100'000'000, ack(kRttNs));
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), 10 + p.swift.ai_packets / 10);
  EXPECT_DOUBLE_EQ(exact.cwnd_packets(), 10 + p.swift.ai_packets / 10);
}

TEST(HybridTest, AnUpperBoundOverTheTargetWithEcnCutsByEcnAlone) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, bound(10'000'000, /*ecn=*/true));
  // alpha starts at 1: R_C (1 - alpha/2) = one half, which is also max_mdf; the delay adds nothing.
  EXPECT_NEAR(cc.cwnd_packets(), 10 * (1 - std::min(0.5, p.swift.max_mdf)), 1e-12);
  EXPECT_EQ(cc.state().decreases, 1u);
}

// Swift §3.3-§3.4, as in Swift: below one packet the sends are spaced over the fabric round trip, the
// receiver's echoed delay taken out.
TEST(HybridTest, PacesBelowOnePacketOverTheFabricRoundTrip) {
  HybridParams p;
  p.swift.init_cwnd_packets = 0.5;
  HybridController cc(p, test_flow());
  AckSample a = ack(300'000 + 4'700'000);
  a.remote_delay_ns = 4'700'000;
  cc.on_ack(0, a);
  ASSERT_LT(cc.cwnd_packets(), 1);
  const double expected_bps = cc.cwnd_packets() * kMss * 8 / 300e-6;
  EXPECT_NEAR(cc.pacing_rate_bps(), expected_bps, expected_bps * 1e-12);
}

TEST(HybridTest, AtFloorOnlyAtMinCwnd) {
  HybridParams p;
  HybridController cc(p, test_flow());
  EXPECT_FALSE(cc.at_floor());
  for (uint32_t i = 1; i <= p.swift.retx_reset_threshold; ++i) cc.on_rto(i);
  ASSERT_DOUBLE_EQ(cc.cwnd_packets(), p.swift.min_cwnd_packets);
  EXPECT_TRUE(cc.at_floor());
  cc.on_ack(1'000'000, ack(kRttNs));
  EXPECT_FALSE(cc.at_floor());
}

TEST(HybridTest, AckWithoutRttSampleOnlyReactsToEcn) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(-1));
  EXPECT_DOUBLE_EQ(cc.cwnd_packets(), 10);
  cc.on_ack(1'000, ack(-1, /*ecn=*/true));
  EXPECT_NEAR(cc.cwnd_packets(), 5, 1e-12);  // alpha = 1: cut by one half
}

TEST(HybridTest, StateReportsEveryField) {
  HybridParams p;
  HybridController cc(p, test_flow());
  cc.on_ack(0, ack(kRttNs, true));
  const ControllerState s = cc.state();
  EXPECT_DOUBLE_EQ(s.cwnd_bytes, cc.cwnd_packets() * kMss);
  EXPECT_DOUBLE_EQ(s.pacing_rate_bps, gbps(100));
  EXPECT_DOUBLE_EQ(s.target_delay_ns, swift_target_delay_ns(p.swift, cc.cwnd_packets(), 0));
  EXPECT_DOUBLE_EQ(s.alpha, cc.alpha());
  EXPECT_EQ(s.decreases, 1u);
  EXPECT_EQ(s.target_rate_bps, 0.0);
}

// --- Fairness in a fluid bottleneck -------------------------------------------------------------

// N flows share a bottleneck of capacity C with a FIFO queue q. RTT = base + q/C; the queue marks
// ECN while q > K. Each flow sends at cwnd/RTT (or its pacing rate, whichever is lower); the link
// serves C per step, shared in proportion to the arrival rates; every MSS of a flow's delivered bytes
// returns one ACK carrying the current RTT and mark. Feedback delay is ignored: this checks the
// control law's convergence, not a simulator. Statistics cover the last quarter of the run.
struct FluidResult {
  double jain = 0;
  double utilization = 0;
  double mean_queue_bytes = 0;
};

constexpr double kFluidEcnThresholdBytes = 100'000;  // K: 8 us of queue at 100 Gbps
constexpr double kNoMarking = 1e18;

template <class MakeController>
FluidResult run_fluid(const std::vector<double>& init_cwnd_packets, double ecn_threshold_bytes,
                      MakeController make) {
  const double capacity_bytes_per_ns = gbps(100) / 8e9;
  const double base_rtt_ns = 10'000;
  const TimeNs dt_ns = 100;
  const TimeNs duration_ns = 20'000'000;
  const TimeNs measure_from_ns = duration_ns * 3 / 4;

  const size_t n = init_cwnd_packets.size();
  std::vector<decltype(make(1.0))> flows;
  for (double w : init_cwnd_packets) flows.push_back(make(w));
  std::vector<double> rate(n), pending(n, 0), measured(n, 0);
  double queue_bytes = 0, served_total = 0, queue_sum = 0;
  int64_t samples = 0;
  for (TimeNs now = 0; now < duration_ns; now += dt_ns) {
    const double rtt_ns = base_rtt_ns + queue_bytes / capacity_bytes_per_ns;
    double arrivals = 0;
    for (size_t i = 0; i < n; ++i) {
      rate[i] = std::min(flows[i]->cwnd_bytes() / rtt_ns, flows[i]->pacing_rate_bps() / 8e9);
      arrivals += rate[i] * dt_ns;
    }
    const double served = std::min(queue_bytes + arrivals, capacity_bytes_per_ns * dt_ns);
    queue_bytes += arrivals - served;
    const bool marked = queue_bytes > ecn_threshold_bytes;
    const bool measuring = now >= measure_from_ns;
    for (size_t i = 0; i < n; ++i) {
      const double delivered = arrivals > 0 ? served * rate[i] * dt_ns / arrivals : 0;
      pending[i] += delivered;
      if (measuring) measured[i] += delivered;
      for (; pending[i] >= kMss; pending[i] -= kMss) {
        flows[i]->on_ack(now, ack(static_cast<TimeNs>(rtt_ns), marked));
      }
    }
    if (measuring) {
      served_total += served;
      queue_sum += queue_bytes;
      ++samples;
    }
  }
  FluidResult r;
  r.jain = jain_index(measured.data(), static_cast<int>(n));
  r.utilization = served_total / (capacity_bytes_per_ns * static_cast<double>(samples * dt_ns));
  r.mean_queue_bytes = queue_sum / static_cast<double>(samples);
  return r;
}

std::unique_ptr<Controller> make_hybrid(double init_cwnd_packets) {
  HybridParams p;
  p.swift.init_cwnd_packets = init_cwnd_packets;
  return std::make_unique<HybridController>(p, test_flow());
}

// Windows spread over three orders of magnitude, from paced (below one packet) to far above the
// bottleneck's BDP of ~30 packets.
const std::vector<double> kSpread4 = {0.5, 4, 40, 400};
const std::vector<double> kSpread8 = {0.2, 1, 3, 10, 30, 100, 300, 900};

TEST(HybridFluidTest, ConvergesToFairShareFromVeryDifferentWindows) {
  const FluidResult four = run_fluid(kSpread4, kFluidEcnThresholdBytes, make_hybrid);
  EXPECT_GE(four.jain, 0.95);
  EXPECT_GE(four.utilization, 0.9);

  const FluidResult eight = run_fluid(kSpread8, kFluidEcnThresholdBytes, make_hybrid);
  EXPECT_GE(eight.jain, 0.95);
  EXPECT_GE(eight.utilization, 0.9);
}

TEST(HybridFluidTest, EcnHoldsTheQueueBelowWhatDelayAloneBuilds) {
  // Without marking the hybrid is Swift: still fair, but the queue grows until delay reaches the
  // target. With marking it settles near K, well below the delay target's queue.
  const FluidResult with_ecn = run_fluid(kSpread4, kFluidEcnThresholdBytes, make_hybrid);
  const FluidResult delay_only = run_fluid(kSpread4, kNoMarking, make_hybrid);
  EXPECT_GE(delay_only.jain, 0.95);
  EXPECT_GE(delay_only.utilization, 0.9);
  EXPECT_LT(with_ecn.mean_queue_bytes, 1.5 * kFluidEcnThresholdBytes);
  EXPECT_LT(with_ecn.mean_queue_bytes, 0.6 * delay_only.mean_queue_bytes);
}

TEST(HybridFluidTest, FixedWindowBaselineStaysUnfairInTheSameLoop) {
  // The same loop with no congestion control keeps rates proportional to the initial windows, so
  // the fairness bound above is one the loop can fail.
  const FluidResult fixed = run_fluid(kSpread4, kFluidEcnThresholdBytes, [](double w) {
    return std::make_unique<FixedWindowController>(FixedWindowParams{.window_packets = w}, test_flow());
  });
  EXPECT_LT(fixed.jain, 0.5);
}

}  // namespace
}  // namespace megascale::cc
