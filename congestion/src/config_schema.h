// The preset schema: every YAML key of a congestion-control preset, the field it sets, the factor that
// converts the YAML unit into the field's unit, and the range the value must lie in, listed once. The
// parser (config.cpp) and the validator (config_validate.cpp) both walk this list, so a key cannot be
// parsed but left unchecked or the other way round. The plugin's MEGASCALE_CC_<SECTION>_<KEY> variables
// (docs/CONFIG.md, later) can walk it the same way. Internal to megascale_congestion_config.
//
// A walker provides two members and is handed to visit_cc_config:
//
//   struct KeyPrinter {
//     template <class T> void field(std::string_view key, T& value, double scale, Bound bound);
//     template <class Body> void section(std::string_view key, Body&& body) { /* push key */ body(); }
//   };
//   visit_cc_config(config, printer);  // printer.section("swift", ...) -> printer.field("beta", ...)
//
// `value` is the struct field; the YAML number times `scale` is what the field holds (us -> ns: 1e3).
// An integral field with scale 1 takes only whole numbers; one with scale > 1 (a time) is rounded to
// the nearest ns. Bounds are stated in the YAML unit, which is also the unit of every error message.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/congestion/params.h"

namespace megascale::cc::schema {

// An interval, open or closed at each end; an infinite end means unbounded on that side.
struct Bound {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;

