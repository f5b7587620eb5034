// Workloads on a Fabric: flows as engine messages on engine connections, with per-flow completion
// times and the run's totals.
//
//   auto fabric = *build_star(fc, 17);
//   std::vector<FlowSpec> flows = incast_flows(/*senders=*/16, /*receiver=*/16, /*bytes=*/1 << 20);
//   Result<RunResult> r = run_flows(*fabric, flows, /*time_limit_ps=*/100 * kPsPerUs * 1000);
//   if (r.ok()) print(r->goodput_bps, r->drops, r->flows[0].fct_ps);
//
// A run has two phases. Connect: every (source, destination) pair of the flows gets its connections
// (RunOptions::connections_per_pair, at most one per flow of the pair) at time 0 and the run waits
// until all are established (handshake_ps). Measure: a flow starts at its start_ps after the measure
// phase's start, or when the receives of the flows in its `after` list are done, whichever is later
// (collective.h chains ring steps and tree edges this way; flow_cdf.h gives Poisson start times).
// When it starts, the destination posts a receive of the flow's size and the source posts the send on
// the pair's connection with the fewest unfinished flows (messages on one connection go in order, as
// on one RDMA QP); a flow completes when both the receive (last byte placed) and the send (last byte
// acknowledged) are done. Its FCT is the receive's completion minus its own start.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/fabric.h"
#include "megascale/sim/results.h"

namespace megascale::sim {

struct FlowSpec {
  uint32_t src = 0;  // host addresses
  uint32_t dst = 0;
  uint64_t bytes = 0;
  TimePs start_ps = 0;  // after the measure phase's start
  // Flows (indices below this one's in the run's list) whose receives must be done before this flow
  // starts: a ring step waits for the previous step's receive, a tree edge for its children's.
  std::vector<uint32_t> after{};
};

struct FlowResult {
  FlowSpec spec;
  bool completed = false;    // both ends done within the time limit, successfully
  bool failed = false;       // an end completed with an error (e.g. "peer unreachable"): not hung
  std::string error{};       // the first such error
  TimePs started_ps = 0;     // when it started, after the measure phase's start (spec.start_ps or later)
  TimePs fct_ps = 0;         // its start -> receive complete
  TimePs send_done_ps = 0;   // its start -> send acknowledged
  uint64_t retransmits = 0;  // the sender connection's (fast + RTO)
  uint64_t timeouts = 0;
  // The sender connection's RTT samples (engine RttHistogram: log buckets, <= 19% error; 0 if none).
  TimePs rtt_p50_ps = 0;
  TimePs rtt_p99_ps = 0;
  uint64_t rtt_samples = 0;
};

struct RunResult {
  std::vector<FlowResult> flows;  // in the order of the specs
  uint64_t completed = 0;         // flows completed
  TimePs handshake_ps = 0;        // connect phase
  TimePs start_ps = 0;            // when the sends were posted
  TimePs makespan_ps = 0;         // start -> the last receive completed (the limit if any did not)
  uint64_t connections = 0;       // connections opened (sender ends)
  // Bytes of completed flows over the makespan. For an N-to-1 incast that is the goodput of the
  // bottleneck, the receiver's downlink.
  double goodput_bps = 0;
  uint64_t failed = 0;           // flows that ended with an error (FlowResult::failed)
  uint64_t drops = 0;            // every queue's tail drops
  uint64_t link_down_drops = 0;  // frames lost on links that were down (faults.h)
  uint64_t ecn_marks = 0;        // every queue's CE marks
  uint64_t retransmits = 0;      // over all flows
  uint64_t timeouts = 0;
  uint64_t pfc_pauses = 0;   // PAUSEs sent by switch ingresses
  TimePs pfc_paused_ps = 0;  // time ports spent paused, summed over ports
  uint64_t events = 0;       // events the kernel ran (both phases; RunSeries sampling not counted)
  TimePs simulated_ps = 0;   // virtual time at the end
  RunSeries series;          // time series and port records (results.h); empty unless asked for
};

// `senders` hosts (0..senders-1, skipping `receiver`) each send `flows_per_sender` flows of `bytes` to
// `receiver`.
std::vector<FlowSpec> incast_flows(uint32_t senders, uint32_t receiver, uint64_t bytes,
                                   uint32_t flows_per_sender = 1);

// Every one of `hosts` hosts sends `bytes` to a partner; partners form a random permutation without
// fixed points (each host receives exactly one flow), drawn from `rng`.
std::vector<FlowSpec> permutation_flows(uint32_t hosts, uint64_t bytes, Rng& rng);

// Told every `interval_ps` of virtual time during the measure phase how far the run is.
struct RunProgress {
  struct Sample {
    TimePs now_ps = 0;  // simulated time since the sends began
    size_t done = 0;    // flows finished (completed or failed)
    size_t flows = 0;
    uint64_t delivered_bytes = 0;  // bytes the receivers have taken in, of every flow together
    uint64_t total_bytes = 0;      // every flow's bytes together
  };
  std::function<void(const Sample&)> report;
  TimePs interval_ps = 100 * kPsPerUs;
};

struct RunOptions {
  const RunProgress* progress = nullptr;
  // Called with the measure phase's start time before any send (faults.h schedules link flaps from it).
  std::function<void(TimePs start_ps)> on_start{};
  // Connections per (source, destination) pair; flows of a pair beyond it share them in order.
  uint32_t connections_per_pair = 1;
  // Sample RunResult::series (delivered bytes, switch queues, PFC) every interval_ps; 0 = not at all.
  TimePs series_interval_ps = 0;
};

// Runs the flows to completion (or failure) or until `time_limit_ps` after the start. Errors: a host
// address out of range, a flow to itself, an `after` index not below the flow's own, connections not
// established within the limit, an engine refusal. A partitioned fabric (FabricConfig::partitions > 1,
// partition.h) runs on as many threads; what that refuses or does differently is in
// sim/net/src/workload_partitioned.h.
Result<RunResult> run_flows(Fabric& fabric, const std::vector<FlowSpec>& flows, TimePs time_limit_ps,
                            const RunOptions& options);

// The same with progress and on_start only (one connection per pair, no series).
Result<RunResult> run_flows(Fabric& fabric, const std::vector<FlowSpec>& flows, TimePs time_limit_ps,
                            const RunProgress* progress = nullptr,
                            const std::function<void(TimePs start_ps)>& on_start = nullptr);

}  // namespace megascale::sim
