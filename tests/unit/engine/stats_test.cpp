// The RTT histogram: bucket edges, percentiles within the bucket resolution, exact min and max.
#include "megascale/engine/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace megascale::engine {
namespace {

TEST(RttHistogram, EmptyReportsZero) {
  RttHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min_ns(), 0);
  EXPECT_EQ(h.percentile_ns(0.5), 0);
}

TEST(RttHistogram, BucketsAreContiguousAndMonotonic) {
  for (int b = 1; b < RttHistogram::kBuckets - 1; ++b) {
    const TimeNs lo = RttHistogram::bucket_upper_ns(b - 1) + 1;
    const TimeNs hi = RttHistogram::bucket_upper_ns(b);
    ASSERT_LT(lo, hi + 1);
    EXPECT_EQ(RttHistogram::bucket_of(lo), b);
    EXPECT_EQ(RttHistogram::bucket_of(hi), b);
    // Relative width at most a quarter octave (25% of the lower edge).
    EXPECT_LE(static_cast<double>(hi - lo + 1), 0.25 * static_cast<double>(lo) + 1);
  }
  EXPECT_EQ(RttHistogram::bucket_of(0), 0);
  EXPECT_EQ(RttHistogram::bucket_of(TimeNs{1} << 40), RttHistogram::kBuckets - 1);
}

TEST(RttHistogram, PercentilesWithinBucketResolution) {
  RttHistogram h;
  std::mt19937_64 rng(3);
  std::vector<TimeNs> v;
  for (int i = 0; i < 100'000; ++i) {
    const TimeNs x = 5'000 + static_cast<TimeNs>(rng() % 200'000);  // 5..205 us uniform
    v.push_back(x);
    h.add(x);
  }
  std::sort(v.begin(), v.end());
  EXPECT_EQ(h.count(), v.size());
  EXPECT_EQ(h.min_ns(), v.front());
  EXPECT_EQ(h.max_ns(), v.back());
  for (double q : {0.01, 0.5, 0.9, 0.99, 0.999}) {
    const auto exact = static_cast<double>(v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]);
    const auto got = static_cast<double>(h.percentile_ns(q));
    EXPECT_GE(got, exact * 0.99) << q;  // the upper edge of the bucket holding the quantile
    EXPECT_LE(got, exact * 1.26) << q;
  }
  EXPECT_EQ(h.percentile_ns(1.0), v.back());
  EXPECT_EQ(h.percentile_ns(0.0), h.percentile_ns(1e-9));
}

TEST(RttHistogram, NegativeSamplesAreIgnored) {
  RttHistogram h;
  h.add(-1);
  EXPECT_EQ(h.count(), 0u);
  h.add(10'000);
  EXPECT_EQ(h.percentile_ns(0.5), 10'000);  // clamped to [min, max]
}

TEST(RttHistogram, MergeIsTheSameAsAddingEverySample) {
  RttHistogram a, b, all;
  for (TimeNs x : {3'000, 70'000, 900}) {
    a.add(x);
    all.add(x);
  }
  for (TimeNs x : {500, 1'000'000, 64}) {
    b.add(x);
    all.add(x);
  }
  RttHistogram empty;
  a.merge(empty);
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min_ns(), 64);
  EXPECT_EQ(a.max_ns(), 1'000'000);
  for (double q : {0.1, 0.5, 0.9, 1.0}) EXPECT_EQ(a.percentile_ns(q), all.percentile_ns(q)) << q;
  empty.merge(b);  // into an empty one: b's own min
  EXPECT_EQ(empty.min_ns(), 64);
  EXPECT_EQ(empty.count(), 3u);
}

TEST(RttHistogram, BucketCountsAndSumAreTheSamplesAdded) {
  RttHistogram h;
  for (TimeNs x : {100, 100, 5'000, 1'000'000}) h.add(x);
  h.add(-7);  // ignored: in no bucket and not in the sum
  EXPECT_EQ(h.sum_ns(), 1'005'200);
  uint64_t total = 0;
  for (int b = 0; b < RttHistogram::kBuckets; ++b) total += h.bucket_count(b);
  EXPECT_EQ(total, h.count());
  EXPECT_EQ(h.bucket_count(RttHistogram::bucket_of(100)), 2u);
  EXPECT_EQ(h.bucket_count(RttHistogram::bucket_of(5'000)), 1u);
  EXPECT_EQ(h.bucket_count(-1), 0u);
  EXPECT_EQ(h.bucket_count(RttHistogram::kBuckets), 0u);
  RttHistogram other;
  other.add(2'000);
  h.merge(other);
  EXPECT_EQ(h.sum_ns(), 1'007'200);
  EXPECT_EQ(h.bucket_count(RttHistogram::bucket_of(2'000)), 1u);
}

TEST(ConnectionStats, MergeAddsEveryCounterAndHistogram) {
  ConnectionStats a, b;
  a.bytes_sent = 10;
  a.timeouts = 1;
  a.recvs_failed = 2;
  a.rtt.add(5'000);
  b.bytes_sent = 5;
  b.retransmits_fast = 3;
  b.duplicates_dropped = 4;
  b.sends_waited_for_credit = 6;
  b.rtt.add(9'000);
  b.rx_delay.add(100);
  a.merge(b);
  EXPECT_EQ(a.bytes_sent, 15u);
  EXPECT_EQ(a.timeouts, 1u);
  EXPECT_EQ(a.retransmits(), 3u);
  EXPECT_EQ(a.duplicates_dropped, 4u);
  EXPECT_EQ(a.sends_waited_for_credit, 6u);
  EXPECT_EQ(a.recvs_failed, 2u);
  EXPECT_EQ(a.rtt.count(), 2u);
  EXPECT_EQ(a.rtt.max_ns(), 9'000);
  EXPECT_EQ(a.rx_delay.count(), 1u);
}

}  // namespace
}  // namespace megascale::engine
