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

namespace megascale::cli {

// Node-and-link drawings (a fabric's tiers): points in groups (one colour and legend entry each) and
// line segments between them, drawn through gnuplot into a PNG.
//
//   GraphPlotSpec g{.title = "pod 0", .data_path = "out/fabric.dat", .png_path = "out/fabric.png"};
//   g.group_titles = {"tor", "aggregation"};
//   g.points.push_back({0.1, 1, 0});
//   g.segments.push_back({0.1, 1, 0.5, 2, false});
//   if (auto s = render_graph_png(g); !s) fmt::print(stderr, "{}\n", s.error().message);
struct GraphPoint {
  double x = 0;
  double y = 0;
  int group = 0;  // index into GraphPlotSpec::group_titles
};

struct GraphSegment {
  double x0 = 0;
  double y0 = 0;
  double x1 = 0;
  double y1 = 0;
  bool highlight = false;  // drawn thick and red (a path), over the others
};

struct GraphPlotSpec {
  std::string title;
  std::string data_path;  // written here: the points and segments gnuplot reads
  std::string png_path;
  std::vector<std::string> group_titles;
  std::vector<GraphPoint> points;
  std::vector<GraphSegment> segments;
  std::vector<std::pair<double, std::string>> y_labels;  // y tick labels, e.g. {1, "tor"}
  std::string highlight_title = "path";
  int width_px = 1600;
  int height_px = 900;
};

// Writes spec.data_path and renders spec.png_path. Errors name what failed (gnuplot missing, bad exit,
// unwritable data file).
Status render_graph_png(const GraphPlotSpec& spec);

}  // namespace megascale::cli
