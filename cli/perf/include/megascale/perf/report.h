// perf's figures and how they are shown: perftest's bandwidth and latency rows (same columns, Gb/s as
// with --report_gbits), a counters line under every row, and the rows as JSON.
//
//   BwFigures f = bw_figures(size, posted_ns, completed_ns, peak_run);
//   LatFigures l = lat_figures(half_rtt_ns);
//   out(bw_header());  out(bw_row_line(row));  out(counters_line(row.counters, true));
//   write(report_json(report).dump(2));
//
// Definitions (bench/README.md): BW average = bytes * 8 / (last completion - first post), in 1e9
// bits per second; BW peak = the best delivery rate over `peak_run` consecutive completions (the bw
// window), timed from the completion before them; MsgRate = messages / elapsed in millions per second.
// Latency = RTT / 2 of a ping-pong, as perftest reports it; t_typical is the median (p50).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "megascale/common/units.h"
#include "megascale/perf/counters.h"

namespace megascale::perf {

struct BwFigures {
  double bw_peak_gbps = 0;
  double bw_average_gbps = 0;
  double msg_rate_mpps = 0;
  double seconds = 0;
};

// posted_ns[i] and completed_ns[i]: when message i was posted and seen complete (non-decreasing).
// The peak is never below the average.
BwFigures bw_figures(uint64_t size_bytes, const std::vector<TimeNs>& posted_ns,
                     const std::vector<TimeNs>& completed_ns, uint64_t peak_run);
// Both directions of a -b row, perftest's way: rates and message rates add up (each side timed its
// own sends), the row lasted as long as the longer side.
BwFigures sum_directions(const BwFigures& a, const BwFigures& b);

nlohmann::json to_json(const BwFigures& f);
BwFigures bw_figures_from_json(const nlohmann::json& j);

struct LatFigures {
  double t_min_us = 0, t_max_us = 0, t_typical_us = 0, t_avg_us = 0, t_stdev_us = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0;
};

// From one-way latencies (RTT / 2) in ns. Percentiles are nearest-rank (the ceil(q*n)-th smallest).
LatFigures lat_figures(std::vector<TimeNs> half_rtt_ns);

// Both sides' counters for one row.
struct RowCounters {
  SideCounters total;  // client + server (kernel host counters once when on one host)
  SideCounters client;
  SideCounters server;
  bool same_host = false;
};

struct BwRow {
  uint64_t size_bytes = 0;
  uint64_t iterations = 0;
  uint32_t window = 0;  // messages in flight (min of --window and the buffers that fit the budget)
  // What the row shows: the client's sends, or with -b the sum of both directions (sum_directions).
  BwFigures figures;
  bool bidirectional = false;
  BwFigures forward;               // -b: client -> server, timed by the client
  BwFigures reverse;               // -b: server -> client, timed by the server
  uint64_t verified_messages = 0;  // checked by the receiver (-b: by both)
  RowCounters counters;
};

struct LatRow {
  uint64_t size_bytes = 0;
  uint64_t iterations = 0;
  LatFigures figures;
  uint64_t verified_messages = 0;
  RowCounters counters;
};

struct PerfReport {
  std::vector<std::string> banner;  // the banner block's lines, as printed
  nlohmann::json config;            // what ran: options, transport, capabilities
  std::vector<BwRow> bw;
  std::vector<LatRow> lat;
  // --baseline ucx: {"name": "ucx", "version", "transports", "rows": [{size_bytes, iterations, window,
  // megascale_bw_average_gbps, ucx_bw_average_gbps, ucx_bw_peak_gbps, ratio}]}; null without.
  nlohmann::json baseline;
};

// Table lines.
std::string rule_line();
std::string bw_header();
std::string bw_row_line(const BwRow& r);
std::string lat_header();
std::string lat_row_line(const LatRow& r);
// " # retx 0 (fast 0, rto 0), timeouts 0, ecn 0, cnp 0, repaths 0, rtt p50 12.0 us p99 31.0 us,
//   kernel drops 0 (RcvbufErrors +0, InErrors +0, our sockets +0)"
std::string counters_line(const RowCounters& c);
// What the row cost in CPU: both sides' processes (getrusage user + sys; one process with --loopback)
// against the engine's segments sent by both sides (DATA and CREDIT, retransmissions included).
double cpu_seconds(const SideCounters& c);
double segments_per_cpu_second(const SideCounters& c);  // 0 when the CPU time was not counted
bool one_process(const RowCounters& c);                 // client and server were one process
// " # cpu (one process, client and server): user 0.412 s + sys 0.733 s for 16400 segments sent (16384
//   received): 14323 segments per CPU-second"
std::string cpu_line(const RowCounters& c);
// " # wire (both sides): per message 2.0 datagrams, 1.00 send + 1.00 recv syscalls, ..." (with -v):
// what the datapath cost, for `payload_bytes` moved in `messages` messages (a round trip is 2).
std::string wire_line(const RowCounters& c, uint64_t payload_bytes, uint64_t messages);

// One row as JSON, each figure's unit in its name (size_bytes, bw_average_gbps, msg_rate_mpps,
// t_p99_us, ...) with the row's counters; docs/CLI.md ("megascale perf") lists every field. The same
// object carries a client's row to its server.
nlohmann::json bw_row_json(const BwRow& r);
nlohmann::json lat_row_json(const LatRow& r);
// {"config", "bw": [rows], "lat": [rows], and "baseline" with --baseline}: the body of `megascale perf
// --json`, which puts the command's name and schema version in front.
nlohmann::json report_json(const PerfReport& r);
// The rows back from bw_row_json / lat_row_json (the server keeps the rows its client reports):
// counters from their "client" and "server" parts. Error: a key missing or of the wrong type.
Result<BwRow> bw_row_from_json(const nlohmann::json& j);
Result<LatRow> lat_row_from_json(const nlohmann::json& j);

}  // namespace megascale::perf
