// The scenario file's reader (scenario.h): YAML text to a checked SimScenario. Every error names the
// file, the line, the key and the value, and what the value must be.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "megascale/common/yaml_text.h"
#include "megascale/sim/scenario.h"
#include "megascale/topology/fabric.h"

namespace megascale::sim {
namespace {

using yaml::line_of;

std::string text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  std::ostringstream os;
  os << n;
  return os.str();
}

// A value put in by an override, and the override as the user wrote it, so that an error in it names
// the override instead of a line of the file.
struct SetValue {
  YAML::Node value;
  std::string origin;  // "--set workload.bytes=abc"
};

class Parser {
 public:
  Parser(std::string_view source, std::vector<SetValue> set_values)
      : source_(source), set_values_(std::move(set_values)) {}

  // The override that put `value` in the document ("--set KEY=VALUE"), or "" for the file's own text.
  std::string origin_of(const YAML::Node& value) const {
    for (const SetValue& sv : set_values_) {
      if (sv.value.is(value)) return sv.origin;
    }
    return "";
  }

  Error error(const YAML::Node& key, const YAML::Node& value, const std::string& what) const {
    for (const SetValue& sv : set_values_) {
      if (sv.value.is(value))
        return make_error(fmt::format("{}: {}: {}: {}", sv.origin, key.Scalar(), text(value), what));
    }
    return make_error(
        fmt::format("{}:{}: {}: {}: {}", source_, line_of(key), key.Scalar(), text(value), what));
  }

  Result<double> number(const YAML::Node& key, const YAML::Node& value, double min, double max) const {
    double v = 0;
    if (!value.IsScalar() || !YAML::convert<double>::decode(value, v) || !std::isfinite(v))
      return error(key, value, "must be a number");
    if (v < min || v > max) return error(key, value, fmt::format("must be in [{}, {}]", min, max));
    return v;
  }

  Result<uint64_t> whole(const YAML::Node& key, const YAML::Node& value, double min, double max) const {
    Result<double> v = number(key, value, min, max);
    if (!v) return v.error();
    if (std::floor(*v) != *v) return error(key, value, "must be a whole number");
    return static_cast<uint64_t>(*v);
  }

