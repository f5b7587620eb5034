// PNG plots through gnuplot (Debian's gnuplot-nox), the one plotting stack of the CLI. The data travels
// inside the gnuplot script (a datablock), and the script in memory, so nothing but the PNG is written;
// gnuplot's own output is captured: said nowhere on success, quoted in the error on failure.
//
//   PlotSpec spec{.title = "rate", .csv_path = "out/cc.csv", .png_path = "out/cc.png"};
//   spec.panels.push_back({.ylabel = "Gb/s", .series = {{"flow0", 2}, {"flow1", 3}}});
//   spec.panels[0].hlines.push_back({12.5, "fair share 12.5 Gb/s"});
//   if (auto s = render_png(spec); !s) fmt::print(stderr, "{}\n", s.error().message);
//
// plot_script() and graph_script() are pure (spec in, script text out), so what a plot draws is tested
// without gnuplot.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::cli {

// Series colours, in order: distinct from each other on white. Series i takes colour i % 12 and, past
// the first 12, the next dash type, so no two series of one panel look alike.
inline constexpr std::array<const char*, 12> kPlotPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                             "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                                             "#bcbd22", "#17becf", "#000000", "#7b4173"};

// Where every panel's plot area starts and ends, as fractions of the picture's width: the same for all
// stacked panels, so their x axes line up whatever their tick labels and legends need. The legend sits
// to the right of kPlotRightMargin.
inline constexpr double kPlotLeftMargin = 0.07;
inline constexpr double kPlotRightMargin = 0.82;

struct PlotSeries {
  std::string title;
  int column = 0;      // 1-based CSV column holding y
  int x_column = 1;    // 1-based CSV column holding x
  bool steps = false;  // drawn as steps: a value held until the next row (a controller's state)
};

// A constant drawn across a panel to explain it (fair share, a marking threshold, the line rate): a
// dashed grey line with its label in the legend.
struct RefLine {
  double value = 0;
  std::string label{};
};

// Fields added after the first ones carry default initializers, so designated initializers naming
// only some fields compile under -Wmissing-field-initializers.
struct PlotPanel {
  std::string ylabel;
  std::vector<PlotSeries> series;
  bool log_y = false;
  std::string title{};            // above the panel; empty: none
  std::vector<RefLine> hlines{};  // y = value, inside the y range
  std::vector<RefLine> vlines{};  // x = value (an event's time), labelled at the top
};

struct PlotSpec {
  std::string title;
  std::string xlabel = "time (us)";
  std::string csv_path;  // comma-separated, one header line; read when csv_text is empty
  std::string png_path;
  std::vector<PlotPanel> panels;  // stacked vertically, shared x axis
  int width_px = 1200;
  int height_px_per_panel = 300;
  std::string csv_text{};  // the CSV itself (header line first); when set, csv_path is not read
  // Labelled x tics instead of numbered ones (e.g. size bins at x = 1, 2, ...); the x range then
  // spans them with half a tic's gap at either end.
  std::vector<std::pair<double, std::string>> x_tics{};
};

// The gnuplot script that draws `spec` from spec.csv_text: the data inline as a datablock, fixed
// left/right margins, one x range for all panels, the palette, reference lines. Series whose column
// holds no number are left out (gnuplot refuses to draw them).
std::string plot_script(const PlotSpec& spec);

// Renders the spec with gnuplot (reading spec.csv_path when spec.csv_text is empty). Returns an error
// naming what failed: nothing to draw, an unreadable CSV, gnuplot missing, or gnuplot's own message.
Status render_png(const PlotSpec& spec);

// Runs gnuplot on `script` (handed over as an in-memory file, nothing on disk). Prints nothing; on
// failure the error names `what` and quotes what gnuplot printed.
Status run_gnuplot(const std::string& script, const std::string& what);

// True when a gnuplot executable is on PATH.
bool gnuplot_available();

}  // namespace megascale::cli

namespace megascale::cli {

// Node-and-link drawings (a fabric's tiers): points in groups (one colour and legend entry each) and
// line segments between them, drawn through gnuplot into a PNG.
//
//   GraphPlotSpec g{.title = "pod 0", .png_path = "out/fabric.png"};
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
  std::string png_path;
  std::vector<std::string> group_titles;
  std::vector<GraphPoint> points;
  std::vector<GraphSegment> segments;
  std::vector<std::pair<double, std::string>> y_labels;  // y tick labels, e.g. {1, "tor"}
  std::string highlight_title = "path";
  int width_px = 1600;
  int height_px = 900;
};

// The gnuplot script that draws `spec`, its points and segments inline as datablocks.
std::string graph_script(const GraphPlotSpec& spec);

// Renders spec.png_path. Errors name what failed (nothing to draw, gnuplot missing, gnuplot's message).
Status render_graph_png(const GraphPlotSpec& spec);

}  // namespace megascale::cli
