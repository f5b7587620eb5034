// `megascale cc`: see what a congestion-control preset does before deploying it.
//
//   megascale cc                                  # every built-in preset on the default fluid model
//   megascale cc --cc swift --cc hybrid --flows 64 --buffer-kb 512
//   megascale cc --cc my-preset.yaml --scenario configs/scenarios/ecn-before-delay.yaml --json r.json
//   megascale cc --cc swift -D 5ms --json -                 # JSON on stdout, the table on stderr
//
// Without --scenario it runs the single-bottleneck model (sim/fluid) once per preset, prints a
// comparison table and writes <out>/<preset>.csv and .png (rate, window and queue over time, with fair
// share, Kmin/Kmax and the buffer drawn in). With --scenario it replays the scripted signals through
// each preset's controller and prints its state after every event. Bad flags, presets or scenario
// files exit with status 2 and say what was wrong. docs/CLI.md has the JSON schema.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "megascale/congestion/config.h"
#include "megascale/sim/fluid.h"
#include "megascale/sim/replay.h"
#include "plot.h"
#include "vocab.h"

namespace megascale::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CcOptions {
  std::vector<std::string> presets;
  int flows = 8;
  double capacity_gbps = 100;
  double rtt_us = 10;
  double duration_s = 0.020;
  double buffer_kb = 1024;
  double ecn_kmin_kb = 100;
  double ecn_kmax_kb = 400;
  double ecn_pmax = 0.2;
  bool no_ecn = false;
  int mss = 4096;
  double stagger_us = 0;
  double sample_us = 10;
  double rate_window_us = 100;
  uint64_t seed = 1;
  std::string scenario;
  std::string out_dir = "out/cc";
  std::string json_path;
  bool no_plot = false;
};

struct Preset {
  std::string label;  // file-safe, unique: names the outputs
  cc::CcConfig config;
};

constexpr size_t kMaxPlottedFlows = 16;

sim::FluidConfig model_from(const CcOptions& o) {
  sim::FluidConfig m;
  m.flows = o.flows;
  m.capacity_bps = gbps(o.capacity_gbps);
  m.base_rtt_ns = us(o.rtt_us);
  m.mss_bytes = static_cast<uint32_t>(o.mss);
  m.buffer_bytes = static_cast<uint64_t>(o.buffer_kb * 1024);
  m.ecn.enabled = !o.no_ecn;
  m.ecn.kmin_bytes = static_cast<uint64_t>(o.ecn_kmin_kb * 1024);
  m.ecn.kmax_bytes = static_cast<uint64_t>(o.ecn_kmax_kb * 1024);
  m.ecn.pmax = o.ecn_pmax;
  m.duration_ns = static_cast<TimeNs>(std::llround(o.duration_s * 1e9));
  m.start_stagger_ns = us(o.stagger_us);
  m.sample_interval_ns = us(o.sample_us);
  m.rate_window_ns = us(o.rate_window_us);
  m.seed = o.seed;
  return m;
}

std::string file_safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s.empty() ? "preset" : s;
}

// Presets named on the command line (default: every built-in), loaded and labelled.
Result<std::vector<Preset>> resolve_presets(const std::vector<std::string>& args) {
  std::vector<std::string> names = args.empty() ? cc::builtin_cc_config_names() : args;
  if (names.empty()) return make_error("no congestion-control presets are built in; name a file with --cc");
  std::vector<Preset> out;
  for (const std::string& name : names) {
    Result<cc::CcConfig> config = cc::resolve_cc_config(name);
    if (!config) return config.error();
    for (const std::string& unread : cc::unread_settings(*config))
      fmt::print(stderr, "megascale cc: warning: {}: {}\n", name, unread);
    std::error_code ec;
    std::string label = file_safe(fs::is_regular_file(name, ec) ? fs::path(name).stem().string() : name);
    const std::string base = label;
    for (int n = 2; std::any_of(out.begin(), out.end(), [&](const Preset& p) { return p.label == label; });
         ++n)
      label = fmt::format("{}-{}", base, n);
    out.push_back({label, std::move(*config)});
  }
  return out;
}

