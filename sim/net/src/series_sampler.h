// The sampler behind RunResult::series (results.h): one event every interval during a run's measure
// phase. Private to sim/net: run_flows owns one when RunOptions::series_interval_ps is set.
//
//   SeriesSampler sampler(fabric, rx_by_host, interval_ps, &result.series);
//   sampler.start(start_ps);      // first sample one interval later
//   ... sim.run(...) ...
//   sampler.finish();             // the last partial interval and the per-port records
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "megascale/engine/connection.h"
#include "megascale/sim/fabric.h"
#include "megascale/sim/results.h"

namespace megascale::sim {

class SeriesSampler : public EventSource {
 public:
  // rx_by_host[h]: the run's connections into host h; a host with any counts its endpoint's received
  // payload (the same bytes: run_flows opens every connection of its endpoints).
  SeriesSampler(Fabric& fabric, std::vector<std::vector<const engine::Connection*>> rx_by_host,
                TimePs interval_ps, RunSeries* out);

  void start(TimePs start_ps);
  // Partitioned runs (partition.h): the caller samples at window barriers with sample_now() instead of
  // an event in one partition's queue (which would read the others' state while they run).
  void start_driven(TimePs start_ps);
  void sample_now() { sample(); }
  // No further samples are scheduled (a pending one fires and returns).
  void stop() { stopped_ = true; }
  // Takes a last sample if time moved since the previous one, and fills the per-port records.
  void finish();
  void on_event() override;

  uint64_t samples() const { return fired_; }

 private:
  void sample();
  uint64_t received_bytes(size_t host) const;  // payload placed by host's endpoint so far

  Fabric& fabric_;
  std::vector<std::vector<const engine::Connection*>> rx_by_host_;
  TimePs interval_ps_;
  RunSeries* out_;
  std::vector<bool> is_nic_;                          // by Fabric::queue index
  std::vector<std::pair<uint32_t, uint32_t>> owner_;  // by queue: (host, 0) or (switch, port)
  std::vector<uint64_t> last_rx_bytes_;               // by host
  TimePs start_ps_ = 0, last_sample_ps_ = 0;
  TimePs last_paused_ps_ = 0;
  bool stopped_ = false;
  uint64_t fired_ = 0;
};

}  // namespace megascale::sim
