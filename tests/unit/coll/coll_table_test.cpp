// The table is nccl-tests' character for character: the header lines, a row of known figures, the
// number rule (two decimals while they fit, then one, then none, then an exponent), "N/A" for an
// unchecked placement, and the footer with its OK / FAILED words.
#include <gtest/gtest.h>

#include <cmath>

#include "megascale/coll/table.h"

namespace megascale::coll {
namespace {

TEST(CollTable, NumbersFollowNcclTestsRule) {
  EXPECT_EQ(number_field(0.5, 6), "  0.50");
  EXPECT_EQ(number_field(12.345, 6), " 12.35");
  EXPECT_EQ(number_field(999.99, 6), "999.99");
  EXPECT_EQ(number_field(1234.5, 6), "1234.5");
  EXPECT_EQ(number_field(12345.6, 6), " 12346");
  EXPECT_EQ(number_field(123456.0, 6), "123456");
  EXPECT_EQ(number_field(1234567.0, 6), " 1e+06");
  EXPECT_EQ(number_field(25.81, 7), "  25.81");
  EXPECT_EQ(number_field(12345.0, 7), "12345.0");
  EXPECT_EQ(number_field(1234567.0, 7), "1234567");
  EXPECT_EQ(number_field(12345678.0, 7), "1.2e+07");
}

TEST(CollTable, HeaderRowAndFooterAsNcclTestsPrintsThem) {
  const std::string header = table_header(false);
  EXPECT_EQ(
      header,
      "#\n"
      "#                                                              out-of-place                       "
      "in-place"
      "          \n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
      "   busbw  #wrong \n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)"
      "  (GB/s)         \n");
  EXPECT_NE(table_header(true).find("cputime"), std::string::npos);
  Row row;
  row.bytes = 33554432;
  row.count = 8388608;
  row.type = DataType::kFloat;
  row.op = RedOp::kSum;
  row.root = -1;
  row.out_of_place = {
      .time_us = 312.4, .alg_gbs = 107.41, .bus_gbs = 187.97, .wrong = 0, .per_iter = std::nullopt};
  row.in_place = {
      .time_us = 309.87, .alg_gbs = 108.29, .bus_gbs = 189.5, .wrong = 0, .per_iter = std::nullopt};
  EXPECT_EQ(
      table_row(row),
      "    33554432       8388608     float     sum      -1   312.40  107.41  187.97       0   309.87  108.29"
      "  189.50       0\n");
  row.op.reset();
  row.in_place.wrong.reset();
  const std::string unchecked = table_row(row);
  EXPECT_NE(unchecked.find("    none      -1"), std::string::npos) << unchecked;
  EXPECT_EQ(unchecked.substr(unchecked.size() - 8), "    N/A\n") << unchecked;
  EXPECT_EQ(table_footer({.failed_checks = 0, .average_bus_gbs = 188.735, .minimum_bus_gbs = std::nullopt},
                         "all_reduce"),
            "# Out of bounds values : 0 OK\n"
            "# Avg bus bandwidth    : 188.735 \n"
            "#\n"
            "# Collective test concluded: all_reduce\n");
  const std::string failed =
      table_footer({.failed_checks = 2, .average_bus_gbs = 10, .minimum_bus_gbs = 20}, "all_gather");
  EXPECT_NE(failed.find("Out of bounds values : 2 FAILED"), std::string::npos) << failed;
  EXPECT_NE(failed.find("Avg bus bandwidth    : 10 FAILED"), std::string::npos) << failed;
  EXPECT_NE(
      table_footer({.failed_checks = 0, .average_bus_gbs = 19, .minimum_bus_gbs = 20}, "x").find(": 19 OK"),
      std::string::npos)
      << "0.9 x the minimum passes, as nccl-tests' NCCL_TESTS_MIN_BW";
}

// -I: nccl-tests' statistics (each iteration the largest over the ranks, -K's first ones skipped,
// p99 at index min(n - 1, ceil(n x 99 / 100) - 1), stdev over n) and its four columns per placement.
TEST(CollTable, PerIterationStatisticsAndColumns) {
  // Rank 1 is slower in iteration 2; iteration 0 (a slow first one) is skipped.
  const IterStats s = iter_stats({{50, 10, 10, 20, 10}, {40, 10, 30, 10, 10}}, 1);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_EQ(s.times_us, (std::vector<double>{50, 10, 30, 20, 10}));
  ASSERT_EQ(s.rank_times_us.size(), 2u);
  EXPECT_DOUBLE_EQ(s.min_us, 10);
  EXPECT_DOUBLE_EQ(s.max_us, 30);
  EXPECT_DOUBLE_EQ(s.avg_us, 17.5);
  EXPECT_DOUBLE_EQ(s.p50_us, 20);  // sorted 10 10 20 30: index 2
  EXPECT_DOUBLE_EQ(s.p95_us, 30);  // min(3, ceil(3.8) - 1) = 3
  EXPECT_DOUBLE_EQ(s.p99_us, 30);
  EXPECT_DOUBLE_EQ(s.stdev_us, std::sqrt((7.5 * 7.5 * 2 + 2.5 * 2.5 + 12.5 * 12.5) / 4));
  EXPECT_NEAR(s.cv_pct, s.stdev_us / 17.5 * 100, 1e-12);
  std::vector<double> hundred(100);
  for (size_t i = 0; i < hundred.size(); ++i) hundred[i] = static_cast<double>(100 - i);  // 100 .. 1
  const IterStats h = iter_stats({hundred}, 0);
  EXPECT_DOUBLE_EQ(h.p99_us, 99);  // index min(99, 99 - 1) = 98 of 1 .. 100
  EXPECT_DOUBLE_EQ(h.p95_us, 95);
  EXPECT_DOUBLE_EQ(h.p50_us, 51);
  EXPECT_TRUE(h.rank_times_us.empty()) << "one rank: no per-rank lists";

  // nccl-tests' -I header, its printf formats written out.
  EXPECT_EQ(
      table_header(false, true),
      "#\n"
      "#                                                                 out-of-place (+ per-iteration)    "
      "                            in-place (+ per-iteration)\n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    "
      "i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% \n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     "
      "(us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) \n");
  Row row;
  row.bytes = 8;
  row.count = 2;
  row.root = -1;
  row.op = RedOp::kSum;
  row.out_of_place = {.time_us = 17.5, .alg_gbs = 0, .bus_gbs = 0, .wrong = 0, .per_iter = s};
  row.in_place = {.time_us = 18, .alg_gbs = 0, .bus_gbs = 0, .wrong = 0, .per_iter = s};
  EXPECT_EQ(
      table_row(row),
      "           8             2     float     sum      -1    17.50    0.00    0.00       0    10.00    "
      "30.00    30.00    47.38    18.00    0.00    0.00       0    10.00    30.00    30.00    47.38\n");
}

}  // namespace
}  // namespace megascale::coll
