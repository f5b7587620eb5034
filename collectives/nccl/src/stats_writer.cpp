// JSON lines and Prometheus textfile of per-connection counters (see stats_writer.h).
#include "stats_writer.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <functional>
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

struct Metric {
  const char* name;
  const char* help;
  bool counter;
  std::function<double(const Snapshot&)> value;
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
      {"bytes_sent", "Payload bytes sent, retransmissions included.", true,
       [](S s) { return double(s.stats.bytes_sent); }},
      {"segments_sent", "Segments sent (data and credits), retransmissions included.", true,
       [](S s) { return double(s.stats.segments_sent); }},
      {"bytes_acked", "Payload bytes acknowledged by the peer.", true,
       [](S s) { return double(s.stats.bytes_acked); }},
      {"retransmits_fast", "Segments retransmitted after SACK/RACK loss detection.", true,
       [](S s) { return double(s.stats.retransmits_fast); }},
      {"retransmits_rto", "Segments retransmitted after a retransmission timeout.", true,
       [](S s) { return double(s.stats.retransmits_rto); }},
      {"timeouts", "Retransmission timeouts.", true, [](S s) { return double(s.stats.timeouts); }},
      {"tail_probes", "Segments sent again as tail-loss probes (not counted as retransmissions).", true,
       [](S s) { return double(s.stats.tail_probes); }},
      {"timeouts_spurious", "Retransmission timeouts undone: the original copies arrived after all.", true,
       [](S s) { return double(s.stats.timeouts_spurious); }},
      {"floor_stalls",
       "Lanes that stayed at the congestion controller's floor for seconds while ACKs arrived.", true,
       [](S s) { return double(s.stats.floor_stalls); }},
      {"ecn_marks", "CE marks echoed by the peer.", true, [](S s) { return double(s.stats.ecn_marks); }},
      {"cnps_received", "DCQCN congestion notifications received.", true,
       [](S s) { return double(s.stats.cnps_received); }},
      {"repaths", "Lanes moved to a new path (UDP source port).", true,
       [](S s) { return double(s.stats.repaths); }},
      {"bytes_received", "Payload bytes placed into receive buffers.", true,
       [](S s) { return double(s.stats.bytes_received); }},
      {"segments_received", "New segments accepted.", true,
       [](S s) { return double(s.stats.segments_received); }},
      {"segments_unchecked",
       "New segments that came without a payload CRC (the peer's MEGASCALE_PAYLOAD_CRC=0).", true,
       [](S s) { return double(s.stats.segments_unchecked); }},
      {"ce_received", "Arriving segments marked CE.", true, [](S s) { return double(s.stats.ce_received); }},
      {"duplicates_dropped", "Duplicate segments dropped.", true,
       [](S s) { return double(s.stats.duplicates_dropped); }},
      {"corrupt_dropped", "Segments dropped for a payload CRC mismatch.", true,
       [](S s) { return double(s.stats.corrupt_dropped); }},
      {"malformed_dropped", "Packets dropped as malformed.", true,
       [](S s) { return double(s.stats.malformed_dropped); }},
      {"sends_completed", "Messages sent and acknowledged.", true,
       [](S s) { return double(s.stats.sends_completed); }},
      {"sends_failed", "Sends that failed.", true, [](S s) { return double(s.stats.sends_failed); }},
      {"sends_waited_for_credit",
       "Sends posted before the peer's receive had arrived (its credit): each waited a one-way trip at "
       "least.",
       true, [](S s) { return double(s.stats.sends_waited_for_credit); }},
      {"recvs_completed", "Messages received.", true, [](S s) { return double(s.stats.recvs_completed); }},
      {"recvs_failed", "Receives that failed.", true, [](S s) { return double(s.stats.recvs_failed); }},
      {"nccl_requests_completed", "Requests reported done to NCCL.", true,
       [](S s) { return double(s.nccl.completed); }},
      {"nccl_retry_later", "isend/irecv calls answered 'retry later' (no free request).", true,
       [](S s) { return double(s.nccl.retry_later); }},
      {"nccl_post_call_seconds",
       "Time NCCL's proxy thread spent inside isend/irecv (taking the wire's lock).", true,
       [](S s) { return double(s.post_call_ns) / 1e9; }},
      {"nccl_test_call_seconds", "Time NCCL's proxy thread spent inside test().", true,
       [](S s) { return double(s.test_call_ns) / 1e9; }},
      {"nccl_test_calls", "test() calls.", true, [](S s) { return double(s.test_calls); }},
      {"request_latency_p50_seconds",
       "Median time from isend/irecv to test() reporting done (a send's includes its acknowledgment).", false,
       [](S s) { return double(s.nccl.request_latency.percentile_ns(0.5)) / 1e9; }},
      {"request_latency_p99_seconds", "99th percentile time from isend/irecv to test() reporting done.",
       false, [](S s) { return double(s.nccl.request_latency.percentile_ns(0.99)) / 1e9; }},
      {"request_wait_p50_seconds",
       "Median time from isend/irecv to the first segment released (a send: the peer's credit, earlier "
       "sends, the window) or placed (a receive: waiting for the sender).",
       false, [](S s) { return phase_p50(s, CommBase::kWait); }},
      {"request_transfer_p50_seconds",
       "Median time from a request's first segment released (placed) to its last.", false,
       [](S s) { return phase_p50(s, CommBase::kTransfer); }},
      {"request_ack_p50_seconds",
       "Sends: median time from the last segment released to the ACK that finished the send.", false,
       [](S s) { return phase_p50(s, CommBase::kAck); }},
      {"request_report_p50_seconds",
       "Median time from the transport finishing a request to test() reporting it done (a send: the "
       "I/O threads' TX fence; both: NCCL's next test()).",
       false, [](S s) { return phase_p50(s, CommBase::kReport); }},
      {"rtt_p50_seconds", "Median RTT sample.", false,
       [](S s) { return double(s.stats.rtt.percentile_ns(0.5)) / 1e9; }},
      {"rtt_p99_seconds", "99th percentile RTT sample.", false,
       [](S s) { return double(s.stats.rtt.percentile_ns(0.99)) / 1e9; }},
      {"fabric_delay_p50_seconds",
       "Median RTT sample less the receiver's echoed delay: the delay the delay-based controllers compare "
       "with their targets.",
       false, [](S s) { return double(s.stats.fabric_delay.percentile_ns(0.5)) / 1e9; }},
      {"rx_delay_p50_seconds",
       "Median time from a packet's kernel receive timestamp to the engine processing it: this host's "
       "hand-overs (I/O thread, wire thread), not the network.",
       false, [](S s) { return double(s.stats.rx_delay.percentile_ns(0.5)) / 1e9; }},
      {"rx_delay_p99_seconds", "99th percentile of the same.", false,
       [](S s) { return double(s.stats.rx_delay.percentile_ns(0.99)) / 1e9; }},
      {"cwnd_bytes", "Sum of the lanes' congestion windows.", false,
       [](S s) { return lanes_sum(s, &engine::LaneStats::cwnd_bytes); }},
      {"pacing_rate_bps", "Sum of the lanes' pacing rates.", false,
       [](S s) { return lanes_sum(s, &engine::LaneStats::pacing_rate_bps); }},
  };
  return table;
}

