// Running a scenario (scenario.h): the fabric and flows a parsed SimScenario describes, driven to the
// end, and the summary of the run. The YAML reader is scenario_parse.cpp.
#include "megascale/sim/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "megascale/common/percentile.h"
#include "megascale/congestion/config.h"
#include "megascale/sim/clos.h"
#include "megascale/sim/faults.h"
#include "megascale/topology/paths.h"

namespace megascale::sim {

Result<cc::CcConfig> scenario_cc_config(const SimScenario& s, const std::string& controller) {
  auto base = cc::resolve_cc_config(controller);
  if (!base)
    return make_error(fmt::format("{}: controller {}: {}", s.source, controller, base.error().message));
  if (s.cc_overrides.empty()) return base;
  // The preset's per-key environment overrides do the work: the same key paths, units and checks.
  std::vector<std::pair<std::string, std::string>> vars;
  for (const auto& [key, value] : s.cc_overrides) {
    std::string var = "MEGASCALE_CC_";
    for (char c : key) var += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    vars.emplace_back(var, value);
  }
  auto lookup = [&vars](const char* name) -> const char* {  // a key given twice: the later one wins
    for (auto it = vars.rbegin(); it != vars.rend(); ++it)
      if (it->first == name) return it->second.c_str();
    return nullptr;
  };
  std::vector<std::string> applied;
  // Where override i came from, for its errors: the --set that gave it, or the file.
  auto where = [&s](size_t i) {
    return i < s.cc_override_origins.size() && !s.cc_override_origins[i].empty() ? s.cc_override_origins[i]
                                                                                 : s.source;
  };
  auto cfg = cc::apply_cc_env_overrides(*base, lookup, &applied);
  if (!cfg) {
    for (size_t i = vars.size();
         i-- > 0;) {  // the override the message names (the later of a key given twice)
      if (cfg.error().message.find(vars[i].first + "=") != std::string::npos)
        return make_error(fmt::format("{}: cc: {}", where(i), cfg.error().message));
    }
    return make_error(fmt::format("{}: cc: {}", s.source, cfg.error().message));
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    const bool used = std::any_of(applied.begin(), applied.end(),
                                  [&](const std::string& a) { return a.rfind(vars[i].first + "=", 0) == 0; });
    if (!used)
      return make_error(fmt::format("{}: cc: {}: not a key of the {} preset", where(i),
                                    s.cc_overrides[i].first, controller));
  }
  return cfg;
}

Result<ScenarioRun> run_sim_scenario(const SimScenario& s, const std::string& controller,
                                     const RunProgress* progress) {
  ScenarioRun run;
  run.scenario = s;
  run.controller = controller.empty() ? s.controller : controller;
  auto cc = scenario_cc_config(s, run.controller);
  if (!cc) return cc.error();
  for (const std::string& unread : cc::unread_settings(*cc))
    run.warnings.push_back(fmt::format("{}: controller {}: {}", s.source, run.controller, unread));
  FabricConfig fc;
  fc.engine.cc = *cc;
  fc.engine.lanes = s.lanes;
  fc.engine.seed = s.seed;
  fc.engine.dupthresh = s.dupthresh;
  fc.engine.reo_wnd_ns = s.reorder_window_ns;
  fc.engine.tail_probe = s.tail_probe;
  fc.host_rate_bps = s.host_rate_bps;
  fc.fabric_rate_bps = s.host_rate_bps;
  fc.link_delay_ps = s.link_delay_ps;
  fc.switch_buffer_bytes = s.buffer_bytes;
  fc.red = s.red;
  fc.pfc = s.pfc;
  fc.shared_buffer = s.shared_buffer;
  fc.priorities = s.priorities;
  fc.seed = s.seed;
  fc.partitions = s.threads;
  if (s.threads > 1 && !s.link_events.empty())
    return make_error(fmt::format("{}: threads {}: link_events need threads: 1", s.source, s.threads));

  std::unique_ptr<Fabric> fabric;
  if (s.fabric == "star") {
    auto f = build_star(fc, s.star_hosts);
    if (!f) return f.error();
    fabric = std::move(*f);
  } else {
    auto model = topo::load_fabric(s.fabric);
    if (!model) return make_error(fmt::format("{}: fabric: {}", s.source, model.error().message));
    auto f = build_clos(fc, *model, ClosOptions{.ecmp = std::nullopt, .spray = s.spray});
    if (!f) return f.error();
    fabric = std::move(*f);
  }
  const auto hosts = static_cast<uint32_t>(fabric->host_count());
  run.hosts = hosts;
  run.switches = fabric->switch_count();
  run.host_rate_bps = fabric->config().host_rate_bps;

  auto built = scenario_flows(s, hosts, run.host_rate_bps, &run.group_ranks);
  if (!built) return built.error();
  std::vector<FlowSpec> flows = std::move(*built);

  // Ideal FCT: alone on the fabric (see scenario.h).
  const ClosInfo* clos = fabric->clos();
  const uint64_t seg = fc.engine.segment_bytes;
  const uint64_t frame = seg + 72 + kFrameOverheadBytes;
  for (const FlowSpec& f : flows) {
    size_t links = 2;
    if (clos != nullptr) {
      auto paths = topo::shortest_paths(clos->model, f.src, f.dst);
      if (paths) links = paths->length();
    }
    const uint64_t frames = (f.bytes + seg - 1) / seg;
    const TimePs ser = serialization_ps(frame, run.host_rate_bps);
    run.ideal_fct_ps.push_back(frames * ser + links * s.link_delay_ps + (links - 1) * ser);
  }

  // Link flaps (faults.h), scheduled from the start of the sends.
  std::vector<LinkStateChange> changes;
  for (const SimScenario::LinkEvent& e : s.link_events) {
    auto link = parse_fabric_link(clos->model, e.link);
    if (!link)
      return make_error(fmt::format("{}:{}: link_events: {}", s.source, e.line, link.error().message));
    changes.push_back(LinkStateChange{.at_ps = e.at_ps, .link = *link, .up = e.up});
  }
  LinkFaults faults(*fabric, std::move(changes), s.reroute);
  RunOptions options{.progress = progress,
                     .on_start = [&faults](TimePs start) { faults.start(start); },
                     .connections_per_pair = s.connections_per_pair,
                     .series_interval_ps = s.series_interval_ps};
  auto r = run_flows(*fabric, flows, s.time_limit_ps, options);
  if (!r) return s.threads > 1 ? make_error(fmt::format("{}: {}", s.source, r.error().message)) : r.error();
  run.result = std::move(*r);
  return run;
}

ScenarioSummary summarize_run(const ScenarioRun& run) {
  const RunResult& r = run.result;
  ScenarioSummary s;
  s.flows = r.flows.size();
  s.completed = r.completed;
  s.failed = r.failed;
  s.link_down_drops = r.link_down_drops;
  std::vector<double> fct, slow;
  for (size_t i = 0; i < r.flows.size(); ++i) {
    if (!r.flows[i].completed) continue;
    fct.push_back(us_from_ps(r.flows[i].fct_ps));
    slow.push_back(static_cast<double>(r.flows[i].fct_ps) / static_cast<double>(run.ideal_fct_ps[i]));
    s.rate_fraction_mean += 1.0 / slow.back();
  }
  if (!r.flows.empty()) s.rate_fraction_mean /= static_cast<double>(r.flows.size());
  double weighted = 0, samples = 0;
  for (const FlowResult& f : r.flows) {
    weighted += us_from_ps(f.rtt_p50_ps) * static_cast<double>(f.rtt_samples);
    samples += static_cast<double>(f.rtt_samples);
    s.rtt_p99_max_us = std::max(s.rtt_p99_max_us, us_from_ps(f.rtt_p99_ps));
  }
  s.rtt_p50_mean_us = samples > 0 ? weighted / samples : 0;
  s.fct_p50_us = percentile(fct, 0.5);
  s.fct_p95_us = percentile(fct, 0.95);
  s.fct_p99_us = percentile(fct, 0.99);
  s.fct_max_us = percentile(fct, 1.0);
  s.slowdown_p50 = percentile(slow, 0.5);
  s.slowdown_p99 = percentile(slow, 0.99);
  s.goodput_gbps = r.goodput_bps / 1e9;
  s.drops = r.drops;
  s.ecn_marks = r.ecn_marks;
  s.pfc_pauses = r.pfc_pauses;
  s.pfc_paused_us = us_from_ps(r.pfc_paused_ps);
  s.retransmits = r.retransmits;
  s.timeouts = r.timeouts;
  s.events = r.events;
  s.simulated_us = us_from_ps(r.simulated_ps);
  summarize_results(run, s);
  return s;
}

std::string format_summary(const ScenarioSummary& s) {
  return format_totals(s) + format_results(s);
}

std::string format_totals(const ScenarioSummary& s) {
  return fmt::format(
      "flows        {} completed of {}, {} failed\n"
      "FCT us       p50 {:.1f}  p95 {:.1f}  p99 {:.1f}  max {:.1f}\n"
      "slowdown     p50 {:.2f}  p99 {:.2f}  (FCT / alone on the fabric); mean rate {:.3f} of line rate\n"
      "goodput      {:.2f} Gbit/s   RTT: flows' p50, mean {:.1f} us; largest flow p99 {:.1f} us\n"
      "drops        {}   link-down losses {}   ECN marks {}   PFC pauses {} ({:.1f} us paused, summed over "
      "ports)\n"
      "retransmits  {}   timeouts {}\n"
      "events       {}   simulated {:.1f} us\n",
      s.completed, s.flows, s.failed, s.fct_p50_us, s.fct_p95_us, s.fct_p99_us, s.fct_max_us, s.slowdown_p50,
      s.slowdown_p99, s.rate_fraction_mean, s.goodput_gbps, s.rtt_p50_mean_us, s.rtt_p99_max_us, s.drops,
      s.link_down_drops, s.ecn_marks, s.pfc_pauses, s.pfc_paused_us, s.retransmits, s.timeouts, s.events,
      s.simulated_us);
}

}  // namespace megascale::sim