  Result<bool> flag(const YAML::Node& key, const YAML::Node& value) const {
    bool b = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, b))
      return error(key, value, "must be true or false");
    return b;
  }

  Result<std::string> word(const YAML::Node& key, const YAML::Node& value) const {
    if (!value.IsScalar() || value.Scalar().empty()) return error(key, value, "must be a non-empty string");
    return value.Scalar();
  }

  Status map_of(const YAML::Node& key, const YAML::Node& value) const {
    if (!value.IsMap()) return error(key, value, "must be a map");
    return Status{};
  }

  Status ecn(const YAML::Node& node, RedConfig& red) const {
    red.enabled = true;
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (k == "kmin_bytes" || k == "kmax_bytes") {
        auto v = whole(kv.first, kv.second, 0, 1e12);
        if (!v) return v.error();
        (k == "kmin_bytes" ? red.kmin_bytes : red.kmax_bytes) = *v;
      } else if (k == "pmax") {
        auto v = number(kv.first, kv.second, 0, 1);
        if (!v) return v.error();
        red.pmax = *v;
      } else {
        return error(kv.first, kv.second, "unknown key (kmin_bytes, kmax_bytes, pmax)");
      }
    }
    if (red.kmax_bytes <= red.kmin_bytes)
      return make_error(
          fmt::format("{}:{}: ecn: kmax_bytes must be above kmin_bytes", source_, line_of(node)));
    return Status{};
  }

  Status pfc(const YAML::Node& node, PfcConfig& pfc) const {
    pfc.enabled = true;
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (k == "enabled") {
        auto v = flag(kv.first, kv.second);
        if (!v) return v.error();
        pfc.enabled = *v;
      } else if (k == "xoff_bytes" || k == "xon_bytes" || k == "headroom_bytes") {
        auto v = whole(kv.first, kv.second, 0, 1e12);
        if (!v) return v.error();
        (k == "xoff_bytes" ? pfc.xoff_bytes : k == "xon_bytes" ? pfc.xon_bytes : pfc.headroom_bytes) = *v;
        // Dynamic threshold (pfc.h): dynamic, alpha, xon_offset_bytes.
      } else if (k == "dynamic") {
        auto v = flag(kv.first, kv.second);
        if (!v) return v.error();
        pfc.dynamic = *v;
      } else if (k == "alpha") {
        auto v = number(kv.first, kv.second, 1.0 / 1024, 64);
        if (!v) return v.error();
        pfc.alpha = *v;
      } else if (k == "xon_offset_bytes") {
        auto v = whole(kv.first, kv.second, 0, 1e12);
        if (!v) return v.error();
        pfc.xon_offset_bytes = *v;
      } else {
        return error(kv.first, kv.second,
                     "unknown key (enabled, xoff_bytes, xon_bytes, headroom_bytes, dynamic, alpha, "
                     "xon_offset_bytes)");
      }
    }
    if (!pfc.dynamic && pfc.xon_bytes >= pfc.xoff_bytes)
      return make_error(
          fmt::format("{}:{}: pfc: xon_bytes must be below xoff_bytes", source_, line_of(node)));
    return Status{};
  }

  Status switch_(const YAML::Node& node, SimScenario& s) const {
    int pfc_line = line_of(node);
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (k == "buffer_bytes") {
        auto v = whole(kv.first, kv.second, 1000, 1e12);
        if (!v) return v.error();
        s.buffer_bytes = *v;
      } else if (k == "ecn" || k == "pfc") {
        if (k == "pfc") pfc_line = line_of(kv.first);
        if (Status st = map_of(kv.first, kv.second); !st) return st;
        if (Status st = k == "ecn" ? ecn(kv.second, s.red) : pfc(kv.second, s.pfc); !st) return st;
        // Shared buffer and priorities (shared_buffer.h, queue.h).
      } else if (k == "shared_buffer_bytes") {
        auto v = whole(kv.first, kv.second, 10'000, 1e12);
        if (!v) return v.error();
        s.shared_buffer.bytes = *v;
      } else if (k == "alpha") {
        auto v = number(kv.first, kv.second, 1.0 / 1024, 64);
        if (!v) return v.error();
        s.shared_buffer.alpha = *v;
      } else if (k == "priorities") {
        auto v = whole(kv.first, kv.second, 1, 2);
        if (!v) return v.error();
        s.priorities = static_cast<uint8_t>(*v);
      } else {
        return error(kv.first, kv.second,
                     "unknown key (buffer_bytes, shared_buffer_bytes, alpha, priorities, ecn, pfc)");
      }
    }
    if (s.pfc.enabled && s.pfc.dynamic && s.shared_buffer.bytes == 0)
      return make_error(
          fmt::format("{}:{}: pfc: dynamic: true needs switch.shared_buffer_bytes (the "
                      "threshold is alpha x the free shared buffer)",
                      source_, pfc_line));
    return Status{};
  }

  // The hosts' engines' loss detection (EngineConfig::dupthresh, reo_wnd_ns, tail_probe). Per-packet spraying
  // reorders a lane's packets, which the per-lane rules otherwise take for loss.
  Status loss_detection(const YAML::Node& node, SimScenario& s) const {
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (k == "dupthresh") {
        auto v = whole(kv.first, kv.second, 1, 4096);
        if (!v) return v.error();
        s.dupthresh = static_cast<uint32_t>(*v);
      } else if (k == "reorder_window_us") {
        auto v = number(kv.first, kv.second, 0, 1e6);
        if (!v) return v.error();
        s.reorder_window_ns = static_cast<TimeNs>(std::llround(*v * 1e3));
      } else if (k == "tail_probe") {
        auto v = flag(kv.first, kv.second);
        if (!v) return v.error();
        s.tail_probe = *v;
      } else {
        return error(kv.first, kv.second, "unknown key (dupthresh, reorder_window_us, tail_probe)");
      }
    }
    return Status{};
  }

  Status workload(const YAML::Node& node, SimScenario& s) const {
    bool have_kind = false;
    s.workload_line = line_of(node);
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (k == "kind") {
        const std::string v = kv.second.IsScalar() ? kv.second.Scalar() : "";
        if (v == "incast") {
          s.workload = SimScenario::Workload::incast;
        } else if (v == "permutation") {
          s.workload = SimScenario::Workload::permutation;
        } else if (v == "all-to-all") {
          s.workload = SimScenario::Workload::all_to_all;
        } else if (v == "collective") {
          s.workload = SimScenario::Workload::collective;
        } else if (v == "poisson") {
          s.workload = SimScenario::Workload::poisson;
        } else {
          return error(kv.first, kv.second, "must be incast, permutation, all-to-all, collective or poisson");
        }
        have_kind = true;
      } else if (k == "senders" || k == "receiver") {
        auto v = whole(kv.first, kv.second, k == "senders" ? 1 : 0, 1e7);
        if (!v) return v.error();
        (k == "senders" ? s.senders : s.receiver) = static_cast<uint32_t>(*v);
      } else if (k == "flows_per_sender") {
        auto v = whole(kv.first, kv.second, 1, 1e5);
        if (!v) return v.error();
        s.flows_per_sender = static_cast<uint32_t>(*v);
      } else if (k == "start_spread_us") {
        auto v = number(kv.first, kv.second, 0, 1e7);
        if (!v) return v.error();
        s.start_spread_ps = static_cast<TimePs>(*v * static_cast<double>(kPsPerUs));
      } else if (k == "bytes") {
        auto v = whole(kv.first, kv.second, 1, 1e13);
        if (!v) return v.error();
        s.bytes = *v;
      } else if (Result<bool> more = workload_more(kv.first, kv.second, s); !more) {
        return more.error();
      } else if (!*more) {
        return error(kv.first, kv.second,
                     "unknown key (kind, senders, receiver, flows_per_sender, start_spread_us, bytes, hosts, "
                     "op, algorithm, group, tp, pp, dp, "
                     "chunks, phases, cdf, load, duration_ms, connections_per_pair)");
      }
    }
    if (!have_kind)
      return make_error(fmt::format("{}:{}: workload: kind is missing", source_, line_of(node)));
    if (s.workload != SimScenario::Workload::incast && s.start_spread_ps > 0)
      return make_error(fmt::format("{}:{}: workload: start_spread_us: {}: only an incast's flows are spread",
                                    source_, line_of(node),
                                    static_cast<double>(s.start_spread_ps) / static_cast<double>(kPsPerUs)));
    if (s.workload == SimScenario::Workload::incast && s.senders == 0)
      return make_error(fmt::format("{}:{}: workload: an incast needs senders", source_, line_of(node)));
    if (s.workload == SimScenario::Workload::poisson && s.cdf.empty())
      return make_error(fmt::format("{}:{}: workload: poisson needs a cdf file", source_, line_of(node)));
    if (s.workload == SimScenario::Workload::collective && s.algorithm != CollectiveAlgorithm::ring &&
        s.op != CollectiveOp::all_reduce)
      return make_error(fmt::format("{}:{}: workload: tree algorithms do all-reduce only, not {}", source_,
                                    line_of(node), to_string(s.op)));
    return Status{};
  }

  // The keys of all-to-all, collective and poisson workloads (collective.h, flow_cdf.h): true when
  // `key` is one of them.
  Result<bool> workload_more(const YAML::Node& key, const YAML::Node& value, SimScenario& s) const {
    const std::string k = key.Scalar();
    const std::string v = value.IsScalar() ? value.Scalar() : "";
    if (k == "hosts" || k == "tp" || k == "pp" || k == "dp" || k == "chunks" || k == "connections_per_pair") {
      auto n = whole(key, value, k == "hosts" ? 2 : 1, k == "connections_per_pair" ? 1024 : 1e7);
      if (!n) return n.error();
      const auto u = static_cast<uint32_t>(*n);
      if (k == "hosts") s.workload_hosts = u;
      if (k == "tp") s.parallel.tp = u;
      if (k == "pp") s.parallel.pp = u;
      if (k == "dp") s.parallel.dp = u;
      if (k == "chunks") s.chunks = u;
      if (k == "connections_per_pair") s.connections_per_pair = u;
    } else if (k == "op") {
      if (v == "all-reduce") {
        s.op = CollectiveOp::all_reduce;
      } else if (v == "all-gather") {
        s.op = CollectiveOp::all_gather;
      } else if (v == "reduce-scatter") {
        s.op = CollectiveOp::reduce_scatter;
      } else if (v == "send-recv") {
        s.op = CollectiveOp::send_recv;
      } else {
        return error(key, value, "must be all-reduce, all-gather, reduce-scatter or send-recv");
      }
    } else if (k == "algorithm") {
      if (v == "ring") {
        s.algorithm = CollectiveAlgorithm::ring;
      } else if (v == "tree") {
        s.algorithm = CollectiveAlgorithm::tree;
      } else if (v == "double-tree") {
        s.algorithm = CollectiveAlgorithm::double_tree;
      } else {
        return error(key, value, "must be ring, tree or double-tree");
      }
    } else if (k == "group") {
      if (v == "tp") {
        s.group = ParallelGroup::tp;
      } else if (v == "pp") {
        s.group = ParallelGroup::pp;
      } else if (v == "dp") {
        s.group = ParallelGroup::dp;
      } else if (v == "all") {
        s.group = ParallelGroup::all;
      } else {
        return error(key, value, "must be tp, pp, dp or all");
      }
    } else if (k == "phases") {
      if (Status st = phases(key, value, s); !st) return st.error();
    } else if (k == "cdf") {
      auto w = word(key, value);
      if (!w) return w.error();
      std::filesystem::path p(*w);
      if (p.is_relative()) p = std::filesystem::path(source_).parent_path() / p;
      if (!exists(p)) return error(key, value, fmt::format("no such file ({})", p.string()));
      s.cdf = p.string();
    } else if (k == "load") {
      auto x = number(key, value, 0.001, 1);
      if (!x) return x.error();
      s.load = *x;
    } else if (k == "duration_ms") {
      auto x = number(key, value, 0.001, 1e6);
      if (!x) return x.error();
      s.duration_ps = static_cast<TimePs>(*x * 1e9);
    } else {
      return false;
    }
    return true;
  }

  // phases: [{group, op, algorithm, bytes, chunks}, ...] (SimScenario::Phase)
  Status phases(const YAML::Node& key, const YAML::Node& value, SimScenario& s) const {
    if (!value.IsSequence() || value.size() == 0)
      return error(key, value, "must be a list of {group, op, algorithm, bytes, chunks}");
    for (const auto& entry : value) {
      if (!entry.IsMap())
        return error(key, entry, "each phase must be a map {group, op, algorithm, bytes, chunks}");
      SimScenario t;  // the phase's keys parse as the workload's own
      bool have_bytes = false;
      for (const auto& kv : entry) {
        const std::string k = kv.first.Scalar();
        if (k == "bytes") {
          auto v = whole(kv.first, kv.second, 1, 1e13);
          if (!v) return v.error();
          t.bytes = *v;
          have_bytes = true;
        } else if (k == "group" || k == "op" || k == "algorithm" || k == "chunks") {
          if (auto r = workload_more(kv.first, kv.second, t); !r) return r.error();
        } else {
          return error(kv.first, kv.second, "unknown key (group, op, algorithm, bytes, chunks)");
        }
      }
      const int line = line_of(entry);
      if (!have_bytes) return make_error(fmt::format("{}:{}: phases: a phase needs bytes", source_, line));
      if (t.algorithm != CollectiveAlgorithm::ring && t.op != CollectiveOp::all_reduce)
        return make_error(fmt::format("{}:{}: phases: tree algorithms do all-reduce only, not {}", source_,
                                      line, to_string(t.op)));
      s.phases.push_back(SimScenario::Phase{
          .group = t.group, .op = t.op, .algorithm = t.algorithm, .bytes = t.bytes, .chunks = t.chunks});
    }
    return Status{};
  }

  // results: {interval_us, size_bins_bytes}
  Status results(const YAML::Node& node, SimScenario& s) const {
    for (const auto& kv : node) {
      const std::string k = kv.first.Scalar();
      if (k == "interval_us") {
        auto v = number(kv.first, kv.second, 0, 1e9);
        if (!v) return v.error();
        s.series_interval_ps = static_cast<TimePs>(std::llround(*v * 1e6));
      } else if (k == "size_bins_bytes") {
        if (!kv.second.IsSequence() || kv.second.size() == 0)
          return error(kv.first, kv.second, "must be a list of ascending sizes in bytes");
        s.size_bins_bytes.clear();
        for (const auto& e : kv.second) {
          auto v = whole(kv.first, e, 1, 1e15);
          if (!v) return v.error();
          if (!s.size_bins_bytes.empty() && *v <= s.size_bins_bytes.back())
            return error(kv.first, kv.second, "sizes must ascend");
          s.size_bins_bytes.push_back(*v);
        }
      } else {
        return error(kv.first, kv.second, "unknown key (interval_us, size_bins_bytes)");
      }
    }
    return Status{};
  }

  // Flattens a map of overrides into (dotted key, value) pairs. Preset keys are at most three deep
  // (hybrid.swift.beta): deeper maps are refused, and so is a map with more keys than kMaxCcKeys in
  // all, since an alias can make a map contain itself (`cc: &c {rto: *c}`) or repeat another any number
  // of times, which would recurse without end or cost time exponential in the text.
  static constexpr int kMaxCcDepth = 3;
  static constexpr size_t kMaxCcKeys = 1000;
  Status cc(const YAML::Node& node, const std::string& prefix, SimScenario& s, int depth = 1,
            size_t* keys = nullptr, std::string origin = "") const {
    size_t count = 0;
    if (keys == nullptr) keys = &count;
    if (origin.empty()) origin = origin_of(node);
    for (const auto& kv : node) {
      const std::string k = prefix + kv.first.Scalar();
      if (++*keys > kMaxCcKeys)
        return error(kv.first, kv.second, fmt::format("cc: more than {} keys", kMaxCcKeys));
      if (kv.second.IsMap()) {
        if (depth >= kMaxCcDepth)
          return error(kv.first, kv.second, fmt::format("cc: keys nest at most {} deep", kMaxCcDepth));
        if (Status st = cc(kv.second, k + ".", s, depth + 1, keys, origin); !st) return st;
      } else if (kv.second.IsScalar() && !kv.second.Scalar().empty()) {
        s.cc_overrides.emplace_back(k, kv.second.Scalar());
        s.cc_override_origins.push_back(origin.empty() ? origin_of(kv.second) : origin);
      } else {
        return error(kv.first, kv.second, "must be a value or a map");
      }
    }
    return Status{};
  }

  Status link_events(const YAML::Node& key, const YAML::Node& node, SimScenario& s) const {
    if (!node.IsSequence()) return error(key, node, "must be a list of {at_us, link, state}");
    for (const auto& ev : node) {
      if (!ev.IsMap()) return error(key, ev, "each event must be a map {at_us, link, state}");
      SimScenario::LinkEvent e;
      e.line = line_of(ev);
      bool have_at = false, have_link = false, have_state = false;
      for (const auto& kv : ev) {
        const std::string k = kv.first.Scalar();
        if (k == "at_us") {
          auto v = number(kv.first, kv.second, 0, 1e9);
          if (!v) return v.error();
          e.at_ps = static_cast<TimePs>(std::llround(*v * 1e6));
          have_at = true;
        } else if (k == "link") {
          auto v = word(kv.first, kv.second);
          if (!v) return v.error();
          e.link = *v;
          have_link = true;
        } else if (k == "state") {
          const std::string v = kv.second.IsScalar() ? kv.second.Scalar() : "";
          if (v != "up" && v != "down") return error(kv.first, kv.second, "must be up or down");
          e.up = v == "up";
          have_state = true;
        } else {
          return error(kv.first, kv.second, "unknown key (at_us, link, state)");
        }
      }
      if (!have_at || !have_link || !have_state)
        return make_error(
            fmt::format("{}:{}: link_events: an event needs at_us, link and state", source_, e.line));
      s.link_events.push_back(std::move(e));
    }
    return Status{};
  }

  Result<SimScenario> scenario(const YAML::Node& root) const {
    if (!root.IsMap()) return make_error(fmt::format("{}: a scenario must be a YAML map", source_));
    // A fabric description (topology/'s schema: tiers, servers, tor, ...) given where a scenario goes.
    if (root["tiers"] && root["servers"] && !root["workload"])
      return make_error(
          fmt::format("{}: this is a fabric file, not a scenario: name it in a scenario as `fabric: PATH` (a "
                      "file in configs/fabrics/ by its name: `fabric: {}`)",
                      source_, std::filesystem::path(source_).stem().string()));
    SimScenario s;
    s.source = std::string(source_);
    bool have_fabric = false, have_workload = false;
    for (const auto& kv : root) {
      const YAML::Node& key = kv.first;
      const YAML::Node& value = kv.second;
      const std::string k = key.Scalar();
      Status st{};
      if (k == "name" || k == "description" || k == "controller") {
        auto v = word(key, value);
        if (!v) return v.error();
        if (k == "name") s.name = *v;
        if (k == "controller") s.controller = *v;
      } else if (k == "fabric") {
        auto v = word(key, value);
        if (!v) return v.error();
        if (auto r = fabric(key, value, *v, s); !r) return r.error();
        have_fabric = true;
      } else if (k == "host_gbps") {
        auto v = number(key, value, 1, 1e4);
        if (!v) return v.error();
        s.host_rate_bps = static_cast<uint64_t>(*v * 1e9);
      } else if (k == "link_delay_us") {
        auto v = number(key, value, 0, 1e6);
        if (!v) return v.error();
        s.link_delay_ps = static_cast<TimePs>(std::llround(*v * 1e6));
      } else if (k == "switch") {
        if (st = map_of(key, value); st) st = switch_(value, s);
      } else if (k == "ecmp") {
        const std::string v = value.IsScalar() ? value.Scalar() : "";
        if (v != "per-flow" && v != "spray") return error(key, value, "must be per-flow or spray");
        s.spray = v == "spray";
      } else if (k == "loss_detection") {
        if (st = map_of(key, value); st) st = loss_detection(value, s);
      } else if (k == "lanes") {
        auto v = whole(key, value, 1, 64);
        if (!v) return v.error();
        s.lanes = static_cast<uint32_t>(*v);
      } else if (k == "workload") {
        if (st = map_of(key, value); st) st = workload(value, s);
        have_workload = true;
      } else if (k == "seed") {
        auto v = whole(key, value, 0, 1e18);
        if (!v) return v.error();
        s.seed = *v;
      } else if (k == "cc") {
        if (st = map_of(key, value); st) st = cc(value, "", s);
      } else if (k == "link_events") {
        st = link_events(key, value, s);
      } else if (k == "results") {
        if (st = map_of(key, value); st) st = results(value, s);
      } else if (k == "reroute") {
        auto v = flag(key, value);
        if (!v) return v.error();
        s.reroute = *v;
      } else if (k == "threads") {
        // Partitions on as many threads (partition.h); a --threads flag overrides it.
        auto v = whole(key, value, 1, 1024);
        if (!v) return v.error();
        s.threads = static_cast<uint32_t>(*v);
        s.threads_line = key.Mark().line + 1;
      } else if (k == "time_limit_ms") {
        auto v = number(key, value, 0.001, 1e6);
        if (!v) return v.error();
        s.time_limit_ps = static_cast<TimePs>(*v * 1e9);
      } else {
        return error(
            key, value,
            "unknown key (name, description, fabric, host_gbps, link_delay_us, switch, ecmp, loss_detection, "
            "controller, lanes, workload, seed, time_limit_ms, cc, link_events, reroute, results, threads)");
      }
      if (!st) return st.error();
    }
    if (!have_fabric) return make_error(fmt::format("{}: fabric is missing", source_));
    if (!have_workload) return make_error(fmt::format("{}: workload is missing", source_));
    if (!s.link_events.empty() && s.fabric == "star")
      return make_error(fmt::format("{}: link_events need a CLOS fabric, not star:N", source_));
    if (s.threads > 1 && !s.link_events.empty())
      return make_error(
          fmt::format("{}:{}: threads: {}: link_events need threads: 1 (a link's state change is "
                      "applied at both ends at once, which partitions do not share)",
                      source_, s.threads_line, s.threads));
    if (s.name.empty()) s.name = std::filesystem::path(source_).stem().string();
    return s;
  }

 private:
  Status fabric(const YAML::Node& key, const YAML::Node& value, const std::string& v, SimScenario& s) const {
    if (v.rfind("star:", 0) == 0) {
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str() + 5, &end, 10);
      if (*end != '\0' || n < 2 || n > 1'000'000)
        return error(key, value, "star:N needs 2 <= N <= 1000000 hosts");
      s.fabric = "star";
      s.star_hosts = static_cast<uint32_t>(n);
      return Status{};
    }
    const auto presets = topo::fabric_preset_names();
    if (std::find(presets.begin(), presets.end(), v) != presets.end()) {
      s.fabric = v;
      return Status{};
    }
    // A file: relative to the scenario's folder when it is there.
    std::filesystem::path p(v);
    if (p.is_relative()) {
      const std::filesystem::path near = std::filesystem::path(source_).parent_path() / p;
      if (exists(near)) p = near;
    }
    if (!exists(p))
      return error(
          key, value,
          fmt::format("not a fabric preset ({}), star:N, or an existing file", fmt::join(presets, ", ")));
    s.fabric = p.string();
    return Status{};
  }

  // std::filesystem::exists without its throw: a name too long for the file system (ENAMETOOLONG) or a
  // loop of links is no such file here, not an exception out of the loader.
  static bool exists(const std::filesystem::path& p) {
    std::error_code ec;
    return std::filesystem::exists(p, ec);
  }

  std::string_view source_;
  std::vector<SetValue> set_values_;
};

