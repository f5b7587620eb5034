// PNG line plots through gnuplot (Debian's gnuplot-nox). Commands always write the CSV; the PNG is made
// when gnuplot is on PATH, and the caller is told plainly when it is not.
//
//   PlotSpec spec{.title = "rate", .csv_path = "out/cc.csv", .png_path = "out/cc.png"};
//   spec.panels.push_back({.ylabel = "Gb/s", .series = {{"flow0", 2}, {"flow1", 3}}});
//   if (auto s = render_png(spec); !s) fmt::print(stderr, "{}\n", s.error().message);
#pragma once

#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::cli {

struct PlotSeries {
  std::string title;
  int column = 0;  // 1-based CSV column holding y; x is column 1
};

struct PlotPanel {
  std::string ylabel;
  std::vector<PlotSeries> series;
  bool log_y = false;
};

struct PlotSpec {
  std::string title;
  std::string xlabel = "time (us)";
  std::string csv_path;   // comma-separated, one header line
  std::string png_path;
  std::vector<PlotPanel> panels;  // stacked vertically, shared x axis
  int width_px = 1200;
  int height_px_per_panel = 300;
};

// Renders the spec with gnuplot. Returns an error naming what failed (gnuplot missing, bad exit).
Status render_png(const PlotSpec& spec);

// True when a gnuplot executable is on PATH.
bool gnuplot_available();

}  // namespace megascale::cli