std::string window_text(double bytes) {
  return bytes < sim::kUnboundedWindowBytes ? fmt::format("{:.1f}", bytes / 1024) : "-";
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out) return make_error(fmt::format("cannot write {}", path));
  return {};
}

// One progress line on a terminal, rewritten in place; one line per preset otherwise.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(fileno(stderr)) != 0) {}
  sim::ProgressFn start(size_t index, const std::string& label) {
    if (!tty_) {
      fmt::print(stderr, "megascale cc: running {} ({}/{})\n", label, index + 1, total_);
      return {};
    }
    return [this, index, label](double fraction) {
      fmt::print(stderr, "\r  running {} ({}/{}) {:3.0f}%", label, index + 1, total_, fraction * 100);
      std::fflush(stderr);
    };
  }
  void done() const {
    if (tty_) fmt::print(stderr, "\r\033[K");
  }

 private:
  size_t total_;
  bool tty_;
};

// Draws the PNG; says once per run why it could not. True when the PNG was drawn.
bool plot_or_note(const PlotSpec& spec, bool& noted) {
  Status s = render_png(spec);
  if (!s && !noted) {
    fmt::print(stderr, "megascale cc: no PNG plots: {}\n", s.error().message);
    noted = true;
  }
  return static_cast<bool>(s);
}

// A queue of `bytes` drained at the bottleneck's rate, in us: where a byte threshold sits on the delay axis.
double drain_us(double bytes, const sim::FluidConfig& m) {
  return bytes * 8 / m.capacity_bps * 1e6;
}

PlotSpec fluid_plot(const Preset& p, const sim::FluidResult& r, const sim::FluidConfig& m,
                    const std::string& csv, const std::string& png) {
  PlotSpec spec;
  spec.title = fmt::format(
      "{} ({}): {} flows into {:g} Gb/s, base RTT {:g} us, buffer {:g} KB, {}", p.label,
      cc::to_string(p.config.kind), m.flows, m.capacity_bps / 1e9, static_cast<double>(m.base_rtt_ns) / 1e3,
      static_cast<double>(m.buffer_bytes) / 1024,
      m.ecn.enabled ? fmt::format("ECN {:g}-{:g} KB", m.ecn.kmin_bytes / 1024.0, m.ecn.kmax_bytes / 1024.0)
                    : std::string("no ECN"));
  spec.csv_path = csv;
  spec.png_path = png;
  const size_t shown = std::min(kMaxPlottedFlows, r.series.flows.size());
  const std::string which = shown < r.series.flows.size()
                                ? fmt::format("first {} of {} flows", shown, r.series.flows.size())
                                : "each flow";
  const bool unbounded = !r.series.flows.empty() && !r.series.flows[0].cwnd_bytes.empty() &&
                         r.series.flows[0].cwnd_bytes.back() >= sim::kUnboundedWindowBytes;
  PlotPanel rate, window, queue;
  const double capacity_gbps = m.capacity_bps / 1e9;
  rate.title = fmt::format("sending rate, {}", which);
  rate.ylabel = "rate (Gb/s)";
  rate.hlines.push_back({capacity_gbps / m.flows,
                         m.flows == 1 ? fmt::format("line rate {:g} Gb/s", capacity_gbps)
                                      : fmt::format("fair share {:.3g} Gb/s", capacity_gbps / m.flows)});
  window.title = fmt::format(
      "{}, {}", unbounded ? "bytes in flight (rate-based: no window)" : "congestion window", which);
  window.ylabel = unbounded ? "in flight (KB)" : "cwnd (KB)";
  const double bdp_share_kb = m.capacity_bps / 8 * static_cast<double>(m.base_rtt_ns) / 1e9 / m.flows / 1024;
  window.hlines.push_back({bdp_share_kb, fmt::format("BDP / flows {:.3g} KB", bdp_share_kb)});
  queue.title = "bottleneck queue";
  queue.ylabel = "queue delay (us)";
  queue.series = {{"queue delay", 3}};
  if (m.ecn.enabled) {
    queue.hlines.push_back({drain_us(static_cast<double>(m.ecn.kmin_bytes), m),
                            fmt::format("Kmin {:g} KB ({:.3g} us)", m.ecn.kmin_bytes / 1024.0,
                                        drain_us(static_cast<double>(m.ecn.kmin_bytes), m))});
    queue.hlines.push_back({drain_us(static_cast<double>(m.ecn.kmax_bytes), m),
                            fmt::format("Kmax {:g} KB ({:.3g} us)", m.ecn.kmax_bytes / 1024.0,
                                        drain_us(static_cast<double>(m.ecn.kmax_bytes), m))});
  }
  queue.hlines.push_back({drain_us(static_cast<double>(m.buffer_bytes), m),
                          fmt::format("buffer {:g} KB (drops)", m.buffer_bytes / 1024.0)});
  for (size_t f = 0; f < shown; ++f) {
    const int col = sim::fluid_csv_flow_column(static_cast<int>(f));
    rate.series.push_back({fmt::format("flow {}", f), col});
    window.series.push_back({fmt::format("flow {}", f), unbounded ? col + 2 : col + 1});
  }
  spec.panels = {rate, window, queue};
  return spec;
}