// Puts one override into the document: walks the dotted key through maps (and list indices), creating
// the last key (the parser then refuses it when it is not a scenario key) or maps on the way.
Result<SetValue> apply_override(YAML::Node root, const ScenarioOverride& o, std::string_view source) {
  const std::string origin = fmt::format("--set {}={}", o.key, o.value);
  std::vector<std::string> parts;
  std::stringstream ss(o.key);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) return make_error(fmt::format("{}: the key has an empty part", origin));
    parts.push_back(part);
  }
  if (parts.empty()) return make_error(fmt::format("{}: the key is empty", origin));
  YAML::Node value;
  try {
    value = YAML::Load(o.value);
  } catch (const YAML::Exception& e) {
    return make_error(fmt::format("{}: the value is not YAML: {}", origin, e.msg));
  }
  YAML::Node node = root;
  std::string path;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const bool last = i + 1 == parts.size();
    if (node.IsSequence()) {
      char* end = nullptr;
      const unsigned long index = std::strtoul(part.c_str(), &end, 10);
      if (*end != '\0' || index >= node.size())
        return make_error(
            fmt::format("{}: {} is a list of {}; {} is not an index in it", origin, path, node.size(), part));
      if (last) {
        node[index] = value;
        return SetValue{node[index], origin};
      }
      node.reset(node[index]);
    } else if (node.IsMap() || node.IsNull()) {
      if (last) {
        node[part] = value;
        return SetValue{node[part], origin};
      }
      if (!node[part]) node[part] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next = node[part];
      node.reset(next);
    } else {
      return make_error(
          fmt::format("{}: {} is {} in {}, which has no keys under it", origin, path, text(node), source));
    }
    path += (path.empty() ? "" : ".") + part;
  }
  return make_error(fmt::format("{}: nothing set", origin));
}

}  // namespace

