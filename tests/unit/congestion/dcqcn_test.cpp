// DCQCN reaction point and CNP pacing against the published rules (Zhu et al. SIGCOMM '15),
// driven by scripted events in virtual time. Expected values are computed from the paper's equations.
#include "megascale/congestion/dcqcn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace megascale::cc {
namespace {

FlowParams flow_at(double line_rate_bps) {
  FlowParams flow;
  flow.line_rate_bps = line_rate_bps;
  flow.mss_bytes = 4096;
  flow.base_rtt_ns = 10'000;
  return flow;
}

TEST(Dcqcn, StartsAtLineRateWithAlphaInit) {
  DcqcnParams p = dcqcn_paper_params();
  p.alpha_init = 0.25;
  DcqcnController rp(p, flow_at(gbps(40)));
  EXPECT_EQ(rp.pacing_rate_bps(), gbps(40));
  EXPECT_EQ(rp.target_rate_bps(), gbps(40));
  EXPECT_EQ(rp.alpha(), 0.25);
  EXPECT_EQ(rp.state().decreases, 0u);
  EXPECT_EQ(rp.kind(), ControllerKind::kDcqcn);
}

TEST(Dcqcn, CnpCutsByHalfOfAlphaBeforeItsUpdate) {
  const DcqcnParams p = dcqcn_paper_params();
  DcqcnController rp(p, flow_at(gbps(40)));
  rp.on_timer(0);
  // Let alpha decay for 10 periods so the cut is not the trivial 50%.
  rp.on_timer(10 * p.alpha_update_ns);
  double alpha = 1.0;
  for (int k = 0; k < 10; ++k) alpha *= 1 - p.g;
  ASSERT_DOUBLE_EQ(rp.alpha(), alpha);

  const TimeNs t = 10 * p.alpha_update_ns + 1'000;
  const double rc = rp.rate_bps();
  rp.on_cnp(t);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), rc * (1 - alpha / 2));
  EXPECT_LT(rp.rate_bps(), rc);
  EXPECT_EQ(rp.target_rate_bps(), rc);  // R_T = old R_C
  const double alpha_after = (1 - p.g) * alpha + p.g;
  EXPECT_DOUBLE_EQ(rp.alpha(), alpha_after);
  EXPECT_GT(rp.alpha(), alpha);  // moved toward 1

  // A second CNP cuts the new R_C with the updated alpha, and R_T follows the old R_C again.
  const double rc2 = rp.rate_bps();
  rp.on_cnp(t + 1'000);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), rc2 * (1 - alpha_after / 2));
  EXPECT_EQ(rp.target_rate_bps(), rc2);
  EXPECT_EQ(rp.state().decreases, 2u);
  EXPECT_EQ(rp.state().pacing_rate_bps, rp.rate_bps());
  EXPECT_EQ(rp.state().target_rate_bps, rp.target_rate_bps());
  EXPECT_EQ(rp.state().alpha, rp.alpha());
}

TEST(Dcqcn, MaxDecreaseFractionCapsTheCut) {
  DcqcnParams p = dcqcn_paper_params();
  p.max_decrease_fraction = 0.1;  // alpha = 1 would cut 50%
  DcqcnController rp(p, flow_at(gbps(100)));
  rp.on_cnp(0);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), gbps(100) * 0.9);
}

// Three CNPs in a row (alpha stays 1) leave R_C = 5G, R_T = 10G on a 40G line, far from the clamp.
DcqcnController cut_to_5g_of_40g(const DcqcnParams& p) {
  DcqcnController rp(p, flow_at(gbps(40)));
  for (TimeNs t = 0; t < 3; ++t) rp.on_cnp(t);
  return rp;
}

