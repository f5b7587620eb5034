// Flow sizes from an empirical CDF and Poisson flow arrivals at a target load: the traffic of the
// DCTCP/HPCC-style FCT experiments (HPCC-sim's traffic_gen does the same).
//
//   Result<FlowSizeCdf> cdf = FlowSizeCdf::load("configs/sim/cdf/web-search.txt");
//   Rng rng(seed);
//   std::vector<FlowSpec> flows = poisson_flows(PoissonLoad{.hosts = 16, .load = 0.3,
//                                               .host_rate_bps = 100'000'000'000,
//                                               .duration_ps = 5'000 * kPsPerUs}, *cdf, rng);
//
// File format: one point a line, "size_bytes cumulative_probability" (probability as a fraction in
// [0, 1]); '#' starts a comment. Sizes ascend, probabilities do not descend, and the last is 1. A
// sample draws u uniform in [0, 1) and interpolates the size linearly between the two points whose
// probabilities enclose u (u below the first point's probability gives the first size), so the mean
// is the sum over segments of (p_i - p_{i-1}) (x_i + x_{i-1}) / 2.
//
// Arrivals: every host is an independent Poisson source of rate load x host_rate / (8 x mean size)
// flows per second (exponential gaps), sending to a uniformly random other host, from time 0 until
// duration_ps. So the offered load per host, in bytes, is `load` of its line rate on average.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {

class FlowSizeCdf {
 public:
  // Errors name the source and line: "FILE:LINE: '...': why".
  static Result<FlowSizeCdf> parse(std::string_view text, std::string_view source);
  static Result<FlowSizeCdf> load(const std::string& path);

  // A flow size (>= 1 byte).
  uint64_t sample(Rng& rng) const;
  double mean_bytes() const { return mean_bytes_; }
  // (size_bytes, cumulative probability) as given.
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
  double mean_bytes_ = 0;
};

struct PoissonLoad {
  uint32_t hosts = 2;  // hosts 0..hosts-1 send and receive
  double load = 0.3;   // offered load per host, fraction of host_rate_bps
  uint64_t host_rate_bps = 100'000'000'000;
  TimePs duration_ps = 1000 * kPsPerUs;  // arrivals in [0, duration)
};

// The flows in order of start time (ties: by source host). Every flow has start_ps set.
std::vector<FlowSpec> poisson_flows(const PoissonLoad& p, const FlowSizeCdf& cdf, Rng& rng);

}  // namespace megascale::sim
