// The CLI's plots: the gnuplot script each spec becomes (read without gnuplot), then real PNGs where
// gnuplot is installed: one file written, nothing said on success, gnuplot's words in the error on failure.
#include "plot.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace megascale::cli {
namespace {

namespace fs = std::filesystem;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Lines of `script` that contain `what`.
std::vector<std::string> lines_with(const std::string& script, const std::string& what) {
  std::vector<std::string> out;
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos) out.push_back(line);
  return out;
}

// A CSV of t_us and `columns` y columns over t = 10..40: column c (2-based) holds c * t.
std::string csv(int columns) {
  std::string text = "t_us";
  for (int c = 0; c < columns; ++c) text += fmt::format(",y{}", c);
  text += "\n";
  for (int t = 10; t <= 40; t += 10) {
    text += std::to_string(t);
    for (int c = 0; c < columns; ++c) text += fmt::format(",{}", (c + 2) * t);
    text += "\n";
  }
  return text;
}

PlotSpec two_panels() {
  PlotSpec spec;
  spec.title = "two panels";
  spec.csv_path = "/nonexistent/never-read.csv";
  spec.png_path = "out/two.png";
  spec.csv_text = csv(3);
  spec.panels.push_back({.ylabel = "rate (Gb/s)", .series = {{"a", 2}, {"b", 3}}});
  spec.panels.push_back({.ylabel = "queue (us)", .series = {{"q", 4}}});
  return spec;
}

// ---- the script, without gnuplot -------------------------------------------------------------------

TEST(PlotScript, CarriesTheDataInlineNotAsAFile) {
  const std::string script = plot_script(two_panels());
  EXPECT_EQ(script.rfind("$data << EOD\n# t_us,y0,y1,y2\n10,20,30,40\n", 0), 0u) << script;
  EXPECT_NE(script.find("40,80,120,160\nEOD\n"), std::string::npos) << script;
  EXPECT_EQ(script.find("never-read.csv"), std::string::npos) << "the CSV file is not read by gnuplot";
  EXPECT_EQ(count(script, "$data using 1:"), 3u) << script;
}

TEST(PlotScript, FixesTheMarginsAndSharesOneXRangeSoPanelsLineUp) {
  const std::string script = plot_script(two_panels());
  EXPECT_EQ(count(script, "set lmargin at screen 0.07\n"), 1u) << script;
  EXPECT_EQ(count(script, "set rmargin at screen 0.82\n"), 1u) << script;
  EXPECT_EQ(count(script, "set xrange [10:40]\n"), 1u) << script;
  // Margins and x range are set once, before the panels, and no panel sets its own.
  EXPECT_LT(script.find("set xrange"), script.find("set multiplot"));
  EXPECT_LT(script.find("set lmargin"), script.find("set multiplot"));
}

TEST(PlotScript, LabelledXTicsWidenTheRangeByHalfATic) {
  PlotSpec spec = two_panels();
  spec.x_tics = {{1, "[0, 10K): 3 flows"}, {2, "[10K, inf): 1 flows"}};
  const std::string script = plot_script(spec);
  EXPECT_EQ(count(script, "set xtics ('[0, 10K): 3 flows' 1, '[10K, inf): 1 flows' 2)\n"), 1u) << script;
  // The data spans x 10..40; the tics at 1 and 2 pull the range down to 0.5.
  EXPECT_EQ(count(script, "set xrange [0.5:40]\n"), 1u) << script;
}

TEST(PlotScript, TitlesTheFigureAndEachPanelThatHasOne) {
  PlotSpec spec = two_panels();
  spec.title = "swift's run";
  spec.panels[0].title = "sending rate";
  const std::string script = plot_script(spec);
  EXPECT_NE(script.find("set multiplot layout 2,1 title 'swift''s run'"), std::string::npos) << script;
  EXPECT_EQ(count(script, "set title 'sending rate'\n"), 1u) << script;
  EXPECT_EQ(count(script, "unset title\n"), 1u) << script;
  EXPECT_EQ(count(script, "set xlabel 'time (us)'"), 1u) << "only the bottom panel labels the x axis";
}