TEST(Dcqcn, FastRecoveryThenAdditiveThenHyperIncrease) {
  DcqcnParams p = dcqcn_paper_params();
  p.rate_hai_bps = mbps(400);
  const TimeNs cut_at = 2;
  DcqcnController rp = cut_to_5g_of_40g(p);
  ASSERT_DOUBLE_EQ(rp.rate_bps(), gbps(5));
  ASSERT_DOUBLE_EQ(rp.target_rate_bps(), gbps(10));

  double rc = gbps(5), rt = gbps(10);
  TimeNs t = cut_at;
  // Fast recovery: F timer expiries, each halves the distance to an unchanged R_T.
  for (uint32_t k = 1; k <= p.fast_recovery_steps; ++k) {
    t += p.rate_increase_timer_ns;
    rp.on_timer(t - 1);
    EXPECT_DOUBLE_EQ(rp.rate_bps(), rc) << "no increase before the timer expires, step " << k;
    rp.on_timer(t);
    rc = (rt + rc) / 2;
    EXPECT_DOUBLE_EQ(rp.rate_bps(), rc) << "fast recovery step " << k;
    EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt);
  }
  EXPECT_DOUBLE_EQ(rc, gbps(10) - gbps(5) / 32);  // 5 halvings of a 5G gap
  EXPECT_EQ(rp.timer_expirations(), p.fast_recovery_steps);

  // Additive increase: the timer count has reached F, the byte counter has not.
  for (int k = 1; k <= 3; ++k) {
    t += p.rate_increase_timer_ns;
    rp.on_timer(t);
    rt += p.rate_ai_bps;
    rc = (rt + rc) / 2;
    EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt) << "additive step " << k;
    EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
  }
  EXPECT_DOUBLE_EQ(rp.target_rate_bps(), gbps(10) + 3 * p.rate_ai_bps);

  // Byte counter: its first F expirations are additive too (the timer count is already >= F).
  const TimeNs t_bytes = t + 1'000;
  for (uint32_t k = 1; k <= p.fast_recovery_steps; ++k) {
    rp.on_send(t_bytes, p.byte_counter_bytes / 2);
    EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt) << "half a byte-counter period changes nothing";
    rp.on_send(t_bytes, p.byte_counter_bytes - p.byte_counter_bytes / 2);
    rt += p.rate_ai_bps;
    rc = (rt + rc) / 2;
    EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt) << "byte-counter additive step " << k;
    EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
  }
  ASSERT_EQ(rp.byte_expirations(), p.fast_recovery_steps);
  ASSERT_EQ(rp.timer_expirations(), p.fast_recovery_steps + 3);

  // Hyper increase: both counts >= F. Byte expiry: i = min(8, 5) - 5 + 1 = 1.
  rp.on_send(t_bytes, p.byte_counter_bytes);
  rt += 1 * p.rate_hai_bps;
  rc = (rt + rc) / 2;
  EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
  // Another byte expiry: i = min(8, 6) - 5 + 1 = 2.
  rp.on_send(t_bytes, p.byte_counter_bytes);
  rt += 2 * p.rate_hai_bps;
  rc = (rt + rc) / 2;
  EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
  // Timer expiry: i = min(8, 7) - 5 + 1 = 3.
  t += p.rate_increase_timer_ns;
  rp.on_timer(t);
  rt += 3 * p.rate_hai_bps;
  rc = (rt + rc) / 2;
  EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);

  // A CNP resets both counters and the timer phase: the next expiry is T after the cut, fast recovery.
  const TimeNs t_cnp = t + p.rate_increase_timer_ns / 2;
  rp.on_cnp(t_cnp);
  EXPECT_EQ(rp.timer_expirations(), 0u);
  EXPECT_EQ(rp.byte_expirations(), 0u);
  rc = rp.rate_bps();
  rt = rp.target_rate_bps();
  rp.on_timer(t + p.rate_increase_timer_ns);  // the old timer phase: nothing
  EXPECT_DOUBLE_EQ(rp.rate_bps(), rc);
  rp.on_timer(t_cnp + p.rate_increase_timer_ns);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), (rt + rc) / 2);
  EXPECT_DOUBLE_EQ(rp.target_rate_bps(), rt);
}

TEST(Dcqcn, OneLargeSendCountsEveryByteCounterExpiry) {
  const DcqcnParams p = dcqcn_paper_params();
  DcqcnController rp = cut_to_5g_of_40g(p);
  rp.on_send(10, 3 * p.byte_counter_bytes + 7);
  EXPECT_EQ(rp.byte_expirations(), 3u);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), gbps(10) - gbps(5) / 8);  // three fast-recovery halvings
  rp.on_send(10, p.byte_counter_bytes - 7);
  EXPECT_EQ(rp.byte_expirations(), 4u);
}

