// nccl-tests' table format (table.h).
#include "megascale/coll/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace megascale::coll {

std::string number_field(double value, int width) {
  int digits = 0;  // of the integer part; 0 below 1
  for (double unit = 1; value >= unit && digits < 40; unit *= 10) ++digits;
  if (digits < width - 2) return fmt::format("{:>{}.2f}", value, width);
  if (digits < width - 1) return fmt::format("{:>{}.1f}", value, width);
  if (digits < width + 1) return fmt::format("{:>{}.0f}", value, width);
  if (width >= 7) return fmt::format("{:>{}.1e}", value, width);
  return fmt::format("{:>{}.0e}", value, width);
}

IterStats iter_stats(std::vector<std::vector<double>> rank_times_us, int skip) {
  IterStats s;
  s.skipped = skip;
  if (rank_times_us.empty()) return s;
  s.times_us = rank_times_us.front();
  for (const std::vector<double>& rank : rank_times_us) {
    for (size_t i = 0; i < std::min(rank.size(), s.times_us.size()); ++i)
      s.times_us[i] = std::max(s.times_us[i], rank[i]);
  }
  if (rank_times_us.size() > 1) s.rank_times_us = std::move(rank_times_us);
  if (skip < 0 || static_cast<size_t>(skip) >= s.times_us.size()) return s;
  std::vector<double> sorted(s.times_us.begin() + skip, s.times_us.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const auto at_percentile = [&](size_t p) { return sorted[std::min(n - 1, (n * p + 99) / 100 - 1)]; };
  s.min_us = sorted.front();
  s.max_us = sorted.back();
  s.p50_us = sorted[n / 2];
  s.p95_us = at_percentile(95);
  s.p99_us = at_percentile(99);
  double sum = 0;
  for (double v : sorted) sum += v;
  s.avg_us = sum / static_cast<double>(n);
  double var = 0;
  for (double v : sorted) var += (v - s.avg_us) * (v - s.avg_us);
  s.stdev_us = std::sqrt(var / static_cast<double>(n));
  s.cv_pct = s.avg_us > 0 ? s.stdev_us / s.avg_us * 100 : 0;
  return s;
}

std::string table_header(bool cputime, bool per_iter) {
  const char* time = cputime ? "cputime" : "time";
  std::string out = "#\n";
  if (per_iter) {
    out += fmt::format(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}              out-of-place (+ per-iteration)              "
        "                  in-place (+ per-iteration)\n",
        "", "", "", "", "");
    out += fmt::format(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7}  "
        "{:>7}  "
        "{:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7} \n",
        "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
        "i_cv%", time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%");
    out += fmt::format(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7}  "
        "{:>7}  "
        "{:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7} \n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
        "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)");
    return out;
  }
  out += fmt::format(
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place"
      "          \n",
      "", "", "", "", "");
  out += fmt::format(
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
      "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw",
      "#wrong");
  out += fmt::format(
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
      "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return out;
}

namespace {
std::string placement(const Placement& p) {
  std::string out = fmt::format("  {:>7}  {:>6}  {:>6}", number_field(p.time_us, 7),
                                number_field(p.alg_gbs, 6), number_field(p.bus_gbs, 6));
  out += p.wrong ? fmt::format("  {:>6g}", static_cast<double>(*p.wrong)) : "    N/A";
  if (p.per_iter) {
    out += fmt::format("  {:>7}  {:>7}  {:>7}  {:>7}", number_field(p.per_iter->min_us, 7),
                       number_field(p.per_iter->max_us, 7), number_field(p.per_iter->p99_us, 7),
                       number_field(p.per_iter->cv_pct, 7));
  }
  return out;
}
}  // namespace

std::string table_row(const Row& r) {
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", r.bytes, r.count, name(r.type),
                     r.op ? name(*r.op) : "none", r.root) +
         placement(r.out_of_place) + placement(r.in_place) + "\n";
}

std::string table_footer(const Summary& s, const std::string& program) {
  std::string out = fmt::format("# {:<20} : {} {}\n", "Out of bounds values", s.failed_checks,
                                s.failed_checks != 0 ? "FAILED" : "OK");
  out += fmt::format("# {:<20} : {:g} {}\n", "Avg bus bandwidth", s.average_bus_gbs,
                     !s.minimum_bus_gbs ? ""
                     : s.bandwidth_ok() ? "OK"
                                        : "FAILED");
  out += "#\n";
  out += fmt::format("# Collective test concluded: {}\n", program);
  return out;
}

}  // namespace megascale::coll