int write_json_or_say(const std::string& path, const json& doc) {
  if (path.empty()) return kExitOk;
  if (Status s = vocab::write_json(path, doc); !s) {
    fmt::print(stderr, "megascale cc: {}\n", s.error().message);
    return kExitFailure;
  }
  return kExitOk;
}

int run_fluid_presets(const CcOptions& o, const std::vector<Preset>& presets) {
  const sim::FluidConfig model = model_from(o);
  if (Status s = sim::validate_fluid_config(model); !s) {
    fmt::print(stderr, "megascale cc: {}\n", s.error().message);
    return kExitUsage;
  }
  std::vector<sim::FluidResult> results;
  Progress progress(presets.size());
  for (size_t i = 0; i < presets.size(); ++i) {
    Result<sim::FluidResult> r =
        sim::run_fluid(model, presets[i].config, progress.start(i, presets[i].label));
    progress.done();
    if (!r) {
      fmt::print(stderr, "megascale cc: {}: {}\n", presets[i].label, r.error().message);
      return kExitUsage;
    }
    results.push_back(std::move(*r));
  }

  std::FILE* human = vocab::human_stream(o.json_path);
  fmt::print(human,
             "{} flows into a {:g} Gb/s bottleneck, base RTT {:g} us, MSS {} B, {:g} ms, buffer {:g} KB, ",
             o.flows, o.capacity_gbps, o.rtt_us, o.mss, o.duration_s * 1e3, o.buffer_kb);
  if (o.no_ecn)
    fmt::print(human, "no ECN\n\n");
  else
    fmt::print(human, "ECN {:g}-{:g} KB Pmax {:g}\n\n", o.ecn_kmin_kb, o.ecn_kmax_kb, o.ecn_pmax);
  fmt::print(human, "{:<16} {:<10} {:>12} {:>7} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8}\n", "preset",
             "controller", "goodput Gb/s", "% cap", "Jain", "q p50 us", "q p99 us", "ECN marks", "CNPs",
             "drops");
  for (size_t i = 0; i < presets.size(); ++i) {
    const sim::FluidSummary& s = results[i].summary;
    fmt::print(human, "{:<16} {:<10} {:>12.2f} {:>6.1f}% {:>6.3f} {:>10.2f} {:>10.2f} {:>10} {:>8} {:>8}\n",
               presets[i].label, cc::to_string(presets[i].config.kind), s.goodput_gbps,
               s.capacity_fraction * 100, s.jain, s.queue_delay_p50_us, s.queue_delay_p99_us, s.ecn_marks,
               s.cnps, s.drops);
  }
  fmt::print(human,
             "(goodput and Jain over the second half; queue delay as found by each segment; counts over the "
             "run)\n\n");

  json doc = vocab::json_document("cc");
  doc["mode"] = "fluid";
  doc["model"] = {{"flows", o.flows},
                  {"capacity_gbps", o.capacity_gbps},
                  {"base_rtt_us", o.rtt_us},
                  {"mss_bytes", o.mss},
                  {"duration_s", o.duration_s},
                  {"buffer_bytes", model.buffer_bytes},
                  {"ecn", !o.no_ecn},
                  {"ecn_kmin_bytes", model.ecn.kmin_bytes},
                  {"ecn_kmax_bytes", model.ecn.kmax_bytes},
                  {"ecn_pmax", o.ecn_pmax},
                  {"stagger_us", o.stagger_us},
                  {"sample_us", o.sample_us},
                  {"rate_window_us", o.rate_window_us},
                  {"seed", o.seed}};
  doc["presets"] = json::array();
  bool plot_noted = false;
  for (size_t i = 0; i < presets.size(); ++i) {
    const std::string csv = (fs::path(o.out_dir) / (presets[i].label + ".csv")).string();
    const std::string png = (fs::path(o.out_dir) / (presets[i].label + ".png")).string();
    if (Status s = sim::write_fluid_csv(results[i].series, csv); !s) {
      fmt::print(stderr, "megascale cc: {}\n", s.error().message);
      return kExitFailure;
    }
    bool have_png = false;
    if (!o.no_plot) {
      have_png = plot_or_note(fluid_plot(presets[i], results[i], model, csv, png), plot_noted);
    }
    fmt::print(human, "wrote {}{}\n", csv, have_png ? ", " + png : "");
    const sim::FluidSummary& s = results[i].summary;
    json flows = json::array();
    for (const sim::FlowSummary& f : s.flows)
      flows.push_back({{"mean_rate_gbps", f.mean_rate_gbps},
                       {"delivered_bytes", f.delivered_bytes},
                       {"ecn_marks", f.ecn_marks},
                       {"cnps", f.cnps},
                       {"drops", f.drops},
                       {"loss_episodes", f.loss_episodes}});
    doc["presets"].push_back({{"preset", presets[i].label},
                              {"name", presets[i].config.name},
                              {"controller", cc::to_string(presets[i].config.kind)},
                              {"goodput_gbps", s.goodput_gbps},
                              {"capacity_pct", s.capacity_fraction * 100},
                              {"jain", s.jain},
                              {"queue_delay_p50_us", s.queue_delay_p50_us},
                              {"queue_delay_p99_us", s.queue_delay_p99_us},
                              {"queue_delay_max_us", s.queue_delay_max_us},
                              {"queue_p50_bytes", s.queue_p50_bytes},
                              {"queue_p99_bytes", s.queue_p99_bytes},
                              {"queue_max_bytes", s.queue_max_bytes},
                              {"ecn_marks", s.ecn_marks},
                              {"cnps", s.cnps},
                              {"drops", s.drops},
                              {"flows", flows},
                              {"csv", csv},
                              {"png", have_png ? json(png) : json(nullptr)}});
  }
  return write_json_or_say(o.json_path, doc);
}

