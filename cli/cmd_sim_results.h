// `megascale sim`'s result files, one set per run in the output folder, and a run's results as JSON.
// Everything here is decided by the scenario and its seed (no wall time, no memory), so two runs of
// one scenario with one seed write identical files. Plain data; cmd_sim_plots.cpp draws the PNGs.
//
//   auto files = write_sim_results(dir, run, summary, "-swift");   // names of the files written
//   nlohmann::json entry = sim_run_json(run, summary);              // docs/CLI.md "runs[]"
//
// Files (suffix after the name, e.g. fct_bins-swift.csv with --compare):
//   flows.csv             flow,src,dst,bytes,start_us,completed,fct_us,ideal_fct_us,slowdown,... (per flow)
//   fct_bins.csv          bin_lo_bytes,bin_hi_bytes,flows,completed,slowdown_p50,_p95,_p99,fct_p50_us,...
//   throughput.csv        t_us,delivered_bytes,gbps,switch_backlog_bytes,max_port_backlog_bytes,
//                         paused_ports,paused_us (one row per sample interval)
//   throughput_hosts.csv  t_us,host,bytes,gbps (per receiver and interval; rows with bytes only)
//   queues.csv            bucket_lo_bytes,bucket_hi_bytes,samples,cdf (switch port backlog samples)
//   ports.csv             kind,owner,port,queue,rate_gbps,bytes_sent,max_backlog_bytes,drops,ecn_marks,
//                         pfc_pauses,pfc_paused_us,paused_fraction (every output port)
//   summary.json          sim_run_json: the totals and the results beyond them
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/scenario.h"

namespace megascale::cli {

// Writes the files above into `dir` (which exists); returns their names (without the folder), in
// the order above. Errors name the file that could not be written.
Result<std::vector<std::string>> write_sim_results(const std::string& dir, const sim::ScenarioRun& run,
                                                   const sim::ScenarioSummary& summary,
                                                   const std::string& suffix);

// One run's results: controller, sizes, flow counts, FCT and slowdown percentiles, counters,
// throughput, queues, fct_by_size[], collective and offered_load (null where they do not apply).
nlohmann::json sim_run_json(const sim::ScenarioRun& run, const sim::ScenarioSummary& summary);

}  // namespace megascale::cli
