// FaultInjector: each fault happens with its configured probability, a seed fixes the sequence, held
// datagrams come back (delay after delay_ns, reorder after reorder_depth overtakers), nothing is lost
// or invented that the configuration did not ask for.
#include "megascale/wire/fault.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace megascale::wire {
namespace {

constexpr int kPackets = 200'000;

// Offers kPackets 64-byte datagrams (numbered in their first 4 bytes), releasing held ones as it goes
// (1 us between arrivals); returns the sequence numbers in delivery order.
struct RunResult {
  std::vector<uint32_t> delivered;
  FaultCounters counters;
  int bits_flipped = 0;
  int ce = 0;
};

RunResult run(const FaultConfig& cfg, int packets = kPackets) {
  FaultInjector inj(cfg);
  RunResult r;
  TimeNs now = 0;
  std::vector<uint8_t> d(64);
  auto check = [&](const uint8_t* bytes, size_t len) {
    // Count flipped bits against the pristine pattern (seq in bytes 0..3, then byte k = 7 k).
    uint32_t seq = 0;
    std::memcpy(&seq, bytes, 4);
    for (size_t k = 4; k < len; ++k) {
      r.bits_flipped += __builtin_popcount(static_cast<uint8_t>(k * 7) ^ bytes[k]);
    }
    r.delivered.push_back(seq);
  };
  for (int i = 0; i < packets; ++i) {
    now += 1000;
    const auto seq = static_cast<uint32_t>(i);
    std::memcpy(d.data(), &seq, 4);
    for (size_t k = 4; k < d.size(); ++k) d[k] = static_cast<uint8_t>(k * 7);
    bool ce = false;
    FaultInjector::Verdict v = inj.apply(now, 0, d, ce);
    if (v.action == FaultInjector::Action::kDeliver) {
      for (int c = 0; c < v.copies; ++c) {
        check(d.data(), d.size());
        r.ce += ce ? 1 : 0;
      }
    }
    HeldDatagram h;
    while (inj.pop_ready(now, h)) {
      check(h.bytes.data(), h.bytes.size());
      r.ce += h.ce ? 1 : 0;
    }
  }
  // Drain: everything held comes out by the time the longest hold has passed.
  now += std::max<TimeNs>(cfg.delay_ns, kReorderMaxHoldNs) + 1;
  HeldDatagram h;
  while (inj.pop_ready(now, h)) {
    check(h.bytes.data(), h.bytes.size());
    r.ce += h.ce ? 1 : 0;
  }
  EXPECT_EQ(inj.held(), 0u);
  EXPECT_EQ(inj.next_deadline(), kNever);
  r.counters = inj.counters();
  return r;
}

// |observed - p n| within 5 standard deviations of a binomial (false-failure odds ~ 1e-6).
void expect_binomial(uint64_t observed, double p, int n, const char* what) {
  const double mean = p * n;
  const double sd = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(observed), mean, 5 * sd + 1) << what;
}

