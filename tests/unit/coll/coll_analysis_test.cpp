// Stragglers and slow pairs: the slowest rank against the median, every pair listed once, pairs below
// the threshold marked slowest first, and a rank in most of the slow pairs named as the suspect, on
// synthetic times (one rank made slow on purpose).
#include <gtest/gtest.h>

#include "megascale/coll/analysis.h"

namespace megascale::coll {
namespace {

TEST(CollStraggler, TheSlowestRankAgainstTheMedian) {
  const std::optional<Straggler> s = straggler({512.0, 498.0, 731.9, 505.0});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
  EXPECT_DOUBLE_EQ(s->median_us, 508.5);
  EXPECT_NEAR(s->ratio, 731.9 / 508.5, 1e-12);
  EXPECT_EQ(describe(*s), "straggler: rank 2 took 1.44x the median rank's time (731.9 vs 508.5 us)");
  EXPECT_FALSE(straggler({100.0})) << "one rank has no one to straggle behind";
  EXPECT_FALSE(straggler({0.0, 0.0}));
}

TEST(CollPairs, EveryPairOnce) {
  const std::vector<PairResult> p = all_pairs(4);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p.front().a, 0);
  EXPECT_EQ(p.front().b, 1);
  EXPECT_EQ(p.back().a, 2);
  EXPECT_EQ(p.back().b, 3);
  EXPECT_TRUE(all_pairs(1).empty());
}

TEST(CollPairs, ARankMadeSlowIsTheSuspect) {
  // 6 ranks at 20 GB/s a pair, except every pair with rank 4 at 9-11 GB/s, and one noisy pair (0, 1).
  std::vector<PairResult> pairs = all_pairs(6);
  for (PairResult& p : pairs) {
    p.bus_gbs = (p.a == 4 || p.b == 4) ? 9.0 + p.a * 0.5 : 20.0;
    if (p.a == 0 && p.b == 1) p.bus_gbs = 15.0;
  }
  const PairFindings f = pair_outliers(pairs, 6, 0.8);
  EXPECT_DOUBLE_EQ(f.median_bus_gbs, 20.0);
  ASSERT_EQ(f.outliers.size(), 6u) << "rank 4's five pairs and (0, 1) at 15 < 16";
  EXPECT_EQ(f.outliers.front().a, 0);
  EXPECT_EQ(f.outliers.front().b, 4);
  EXPECT_DOUBLE_EQ(f.outliers.back().bus_gbs, 15.0);
  EXPECT_EQ(f.suspects, std::vector<int>{4}) << "0 and 1 share one slow pair each beyond rank 4's";
  const std::string m = pair_matrix(pairs, 6, f);
  EXPECT_NE(m.find("   15.00*"), std::string::npos) << m;
  EXPECT_NE(m.find("suspect rank 4 "), std::string::npos) << m;
  const PairFindings none = pair_outliers(pairs, 6, 0.3);
  EXPECT_TRUE(none.outliers.empty());
  EXPECT_TRUE(none.suspects.empty());
}

}  // namespace
}  // namespace megascale::coll
