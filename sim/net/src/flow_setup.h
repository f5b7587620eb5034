// What run_flows (workload.cpp) and run_flows_partitioned (workload_partitioned.cpp) share: grouping
// flows into (source, destination) pairs, opening and matching the pairs' connections, and filling a
// finished run's totals. The runners differ only in how they drive the events in between.
//
//   auto pairs = group_pairs(specs, n_hosts, result, {});          // also appends result.flows
//   auto tx = open_connections(fabric, *pairs, per_pair, now_ps);  // tx[c]: connection c's sending end
//   ... run until every tx is established ...
//   auto rx = match_accepted(fabric, *tx);                         // rx[c]: its receiving end
//   ... run the flows ...
//   finish_run_result(result, flow_tx, conn_tx, ended, elapsed_ps, time_limit_ps, fabric);
//
// Internal to sim/net.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/engine/connection.h"
#include "megascale/sim/fabric.h"
#include "megascale/sim/workload.h"

namespace megascale::sim::detail {

// Flows grouped by (src, dst), pairs in order of first appearance.
struct FlowPairs {
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  std::vector<uint32_t> flows_of_pair;  // how many flows each pair has
  std::vector<uint32_t> pair_of_flow;   // per flow: its pair
  std::vector<uint32_t> nth_of_pair;    // per flow: how many earlier flows its pair has
  // Filled by open_connections: per pair, the indices of its connections.
  std::vector<std::vector<uint32_t>> conns_of_pair;
};

// Checks each flow's hosts (and `check_flow(i)`, if given: "" or why flow i is refused) in spec order,
// groups the flows into pairs and appends one FlowResult per flow to result.flows.
Result<FlowPairs> group_pairs(const std::vector<FlowSpec>& specs, uint32_t n_hosts, RunResult& result,
                              const std::function<std::string(size_t)>& check_flow);

// Opens min(per_pair, the pair's flow count) connections per pair, pairs in order, each from the
// source's endpoint at `now_ps`, and kicks the source. Returns the sending ends in opening order (and
// fills pairs.conns_of_pair).
Result<std::vector<engine::Connection*>> open_connections(Fabric& fabric, FlowPairs& pairs, uint32_t per_pair,
                                                          TimePs now_ps);

// After the handshakes: the connection each sending end was accepted as at its receiver (the accepted
// connection's local id is the sender's remote id), in the order of `tx`. Drains every host's accept
// queue.
Result<std::vector<engine::Connection*>> match_accepted(Fabric& fabric,
                                                        const std::vector<engine::Connection*>& tx);

// The receiving ends grouped by destination host (for the series sampler): host h's list holds rx[c]
// for every connection c of every pair into h, pairs in order.
std::vector<std::vector<const engine::Connection*>> receivers_by_host(
    const FlowPairs& pairs, const std::vector<engine::Connection*>& rx, uint32_t n_hosts);

// The parts of a finished run's result that do not depend on how it ran. Each flow's started_ps,
// fct_ps, failed and completed must be set. `flow_tx[i]` is the connection flow i was sent on, or null
// if it never started (a connection's counters cover every flow it carried: per flow they are the
// connection's); `conn_tx` every connection once. `ended`: every flow ended (some may have failed), the
// last at `elapsed_ps` after the start. Sets the per-flow counters, completed, failed, makespan,
// goodput, the connections' totals and the fabric's counters (not events or simulated time).
void finish_run_result(RunResult& result, const std::vector<const engine::Connection*>& flow_tx,
                       const std::vector<const engine::Connection*>& conn_tx, bool ended, TimePs elapsed_ps,
                       TimePs time_limit_ps, const Fabric& fabric);

}  // namespace megascale::sim::detail