Result<ScenarioOverride> parse_override(std::string_view key_equals_value) {
  const size_t eq = key_equals_value.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return make_error(
        fmt::format("--set {}: must be KEY=VALUE, e.g. workload.bytes=65536", std::string(key_equals_value)));
  return ScenarioOverride{std::string(key_equals_value.substr(0, eq)),
                          std::string(key_equals_value.substr(eq + 1))};
}

Result<SimScenario> parse_sim_scenario(std::string_view yaml_text, std::string_view source,
                                       const std::vector<ScenarioOverride>& overrides) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml_text));
    if (auto dups = yaml::duplicate_keys(root); !dups.empty())
      return make_error(yaml::in_file_order(std::move(dups), source));
    std::vector<SetValue> set_values;
    if (!overrides.empty() && !root.IsMap())
      return make_error(fmt::format("{}: a scenario must be a YAML map", source));
    for (const ScenarioOverride& o : overrides) {
      auto sv = apply_override(root, o, source);
      if (!sv) return sv.error();
      set_values.push_back(std::move(*sv));
    }
    return Parser(source, std::move(set_values)).scenario(root);
  } catch (const YAML::Exception& e) {
    return make_error(fmt::format("{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.msg));
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: cannot parse: {}", source, e.what()));
  }
}

Result<SimScenario> load_sim_scenario(const std::string& path,
                                      const std::vector<ScenarioOverride>& overrides) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("{}: cannot open", path));
  std::ostringstream os;
  os << in.rdbuf();
  return parse_sim_scenario(os.str(), path, overrides);
}

}  // namespace megascale::sim
