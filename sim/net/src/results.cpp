#include "megascale/sim/results.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "megascale/common/percentile.h"

namespace megascale::sim {

uint32_t queue_bucket(uint64_t backlog_bytes) {
  if (backlog_bytes == 0) return 0;
  if (backlog_bytes < 1024) return 1;
  // Four buckets per doubling: the octave above 1 KiB, then the two bits after the leading one.
  const int msb = 63 - std::countl_zero(backlog_bytes);
  const auto quarter = static_cast<uint32_t>((backlog_bytes >> (msb - 2)) & 3);
  return 2 + static_cast<uint32_t>(msb - 10) * 4 + quarter;
}

uint64_t queue_bucket_lo(uint32_t bucket) {
  if (bucket == 0) return 0;
  if (bucket == 1) return 1;
  const uint32_t octave = (bucket - 2) / 4, quarter = (bucket - 2) % 4;
  return (uint64_t{4} + quarter) << (octave + 8);  // 1024 * (1 + quarter / 4) * 2^octave
}

std::vector<uint64_t> default_size_bins_bytes() {
  return {10'000, 100'000, 1'000'000, 10'000'000};
}

std::vector<SizeBin> slowdown_by_size(const std::vector<uint64_t>& bytes, const std::vector<TimePs>& fct_ps,
                                      const std::vector<TimePs>& ideal_ps, const std::vector<bool>& completed,
                                      const std::vector<uint64_t>& edges_bytes) {
  std::vector<SizeBin> bins(edges_bytes.size() + 1);
  for (size_t b = 0; b < bins.size(); ++b) {
    bins[b].lo_bytes = b == 0 ? 0 : edges_bytes[b - 1];
    bins[b].hi_bytes = b < edges_bytes.size() ? edges_bytes[b] : std::numeric_limits<uint64_t>::max();
  }
  std::vector<std::vector<double>> slow(bins.size()), fct(bins.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    // upper_bound: a flow of exactly an edge's size belongs to the bin that starts there.
    const auto b = static_cast<size_t>(std::upper_bound(edges_bytes.begin(), edges_bytes.end(), bytes[i]) -
                                       edges_bytes.begin());
    ++bins[b].flows;
    if (!completed[i]) continue;
    ++bins[b].completed;
    fct[b].push_back(us_from_ps(fct_ps[i]));
    slow[b].push_back(ideal_ps[i] > 0 ? static_cast<double>(fct_ps[i]) / static_cast<double>(ideal_ps[i])
                                      : 0);
  }
  for (size_t b = 0; b < bins.size(); ++b) {
    bins[b].slowdown_p50 = percentile(slow[b], 0.50);
    bins[b].slowdown_p95 = percentile(slow[b], 0.95);
    bins[b].slowdown_p99 = percentile(slow[b], 0.99);
    bins[b].fct_p50_us = percentile(fct[b], 0.50);
    bins[b].fct_p95_us = percentile(fct[b], 0.95);
    bins[b].fct_p99_us = percentile(fct[b], 0.99);
  }
  return bins;
}

}  // namespace megascale::sim
