#include "cmd_sim_results.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

namespace megascale::cli {
namespace {

Result<std::ofstream> open_csv(const std::string& path, const char* header) {
  std::ofstream out(path);
  if (!out) return make_error(fmt::format("{}: cannot write", path));
  out << header << "\n";
  return out;
}

double gbps(uint64_t bytes, sim::TimePs span_ps) {
  return span_ps > 0 ? static_cast<double>(bytes) * 8e3 / static_cast<double>(span_ps) : 0.0;
}

Status write_flows(const std::string& path, const sim::ScenarioRun& run) {
  auto csv = open_csv(path,
                      "flow,src,dst,bytes,start_us,completed,fct_us,ideal_fct_us,slowdown,send_done_us,"
                      "retransmits,timeouts,failed,error");
  if (!csv) return csv.error();
  const sim::RunResult& r = run.result;
  for (size_t i = 0; i < r.flows.size(); ++i) {
    const sim::FlowResult& f = r.flows[i];
    const double ideal = sim::us_from_ps(run.ideal_fct_ps[i]);
    // The error text is the engine's own ("peer N unreachable: ..."); quoted, with no quotes inside.
    std::string error = f.error;
    std::replace(error.begin(), error.end(), '"', '\'');
    *csv << fmt::format("{},{},{},{},{:.3f},{},{:.3f},{:.3f},{:.4f},{:.3f},{},{},{},\"{}\"\n", i, f.spec.src,
                        f.spec.dst, f.spec.bytes, sim::us_from_ps(f.started_ps), f.completed ? 1 : 0,
                        sim::us_from_ps(f.fct_ps), ideal,
                        f.completed ? sim::us_from_ps(f.fct_ps) / ideal : 0.0,
                        sim::us_from_ps(f.send_done_ps), f.retransmits, f.timeouts, f.failed ? 1 : 0, error);
  }
  return Status{};
}

Status write_tables(const std::string& dir, const sim::ScenarioRun& run, const sim::ScenarioSummary& summary,
                    const std::string& suffix) {
  auto bins = open_csv(fmt::format("{}/fct_bins{}.csv", dir, suffix),
                       "bin_lo_bytes,bin_hi_bytes,flows,completed,slowdown_p50,slowdown_p95,slowdown_p99,"
                       "fct_p50_us,fct_p95_us,fct_p99_us");
  if (!bins) return bins.error();
  for (const sim::SizeBin& b : summary.size_bins) {
    *bins << fmt::format("{},{},{},{},{:.4f},{:.4f},{:.4f},{:.3f},{:.3f},{:.3f}\n", b.lo_bytes,
                         b.hi_bytes == UINT64_MAX ? std::string("inf") : std::to_string(b.hi_bytes), b.flows,
                         b.completed, b.slowdown_p50, b.slowdown_p95, b.slowdown_p99, b.fct_p50_us,
                         b.fct_p95_us, b.fct_p99_us);
  }

  const sim::RunSeries& series = run.result.series;
  auto tput = open_csv(
      fmt::format("{}/throughput{}.csv", dir, suffix),
      "t_us,delivered_bytes,gbps,switch_backlog_bytes,max_port_backlog_bytes,paused_ports,paused_us");
  if (!tput) return tput.error();
  std::vector<sim::TimePs> span(series.points.size());
  for (size_t i = 0; i < series.points.size(); ++i) {
    const sim::SeriesPoint& p = series.points[i];
    span[i] = p.t_ps - (i == 0 ? 0 : series.points[i - 1].t_ps);
    *tput << fmt::format("{:.3f},{},{:.3f},{},{},{},{:.3f}\n", sim::us_from_ps(p.t_ps), p.delivered_bytes,
                         gbps(p.delivered_bytes, span[i]), p.switch_backlog_bytes, p.max_port_backlog_bytes,
                         p.paused_ports, sim::us_from_ps(p.paused_ps));
  }
  auto hosts = open_csv(fmt::format("{}/throughput_hosts{}.csv", dir, suffix), "t_us,host,bytes,gbps");
  if (!hosts) return hosts.error();
  for (const sim::ReceiverBytes& rb : series.per_receiver) {
    *hosts << fmt::format("{:.3f},{},{},{:.3f}\n", sim::us_from_ps(series.points[rb.interval].t_ps), rb.host,
                          rb.bytes, gbps(rb.bytes, span[rb.interval]));
  }

  auto queues =
      open_csv(fmt::format("{}/queues{}.csv", dir, suffix), "bucket_lo_bytes,bucket_hi_bytes,samples,cdf");
  if (!queues) return queues.error();
  uint64_t samples = 0, seen = 0;
  for (uint64_t c : series.queue_histogram) samples += c;
  for (uint32_t b = 0; b < series.queue_histogram.size(); ++b) {
    seen += series.queue_histogram[b];
    if (series.queue_histogram[b] == 0) continue;
    // Bucket 0 holds exactly 0 bytes: [0, 1).
    *queues << fmt::format("{},{},{},{:.6f}\n", sim::queue_bucket_lo(b),
                           b == 0 ? 1 : sim::queue_bucket_lo(b + 1), series.queue_histogram[b],
                           static_cast<double>(seen) / static_cast<double>(samples));
  }

  auto ports =
      open_csv(fmt::format("{}/ports{}.csv", dir, suffix),
               "kind,owner,port,queue,rate_gbps,bytes_sent,max_backlog_bytes,drops,ecn_marks,pfc_pauses,"
               "pfc_paused_us,paused_fraction");
  if (!ports) return ports.error();
  const sim::TimePs run_ps = run.result.simulated_ps;
  for (const sim::PortRecord& p : series.ports) {
    *ports << fmt::format(
        "{},{},{},{},{:.1f},{},{},{},{},{},{:.3f},{:.6f}\n", p.nic ? "nic" : "switch", p.owner, p.port,
        p.queue, static_cast<double>(p.rate_bps) / 1e9, p.bytes_sent, p.max_backlog_bytes, p.drops,
        p.ecn_marks, p.pfc_pauses, sim::us_from_ps(p.pfc_paused_ps),
        run_ps > 0 ? static_cast<double>(p.pfc_paused_ps) / static_cast<double>(run_ps) : 0.0);
  }
  return Status{};
}

}  // namespace

Result<std::vector<std::string>> write_sim_results(const std::string& dir, const sim::ScenarioRun& run,
                                                   const sim::ScenarioSummary& summary,
                                                   const std::string& suffix) {
  std::vector<std::string> names;
  for (const char* stem : {"flows", "fct_bins", "throughput", "throughput_hosts", "queues", "ports"})
    names.push_back(fmt::format("{}{}.csv", stem, suffix));
  if (Status st = write_flows(fmt::format("{}/{}", dir, names[0]), run); !st) return st.error();
  if (Status st = write_tables(dir, run, summary, suffix); !st) return st.error();
  names.push_back(fmt::format("summary{}.json", suffix));
  const std::string json_path = fmt::format("{}/{}", dir, names.back());
  std::ofstream js(json_path);
  js << sim_run_json(run, summary).dump(2) << "\n";
  if (!js) return make_error(fmt::format("{}: cannot write", json_path));
  return names;
}

nlohmann::json sim_run_json(const sim::ScenarioRun& run, const sim::ScenarioSummary& s) {
  nlohmann::json bins = nlohmann::json::array();
  for (const sim::SizeBin& b : s.size_bins) {
    // A bin runs from its lo_bytes to the next one's; the last has no upper end.
    bins.push_back({{"lo_bytes", b.lo_bytes},
                    {"flows", b.flows},
                    {"completed", b.completed},
                    {"slowdown_p50", b.slowdown_p50},
                    {"slowdown_p95", b.slowdown_p95},
                    {"slowdown_p99", b.slowdown_p99},
                    {"fct_p50_us", b.fct_p50_us},
                    {"fct_p95_us", b.fct_p95_us},
                    {"fct_p99_us", b.fct_p99_us}});
  }
  nlohmann::json j{{"controller", run.controller},
                   {"hosts", run.hosts},
                   {"switches", run.switches},
                   {"flows", s.flows},
                   {"completed", s.completed},
                   {"failed", s.failed},
                   {"fct_p50_us", s.fct_p50_us},
                   {"fct_p95_us", s.fct_p95_us},
                   {"fct_p99_us", s.fct_p99_us},
                   {"fct_max_us", s.fct_max_us},
                   {"slowdown_p50", s.slowdown_p50},
                   {"slowdown_p99", s.slowdown_p99},
                   {"rate_fraction_mean", s.rate_fraction_mean},
                   {"goodput_gbps", s.goodput_gbps},
                   {"rtt_p50_mean_us", s.rtt_p50_mean_us},
                   {"rtt_p99_max_us", s.rtt_p99_max_us},
                   {"drops", s.drops},
                   {"link_down_drops", s.link_down_drops},
                   {"ecn_marks", s.ecn_marks},
                   {"pfc_pauses", s.pfc_pauses},
                   {"pfc_paused_us", s.pfc_paused_us},
                   {"pfc_paused_ports", s.paused_ports},
                   {"retransmits", s.retransmits},
                   {"timeouts", s.timeouts},
                   {"events", s.events},
                   {"simulated_us", s.simulated_us},
                   {"throughput_mean_gbps", s.throughput_mean_gbps},
                   {"throughput_peak_gbps", s.throughput_peak_gbps},
                   {"queue_p50_bytes", s.queue_p50_bytes},
                   {"queue_p99_bytes", s.queue_p99_bytes},
                   {"queue_max_bytes", s.queue_max_bytes},
                   {"fct_by_size", bins},
                   {"collective", nullptr},
                   {"offered_load", nullptr}};
  if (s.collective_us > 0)
    j["collective"] = {{"time_us", s.collective_us},
                       {"phases", s.collective_phases},
                       {"algbw_gbps", s.algbw_gbps},
                       {"busbw_gbps", s.busbw_gbps}};
  if (s.offered_load > 0) j["offered_load"] = s.offered_load;
  return j;
}

}  // namespace megascale::cli
