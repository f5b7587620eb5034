// JSON lines and Prometheus textfile of per-connection counters (see stats_writer.h).
#include "stats_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "config.h"
#include "megascale/engine/endpoint.h"
#include "transport.h"

namespace megascale::nccl {
namespace {

struct Snapshot {
  const CommBase* comm = nullptr;
  bool found = false;  // the engine still knows the connection
  std::string state;
  uint32_t lanes = 0;
  uint32_t segment_bytes = 0;
  uint64_t remote_id = 0;
  engine::ConnectionStats stats;
  std::vector<engine::LaneStats> lane_stats;
  // The plugin's own counters, copied under the comm's lock (its NCCL thread may be writing them).
  CommBase::Counters nccl;
  uint64_t post_call_ns = 0, test_call_ns = 0, test_calls = 0;
  uint32_t requests_in_use = 0;
};

Snapshot take_snapshot(CommBase* comm) {
  Snapshot s;
  s.comm = comm;
  s.nccl = comm->counters_copy();
  s.post_call_ns = comm->post_call_ns.load(std::memory_order_relaxed);
  s.test_call_ns = comm->test_call_ns.load(std::memory_order_relaxed);
  s.test_calls = comm->test_calls.load(std::memory_order_relaxed);
  s.requests_in_use = comm->requests_in_use();
  // A comm over several stripes: their connections' counters added, their lanes one after another,
  // and the state of stripe 0 unless another's is not established. The ids are stripe 0's.
  for (size_t k = 0; k < comm->stripes.size(); ++k) {
    const Stripe& st = comm->stripes[k];
    st.wire->udp().with_endpoint([&](engine::Endpoint& ep) {
      const engine::Connection* c = ep.connection(st.conn);
      if (c == nullptr) return;
      const std::string state(engine::to_string(c->state()));
      if (k == 0) {
        s.found = true;
        s.state = state;
        s.segment_bytes = c->segment_bytes();
        s.remote_id = c->remote_id();
        s.stats = c->stats();
      } else {
        if (c->state() != engine::ConnectionState::kEstablished) s.state = state;
        s.stats.merge(c->stats());
      }
      s.lanes += c->lanes();
      for (uint32_t i = 0; i < c->lanes(); ++i) s.lane_stats.push_back(c->lane_stats(i));
    });
  }
  return s;
}

// A counter is written as megascale_nccl_<name>_total, a gauge as megascale_nccl_<name>; a percentile
// goes to the JSON lines only (percentiles of different ranks do not add up: the textfile has the
// distribution as a histogram instead).
enum class Kind { kCounter, kGauge, kJsonOnly };

struct Metric {
  const char* name;
  const char* help;
  Kind kind;
  std::function<double(const Snapshot&)> value;
  const char* json_name = nullptr;  // its key in the JSON lines' "engine" object, when not `name`
};

double lanes_sum(const Snapshot& s, double engine::LaneStats::*field) {
  double sum = 0;
  for (const engine::LaneStats& l : s.lane_stats) sum += l.*field;
  return sum;
}

double phase_p50(const Snapshot& s, CommBase::Phase p) {
  return double(s.nccl.phases[p].percentile_ns(0.5)) / 1e9;
}

const std::vector<Metric>& metrics() {
  using S = const Snapshot&;
  static const std::vector<Metric> table = {
      {"bytes_sent", "Payload bytes sent, retransmissions included.", Kind::kCounter,
       [](S s) { return double(s.stats.bytes_sent); }},
      {"segments_sent", "Segments sent (data and credits), retransmissions included.", Kind::kCounter,
       [](S s) { return double(s.stats.segments_sent); }},
      {"bytes_acked", "Payload bytes acknowledged by the peer.", Kind::kCounter,
       [](S s) { return double(s.stats.bytes_acked); }},
      {"retransmits_fast", "Segments retransmitted after SACK/RACK loss detection.", Kind::kCounter,
       [](S s) { return double(s.stats.retransmits_fast); }},
      {"retransmits_rto", "Segments retransmitted after a retransmission timeout.", Kind::kCounter,
       [](S s) { return double(s.stats.retransmits_rto); }},
      {"timeouts", "Retransmission timeouts.", Kind::kCounter, [](S s) { return double(s.stats.timeouts); }},
      {"tail_probes", "Segments sent again as tail-loss probes (not counted as retransmissions).",
       Kind::kCounter, [](S s) { return double(s.stats.tail_probes); }},
      {"timeouts_spurious", "Retransmission timeouts undone: the original copies arrived after all.",
       Kind::kCounter, [](S s) { return double(s.stats.timeouts_spurious); }},
      {"floor_stalls",
       "Lanes that stayed at the congestion controller's floor for seconds while ACKs arrived.",
       Kind::kCounter, [](S s) { return double(s.stats.floor_stalls); }},
      {"ecn_marks", "CE marks echoed by the peer.", Kind::kCounter,
       [](S s) { return double(s.stats.ecn_marks); }},
      {"cnps_received", "DCQCN congestion notifications received.", Kind::kCounter,
       [](S s) { return double(s.stats.cnps_received); }},
      {"repaths", "Lanes moved to a new path (UDP source port).", Kind::kCounter,
       [](S s) { return double(s.stats.repaths); }},
      {"bytes_received", "Payload bytes placed into receive buffers.", Kind::kCounter,
       [](S s) { return double(s.stats.bytes_received); }},
      {"segments_received", "New segments accepted.", Kind::kCounter,
       [](S s) { return double(s.stats.segments_received); }},
      {"segments_unchecked",
       "New segments that came without a payload CRC (the peer's MEGASCALE_PAYLOAD_CRC=0).", Kind::kCounter,
       [](S s) { return double(s.stats.segments_unchecked); }},
      {"ce_received", "Arriving segments marked CE.", Kind::kCounter,
       [](S s) { return double(s.stats.ce_received); }},
      {"duplicates_dropped", "Duplicate segments dropped.", Kind::kCounter,
       [](S s) { return double(s.stats.duplicates_dropped); }},
      {"corrupt_dropped", "Segments dropped for a payload CRC mismatch.", Kind::kCounter,
       [](S s) { return double(s.stats.corrupt_dropped); }},
      {"malformed_dropped", "Packets dropped as malformed.", Kind::kCounter,
       [](S s) { return double(s.stats.malformed_dropped); }},
      {"sends_completed", "Messages sent and acknowledged.", Kind::kCounter,
       [](S s) { return double(s.stats.sends_completed); }},
      {"sends_failed", "Sends that failed.", Kind::kCounter,
       [](S s) { return double(s.stats.sends_failed); }},
      {"sends_waited_for_credit",
       "Sends posted before the peer's receive had arrived (its credit): each waited a one-way trip at "
       "least.",
       Kind::kCounter, [](S s) { return double(s.stats.sends_waited_for_credit); }},
      {"recvs_completed", "Messages received.", Kind::kCounter,
       [](S s) { return double(s.stats.recvs_completed); }},
      {"recvs_failed", "Receives that failed.", Kind::kCounter,
       [](S s) { return double(s.stats.recvs_failed); }},
      {"requests_completed", "Requests reported done to NCCL.", Kind::kCounter,
       [](S s) { return double(s.nccl.completed); }, "nccl_requests_completed"},
      {"retry_later", "isend/irecv calls answered 'retry later' (no free request).", Kind::kCounter,
       [](S s) { return double(s.nccl.retry_later); }, "nccl_retry_later"},
      {"post_call_seconds", "Time NCCL's proxy thread spent inside isend/irecv (taking the wire's lock).",
       Kind::kCounter, [](S s) { return double(s.post_call_ns) / 1e9; }, "nccl_post_call_seconds"},
      {"test_call_seconds", "Time NCCL's proxy thread spent inside test().", Kind::kCounter,
       [](S s) { return double(s.test_call_ns) / 1e9; }, "nccl_test_call_seconds"},
      {"test_calls", "test() calls.", Kind::kCounter, [](S s) { return double(s.test_calls); },
       "nccl_test_calls"},
      // The JSON lines' percentiles; the textfile has these distributions as histograms (kHistograms).
      {"request_latency_p50_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.nccl.request_latency.percentile_ns(0.5)) / 1e9; }},
      {"request_latency_p99_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.nccl.request_latency.percentile_ns(0.99)) / 1e9; }},
      {"request_wait_p50_seconds", "", Kind::kJsonOnly, [](S s) { return phase_p50(s, CommBase::kWait); }},
      {"request_transfer_p50_seconds", "", Kind::kJsonOnly,
       [](S s) { return phase_p50(s, CommBase::kTransfer); }},
      {"request_ack_p50_seconds", "", Kind::kJsonOnly, [](S s) { return phase_p50(s, CommBase::kAck); }},
      {"request_report_p50_seconds", "", Kind::kJsonOnly,
       [](S s) { return phase_p50(s, CommBase::kReport); }},
      {"rtt_p50_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.stats.rtt.percentile_ns(0.5)) / 1e9; }},
      {"rtt_p99_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.stats.rtt.percentile_ns(0.99)) / 1e9; }},
      {"fabric_delay_p50_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.stats.fabric_delay.percentile_ns(0.5)) / 1e9; }},
      {"rx_delay_p50_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.stats.rx_delay.percentile_ns(0.5)) / 1e9; }},
      {"rx_delay_p99_seconds", "", Kind::kJsonOnly,
       [](S s) { return double(s.stats.rx_delay.percentile_ns(0.99)) / 1e9; }},
      {"cwnd_bytes", "Sum of the lanes' congestion windows.", Kind::kGauge,
       [](S s) { return lanes_sum(s, &engine::LaneStats::cwnd_bytes); }},
      {"pacing_rate_bps", "Sum of the lanes' pacing rates.", Kind::kGauge,
       [](S s) { return lanes_sum(s, &engine::LaneStats::pacing_rate_bps); }},
  };
  return table;
}

const char* role_name(const CommBase* c) {
  return c->role == Role::kSend ? "send" : "recv";
}

// The distributions of the textfile: megascale_nccl_<name>_seconds, a histogram per (ifname, role), and
// per phase for request_phase.
struct Histogram {
  const char* name;
  const char* help;
};
constexpr Histogram kHistograms[] = {
    {"rtt", "RTT samples: a segment's send to the ACK that covered it (none from retransmitted segments)."},
    {"fabric_delay",
     "RTT samples less the receiver's echoed delay: the delay the delay-based controllers compare with "
     "their targets."},
    {"rx_delay",
     "Time from a packet's kernel receive timestamp to the engine processing it: this host's hand-overs "
     "(I/O thread, wire thread), not the network."},
    {"request_latency",
     "Message time: from isend/irecv to test() reporting done (a send's includes its acknowledgment, a "
     "receive's the wait for the sender)."},
    {"request_phase",
     "Message time in parts, for requests that ended well: wait (to the first segment released or "
     "placed), transfer (first to last), ack (sends: last segment to its ACK), report (to test() saying "
     "done)."},
};

// Calls f(histogram name, phase or "", distribution) for every distribution of the snapshot: the
// engine's only while the engine still knows the connection, the plugin's own always.
template <typename F>
void each_distribution(const Snapshot& s, F&& f) {
  if (s.found) {
    f("rtt", "", s.stats.rtt);
    f("fabric_delay", "", s.stats.fabric_delay);
    f("rx_delay", "", s.stats.rx_delay);
  }
  f("request_latency", "", s.nccl.request_latency);
  for (int p = 0; p < CommBase::kPhases; ++p) {
    if (p == CommBase::kAck && s.comm->role != Role::kSend) continue;
    f("request_phase", CommBase::kPhaseNames[p], s.nccl.phases[p]);
  }
}

// The key of a histogram's series: (name, ifname, role, phase) joined by \x1f.
std::string hist_key(const char* name, const CommBase* c, const char* phase) {
  return std::string(name) + "\x1f" + c->ifname + "\x1f" + role_name(c) + "\x1f" + phase;
}

// One histogram's series for one label set: cumulative buckets at the fixed edges, +Inf, _sum, _count.
void prom_histogram(std::string& out, const std::string& name, const std::string& labels,
                    const engine::RttHistogram& h) {
  char num[64];
  uint64_t cumulative = 0;
  int b = 0;
  for (TimeNs edge : prom_bucket_edges_ns()) {
    for (; b < engine::RttHistogram::kBuckets && engine::RttHistogram::bucket_upper_ns(b) <= edge; ++b)
      cumulative += h.bucket_count(b);
    std::snprintf(num, sizeof num, "%.12g", static_cast<double>(edge) / 1e9);  // exact: at most 11 digits
    out += name + "_bucket{" + labels + ",le=\"" + num + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(h.count()) + "\n";
  std::snprintf(num, sizeof num, "%.9f", static_cast<double>(h.sum_ns()) / 1e9);
  out += name + "_sum{" + labels + "} " + num + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(h.count()) + "\n";
}

// The fields every record starts with.
nlohmann::json record(const char* event, TimeNs now) {
  return {{"event", event},
          {"time_unix_ms", static_cast<int64_t>(std::time(nullptr)) * 1000},
          {"monotonic_ns", now},
          {"pid", static_cast<int64_t>(::getpid())}};
}

// A metric's "# HELP" and "# TYPE" lines in the textfile.
void prom_metadata(std::string& out, const std::string& name, const char* help, const char* type) {
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

nlohmann::json to_json(const Snapshot& s, const char* event, TimeNs now) {
  const CommBase& c = *s.comm;
  nlohmann::json j = record(event, now);
  j["comm_id"] = id_hex(c.comm_id);
  j["dev"] = c.dev;
  j["ifname"] = c.ifname;
  j["role"] = role_name(&c);
  j["conn"] = id_hex(c.conn());
  j["stripes"] = c.stripes.size();
  j["peer"] = c.peer;
  j["open_s"] = static_cast<double>(now - c.opened_ns) / 1e9;
  const CommBase::Counters& n = s.nccl;
  j["nccl"] = {{"posted", n.posted},
               {"posted_buffers", n.posted_buffers},
               {"completed", n.completed},
               {"retry_later", n.retry_later},
               {"bytes_done", n.bytes_done},
               {"post_call_ns", s.post_call_ns},
               {"test_call_ns", s.test_call_ns},
               {"test_calls", s.test_calls},
               {"requests_in_use", s.requests_in_use},
               {"request_latency_p50_ns", n.request_latency.percentile_ns(0.5)},
               {"request_latency_p99_ns", n.request_latency.percentile_ns(0.99)},
               {"request_latency_max_ns", n.request_latency.max_ns()}};
  // The request latency in parts (CommBase::Phase); "ack" for sends only.
  nlohmann::json phases;
  for (int p = 0; p < CommBase::kPhases; ++p) {
    if (p == CommBase::kAck && c.role != Role::kSend) continue;
    const engine::RttHistogram& h = n.phases[p];
    phases[CommBase::kPhaseNames[p]] = {
        {"p50_ns", h.percentile_ns(0.5)}, {"p99_ns", h.percentile_ns(0.99)}, {"count", h.count()}};
  }
  j["nccl"]["phases"] = phases;
  if (!s.found) {
    j["state"] = "released";
    return j;
  }
  j["state"] = s.state;
  j["remote_conn"] = id_hex(s.remote_id);
  j["lanes"] = s.lanes;
  j["segment_bytes"] = s.segment_bytes;
  nlohmann::json e;
  for (const Metric& m : metrics()) e[m.json_name != nullptr ? m.json_name : m.name] = m.value(s);
  e["acks_sent"] = s.stats.acks_sent;
  e["acks_received"] = s.stats.acks_received;
  e["cnps_sent"] = s.stats.cnps_sent;
  e["out_of_window_dropped"] = s.stats.out_of_window_dropped;
  e["rtt_min_ns"] = s.stats.rtt.min_ns();
  e["rtt_max_ns"] = s.stats.rtt.max_ns();
  e["rtt_samples"] = s.stats.rtt.count();
  j["engine"] = e;
  nlohmann::json lanes = nlohmann::json::array();
  for (const engine::LaneStats& l : s.lane_stats) {
    lanes.push_back({{"path_id", l.path_id},
                     {"bytes_sent", l.bytes_sent},
                     {"retransmits", l.retransmits_fast + l.retransmits_rto},
                     {"timeouts", l.timeouts},
                     {"ecn_marks", l.ecn_marks},
                     {"repaths", l.repaths},
                     {"floor_stalls", l.floor_stalls},
                     {"cwnd_bytes", l.cwnd_bytes},
                     {"pacing_rate_bps", l.pacing_rate_bps},
                     {"rtt_p50_ns", l.rtt.percentile_ns(0.5)}});
  }
  j["lane_stats"] = lanes;
  return j;
}

nlohmann::json wire_json(DeviceWire& wire, const std::string& ifname, const char* event, TimeNs now) {
  const wire::UdpWireStats w = wire.udp().stats();
  nlohmann::json j = record(event, now);
  j["dev"] = wire.dev();
  j["ifname"] = ifname;
  j["wire"] = wire.index();
  j["dscp"] = wire.dscp();
  j["udp"] = {{"datagrams_sent", w.datagrams_sent},
              {"bytes_sent", w.bytes_sent},
              {"send_messages", w.send_messages},
              {"gso_messages", w.gso_messages},
              {"send_syscalls", w.send_syscalls},
              {"send_dropped_full", w.send_dropped_full},
              {"send_dropped_error", w.send_dropped_error},
              {"datagrams_received", w.datagrams_received},
              {"bytes_received", w.bytes_received},
              {"recv_messages", w.recv_messages},
              {"gro_messages", w.gro_messages},
              {"recv_syscalls", w.recv_syscalls},
              {"recv_errors", w.recv_errors},
              {"port_unreachable", w.port_unreachable},
              {"progress_calls", w.progress_calls},
              {"tx_deferred", w.tx_deferred},
              {"sleeps", w.sleeps},
              {"help_rounds", w.help_rounds},
              {"io_thread_sleeps", w.io_thread_sleeps},
              {"io_awake_ns", w.io_awake_ns},
              {"io_busy_ns", w.io_busy_ns},
              {"rx_stolen", w.rx_stolen},
              {"tx_rerouted", w.tx_rerouted},
              {"tx_stolen", w.tx_stolen},
              {"recv_messages_per_io_thread", w.recv_messages_per_io_thread}};
  // A wire over a packet port (verbs): the port's own counters.
  if (!w.port.empty()) {
    nlohmann::json port = nlohmann::json::object();
    for (const auto& [name, value] : w.port) port[name] = value;
    j["port"] = std::move(port);
  }
  return j;
}

// The wire counters in the textfile: (name, help, field).
struct WireMetric {
  const char* name;
  const char* help;
  uint64_t wire::UdpWireStats::*field;
};
constexpr WireMetric kWireMetrics[] = {
    {"datagrams_sent", "UDP datagrams this wire sent.", &wire::UdpWireStats::datagrams_sent},
    {"datagrams_received", "UDP datagrams this wire received.", &wire::UdpWireStats::datagrams_received},
    {"send_syscalls", "Send system calls (sendmmsg) of this wire.", &wire::UdpWireStats::send_syscalls},
    {"recv_syscalls", "Receive system calls (recvmmsg) of this wire, empty ones included.",
     &wire::UdpWireStats::recv_syscalls},
    {"send_dropped_full", "Datagrams lost because a socket's send buffer was full.",
     &wire::UdpWireStats::send_dropped_full},
    {"send_dropped_error", "Datagrams lost to another send error.", &wire::UdpWireStats::send_dropped_error},
    {"recv_errors", "Receive calls that failed (an ICMP error queued on the socket, among others).",
     &wire::UdpWireStats::recv_errors},
    {"port_unreachable", "ICMP port unreachable from a known peer: its process is gone.",
     &wire::UdpWireStats::port_unreachable},
    {"help_rounds",
     "Progress rounds NCCL's thread ran in test() because the wire's own had run none lately "
     "(MEGASCALE_TEST_PROGRESS_US).",
     &wire::UdpWireStats::help_rounds},
    {"rx_stolen", "Messages an I/O thread read from the socket of a stalled sibling (MEGASCALE_STALL_US).",
     &wire::UdpWireStats::rx_stolen},
    {"tx_rerouted", "Packets sent by another I/O thread because their socket's thread had stalled.",
     &wire::UdpWireStats::tx_rerouted},
    {"tx_stolen", "Datagrams an I/O thread sent from the queue of a stalled sibling (MEGASCALE_STALL_US).",
     &wire::UdpWireStats::tx_stolen},
};

// The I/O threads' nanosecond counters, written in seconds: (name, help, field).
constexpr WireMetric kWireSeconds[] = {
    {"io_awake", "Seconds this wire's I/O threads were awake (polling or working, not asleep in epoll).",
     &wire::UdpWireStats::io_awake_ns},
    {"io_busy", "Seconds this wire's I/O threads spent in rounds that moved something (of their awake time).",
     &wire::UdpWireStats::io_busy_ns},
};

void append_lines(const std::string& path, const std::vector<std::string>& lines) {
  if (lines.empty()) return;
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return;  // the directory was checked at init; a later failure only loses stats
  for (const std::string& l : lines) {
    std::fwrite(l.data(), 1, l.size(), f);
    std::fputc('\n', f);
  }
  std::fclose(f);
}

// Writes `text` to `path` through a temporary file and a rename, so that a reader never sees half.
void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path.c_str());
}

std::string label_value(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out.push_back('\\');
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(ch);
  }
  return out;
}

// The "settings" record: every knob by name (in the table's order) and the layout.
std::string settings_line(const PluginSettings& p, TimeNs now) {
  nlohmann::ordered_json j = {{"event", "settings"},
                              {"time_unix_ms", static_cast<int64_t>(std::time(nullptr)) * 1000},
                              {"monotonic_ns", now},
                              {"host", host_name()},
                              {"pid", static_cast<int64_t>(::getpid())}};
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();
  for (const Setting& r : p.settings) {
    settings[r.name] = {{"value", r.value}, {"source", r.source}};
    if (!r.note.empty()) settings[r.name]["note"] = r.note;
  }
  j["settings"] = settings;
  const LayoutRecord& l = p.layout;
  j["layout"] = {{"wires", l.wires},     {"io_threads", l.io_threads},     {"lanes", l.lanes},
                 {"stripes", l.stripes}, {"stripe_bytes", l.stripe_bytes}, {"source", l.source}};
  return j.dump();
}

// The info metrics of the .prom: a sample of value 1 per knob and one for the layout.
std::string settings_prom(const PluginSettings& p) {
  std::string out;
  prom_metadata(out, "megascale_nccl_setting_info",
                "The value of each plugin knob in force, and its source (environment or default).", "gauge");
  for (const Setting& r : p.settings) {
    out += "megascale_nccl_setting_info{name=\"" + label_value(r.name) + "\",value=\"" +
           label_value(r.value) + "\",source=\"" + label_value(r.source) + "\"} 1\n";
  }
  const LayoutRecord& l = p.layout;
  prom_metadata(out, "megascale_nccl_layout_info",
                "The thread layout in force; source is auto (the plugin's rule) or environment.", "gauge");
  out += "megascale_nccl_layout_info{wires=\"" + std::to_string(l.wires) + "\",io_threads=\"" +
         std::to_string(l.io_threads) + "\",lanes=\"" + std::to_string(l.lanes) + "\",stripes=\"" +
         std::to_string(l.stripes) + "\",stripe_bytes=\"" + std::to_string(l.stripe_bytes) + "\",source=\"" +
         label_value(l.source.substr(0, l.source.find(':'))) + "\"} 1\n";
  return out;
}

}  // namespace

std::string port_metrics_prom(
    const std::vector<std::pair<std::string, std::vector<std::pair<std::string, uint64_t>>>>& wires) {
  // Metric name -> (labels, value) in the wires' order; names sorted.
  std::map<std::string, std::vector<std::pair<std::string, uint64_t>>> by_name;
  for (const auto& [labels, counters] : wires) {
    for (const auto& [counter, value] : counters) {
      std::string name = "megascale_nccl_wire_port_";
      for (char ch : counter) {
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        name += ok ? ch : '_';
      }
      by_name[name + "_total"].emplace_back(labels, value);
    }
  }
  std::string out;
  for (const auto& [name, samples] : by_name) {
    const std::string counter = name.substr(std::strlen("megascale_nccl_wire_port_"),
                                            name.size() - std::strlen("megascale_nccl_wire_port_") - 6);
    const std::string help = "The packet port's " + counter + " counter (the verbs wire's PortStats).";
    prom_metadata(out, name, help.c_str(), "counter");
    for (const auto& [labels, value] : samples) out += name + labels + " " + std::to_string(value) + "\n";
  }
  return out;
}

PluginSettings settings_of(const PluginConfig& config) {
  PluginSettings p;
  p.settings = config.settings;
  LayoutRecord& l = p.layout;
  l.wires = config.layout.wires;
  l.io_threads = config.layout.io_threads;
  l.lanes = config.layout.lanes;
  l.stripes = config.layout.stripes;
  l.stripe_bytes = config.layout.stripe_bytes;
  l.source = "auto";
  for (const Setting& s : config.settings) {
    if (s.name != "MEGASCALE_LAYOUT") continue;
    if (s.source == "environment") {
      l.source = "environment";
    } else if (!s.note.empty()) {
      l.source = s.note;  // "auto: 6 usable CPUs / 1 local rank ..."
    }
  }
  return p;
}

std::string stats_identity(const EnvLookup& getenv_fn) {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* text = getenv_fn(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (*end == '\0' && errno == 0 && v >= 0) return "rank" + std::to_string(v);
  }
  return "proc";
}

const std::vector<TimeNs>& prom_bucket_edges_ns() {
  static const std::vector<TimeNs> edges = [] {
    std::vector<TimeNs> e;
    for (int k = 7; k <= 34; ++k) e.push_back((TimeNs{1} << k) - 1);
    return e;
  }();
  return edges;
}

StatsWriter::~StatsWriter() {
  if (owner_pid_ != 0 && owner_pid_ == ::getpid()) {
    const std::string live = "\nmegascale_nccl_up 1\n";
    const size_t at = last_prom_.find(live);
    if (keep_prom_ && at != std::string::npos) {
      last_prom_.replace(at, live.size(), "\nmegascale_nccl_up 0\n");
      write_file_atomically(prom_path_, last_prom_);
    } else {
      std::remove(prom_path_.c_str());
    }
    std::remove((prom_path_ + ".tmp").c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void StatsWriter::configure(const std::string& dir, TimeNs interval_ns, const PluginSettings& settings,
                            const std::string& identity, bool keep_prom) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dir.empty()) return;
  // The first name no live process holds: its .jsonl is flock'ed while the process lives (the lock
  // goes with the process however it ends). "proc" names count from proc0, a rank's from rank<N>,
  // then rank<N>-1. Where the lock cannot be taken for another reason (a file system without locks,
  // a folder we cannot write), the first name is used.
  const std::string prefix = dir + "/megascale-nccl-" + host_name() + "-";
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  jsonl_path_.clear();
  const bool numbered = identity == "proc";
  for (int k = 0; k < 1000; ++k) {
    const std::string stem =
        numbered ? identity + std::to_string(k) : (k == 0 ? identity : identity + "-" + std::to_string(k));
    const std::string path = prefix + stem + ".jsonl";
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      ::close(fd);
      continue;
    }
    lock_fd_ = fd;
    jsonl_path_ = path;
    prom_path_ = prefix + stem + ".prom";
    break;
  }
  if (jsonl_path_.empty()) return;  // a thousand live processes of one rank: not a job we can name
  owner_pid_ = static_cast<int>(::getpid());
  keep_prom_ = keep_prom;
  interval_ns_ = interval_ns;
  settings_prom_ = settings_prom(settings);
  next_ns_.store(0, std::memory_order_relaxed);
  enabled_.store(true, std::memory_order_release);
  append_lines(jsonl_path_, {settings_line(settings, wire::UdpWire::now())});
  write_prom_locked();
}

void StatsWriter::add(CommBase* comm) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.insert(comm);
  ++opened_;
  if (enabled()) comms_.insert(comm);
}

engine::ConnectionStats StatsWriter::totals(uint64_t* connections) {
  std::lock_guard<std::mutex> lock(mu_);
  engine::ConnectionStats t = closed_stats_;
  for (CommBase* c : live_) {
    const Snapshot s = take_snapshot(c);
    if (s.found) t.merge(s.stats);
  }
  if (connections != nullptr) *connections = opened_;
  return t;
}

void StatsWriter::remove(CommBase* comm) {
  std::lock_guard<std::mutex> lock(mu_);
  if (live_.erase(comm) == 0) return;
  const Snapshot s = take_snapshot(comm);
  if (s.found) closed_stats_.merge(s.stats);
  if (!enabled() || comms_.erase(comm) == 0) return;
  append_lines(jsonl_path_, {to_json(s, "close", wire::UdpWire::now()).dump()});
  if (s.found) {
    for (const Metric& m : metrics()) {
      if (m.kind != Kind::kCounter) continue;
      closed_totals_[std::string(m.name) + "\x1f" + comm->ifname + "\x1f" + role_name(comm)] += m.value(s);
    }
  }
  each_distribution(s, [&](const char* name, const char* phase, const engine::RttHistogram& h) {
    closed_hists_[hist_key(name, comm, phase)].merge(h);
  });
  write_prom_locked();
}

void StatsWriter::add_wire(DeviceWire* wire, const std::string& ifname) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  wires_[wire] = ifname;
}

void StatsWriter::remove_wire(DeviceWire* wire) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = wires_.find(wire);
  if (it == wires_.end()) return;
  append_lines(jsonl_path_, {wire_json(*wire, it->second, "wire", wire::UdpWire::now()).dump()});
  wires_.erase(it);
}

void StatsWriter::tick(TimeNs now) {
  if (!enabled()) return;
  TimeNs due = next_ns_.load(std::memory_order_relaxed);
  if (now < due) return;
  // One thread takes the snapshot; the others go on.
  if (!next_ns_.compare_exchange_strong(due, now + interval_ns_, std::memory_order_relaxed)) return;
  flush(now);
}

void StatsWriter::flush(TimeNs now) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lines;
  for (CommBase* c : comms_) lines.push_back(to_json(take_snapshot(c), "periodic", now).dump());
  for (const auto& [w, ifname] : wires_) lines.push_back(wire_json(*w, ifname, "wire_periodic", now).dump());
  append_lines(jsonl_path_, lines);
  write_prom_locked();
}

void StatsWriter::write_prom_locked() {
  std::vector<Snapshot> snaps;
  for (CommBase* c : comms_) snaps.push_back(take_snapshot(c));
  std::string out = settings_prom_;
  char num[64];
  prom_metadata(out, "megascale_nccl_up",
                "1 while the process that writes this file lives; 0 in a file it left at exit "
                "(MEGASCALE_STATS_KEEP_PROM=1).",
                "gauge");
  out += "megascale_nccl_up 1\n";
  prom_metadata(
      out, "megascale_nccl_snapshot_timestamp_seconds",
      "When this file was written (Unix time): a file much older than MEGASCALE_STATS_INTERVAL_S is "
      "one a killed process left behind.",
      "gauge");
  std::snprintf(num, sizeof num, "%.3f",
                static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count()) /
                    1e3);
  out += std::string("megascale_nccl_snapshot_timestamp_seconds ") + num + "\n";
  for (const Metric& m : metrics()) {
    if (m.kind == Kind::kJsonOnly) continue;
    const bool counter = m.kind == Kind::kCounter;
    const std::string name = std::string("megascale_nccl_") + m.name + (counter ? "_total" : "");
    prom_metadata(out, name, m.help, counter ? "counter" : "gauge");
    for (const Snapshot& s : snaps) {
      if (!s.found) continue;
      std::snprintf(num, sizeof num, "%.17g", m.value(s));
      out += name + "{ifname=\"" + label_value(s.comm->ifname) + "\",role=\"" + role_name(s.comm) +
             "\",conn=\"" + id_hex(s.comm->conn()) + "\",peer=\"" + label_value(s.comm->peer) + "\"} " + num +
             "\n";
    }
    if (!counter) continue;
    const std::string prefix = std::string(m.name) + "\x1f";
    for (auto it = closed_totals_.lower_bound(prefix); it != closed_totals_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      const std::string rest = it->first.substr(prefix.size());
      const size_t sep = rest.find('\x1f');
      std::snprintf(num, sizeof num, "%.17g", it->second);
      out += name + "{ifname=\"" + label_value(rest.substr(0, sep)) + "\",role=\"" + rest.substr(sep + 1) +
             "\",conn=\"closed\",peer=\"\"} " + num + "\n";
    }
  }
  // Every connection's distributions, open and closed, added up per label set: the buckets only grow
  // while the process lives, as a Prometheus histogram's must.
  std::map<std::string, engine::RttHistogram> hists = closed_hists_;
  for (const Snapshot& s : snaps) {
    each_distribution(s, [&](const char* name, const char* phase, const engine::RttHistogram& h) {
      hists[hist_key(name, s.comm, phase)].merge(h);
    });
  }
  for (const Histogram& hg : kHistograms) {
    const std::string name = std::string("megascale_nccl_") + hg.name + "_seconds";
    prom_metadata(out, name, hg.help, "histogram");
    const std::string prefix = std::string(hg.name) + "\x1f";
    for (auto it = hists.lower_bound(prefix); it != hists.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      if (it->second.count() == 0) continue;
      const std::string rest = it->first.substr(prefix.size());
      const size_t a = rest.find('\x1f'), b = rest.find('\x1f', a + 1);
      std::string labels =
          "ifname=\"" + label_value(rest.substr(0, a)) + "\",role=\"" + rest.substr(a + 1, b - a - 1) + "\"";
      if (b + 1 < rest.size()) labels += ",phase=\"" + rest.substr(b + 1) + "\"";
      prom_histogram(out, name, labels, it->second);
    }
  }
  std::vector<std::pair<std::string, wire::UdpWireStats>> wires;  // (label set, stats) per wire
  for (const auto& [w, ifname] : wires_) {
    wires.emplace_back("{ifname=\"" + label_value(ifname) + "\",wire=\"" + std::to_string(w->index()) +
                           "\",dscp=\"" + std::to_string(w->dscp()) + "\"}",
                       w->udp().stats());
  }
  for (const WireMetric& m : kWireMetrics) {
    const std::string name = std::string("megascale_nccl_wire_") + m.name + "_total";
    prom_metadata(out, name, m.help, "counter");
    for (const auto& [labels, stats] : wires)
      out += name + labels + " " + std::to_string(stats.*m.field) + "\n";
  }
  // The I/O threads' time in seconds, as Prometheus wants durations: rate(busy) / rate(awake) is the
  // share of their polling that moved something.
  for (const WireMetric& m : kWireSeconds) {
    const std::string name = std::string("megascale_nccl_wire_") + m.name + "_seconds_total";
    prom_metadata(out, name, m.help, "counter");
    for (const auto& [labels, stats] : wires) {
      std::snprintf(num, sizeof num, "%.9f", static_cast<double>(stats.*m.field) / 1e9);
      out += name + labels + " " + num + "\n";
    }
  }
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, uint64_t>>>> ports;
  for (const auto& [labels, stats] : wires) {
    if (!stats.port.empty()) ports.emplace_back(labels, stats.port);
  }
  out += port_metrics_prom(ports);
  write_file_atomically(prom_path_, out);
  last_prom_ = std::move(out);
}

}  // namespace megascale::nccl
