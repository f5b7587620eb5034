// Percentiles, computed one way everywhere: nearest rank. The q-quantile (q in [0, 1]) of n samples is
// the ceil(q * n)-th smallest, its rank clamped to [1, n]: q = 0 gives the minimum, q = 1 the maximum,
// and the answer is always one of the samples, never an interpolation between two. A histogram answers
// with the bucket that holds that rank: the first whose cumulative count reaches ceil(q * n).
//
//   std::vector<double> fct_us = ...;
//   double p99 = percentile(fct_us, 0.99);            // sorts a copy; 0 when empty
//   std::sort(waits.begin(), waits.end());
//   double p50 = percentile_sorted(waits, 0.5);       // already sorted: no copy
//   size_t b = quantile_bucket(counts, total, 0.99);  // histogram: the bucket of the p99 rank
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace megascale {

// The 1-based rank of the q-quantile among n > 0 samples: ceil(q * n) in [1, n] (q clamped to [0, 1]).
// q * n is taken 1e-6 below its value before the ceiling, so that floating-point noise above an integer
// (0.07 * 100 is 7.000000000000001) does not skip a rank; a true fraction is never that small for any
// q a person asks for.
inline uint64_t nearest_rank(double q, uint64_t n) {
  q = std::clamp(q, 0.0, 1.0);
  const double rank = std::ceil(q * static_cast<double>(n) - 1e-6);
  return std::clamp<uint64_t>(static_cast<uint64_t>(std::max(rank, 0.0)), 1, n);
}

// The nearest-rank q-quantile of `sorted` (ascending); 0 (T{}) when empty.
template <typename T>
T percentile_sorted(std::span<const T> sorted, double q) {
  if (sorted.empty()) return T{};
  return sorted[nearest_rank(q, sorted.size()) - 1];
}
template <typename T>
T percentile_sorted(const std::vector<T>& sorted, double q) {
  return percentile_sorted(std::span<const T>(sorted), q);
}

// The nearest-rank q-quantile of `values` in any order (a copy is sorted); 0 (T{}) when empty.
template <typename T>
T percentile(std::vector<T> values, double q) {
  std::sort(values.begin(), values.end());
  return percentile_sorted(std::span<const T>(values), q);
}

// The index of the histogram bucket holding the q-quantile's rank, where counts[b] samples fell in
// bucket b and `total` is their sum; counts.size() when total is 0 (no bucket holds it).
inline size_t quantile_bucket(std::span<const uint64_t> counts, uint64_t total, double q) {
  if (total == 0) return counts.size();
  const uint64_t rank = nearest_rank(q, total);
  uint64_t seen = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    seen += counts[b];
    if (seen >= rank) return b;
  }
  return counts.size();
}

}  // namespace megascale
