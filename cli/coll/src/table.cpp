// nccl-tests' table format (table.h).
#include "megascale/coll/table.h"

#include <fmt/format.h>

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

std::string table_header(bool cputime) {
  const char* time = cputime ? "cputime" : "time";
  std::string out = "#\n";
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
  if (p.wrong) return out + fmt::format("  {:>6g}", static_cast<double>(*p.wrong));
  return out + "    N/A";
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
