#include "cmd_sim_plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "plot.h"

namespace megascale::cli {
namespace {

// Throughput rows beyond this many are averaged in equal groups: 10 us samples of a 200 ms run are
// 20,000 points, each a whole number of frames, which draws as a solid band.
constexpr size_t kMaxPoints = 1000;

std::string short_bytes(uint64_t b) {
  for (auto [unit, scale] : {std::pair{"G", 1'000'000'000ull}, {"M", 1'000'000ull}, {"K", 1'000ull}}) {
    if (b >= scale && b % scale == 0) return fmt::format("{}{}", b / scale, unit);
  }
  return std::to_string(b);
}

std::string runs_title(const std::vector<SimPlotRun>& runs) {
  std::string s;
  for (size_t i = 0; i < runs.size(); ++i)
    s += (i == 0 ? "" : i + 1 == runs.size() ? " and " : ", ") + runs[i].label;
  return s;
}

// Slowdown p50/p95/p99 (one panel each) by size bin, one line per run. A bin is a flat segment over
// [i - 0.35, i + 0.35] at its value, separate from the next (a blank line breaks gnuplot's line), so a
// single bin shows too.
Result<bool> draw_fct(const std::string& dir, const std::string& scenario,
                      const std::vector<SimPlotRun>& runs) {
  const std::vector<sim::SizeBin>& first = runs[0].summary->size_bins;
  std::vector<size_t> keep;
  for (size_t i = 0; i < first.size(); ++i) {
    bool any = false;
    for (const SimPlotRun& r : runs)
      any |= i < r.summary->size_bins.size() && r.summary->size_bins[i].flows > 0;
    if (any) keep.push_back(i);
  }
  if (keep.empty()) return false;
  std::string csv = "bin";
  for (const SimPlotRun& r : runs) csv += fmt::format(",{0} p50,{0} p95,{0} p99", r.label);
  csv += "\n";
  std::vector<std::pair<double, std::string>> tics;
  for (size_t k = 0; k < keep.size(); ++k) {
    const sim::SizeBin& b = first[keep[k]];
    tics.emplace_back(static_cast<double>(k + 1),
                      fmt::format("[{}, {}): {} flows", short_bytes(b.lo_bytes),
                                  b.hi_bytes == UINT64_MAX ? "inf" : short_bytes(b.hi_bytes), b.flows));
    for (double x : {k + 1 - 0.35, k + 1 + 0.35}) {
      csv += fmt::format("{:.2f}", x);
      for (const SimPlotRun& r : runs) {
        const sim::SizeBin& rb = r.summary->size_bins[keep[k]];
        csv += fmt::format(",{:.4f},{:.4f},{:.4f}", rb.slowdown_p50, rb.slowdown_p95, rb.slowdown_p99);
      }
      csv += "\n";
    }
    csv += "\n";
  }
  PlotSpec spec;
  spec.title = fmt::format("{}: FCT slowdown (FCT / FCT alone) by flow size, {}", scenario, runs_title(runs));
  spec.xlabel = "flow size";
  spec.x_tics = std::move(tics);
  spec.csv_text = std::move(csv);
  spec.png_path = dir + "/fct_slowdown.png";
  for (size_t p = 0; p < 3; ++p) {
    PlotPanel panel;
    panel.ylabel = fmt::format("slowdown {}", std::array{"p50", "p95", "p99"}[p]);
    for (size_t r = 0; r < runs.size(); ++r)
      panel.series.push_back({runs[r].label, static_cast<int>(2 + 3 * r + p)});
    spec.panels.push_back(std::move(panel));
  }
  if (Status st = render_png(spec); !st) return st.error();
  return true;
}

// Delivered throughput (all receivers) and ports paused, over time, one line per run; a run that
// ended earlier delivers 0 after its end. Long series are means of equal groups of samples.
Result<bool> draw_throughput(const std::string& dir, const std::string& scenario,
                             const std::vector<SimPlotRun>& runs) {
  size_t rows = 0;
  sim::TimePs interval = 0;
  for (const SimPlotRun& r : runs) {
    rows = std::max(rows, r.series->points.size());
    interval = std::max(interval, r.series->interval_ps);
  }
  if (rows == 0 || interval == 0) return false;
  const size_t group = (rows + kMaxPoints - 1) / kMaxPoints;
  std::string csv = "t_us";
  for (const SimPlotRun& r : runs) csv += fmt::format(",{} Gbit/s", r.label);
  for (const SimPlotRun& r : runs) csv += fmt::format(",{} paused ports", r.label);
  csv += "\n";
  for (size_t g = 0; g < rows; g += group) {
    const size_t n = std::min(group, rows - g);
    const double t_us = sim::us_from_ps(static_cast<sim::TimePs>(g + n) * interval);
    std::string gbps, paused;
    for (const SimPlotRun& r : runs) {
      const auto& pts = r.series->points;
      uint64_t bytes = 0, ports = 0;
      for (size_t i = g; i < g + n && i < pts.size(); ++i) {
        bytes += pts[i].delivered_bytes;
        ports += pts[i].paused_ports;
      }
      gbps += fmt::format(",{:.3f}", static_cast<double>(bytes) * 8e3 / static_cast<double>(n * interval));
      paused += fmt::format(",{:.2f}", static_cast<double>(ports) / static_cast<double>(n));
    }
    csv += fmt::format("{:.3f}{}{}\n", t_us, gbps, paused);
  }
  const std::string per = group > 1 ? fmt::format(" (means of {} samples, {:g} us)", group,
                                                  sim::us_from_ps(static_cast<sim::TimePs>(group) * interval))
                                    : fmt::format(" (per {:g} us)", sim::us_from_ps(interval));
  PlotSpec spec;
  spec.title =
      fmt::format("{}: delivered throughput and PFC-paused ports, {}{}", scenario, runs_title(runs), per);
  spec.xlabel = "time since the sends began (us)";
  spec.csv_text = std::move(csv);
  spec.png_path = dir + "/throughput.png";
  PlotPanel tput;
  tput.ylabel = "delivered (Gbit/s, all receivers)";
  PlotPanel pause;
  pause.ylabel = "switch ports paused";
  for (size_t r = 0; r < runs.size(); ++r) {
    tput.series.push_back({runs[r].label, static_cast<int>(2 + r)});
    pause.series.push_back({runs[r].label, static_cast<int>(2 + runs.size() + r)});
  }
  spec.panels = {tput, pause};
  if (Status st = render_png(spec); !st) return st.error();
  return true;
}

// The CDF of switch port backlog samples over log10(bytes), one line per run, on the buckets of every
// run (a bucket's CDF at its upper edge; empty queues at 1 byte, x = 0).
Result<bool> draw_queues(const std::string& dir, const std::string& scenario,
                         const std::vector<SimPlotRun>& runs) {
  size_t buckets = 0;
  for (const SimPlotRun& r : runs) {
    const auto& h = r.series->queue_histogram;
    for (size_t b = h.size(); b > 0; --b) {
      if (h[b - 1] > 0) {
        buckets = std::max(buckets, b);
        break;
      }
    }
  }
  if (buckets == 0) return false;
  std::string csv = "log10_bytes";
  for (const SimPlotRun& r : runs) csv += "," + r.label;
  csv += "\n";
  std::vector<uint64_t> total(runs.size()), seen(runs.size());
  for (size_t r = 0; r < runs.size(); ++r)
    for (uint64_t c : runs[r].series->queue_histogram) total[r] += c;
  for (uint32_t b = 0; b < buckets; ++b) {
    const uint64_t hi = b == 0 ? 1 : sim::queue_bucket_lo(b + 1);
    csv += fmt::format("{:.4f}", std::log10(static_cast<double>(hi)));
    for (size_t r = 0; r < runs.size(); ++r) {
      const auto& h = runs[r].series->queue_histogram;
      seen[r] += b < h.size() ? h[b] : 0;
      csv += fmt::format(",{:.6f}",
                         total[r] > 0 ? static_cast<double>(seen[r]) / static_cast<double>(total[r]) : 0.0);
    }
    csv += "\n";
  }
  PlotSpec spec;
  spec.title =
      fmt::format("{}: switch port backlog CDF (every port, every sample), {}", scenario, runs_title(runs));
  spec.xlabel = "backlog, log10(bytes): 3 = 1 KB, 4 = 10 KB, 5 = 100 KB, 6 = 1 MB";
  spec.csv_text = std::move(csv);
  spec.png_path = dir + "/queue_cdf.png";
  spec.height_px_per_panel = 450;
  PlotPanel panel;
  panel.ylabel = "fraction of samples at or below";
  for (size_t r = 0; r < runs.size(); ++r) panel.series.push_back({runs[r].label, static_cast<int>(2 + r)});
  spec.panels.push_back(std::move(panel));
  if (Status st = render_png(spec); !st) return st.error();
  return true;
}

}  // namespace

Result<std::vector<std::string>> draw_sim_plots(const std::string& dir, const std::string& scenario,
                                                const std::vector<SimPlotRun>& runs) {
  if (runs.empty()) return std::vector<std::string>{};
  if (!gnuplot_available())
    return make_error(
        "gnuplot not found on PATH: no PNGs drawn (apt-get install gnuplot-nox; --no-plot "
        "skips them)");
  std::vector<std::string> names;
  using Draw = Result<bool> (*)(const std::string&, const std::string&, const std::vector<SimPlotRun>&);
  for (auto [name, draw] : {std::pair<const char*, Draw>{"fct_slowdown.png", draw_fct},
                            {"throughput.png", draw_throughput},
                            {"queue_cdf.png", draw_queues}}) {
    Result<bool> drew = draw(dir, scenario, runs);
    if (!drew) return drew.error();
    if (*drew) names.emplace_back(name);
  }
  return names;
}

}  // namespace megascale::cli