  // NaN and +-inf are never inside (an infinite end is always open).
  bool contains(double v) const {
    if (!std::isfinite(v)) return false;
    bool above = lo_open ? v > lo : v >= lo;
    bool below = hi_open ? v < hi : v <= hi;
    return above && below;
  }
};

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr Bound kAnyValue{};
inline constexpr Bound kPositive{0, true, kInf, true};      // > 0
inline constexpr Bound kNonNegative{0, false, kInf, true};  // >= 0
inline constexpr Bound kAtLeastOne{1, false, kInf, true};   // >= 1 (counts, thresholds)
inline constexpr Bound kFraction{0, true, 1, false};        // (0, 1]: gains and cut sizes
inline constexpr Bound kUnitInterval{0, false, 1, false};   // [0, 1]
inline constexpr Bound kJitter{0, false, 1, true};          // [0, 1): 1 would allow a zero timeout
inline constexpr Bound kMssBytes{1, false, 65'000, false};  // a segment must fit one UDP datagram

// "> 0", ">= 1", "in (0, 1]" for messages.
std::string describe(const Bound& bound);

// YAML unit -> field unit.
inline constexpr double kSame = 1;
inline constexpr double kUsToNs = 1e3;
inline constexpr double kMsToNs = 1e6;
inline constexpr double kSToNs = 1e9;
inline constexpr double kGbpsToBps = 1e9;
inline constexpr double kMbpsToBps = 1e6;

// The keys `controller` and `description` sit at the top level beside these sections.
inline constexpr std::string_view kControllerKey = "controller";
inline constexpr std::string_view kDescriptionKey = "description";

template <class Flow, class W>
void visit_flow(Flow& p, W& w) {
  w.field("line_rate_gbps", p.line_rate_bps, kGbpsToBps, kPositive);
  w.field("mss_bytes", p.mss_bytes, kSame, kMssBytes);
  w.field("base_rtt_us", p.base_rtt_ns, kUsToNs, kPositive);
  w.field("hops", p.hops, kSame, kAnyValue);
}

// Swift, SIGCOMM '20 Algorithm 1 and §3.5.
template <class Swift, class W>
void visit_swift(Swift& p, W& w) {
  w.field("ai_packets", p.ai_packets, kSame, kPositive);
  w.field("beta", p.beta, kSame, kFraction);
  w.field("max_mdf", p.max_mdf, kSame, kFraction);
  w.field("base_target_us", p.base_target_ns, kUsToNs, kPositive);
  w.field("per_hop_us", p.per_hop_ns, kUsToNs, kNonNegative);
  w.field("fs_range_us", p.fs_range_ns, kUsToNs, kNonNegative);
  w.field("fs_min_cwnd_packets", p.fs_min_cwnd_packets, kSame, kPositive);
  w.field("fs_max_cwnd_packets", p.fs_max_cwnd_packets, kSame, kPositive);
  w.field("retx_reset_threshold", p.retx_reset_threshold, kSame, kAtLeastOne);
  w.field("min_cwnd_packets", p.min_cwnd_packets, kSame, kPositive);
  w.field("max_cwnd_packets", p.max_cwnd_packets, kSame, kPositive);
  w.field("init_cwnd_packets", p.init_cwnd_packets, kSame, kPositive);
  w.field("use_fabric_delay", p.use_fabric_delay, kSame, kAnyValue);
}

// DCQCN reaction point and CNP pacing, SIGCOMM '15.
template <class Dcqcn, class W>
void visit_dcqcn(Dcqcn& p, W& w) {
  w.field("g", p.g, kSame, kFraction);
  w.field("alpha_init", p.alpha_init, kSame, kUnitInterval);
  w.field("alpha_update_us", p.alpha_update_ns, kUsToNs, kPositive);
  w.field("rate_increase_timer_us", p.rate_increase_timer_ns, kUsToNs, kPositive);
  w.field("byte_counter_bytes", p.byte_counter_bytes, kSame, kAtLeastOne);
  w.field("fast_recovery_steps", p.fast_recovery_steps, kSame, kAnyValue);
  w.field("rate_ai_mbps", p.rate_ai_bps, kMbpsToBps, kPositive);
  w.field("rate_hai_mbps", p.rate_hai_bps, kMbpsToBps, kPositive);
  w.field("min_rate_mbps", p.min_rate_bps, kMbpsToBps, kPositive);
  w.field("min_decrease_interval_us", p.min_decrease_interval_ns, kUsToNs, kNonNegative);
  w.field("max_decrease_fraction", p.max_decrease_fraction, kSame, kFraction);
  w.field("cnp_interval_us", p.cnp_interval_ns, kUsToNs, kNonNegative);
  w.field("window_cap_bdp", p.window_cap_bdp, kSame, kNonNegative);
}

// The hybrid's Swift part is its own nested section, `hybrid.swift`, not the top-level `swift`.
template <class Hybrid, class W>
void visit_hybrid(Hybrid& p, W& w) {
  w.field("g", p.g, kSame, kFraction);
  w.field("ecn_min_cut", p.ecn_min_cut, kSame, kUnitInterval);
  w.section("swift", [&] { visit_swift(p.swift, w); });
}

template <class Fixed, class W>
void visit_fixed(Fixed& p, W& w) {
  w.field("window_packets", p.window_packets, kSame, kPositive);
}

template <class Rto, class W>
void visit_rto(Rto& p, W& w) {
  w.field("initial_rto_us", p.initial_rto_ns, kUsToNs, kPositive);
  w.field("min_rto_us", p.min_rto_ns, kUsToNs, kPositive);
  w.field("max_rto_ms", p.max_rto_ns, kMsToNs, kPositive);
  w.field("first_jitter", p.first_jitter, kSame, kJitter);
  w.field("rttvar_k", p.rttvar_k, kSame, kAtLeastOne);
  w.field("retry_budget_s", p.retry_budget_ns, kSToNs, kPositive);
  w.field("max_retries", p.max_retries, kSame, kAtLeastOne);
}

template <class Pacer, class W>
void visit_pacer(Pacer& p, W& w) {
  w.field("burst_bytes", p.burst_bytes, kSame, kAtLeastOne);
}

// Every section of a preset, in the order the documentation lists them.
template <class Config, class W>
void visit_cc_config(Config& c, W& w) {
  w.section("flow", [&] { visit_flow(c.flow, w); });
  w.section("swift", [&] { visit_swift(c.swift, w); });
  w.section("dcqcn", [&] { visit_dcqcn(c.dcqcn, w); });
  w.section("hybrid", [&] { visit_hybrid(c.hybrid, w); });
  w.section("fixed", [&] { visit_fixed(c.fixed, w); });
  w.section("rto", [&] { visit_rto(c.rto, w); });
  w.section("pacer", [&] { visit_pacer(c.pacer, w); });
}

// A value outside its range, or two values that contradict each other. `key_path` is the YAML path
// ("hybrid.swift.min_cwnd_packets"); `text` says what is wrong and shows the value in YAML units.
struct Violation {
  std::string key_path;
  std::string text;
};

// Every violation in `config`, in schema order (config_validate.cpp).
std::vector<Violation> find_violations(const CcConfig& config);

}  // namespace megascale::cc::schema