TEST(PlotScript, PaletteHasTwelveDistinctColours) {
  EXPECT_EQ(std::set<std::string>(kPlotPalette.begin(), kPlotPalette.end()).size(), 12u);
}

TEST(PlotScript, SeriesStayDistinctPastTheTwelfth) {
  PlotSpec spec;
  spec.png_path = "many.png";
  spec.csv_text = csv(26);
  PlotPanel panel{.ylabel = "rate", .series = {}};
  for (int i = 0; i < 26; ++i) panel.series.push_back({"flow " + std::to_string(i), i + 2});
  spec.panels = {panel};
  const std::vector<std::string> clauses = lines_with(plot_script(spec), "$data using");
  ASSERT_EQ(clauses.size(), 26u);
  std::set<std::string> styles;
  for (size_t i = 0; i < clauses.size(); ++i) {
    const std::string colour = kPlotPalette[i % 12];
    const std::string dash = "dt " + std::to_string(1 + i / 12);
    EXPECT_NE(clauses[i].find(colour), std::string::npos) << i << ": " << clauses[i];
    EXPECT_NE(clauses[i].find(dash), std::string::npos) << i << ": " << clauses[i];
    styles.insert(colour + " " + dash);
  }
  EXPECT_EQ(styles.size(), 26u) << "two series share a colour and a dash type";
}

TEST(PlotScript, DrawsReferenceLinesWithTheirLabels) {
  PlotSpec spec = two_panels();
  spec.panels[0].hlines = {{12.5, "fair share 12.5 Gb/s"}, {100, "line rate"}};
  spec.panels[1].hlines = {{8.19, "Kmin 100 KB"}};
  spec.panels[1].vlines = {{25, "spike"}};
  const std::string script = plot_script(spec);
  EXPECT_NE(script.find("12.5 with lines lw 1.5 dt 2 lc rgb '#404040' title 'fair share 12.5 Gb/s'"),
            std::string::npos)
      << script;
  EXPECT_NE(script.find("100 with lines lw 1.5 dt 3 lc rgb '#404040' title 'line rate'"), std::string::npos);
  EXPECT_NE(script.find("8.19 with lines"), std::string::npos);
  EXPECT_NE(script.find("set arrow from first 25, graph 0 to first 25, graph 1 nohead"), std::string::npos);
  EXPECT_NE(script.find("set label 'spike' at first 25, graph 1"), std::string::npos);
  // Each panel starts clean: one panel's vertical lines are not drawn on the next.
  EXPECT_EQ(count(script, "unset arrow\nunset label\n"), 2u);
  EXPECT_GT(script.find("\nset arrow"), script.rfind("unset arrow")) << "the arrow is drawn on panel 2 only";
}

TEST(PlotScript, LeavesOutSeriesWithoutNumbersAndSaysWhenAPanelHasNone) {
  PlotSpec spec;
  spec.png_path = "gaps.png";
  spec.csv_text = "t_us,cwnd_kb,rate\n0,,1\n10,,2\n";
  spec.panels.push_back({.ylabel = "rate", .series = {{"rate", 3}, {"cwnd", 2}}});
  spec.panels.push_back({.ylabel = "cwnd", .series = {{"cwnd", 2}}});
  const std::string script = plot_script(spec);
  EXPECT_EQ(count(script, "$data using"), 1u) << script;
  EXPECT_NE(script.find("title 'rate'"), std::string::npos);
  EXPECT_NE(script.find("set label 'no data'"), std::string::npos) << script;
}

TEST(PlotScript, StepsWhereASeriesAsksForThem) {
  PlotSpec spec = two_panels();
  spec.panels[1].series[0].steps = true;
  const std::string script = plot_script(spec);
  EXPECT_EQ(count(script, " with steps "), 1u) << script;
  EXPECT_EQ(count(script, " with lines lw 1.5 lc rgb"), 2u) << script;
}

