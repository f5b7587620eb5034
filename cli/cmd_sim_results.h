// `megascale sim --out DIR`: the result files beyond flows.csv and summary.json (results.h), and the
// summary's results as JSON. Plain data for scripts/plot-sim.py; the simulator itself draws nothing.
//
//   if (Status st = write_sim_results(dir, run, summary, "-swift"); !st) report(st.error().message);
//   json["fct_by_size"] = sim_results_json(summary)["fct_by_size"];
//
// Files (suffix after the name, e.g. fct_bins-swift.csv with --compare):
//   fct_bins.csv          bin_lo_bytes,bin_hi_bytes,flows,completed,slowdown_p50,_p95,_p99,fct_p50_us,...
//   throughput.csv        t_us,delivered_bytes,gbps,switch_backlog_bytes,max_port_backlog_bytes,
//                         paused_ports,paused_us (one row per sample interval)
//   throughput_hosts.csv  t_us,host,bytes,gbps (per receiver and interval; rows with bytes only)
//   queues.csv            bucket_lo_bytes,bucket_hi_bytes,samples,cdf (switch port backlog samples)
//   ports.csv             kind,owner,port,queue,rate_gbps,bytes_sent,max_backlog_bytes,drops,ecn_marks,
//                         pfc_pauses,pfc_paused_us,paused_fraction (every output port)
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "megascale/common/result.h"
#include "megascale/sim/scenario.h"

namespace megascale::cli {

Status write_sim_results(const std::string& dir, const sim::ScenarioRun& run,
                         const sim::ScenarioSummary& summary, const std::string& suffix);

// fct_by_size, collective, offered_load, throughput_gbps, queue_bytes, pfc_paused_ports.
nlohmann::json sim_results_json(const sim::ScenarioSummary& summary);

}  // namespace megascale::cli
