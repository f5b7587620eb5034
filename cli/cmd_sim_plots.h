// `megascale sim`'s PNGs, drawn through cli/plot.h (gnuplot) from the runs in memory: FCT slowdown by
// flow-size bin, delivered throughput and paused ports over time, and the switch queue CDF. One figure
// of each per invocation; with --compare every figure holds every controller's run.
//
//   std::vector<SimPlotRun> runs{{"swift", &summary, &run.result.series}};
//   auto pngs = draw_sim_plots("out/sim/incast-small", "incast-small", runs);  // names written
#pragma once

#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/sim/scenario.h"

namespace megascale::cli {

struct SimPlotRun {
  std::string label;  // the controller
  const sim::ScenarioSummary* summary = nullptr;
  const sim::RunSeries* series = nullptr;
};

// Writes fct_slowdown.png, throughput.png and queue_cdf.png into `dir` (a figure with nothing to draw,
// such as throughput without samples, is left out) and returns their names. The data gnuplot reads is
// a temporary file in `dir`, removed again. Errors: gnuplot missing or failing, an unwritable folder.
Result<std::vector<std::string>> draw_sim_plots(const std::string& dir, const std::string& scenario,
                                                const std::vector<SimPlotRun>& runs);

}  // namespace megascale::cli