TEST(FaultInjector, OffByDefaultDeliversEverythingInOrderUntouched) {
  FaultConfig cfg;
  EXPECT_FALSE(cfg.enabled());
  RunResult r = run(cfg, 10'000);
  ASSERT_EQ(r.delivered.size(), 10'000u);
  for (uint32_t i = 0; i < r.delivered.size(); ++i) ASSERT_EQ(r.delivered[i], i);
  EXPECT_EQ(r.bits_flipped, 0);
  EXPECT_EQ(r.ce, 0);
}

TEST(FaultInjector, DropProbabilityHonoured) {
  for (double p : {0.001, 0.01, 0.1, 0.5}) {
    FaultConfig cfg;
    cfg.drop = p;
    cfg.seed = 7;
    RunResult r = run(cfg);
    expect_binomial(r.counters.dropped, p, kPackets, "drop");
    EXPECT_EQ(r.delivered.size() + r.counters.dropped, static_cast<size_t>(kPackets));
  }
}

TEST(FaultInjector, DuplicateCorruptAndCeProbabilitiesHonoured) {
  FaultConfig cfg;
  cfg.duplicate = 0.02;
  cfg.corrupt = 0.03;
  cfg.mark_ce = 0.05;
  cfg.seed = 11;
  RunResult r = run(cfg);
  expect_binomial(r.counters.duplicated, 0.02, kPackets, "duplicate");
  expect_binomial(r.counters.corrupted, 0.03, kPackets, "corrupt");
  expect_binomial(r.counters.ce_marked, 0.05, kPackets, "mark_ce");
  // Each duplicate is one extra delivery; each corruption flips exactly one bit (some may hit the
  // sequence number bytes, which the pattern check above does not see, so at most one per count).
  EXPECT_EQ(r.delivered.size(), kPackets + r.counters.duplicated);
  EXPECT_LE(r.bits_flipped, static_cast<int>(2 * r.counters.corrupted));
  EXPECT_GT(r.bits_flipped, 0);
}

TEST(FaultInjector, ReorderedDatagramsAreOvertakenByDepthLaterOnes) {
  FaultConfig cfg;
  cfg.reorder = 0.01;
  cfg.reorder_depth = 5;
  cfg.seed = 3;
  RunResult r = run(cfg);
  expect_binomial(r.counters.reordered, 0.01, kPackets, "reorder");
  ASSERT_EQ(r.delivered.size(), static_cast<size_t>(kPackets));  // nothing lost
  // Every datagram arrives exactly once; a reordered one is displaced by about reorder_depth places.
  std::vector<int> seen(kPackets, 0);
  int late = 0;
  for (size_t pos = 0; pos < r.delivered.size(); ++pos) {
    ++seen[r.delivered[pos]];
    const auto displacement = static_cast<int64_t>(pos) - static_cast<int64_t>(r.delivered[pos]);
    if (displacement > 0) ++late;
    EXPECT_LE(displacement, 5 * 4) << "held far beyond reorder_depth";
  }
  for (int s : seen) ASSERT_EQ(s, 1);
  EXPECT_GT(late, 0);
}

TEST(FaultInjector, DelayHoldsForDelayNs) {
  FaultConfig cfg;
  cfg.delay = 0.1;
  cfg.delay_ns = 50'000;  // 50 arrivals at 1 us spacing
  cfg.seed = 5;
  FaultInjector inj(cfg);
  std::vector<uint8_t> d(8, 0);
  int held_first_at = -1;
  for (int i = 0; i < 1000 && held_first_at < 0; ++i) {
    bool ce = false;
    if (inj.apply(i * 1000, 0, d, ce).action == FaultInjector::Action::kHold) held_first_at = i;
  }
  ASSERT_GE(held_first_at, 0);
  const TimeNs held_at = held_first_at * 1000;
  EXPECT_EQ(inj.next_deadline(), held_at + 50'000);
  HeldDatagram h;
  EXPECT_FALSE(inj.pop_ready(held_at + 49'999, h));
  EXPECT_TRUE(inj.pop_ready(held_at + 50'000, h));
  RunResult r = run(cfg);
  expect_binomial(r.counters.delayed, 0.1, kPackets, "delay");
  EXPECT_EQ(r.delivered.size(), static_cast<size_t>(kPackets));
}

TEST(FaultInjector, SameSeedSameFaultsOtherSeedOtherFaults) {
  FaultConfig cfg;
  cfg.drop = 0.05;
  cfg.duplicate = 0.05;
  cfg.reorder = 0.05;
  cfg.corrupt = 0.05;
  cfg.mark_ce = 0.05;
  cfg.seed = 42;
  RunResult a = run(cfg, 20'000);
  RunResult b = run(cfg, 20'000);
  EXPECT_EQ(a.delivered, b.delivered);
  EXPECT_EQ(a.bits_flipped, b.bits_flipped);
  EXPECT_EQ(a.ce, b.ce);
  cfg.seed = 43;
  RunResult c = run(cfg, 20'000);
  EXPECT_NE(a.delivered, c.delivered);
}

TEST(FaultInjector, DuplicatedHeldDatagramComesOutTwice) {
  FaultConfig cfg;
  cfg.duplicate = 1.0;
  cfg.delay = 1.0;
  cfg.delay_ns = 10;
  FaultInjector inj(cfg);
  std::vector<uint8_t> d = {1, 2, 3};
  bool ce = false;
  EXPECT_EQ(inj.apply(0, 9, d, ce).action, FaultInjector::Action::kHold);
  HeldDatagram h;
  ASSERT_TRUE(inj.pop_ready(10, h));
  EXPECT_EQ(h.bytes, d);
  EXPECT_EQ(h.peer, 9u);
  ASSERT_TRUE(inj.pop_ready(10, h));
  EXPECT_EQ(h.bytes, d);
  EXPECT_FALSE(inj.pop_ready(10, h));
}

}  // namespace
}  // namespace megascale::wire