TEST(Dcqcn, AlphaDecaysOncePerPeriodWithoutCnp) {
  const DcqcnParams p = dcqcn_paper_params();
  DcqcnController rp(p, flow_at(gbps(40)));
  const TimeNs k_ns = p.alpha_update_ns;
  rp.on_timer(0);
  double alpha = 1.0;
  for (int k = 1; k <= 20; ++k) {
    rp.on_timer(k * k_ns - 1);
    EXPECT_DOUBLE_EQ(rp.alpha(), alpha) << "before period " << k << " ends";
    rp.on_timer(k * k_ns);
    alpha *= 1 - p.g;
    EXPECT_DOUBLE_EQ(rp.alpha(), alpha) << "after " << k << " periods";
  }
  EXPECT_NEAR(rp.alpha(), std::pow(1 - p.g, 20), 1e-12);

  // A CNP in the middle of a period: alpha rises and the period that held it does not decay.
  const TimeNs t_cnp = 20 * k_ns + k_ns / 2;
  rp.on_cnp(t_cnp);
  alpha = (1 - p.g) * alpha + p.g;
  EXPECT_DOUBLE_EQ(rp.alpha(), alpha);
  rp.on_timer(21 * k_ns);  // where the old schedule would have decayed
  EXPECT_DOUBLE_EQ(rp.alpha(), alpha);
  rp.on_timer(t_cnp + k_ns - 1);
  EXPECT_DOUBLE_EQ(rp.alpha(), alpha);
  rp.on_timer(t_cnp + k_ns);
  EXPECT_DOUBLE_EQ(rp.alpha(), alpha * (1 - p.g));
  rp.on_timer(t_cnp + 3 * k_ns);  // two more periods in one call
  EXPECT_DOUBLE_EQ(rp.alpha(), alpha * (1 - p.g) * (1 - p.g) * (1 - p.g));
}

TEST(Dcqcn, RateStaysWithinMinAndLineRateUnderCnpStorm) {
  DcqcnParams p = dcqcn_paper_params();
  p.min_rate_bps = mbps(100);
  DcqcnController rp(p, flow_at(gbps(100)));
  TimeNs t = 0;
  for (int i = 0; i < 2000; ++i) {
    rp.on_cnp(t);
    rp.on_send(t, 4096);
    EXPECT_GE(rp.rate_bps(), p.min_rate_bps);
    EXPECT_LE(rp.rate_bps(), gbps(100));
    EXPECT_LE(rp.target_rate_bps(), gbps(100));
    t += 1'000;
  }
  EXPECT_EQ(rp.rate_bps(), p.min_rate_bps);  // the storm drove it to the floor, not below
  EXPECT_EQ(rp.state().decreases, 2000u);

  // Recovery without CNPs, with bytes flowing: rising, capped at line rate, ends exactly there.
  double prev = rp.rate_bps();
  for (int i = 0; i < 100'000 && rp.rate_bps() < gbps(100); ++i) {
    t += 10'000;
    rp.on_send(t, 1'000'000);
    EXPECT_GE(rp.rate_bps(), prev);
    EXPECT_LE(rp.rate_bps(), gbps(100));
    EXPECT_LE(rp.target_rate_bps(), gbps(100));
    prev = rp.rate_bps();
  }
  EXPECT_EQ(rp.rate_bps(), gbps(100));
  EXPECT_EQ(rp.target_rate_bps(), gbps(100));
}

