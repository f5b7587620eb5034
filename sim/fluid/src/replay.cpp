// Scenario YAML parsing and the replay loop (replay.h).
#include "megascale/sim/replay.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "megascale/common/yaml_text.h"
#include "receiver_cnp.h"

namespace megascale::sim {
namespace {

using yaml::line_of;

constexpr const char* kEventKeys =
    "t_us, rtt_us, acked_packets, ecn, cnp, loss, rto, send_bytes, timer, repeat, every_us";
constexpr size_t kMaxEvents = 1'000'000;

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  Error error(const YAML::Node& at, const std::string& what) const {
    return make_error(fmt::format("{}:{}: {}", source_, line_of(at), what));
  }

  Result<double> number(const YAML::Node& key, const YAML::Node& value) const {
    double v = 0;
    if (!value.IsScalar() || !YAML::convert<double>::decode(value, v) || !std::isfinite(v))
      return error(key, fmt::format("'{}' must be a number, got '{}'", key.Scalar(), text(value)));
    return v;
  }

  Result<uint64_t> count(const YAML::Node& key, const YAML::Node& value) const {
    Result<double> v = number(key, value);
    if (!v) return v.error();
    if (*v < 1 || *v > 1e15 || std::floor(*v) != *v)
      return error(key, fmt::format("'{}' must be a whole number >= 1, got '{}'", key.Scalar(), text(value)));
    return static_cast<uint64_t>(*v);
  }

  Result<bool> flag(const YAML::Node& key, const YAML::Node& value) const {
    bool b = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, b))
      return error(key, fmt::format("'{}' must be true or false, got '{}'", key.Scalar(), text(value)));
    return b;
  }

  // One entry of `events`, possibly repeated; appended to `out`.
  Status event(const YAML::Node& node, std::vector<ScenarioEvent>& out) const {
    if (!node.IsMap()) return error(node, "an event must be a map like {t_us: 10, rtt_us: 12}");
    ScenarioEvent e;
    e.line = line_of(node);
    bool have_t = false, have_packets = false, have_ecn = false;
    uint64_t repeat = 1;
    double every_us = 0;
    std::vector<std::string> kinds;
    for (const auto& kv : node) {
      const YAML::Node& key = kv.first;
      const YAML::Node& value = kv.second;
      if (!key.IsScalar()) return error(key, "event keys must be plain names");
      const std::string& k = key.Scalar();
      if (k == "t_us") {
        Result<double> v = number(key, value);
        if (!v) return v.error();
        if (*v < 0) return error(key, fmt::format("'t_us' must be >= 0, got {}", *v));
        e.t_ns = std::llround(*v * 1e3);
        have_t = true;
      } else if (k == "rtt_us") {
        Result<double> v = number(key, value);
        if (!v) return v.error();
        if (*v <= 0) return error(key, fmt::format("'rtt_us' must be > 0, got {}", *v));
        e.rtt_ns = std::llround(*v * 1e3);
        e.kind = ScenarioEventKind::kAck;
        kinds.push_back(k);
      } else if (k == "acked_packets") {
        Result<uint64_t> v = count(key, value);
        if (!v) return v.error();
        if (*v > 1'000'000) return error(key, fmt::format("'acked_packets' {} is implausibly large", *v));
        e.acked_packets = static_cast<uint32_t>(*v);
        have_packets = true;
      } else if (k == "ecn") {
        Result<bool> v = flag(key, value);
        if (!v) return v.error();
        e.ecn = *v;
        have_ecn = true;
      } else if (k == "send_bytes") {
        Result<uint64_t> v = count(key, value);
        if (!v) return v.error();
        e.send_bytes = *v;
        e.kind = ScenarioEventKind::kSend;
        kinds.push_back(k);
      } else if (k == "cnp" || k == "loss" || k == "rto" || k == "timer") {
        Result<bool> v = flag(key, value);
        if (!v) return v.error();
        if (!*v) return error(key, fmt::format("'{}: false' means nothing; leave the key out", k));
        e.kind = k == "cnp"    ? ScenarioEventKind::kCnp
                 : k == "loss" ? ScenarioEventKind::kLoss
                 : k == "rto"  ? ScenarioEventKind::kRto
                               : ScenarioEventKind::kTimer;
        kinds.push_back(k);
      } else if (k == "repeat") {
        Result<uint64_t> v = count(key, value);
        if (!v) return v.error();
        repeat = *v;
      } else if (k == "every_us") {
        Result<double> v = number(key, value);
        if (!v) return v.error();
        if (*v <= 0) return error(key, fmt::format("'every_us' must be > 0, got {}", *v));
        every_us = *v;
      } else {
        return error(key, fmt::format("unknown event key '{}' (known: {})", k, kEventKeys));
      }
    }
    if (!have_t) return error(node, "event has no 't_us'");
    if (kinds.size() != 1)
      return error(node, kinds.empty() ? "event needs one of rtt_us, cnp, loss, rto, send_bytes, timer"
                                       : fmt::format("event has {} kinds ({}); give exactly one",
                                                     kinds.size(), fmt::join(kinds, ", ")));
    if ((have_packets || have_ecn) && e.kind != ScenarioEventKind::kAck)
      return error(node, "'acked_packets' and 'ecn' belong to an ACK (an event with 'rtt_us')");
    if (repeat > 1 && every_us <= 0)
      return error(node, "'repeat' needs 'every_us', the spacing of the repeats");
    if (repeat == 1 && every_us > 0) return error(node, "'every_us' without 'repeat' does nothing");
    if (out.size() + repeat > kMaxEvents)
      return error(node, fmt::format("the scenario expands to more than {} events", kMaxEvents));
    const TimeNs start = e.t_ns;
    for (uint64_t i = 0; i < repeat; ++i) {
      e.t_ns = start + std::llround(static_cast<double>(i) * every_us * 1e3);
      if (!out.empty() && e.t_ns < out.back().t_ns)
        return error(
            node, fmt::format("t_us {} comes before the previous event at {} us; events must be in "
                              "time order",
                              static_cast<double>(e.t_ns) / 1e3, static_cast<double>(out.back().t_ns) / 1e3));
      out.push_back(e);
    }
    return {};
  }

  Result<Scenario> scenario(const YAML::Node& root) const {
    Scenario s;
    s.source = std::string(source_);
    if (!root.IsMap())
      return make_error(fmt::format("{}: a scenario is a map with an 'events' list", source_));
    YAML::Node events;
    for (const auto& kv : root) {
      const std::string& k = kv.first.Scalar();
      if (k == "events") {
        events = kv.second;
      } else if (k == "description") {
        if (!kv.second.IsScalar()) return error(kv.first, "'description' must be text");
        s.description = kv.second.Scalar();
      } else {
        return error(kv.first, fmt::format("unknown key '{}' (known: description, events)", k));
      }
    }
    if (!events) return make_error(fmt::format("{}: no 'events' list", source_));
    if (!events.IsSequence() || events.size() == 0) return error(events, "'events' must be a non-empty list");
    for (const YAML::Node& node : events)
      if (Status st = event(node, s.events); !st) return st.error();
    return s;
  }

 private:
  static std::string text(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : "a list or map"; }

  std::string_view source_;
};

}  // namespace

