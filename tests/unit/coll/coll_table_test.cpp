// The table is nccl-tests' character for character: the header lines, a row of known figures, the
// number rule (two decimals while they fit, then one, then none, then an exponent), "N/A" for an
// unchecked placement, and the footer with its OK / FAILED words.
#include <gtest/gtest.h>

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
  row.out_of_place = {.time_us = 312.4, .alg_gbs = 107.41, .bus_gbs = 187.97, .wrong = 0};
  row.in_place = {.time_us = 309.87, .alg_gbs = 108.29, .bus_gbs = 189.5, .wrong = 0};
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

}  // namespace
}  // namespace megascale::coll
