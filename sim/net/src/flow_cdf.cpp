#include "megascale/sim/flow_cdf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace megascale::sim {

Result<FlowSizeCdf> FlowSizeCdf::parse(std::string_view text, std::string_view source) {
  FlowSizeCdf cdf;
  std::istringstream in{std::string(text)};
  int line_no = 0;
  int last_line = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string body = line.substr(0, line.find('#'));
    std::istringstream fields(body);
    std::string a, b, extra;
    if (!(fields >> a)) continue;  // blank or comment
    auto bad = [&](const std::string& why) {
      return make_error(fmt::format("{}:{}: '{}': {}", source, line_no, body, why));
    };
    if (!(fields >> b) || (fields >> extra))
      return bad("want two numbers: size_bytes cumulative_probability");
    char* end_a = nullptr;
    char* end_b = nullptr;
    const double size = std::strtod(a.c_str(), &end_a);
    const double p = std::strtod(b.c_str(), &end_b);
    if (*end_a != '\0' || *end_b != '\0' || !std::isfinite(size) || !std::isfinite(p))
      return bad("want two numbers: size_bytes cumulative_probability");
    if (size < 0) return bad("size_bytes must be >= 0");
    if (p < 0 || p > 1) return bad("cumulative_probability must be in [0, 1] (a fraction, not a percent)");
    if (!cdf.points_.empty()) {
      if (size <= cdf.points_.back().first) return bad("size_bytes must ascend");
      if (p < cdf.points_.back().second) return bad("cumulative_probability must not descend");
    }
    cdf.points_.emplace_back(size, p);
    last_line = line_no;
  }
  if (cdf.points_.size() < 2)
    return make_error(fmt::format("{}: a flow-size CDF needs at least two points", source));
  if (cdf.points_.back().second != 1.0)
    return make_error(fmt::format("{}:{}: the last cumulative_probability must be 1, not {}", source,
                                  last_line, cdf.points_.back().second));
  // Mass below the first point's probability sits at the first size.
  cdf.mean_bytes_ = cdf.points_[0].first * cdf.points_[0].second;
  for (size_t i = 1; i < cdf.points_.size(); ++i) {
    const auto& [x0, p0] = cdf.points_[i - 1];
    const auto& [x1, p1] = cdf.points_[i];
    cdf.mean_bytes_ += (p1 - p0) * (x0 + x1) / 2;
  }
  if (cdf.mean_bytes_ < 1) return make_error(fmt::format("{}: the mean flow size is under one byte", source));
  return cdf;
}

Result<FlowSizeCdf> FlowSizeCdf::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("{}: cannot open", path));
  std::ostringstream os;
  os << in.rdbuf();
  return parse(os.str(), path);
}

uint64_t FlowSizeCdf::sample(Rng& rng) const {
  const double u = rng.uniform();
  // The first point whose probability exceeds u; interpolate from the one before it.
  auto it = std::upper_bound(points_.begin(), points_.end(), u,
                             [](double v, const std::pair<double, double>& pt) { return v < pt.second; });
  double size = points_.back().first;
  if (it == points_.begin()) {
    size = it->first;
  } else if (it != points_.end()) {
    const auto& [x0, p0] = *(it - 1);
    const auto& [x1, p1] = *it;
    size = x0 + (x1 - x0) * (u - p0) / (p1 - p0);
  }
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(size)));
}

std::vector<FlowSpec> poisson_flows(const PoissonLoad& p, const FlowSizeCdf& cdf, Rng& rng) {
  std::vector<FlowSpec> flows;
  if (p.hosts < 2 || p.load <= 0) return flows;
  // Flows per picosecond per host.
  const double rate_per_ps = p.load * static_cast<double>(p.host_rate_bps) / 8.0 / cdf.mean_bytes() / 1e12;
  for (uint32_t h = 0; h < p.hosts; ++h) {
    double t = 0;
    for (;;) {
      // Exponential gap by inversion; 1 - u is in (0, 1], so the log is finite.
      t += -std::log(1.0 - rng.uniform()) / rate_per_ps;
      if (t >= static_cast<double>(p.duration_ps)) break;
      auto dst = static_cast<uint32_t>(rng.below(p.hosts - 1));
      if (dst >= h) ++dst;  // uniform over the other hosts
      flows.push_back(
          FlowSpec{.src = h, .dst = dst, .bytes = cdf.sample(rng), .start_ps = static_cast<TimePs>(t)});
    }
  }
  std::stable_sort(flows.begin(), flows.end(),
                   [](const FlowSpec& a, const FlowSpec& b) { return a.start_ps < b.start_ps; });
  return flows;
}

}  // namespace megascale::sim
