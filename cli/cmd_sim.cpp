// `megascale sim SCENARIO.yaml`: runs a packet-level simulator scenario (sim/net, scenario.h) with the
// transport's own engine on every host, prints progress and a summary, and writes the results and
// their PNGs to a folder it names (out/sim/NAME/ unless --out); --compare runs it under several
// controllers into one table, one compare.json and one set of figures.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cmd_sim_plots.h"
#include "cmd_sim_results.h"
#include "commands.h"
#include "megascale/sim/scenario.h"
#include "vocab.h"

namespace megascale::cli {
namespace {

struct SimOptions {
  std::string scenario;
  std::string compare;  // comma-separated controller presets
  std::string cc;       // the controller instead of the scenario's
  std::string out_dir;  // "": out/sim/NAME
  std::string json_path;
  uint64_t seed = 0;
  bool seed_given = false;
  std::vector<std::string> sets;  // KEY=VALUE
  bool quiet = false;
  bool no_plot = false;
  uint32_t threads = 0;  // 0: the scenario's `threads` (default 1)
};

// Peak resident set of this process so far (Linux reports ru_maxrss in KiB).
uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Progress on standard error for runs longer than a second: the share of the bytes delivered, simulated
// time, flows done and an estimate of the time left (wall time so far scaled by the bytes still to
// come). On a terminal one line rewritten in place a few times a second; elsewhere a line every 5 s.
class ProgressLine {
 public:
  explicit ProgressLine(std::string controller)
      : controller_(std::move(controller)), tty_(isatty(fileno(stderr)) != 0), t0_(Clock::now()) {}
  ~ProgressLine() {
    if (tty_ && shown_) fmt::print(stderr, "\n");
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void report(const sim::RunProgress::Sample& p) {
    const auto now = Clock::now();
    const double wall_s = std::chrono::duration<double>(now - t0_).count();
    if (wall_s < 1.0 || now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(5)))
      return;
    last_ = now;
    const double f = p.total_bytes > 0
                         ? static_cast<double>(p.delivered_bytes) / static_cast<double>(p.total_bytes)
                         : (p.flows > 0 ? static_cast<double>(p.done) / static_cast<double>(p.flows) : 0);
    const double sim_us = sim::us_from_ps(p.now_ps);
    std::string estimate = "time left unknown yet";
    if (f > 0.001 && f < 1)
      estimate = fmt::format("~{:.0f} us simulated in all, ~{:.1f} s left", sim_us / f, wall_s * (1 - f) / f);
    const std::string line = fmt::format(
        "[{}] {:.0f}% of the bytes delivered, {:.0f} us simulated, {}/{} flows done, "
        "{:.1f} s wall, {}",
        controller_, 100 * f, sim_us, p.done, p.flows, wall_s, estimate);
    if (tty_) {
      fmt::print(stderr, "\r{:<{}}", line, width_);
      width_ = std::max(width_, line.size());
    } else {
      fmt::print(stderr, "{}\n", line);
    }
    shown_ = true;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string controller_;
  bool tty_;
  Clock::time_point t0_;
  Clock::time_point last_{};
  bool shown_ = false;
  size_t width_ = 0;
};

struct Timed {
  sim::ScenarioRun run;
  sim::ScenarioSummary summary;
  double wall_s = 0;
};

Result<Timed> run_one(const sim::SimScenario& s, const std::string& controller, bool quiet) {
  sim::RunProgress progress;
  const auto t0 = std::chrono::steady_clock::now();
  Result<sim::ScenarioRun> r = make_error("");
  {
    ProgressLine line(controller);
    progress.report = [&](const sim::RunProgress::Sample& p) { line.report(p); };
    progress.interval_ps = 50 * sim::kPsPerUs;
    r = sim::run_sim_scenario(s, controller, quiet ? nullptr : &progress);
  }
  if (!r) return r.error();
  for (const std::string& w : r->warnings) fmt::print(stderr, "warning: {}\n", w);
  Timed t;
  t.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.summary = sim::summarize_run(*r);
  t.run = std::move(*r);
  return t;
}

nlohmann::json timing_json(const Timed& t) {
  return {{"wall_s", t.wall_s},
          {"events_per_s", t.wall_s > 0 ? static_cast<double>(t.summary.events) / t.wall_s : 0.0},
          {"peak_rss_bytes", peak_rss_bytes()}};
}

void print_compare_table(std::FILE* h, const std::vector<Timed>& runs) {
  fmt::print(h, "{:<14} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9} {:>8} {:>10} {:>6} {:>7}\n", "controller",
             "done", "p50 us", "p99 us", "max us", "slow99", "Gbit/s", "ECN", "pauses", "paused us", "drops",
             "retx");
  for (const Timed& t : runs) {
    const sim::ScenarioSummary& x = t.summary;
    fmt::print(
        h, "{:<14} {:>9} {:>9.1f} {:>9.1f} {:>9.1f} {:>8.2f} {:>7.1f} {:>9} {:>8} {:>10.1f} {:>6} {:>7}\n",
        t.run.controller, fmt::format("{}/{}", x.completed, x.flows), x.fct_p50_us, x.fct_p99_us,
        x.fct_max_us, x.slowdown_p99, x.goodput_gbps, x.ecn_marks, x.pfc_pauses, x.pfc_paused_us, x.drops,
        x.retransmits);
  }
}

// A scenario's or controller's name in a file name: letters, digits, '-', '_' and '.' kept, anything else
// '_'.
std::string folder_name(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return out.empty() || out == "." || out == ".." ? "scenario" : out;
}

// The closing line's list of files: as written for one run; with --compare each run's files once, with
// the controllers in braces ("flows-{hybrid,swift}.csv"), then the shared ones (PNGs, compare.json).
std::string files_line(const std::vector<std::string>& first_run, const std::vector<std::string>& shared,
                       const std::vector<std::string>& controllers) {
  std::string line, names;
  for (const std::string& c : controllers) names += (names.empty() ? "" : ",") + folder_name(c);
  const std::string suffix = "-" + folder_name(controllers[0]);
  for (const std::string& f : first_run) {
    const size_t dot = f.rfind('.');
    line += line.empty() ? "" : ", ";
    line += controllers.size() == 1
                ? f
                : fmt::format("{}-{{{}}}{}", f.substr(0, dot - suffix.size()), names, f.substr(dot));
  }
  for (const std::string& f : shared) line += (line.empty() ? "" : ", ") + f;
  return line;
}

int run_sim(const SimOptions& o) {
  std::vector<sim::ScenarioOverride> overrides;
  for (const std::string& kv : o.sets) {
    auto ov = sim::parse_override(kv);
    if (!ov) {
      fmt::print(stderr, "megascale sim: {}\n", ov.error().message);
      return kExitUsage;
    }
    overrides.push_back(std::move(*ov));
  }
  if (o.seed_given) overrides.push_back({"seed", std::to_string(o.seed)});
  auto s = sim::load_sim_scenario(o.scenario, overrides);
  if (!s) {
    fmt::print(stderr, "{}\n", s.error().message);
    return kExitUsage;
  }
  if (o.threads > 0) s->threads = o.threads;
  std::FILE* h = vocab::human_stream(o.json_path);
  std::vector<std::string> controllers = split(o.compare);
  if (controllers.empty()) controllers.push_back(o.cc.empty() ? s->controller : o.cc);
  fmt::print(h, "scenario {} ({}): fabric {}, {} lanes, seed {}\n", s->name, o.scenario,
             s->fabric == "star" ? fmt::format("star of {}", s->star_hosts) : s->fabric, s->lanes, s->seed);
  for (const sim::ScenarioOverride& ov : overrides) fmt::print(h, "set          {} = {}\n", ov.key, ov.value);
  if (s->threads > 1)
    fmt::print(h, "threads      {} (partitions, sim/README.md \"Parallel runs\")\n", s->threads);
  // Every controller with the scenario's cc overrides, before any run: a bad one is refused at once.
  for (const std::string& c : controllers) {
    if (auto cc = sim::scenario_cc_config(*s, c); !cc) {
      fmt::print(stderr, "{}\n", cc.error().message);
      return kExitUsage;
    }
  }
  // Before anything is allocated: idle threads and a fabric too large for this machine are said.
  auto footprint = sim::scenario_footprint(*s);
  if (!footprint) {
    fmt::print(stderr, "{}\n", footprint.error().message);
    return kExitUsage;
  }
  auto warnings = sim::check_footprint(*footprint, sim::read_meminfo());
  if (!warnings) {
    fmt::print(stderr, "megascale sim: {}: {}\n", o.scenario, warnings.error().message);
    return kExitUsage;
  }
  for (const std::string& w : *warnings) fmt::print(stderr, "megascale sim: warning: {}\n", w);
  const std::string dir = o.out_dir.empty() ? "out/sim/" + folder_name(s->name) : o.out_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    fmt::print(stderr, "megascale sim: --out {}: {}\n", dir, ec.message());
    return kExitFailure;
  }