Result<Scenario> parse_scenario(std::string_view yaml_text, std::string_view source) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (auto dups = yaml::duplicate_keys(root); !dups.empty())
      return make_error(yaml::in_file_order(std::move(dups), source));
    return Parser(source).scenario(root);
  } catch (const YAML::Exception& e) {
    return make_error(fmt::format("{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.msg));
  } catch (const std::exception& e) {
    return make_error(fmt::format("{}: cannot parse: {}", source, e.what()));
  }
}

Result<Scenario> load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("cannot read scenario {}: {}", path, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return parse_scenario(text.str(), path);
}

std::string describe_event(const ScenarioEvent& e) {
  switch (e.kind) {
    case ScenarioEventKind::kAck: {
      std::string s = fmt::format("ack rtt={:.1f}us", static_cast<double>(e.rtt_ns) / 1e3);
      if (e.acked_packets != 1) s += fmt::format(" x{}", e.acked_packets);
      if (e.ecn) s += " ecn";
      return s;
    }
    case ScenarioEventKind::kCnp:
      return "cnp";
    case ScenarioEventKind::kLoss:
      return "loss";
    case ScenarioEventKind::kRto:
      return "rto";
    case ScenarioEventKind::kSend:
      return fmt::format("send {}B", e.send_bytes);
    case ScenarioEventKind::kTimer:
      return "timer";
  }
  return "?";
}

std::vector<ReplayRow> replay(const Scenario& scenario, cc::Controller& cc, const ReplayOptions& options) {
  const bool cnp_feedback =
      options.ecn_feedback == EcnFeedback::kCnp ||
      (options.ecn_feedback == EcnFeedback::kAuto && cc.kind() == cc::ControllerKind::kDcqcn);
  const uint64_t mss = std::max<uint32_t>(1, options.flow.mss_bytes);
  ReceiverCnpPacer pacer(options.cnp_interval_ns);
  std::vector<ReplayRow> rows;
  rows.reserve(scenario.events.size());
  for (const ScenarioEvent& e : scenario.events) {
    ReplayRow row;
    row.t_ns = e.t_ns;
    row.event = describe_event(e);
    const TimeNs now = e.t_ns;
    switch (e.kind) {
      case ScenarioEventKind::kAck: {
        cc::AckSample ack;
        ack.acked_packets = e.acked_packets;
        ack.acked_bytes = e.acked_packets * mss;
        ack.rtt_ns = e.rtt_ns;
        if (cnp_feedback) {
          // As in the fluid model: the CNP from the receiver reaches the sender with the ACK, first.
          row.cnp_sent = pacer.on_packet(now, e.ecn);
          if (row.cnp_sent) cc.on_cnp(now);
        } else {
          ack.ecn_ce = e.ecn;
          ack.ce_packets = e.ecn ? e.acked_packets : 0;
        }
        cc.on_ack(now, ack);
        break;
      }
      case ScenarioEventKind::kCnp:
        cc.on_cnp(now);
        break;
      case ScenarioEventKind::kLoss:
        cc.on_fast_recovery(now);
        break;
      case ScenarioEventKind::kRto:
        cc.on_rto(now);
        break;
      case ScenarioEventKind::kSend:
        for (uint64_t left = e.send_bytes; left > 0; left -= std::min(left, mss))
          cc.on_send(now, std::min(left, mss));
        break;
      case ScenarioEventKind::kTimer:
        cc.on_timer(now);
        break;
    }
    if (row.cnp_sent) row.event += " +cnp";
    row.state = cc.state();
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace megascale::sim
