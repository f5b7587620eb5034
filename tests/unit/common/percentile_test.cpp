// The one percentile rule (common/percentile.h): nearest rank, ceil(q * n) clamped to [1, n], on
// sample vectors and on histograms alike.
#include "megascale/common/percentile.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace megascale {
namespace {

// ---- nearest_rank: the rank itself ----

TEST(NearestRank, IsTheCeilingOfQTimesN) {
  EXPECT_EQ(nearest_rank(0.5, 4), 2u);  // 2.0 exactly: the 2nd, not the 3rd
  EXPECT_EQ(nearest_rank(0.5, 5), 3u);  // 2.5 -> 3
  EXPECT_EQ(nearest_rank(0.99, 100), 99u);
  EXPECT_EQ(nearest_rank(0.99, 1000), 990u);
  EXPECT_EQ(nearest_rank(0.999, 1000), 999u);
  EXPECT_EQ(nearest_rank(0.95, 20), 19u);
}

TEST(NearestRank, EndsAreTheMinimumAndTheMaximum) {
  EXPECT_EQ(nearest_rank(0.0, 7), 1u);  // ceil(0) = 0, clamped up to the first
  EXPECT_EQ(nearest_rank(1.0, 7), 7u);
  EXPECT_EQ(nearest_rank(-0.5, 7), 1u);  // outside [0, 1]: clamped
  EXPECT_EQ(nearest_rank(1.5, 7), 7u);
  EXPECT_EQ(nearest_rank(0.01, 1), 1u);
}

TEST(NearestRank, FloatingPointNoiseDoesNotSkipARank) {
  // 0.07 * 100 evaluates to 7.000000000000001; the 7th of 100 is the 7th percentile.
  ASSERT_GT(0.07 * 100.0, 7.0);
  EXPECT_EQ(nearest_rank(0.07, 100), 7u);
  EXPECT_EQ(nearest_rank(0.0701, 100), 8u);  // a real fraction still rounds up
}

// ---- percentile and percentile_sorted: values ----

TEST(Percentile, EmptyIsZero) {
  EXPECT_EQ(percentile(std::vector<double>{}, 0.5), 0.0);
  EXPECT_EQ(percentile_sorted(std::vector<int64_t>{}, 0.99), 0);
}

TEST(Percentile, OneSampleIsEveryPercentile) {
  for (double q : {0.0, 0.01, 0.5, 0.99, 1.0}) EXPECT_EQ(percentile(std::vector<double>{42.5}, q), 42.5) << q;
}

TEST(Percentile, SortsACopyAndAnswersWithASample) {
  const std::vector<double> v{40, 10, 30, 20};
  EXPECT_EQ(percentile(v, 0.0), 10);
  EXPECT_EQ(percentile(v, 0.25), 10);  // rank 1
  EXPECT_EQ(percentile(v, 0.26), 20);  // rank 2: never interpolated to 10.4
  EXPECT_EQ(percentile(v, 0.5), 20);
  EXPECT_EQ(percentile(v, 0.75), 30);
  EXPECT_EQ(percentile(v, 1.0), 40);
  EXPECT_EQ(v.front(), 40);  // the caller's vector is left as it was
}

TEST(Percentile, TiesAnswerWithTheTiedValue) {
  const std::vector<int> v{1, 5, 5, 5, 9};
  EXPECT_EQ(percentile(v, 0.21), 5);
  EXPECT_EQ(percentile(v, 0.5), 5);
  EXPECT_EQ(percentile(v, 0.8), 5);
  EXPECT_EQ(percentile(v, 0.81), 9);
}

TEST(Percentile, HundredSamplesGiveTheirRanks) {
  std::vector<int64_t> v;
  for (int64_t i = 100; i >= 1; --i) v.push_back(i * 10);
  EXPECT_EQ(percentile(v, 0.5), 500);
  EXPECT_EQ(percentile(v, 0.99), 990);
  EXPECT_EQ(percentile(v, 0.999), 1000);
}

// ---- quantile_bucket: histograms ----

TEST(QuantileBucket, EmptyHistogramHasNoBucket) {
  const std::array<uint64_t, 3> counts{};
  EXPECT_EQ(quantile_bucket(counts, 0, 0.5), counts.size());
}

TEST(QuantileBucket, FirstBucketWhoseCumulativeCountReachesTheRank) {
  // 10 samples: 2 in bucket 0, none in 1, 5 in 2, 3 in 3.
  const std::array<uint64_t, 4> counts{2, 0, 5, 3};
  EXPECT_EQ(quantile_bucket(counts, 10, 0.0), 0u);   // rank 1
  EXPECT_EQ(quantile_bucket(counts, 10, 0.2), 0u);   // rank 2: still bucket 0
  EXPECT_EQ(quantile_bucket(counts, 10, 0.21), 2u);  // rank 3: the empty bucket 1 is skipped
  EXPECT_EQ(quantile_bucket(counts, 10, 0.7), 2u);   // rank 7
  EXPECT_EQ(quantile_bucket(counts, 10, 0.71), 3u);
  EXPECT_EQ(quantile_bucket(counts, 10, 1.0), 3u);
}

TEST(QuantileBucket, AgreesWithTheSamplesItCounts) {
  // The same samples as a vector and as a histogram of unit-wide buckets give the same answer.
  const std::vector<int> samples{0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 7};
  std::array<uint64_t, 8> counts{};
  for (int s : samples) ++counts[static_cast<size_t>(s)];
  for (double q : {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0})
    EXPECT_EQ(static_cast<int>(quantile_bucket(counts, samples.size(), q)), percentile(samples, q)) << q;
}

}  // namespace
}  // namespace megascale