  std::vector<Timed> runs;
  std::vector<std::string> files, first_run, shared;
  for (const std::string& c : controllers) {
    auto t = run_one(*s, c, o.quiet);
    if (!t) {
      fmt::print(stderr, "{}\n", t.error().message);
      return kExitUsage;
    }
    if (controllers.size() == 1) {
      fmt::print(h, "controller   {}   hosts {}   switches {}\n", c, t->run.hosts, t->run.switches);
      fmt::print(h, "{}", sim::format_summary(t->summary));
      fmt::print(h, "wall         {:.2f} s   {:.2f} M events/s   peak RSS {:.0f} MiB\n", t->wall_s,
                 static_cast<double>(t->summary.events) / t->wall_s / 1e6,
                 static_cast<double>(peak_rss_bytes()) / (1 << 20));
    }
    auto written =
        write_sim_results(dir, t->run, t->summary, controllers.size() == 1 ? "" : "-" + folder_name(c));
    if (!written) {
      fmt::print(stderr, "megascale sim: {}\n", written.error().message);
      return kExitFailure;
    }
    files.insert(files.end(), written->begin(), written->end());
    if (first_run.empty()) first_run = *written;
    runs.push_back(std::move(*t));
  }
  if (controllers.size() > 1) print_compare_table(h, runs);
  if (!o.no_plot) {
    std::vector<SimPlotRun> plot_runs;
    for (const Timed& t : runs) plot_runs.push_back({t.run.controller, &t.summary, &t.run.result.series});
    auto pngs = draw_sim_plots(dir, s->name, plot_runs);
    if (pngs) {
      shared = *pngs;
    } else {
      fmt::print(stderr, "megascale sim: warning: {}\n", pngs.error().message);
    }
  }

