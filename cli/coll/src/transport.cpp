// A row's transport counters from the plugin's (transport.h).
#include "megascale/coll/transport.h"

#include <fmt/format.h>

namespace megascale::coll {

std::vector<double> TransportDelta::values() const {
  return {static_cast<double>(bytes_sent),      static_cast<double>(retransmits_fast),
          static_cast<double>(retransmits_rto), static_cast<double>(timeouts),
          static_cast<double>(ecn_marks),       static_cast<double>(cnps_received),
          static_cast<double>(rtt_samples),     rtt_p99_us};
}

TransportDelta TransportDelta::from_values(const double* v) {
  TransportDelta d;
  d.bytes_sent = static_cast<uint64_t>(v[0]);
  d.retransmits_fast = static_cast<uint64_t>(v[1]);
  d.retransmits_rto = static_cast<uint64_t>(v[2]);
  d.timeouts = static_cast<uint64_t>(v[3]);
  d.ecn_marks = static_cast<uint64_t>(v[4]);
  d.cnps_received = static_cast<uint64_t>(v[5]);
  d.rtt_samples = static_cast<uint64_t>(v[6]);
  d.rtt_p99_us = v[7];
  return d;
}

namespace {
uint64_t grew(uint64_t before, uint64_t after) {
  return after > before ? after - before : 0;
}
}  // namespace

TransportDelta transport_delta(const megascaleNetCounters_v1_t& before,
                               const megascaleNetCounters_v1_t& after) {
  TransportDelta d;
  d.bytes_sent = grew(before.bytes_sent, after.bytes_sent);
  d.retransmits_fast = grew(before.retransmits_fast, after.retransmits_fast);
  d.retransmits_rto = grew(before.retransmits_rto, after.retransmits_rto);
  d.timeouts = grew(before.timeouts, after.timeouts);
  d.ecn_marks = grew(before.ecn_marks, after.ecn_marks);
  d.cnps_received = grew(before.cnps_received, after.cnps_received);
  uint64_t counts[MEGASCALE_NET_COUNTERS_RTT_BUCKETS];
  uint64_t samples = 0;
  for (int b = 0; b < MEGASCALE_NET_COUNTERS_RTT_BUCKETS; ++b) {
    counts[b] = grew(before.rtt_bucket_counts[b], after.rtt_bucket_counts[b]);
    samples += counts[b];
  }
  d.rtt_samples = samples;
  if (samples == 0) return d;
  // The first bucket at which 99% of the samples are counted (at least one sample).
  const uint64_t want = samples - samples / 100;
  uint64_t seen = 0;
  for (int b = 0; b < MEGASCALE_NET_COUNTERS_RTT_BUCKETS; ++b) {
    seen += counts[b];
    if (seen >= want) {
      d.rtt_p99_us = static_cast<double>(after.rtt_bucket_upper_ns[b]) / 1e3;
      break;
    }
  }
  return d;
}

TransportRow transport_row(const std::vector<std::vector<double>>& per_rank_values) {
  TransportRow row;
  for (size_t r = 0; r < per_rank_values.size(); ++r) {
    if (per_rank_values[r].size() < TransportDelta::kValues) continue;
    const TransportDelta d = TransportDelta::from_values(per_rank_values[r].data());
    TransportDelta& t = row.total;
    t.bytes_sent += d.bytes_sent;
    t.retransmits_fast += d.retransmits_fast;
    t.retransmits_rto += d.retransmits_rto;
    t.timeouts += d.timeouts;
    t.ecn_marks += d.ecn_marks;
    t.cnps_received += d.cnps_received;
    t.rtt_samples += d.rtt_samples;
    if (d.rtt_samples > 0 && (row.worst_rtt_rank < 0 || d.rtt_p99_us > t.rtt_p99_us)) {
      t.rtt_p99_us = d.rtt_p99_us;
      row.worst_rtt_rank = static_cast<int>(r);
    }
  }
  return row;
}

nlohmann::json transport_json(const TransportRow& row) {
  const TransportDelta& t = row.total;
  return {{"bytes_sent", t.bytes_sent},
          {"retransmits", t.retransmits_fast + t.retransmits_rto},
          {"retransmits_rto", t.retransmits_rto},
          {"timeouts", t.timeouts},
          {"ecn_marks", t.ecn_marks},
          {"cnps", t.cnps_received},
          {"rtt_samples", t.rtt_samples},
          {"rtt_p99_us", row.worst_rtt_rank >= 0 ? nlohmann::json(t.rtt_p99_us) : nlohmann::json(nullptr)},
          {"rtt_p99_rank",
           row.worst_rtt_rank >= 0 ? nlohmann::json(row.worst_rtt_rank) : nlohmann::json(nullptr)}};
}

std::string transport_line(const TransportRow& row) {
  const TransportDelta& t = row.total;
  const uint64_t retx = t.retransmits_fast + t.retransmits_rto;
  const auto plural = [](uint64_t n, const char* one, const char* many) {
    return fmt::format("{} {}", n, n == 1 ? one : many);
  };
  std::string out = fmt::format(
      "#   transport: {} ({} after a timeout), {}, {}, {}", plural(retx, "retransmission", "retransmissions"),
      t.retransmits_rto, plural(t.timeouts, "timeout", "timeouts"),
      plural(t.ecn_marks, "ECN mark", "ECN marks"), plural(t.cnps_received, "CNP", "CNPs"));
  if (row.worst_rtt_rank >= 0) {
    out += fmt::format(", RTT p99 {:.1f} us (rank {})", t.rtt_p99_us, row.worst_rtt_rank);
  } else {
    out += ", no RTT sample";
  }
  return out + "\n";
}

}  // namespace megascale::coll
