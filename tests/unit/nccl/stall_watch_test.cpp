// Late-ACK warnings (collectives/nccl/src/stall_watch.h): a window warns only with many duplicates that are
// a real share of what arrived, at most once a minute, and a warning counts the windows it stood for and
// says how much of the host's CPU time a hypervisor took meanwhile (steal).
#include "../../../collectives/nccl/src/stall_watch.h"

#include <gtest/gtest.h>

namespace megascale::nccl {
namespace {

constexpr TimeNs kW = StallWatch::kWindowNs;

TEST(StallWatch, TheFirstLookOnlyStartsAWindow) {
  StallWatch w;
  EXPECT_TRUE(w.due(0));
  EXPECT_FALSE(w.look(0, 1'000'000, 900'000, std::nullopt));  // totals from before: not this window's
  EXPECT_FALSE(w.due(kW - 1));
  EXPECT_TRUE(w.due(kW));
}

TEST(StallWatch, AWindowOfZeroIsNeverDue) {
  StallWatch w(0);
  EXPECT_FALSE(w.due(0));
  EXPECT_FALSE(w.due(100 * kW));
}

TEST(StallWatch, AGoodRunsDuplicatesDoNotWarn) {
  // A good run: under 600 duplicates over a whole run of ~20 windows.
  StallWatch w;
  w.look(0, 0, 0, std::nullopt);
  uint64_t seg = 0, dup = 0;
  for (int i = 1; i <= 20; ++i) {
    seg += 100'000;
    dup += 30;
    EXPECT_FALSE(w.look(i * kW, seg, dup, std::nullopt)) << "window " << i;
  }
}

TEST(StallWatch, ManyDuplicatesButATinyShareDoNotWarn) {
  StallWatch w;
  w.look(0, 0, 0, std::nullopt);
  EXPECT_FALSE(w.look(kW, 1'000'000, StallWatch::kMinDuplicates, std::nullopt));  // 0.05% of what arrived
}

TEST(StallWatch, AFewDuplicatesOfLittleTrafficDoNotWarn) {
  StallWatch w;
  w.look(0, 0, 0, std::nullopt);
  EXPECT_FALSE(w.look(kW, 100, StallWatch::kMinDuplicates - 1, std::nullopt));  // most of it, but only 499
}

TEST(StallWatch, AStalledHostWarnsOnceAMinuteAndSumsTheWindowsBetween) {
  StallWatch w;
  w.look(0, 0, 0, std::nullopt);
  // A collapsed run: thousands of duplicates a window.
  const auto first = w.look(kW, 40'000, 4'000, std::nullopt);
  ASSERT_TRUE(first);
  EXPECT_NE(first->find("4000 of the 44000 segments that arrived in 5 s were ones this side already had"),
            std::string::npos)
      << *first;
  // The next 11 windows are as bad: no warning until a minute has passed since the first.
  for (int i = 2; i <= 12; ++i)
    EXPECT_FALSE(w.look(i * kW, 40'000u * i, 4'000u * i, std::nullopt)) << "window " << i;
  const auto again = w.look(13 * kW, 40'000u * 13, 4'000u * 13, std::nullopt);
  ASSERT_TRUE(again);
  EXPECT_NE(again->find("48000 of the 528000 segments that arrived in 60 s"), std::string::npos) << *again;
}

TEST(StallWatch, AQuietWindowBetweenDoesNotCount) {
  StallWatch w;
  w.look(0, 0, 0, std::nullopt);
  ASSERT_TRUE(w.look(kW, 10'000, 1'000, std::nullopt));
  EXPECT_FALSE(w.look(2 * kW, 20'000, 1'000, std::nullopt));        // quiet
  EXPECT_FALSE(w.look(3 * kW, 30'000, 2'000, std::nullopt));        // bad, within the minute: held
  const auto later = w.look(14 * kW, 40'000, 3'000, std::nullopt);  // bad again, a minute on
  ASSERT_TRUE(later);
  EXPECT_NE(later->find("2000 of the 22000 segments that arrived in 60 s"), std::string::npos) << *later;
}

// /proc/stat of a 64-CPU guest (the first lines; USER_HZ 100).
constexpr const char* kStat =
    "cpu  4705 150 1120 1044369 5183 0 104 1234 0 0\n"
    "cpu0 1393 14 280 14956 137 0 57 20 0 0\n"
    "intr 114930548 113199788 3 0 5 263 0 4 [...]\n";

TEST(HostCpu, StealIsTheEighthNumberOfTheCpuLine) {
  const auto h = parse_host_cpu(kStat, 100);
  ASSERT_TRUE(h);
  EXPECT_DOUBLE_EQ(h->steal_s, 12.34);
  // Not the first line: found all the same.
  const auto later = parse_host_cpu(std::string("btime 1764000000\n") + kStat, 100);
  ASSERT_TRUE(later);
  EXPECT_DOUBLE_EQ(later->steal_s, 12.34);
}

TEST(HostCpu, WithoutAStealColumnOrACpuLineThereIsNone) {
  EXPECT_FALSE(parse_host_cpu("cpu  4705 150 1120 1044369 5183 0 104\n", 100));  // 7 numbers: no steal
  EXPECT_FALSE(parse_host_cpu("cpu0 1 2 3 4 5 6 7 8\n", 100));                   // a CPU of its own only
  EXPECT_FALSE(parse_host_cpu("", 100));
  EXPECT_FALSE(parse_host_cpu("cpu  one two\n", 100));
  EXPECT_FALSE(parse_host_cpu(kStat, 0));  // no clock rate
}

TEST(StallWatch, AWarningSaysHowMuchCpuTheHypervisorTook) {
  StallWatch w;
  w.look(0, 0, 0, HostCpu{.steal_s = 100});
  // 5 s of CPU time stolen over a 5 s window: one CPU's worth, on average.
  const auto why = w.look(kW, 40'000, 4'000, HostCpu{.steal_s = 105});
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("the hypervisor ran other guests on 1.00 of this host's CPUs on average"),
            std::string::npos)
      << *why;
}

TEST(StallWatch, StealIsAveragedOverTheWindowsAWarningStandsFor) {
  StallWatch w;
  w.look(0, 0, 0, HostCpu{.steal_s = 0});
  ASSERT_TRUE(w.look(kW, 40'000, 4'000, HostCpu{.steal_s = 0}));
  // Held (within the minute), then a quiet window (not counted), then bad again a minute on.
  EXPECT_FALSE(w.look(2 * kW, 80'000, 8'000, HostCpu{.steal_s = 10}));     // 2 CPUs
  EXPECT_FALSE(w.look(3 * kW, 120'000, 8'000, HostCpu{.steal_s = 1000}));  // quiet: its steal is not summed
  const auto why = w.look(14 * kW, 160'000, 12'000, HostCpu{.steal_s = 1000});  // 0 CPUs
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("in 60 s"), std::string::npos) << *why;
  // 10 s of steal (window 2) + 0 s (the 55 s window that ends here) over the 60 s the two stand for.
  EXPECT_NE(why->find("on 0.17 of this host's CPUs"), std::string::npos) << *why;
}

TEST(StallWatch, NoStealIsClaimedWhereTheHostsCpuTimeWasNotRead) {
  StallWatch w;
  w.look(0, 0, 0, std::nullopt);
  const auto unknown_start = w.look(kW, 40'000, 4'000, HostCpu{.steal_s = 5});
  ASSERT_TRUE(unknown_start);
  EXPECT_EQ(unknown_start->find("hypervisor"), std::string::npos) << *unknown_start;

  StallWatch back;
  back.look(0, 0, 0, HostCpu{.steal_s = 50});
  const auto went_back = back.look(kW, 40'000, 4'000, HostCpu{.steal_s = 10});  // a counter that went back
  ASSERT_TRUE(went_back);
  EXPECT_EQ(went_back->find("hypervisor"), std::string::npos) << *went_back;
}

}  // namespace
}  // namespace megascale::nccl
