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
