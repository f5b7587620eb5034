// The perf control messages and the server/client flag agreement.
#include "megascale/perf/protocol.h"

#include <fmt/format.h>

namespace megascale::perf {

using nlohmann::json;

PerfParams params_from(const PerfOptions& o, const std::string& cc_name) {
  PerfParams p;
  p.test = o.test;
  p.all_sizes = o.all_sizes;
  p.size_bytes = o.size_bytes;
  p.iterations = o.iterations;
  p.duration_s = o.duration_s;
  p.window = o.window;
  p.check = o.check;
  p.lanes = o.lanes;
  p.cc = cc_name;
  p.segment_bytes = o.segment_bytes;
  p.dscp = o.dscp;
  p.bidirectional = o.bidirectional;
  p.wire = o.wire;
  return p;
}

PerfOptions adopt_params(const PerfOptions& server, const PerfParams& p) {
  PerfOptions o = server;
  o.test = p.test;
  o.all_sizes = p.all_sizes;
  o.size_bytes = p.size_bytes;
  o.iterations = p.iterations;
  o.duration_s = p.duration_s;
  o.window = p.window;
  o.check = p.check;
  o.bidirectional = p.bidirectional;
  return o;
}

json to_json(const PerfParams& p) {
  return json{{"type", "params"},
              {"version", p.version},
              {"test", std::string(to_string(p.test))},
              {"all_sizes", p.all_sizes},
              {"size_bytes", p.size_bytes},
              {"iterations", p.iterations},
              {"duration_s", p.duration_s},
              {"window", p.window},
              {"check", p.check},
              {"lanes", p.lanes},
              {"cc", p.cc},
              {"segment_bytes", p.segment_bytes},
              {"dscp", p.dscp},
              {"bidirectional", p.bidirectional},
              {"wire", std::string(to_string(p.wire))}};
}

Result<PerfParams> params_from_json(const json& j) {
  try {
    PerfParams p;
    p.version = j.at("version").get<int>();
    if (p.version != kProtocolVersion) {
      return make_error(fmt::format(
          "perf protocol version {} from the peer, this side speaks {}: run the same megascale release on "
          "both sides",
          p.version, kProtocolVersion));
    }
    auto test = parse_perf_test(j.at("test").get<std::string>());
    if (!test) return test.error();
    p.test = *test;
    p.all_sizes = j.at("all_sizes").get<bool>();
    p.size_bytes = j.at("size_bytes").get<uint64_t>();
    p.iterations = j.at("iterations").get<uint64_t>();
    p.duration_s = j.at("duration_s").get<double>();
    p.window = j.at("window").get<uint32_t>();
    p.check = j.at("check").get<bool>();
    p.lanes = j.at("lanes").get<uint32_t>();
    p.cc = j.at("cc").get<std::string>();
    p.segment_bytes = j.at("segment_bytes").get<uint32_t>();
    p.dscp = j.at("dscp").get<uint8_t>();
    p.bidirectional = j.at("bidirectional").get<bool>();
    auto wire = parse_perf_wire(j.at("wire").get<std::string>());
    if (!wire) return make_error("client's parameters: " + wire.error().message);
    p.wire = *wire;
    // The server runs with these: hold them to the same ranges as its own flags.
    PerfOptions check;
    check.test = p.test;
    check.all_sizes = p.all_sizes;
    check.size_bytes = p.size_bytes;
    check.iterations = p.iterations;
    check.duration_s = p.duration_s;
    check.window = p.window;
    check.lanes = p.lanes;
    check.segment_bytes = p.segment_bytes;
    check.dscp = p.dscp;
    check.bidirectional = p.bidirectional;
    if (p.size_bytes > 0) check.explicit_flags.insert(std::string(flag::kSize));
    if (Status s = validate_perf_options(check); !s)
      return make_error("client's parameters: " + s.error().message);
    return p;
  } catch (const json::exception& e) {
    return make_error(std::string("malformed parameters from the client: ") + e.what());
  }
}

std::string describe_sizes(const PerfOptions& o) {
  if (o.all_sizes) return "-a";
  if (o.size_bytes > 0) return fmt::format("-s {}", o.size_bytes);
  return "default";
}

Status check_agreement(const PerfOptions& s, const std::string& server_cc_name, const PerfParams& c) {
  std::vector<std::string> diffs;
  auto differ = [&](std::string_view name, const std::string& here, const std::string& there) {
    if (here != there)
      diffs.push_back(fmt::format("{}: {} on the server, {} on the client", name, here, there));
  };
  auto count = [](uint64_t n) { return n ? std::to_string(n) : std::string("default"); };
  PerfOptions client_sizes;
  client_sizes.all_sizes = c.all_sizes;
  client_sizes.size_bytes = c.size_bytes;
  if (s.is_explicit(flag::kTest))
    differ(flag::kTest, std::string(to_string(s.test)), std::string(to_string(c.test)));
  if (s.is_explicit(flag::kAll) || s.is_explicit(flag::kSize)) {
    differ("message sizes (-a/-s)", describe_sizes(s), describe_sizes(client_sizes));
  }
  if (s.is_explicit(flag::kIters)) differ(flag::kIters, count(s.iterations), count(c.iterations));
  if (s.is_explicit(flag::kDuration)) {
    differ(flag::kDuration, fmt::format("{:g}", s.duration_s), fmt::format("{:g}", c.duration_s));
  }
  if (s.is_explicit(flag::kWindow)) differ(flag::kWindow, std::to_string(s.window), std::to_string(c.window));
  if (s.is_explicit(flag::kLanes)) differ(flag::kLanes, std::to_string(s.lanes), std::to_string(c.lanes));
  if (s.is_explicit(flag::kCc)) differ(flag::kCc, server_cc_name, c.cc);
  if (s.is_explicit(flag::kSegment)) {
    differ(flag::kSegment, std::to_string(s.segment_bytes), std::to_string(c.segment_bytes));
  }
  if (s.is_explicit(flag::kCheck)) differ(flag::kCheck, s.check ? "on" : "off", c.check ? "on" : "off");
  if (s.is_explicit(flag::kTclass)) {
    differ(flag::kTclass, std::to_string(s.dscp << 2), std::to_string(c.dscp << 2));
  }
  if (s.is_explicit(flag::kBidirectional)) {
    differ(flag::kBidirectional, s.bidirectional ? "on" : "off", c.bidirectional ? "on" : "off");
  }
  differ(flag::kWire, std::string(to_string(s.wire)), std::string(to_string(c.wire)));
  if (diffs.empty()) {
    // The client's sizes must fit the server's own --buffer-mib too.
    if (Status st = check_buffer_budget(adopt_params(s, c)); !st)
      return make_error("server: " + st.error().message);
    return {};
  }
  std::string text =
      "server and client flags differ (give both sides the same flags, or the server only -p):";
  for (const std::string& d : diffs) text += "\n  " + d;
  return make_error(text);
}

json to_json(const SideCounters& c) {
  json rtt = json::array();
  for (size_t b = 0; b < c.rtt.size(); ++b) {
    if (c.rtt[b] != 0) rtt.push_back({b, c.rtt[b]});
  }
  return json{{"retransmits_fast", c.retransmits_fast},
              {"retransmits_rto", c.retransmits_rto},
              {"timeouts", c.timeouts},
              {"ecn_marks", c.ecn_marks},
              {"cnps_received", c.cnps_received},
              {"repaths", c.repaths},
              {"floor_stalls", c.floor_stalls},
              {"payload_sent_bytes", c.bytes_sent},
              {"sends_posted", c.sends_posted},
              {"sends_waited_for_credit", c.sends_waited_for_credit},
              {"payload_received_bytes", c.bytes_received},
              {"ce_received", c.ce_received},
              {"cnps_sent", c.cnps_sent},
              {"duplicates_dropped", c.duplicates_dropped},
              {"corrupt_dropped", c.corrupt_dropped},
              {"malformed_dropped", c.malformed_dropped},
              {"endpoint_malformed", c.endpoint_malformed},
              {"unknown_connection", c.unknown_connection},
              {"rtt_buckets", rtt},
              {"rtt_max_ns", c.rtt_max_ns},
              {"datagrams_sent", c.datagrams_sent},
              {"datagrams_received", c.datagrams_received},
              {"udp_sent_bytes", c.udp_bytes_sent},
              {"send_syscalls", c.send_syscalls},
              {"send_messages", c.send_messages},
              {"gso_messages", c.gso_messages},
              {"recv_syscalls", c.recv_syscalls},
              {"recv_messages", c.recv_messages},
              {"gro_messages", c.gro_messages},
              {"send_dropped_full", c.send_dropped_full},
              {"progress_calls", c.progress_calls},
              {"clock_reads", c.clock_reads},
              {"wake_reads", c.wake_reads},
              {"fault_offered", c.fault_offered},
              {"fault_dropped", c.fault_dropped},
              {"fault_duplicated", c.fault_duplicated},
              {"fault_reordered", c.fault_reordered},
              {"fault_delayed", c.fault_delayed},
              {"fault_corrupted", c.fault_corrupted},
              {"fault_ce_marked", c.fault_ce_marked},
              {"rx_stolen", c.rx_stolen},
              {"tx_rerouted", c.tx_rerouted},
              {"tx_stolen", c.tx_stolen},
              {"io_awake_ns", c.io_awake_ns},
              {"io_busy_ns", c.io_busy_ns},
              {"kernel_ok", c.kernel.ok},
              {"kernel_rcvbuf_errors", c.kernel.rcvbuf_errors},
              {"kernel_in_errors", c.kernel.in_errors},
              {"socket_drops", c.kernel.socket_drops},
              {"segments_sent", c.segments_sent},
              {"segments_received", c.segments_received},
              {"cpu_ok", c.cpu_ok},
              {"cpu_user_ns", c.cpu_user_ns},
              {"cpu_sys_ns", c.cpu_sys_ns},
              {"process_id", c.process_id}};
}

SideCounters side_counters_from_json(const json& j) {
  SideCounters c;
  auto u = [&](const char* key) { return j.value(key, uint64_t{0}); };
  c.retransmits_fast = u("retransmits_fast");
  c.retransmits_rto = u("retransmits_rto");
  c.timeouts = u("timeouts");
  c.ecn_marks = u("ecn_marks");
  c.cnps_received = u("cnps_received");
  c.repaths = u("repaths");
  c.floor_stalls = u("floor_stalls");
  c.bytes_sent = u("payload_sent_bytes");
  c.sends_posted = u("sends_posted");
  c.sends_waited_for_credit = u("sends_waited_for_credit");
  c.bytes_received = u("payload_received_bytes");
  c.ce_received = u("ce_received");
  c.cnps_sent = u("cnps_sent");
  c.duplicates_dropped = u("duplicates_dropped");
  c.corrupt_dropped = u("corrupt_dropped");
  c.malformed_dropped = u("malformed_dropped");
  c.endpoint_malformed = u("endpoint_malformed");
  c.unknown_connection = u("unknown_connection");
  if (j.contains("rtt_buckets") && j["rtt_buckets"].is_array()) {
    for (const json& e : j["rtt_buckets"]) {
      if (!e.is_array() || e.size() != 2) continue;
      const auto b = e[0].get<size_t>();
      if (b < c.rtt.size()) c.rtt[b] = e[1].get<uint64_t>();
    }
  }
  c.rtt_max_ns = j.value("rtt_max_ns", TimeNs{0});
  c.datagrams_sent = u("datagrams_sent");
  c.datagrams_received = u("datagrams_received");
  c.udp_bytes_sent = u("udp_sent_bytes");
  c.send_syscalls = u("send_syscalls");
  c.send_messages = u("send_messages");
  c.gso_messages = u("gso_messages");
  c.recv_syscalls = u("recv_syscalls");
  c.recv_messages = u("recv_messages");
  c.gro_messages = u("gro_messages");
  c.send_dropped_full = u("send_dropped_full");
  c.progress_calls = u("progress_calls");
  c.clock_reads = u("clock_reads");
  c.wake_reads = u("wake_reads");
  c.fault_offered = u("fault_offered");
  c.fault_dropped = u("fault_dropped");
  c.fault_duplicated = u("fault_duplicated");
  c.fault_reordered = u("fault_reordered");
  c.fault_delayed = u("fault_delayed");
  c.fault_corrupted = u("fault_corrupted");
  c.fault_ce_marked = u("fault_ce_marked");
  c.rx_stolen = u("rx_stolen");
  c.tx_rerouted = u("tx_rerouted");
  c.tx_stolen = u("tx_stolen");
  c.io_awake_ns = u("io_awake_ns");
  c.io_busy_ns = u("io_busy_ns");
  c.kernel.ok = j.value("kernel_ok", false);
  c.kernel.rcvbuf_errors = u("kernel_rcvbuf_errors");
  c.kernel.in_errors = u("kernel_in_errors");
  c.kernel.socket_drops = u("socket_drops");
  c.segments_sent = u("segments_sent");
  c.segments_received = u("segments_received");
  c.cpu_ok = j.value("cpu_ok", false);
  c.cpu_user_ns = u("cpu_user_ns");
  c.cpu_sys_ns = u("cpu_sys_ns");
  c.process_id = u("process_id");
  return c;
}

std::string encode_control(const json& msg) {
  return msg.dump();
}

Result<json> decode_control(std::string_view bytes, std::string_view expected_type) {
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error(fmt::format("malformed control message from the peer ({} bytes)", bytes.size()));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "error" || type == "refuse") {
    return make_error(j.value("error", std::string("the peer stopped without saying why")));
  }
  if (!expected_type.empty() && type != expected_type) {
    return make_error(
        fmt::format("protocol: expected a '{}' message from the peer, got '{}'", expected_type, type));
  }
  return j;
}

}  // namespace megascale::perf
