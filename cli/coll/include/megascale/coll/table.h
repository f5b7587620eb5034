// `megascale coll`'s table, character for character nccl-tests' (src/util.cu of nccl-tests 2.19): the
// column header, one row per size with out-of-place then in-place time, algbw, busbw and #wrong, and
// the footer (out-of-bounds count, average bus bandwidth, checked against -m's minimum when given).
// With -I each placement adds i_min, i_max, i_p99 and i_cv% of its per-iteration times.
// Numbers follow nccl-tests' rule: two decimals while they fit the column, then one, then none, then
// an exponent.
//
//   std::string s = table_header(false) + table_row(row) + table_footer(summary, "all_reduce");
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megascale/coll/coll.h"

namespace megascale::coll {

// `value` in `width` characters by nccl-tests' rule (getFloatStr).
std::string number_field(double value, int width);

// -I's statistics of one placement, as nccl-tests computes them: each iteration's time is the largest
// over the ranks; the statistics leave out the first `skipped` (-K). p50 is the middle of the sorted
// times, p95 and p99 the sorted time at min(n - 1, ceil(n x p / 100) - 1); stdev is over n, cv = stdev /
// avg in percent.
struct IterStats {
  int skipped = 0;
  double min_us = 0, max_us = 0, avg_us = 0, p50_us = 0, p95_us = 0, p99_us = 0, stdev_us = 0, cv_pct = 0;
  std::vector<double> times_us;                    // every iteration's, the skipped ones too
  std::vector<std::vector<double>> rank_times_us;  // each rank's own, with more than one rank
};
// The statistics of `rank_times_us` (one list per rank, each of the same iterations), skipping the first
// `skip` (0 <= skip < the iterations).
IterStats iter_stats(std::vector<std::vector<double>> rank_times_us, int skip);

struct Placement {
  double time_us = 0;
  double alg_gbs = 0;
  double bus_gbs = 0;
  std::optional<int64_t> wrong;       // elements found wrong; absent when not checked (N/A)
  std::optional<IterStats> per_iter;  // with -I
};

struct Row {
  uint64_t bytes = 0;  // Shape::bytes
  uint64_t count = 0;  // Shape::param_count
  DataType type = DataType::kFloat;
  std::optional<RedOp> op;  // absent: "none"
  int root = -1;            // -1 for a collective without one
  Placement out_of_place, in_place;
};

// The three header lines (after a "#" line): the placements, the column names (time or cputime; with
// per_iter -I's four more per placement), the units.
std::string table_header(bool cputime, bool per_iter = false);
std::string table_row(const Row& row);  // with its newline

struct Summary {
  int failed_checks = 0;                  // placements whose check found a wrong element
  double average_bus_gbs = 0;             // over every placement of every row
  std::optional<double> minimum_bus_gbs;  // the average must reach 0.9 x this (nccl-tests' NCCL_TESTS_MIN_BW)
  bool bandwidth_ok() const { return !minimum_bus_gbs || average_bus_gbs >= 0.9 * *minimum_bus_gbs; }
};
std::string table_footer(const Summary& s, const std::string& program);

}  // namespace megascale::coll
