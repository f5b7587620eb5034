// --plot: busbw against size as a PNG (gnuplot, cli/plot.h), one series per collective (per collective,
// type and op when the run had several), out of place, sizes as labelled ticks (8, 1K, 1M, ...).
//
//   cli::PlotSpec spec = busbw_plot(rows, "busbw.png", "all_reduce, 8 ranks, MegaScale");
//   if (auto s = cli::render_png(spec); !s) fail(s.error().message);
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plot.h"  // cli/plot.h

namespace megascale::coll {

// rows: json_line objects (report.h).
cli::PlotSpec busbw_plot(const std::vector<nlohmann::json>& rows, const std::string& png_path,
                         const std::string& title);

// "8", "512", "1K", "64K", "1M", "1G": a size in bytes as a tick label (powers of 1024 when exact).
std::string size_label(uint64_t bytes);

}  // namespace megascale::coll
