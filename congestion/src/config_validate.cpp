// Range checks of a CcConfig: each field against its schema bound, then the relations between fields
// (min <= init <= max, fs_min < fs_max, min_rto <= max_rto, min_rate <= line rate). Values are shown
// in the YAML unit of their key, so a message reads like the file that caused it.
#include <fmt/format.h>

#include <string>
#include <type_traits>
#include <vector>

#include "config_schema.h"
#include "megascale/congestion/config.h"

namespace megascale::cc {
namespace schema {

std::string describe(const Bound& bound) {
  bool has_lo = bound.lo != -kInf;
  bool has_hi = bound.hi != kInf;
  if (has_lo && has_hi) {
    return fmt::format("in {}{}, {}{}", bound.lo_open ? '(' : '[', bound.lo, bound.hi,
                       bound.hi_open ? ')' : ']');
  }
  if (has_lo) return fmt::format("{} {}", bound.lo_open ? ">" : ">=", bound.lo);
  if (has_hi) return fmt::format("{} {}", bound.hi_open ? "<" : "<=", bound.hi);
  return "a number";
}

namespace {

// Walks the schema over a const config and records each field outside its bound.
class RangeChecker {
 public:
  explicit RangeChecker(std::vector<Violation>& out) : out_(out) {}

  template <class T>
  void field(std::string_view key, const T& value, double scale, Bound bound) {
    if constexpr (!std::is_same_v<T, bool>) {
      double shown = static_cast<double>(value) / scale;
      if (!bound.contains(shown)) {
        out_.push_back({path(key), fmt::format("must be {}, got {}", describe(bound), shown)});
      }
    }
  }

  template <class Body>
  void section(std::string_view key, Body&& body) {
    std::string saved = prefix_;
    prefix_ = path(key);
    body();
    prefix_ = saved;
  }

 private:
  std::string path(std::string_view key) const {
    return prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key);
  }

  std::vector<Violation>& out_;
  std::string prefix_;
};

// Swift's window limits must nest: min <= init <= max, and flow scaling needs fs_min < fs_max for its
// alpha = fs_range / (1/sqrt(fs_min) - 1/sqrt(fs_max)) to be finite and positive (SIGCOMM '20 §3.5).
void check_swift_relations(const SwiftParams& p, const std::string& at, std::vector<Violation>& out) {
  if (p.min_cwnd_packets > p.max_cwnd_packets) {
    out.push_back({at + ".min_cwnd_packets", fmt::format("must be <= {}.max_cwnd_packets ({}), got {}", at,
                                                         p.max_cwnd_packets, p.min_cwnd_packets)});
  } else if (p.init_cwnd_packets < p.min_cwnd_packets || p.init_cwnd_packets > p.max_cwnd_packets) {
    out.push_back(
        {at + ".init_cwnd_packets",
         fmt::format("must be in [{0}.min_cwnd_packets, {0}.max_cwnd_packets] = [{1}, {2}], got {3}", at,
                     p.min_cwnd_packets, p.max_cwnd_packets, p.init_cwnd_packets)});
  }
  if (p.fs_min_cwnd_packets >= p.fs_max_cwnd_packets) {
    out.push_back(
        {at + ".fs_min_cwnd_packets", fmt::format("must be < {}.fs_max_cwnd_packets ({}), got {}", at,
                                                  p.fs_max_cwnd_packets, p.fs_min_cwnd_packets)});
  }
}

void check_relations(const CcConfig& c, std::vector<Violation>& out) {
  check_swift_relations(c.swift, "swift", out);
  check_swift_relations(c.hybrid.swift, "hybrid.swift", out);

  if (c.dcqcn.min_rate_bps > c.flow.line_rate_bps) {
    out.push_back({"dcqcn.min_rate_mbps",
                   fmt::format("must be <= flow.line_rate_gbps ({} Gbps = {} Mbps), got {}",
                               c.flow.line_rate_bps / kGbpsToBps, c.flow.line_rate_bps / kMbpsToBps,
                               c.dcqcn.min_rate_bps / kMbpsToBps)});
  }

  const RtoParams& r = c.rto;
  double min_us = static_cast<double>(r.min_rto_ns) / kUsToNs;
  double max_us = static_cast<double>(r.max_rto_ns) / kUsToNs;
  if (r.min_rto_ns > r.max_rto_ns) {
    out.push_back(
        {"rto.min_rto_us", fmt::format("must be <= rto.max_rto_ms ({} ms = {} us), got {}",
                                       static_cast<double>(r.max_rto_ns) / kMsToNs, max_us, min_us)});
  } else if (r.initial_rto_ns < r.min_rto_ns || r.initial_rto_ns > r.max_rto_ns) {
    out.push_back({"rto.initial_rto_us",
                   fmt::format("must be in [rto.min_rto_us, rto.max_rto_ms] = [{} us, {} us], got {}", min_us,
                               max_us, static_cast<double>(r.initial_rto_ns) / kUsToNs)});
  }
}

}  // namespace

std::vector<Violation> find_violations(const CcConfig& config) {
  std::vector<Violation> out;
  RangeChecker checker(out);
  visit_cc_config(config, checker);
  // Relations only mean something between in-range values; "min > max" beside "max must be > 0" is noise.
  if (out.empty()) check_relations(config, out);
  return out;
}

}  // namespace schema

Status validate_cc_config(const CcConfig& config, std::string_view source) {
  std::vector<schema::Violation> violations = schema::find_violations(config);
  if (violations.empty()) return {};
  std::string message;
  for (const schema::Violation& v : violations) {
    if (!message.empty()) message += '\n';
    message += fmt::format("{}: {}: {}", source, v.key_path, v.text);
  }
  return make_error(std::move(message));
}

}  // namespace megascale::cc
