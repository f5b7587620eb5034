// Scenarios for `megascale sim`: a YAML file naming a fabric, switch settings (buffer, ECN, PFC), a
// congestion-control preset, lanes and a workload, loaded, run and summarised here so that the CLI and
// the tests go through one entry point.
//
//   Result<SimScenario> s = load_sim_scenario("configs/sim/incast-small.yaml");
//   Result<ScenarioRun> r = run_sim_scenario(*s, /*controller=*/"", nullptr);   // "" = the file's
//   ScenarioSummary sum = summarize_run(*r);   // FCT percentiles, slowdown, goodput, drops, pauses...
//
// Schema (every key is checked; errors read "FILE:LINE: KEY: VALUE: what is wrong"):
//   name: incast-small
//   fabric: small-2tier        # a topology/ preset, a fabric YAML path (relative to this file), or
//                              # star:N (N hosts on one switch at host_gbps)
//   host_gbps: 100             # star only
//   link_delay_us: 1           # every link, one way
//   switch:
//     buffer_bytes: 1000000    # per output port (lossy mode)
//     ecn: {kmin_bytes: 100000, kmax_bytes: 400000, pmax: 0.2}   # omit: no marking
//     pfc: {enabled: true, xoff_bytes: 100000, xon_bytes: 80000}  # omit: lossy
//     # shared buffer (shared_buffer.h): one pool per switch, queues admitted by alpha x free bytes
//     shared_buffer_bytes: 32000000   # omit: per-port buffer_bytes
//     alpha: 1                        # the egress dynamic threshold's factor
//     priorities: 2                   # control frames strictly before data, not paused (default 1)
//     # pfc: {enabled: true, dynamic: true, alpha: 0.125, xon_offset_bytes: 8500}: XOFF = alpha x free
//   ecmp: per-flow             # or spray (per-packet)
//   controller: hybrid         # a congestion/ preset name or YAML path (resolve_cc_config)
//   lanes: 4
//   workload: {kind: incast, senders: 64, receiver: 64, bytes: 1000000}   # or kind: permutation
//     # incast: flows_per_sender: 1 (several flows per sender; give each its own connection with
//     #   connections_per_pair); start_spread_us: 0 (flows start at uniform random times in [0, it))
//     # or {kind: all-to-all, bytes: 262144, hosts: 32}: hosts 0..31 (omit: every host)
//     # or {kind: collective, op: all-reduce, algorithm: ring, group: dp, tp: 8, pp: 2, dp: 4,
//     #     bytes: 67108864, chunks: 4, hosts: 64}: the job on hosts 0..63 (omit: every host);
//     #     op: all-reduce, all-gather, reduce-scatter, send-recv (a pipeline pass); algorithm:
//     #     ring, tree, double-tree (trees: all-reduce only, in `chunks` pipelined pieces); group:
//     #     tp, pp, dp, all; dp omitted: hosts / (tp x pp) (collective.h: placement, TP innermost);
//     #     phases: [{group, op, algorithm, bytes, chunks}, ...] instead of one collective: a
//     #     training step, each rank starting a phase once it has received all of the previous one
//     # or {kind: poisson, cdf: cdf/web-search.txt, load: 0.3, duration_ms: 2, hosts: 16}
//     #     (flow_cdf.h; cdf relative to this file)
//     # every kind: connections_per_pair: 1 (flows of a pair beyond it share them, in order)
//   seed: 1
//   time_limit_ms: 100
//   cc:                        # overrides on top of the controller's preset, keys as in configs/cc
//     rto.retry_budget_s: 0.005                      # (dotted paths or nested maps), in its units
//     rto: {min_rto_us: 20, initial_rto_us: 50}
//   link_events:               # CLOS fabrics only (faults.h); times from the start of the sends
//     - {at_us: 100, link: tor0-spine0, state: down}   # link: A-B node names, a NIC (h0:n0), a LinkId
//     - {at_us: 2100, link: tor0-spine0, state: up}
//   reroute: false             # true: the switches at a down link's ends drop it from ECMP groups
//   results:                   # optional (results.h)
//     interval_us: 10          # time series sample interval (0: none)
//     size_bins_bytes: [10000, 100000, 1000000, 10000000]   # FCT slowdown bins: [0,10K), ..., [10M,inf)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/congestion/params.h"
#include "megascale/sim/collective.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {

