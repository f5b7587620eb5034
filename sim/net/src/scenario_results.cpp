// The results part of a scenario's summary (scenario.h, results.h): FCT slowdown by size bins,
// collective bandwidths, offered load, throughput, switch queue and PFC distributions.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "megascale/common/percentile.h"
#include "megascale/sim/scenario.h"

namespace megascale::sim {

void summarize_results(const ScenarioRun& run, ScenarioSummary& s) {
  const RunResult& r = run.result;
  const SimScenario& sc = run.scenario;
  std::vector<uint64_t> bytes;
  std::vector<TimePs> fct;
  std::vector<bool> done;
  uint64_t total_bytes = 0;
  for (const FlowResult& f : r.flows) {
    bytes.push_back(f.spec.bytes);
    fct.push_back(f.fct_ps);
    done.push_back(f.completed);
    total_bytes += f.spec.bytes;
  }
  s.size_bins = slowdown_by_size(bytes, fct, run.ideal_fct_ps, done, sc.size_bins_bytes);

  if (sc.workload == SimScenario::Workload::collective && r.makespan_ps > 0) {
    // Every group runs the same collective at once: the step takes as long as the slowest.
    s.collective_us = us_from_ps(r.makespan_ps);
    s.collective_phases = std::max<size_t>(1, sc.phases.size());
    const uint64_t size = sc.phases.size() == 1 ? sc.phases[0].bytes : sc.bytes;
    const CollectiveOp op = sc.phases.size() == 1 ? sc.phases[0].op : sc.op;
    if (s.collective_phases == 1 && run.group_ranks >= 2) {
      s.algbw_gbps = static_cast<double>(size) * 8e3 / static_cast<double>(r.makespan_ps);
      const double n = run.group_ranks;
      s.busbw_gbps = op == CollectiveOp::send_recv
                         ? s.algbw_gbps
                         : s.algbw_gbps * (op == CollectiveOp::all_reduce ? 2 * (n - 1) / n : (n - 1) / n);
    }
  }
  if (sc.workload == SimScenario::Workload::poisson && run.host_rate_bps > 0 && sc.duration_ps > 0) {
    const double hosts = sc.workload_hosts == 0 ? static_cast<double>(run.hosts) : sc.workload_hosts;
    s.offered_load = static_cast<double>(total_bytes) * 8e12 /
                     (hosts * static_cast<double>(run.host_rate_bps) * static_cast<double>(sc.duration_ps));
  }

  const RunSeries& series = r.series;
  if (series.interval_ps == 0) return;
  uint64_t delivered = 0;
  for (size_t i = 0; i < series.points.size(); ++i) {
    const SeriesPoint& p = series.points[i];
    delivered += p.delivered_bytes;
    const TimePs span = p.t_ps - (i == 0 ? 0 : series.points[i - 1].t_ps);
    // A short last interval (the run ended inside it) would overstate the peak; only full ones count.
    if (span >= series.interval_ps)
      s.throughput_peak_gbps = std::max(
          s.throughput_peak_gbps, static_cast<double>(p.delivered_bytes) * 8e3 / static_cast<double>(span));
  }
  if (r.makespan_ps > 0)
    s.throughput_mean_gbps = static_cast<double>(delivered) * 8e3 / static_cast<double>(r.makespan_ps);
  uint64_t samples = 0;
  for (uint64_t c : series.queue_histogram) samples += c;
  auto quantile = [&](double q) {
    const size_t b = quantile_bucket(series.queue_histogram, samples, q);
    return b < series.queue_histogram.size() ? static_cast<double>(queue_bucket_lo(static_cast<uint32_t>(b)))
                                             : 0.0;
  };
  if (samples > 0) {
    s.queue_p50_bytes = quantile(0.5);
    s.queue_p99_bytes = quantile(0.99);
  }
  for (const PortRecord& p : series.ports) {
    if (!p.nic) s.queue_max_bytes = std::max(s.queue_max_bytes, p.max_backlog_bytes);
    if (p.pfc_pauses > 0) ++s.paused_ports;
  }
}

std::string format_results(const ScenarioSummary& s) {
  std::string out;
  if (s.collective_phases > 1) {
    out += fmt::format("step         {:.1f} us ({} phases, each rank's after its previous one)\n",
                       s.collective_us, s.collective_phases);
  } else if (s.collective_us > 0) {
    out += fmt::format("collective   {:.1f} us   algbw {:.2f} Gbit/s   busbw {:.2f} Gbit/s\n",
                       s.collective_us, s.algbw_gbps, s.busbw_gbps);
  }
  if (s.offered_load > 0) out += fmt::format("offered load {:.3f} of line rate\n", s.offered_load);
  if (s.throughput_mean_gbps > 0 || s.queue_max_bytes > 0)
    out += fmt::format(
        "delivered    mean {:.2f} Gbit/s, peak interval {:.2f} Gbit/s   switch queues p50 {:.0f} B, p99 "
        "{:.0f} B, "
        "max {} B   ports paused {}\n",
        s.throughput_mean_gbps, s.throughput_peak_gbps, s.queue_p50_bytes, s.queue_p99_bytes,
        s.queue_max_bytes, s.paused_ports);
  // Bins that hold flows: more than one, or a single one that is not the whole run.
  size_t used = 0;
  for (const SizeBin& b : s.size_bins) used += b.flows > 0;
  if (used > 1) {
    out += "by size      bin                  flows   slowdown p50    p95    p99\n";
    for (const SizeBin& b : s.size_bins) {
      if (b.flows == 0) continue;
      const std::string hi = b.hi_bytes == UINT64_MAX ? "inf" : fmt::format("{}", b.hi_bytes);
      out +=
          fmt::format("             [{}, {}){:>{}} {:>7} {:>15.2f} {:>6.2f} {:>6.2f}\n", b.lo_bytes, hi, "",
                      std::max<int>(0, 18 - static_cast<int>(fmt::format("[{}, {})", b.lo_bytes, hi).size())),
                      b.flows, b.slowdown_p50, b.slowdown_p95, b.slowdown_p99);
    }
  }
  return out;
}

}  // namespace megascale::sim
