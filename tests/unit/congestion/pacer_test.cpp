// Pacer: long-run rate equals the set rate (no ns rounding drift at 400 Gb/s), at most burst_bytes
// back to back after idle, rate changes from `now` without past credit, never a send time before now.
#include "megascale/congestion/pacer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace megascale::cc {
namespace {

constexpr uint64_t kPacket = 4096;

// A backlogged sender: sends `n` packets of `bytes` each as soon as the pacer allows, starting at
// `start_ns`. Returns the send times.
std::vector<TimeNs> send_backlogged(Pacer& pacer, TimeNs start_ns, int n, uint64_t bytes = kPacket) {
  std::vector<TimeNs> times;
  times.reserve(static_cast<size_t>(n));
  TimeNs now = start_ns;
  for (int i = 0; i < n; ++i) {
    now = pacer.next_send_ns(now, bytes);
    pacer.on_send(now, bytes);
    times.push_back(now);
  }
  return times;
}

// Rate achieved between send number `from` and the last send: the bytes of the packets sent at
// times[from] .. times[n-2] over the time they took.
double achieved_rate_bps(const std::vector<TimeNs>& times, size_t from, uint64_t bytes = kPacket) {
  const double sent = static_cast<double>((times.size() - 1 - from) * bytes);
  return sent * 8e9 / static_cast<double>(times.back() - times[from]);
}

// Packets that leave back to back at `now` (each allowed at `now` itself).
int back_to_back(Pacer& pacer, TimeNs now, uint64_t bytes = kPacket) {
  int n = 0;
  while (pacer.next_send_ns(now, bytes) == now && n < 1000) {
    pacer.on_send(now, bytes);
    ++n;
  }
  return n;
}

TEST(Pacer, LongRunRateEqualsTheSetRate) {
  for (const double rate : {gbps(1), gbps(100), gbps(400)}) {
    Pacer pacer(PacerParams{}, rate);
    const auto times = send_backlogged(pacer, 0, 100'000);
    // Skip the initial burst; then the spec's 0.1%.
    EXPECT_NEAR(achieved_rate_bps(times, 10) / rate, 1.0, 1e-3) << rate;
    // Including the initial burst the whole run is still within 0.1%.
    const double whole = 100'000.0 * kPacket * 8e9 / static_cast<double>(times.back() - times.front());
    EXPECT_NEAR(whole / rate, 1.0, 1e-3) << rate;
  }
}

TEST(Pacer, NoRoundingDriftOnALongRunningClock) {
  // 4096 B at 400 Gb/s is 81.92 ns: rounding each gap to whole ns would be 0.1% off, and dropping
  // fractions of a byte of credit at 25 Gb/s (3.125 B/ns) ~0.01%. The pacer keeps both fractions, so
  // the achieved rate is exact to a few ns over the run and every send lands within 2 ns of the ideal
  // schedule, also when the clock reads ~20 days of uptime (where ns in a double lose precision).
  for (const double rate : {gbps(400), gbps(100), gbps(25)}) {
    for (const TimeNs start : {TimeNs{0}, TimeNs{1'728'000'000'000'000}}) {
      Pacer pacer(PacerParams{}, rate);
      const auto times = send_backlogged(pacer, start, 200'000);
      EXPECT_NEAR(achieved_rate_bps(times, 10) / rate, 1.0, 1e-6) << rate;
      const double gap_ns = serialize_ns(kPacket, rate);
      for (size_t i = 10; i < times.size(); i += 19'999) {
        const double ideal = static_cast<double>(times[10]) + static_cast<double>(i - 10) * gap_ns;
        EXPECT_NEAR(static_cast<double>(times[i]), ideal, 2.0) << rate << " packet " << i;
      }
    }
  }
}

TEST(Pacer, AtMostTheBurstLeavesBackToBackAfterIdle) {
  const PacerParams params;  // 16384 B: four 4 KB packets
  Pacer pacer(params, gbps(100));
  // Fresh pacer: the bucket starts full.
  EXPECT_EQ(back_to_back(pacer, 1'000), 4);
  const auto times = send_backlogged(pacer, 1'000, 1'000);
  // Idle for 1 ms (enough for 12.5 MB at 100 Gb/s): still only the burst.
  const TimeNs later = times.back() + ms(1);
  EXPECT_DOUBLE_EQ(pacer.tokens_bytes(later), 16384.0);
  EXPECT_EQ(back_to_back(pacer, later), 4);
  EXPECT_GT(pacer.next_send_ns(later, kPacket), later);

  // A burst that is not a multiple of the packet: floor(10000 / 4096) = 2 packets.
  Pacer small(PacerParams{.burst_bytes = 10'000}, gbps(100));
  EXPECT_EQ(back_to_back(small, 0), 2);
  EXPECT_EQ(back_to_back(small, sec(1)), 2);
}

TEST(Pacer, PacketLargerThanTheBurstStillFlowsAtTheRate) {
  // 9000 B jumbo frames with a 4096 B burst: one leaves as soon as the bucket is full, borrowing the
  // rest; the debt is repaid before the next, so the rate holds and nothing deadlocks.
  Pacer pacer(PacerParams{.burst_bytes = 4'096}, gbps(100));
  const auto times = send_backlogged(pacer, 0, 20'000, 9'000);
  EXPECT_NEAR(achieved_rate_bps(times, 2, 9'000) / gbps(100), 1.0, 1e-3);
  EXPECT_LT(pacer.tokens_bytes(times.back()), 0.0);
}

TEST(Pacer, RateChangeMidRunTakesEffectAtOnce) {
  Pacer pacer(PacerParams{}, gbps(100));
  auto phase1 = send_backlogged(pacer, 0, 10'000);
  EXPECT_NEAR(achieved_rate_bps(phase1, 10) / gbps(100), 1.0, 1e-3);

  // Up to 400 Gb/s at the last send: the next packet waits ~81.92 ns, then 400 Gb/s.
  TimeNs now = phase1.back();
  double left = pacer.tokens_bytes(now);  // under one ns of credit at 100 Gb/s
  EXPECT_GE(left, 0.0);
  EXPECT_LT(left, 12.5);
  pacer.set_rate(now, gbps(400));
  EXPECT_DOUBLE_EQ(pacer.rate_bps(), gbps(400));
  EXPECT_NEAR(static_cast<double>(pacer.next_send_ns(now, kPacket) - now), (4096 - left) / 50, 1.0);
  auto phase2 = send_backlogged(pacer, now, 10'000);
  EXPECT_NEAR(achieved_rate_bps(phase2, 0) / gbps(400), 1.0, 1e-3);

  // Down to 1 Gb/s: the very next packet already waits its ~32.768 us.
  now = phase2.back();
  left = pacer.tokens_bytes(now);  // under one ns of credit at 400 Gb/s
  EXPECT_GE(left, 0.0);
  EXPECT_LT(left, 50.0);
  pacer.set_rate(now, gbps(1));
  EXPECT_NEAR(static_cast<double>(pacer.next_send_ns(now, kPacket) - now), (4096 - left) * 8, 1.0);
  auto phase3 = send_backlogged(pacer, now, 2'000);
  EXPECT_NEAR(achieved_rate_bps(phase3, 0) / gbps(1), 1.0, 1e-3);
}

TEST(Pacer, RateChangeGrantsNoCreditForThePast) {
  // 1 Gb/s, bucket emptied at t0. At t0 + 10 us the bucket holds 1250 B earned at 1 Gb/s; raising the
  // rate then must not re-price those 10 us at 400 Gb/s (which would be a full bucket).
  const TimeNs t0 = 1'000'000;
  Pacer up(PacerParams{.burst_bytes = 4'096}, gbps(1));
  up.on_send(t0, 4'096);
  up.set_rate(t0 + us(10), gbps(400));
  EXPECT_NEAR(up.tokens_bytes(t0 + us(10)), 1'250.0, 1e-6);
  // The missing 2846 B take 56.92 ns at 50 B/ns.
  EXPECT_EQ(up.next_send_ns(t0 + us(10), 4'096), t0 + us(10) + 57);

  // The other way: 40 ns at 400 Gb/s earned 2000 B; the other 2096 B take 16768 ns at 1 Gb/s.
  Pacer down(PacerParams{.burst_bytes = 4'096}, gbps(400));
  down.on_send(t0, 4'096);
  down.set_rate(t0 + 40, gbps(1));
  EXPECT_NEAR(down.tokens_bytes(t0 + 40), 2'000.0, 1e-6);
  EXPECT_EQ(down.next_send_ns(t0 + 40, 4'096), t0 + 40 + 16'768);

  // After a long idle at a low rate, raising the rate still releases only the burst.
  Pacer idle(PacerParams{}, gbps(1));
  const auto times = send_backlogged(idle, 0, 100);
  const TimeNs later = times.back() + sec(1);
  idle.set_rate(later, gbps(400));
  EXPECT_EQ(back_to_back(idle, later), 4);
}

TEST(Pacer, NextSendIsNeverBeforeNowAndIsSelfConsistent) {
  // A deterministic mix of rates, sizes, gaps and early sends (which put the bucket into debt).
  Pacer pacer(PacerParams{}, gbps(100));
  uint64_t x = 12345;
  auto next_random = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x >> 33;
  };
  const double rates[] = {gbps(0.5), gbps(25), gbps(100), gbps(400), 1e3};
  TimeNs now = 0;
  for (int i = 0; i < 20'000; ++i) {
    now += static_cast<TimeNs>(next_random() % 2'000);
    const uint64_t bytes = 64 + next_random() % 9'000;
    if (next_random() % 50 == 0) pacer.set_rate(now, rates[next_random() % 5]);
    const TimeNs t = pacer.next_send_ns(now, bytes);
    ASSERT_GE(t, now);
    ASSERT_LT(t, kNever);
    ASSERT_EQ(pacer.next_send_ns(t, bytes), t);  // at the returned time the tokens do allow it
    if (t > now) {                               // and one ns earlier they did not
      ASSERT_LT(pacer.tokens_bytes(t - 1), std::min(static_cast<double>(bytes), 16384.0));
    }
    ASSERT_LE(pacer.tokens_bytes(now), 16384.0);
    // Mostly send when allowed, sometimes early (the caller ignored the pacer).
    const TimeNs send_at = next_random() % 10 == 0 ? now : t;
    pacer.on_send(send_at, bytes);
    now = send_at;
  }
}

TEST(Pacer, ZeroRateStopsOnceTheTokensRunOut) {
  Pacer pacer(PacerParams{}, 0.0);
  EXPECT_EQ(back_to_back(pacer, 0), 4);
  EXPECT_EQ(pacer.next_send_ns(sec(10), kPacket), kNever);
  pacer.set_rate(sec(10), gbps(10));
  EXPECT_NEAR(static_cast<double>(pacer.next_send_ns(sec(10), kPacket) - sec(10)), 3'276.8, 1.0);
}

TEST(Pacer, NextSendWithoutSizeUsesTheLastPacketSize) {
  Pacer pacer(PacerParams{}, gbps(100));
  EXPECT_EQ(back_to_back(pacer, 0), 4);
  EXPECT_EQ(pacer.next_send_ns(0), pacer.next_send_ns(0, kPacket));
  pacer.on_send(pacer.next_send_ns(0, 64), 64);
  EXPECT_EQ(pacer.next_send_ns(100), pacer.next_send_ns(100, 64));
}

}  // namespace
}  // namespace megascale::cc