struct SimScenario {
  std::string name;
  std::string source;  // the file, for messages
  std::string fabric;  // preset name, resolved path, or "star"
  uint32_t star_hosts = 0;
  uint64_t host_rate_bps = 100'000'000'000;  // star only
  TimePs link_delay_ps = kPsPerUs;
  uint64_t buffer_bytes = 1'000'000;
  RedConfig red;
  PfcConfig pfc;
  SharedBufferConfig shared_buffer;  // bytes 0: none
  uint8_t priorities = 1;
  bool spray = false;
  // loss_detection: the hosts' engines' dupthresh and RACK reordering window (0: min RTT / 4), for
  // fabrics that reorder a lane's packets (spraying), and tail-loss probes.
  uint32_t dupthresh = 3;
  TimeNs reorder_window_ns = 0;
  bool tail_probe = false;  // loss_detection.tail_probe: EngineConfig::tail_probe (RACK-TLP)
  std::string controller = "hybrid";
  uint32_t lanes = 4;
  enum class Workload { incast, permutation, all_to_all, collective, poisson } workload = Workload::incast;
  uint32_t senders = 0;           // incast
  uint32_t receiver = 0;          // incast
  uint32_t flows_per_sender = 1;  // incast: flows from each sender (Swift's 5000-to-1 is 50 x 100)
  // incast: each flow starts at a time drawn uniformly from [0, spread) (the scenario's seed; flows of
  // a real incast do not start in the same picosecond); 0: all at once.
  TimePs start_spread_ps = 0;
  uint64_t bytes = 1'000'000;
  // all-to-all, collective and poisson (scenario_workload.cpp builds their flows)
  int workload_line = 0;        // the workload map's line, for errors found when the run starts
  uint32_t workload_hosts = 0;  // all-to-all, poisson: hosts 0..N-1; 0 = every host
  Parallelism3D parallel{.tp = 1, .pp = 1, .dp = 0};  // dp 0: hosts / (tp x pp)
  ParallelGroup group = ParallelGroup::all;
  CollectiveOp op = CollectiveOp::all_reduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  uint32_t chunks = 1;  // tree pieces
  // collective: a training step's phases, run in order (collective.h, chain_after_phase); empty = the
  // one collective given by group, op, algorithm, bytes and chunks.
  struct Phase {
    ParallelGroup group = ParallelGroup::all;
    CollectiveOp op = CollectiveOp::all_reduce;
    CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
    uint64_t bytes = 0;
    uint32_t chunks = 1;
  };
  std::vector<Phase> phases;
  std::string cdf;                       // poisson: the flow-size CDF file, resolved
  double load = 0.3;                     // poisson: fraction of host line rate
  TimePs duration_ps = 1000 * kPsPerUs;  // poisson: arrivals in [0, duration)
  uint32_t connections_per_pair = 1;
  // results:
  TimePs series_interval_ps = 10 * kPsPerUs;
  std::vector<uint64_t> size_bins_bytes = default_size_bins_bytes();
  uint64_t seed = 1;
  TimePs time_limit_ps = 100 * 1000 * kPsPerUs;
  // cc overrides: (key path as in the preset YAML, value text), applied in order.
  std::vector<std::pair<std::string, std::string>> cc_overrides;
  // Per cc override: the --set that gave it ("--set cc.swift.beta=0.9"), or "" where the file did.
  std::vector<std::string> cc_override_origins;
  struct LinkEvent {
    TimePs at_ps = 0;
    std::string link;  // resolved against the fabric when the scenario runs
    bool up = false;
    int line = 0;  // in the scenario file, for messages
  };
  std::vector<LinkEvent> link_events;
  bool reroute = false;
  // Partitions run on this many threads (partition.h); 1: one simulation, as before.
  uint32_t threads = 1;
  int threads_line = 0;
};

// One change to a scenario document before it is checked (`megascale sim --set KEY=VALUE`): a dotted
// key (`workload.bytes`, `switch.ecn.kmin_bytes`; a number indexes a list, `link_events.0.at_us`) and
// a YAML value (`65536`, `spray`, `[1000, 10000]`).
struct ScenarioOverride {
  std::string key;
  std::string value;
};
// "KEY=VALUE" to an override; the error names the text when there is no '=' or no key.
Result<ScenarioOverride> parse_override(std::string_view key_equals_value);

// Parses scenario YAML; `source` names it in errors and anchors relative fabric paths. `overrides` are
// put into the document in order before any key is checked, so that a bad value or an unknown key is
// refused as in the file, the error naming the override ("--set KEY=VALUE: KEY: VALUE: what is wrong").
Result<SimScenario> parse_sim_scenario(std::string_view yaml_text, std::string_view source,
                                       const std::vector<ScenarioOverride>& overrides = {});
Result<SimScenario> load_sim_scenario(const std::string& path,
                                      const std::vector<ScenarioOverride>& overrides = {});

struct ScenarioRun {
  SimScenario scenario;
  std::string controller;  // the preset that ran
  RunResult result;
  std::vector<TimePs> ideal_fct_ps;  // per flow: alone on an idle fabric (see summarize_run)
  uint64_t host_rate_bps = 0;
  size_t hosts = 0;
  size_t switches = 0;
  uint32_t group_ranks = 0;  // collective: ranks per group (for bus bandwidth)
  // Settings the run ignores, one sentence each ("file: cc: dcqcn.g is set, but the swift controller
  // does not read the dcqcn section"), for the caller to print as warnings.
  std::vector<std::string> warnings;
};

// The controller's preset with the scenario's cc overrides applied. Errors: an unknown preset, a key
// the preset does not have, a value out of range.
Result<cc::CcConfig> scenario_cc_config(const SimScenario& scenario, const std::string& controller);

