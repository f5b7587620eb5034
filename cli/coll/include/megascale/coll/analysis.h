// What `megascale coll` finds beyond nccl-tests' table: the straggler of a row (the rank whose time is
// furthest above the others', from every rank's own measurement), and the pairs of --pairs whose bus
// bandwidth stands out below the rest (a slow GPU, NIC, cable or path), with the ranks they share.
//
//   Straggler s = straggler({512.0, 498.3, 731.9, 505.1});  // rank 2, 1.44x the median
//   PairFindings f = pair_outliers(pairs, 8, 0.8);            // below 0.8 x the median pair
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace megascale::coll {

struct Straggler {
  int rank = -1;
  double time_us = 0;    // its time
  double median_us = 0;  // the ranks' median time
  double ratio = 0;      // time_us / median_us
};
// The slowest rank of `time_us` (one entry per rank, its own measurement of the row); none for fewer
// than two ranks or a median of 0.
std::optional<Straggler> straggler(const std::vector<double>& time_us);
// "straggler: rank 2 took 1.44x the median rank's time (731.9 vs 508.2 us)"
std::string describe(const Straggler& s);

struct PairResult {
  int a = 0, b = 0;  // ranks, a < b
  double bus_gbs = 0;
};
struct PairFindings {
  double median_bus_gbs = 0;
  std::vector<PairResult> outliers;  // below threshold x median, slowest first
  // Ranks in at least half of their pairs' outliers (and in two or more): the likely culprits, most
  // outliers first.
  std::vector<int> suspects;
};
// The every-pair schedule for n ranks: (a, b) for a < b, in order.
std::vector<PairResult> all_pairs(int nranks);
PairFindings pair_outliers(const std::vector<PairResult>& pairs, int nranks, double threshold);
// The n x n busbw matrix as text ("-" on the diagonal, "*" after an outlier), then the findings.
std::string pair_matrix(const std::vector<PairResult>& pairs, int nranks, const PairFindings& findings);

}  // namespace megascale::coll
