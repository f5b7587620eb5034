// Stragglers and slow pairs (analysis.h).
#include "megascale/coll/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace megascale::coll {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

std::optional<Straggler> straggler(const std::vector<double>& time_us) {
  if (time_us.size() < 2) return std::nullopt;
  const double med = median(time_us);
  if (!(med > 0)) return std::nullopt;
  const auto slowest = std::max_element(time_us.begin(), time_us.end());
  return Straggler{.rank = static_cast<int>(slowest - time_us.begin()),
                   .time_us = *slowest,
                   .median_us = med,
                   .ratio = *slowest / med};
}

std::string describe(const Straggler& s) {
  return fmt::format("straggler: rank {} took {:.2f}x the median rank's time ({:.1f} vs {:.1f} us)", s.rank,
                     s.ratio, s.time_us, s.median_us);
}

std::vector<PairResult> all_pairs(int nranks) {
  std::vector<PairResult> out;
  for (int a = 0; a < nranks; ++a) {
    for (int b = a + 1; b < nranks; ++b) out.push_back({a, b, 0});
  }
  return out;
}

PairFindings pair_outliers(const std::vector<PairResult>& pairs, int nranks, double threshold) {
  PairFindings f;
  std::vector<double> bw;
  for (const PairResult& p : pairs) bw.push_back(p.bus_gbs);
  f.median_bus_gbs = median(bw);
  std::vector<int> pairs_of(static_cast<size_t>(std::max(nranks, 0)), 0), slow_of(pairs_of.size(), 0);
  for (const PairResult& p : pairs) {
    for (int r : {p.a, p.b}) {
      if (r >= 0 && r < nranks) ++pairs_of[static_cast<size_t>(r)];
    }
    if (p.bus_gbs < threshold * f.median_bus_gbs) {
      f.outliers.push_back(p);
      for (int r : {p.a, p.b}) {
        if (r >= 0 && r < nranks) ++slow_of[static_cast<size_t>(r)];
      }
    }
  }
  std::sort(f.outliers.begin(), f.outliers.end(),
            [](const PairResult& x, const PairResult& y) { return x.bus_gbs < y.bus_gbs; });
  for (int r = 0; r < nranks; ++r) {
    const int slow = slow_of[static_cast<size_t>(r)];
    if (slow >= 2 && 2 * slow >= pairs_of[static_cast<size_t>(r)]) f.suspects.push_back(r);
  }
  std::stable_sort(f.suspects.begin(), f.suspects.end(), [&](int x, int y) {
    return slow_of[static_cast<size_t>(x)] > slow_of[static_cast<size_t>(y)];
  });
  return f;
}

std::string pair_matrix(const std::vector<PairResult>& pairs, int nranks, const PairFindings& findings) {
  std::map<std::pair<int, int>, double> bw;
  for (const PairResult& p : pairs) bw[{p.a, p.b}] = p.bus_gbs;
  std::map<std::pair<int, int>, bool> slow;
  for (const PairResult& p : findings.outliers) slow[{p.a, p.b}] = true;
  std::string out =
      fmt::format("# busbw (GB/s) of each pair of ranks; * below the threshold\n# {:>5}", "rank");
  for (int b = 0; b < nranks; ++b) out += fmt::format(" {:>8}", b);
  out += "\n";
  for (int a = 0; a < nranks; ++a) {
    out += fmt::format("# {:>5}", a);
    for (int b = 0; b < nranks; ++b) {
      const std::pair<int, int> key{std::min(a, b), std::max(a, b)};
      const auto it = bw.find(key);
      if (a == b || it == bw.end()) {
        out += fmt::format(" {:>8}", "-");
      } else {
        out += fmt::format(" {:>7.2f}{}", it->second, slow.count(key) != 0 ? "*" : " ");
      }
    }
    out += "\n";
  }
  out += fmt::format("# pairs: median busbw {:.2f} GB/s, {} below the threshold", findings.median_bus_gbs,
                     findings.outliers.size());
  if (!findings.suspects.empty()) {
    out += "; suspect rank";
    out += findings.suspects.size() > 1 ? "s" : "";
    for (size_t i = 0; i < findings.suspects.size(); ++i)
      out += fmt::format("{}{}", i == 0 ? " " : ", ", findings.suspects[i]);
    out += " (in at least half of their pairs' slow ones)";
  }
  return out + "\n";
}

}  // namespace megascale::coll