// The scenario's flows for a fabric of `hosts` hosts at `host_rate_bps` (Poisson needs the rate); for a
// collective, `group_ranks` (may be null) gets the ranks per group. Errors name the file and the
// workload's line: hosts out of range, tp x pp x dp != the job's hosts, a bad CDF file.
Result<std::vector<FlowSpec>> scenario_flows(const SimScenario& scenario, uint32_t hosts,
                                             uint64_t host_rate_bps, uint32_t* group_ranks = nullptr);

// What a scenario will build, known before the fabric is allocated: its elements, the partitions that
// get any of them (threads beyond those have nothing to run), and an estimate of the memory the run
// takes (a model fitted to peak RSS, scenario_footprint.cpp; within about 2x).
struct ScenarioFootprint {
  uint64_t hosts = 0;
  uint64_t switches = 0;
  uint64_t links = 0;  // fabric links (each two one-way ports)
  uint64_t flows = 0;
  uint64_t connections = 0;      // (source, destination) pairs x connections_per_pair
  uint32_t partitions = 1;       // threads asked for
  uint32_t busy_partitions = 1;  // partitions with at least one host or switch
  uint64_t estimated_bytes = 0;
};
Result<ScenarioFootprint> scenario_footprint(const SimScenario& scenario);

// The machine's memory from /proc/meminfo (MemTotal, MemAvailable), in bytes; 0 where unknown.
struct MemInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};
MemInfo parse_meminfo(std::string_view proc_meminfo_text);
MemInfo read_meminfo();

// What to tell the user before a run: warnings (threads with no partition to run, an estimate above
// the available memory), or an error when the estimate exceeds the machine's physical memory.
Result<std::vector<std::string>> check_footprint(const ScenarioFootprint& f, const MemInfo& memory);

// Builds the fabric and runs the workload under `controller` ("" = the scenario's). `progress` (may be
// null) is told every 100 us of virtual time.
Result<ScenarioRun> run_sim_scenario(const SimScenario& scenario, const std::string& controller,
                                     const RunProgress* progress);

struct ScenarioSummary {
  size_t flows = 0;
  size_t completed = 0;
  double fct_p50_us = 0, fct_p95_us = 0, fct_p99_us = 0, fct_max_us = 0;  // completed flows
  double slowdown_p50 = 0, slowdown_p99 = 0;                              // FCT / ideal FCT
  // Mean over all flows of ideal FCT / FCT (0 for a flow that did not complete): each flow's rate as
  // a fraction of its NIC's, averaged; the simulated counterpart of the "normalised aggregate
  // throughput" of ECMP collision calculations (scripts/ecmp-collisions.py) for equal flows.
  double rate_fraction_mean = 0;
  // RTT: the sample-weighted mean of the flows' median RTTs, and the largest flow p99 (engine
  // histograms, so within ~19%).
  double rtt_p50_mean_us = 0, rtt_p99_max_us = 0;
  size_t failed = 0;  // flows that ended with an error (not hung)
  double goodput_gbps = 0;
  uint64_t link_down_drops = 0;
  uint64_t drops = 0, ecn_marks = 0, pfc_pauses = 0, retransmits = 0, timeouts = 0;
  double pfc_paused_us = 0;
  uint64_t events = 0;
  double simulated_us = 0;
  // Results beyond the totals (results.h).
  std::vector<SizeBin> size_bins;  // FCT slowdown by flow size (every flow in one bin)
  // Collective workloads: the collective's time (start to the last receive), its algorithm bandwidth
  // (bytes / time) and bus bandwidth (nccl-tests: all-reduce x 2(n-1)/n, the others x (n-1)/n).
  double collective_us = 0, algbw_gbps = 0, busbw_gbps = 0;
  size_t collective_phases = 0;  // > 1: a step of phases (time only; no single size for bandwidths)
  double offered_load = 0;       // poisson: flow bytes / (hosts x line rate x duration)
  // From the time series: delivered throughput (mean over the makespan, peak interval), switch port
  // backlog samples (p50, p99 over every port and sample; bucket lower bounds, so within 19%), the
  // largest backlog any port reached, and ports that PFC paused at some time.
  double throughput_mean_gbps = 0, throughput_peak_gbps = 0;
  double queue_p50_bytes = 0, queue_p99_bytes = 0;
  uint64_t queue_max_bytes = 0;
  size_t paused_ports = 0;
};

// The ideal FCT of a flow is its frames (segment payload + 72-byte header + framing) serialised at the
// host rate plus one propagation delay and one serialisation per further link of its path: what it
// would take alone. Percentiles are nearest-rank.
ScenarioSummary summarize_run(const ScenarioRun& run);

// The summary as the CLI prints it (without wall time and memory, which the CLI adds): the totals, then
// the results of summarize_results.
std::string format_summary(const ScenarioSummary& s);
std::string format_totals(const ScenarioSummary& s);

// The part of summarize_run that reads the results beyond the totals (scenario_results.cpp): size
// bins, collective bandwidths, offered load, throughput, queue and PFC distributions.
void summarize_results(const ScenarioRun& run, ScenarioSummary& s);
std::string format_results(const ScenarioSummary& s);

}  // namespace megascale::sim