int run_scenario(const CcOptions& o, const std::vector<Preset>& presets) {
  Result<sim::Scenario> scenario = sim::load_scenario(o.scenario);
  if (!scenario) {
    fmt::print(stderr, "megascale cc: {}\n", scenario.error().message);
    return kExitUsage;
  }
  const std::string stem = file_safe(fs::path(o.scenario).stem().string());
  std::FILE* human = vocab::human_stream(o.json_path);
  fmt::print(human, "scenario {}: {}\n", o.scenario,
             scenario->description.empty() ? "(no description)" : scenario->description);
  json doc = vocab::json_document("cc");
  doc["mode"] = "scenario";
  doc["scenario"] = o.scenario;
  doc["description"] = scenario->description;
  doc["presets"] = json::array();
  bool plot_noted = false;
  for (const Preset& p : presets) {
    sim::ReplayOptions options;
    options.flow.line_rate_bps = gbps(o.capacity_gbps);
    options.flow.mss_bytes = static_cast<uint32_t>(o.mss);
    options.flow.base_rtt_ns = us(o.rtt_us);
    options.flow.hops = p.config.flow.hops;
    options.cnp_interval_ns = p.config.dcqcn.cnp_interval_ns;
    std::unique_ptr<cc::Controller> controller = cc::make_controller(p.config, options.flow);
    const std::vector<sim::ReplayRow> rows = sim::replay(*scenario, *controller, options);

    fmt::print(human, "\n{} ({})\n{:>10}  {:<24} {:>10} {:>8} {:>10} {:>10} {:>7}\n", p.label,
               cc::to_string(p.config.kind), "t_us", "event", "cwnd KB", "pkts", "rate Gb/s", "target us",
               "alpha");
    const std::string csv = (fs::path(o.out_dir) / fmt::format("{}-{}.csv", stem, p.label)).string();
    std::string text = "t_us,event,cwnd_kb,rate_gbps,target_delay_us,alpha,target_rate_gbps\n";
    json jrows = json::array();
    bool any_window = false, any_target_rate = false, any_target_delay = false, any_alpha = false;
    for (const sim::ReplayRow& r : rows) {
      const cc::ControllerState& s = r.state;
      const bool bounded = s.cwnd_bytes < sim::kUnboundedWindowBytes;
      any_window |= bounded;
      any_target_rate |= s.target_rate_bps > 0;
      any_target_delay |= s.target_delay_ns > 0;
      any_alpha |= s.alpha != 0;
      fmt::print(human, "{:>10.1f}  {:<24} {:>10} {:>8} {:>10.3f} {:>10} {:>7.4f}\n",
                 static_cast<double>(r.t_ns) / 1e3, r.event, window_text(s.cwnd_bytes),
                 bounded ? fmt::format("{:.3f}", s.cwnd_bytes / o.mss) : "-", s.pacing_rate_bps / 1e9,
                 s.target_delay_ns > 0 ? fmt::format("{:.1f}", s.target_delay_ns / 1e3) : "-", s.alpha);
      text += fmt::format("{:.3f},{},{},{:.6f},{:.3f},{:.6f},{:.6f}\n", static_cast<double>(r.t_ns) / 1e3,
                          r.event, bounded ? fmt::format("{:.3f}", s.cwnd_bytes / 1024) : "",
                          s.pacing_rate_bps / 1e9, s.target_delay_ns / 1e3, s.alpha, s.target_rate_bps / 1e9);
      jrows.push_back({{"t_us", static_cast<double>(r.t_ns) / 1e3},
                       {"event", r.event},
                       {"cnp_sent", r.cnp_sent},
                       {"cwnd_bytes", bounded ? json(s.cwnd_bytes) : json(nullptr)},
                       {"pacing_rate_gbps", s.pacing_rate_bps / 1e9},
                       {"target_rate_gbps", s.target_rate_bps / 1e9},
                       {"target_delay_us", s.target_delay_ns / 1e3},
                       {"alpha", s.alpha},
                       {"decreases", s.decreases}});
    }
    if (Status s = write_text(csv, text); !s) {
      fmt::print(stderr, "megascale cc: {}\n", s.error().message);
      return kExitFailure;
    }
    const std::string png = (fs::path(o.out_dir) / fmt::format("{}-{}.png", stem, p.label)).string();
    bool have_png = false;
    if (!o.no_plot) {
      // The controller's state holds from one event to the next: drawn as steps.
      const auto held = [](const char* title, int column) { return PlotSeries{title, column, 1, true}; };
      PlotSpec spec;
      spec.title =
          fmt::format("scenario {} under {} ({}): state after each event, {:g} Gb/s line, base RTT {:g} us",
                      stem, p.label, cc::to_string(p.config.kind), o.capacity_gbps, o.rtt_us);
      spec.csv_path = csv;
      spec.png_path = png;
      spec.height_px_per_panel = 260;
      PlotPanel rate{.ylabel = "rate (Gb/s)", .series = {held("pacing rate", 4)}};
      if (any_target_rate) rate.series.push_back(held("target rate", 7));
      rate.hlines.push_back({o.capacity_gbps, fmt::format("line rate {:g} Gb/s", o.capacity_gbps)});
      spec.panels.push_back(rate);
      if (any_window) spec.panels.push_back({.ylabel = "cwnd (KB)", .series = {held("cwnd", 3)}});
      if (any_target_delay)
        spec.panels.push_back({.ylabel = "target delay (us)", .series = {held("target delay", 5)}});
      if (any_alpha) spec.panels.push_back({.ylabel = "alpha", .series = {held("alpha", 6)}});
      have_png = plot_or_note(spec, plot_noted);
    }
    fmt::print(human, "wrote {}{}\n", csv, have_png ? ", " + png : "");
    doc["presets"].push_back({{"preset", p.label},
                              {"controller", cc::to_string(p.config.kind)},
                              {"rows", jrows},
                              {"csv", csv},
                              {"png", have_png ? json(png) : json(nullptr)}});
  }
  return write_json_or_say(o.json_path, doc);
}

