// Late-ACK warnings (collectives/nccl/src/stall_watch.h): a window warns only with many duplicates that are
// a real share of what arrived, at most once a minute, and a warning counts the windows it stood for.
#include "../../../collectives/nccl/src/stall_watch.h"

#include <gtest/gtest.h>

namespace megascale::nccl {
namespace {

constexpr TimeNs kW = StallWatch::kWindowNs;

TEST(StallWatch, TheFirstLookOnlyStartsAWindow) {
  StallWatch w;
  EXPECT_TRUE(w.due(0));
  EXPECT_FALSE(w.look(0, 1'000'000, 900'000));  // totals from before: not this window's
  EXPECT_FALSE(w.due(kW - 1));
  EXPECT_TRUE(w.due(kW));
}

TEST(StallWatch, AWindowOfZeroIsNeverDue) {
  StallWatch w(0);
  EXPECT_FALSE(w.due(0));
  EXPECT_FALSE(w.due(100 * kW));
}

TEST(StallWatch, AGoodRunsDuplicatesDoNotWarn) {
  // This session's good runs: under 600 duplicates over a whole run of ~20 windows.
  StallWatch w;
  w.look(0, 0, 0);
  uint64_t seg = 0, dup = 0;
  for (int i = 1; i <= 20; ++i) {
    seg += 100'000;
    dup += 30;
    EXPECT_FALSE(w.look(i * kW, seg, dup)) << "window " << i;
  }
}

TEST(StallWatch, ManyDuplicatesButATinyShareDoNotWarn) {
  StallWatch w;
  w.look(0, 0, 0);
  EXPECT_FALSE(w.look(kW, 1'000'000, StallWatch::kMinDuplicates));  // 0.05% of what arrived
}

TEST(StallWatch, AFewDuplicatesOfLittleTrafficDoNotWarn) {
  StallWatch w;
  w.look(0, 0, 0);
  EXPECT_FALSE(w.look(kW, 100, StallWatch::kMinDuplicates - 1));  // most of it, but only 499
}

TEST(StallWatch, AStalledHostWarnsOnceAMinuteAndSumsTheWindowsBetween) {
  StallWatch w;
  w.look(0, 0, 0);
  // A collapsed run of this session: thousands of duplicates a window.
  const auto first = w.look(kW, 40'000, 4'000);
  ASSERT_TRUE(first);
  EXPECT_NE(first->find("4000 of the 44000 segments that arrived in 5 s were ones this side already had"),
            std::string::npos)
      << *first;
  // The next 11 windows are as bad: no warning until a minute has passed since the first.
  for (int i = 2; i <= 12; ++i) EXPECT_FALSE(w.look(i * kW, 40'000u * i, 4'000u * i)) << "window " << i;
  const auto again = w.look(13 * kW, 40'000u * 13, 4'000u * 13);
  ASSERT_TRUE(again);
  EXPECT_NE(again->find("48000 of the 528000 segments that arrived in 60 s"), std::string::npos) << *again;
}

TEST(StallWatch, AQuietWindowBetweenDoesNotCount) {
  StallWatch w;
  w.look(0, 0, 0);
  ASSERT_TRUE(w.look(kW, 10'000, 1'000));
  EXPECT_FALSE(w.look(2 * kW, 20'000, 1'000));           // quiet
  EXPECT_FALSE(w.look(3 * kW, 30'000, 2'000));           // bad, within the minute: held
  const auto later = w.look(14 * kW, 40'000, 3'000);     // bad again, a minute on
  ASSERT_TRUE(later);
  EXPECT_NE(later->find("2000 of the 22000 segments that arrived in 60 s"), std::string::npos) << *later;
}

}  // namespace
}  // namespace megascale::nccl
