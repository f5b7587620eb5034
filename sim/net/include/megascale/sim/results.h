// Results of a packet-level run beyond per-flow FCTs: time series (bytes delivered per interval, in
// total and per receiver; switch queue backlogs; PFC), per-port records, and FCT slowdown by flow-size
// bins. Plain data: `megascale sim` writes it as CSV and JSON and draws it as PNGs.
//
//   RunOptions opt;  opt.series_interval_ps = 10 * kPsPerUs;
//   RunResult r = *run_flows(fabric, flows, limit, opt);
//   for (const SeriesPoint& p : r.series.points) plot(p.t_ps, p.delivered_bytes);
//   std::vector<SizeBin> bins = slowdown_by_size(flow_bytes, fct_ps, ideal_ps, completed,
//                                                default_size_bins_bytes());
//
// Sampling (htsim's way: statistics are sampled, output is plain data files): an event
// every interval reads the receivers' engine counters (bytes placed into receive buffers, each byte
// once, so retransmissions do not count twice) and every switch output port's backlog and pause
// state. Queue backlogs go into a histogram with four buckets per doubling (<= 19% wide), so a run of
// any length keeps a fixed-size distribution.
#pragma once

#include <cstdint>
#include <vector>

#include "megascale/sim/simulation.h"

namespace megascale::sim {

// One sample, covering the interval that ends at t_ps (after the measure phase's start).
struct SeriesPoint {
  TimePs t_ps = 0;
  uint64_t delivered_bytes = 0;       // payload bytes placed at every receiver during the interval
  uint64_t switch_backlog_bytes = 0;  // summed over switch ports at t_ps
  uint64_t max_port_backlog_bytes = 0;
  uint32_t paused_ports = 0;  // ports (switch and NIC) paused by PFC at t_ps
  TimePs paused_ps = 0;       // pause time accumulated over every port during the interval
};

// Payload bytes one receiver got during one interval (only nonzero entries are kept).
struct ReceiverBytes {
  uint32_t interval = 0;  // index into RunSeries::points
  uint32_t host = 0;
  uint64_t bytes = 0;
};

// One output port's totals at the end of the run.
struct PortRecord {
  bool nic = false;    // a host's NIC port (else a switch port)
  uint32_t owner = 0;  // the host address, or the switch index in the Fabric
  uint32_t port = 0;   // the switch's port index (0 for a NIC)
  uint32_t queue = 0;  // Fabric::queue index
  uint64_t rate_bps = 0;
  uint64_t bytes_sent = 0;  // frame bytes serialised
  uint64_t max_backlog_bytes = 0;
  uint64_t drops = 0;
  uint64_t ecn_marks = 0;
  uint64_t pfc_pauses = 0;
  TimePs pfc_paused_ps = 0;
};

struct RunSeries {
  TimePs interval_ps = 0;  // 0: nothing was sampled
  std::vector<SeriesPoint> points;
  std::vector<ReceiverBytes> per_receiver;
  // Samples of switch port backlogs, by queue_bucket (one sample per switch port per interval).
  std::vector<uint64_t> queue_histogram;
  std::vector<PortRecord> ports;  // every output port, filled at the end when sampling is on
};

// Backlog histogram buckets: 0 holds empty queues; bucket b >= 1 holds [queue_bucket_lo(b),
// queue_bucket_lo(b + 1)) bytes, four buckets per doubling from 1 KiB (bucket 1 is 1..1023 bytes).
uint32_t queue_bucket(uint64_t backlog_bytes);
uint64_t queue_bucket_lo(uint32_t bucket);

// Flow-size bins: [lo, hi) bytes.
struct SizeBin {
  uint64_t lo_bytes = 0;
  uint64_t hi_bytes = 0;  // UINT64_MAX for the last bin
  size_t flows = 0;       // flows whose size falls in the bin
  size_t completed = 0;
  double slowdown_p50 = 0, slowdown_p95 = 0, slowdown_p99 = 0;  // completed flows, nearest rank
  double fct_p50_us = 0, fct_p95_us = 0, fct_p99_us = 0;
};

// 10 KB, 100 KB, 1 MB, 10 MB: the decades the web-search and Hadoop CDFs span.
std::vector<uint64_t> default_size_bins_bytes();

// Bins flows by size at `edges_bytes` (ascending; bins [0, e0), [e0, e1), ..., [e_last, inf)) with
// slowdown = fct / ideal per completed flow. Every flow lands in exactly one bin. Vectors are per flow.
std::vector<SizeBin> slowdown_by_size(const std::vector<uint64_t>& bytes, const std::vector<TimePs>& fct_ps,
                                      const std::vector<TimePs>& ideal_ps, const std::vector<bool>& completed,
                                      const std::vector<uint64_t>& edges_bytes);

}  // namespace megascale::sim
