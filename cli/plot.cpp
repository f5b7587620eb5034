#include "plot.h"

#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>

namespace megascale::cli {

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

namespace {
// gnuplot string literal: single quotes, with embedded single quotes doubled.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}
}  // namespace

Status render_png(const PlotSpec& spec) {
  if (spec.panels.empty()) return make_error("plot: nothing to draw (no panels)");
  if (!gnuplot_available())
    return make_error(fmt::format("plot: gnuplot not found on PATH; data left in {} "
                                  "(apt-get install gnuplot-nox for {})",
                                  spec.csv_path, spec.png_path));
  std::string script;
  int height = spec.height_px_per_panel * static_cast<int>(spec.panels.size());
  script += fmt::format("set terminal pngcairo size {},{} font 'sans,10'\n", spec.width_px, height);
  script += fmt::format("set output {}\n", quote(spec.png_path));
  script += "set datafile separator ','\nset key outside right top\nset grid\n";
  script += fmt::format("set multiplot layout {},1 title {}\n", spec.panels.size(), quote(spec.title));
  for (size_t i = 0; i < spec.panels.size(); ++i) {
    const PlotPanel& p = spec.panels[i];
    script += p.log_y ? "set logscale y\n" : "unset logscale y\n";
    script += fmt::format("set ylabel {}\n", quote(p.ylabel));
    script += fmt::format("set xlabel {}\n", i + 1 == spec.panels.size() ? quote(spec.xlabel) : "''");
    script += "plot ";
    for (size_t s = 0; s < p.series.size(); ++s) {
      if (s) script += ", ";
      script += fmt::format("{} using 1:{} skip 1 with lines lw 1.5 title {}", quote(spec.csv_path),
                            p.series[s].column, quote(p.series[s].title));
    }
    script += "\n";
  }
  script += "unset multiplot\n";

  // gnuplot talks on stderr (warnings such as "empty y range"); keep it out of the results on stdout.
  FILE* gp = popen("gnuplot 1>&2", "w");
  if (!gp) return make_error("plot: could not start gnuplot");
  fwrite(script.data(), 1, script.size(), gp);
  int rc = pclose(gp);
  if (rc != 0) return make_error(fmt::format("plot: gnuplot exited with status {} drawing {}", rc, spec.png_path));
  return {};
}

}  // namespace megascale::cli

namespace megascale::cli {

Status render_graph_png(const GraphPlotSpec& spec) {
  if (spec.points.empty()) return make_error("plot: nothing to draw (no points)");
  // Data blocks, separated by two blank lines so gnuplot can address each with `index`: plain segments,
  // highlighted segments, then one block of points per group. Empty blocks are skipped in the plot.
  FILE* data = std::fopen(spec.data_path.c_str(), "w");
  if (!data) return make_error(fmt::format("plot: cannot write {}", spec.data_path));
  std::vector<std::string> clauses;
  int block = 0;
  for (bool highlight : {false, true}) {
    size_t n = 0;
    for (const GraphSegment& s : spec.segments) {
      if (s.highlight != highlight) continue;
      fmt::print(data, "{} {} {} {}\n", s.x0, s.y0, s.x1 - s.x0, s.y1 - s.y0);
      ++n;
    }
    if (n == 0) continue;
    clauses.push_back(
        fmt::format("{} index {} using 1:2:3:4 with vectors nohead {} ", quote(spec.data_path), block,
                    highlight ? fmt::format("lw 3 lc rgb '#d62728' title {}", quote(spec.highlight_title))
                              : std::string("lw 0.6 lc rgb '#b0b0b0' notitle")));
    fmt::print(data, "\n\n");
    ++block;
  }
  for (size_t g = 0; g < spec.group_titles.size(); ++g) {
    size_t n = 0;
    for (const GraphPoint& p : spec.points) {
      if (p.group != static_cast<int>(g)) continue;
      fmt::print(data, "{} {}\n", p.x, p.y);
      ++n;
    }
    if (n == 0) continue;
    clauses.push_back(fmt::format("{} index {} using 1:2 with points pt 7 ps 1.2 lc {} title {}",
                                  quote(spec.data_path), block, g + 1, quote(spec.group_titles[g])));
    fmt::print(data, "\n\n");
    ++block;
  }
  std::fclose(data);
  if (!gnuplot_available())
    return make_error(
        fmt::format("plot: gnuplot not found on PATH; data left in {} "
                    "(apt-get install gnuplot-nox for {})",
                    spec.data_path, spec.png_path));
  std::string script;
  script += fmt::format("set terminal pngcairo size {},{} font 'sans,10'\n", spec.width_px, spec.height_px);
  script += fmt::format("set output {}\nset title {}\n", quote(spec.png_path), quote(spec.title));
  script += "unset xtics\nset key outside right top\nset offsets 0.02, 0.02, 0.3, 0.3\n";
  if (!spec.y_labels.empty()) {
    script += "set ytics (";
    for (size_t i = 0; i < spec.y_labels.size(); ++i) {
      script += fmt::format("{}{} {}", i ? ", " : "", quote(spec.y_labels[i].second), spec.y_labels[i].first);
    }
    script += ")\n";
  }
  script += "plot ";
  for (size_t i = 0; i < clauses.size(); ++i) script += (i ? ", " : "") + clauses[i];
  script += "\n";
  FILE* gp = popen("gnuplot 1>&2", "w");
  if (!gp) return make_error("plot: could not start gnuplot");
  fwrite(script.data(), 1, script.size(), gp);
  int rc = pclose(gp);
  if (rc != 0)
    return make_error(fmt::format("plot: gnuplot exited with status {} drawing {}", rc, spec.png_path));
  return {};
}

}  // namespace megascale::cli