const char* role_name(const CommBase* c) {
  return c->role == Role::kSend ? "send" : "recv";
}

// The fields every record starts with.
nlohmann::json record(const char* event, TimeNs now) {
  return {{"event", event},
          {"time_unix_ms", static_cast<int64_t>(std::time(nullptr)) * 1000},
          {"monotonic_ns", now},
          {"pid", static_cast<int64_t>(::getpid())}};
}

// A metric's "# HELP" and "# TYPE" lines in the textfile.
void prom_metadata(std::string& out, const std::string& name, const char* help, bool counter) {
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + (counter ? " counter\n" : " gauge\n");
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
  for (const Metric& m : metrics()) e[m.name] = m.value(s);
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
              {"io_thread_sleeps", w.io_thread_sleeps},
              {"io_awake_ns", w.io_awake_ns},
              {"io_busy_ns", w.io_busy_ns},
              {"rx_stolen", w.rx_stolen},
              {"tx_rerouted", w.tx_rerouted},
              {"tx_stolen", w.tx_stolen},
              {"recv_messages_per_io_thread", w.recv_messages_per_io_thread}};
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
                "The value of each plugin knob in force, and its source (environment or default).", false);
  for (const Setting& r : p.settings) {
    out += "megascale_nccl_setting_info{name=\"" + label_value(r.name) + "\",value=\"" +
           label_value(r.value) + "\",source=\"" + label_value(r.source) + "\"} 1\n";
  }
  const LayoutRecord& l = p.layout;
  prom_metadata(out, "megascale_nccl_layout_info",
                "The thread layout in force; source is auto (the plugin's rule) or environment.", false);
  out += "megascale_nccl_layout_info{wires=\"" + std::to_string(l.wires) + "\",io_threads=\"" +
         std::to_string(l.io_threads) + "\",lanes=\"" + std::to_string(l.lanes) + "\",stripes=\"" +
         std::to_string(l.stripes) + "\",stripe_bytes=\"" + std::to_string(l.stripe_bytes) + "\",source=\"" +
         label_value(l.source.substr(0, l.source.find(':'))) + "\"} 1\n";
  return out;
}

}  // namespace

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

