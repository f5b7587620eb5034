#include "plot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>

extern char** environ;

namespace megascale::cli {

bool gnuplot_available() {
  return std::system("command -v gnuplot >/dev/null 2>&1") == 0;
}

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

// Series i: palette colour i % 12, dash type 1 (solid) for the first 12, then 2, 3, ... (gnuplot has 5).
std::string series_style(size_t i) {
  return fmt::format("lc rgb '{}' dt {}", kPlotPalette[i % kPlotPalette.size()],
                     1 + (i / kPlotPalette.size()) % 5);
}

constexpr const char* kRefColour = "#404040";
constexpr int kLegendRowPx = 13;  // one legend line at font size 8, spacing 0.9

// The CSV's data lines split into fields (the header line and blank lines dropped).
std::vector<std::vector<std::string_view>> csv_rows(std::string_view text) {
  std::vector<std::vector<std::string_view>> rows;
  bool header = true;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (header) {
      header = false;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string_view> fields;
    for (size_t start = 0;;) {
      const size_t comma = line.find(',', start);
      fields.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    rows.push_back(std::move(fields));
  }
  return rows;
}

// The number in a CSV field (1-based column), if it holds one.
bool number_at(const std::vector<std::string_view>& row, int column, double& value) {
  if (column < 1 || static_cast<size_t>(column) > row.size()) return false;
  std::string_view field = row[static_cast<size_t>(column) - 1];
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  return ec == std::errc() && end == field.data() + field.size() && std::isfinite(value);
}

// The datablock: the CSV as given, its header line turned into a comment.
std::string datablock(const std::string& name, const std::string& csv) {
  std::string out = name + " << EOD\n";
  if (!csv.empty() && csv[0] != '#') out += "# ";
  out += csv;
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out + "EOD\n";
}

}  // namespace

std::string plot_script(const PlotSpec& spec) {
  const auto rows = csv_rows(spec.csv_text);
  // One x range for every panel, from the data itself, so stacked panels share their time axis.
  double x_min = std::numeric_limits<double>::infinity();
  double x_max = -x_min;
  std::set<int> x_columns;
  for (const PlotPanel& p : spec.panels)
    for (const PlotSeries& s : p.series) x_columns.insert(s.x_column);
  for (int column : x_columns) {
    double x = 0;
    for (const auto& row : rows)
      if (number_at(row, column, x)) x_min = std::min(x_min, x), x_max = std::max(x_max, x);
  }
  const auto has_data = [&](const PlotSeries& s) {
    double x = 0, y = 0;
    return std::any_of(rows.begin(), rows.end(), [&](const auto& row) {
      return number_at(row, s.x_column, x) && number_at(row, s.column, y);
    });
  };

  const size_t n = std::max<size_t>(1, spec.panels.size());
  // The legend stays in one column beside its panel: a panel grows to fit its entries.
  size_t entries = 0;
  for (const PlotPanel& p : spec.panels) entries = std::max(entries, p.series.size() + p.hlines.size());
  const int panel_px = std::max(spec.height_px_per_panel, kLegendRowPx * static_cast<int>(entries) + 80);
  std::string script = datablock("$data", spec.csv_text);
  script += fmt::format("set terminal pngcairo size {},{} font 'sans,10'\n", spec.width_px,
                        panel_px * static_cast<int>(n));
  script += fmt::format("set output {}\n", quote(spec.png_path));
  script +=
      "set datafile separator ','\nset key outside right top font ',8' spacing 0.9 samplen 2.5\nset grid\n";
  script +=
      fmt::format("set lmargin at screen {}\nset rmargin at screen {}\n", kPlotLeftMargin, kPlotRightMargin);
  if (!spec.x_tics.empty()) {
    std::string tics;
    for (const auto& [x, label] : spec.x_tics) {
      tics += fmt::format("{}{} {:.10g}", tics.empty() ? "" : ", ", quote(label), x);
      x_min = std::min(x_min, x - 0.5);
      x_max = std::max(x_max, x + 0.5);
    }
    script += fmt::format("set xtics ({})\n", tics);
  }
  if (x_max > x_min) script += fmt::format("set xrange [{:.10g}:{:.10g}]\n", x_min, x_max);
  // A little room above and below the data, so a line at the extreme of its range is not drawn on the
  // border.
  script += "set offsets graph 0, graph 0, graph 0.05, graph 0.05\n";
  script += fmt::format("set multiplot layout {},1 title {} font ',12'\n", n, quote(spec.title));
  for (size_t i = 0; i < spec.panels.size(); ++i) {
    const PlotPanel& p = spec.panels[i];
    script += "unset arrow\nunset label\n";
    script += p.log_y ? "set logscale y\n" : "unset logscale y\n";
    script += p.title.empty() ? "unset title\n" : fmt::format("set title {}\n", quote(p.title));
    script += fmt::format("set ylabel {}\n", quote(p.ylabel));
    script += fmt::format("set xlabel {}\n", i + 1 == spec.panels.size() ? quote(spec.xlabel) : "''");
    for (const RefLine& v : p.vlines) {
      script += fmt::format(
          "set arrow from first {0:.10g}, graph 0 to first {0:.10g}, graph 1 nohead dt 3 "
          "lc rgb '{1}' front\n",
          v.value, kRefColour);
      script += fmt::format(
          "set label {} at first {:.10g}, graph 1 offset 0.4,-0.9 left font ',8' tc rgb '{}' front\n",
          quote(v.label), v.value, kRefColour);
    }
    std::vector<std::string> clauses;
    for (size_t s = 0; s < p.series.size(); ++s) {
      const PlotSeries& series = p.series[s];
      if (!has_data(series)) continue;
      clauses.push_back(fmt::format("$data using {}:{} with {} lw 1.5 {} title {}", series.x_column,
                                    series.column, series.steps ? "steps" : "lines", series_style(s),
                                    quote(series.title)));
    }
    for (size_t r = 0; r < p.hlines.size(); ++r) {
      const RefLine& h = p.hlines[r];
      if (p.log_y && h.value <= 0) continue;
      clauses.push_back(fmt::format("{:.10g} with lines lw 1.5 dt {} lc rgb '{}' title {}", h.value,
                                    2 + r % 4, kRefColour, quote(h.label)));
    }
    if (clauses.empty()) {
      script += "set label 'no data' at graph 0.5, graph 0.5 center\n";
      clauses.push_back("[][0:1] NaN notitle");
    }
    script += "plot ";
    for (size_t c = 0; c < clauses.size(); ++c) script += (c ? ", \\\n     " : "") + clauses[c];
    script += "\n";
  }
  script += "unset multiplot\n";
  return script;
}

Status run_gnuplot(const std::string& script, const std::string& what) {
  constexpr int kScriptFd = 3;
  // The script goes in and gnuplot's messages come back through memory files: no pipe to keep drained
  // while writing, and nothing on disk. The script is named as a file (/dev/fd/3), not given on standard
  // input, which gnuplot reads one byte per system call (0.3 s of a 550 KB script). Its standard output
  // (nothing, unless a terminal went astray) is dropped; its standard error is kept for the error.
  struct Fd {
    int fd = -1;
    ~Fd() {
      if (fd >= 0) close(fd);
    }
  } in, err;
  in.fd = memfd_create("megascale-gnuplot-script", MFD_CLOEXEC);
  err.fd = memfd_create("megascale-gnuplot-stderr", MFD_CLOEXEC);
  if (in.fd < 0 || err.fd < 0) return make_error(fmt::format("plot: memfd_create: {}", std::strerror(errno)));
  if (in.fd == kScriptFd) {  // dup2 onto itself would keep close-on-exec set
    const int moved = fcntl(in.fd, F_DUPFD_CLOEXEC, kScriptFd + 1);
    close(in.fd);
    in.fd = moved;
    if (in.fd < 0) return make_error(fmt::format("plot: fcntl: {}", std::strerror(errno)));
  }
  for (size_t done = 0; done < script.size();) {
    const ssize_t w = write(in.fd, script.data() + done, script.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return make_error(fmt::format("plot: writing the gnuplot script: {}", std::strerror(errno)));
    done += static_cast<size_t>(w);
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err.fd, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, in.fd, kScriptFd);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  char arg0[] = "gnuplot";
  char arg1[] = "/dev/fd/3";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT)
    return make_error(
        fmt::format("plot: gnuplot not found on PATH (apt-get install gnuplot-nox) for {}", what));
  if (spawned != 0) return make_error(fmt::format("plot: cannot start gnuplot: {}", std::strerror(spawned)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return make_error(fmt::format("plot: waitpid: {}", std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};

  std::string said;
  lseek(err.fd, 0, SEEK_SET);
  char buf[4096];
  for (ssize_t r; (r = read(err.fd, buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(r));
  // gnuplot echoes the failing line with a caret under it; the last lines say what went wrong.
  constexpr size_t kKept = 2000;
  if (said.size() > kKept) said = "..." + said.substr(said.size() - kKept);
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  const std::string how = WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                            : fmt::format("signal {}", WTERMSIG(status));
  return make_error(
      fmt::format("plot: gnuplot failed drawing {} ({}){}{}", what, how, said.empty() ? "" : ":\n", said));
}

Status render_png(const PlotSpec& spec) {
  if (spec.panels.empty()) return make_error("plot: nothing to draw (no panels)");
  if (!spec.csv_text.empty()) return run_gnuplot(plot_script(spec), spec.png_path);
  std::ifstream in(spec.csv_path, std::ios::binary);
  if (!in) return make_error(fmt::format("plot: cannot read {}", spec.csv_path));
  std::ostringstream text;
  text << in.rdbuf();
  PlotSpec with_data = spec;
  with_data.csv_text = text.str();
  return run_gnuplot(plot_script(with_data), spec.png_path);
}

}  // namespace megascale::cli

namespace megascale::cli {

std::string graph_script(const GraphPlotSpec& spec) {
  // One datablock per kind of thing drawn: plain segments, highlighted segments, each group's points.
  std::string script;
  std::vector<std::string> clauses;
  for (bool highlight : {false, true}) {
    std::string block;
    for (const GraphSegment& s : spec.segments) {
      if (s.highlight == highlight)
        block += fmt::format("{} {} {} {}\n", s.x0, s.y0, s.x1 - s.x0, s.y1 - s.y0);
    }
    if (block.empty()) continue;
    const std::string name = highlight ? "$path" : "$links";
    script += name + " << EOD\n" + block + "EOD\n";
    clauses.push_back(
        fmt::format("{} using 1:2:3:4 with vectors nohead {}", name,
                    highlight ? fmt::format("lw 3 lc rgb '#d62728' title {}", quote(spec.highlight_title))
                              : std::string("lw 0.6 lc rgb '#b0b0b0' notitle")));
  }
  for (size_t g = 0; g < spec.group_titles.size(); ++g) {
    std::string block;
    for (const GraphPoint& p : spec.points) {
      if (p.group == static_cast<int>(g)) block += fmt::format("{} {}\n", p.x, p.y);
    }
    if (block.empty()) continue;
    const std::string name = fmt::format("$group{}", g);
    script += name + " << EOD\n" + block + "EOD\n";
    clauses.push_back(fmt::format("{} using 1:2 with points pt 7 ps 1.2 lc rgb '{}' title {}", name,
                                  kPlotPalette[g % kPlotPalette.size()], quote(spec.group_titles[g])));
  }
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
  return script + "\n";
}

Status render_graph_png(const GraphPlotSpec& spec) {
  if (spec.points.empty()) return make_error("plot: nothing to draw (no points)");
  return run_gnuplot(graph_script(spec), spec.png_path);
}

}  // namespace megascale::cli