  nlohmann::json doc = vocab::json_document("sim");
  doc["scenario"] = s->name;
  doc["scenario_file"] = o.scenario;
  doc["seed"] = s->seed;
  doc["overrides"] = nlohmann::json::array();
  for (const sim::ScenarioOverride& ov : overrides) doc["overrides"].push_back(ov.key + "=" + ov.value);
  doc["out_dir"] = dir;
  if (controllers.size() > 1) shared.emplace_back("compare.json");
  files.insert(files.end(), shared.begin(), shared.end());
  doc["files"] = files;
  doc["runs"] = nlohmann::json::array();
  for (const Timed& t : runs) doc["runs"].push_back(sim_run_json(t.run, t.summary));
  if (controllers.size() > 1) {
    // The folder's files hold only what the scenario and seed decide: no timing.
    if (Status st = vocab::write_json(dir + "/compare.json", doc); !st) {
      fmt::print(stderr, "megascale sim: {}\n", st.error().message);
      return kExitFailure;
    }
  }
  if (!o.json_path.empty()) {
    for (size_t i = 0; i < runs.size(); ++i) doc["runs"][i]["timing"] = timing_json(runs[i]);
    if (Status st = vocab::write_json(o.json_path, doc); !st) {
      fmt::print(stderr, "megascale sim: --json: {}\n", st.error().message);
      return kExitFailure;
    }
  }
  fmt::print(h, "results in {}/: {}\n", dir, files_line(first_run, shared, controllers));
  for (const Timed& t : runs) {
    if (t.summary.completed != t.summary.flows) return kExitFailure;  // some flow did not finish in time
  }
  return kExitOk;
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto o = std::make_shared<SimOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "Packet-level simulation of a scenario (configs/sim/*.yaml) with the transport's own engine");
  cmd->add_option("scenario", o->scenario, "scenario YAML (sim/README.md has the schema)")->required();
  auto* compare =
      cmd->add_option("--compare", o->compare,
                      "run under each controller preset, e.g. hybrid,swift,dcqcn-paper,fixed: one "
                      "table, one compare.json, one set of figures");
  vocab::cc(cmd, o->cc, "controller preset or YAML path instead of the scenario's")->excludes(compare);
  vocab::renamed(cmd, "--controller", "--cc");
  vocab::out_dir(
      cmd, o->out_dir,
      "folder for the results: CSVs, summary.json, PNGs (default out/sim/NAME, NAME the scenario's)");
  vocab::json(cmd, o->json_path);
  vocab::seed(cmd, o->seed, "the scenario's seed instead of the file's (as --set seed=N)")
      ->each([o](const std::string&) { o->seed_given = true; });
  cmd->add_option("--set", o->sets,
                  "change a scenario key before it is checked, e.g. --set workload.bytes=65536 --set "
                  "switch.ecn.pmax=0.5 (repeatable; dotted keys as in the file)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);  // one KEY=VALUE a --set: the scenario may follow
  cmd->add_flag("--no-plot", o->no_plot, "no PNGs (they need gnuplot)");
  cmd->add_flag("--quiet", o->quiet, "no progress lines");
  cmd->add_option("--threads", o->threads,
                  "run the fabric as N partitions on N threads (overrides the scenario's threads); every "
                  "N >= 2 gives the same output, 1 the one-simulation order")
      ->check(CLI::Range(1, 1024));
  cmd->callback([o] { exit_code() = run_sim(*o); });
}

}  // namespace megascale::cli