int run_cc(const CcOptions& o) {
  Result<std::vector<Preset>> presets = resolve_presets(o.presets);
  if (!presets) {
    fmt::print(stderr, "megascale cc: {}\n", presets.error().message);
    return kExitUsage;
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) {
    fmt::print(stderr, "megascale cc: cannot create output directory {}: {}\n", o.out_dir, ec.message());
    return kExitFailure;
  }
  return o.scenario.empty() ? run_fluid_presets(o, *presets) : run_scenario(o, *presets);
}

}  // namespace

void add_cc_command(CLI::App& app) {
  auto o = std::make_shared<CcOptions>();
  CLI::App* cmd = app.add_subcommand(
      "cc",
      "See what a congestion-control preset does: N flows through one bottleneck, or a scripted scenario");
  vocab::cc(cmd, o->presets, "Preset name or YAML file, repeatable (default: every built-in preset)");
  cmd->add_option("--flows", o->flows, "Flows sharing the bottleneck")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--capacity-gbps", o->capacity_gbps, "Bottleneck capacity, Gb/s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--rtt-us", o->rtt_us, "Base RTT through an empty queue, us")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  vocab::duration(cmd, vocab::kDurationFlag, o->duration_s, "Simulated time (20ms by default)")
      ->check(CLI::Range(1e-6, 100.0, "between 1us and 100s"));
  vocab::renamed(cmd, "--duration-ms", "-D,--duration (e.g. --duration 20ms)");
  cmd->add_option("--buffer-kb", o->buffer_kb, "Bottleneck buffer, KB (overflow drops)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--ecn-kmin-kb", o->ecn_kmin_kb, "RED/ECN Kmin, KB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--ecn-kmax-kb", o->ecn_kmax_kb, "RED/ECN Kmax, KB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--ecn-pmax", o->ecn_pmax, "RED/ECN marking probability at Kmax")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--no-ecn", o->no_ecn, "Do not mark ECN at the bottleneck");
  cmd->add_option("--mss", o->mss, "Segment payload, bytes")
      ->check(CLI::Range(64, 1000000))
      ->capture_default_str();
  cmd->add_option("--stagger-us", o->stagger_us, "Flow i starts at i * this, us")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--sample-us", o->sample_us, "Time-series sampling period, us")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--rate-window-us", o->rate_window_us, "Plotted rates average over this, us")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  vocab::seed(cmd, o->seed, "Seed of the ECN marking PRNG")->capture_default_str();
  cmd->add_option("--scenario", o->scenario,
                  "Replay this scripted scenario (YAML) instead of the fluid model");
  vocab::out_dir(cmd, o->out_dir, "Directory for the CSV and PNG files")->capture_default_str();
  vocab::json(cmd, o->json_path);
  cmd->add_flag("--no-plot", o->no_plot, "Write CSV only, no PNG");
  cmd->callback([o] { exit_code() = run_cc(*o); });
}

}  // namespace megascale::cli
