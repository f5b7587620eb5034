// What the transport saw during one row of `megascale coll`, when NCCL runs over the megascale plugin:
// each rank reads the plugin's process counters (megascale/nccl/counters.h, megascaleNetCounters_v1)
// before and after the row; the difference is that rank's part, and the row's figures add the ranks'
// parts up (retransmissions, timeouts, ECN marks, CNPs, bytes) and take the worst rank's RTT p99 (each
// rank's p99 from its own RTT histogram over the row).
//
//   TransportDelta d = transport_delta(before, after);        // this rank's part
//   std::vector<double> v = d.values();                        // gathered over the ranks ...
//   TransportRow row = transport_row(per_rank_values);          // ... and added up
//   fmt::print("{}", transport_line(row));  json["transport"] = transport_json(row);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "megascale/nccl/counters.h"

namespace megascale::coll {

struct TransportDelta {
  uint64_t bytes_sent = 0;
  uint64_t retransmits_fast = 0;
  uint64_t retransmits_rto = 0;
  uint64_t timeouts = 0;
  uint64_t ecn_marks = 0;
  uint64_t cnps_received = 0;
  uint64_t rtt_samples = 0;
  double rtt_p99_us = 0;  // 0 with no sample; the upper edge of the bucket holding the 99th percentile

  static constexpr size_t kValues = 8;
  std::vector<double> values() const;                  // for gathering over the ranks
  static TransportDelta from_values(const double* v);  // kValues of them
};

// after - before, counter by counter (a counter that went down, which a plugin reloaded between the two
// readings would do, counts as 0), and the p99 of the RTT samples taken between them.
TransportDelta transport_delta(const megascaleNetCounters_v1_t& before,
                               const megascaleNetCounters_v1_t& after);

struct TransportRow {
  TransportDelta total;     // the ranks' parts added up; rtt_p99_us the worst rank's
  int worst_rtt_rank = -1;  // the rank with that p99 (-1: no RTT sample on any rank)
};
TransportRow transport_row(const std::vector<std::vector<double>>& per_rank_values);

// {"bytes_sent", "retransmits", "retransmits_rto", "timeouts", "ecn_marks", "cnps", "rtt_samples",
//  "rtt_p99_us" (null without samples), "rtt_p99_rank"}
nlohmann::json transport_json(const TransportRow& row);
// "#   transport: 3 retransmissions (1 after a timeout), 1 timeout, 0 ECN marks, 0 CNPs, RTT p99 42.0 us
// (rank 2)\n"
std::string transport_line(const TransportRow& row);

}  // namespace megascale::coll