void StatsWriter::configure(const std::string& dir, TimeNs interval_ns, const PluginSettings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dir.empty()) return;
  const std::string base = dir + "/megascale-nccl-" + host_name() + "-" + std::to_string(::getpid());
  jsonl_path_ = base + ".jsonl";
  prom_path_ = base + ".prom";
  interval_ns_ = interval_ns;
  settings_prom_ = settings_prom(settings);
  next_ns_.store(0, std::memory_order_relaxed);
  enabled_.store(true, std::memory_order_release);
  append_lines(jsonl_path_, {settings_line(settings, wire::UdpWire::now())});
  write_prom_locked();
}

void StatsWriter::add(CommBase* comm) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  comms_.insert(comm);
}

void StatsWriter::remove(CommBase* comm) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (comms_.erase(comm) == 0) return;
  const Snapshot s = take_snapshot(comm);
  append_lines(jsonl_path_, {to_json(s, "close", wire::UdpWire::now()).dump()});
  if (s.found) {
    for (const Metric& m : metrics()) {
      if (!m.counter) continue;
      closed_totals_[std::string(m.name) + "\x1f" + comm->ifname + "\x1f" + role_name(comm)] += m.value(s);
    }
  }
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
  for (const Metric& m : metrics()) {
    const std::string name = std::string("megascale_nccl_") + m.name + (m.counter ? "_total" : "");
    prom_metadata(out, name, m.help, m.counter);
    for (const Snapshot& s : snaps) {
      if (!s.found) continue;
      std::snprintf(num, sizeof num, "%.17g", m.value(s));
      out += name + "{ifname=\"" + label_value(s.comm->ifname) + "\",role=\"" + role_name(s.comm) +
             "\",conn=\"" + id_hex(s.comm->conn()) + "\",peer=\"" + label_value(s.comm->peer) + "\"} " + num +
             "\n";
    }
    if (!m.counter) continue;
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
  std::vector<std::pair<std::string, wire::UdpWireStats>> wires;  // (label set, stats) per wire
  for (const auto& [w, ifname] : wires_) {
    wires.emplace_back("{ifname=\"" + label_value(ifname) + "\",wire=\"" + std::to_string(w->index()) +
                           "\",dscp=\"" + std::to_string(w->dscp()) + "\"}",
                       w->udp().stats());
  }
  for (const WireMetric& m : kWireMetrics) {
    const std::string name = std::string("megascale_nccl_wire_") + m.name + "_total";
    prom_metadata(out, name, m.help, true);
    for (const auto& [labels, stats] : wires)
      out += name + labels + " " + std::to_string(stats.*m.field) + "\n";
  }
  // The I/O threads' time in seconds, as Prometheus wants durations: rate(busy) / rate(awake) is the
  // share of their polling that moved something.
  for (const WireMetric& m : kWireSeconds) {
    const std::string name = std::string("megascale_nccl_wire_") + m.name + "_seconds_total";
    prom_metadata(out, name, m.help, true);
    for (const auto& [labels, stats] : wires) {
      std::snprintf(num, sizeof num, "%.9f", static_cast<double>(stats.*m.field) / 1e9);
      out += name + labels + " " + num + "\n";
    }
  }
  const std::string tmp = prom_path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), prom_path_.c_str());
}

}  // namespace megascale::nccl
