// Exposed and overlapped communication: the compute stream's own communication is exposed; another
// lane's is overlapped where the compute stream was busy and exposed where it was idle; a lane's own
// overlapping intervals count once.
#include "megascale/trainer/exposure.h"

#include <gtest/gtest.h>

namespace megascale::trainer {
namespace {

TEST(Exposure, ComputeStreamCommunicationIsExposedWhole) {
  const Exposure e = exposure({{0, 4}}, {{4, 5}, {6, 6.5}}, {});
  EXPECT_DOUBLE_EQ(e.exposed, 1.5);
  EXPECT_DOUBLE_EQ(e.overlapped, 0);
}

TEST(Exposure, AnotherLaneIsOverlappedWhereTheComputeStreamIsBusyAndExposedWhereItIsNot) {
  // Compute [0, 4), a compute-stream all-reduce [4, 5), then idle; the other lane [3, 7): 2 inside.
  const Exposure e = exposure({{0, 4}}, {{4, 5}}, {{{3, 7}}});
  EXPECT_DOUBLE_EQ(e.exposed, 1 + 2);
  EXPECT_DOUBLE_EQ(e.overlapped, 2);
}

TEST(Exposure, ALanesOwnOverlapsCountOnceAndLanesAddUp) {
  // The dp lane's two grouped calls overlap each other: [1, 3) and [2, 4) are [1, 4).
  const Exposure e = exposure({{0, 2}, {5, 6}}, {}, {{{1, 3}, {2, 4}}, {{5.5, 7}}});
  EXPECT_DOUBLE_EQ(e.overlapped, 1 + 0.5);
  EXPECT_DOUBLE_EQ(e.exposed, 2 + 1);
}

TEST(Exposure, EmptyAndReversedIntervalsAreDropped) {
  EXPECT_TRUE(interval_union({{3, 3}, {5, 4}}).empty());
  const std::vector<Interval> u = interval_union({{4, 6}, {0, 1}, {1, 2}, {5, 8}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_DOUBLE_EQ(u[0].begin, 0);
  EXPECT_DOUBLE_EQ(u[0].end, 2);
  EXPECT_DOUBLE_EQ(u[1].begin, 4);
  EXPECT_DOUBLE_EQ(u[1].end, 8);
}

}  // namespace
}  // namespace megascale::trainer
