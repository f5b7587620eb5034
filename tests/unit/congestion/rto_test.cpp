// RtoEstimator: RFC 6298 SRTT/RTTVAR, floor and ceiling, backoff, randomised first timeout, the retry
// budget, and surviving a MegaScale-style link flap of 5 s with the defaults.
#include "megascale/congestion/rto.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace megascale::cc {
namespace {

RtoParams no_jitter() {
  RtoParams p;
  p.first_jitter = 0;
  return p;
}

// Drives a dead peer: the first timeout is armed at `arm_ns`, every timer fires on time and each
// kRetry re-arms timeout_ns(). Returns the time from arming to the kGiveUp verdict.
TimeNs time_to_give_up(RtoEstimator& rto, TimeNs arm_ns) {
  TimeNs now = arm_ns;
  for (int i = 0; i < 100'000; ++i) {
    now += rto.timeout_ns();
    if (rto.on_timeout(now) == RtoVerdict::kGiveUp) return now - arm_ns;
  }
  ADD_FAILURE() << "never gave up";
  return kNever;
}

TEST(RtoEstimator, InitialRtoBeforeAnySample) {
  RtoEstimator rto(no_jitter(), 1);
  EXPECT_EQ(rto.srtt_ns(), 0);
  EXPECT_EQ(rto.base_rto_ns(), 1'000'000);
  EXPECT_EQ(rto.timeout_ns(), 1'000'000);
}

TEST(RtoEstimator, FirstSampleSetsSrttAndHalfVariance) {
  RtoEstimator rto(no_jitter(), 1);
  rto.on_rtt_sample(100'000);
  EXPECT_EQ(rto.srtt_ns(), 100'000);
  EXPECT_EQ(rto.rttvar_ns(), 50'000);
  EXPECT_EQ(rto.base_rto_ns(), 100'000 + 4 * 50'000);
}

TEST(RtoEstimator, KnownSampleSequence) {
  // By hand, RFC 6298 §2.3 (RTTVAR first, with the old SRTT):
  //   R=100us: SRTT=100000, RTTVAR=50000
  //   R=200us: RTTVAR=.75*50000+.25*100000=62500, SRTT=.875*100000+.125*200000=112500, RTO=362500
  //   R= 80us: RTTVAR=.75*62500+.25*32500=55000,  SRTT=.875*112500+.125*80000=108437.5,
  //            RTO=108437.5+4*55000=328437.5
  RtoEstimator rto(no_jitter(), 1);
  rto.on_rtt_sample(100'000);
  rto.on_rtt_sample(200'000);
  EXPECT_EQ(rto.srtt_ns(), 112'500);
  EXPECT_EQ(rto.rttvar_ns(), 62'500);
  EXPECT_EQ(rto.base_rto_ns(), 362'500);
  rto.on_rtt_sample(80'000);
  EXPECT_NEAR(rto.srtt_ns(), 108'437.5, 0.5);
  EXPECT_EQ(rto.rttvar_ns(), 55'000);
  EXPECT_NEAR(rto.base_rto_ns(), 328'437.5, 0.5);
  EXPECT_EQ(rto.timeout_ns(), rto.base_rto_ns());  // no jitter: the first timeout is the base
}

TEST(RtoEstimator, RttvarMultiplierIsAParameter) {
  RtoParams p = no_jitter();
  p.rttvar_k = 2;
  RtoEstimator rto(p, 1);
  rto.on_rtt_sample(100'000);
  EXPECT_EQ(rto.base_rto_ns(), 100'000 + 2 * 50'000);
}

TEST(RtoEstimator, ConstantRttConvergesAndVarianceDecays) {
  RtoParams p = no_jitter();
  p.min_rto_ns = 1'000;
  RtoEstimator rto(p, 1);
  for (int i = 0; i < 200; ++i) rto.on_rtt_sample(40'000);
  EXPECT_EQ(rto.srtt_ns(), 40'000);
  EXPECT_EQ(rto.rttvar_ns(), 0);  // 20000 * 0.75^199 rounds to 0
  EXPECT_EQ(rto.base_rto_ns(), 40'000);
}

TEST(RtoEstimator, NegativeSampleIsIgnored) {
  RtoEstimator rto(no_jitter(), 1);
  rto.on_rtt_sample(-1);
  EXPECT_EQ(rto.base_rto_ns(), 1'000'000);
  rto.on_rtt_sample(100'000);
  rto.on_rtt_sample(-1);
  EXPECT_EQ(rto.srtt_ns(), 100'000);
  EXPECT_EQ(rto.rttvar_ns(), 50'000);
}

TEST(RtoEstimator, FloorAndCeilingBoundTheBaseAndEveryTimeout) {
  RtoParams p;  // default jitter 0.5: a jittered first timeout must not leave [min_rto, max_rto] either
  for (uint64_t seed = 0; seed < 200; ++seed) {
    RtoEstimator fast(p, seed);
    for (int i = 0; i < 50; ++i) fast.on_rtt_sample(2'000);  // 2 us: SRTT + 4 RTTVAR far below 100 us
    EXPECT_EQ(fast.base_rto_ns(), p.min_rto_ns);
    EXPECT_GE(fast.timeout_ns(), p.min_rto_ns);
    EXPECT_LE(fast.timeout_ns(), p.min_rto_ns * 3 / 2);

    RtoEstimator slow(p, seed);
    slow.on_rtt_sample(sec(10));
    EXPECT_EQ(slow.base_rto_ns(), p.max_rto_ns);
    EXPECT_GE(slow.timeout_ns(), p.max_rto_ns / 2);
    EXPECT_LE(slow.timeout_ns(), p.max_rto_ns);
  }
}

TEST(RtoEstimator, BackoffDoublesEachTimeoutUpToTheCeilingExactly) {
  RtoEstimator rto(no_jitter(), 1);
  rto.on_rtt_sample(100'000);  // base 300 us
  const TimeNs first = rto.timeout_ns();
  ASSERT_EQ(first, 300'000);
  TimeNs now = 0;
  TimeNs expected = first;
  for (uint32_t n = 1; n <= 20; ++n) {
    now += rto.timeout_ns();
    ASSERT_EQ(rto.on_timeout(now), RtoVerdict::kRetry) << n;
    EXPECT_EQ(rto.backoff_count(), n);
    expected = std::min<TimeNs>(expected * 2, 1'000'000'000);
    EXPECT_EQ(rto.timeout_ns(), expected) << "after " << n << " timeouts";
  }
  // 300 us * 2^11 = 614.4 ms, * 2^12 would be 1.2288 s: capped at the 1 s ceiling from there on.
  EXPECT_EQ(rto.timeout_ns(), 1'000'000'000);
}

TEST(RtoEstimator, BackoffDoublesTheJitteredFirstTimeout) {
  RtoEstimator rto(RtoParams{}, 7);
  rto.on_rtt_sample(100'000);
  const TimeNs first = rto.timeout_ns();
  TimeNs now = 0;
  for (uint32_t n = 1; n <= 15; ++n) {
    now += rto.timeout_ns();
    ASSERT_EQ(rto.on_timeout(now), RtoVerdict::kRetry);
    EXPECT_EQ(rto.timeout_ns(), std::min<TimeNs>(first << n, 1'000'000'000)) << n;
  }
}

TEST(RtoEstimator, FirstTimeoutLiesInTheJitterRangeAndSpreadsOverIt) {
  const RtoParams p;  // first_jitter 0.5
  double lo = 2, hi = 0, sum = 0;
  std::set<TimeNs> distinct;
  constexpr int kSeeds = 1000;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    RtoEstimator rto(p, seed);
    rto.on_rtt_sample(200'000);  // base 600 us, far from floor and ceiling
    const double f = static_cast<double>(rto.timeout_ns()) / static_cast<double>(rto.base_rto_ns());
    ASSERT_GE(f, 0.5 - 1e-6);
    ASSERT_LE(f, 1.5 + 1e-6);
    lo = std::min(lo, f);
    hi = std::max(hi, f);
    sum += f;
    distinct.insert(rto.timeout_ns());
  }
  EXPECT_LT(lo, 0.55);  // uniform over [0.5, 1.5]: 1000 draws reach near both ends
  EXPECT_GT(hi, 1.45);
  EXPECT_NEAR(sum / kSeeds, 1.0, 0.05);
  EXPECT_GT(distinct.size(), 950u);  // seeds give different timeouts
}

TEST(RtoEstimator, SameSeedSameTimeoutsDifferentSeedDifferent) {
  auto episode_firsts = [](uint64_t seed) {
    RtoEstimator rto(RtoParams{}, seed);
    rto.on_rtt_sample(200'000);
    std::vector<TimeNs> firsts;
    TimeNs now = 0;
    for (int episode = 0; episode < 8; ++episode) {
      firsts.push_back(rto.timeout_ns());
      now += rto.timeout_ns();
      EXPECT_EQ(rto.on_timeout(now), RtoVerdict::kRetry);
      rto.on_progress(now + 1'000);
      now += 1'000;
    }
    return firsts;
  };
  const auto a = episode_firsts(42);
  EXPECT_EQ(a, episode_firsts(42));
  EXPECT_NE(a, episode_firsts(43));
  EXPECT_NE(a[0], episode_firsts(43)[0]);
  // A new draw per episode: eight episodes do not all get the same first timeout.
  EXPECT_GT(std::set<TimeNs>(a.begin(), a.end()).size(), 1u);
}

TEST(RtoEstimator, JitterIsDrawnOncePerEpisodeNotPerCall) {
  RtoEstimator rto(RtoParams{}, 5);
  rto.on_rtt_sample(200'000);
  const TimeNs first = rto.timeout_ns();
  EXPECT_EQ(rto.timeout_ns(), first);
  rto.on_progress(10);  // progress outside an episode does not redraw
  EXPECT_EQ(rto.timeout_ns(), first);
}

TEST(RtoEstimator, BudgetExpiresExactlyAtTheDeadline) {
  RtoParams p = no_jitter();
  p.retry_budget_ns = ms(10);
  const TimeNs start = 5'000'000;
  // A timeout 1 ns before the deadline retries; one at the deadline gives up.
  for (const TimeNs second : {start + ms(10) - 1, start + ms(10)}) {
    RtoEstimator rto(p, 1);
    ASSERT_EQ(rto.on_timeout(start), RtoVerdict::kRetry);
    EXPECT_EQ(rto.episode_start_ns(), start);
    const RtoVerdict expected = second < start + ms(10) ? RtoVerdict::kRetry : RtoVerdict::kGiveUp;
    EXPECT_EQ(rto.on_timeout(second), expected);
  }
}

TEST(RtoEstimator, ArmedTimeoutsLandTheGiveUpOnTheDeadline) {
  RtoParams p = no_jitter();
  p.retry_budget_ns = ms(10);
  RtoEstimator rto(p, 1);
  rto.on_rtt_sample(100'000);  // 300 us: 0.6 + 1.2 + 2.4 + 4.8 ms = 9 ms, then 0.6 -> 1 ms is cut
  const TimeNs arm = 1'000'000;
  const TimeNs first_fire = arm + rto.timeout_ns();
  TimeNs now = arm;
  std::vector<TimeNs> armed;
  RtoVerdict v = RtoVerdict::kRetry;
  while (v == RtoVerdict::kRetry) {
    armed.push_back(rto.timeout_ns());
    now += armed.back();
    v = rto.on_timeout(now);
    if (v == RtoVerdict::kRetry) {
      EXPECT_LT(now - first_fire, p.retry_budget_ns);
    }
  }
  EXPECT_EQ(now, first_fire + p.retry_budget_ns);
  const std::vector<TimeNs> expected = {300'000, 600'000, 1'200'000, 2'400'000, 4'800'000, 1'000'000};
  EXPECT_EQ(armed, expected);
  EXPECT_EQ(now - arm, rto.worst_case_budget_ns());
  EXPECT_EQ(rto.timeout_ns(), kNever);
}

TEST(RtoEstimator, MaxRetriesGivesUpOnTheNextTimeoutAndStaysGivenUp) {
  RtoParams p = no_jitter();
  p.max_retries = 3;
  RtoEstimator rto(p, 1);
  rto.on_rtt_sample(100'000);  // 300 us
  TimeNs now = 0;
  for (int i = 1; i <= 3; ++i) {
    now += rto.timeout_ns();
    EXPECT_EQ(rto.on_timeout(now), RtoVerdict::kRetry) << i;
  }
  now += rto.timeout_ns();
  EXPECT_EQ(rto.on_timeout(now), RtoVerdict::kGiveUp);
  EXPECT_TRUE(rto.given_up());
  // 300 us to the first fire, then 600 + 1200 + 2400 us of retries.
  EXPECT_EQ(now, 300'000 + 600'000 + 1'200'000 + 2'400'000);
  rto.on_progress(now + 1);
  EXPECT_TRUE(rto.given_up());
  EXPECT_EQ(rto.on_timeout(now + 2), RtoVerdict::kGiveUp);
  EXPECT_EQ(rto.timeout_ns(), kNever);
}

TEST(RtoEstimator, ProgressEndsTheEpisodeAndRestoresTheFullBudget) {
  RtoParams p = no_jitter();
  p.retry_budget_ns = ms(10);
  p.max_retries = 5;
  RtoEstimator rto(p, 1);
  rto.on_rtt_sample(100'000);
  TimeNs now = 0;
  for (int i = 0; i < 5; ++i) {
    now += rto.timeout_ns();
    ASSERT_EQ(rto.on_timeout(now), RtoVerdict::kRetry);
  }
  EXPECT_EQ(rto.backoff_count(), 5u);
  EXPECT_GT(rto.timeout_ns(), 300'000);
  rto.on_progress(now + 1'000);
  EXPECT_EQ(rto.backoff_count(), 0u);
  EXPECT_FALSE(rto.in_episode());
  EXPECT_EQ(rto.episode_start_ns(), kNever);
  EXPECT_EQ(rto.timeout_ns(), 300'000);
  // A new episode: five more timeouts are allowed again, and its budget runs from its own start.
  const TimeNs second_start = now + ms(50);
  ASSERT_EQ(rto.on_timeout(second_start), RtoVerdict::kRetry);
  EXPECT_EQ(rto.episode_start_ns(), second_start);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rto.on_timeout(second_start + 1 + i), RtoVerdict::kRetry);
  }
  EXPECT_EQ(rto.on_timeout(second_start + 10), RtoVerdict::kGiveUp);  // the sixth: over max_retries
}

TEST(RtoEstimator, WorstCaseBudgetMatchesADeadPeer) {
  // With no jitter the worst case is the exact time a dead peer takes to be declared dead.
  struct Case {
    TimeNs rtt_ns, max_rto_ns, budget_ns;
    uint32_t max_retries;
  };
  const Case cases[] = {
      {100'000, ms(10), sec(1), 10},            // retries bind, after reaching the ceiling
      {100'000, sec(1), ms(10), 64},            // budget binds before the ceiling
      {10'000, sec(1), sec(30), 64},            // budget binds after the ceiling
      {10'000, ms(1), sec(1), 4'000'000'000u},  // huge retry count: closed form, no long loop
  };
  for (const Case& c : cases) {
    RtoParams p = no_jitter();
    p.max_rto_ns = c.max_rto_ns;
    p.retry_budget_ns = c.budget_ns;
    p.max_retries = c.max_retries;
    RtoEstimator rto(p, 3);
    rto.on_rtt_sample(c.rtt_ns);
    const TimeNs worst = rto.worst_case_budget_ns();
    EXPECT_EQ(time_to_give_up(rto, 0), worst) << c.rtt_ns << " " << c.max_retries;
  }
  // Retries binding, by hand: first 1 ms (initial RTO), then 2, 4, 8 and seven timeouts at 10 ms.
  RtoParams p = no_jitter();
  p.max_rto_ns = ms(10);
  p.max_retries = 10;
  EXPECT_EQ(RtoEstimator(p, 1).worst_case_budget_ns(), ms(1) + ms(2 + 4 + 8 + 7 * 10));
}

TEST(RtoEstimator, WorstCaseBoundsEveryJitteredDeadPeer) {
  const RtoParams p;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    RtoEstimator rto(p, seed);
    const TimeNs worst = rto.worst_case_budget_ns();
    const TimeNs t = time_to_give_up(rto, 0);
    EXPECT_LE(t, worst);
    EXPECT_GE(t, p.retry_budget_ns);  // the defaults give up on the budget, never earlier
  }
}

TEST(RtoEstimator, DefaultBudgetOutlastsAFiveSecondLinkFlap) {
  const RtoParams p;
  EXPECT_GT(RtoEstimator(p, 0).worst_case_budget_ns(), sec(5));
  // MegaScale §6.3: a link goes down and comes back within several seconds, dropping everything in
  // flight. Whatever the RTT and the seed, backoff must still leave a retransmission after the link
  // returns, inside the budget, and not too long after the link is back (the ceiling bounds the wait).
  const TimeNs flap_ns = sec(5);
  for (const TimeNs rtt : {TimeNs{5'000}, us(50), ms(1), ms(50)}) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      RtoEstimator rto(p, seed);
      for (int i = 0; i < 20; ++i) rto.on_rtt_sample(rtt);
      TimeNs now = 0;  // last progress; the link goes down right after it
      RtoVerdict v = RtoVerdict::kRetry;
      while (now < flap_ns) {
        now += rto.timeout_ns();
        v = rto.on_timeout(now);
        ASSERT_EQ(v, RtoVerdict::kRetry) << "gave up at " << now << " ns, rtt " << rtt;
      }
      // This retransmission left after the link came back: it is delivered and acknowledged.
      EXPECT_LE(now, flap_ns + p.max_rto_ns);
      rto.on_progress(now + rtt);
      EXPECT_FALSE(rto.given_up());
      EXPECT_EQ(rto.backoff_count(), 0u);
    }
  }
}

}  // namespace
}  // namespace megascale::cc