TEST(Dcqcn, CnpsInsideMinDecreaseIntervalDoNotCut) {
  const DcqcnParams p = dcqcn_nic_firmware_params(gbps(100));
  ASSERT_EQ(p.min_decrease_interval_ns, 4'000);
  DcqcnController rp(p, flow_at(gbps(100)));
  rp.on_cnp(0);
  const double rc = rp.rate_bps();
  const double alpha = rp.alpha();
  rp.on_cnp(500);  // 0.5 us after the cut (before the 1 us alpha timer): merged
  EXPECT_EQ(rp.rate_bps(), rc);
  EXPECT_EQ(rp.state().decreases, 1u);
  EXPECT_DOUBLE_EQ(rp.alpha(), (1 - p.g) * alpha + p.g);  // but it still counts toward alpha
  // 4 us after the cut: cuts.
  rp.on_cnp(4'000);
  EXPECT_LT(rp.rate_bps(), rc);
  EXPECT_EQ(rp.state().decreases, 2u);

  // A CNP every 1 us for 40 us cuts once per 4 us.
  DcqcnController storm(p, flow_at(gbps(100)));
  for (TimeNs t = 0; t < 40'000; t += 1'000) storm.on_cnp(t);
  EXPECT_EQ(storm.state().decreases, 10u);
}

// Applies the same scripted events to `rp`; with `step_timers`, also calls on_timer at every expiry the
// controller announces before each event.
void run_script(DcqcnController& rp, bool step_timers) {
  struct Event {
    TimeNs t;
    enum { kCnp, kSend, kAck } what;
    uint64_t bytes;
  };
  const std::vector<Event> script = {
      {0, Event::kSend, 4096},         {5'000, Event::kCnp, 0},
      {7'000, Event::kCnp, 0},         {90'000, Event::kSend, 250'000},
      {91'000, Event::kSend, 900'000}, {400'000, Event::kAck, 0},
      {410'000, Event::kCnp, 0},       {800'000, Event::kSend, 2'000'000},
      {2'500'000, Event::kSend, 100},  {2'600'000, Event::kCnp, 0},
      {9'000'000, Event::kSend, 100},  {60'000'000, Event::kAck, 0},
  };
  for (const Event& e : script) {
    if (step_timers) {
      for (TimeNs next = rp.next_timer_ns(); next <= e.t; next = rp.next_timer_ns()) rp.on_timer(next);
    }
    switch (e.what) {
      case Event::kCnp:
        rp.on_cnp(e.t);
        break;
      case Event::kSend:
        rp.on_send(e.t, e.bytes);
        break;
      case Event::kAck:
        rp.on_ack(e.t, AckSample{.acked_bytes = 4096, .acked_packets = 1, .rtt_ns = 12'000});
        break;
    }
  }
}

TEST(Dcqcn, LazyCatchUpEqualsExplicitTimerCalls) {
  DcqcnParams p = dcqcn_paper_params();
  p.alpha_update_ns = 20'000;  // interleave the two timers
  p.rate_increase_timer_ns = 55'000;
  p.byte_counter_bytes = 200'000;
  p.fast_recovery_steps = 2;
  DcqcnController lazy(p, flow_at(gbps(100)));
  DcqcnController stepped(p, flow_at(gbps(100)));
  run_script(lazy, false);
  run_script(stepped, true);
  EXPECT_EQ(lazy.rate_bps(), stepped.rate_bps());
  EXPECT_EQ(lazy.target_rate_bps(), stepped.target_rate_bps());
  EXPECT_EQ(lazy.alpha(), stepped.alpha());
  EXPECT_EQ(lazy.timer_expirations(), stepped.timer_expirations());
  EXPECT_EQ(lazy.byte_expirations(), stepped.byte_expirations());
  EXPECT_EQ(lazy.next_timer_ns(), stepped.next_timer_ns());
  EXPECT_EQ(lazy.state().decreases, 4u);
  EXPECT_EQ(stepped.state().decreases, 4u);
  EXPECT_EQ(lazy.cwnd_bytes(), stepped.cwnd_bytes());
}

TEST(Dcqcn, NextTimerIsNeverOnceRecoveredAndFiniteAfterCnp) {
  const DcqcnParams p = dcqcn_paper_params();
  DcqcnController rp(p, flow_at(gbps(40)));
  EXPECT_EQ(rp.next_timer_ns(), kNever);  // the clock has not started
  rp.on_timer(0);
  EXPECT_EQ(rp.next_timer_ns(), p.alpha_update_ns);  // alpha = 1 still decays
  rp.on_cnp(1'000);
  EXPECT_EQ(rp.next_timer_ns(), 1'000 + std::min(p.alpha_update_ns, p.rate_increase_timer_ns));

  // Follow the announced expiries until the controller has nothing left to do.
  int steps = 0;
  for (TimeNs next = rp.next_timer_ns(); next != kNever && steps < 100'000; next = rp.next_timer_ns()) {
    ASSERT_GT(next, 0);
    rp.on_timer(next);
    ++steps;
  }
  EXPECT_LT(steps, 100'000);
  EXPECT_EQ(rp.next_timer_ns(), kNever);
  EXPECT_EQ(rp.rate_bps(), gbps(40));
  EXPECT_EQ(rp.target_rate_bps(), gbps(40));
  EXPECT_EQ(rp.alpha(), 0.0);

  // One call across a long idle gap reaches the same converged state.
  DcqcnController jump(p, flow_at(gbps(40)));
  jump.on_timer(0);
  jump.on_cnp(1'000);
  jump.on_timer(sec(3600));
  EXPECT_EQ(jump.next_timer_ns(), kNever);
  EXPECT_EQ(jump.rate_bps(), gbps(40));
  EXPECT_EQ(jump.alpha(), 0.0);
  jump.on_cnp(sec(3600) + 1);  // alpha was 0: no cut, and alpha restarts at g
  EXPECT_EQ(jump.rate_bps(), gbps(40));
  EXPECT_DOUBLE_EQ(jump.alpha(), p.g);
  EXPECT_NE(jump.next_timer_ns(), kNever);
}

TEST(Dcqcn, RecoveryEndsExactlyAtLineRateWhateverItsLastBit) {
  // (R_T + R_C) / 2 can round back to R_C one ulp below R_T (round-half-to-even): recovery must still
  // end at the line rate, for a line rate of either mantissa parity.
  for (double line : {gbps(100), std::nextafter(gbps(100), 1e12)}) {
    DcqcnController rp(dcqcn_paper_params(), flow_at(line));
    rp.on_cnp(0);
    int steps = 0;
    for (TimeNs next = rp.next_timer_ns(); next != kNever && steps < 100'000; next = rp.next_timer_ns()) {
      rp.on_timer(next);
      ++steps;
    }
    EXPECT_EQ(rp.rate_bps(), line);
    EXPECT_EQ(rp.next_timer_ns(), kNever);
  }
}

TEST(Dcqcn, AckEcnRtoAndFastRecoveryDoNotChangeRate) {
  DcqcnParams p = dcqcn_paper_params();
  p.window_cap_bdp = 1.0;
  DcqcnController rp(p, flow_at(gbps(100)));
  // 1 BDP at 100G over the 10 us base RTT.
  EXPECT_DOUBLE_EQ(rp.cwnd_bytes(), gbps(100) * 10e-6 / 8);
  AckSample ack{.acked_bytes = 4096, .acked_packets = 1, .rtt_ns = 20'000};
  ack.ecn_ce = true;
  ack.ce_packets = 1;
  rp.on_ack(1'000, ack);
  rp.on_fast_recovery(2'000);
  rp.on_rto(3'000);
  EXPECT_EQ(rp.rate_bps(), gbps(100));
  EXPECT_EQ(rp.state().decreases, 0u);
  EXPECT_DOUBLE_EQ(rp.cwnd_bytes(), gbps(100) * 20e-6 / 8);  // RTT from the latest sample
  rp.on_cnp(4'000);
  EXPECT_DOUBLE_EQ(rp.cwnd_bytes(), rp.rate_bps() * 20e-6 / 8);
  EXPECT_EQ(rp.state().cwnd_bytes, rp.cwnd_bytes());

  DcqcnController uncapped(dcqcn_paper_params(), flow_at(gbps(100)));
  EXPECT_GE(uncapped.cwnd_bytes(), 1e15);
}

TEST(CnpPacer, FirstCeYieldsCnpAndAtMostOnePerInterval) {
  const TimeNs n_ns = 50'000;
  CnpPacer np(n_ns);
  EXPECT_FALSE(np.on_packet(0, false));
  EXPECT_TRUE(np.on_packet(7'000, true));  // the first CE, at any time

  // Continuous CE, one packet per 1 us for 1 ms: a CNP at 7, 57, 107, ... us and no other.
  std::vector<TimeNs> cnp_times;
  for (TimeNs t = 8'000; t < 1'007'000; t += 1'000) {
    if (np.on_packet(t, true)) cnp_times.push_back(t);
  }
  ASSERT_EQ(cnp_times.size(), 19u);
  for (size_t i = 0; i < cnp_times.size(); ++i) {
    EXPECT_EQ(cnp_times[i], 7'000 + static_cast<TimeNs>(i + 1) * n_ns);
  }
  EXPECT_EQ(np.cnps_sent(), 20u);

  // After a quiet gap the next CE yields a CNP at once.
  EXPECT_TRUE(np.on_packet(2'000'000, true));
  EXPECT_FALSE(np.on_packet(2'000'001, true));
}

TEST(CnpPacer, NoCeNoCnp) {
  CnpPacer np(us(50));
  for (TimeNs t = 0; t < 1'000'000; t += 500) EXPECT_FALSE(np.on_packet(t, false));
  EXPECT_EQ(np.cnps_sent(), 0u);
}

TEST(CnpPacer, ZeroIntervalSendsOnEveryCe) {
  CnpPacer np(0);
  for (TimeNs t = 0; t < 10; ++t) EXPECT_TRUE(np.on_packet(100, true));
  EXPECT_EQ(np.cnps_sent(), 10u);
}

TEST(DcqcnPresets, PaperValues) {
  const DcqcnParams p = dcqcn_paper_params();
  EXPECT_DOUBLE_EQ(p.g, 1.0 / 256);
  EXPECT_DOUBLE_EQ(p.alpha_init, 1.0);
  EXPECT_EQ(p.alpha_update_ns, 55'000);
  EXPECT_EQ(p.rate_increase_timer_ns, 55'000);
  EXPECT_EQ(p.byte_counter_bytes, 10'000'000u);
  EXPECT_EQ(p.fast_recovery_steps, 5u);
  EXPECT_DOUBLE_EQ(p.rate_ai_bps, 40e6);
  EXPECT_EQ(p.cnp_interval_ns, 50'000);
  EXPECT_EQ(p.min_decrease_interval_ns, 0);
  EXPECT_DOUBLE_EQ(p.max_decrease_fraction, 0.5);
  EXPECT_DOUBLE_EQ(p.window_cap_bdp, 0.0);
}

TEST(DcqcnPresets, FirmwareValuesScaleWithLineRate) {
  const DcqcnParams p = dcqcn_nic_firmware_params(gbps(100));
  EXPECT_DOUBLE_EQ(p.g, 5.0 / 1024);
  EXPECT_DOUBLE_EQ(1 - p.g, 1019.0 / 1024);
  EXPECT_DOUBLE_EQ(p.alpha_init, 1023.0 / 1024);
  EXPECT_EQ(p.alpha_update_ns, 1'000);
  EXPECT_EQ(p.min_decrease_interval_ns, 4'000);
  EXPECT_DOUBLE_EQ(p.max_decrease_fraction, 0.5);
  EXPECT_DOUBLE_EQ(p.min_rate_bps, 1e6);
  EXPECT_EQ(p.rate_increase_timer_ns, 300'000);
  EXPECT_EQ(p.fast_recovery_steps, 1u);
  EXPECT_DOUBLE_EQ(p.rate_ai_bps, 20e6);    // 5 Mbps * 100/25
  EXPECT_DOUBLE_EQ(p.rate_hai_bps, 200e6);  // 50 Mbps * 100/25

  const DcqcnParams p25 = dcqcn_nic_firmware_params(gbps(25));
  const DcqcnParams p400 = dcqcn_nic_firmware_params(gbps(400));
  EXPECT_DOUBLE_EQ(p25.rate_ai_bps, 5e6);
  EXPECT_DOUBLE_EQ(p25.rate_hai_bps, 50e6);
  EXPECT_DOUBLE_EQ(p400.rate_ai_bps, 80e6);
  EXPECT_DOUBLE_EQ(p400.rate_hai_bps, 800e6);
  EXPECT_EQ(p400.rate_increase_timer_ns, p25.rate_increase_timer_ns);  // only AI/HAI scale

  // With F = 1 the firmware preset takes one fast-recovery step, then additive increase.
  DcqcnController rp(p, flow_at(gbps(100)));
  rp.on_cnp(0);
  const double rc = rp.rate_bps();
  rp.on_timer(p.rate_increase_timer_ns);
  EXPECT_DOUBLE_EQ(rp.rate_bps(), (gbps(100) + rc) / 2);
  EXPECT_DOUBLE_EQ(rp.target_rate_bps(), gbps(100));
}

}  // namespace
}  // namespace megascale::cc
