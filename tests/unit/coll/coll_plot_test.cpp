// --plot's figure: sizes as labelled ticks, one series per collective with its out-of-place busbw, an
// empty cell where a collective has no row of that size; the gnuplot script carries them.
#include <gtest/gtest.h>

#include "megascale/coll/busbw_plot.h"

namespace megascale::coll {
namespace {

nlohmann::json row(const char* coll, uint64_t size, double bus) {
  return {{"collective", coll},
          {"size", size},
          {"type", "float"},
          {"redop", "sum"},
          {"out_of_place", {{"busbw_gbs", bus}}}};
}

TEST(CollPlot, SizesAsTicksAndACollectiveASeries) {
  EXPECT_EQ(size_label(8), "8");
  EXPECT_EQ(size_label(1536), "1536");
  EXPECT_EQ(size_label(64 << 10), "64K");
  EXPECT_EQ(size_label(uint64_t{1} << 30), "1G");
  const cli::PlotSpec spec = busbw_plot(
      {row("all_reduce", 8, 0.1), row("all_reduce", 1 << 20, 9.5), row("all_gather", 1 << 20, 12.25)},
      "x.png", "two collectives");
  ASSERT_EQ(spec.panels.size(), 1u);
  ASSERT_EQ(spec.panels[0].series.size(), 2u);
  EXPECT_EQ(spec.panels[0].series[0].title, "all_gather");
  EXPECT_EQ(spec.x_tics.size(), 2u);
  EXPECT_EQ(spec.x_tics[1].second, "1M");
  EXPECT_EQ(spec.csv_text, "x,all_gather,all_reduce\n1,,0.1\n2,12.25,9.5\n");
  EXPECT_NE(cli::plot_script(spec).find("busbw (GB/s)"), std::string::npos);
}

}  // namespace
}  // namespace megascale::coll