TEST(GraphScript, CarriesPointsAndSegmentsInline) {
  GraphPlotSpec g;
  g.png_path = "fabric.png";
  g.group_titles = {"tor", "spine"};
  g.points = {{0.25, 0, 0}, {0.75, 0, 0}, {0.5, 1, 1}};
  g.segments = {{0.25, 0, 0.5, 1, false}, {0.75, 0, 0.5, 1, true}};
  const std::string script = graph_script(g);
  EXPECT_NE(script.find("$links << EOD\n0.25 0 0.25 1\nEOD\n"), std::string::npos) << script;
  EXPECT_NE(script.find("$path << EOD\n0.75 0 -0.25 1\nEOD\n"), std::string::npos) << script;
  EXPECT_NE(script.find("$group1 << EOD\n0.5 1\nEOD\n"), std::string::npos) << script;
}

// ---- gnuplot itself ------------------------------------------------------------------------------

class PlotRender : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not on PATH (apt-get install gnuplot-nox)";
    std::string tmpl = (fs::temp_directory_path() / "megascale-plot-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }
  static bool is_png(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    char magic[8] = {};
    in.read(magic, sizeof magic);
    return in && std::string(magic, 8) == "\x89PNG\r\n\x1a\n";
  }
  fs::path dir_;
};

TEST_F(PlotRender, WritesThePngAloneAndSaysNothing) {
  PlotSpec spec = two_panels();
  spec.png_path = (dir_ / "two.png").string();
  // A flat series makes gnuplot warn ("empty y range"); the warning must not reach the terminal.
  spec.csv_text = "t_us,flat,y\n0,5,1\n10,5,2\n20,5,3\n";
  spec.panels = {{.ylabel = "flat", .series = {{"flat", 2}}}, {.ylabel = "y", .series = {{"y", 3}}}};
  spec.panels[1].hlines = {{2.5, "half"}};
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  const Status s = render_png(spec);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  EXPECT_EQ(files(), std::vector<std::string>{"two.png"});
  EXPECT_TRUE(is_png(dir_ / "two.png"));
}

TEST_F(PlotRender, ReadsTheCsvFileWhenNoTextIsGiven) {
  PlotSpec spec = two_panels();
  spec.csv_text.clear();
  spec.csv_path = (dir_ / "data.csv").string();
  spec.png_path = (dir_ / "data.png").string();
  std::ofstream(spec.csv_path) << csv(3);
  ASSERT_TRUE(render_png(spec));
  EXPECT_TRUE(is_png(spec.png_path));
  EXPECT_EQ(files().size(), 2u);  // the caller's CSV and the PNG

  spec.csv_path = (dir_ / "missing.csv").string();
  const Status missing = render_png(spec);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("missing.csv"), std::string::npos) << missing.error().message;
}

TEST_F(PlotRender, FailureQuotesGnuplotAndPrintsNothing) {
  PlotSpec spec = two_panels();
  spec.png_path = (dir_ / "no-such-folder" / "x.png").string();
  testing::internal::CaptureStderr();
  const Status s = render_png(spec);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("gnuplot failed drawing " + spec.png_path), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("cannot open file"), std::string::npos) << s.error().message;
  EXPECT_EQ(err, "");

  const Status bad = run_gnuplot("plot $nothing\n", "a test");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("no datablock named $nothing"), std::string::npos)
      << bad.error().message;
  EXPECT_NE(bad.error().message.find("exit status"), std::string::npos) << bad.error().message;
}

TEST_F(PlotRender, DrawsAGraphWithoutADataFile) {
  GraphPlotSpec g;
  g.png_path = (dir_ / "fabric.png").string();
  g.group_titles = {"tor", "spine"};
  g.points = {{0.25, 0, 0}, {0.75, 0, 0}, {0.5, 1, 1}};
  g.segments = {{0.25, 0, 0.5, 1, false}, {0.75, 0, 0.5, 1, true}};
  g.y_labels = {{0, "tor"}, {1, "spine"}};
  const Status s = render_graph_png(g);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(files(), std::vector<std::string>{"fabric.png"});
  EXPECT_TRUE(is_png(g.png_path));
}

}  // namespace
}  // namespace megascale::cli
