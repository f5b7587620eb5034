// `megascale sim SCENARIO.yaml`: runs a packet-level simulator scenario (sim/net, scenario.h) with the
// transport's own engine on every host, prints progress and a summary, writes per-flow CSV and a JSON
// summary with --out, and with --compare runs it under several controllers and tabulates them.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cmd_sim_results.h"
#include "commands.h"
#include "megascale/sim/scenario.h"

namespace megascale::cli {
namespace {

struct SimOptions {
  std::string scenario;
  std::string compare;  // comma-separated controller presets
  std::string out_dir;
  std::string controller;  // override
  bool quiet = false;
  uint32_t threads = 0;  // 0: the scenario's `threads` (default 1)
};

// Peak resident set of this process so far (Linux reports ru_maxrss in KiB).
double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Timed {
  sim::ScenarioRun run;
  sim::ScenarioSummary summary;
  double wall_s = 0;
};

Result<Timed> run_one(const sim::SimScenario& s, const std::string& controller, bool quiet) {
  sim::RunProgress progress;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  if (!quiet) {
    // At most a line a second on a terminal-free stream: simulated time, flows done, events per second.
    progress.report = [&](sim::TimePs now_ps, size_t done, size_t flows) {
      const auto t = std::chrono::steady_clock::now();
      if (t - last < std::chrono::seconds(1)) return;
      last = t;
      fmt::print(stderr, "  [{}] {:.0f} us simulated, {}/{} flows done, {:.1f} s wall\n", controller,
                 sim::us_from_ps(now_ps), done, flows, std::chrono::duration<double>(t - t0).count());
    };
    progress.interval_ps = 50 * sim::kPsPerUs;
  }
  auto r = sim::run_sim_scenario(s, controller, quiet ? nullptr : &progress);
  if (!r) return r.error();
  for (const std::string& w : r->warnings) fmt::print(stderr, "warning: {}\n", w);
  Timed t;
  t.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.summary = sim::summarize_run(*r);
  t.run = std::move(*r);
  return t;
}

nlohmann::json summary_json(const Timed& t) {
  const sim::ScenarioSummary& s = t.summary;
  return nlohmann::json{
      {"scenario", t.run.scenario.name},
      {"controller", t.run.controller},
      {"hosts", t.run.hosts},
      {"switches", t.run.switches},
      {"flows", s.flows},
      {"completed", s.completed},
      {"failed", s.failed},
      {"fct_us",
       {{"p50", s.fct_p50_us}, {"p95", s.fct_p95_us}, {"p99", s.fct_p99_us}, {"max", s.fct_max_us}}},
      {"slowdown", {{"p50", s.slowdown_p50}, {"p99", s.slowdown_p99}}},
      {"rate_fraction_mean", s.rate_fraction_mean},
      {"goodput_gbps", s.goodput_gbps},
      {"rtt_us", {{"p50_mean", s.rtt_p50_mean_us}, {"p99_max", s.rtt_p99_max_us}}},
      {"drops", s.drops},
      {"link_down_drops", s.link_down_drops},
      {"ecn_marks", s.ecn_marks},
      {"pfc_pauses", s.pfc_pauses},
      {"pfc_paused_us", s.pfc_paused_us},
      {"retransmits", s.retransmits},
      {"timeouts", s.timeouts},
      {"events", s.events},
      {"simulated_us", s.simulated_us},
      {"wall_s", t.wall_s},
      {"events_per_s", t.wall_s > 0 ? static_cast<double>(s.events) / t.wall_s : 0.0},
      {"peak_rss_mib", peak_rss_mib()},
      {"results", sim_results_json(s)}};
}

Status write_outputs(const std::string& dir, const Timed& t, const std::string& suffix) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(fmt::format("--out {}: {}", dir, ec.message()));
  const std::string csv_path = fmt::format("{}/flows{}.csv", dir, suffix);
  std::ofstream csv(csv_path);
  if (!csv) return make_error(fmt::format("{}: cannot write", csv_path));
  csv << "flow,src,dst,bytes,start_us,completed,fct_us,ideal_fct_us,slowdown,send_done_us,retransmits,"
         "timeouts,failed,"
         "error\n";
  const sim::RunResult& r = t.run.result;
  for (size_t i = 0; i < r.flows.size(); ++i) {
    const sim::FlowResult& f = r.flows[i];
    const double ideal = sim::us_from_ps(t.run.ideal_fct_ps[i]);
    // The error text is the engine's own ("peer N unreachable: ..."); quoted, with no quotes inside.
    std::string error = f.error;
    std::replace(error.begin(), error.end(), '"', '\'');
    csv << fmt::format("{},{},{},{},{:.3f},{},{:.3f},{:.3f},{:.4f},{:.3f},{},{},{},\"{}\"\n", i, f.spec.src,
                       f.spec.dst, f.spec.bytes, sim::us_from_ps(f.started_ps), f.completed ? 1 : 0,
                       sim::us_from_ps(f.fct_ps), ideal,
                       f.completed ? sim::us_from_ps(f.fct_ps) / ideal : 0.0, sim::us_from_ps(f.send_done_ps),
                       f.retransmits, f.timeouts, f.failed ? 1 : 0, error);
  }
  const std::string json_path = fmt::format("{}/summary{}.json", dir, suffix);
  std::ofstream js(json_path);
  if (!js) return make_error(fmt::format("{}: cannot write", json_path));
  js << summary_json(t).dump(2) << "\n";
  return write_sim_results(dir, t.run, t.summary, suffix);
}

int run_sim(const SimOptions& o) {
  auto s = sim::load_sim_scenario(o.scenario);
  if (!s) {
    fmt::print(stderr, "{}\n", s.error().message);
    return kExitUsage;
  }
  if (o.threads > 0) s->threads = o.threads;
  std::vector<std::string> controllers = split(o.compare);
  if (controllers.empty()) controllers.push_back(o.controller.empty() ? s->controller : o.controller);
  fmt::print("scenario {} ({}): fabric {}, {} lanes, seed {}\n", s->name, o.scenario,
             s->fabric == "star" ? fmt::format("star of {}", s->star_hosts) : s->fabric, s->lanes, s->seed);
  if (s->threads > 1)
    fmt::print("threads      {} (partitions, sim/README.md \"Parallel runs\")\n", s->threads);
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
  std::vector<Timed> runs;
  for (const std::string& c : controllers) {
    auto t = run_one(*s, c, o.quiet);
    if (!t) {
      fmt::print(stderr, "{}\n", t.error().message);
      return kExitUsage;
    }
    if (controllers.size() == 1) {
      fmt::print("controller   {}   hosts {}   switches {}\n", c, t->run.hosts, t->run.switches);
      fmt::print("{}", sim::format_summary(t->summary));
      fmt::print("wall         {:.2f} s   {:.2f} M events/s   peak RSS {:.0f} MiB\n", t->wall_s,
                 static_cast<double>(t->summary.events) / t->wall_s / 1e6, peak_rss_mib());
    }
    if (!o.out_dir.empty()) {
      if (Status st = write_outputs(o.out_dir, *t, controllers.size() == 1 ? "" : "-" + c); !st) {
        fmt::print(stderr, "{}\n", st.error().message);
        return kExitFailure;
      }
    }
    runs.push_back(std::move(*t));
  }
  if (controllers.size() > 1) {
    fmt::print("{:<14} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9} {:>8} {:>10} {:>6} {:>7}\n", "controller",
               "done", "p50 us", "p99 us", "max us", "slow99", "Gbit/s", "ECN", "pauses", "paused us",
               "drops", "retx");
    for (const Timed& t : runs) {
      const sim::ScenarioSummary& x = t.summary;
      fmt::print(
          "{:<14} {:>9} {:>9.1f} {:>9.1f} {:>9.1f} {:>8.2f} {:>7.1f} {:>9} {:>8} {:>10.1f} {:>6} {:>7}\n",
          t.run.controller, fmt::format("{}/{}", x.completed, x.flows), x.fct_p50_us, x.fct_p99_us,
          x.fct_max_us, x.slowdown_p99, x.goodput_gbps, x.ecn_marks, x.pfc_pauses, x.pfc_paused_us, x.drops,
          x.retransmits);
    }
  }
  if (!o.out_dir.empty())
    fmt::print(
        "wrote {}/: flows, fct_bins, throughput, throughput_hosts, queues, ports (.csv) and summary.json\n",
        o.out_dir);
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
  cmd->add_option("--compare", o->compare,
                  "run under each controller preset, e.g. hybrid,swift,dcqcn-paper,fixed");
  cmd->add_option("--controller", o->controller, "controller preset or YAML path instead of the scenario's");
  cmd->add_option("--out", o->out_dir,
                  "folder for flows.csv, summary.json and the results CSVs (one set per controller); "
                  "scripts/plot-sim.py draws them");
  cmd->add_flag("--quiet", o->quiet, "no progress lines");
  cmd->add_option("--threads", o->threads,
                  "run the fabric as N partitions on N threads (overrides the scenario's threads); every "
                  "N >= 2 gives the same output, 1 the one-simulation order")
      ->check(CLI::Range(1, 1024));
  cmd->callback([o] { exit_code() = run_sim(*o); });
}

}  // namespace megascale::cli
