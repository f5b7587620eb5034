// perf's figures, table lines and JSON.
#include "megascale/perf/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "megascale/common/percentile.h"
#include "megascale/perf/protocol.h"

namespace megascale::perf {

using nlohmann::json;

BwFigures bw_figures(uint64_t size_bytes, const std::vector<TimeNs>& posted,
                     const std::vector<TimeNs>& completed, uint64_t peak_run) {
  BwFigures f;
  const size_t n = std::min(posted.size(), completed.size());
  if (n == 0) return f;
  const double bits = static_cast<double>(size_bytes) * 8.0;
  const TimeNs elapsed = std::max<TimeNs>(completed[n - 1] - posted[0], 1);
  f.seconds = static_cast<double>(elapsed) / 1e9;
  f.bw_average_gbps = bits * static_cast<double>(n) / static_cast<double>(elapsed);  // bits/ns = Gb/s
  f.msg_rate_mpps = static_cast<double>(n) / static_cast<double>(elapsed) * 1e3;
  // The delivery rate over k consecutive completions, from the completion just before the run (the
  // first post for the first run): the pipeline is full during a run, so queueing behind earlier
  // messages is not counted against it.
  const size_t k = static_cast<size_t>(std::clamp<uint64_t>(peak_run, 1, n));
  for (size_t i = 0; i + k <= n; ++i) {
    const TimeNs start = i == 0 ? posted[0] : completed[i - 1];
    const TimeNs span = std::max<TimeNs>(completed[i + k - 1] - start, 1);
    f.bw_peak_gbps = std::max(f.bw_peak_gbps, bits * static_cast<double>(k) / static_cast<double>(span));
  }
  // A run is never slower than the whole: the peak is at least the average.
  f.bw_peak_gbps = std::max(f.bw_peak_gbps, f.bw_average_gbps);
  return f;
}

BwFigures sum_directions(const BwFigures& a, const BwFigures& b) {
  BwFigures f;
  f.bw_peak_gbps = a.bw_peak_gbps + b.bw_peak_gbps;
  f.bw_average_gbps = a.bw_average_gbps + b.bw_average_gbps;
  f.msg_rate_mpps = a.msg_rate_mpps + b.msg_rate_mpps;
  f.seconds = std::max(a.seconds, b.seconds);
  return f;
}

json to_json(const BwFigures& f) {
  return json{{"bw_peak_gbps", f.bw_peak_gbps},
              {"bw_average_gbps", f.bw_average_gbps},
              {"msg_rate_mpps", f.msg_rate_mpps},
              {"duration_s", f.seconds}};
}

BwFigures bw_figures_from_json(const json& j) {
  BwFigures f;
  f.bw_peak_gbps = j.at("bw_peak_gbps").get<double>();
  f.bw_average_gbps = j.at("bw_average_gbps").get<double>();
  f.msg_rate_mpps = j.at("msg_rate_mpps").get<double>();
  f.seconds = j.at("duration_s").get<double>();
  return f;
}

LatFigures lat_figures(std::vector<TimeNs> v) {
  LatFigures f;
  if (v.empty()) return f;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  auto us_of = [](double ns) { return ns / 1e3; };
  auto nearest_rank = [&](double q) { return us_of(static_cast<double>(percentile_sorted(v, q))); };
  double sum = 0;
  for (TimeNs x : v) sum += static_cast<double>(x);
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (TimeNs x : v) sq += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  f.t_min_us = us_of(static_cast<double>(v.front()));
  f.t_max_us = us_of(static_cast<double>(v.back()));
  f.p50_us = nearest_rank(0.5);
  f.t_typical_us = f.p50_us;
  f.t_avg_us = us_of(mean);
  f.t_stdev_us = us_of(std::sqrt(sq / static_cast<double>(n)));
  f.p99_us = nearest_rank(0.99);
  f.p999_us = nearest_rank(0.999);
  return f;
}

std::string rule_line() {
  return std::string(87, '-');
}

std::string bw_header() {
  return fmt::format(" {:<10} {:<14} {:<18} {:<21} {}", "#bytes", "#iterations", "BW peak[Gb/sec]",
                     "BW average[Gb/sec]", "MsgRate[Mpps]");
}

std::string bw_row_line(const BwRow& r) {
  return fmt::format(" {:<10} {:<14} {:<18.2f} {:<21.2f} {:.6f}", r.size_bytes, r.iterations,
                     r.figures.bw_peak_gbps, r.figures.bw_average_gbps, r.figures.msg_rate_mpps);
}

std::string lat_header() {
  return fmt::format(" {:<10} {:<12} {:<12} {:<12} {:<16} {:<12} {:<14} {:<21} {}", "#bytes", "#iterations",
                     "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]",
                     "99% percentile[usec]", "99.9% percentile[usec]");
}

std::string lat_row_line(const LatRow& r) {
  const LatFigures& f = r.figures;
  return fmt::format(" {:<10} {:<12} {:<12.2f} {:<12.2f} {:<16.2f} {:<12.2f} {:<14.2f} {:<21.2f} {:.2f}",
                     r.size_bytes, r.iterations, f.t_min_us, f.t_max_us, f.t_typical_us, f.t_avg_us,
                     f.t_stdev_us, f.p99_us, f.p999_us);
}

namespace {

std::string us_text(TimeNs ns) {
  return fmt::format("{:.1f} us", static_cast<double>(ns) / 1e3);
}

// "a 1, b 2" of the non-zero counts, in order.
std::string nonzero_list(std::initializer_list<std::pair<const char*, uint64_t>> counts) {
  std::string text;
  for (const auto& [name, n] : counts) {
    if (n == 0) continue;
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", name, n);
  }
  return text;
}

// Only with MEGASCALE_FAULT_* set: how many of each fault the injectors applied in the row.
std::string faults_text(const SideCounters& t) {
  if (t.fault_offered == 0) return "";
  const uint64_t n = faults_injected(t);
  if (n == 0) return fmt::format(", faults injected 0 of {} datagrams", t.fault_offered);
  return fmt::format(", faults injected {} of {} datagrams ({})", n, t.fault_offered,
                     nonzero_list({{"drop", t.fault_dropped},
                                   {"duplicate", t.fault_duplicated},
                                   {"reorder", t.fault_reordered},
                                   {"delay", t.fault_delayed},
                                   {"corrupt", t.fault_corrupted},
                                   {"ce", t.fault_ce_marked}}));
}

// Datagrams the receivers threw away: a payload or header that failed its check, or no such connection.
std::string junk_text(const SideCounters& t) {
  const uint64_t n = junk_dropped(t);
  if (n == 0) return "junk dropped 0";
  return fmt::format("junk dropped {} ({})", n,
                     nonzero_list({{"corrupt payload", t.corrupt_dropped},
                                   {"bad content", t.malformed_dropped},
                                   {"undecodable", t.endpoint_malformed},
                                   {"unknown connection", t.unknown_connection}}));
}

}  // namespace

std::string counters_line(const RowCounters& c) {
  const SideCounters& t = c.total;
  std::string rtt = "rtt -";
  if (rtt_total(t.rtt) > 0) {
    rtt = fmt::format("rtt p50 {} p99 {}", us_text(rtt_percentile_ns(t.rtt, 0.5, t.rtt_max_ns)),
                      us_text(rtt_percentile_ns(t.rtt, 0.99, t.rtt_max_ns)));
  }
  std::string drops = "kernel drops unknown (/proc/net/snmp unreadable)";
  if (t.kernel.ok) {
    drops =
        fmt::format("kernel drops: RcvbufErrors +{} InErrors +{}{}, our sockets +{}", t.kernel.rcvbuf_errors,
                    t.kernel.in_errors, c.same_host ? "" : " (both hosts)", t.kernel.socket_drops);
  }
  // A lane at its controller's floor for seconds while ACKs flow crawls without ever timing out.
  const std::string floor =
      t.floor_stalls ? fmt::format(", WARN lanes stuck at the cc floor {}", t.floor_stalls) : std::string();
  return fmt::format(
      " # retx {} (fast {}, rto {}), timeouts {}, ecn {}, cnp {}, repaths {}, {}, "
      "sends that waited for a credit {} of {}, {}{}, {}{}",
      t.retransmits_fast + t.retransmits_rto, t.retransmits_fast, t.retransmits_rto, t.timeouts, t.ecn_marks,
      t.cnps_received, t.repaths, rtt, t.sends_waited_for_credit, t.sends_posted, drops, faults_text(t),
      junk_text(t), floor);
}

double cpu_seconds(const SideCounters& c) {
  return static_cast<double>(c.cpu_user_ns + c.cpu_sys_ns) / 1e9;
}

double segments_per_cpu_second(const SideCounters& c) {
  const double s = cpu_seconds(c);
  return c.cpu_ok && s > 0 ? static_cast<double>(c.segments_sent) / s : 0.0;
}

bool one_process(const RowCounters& c) {
  return c.same_host && c.client.process_id != 0 && c.client.process_id == c.server.process_id;
}

std::string cpu_line(const RowCounters& c) {
  const SideCounters& t = c.total;
  if (!t.cpu_ok) return " # cpu: not counted (getrusage failed on a side)";
  return fmt::format(
      " # cpu ({}): user {:.3f} s + sys {:.3f} s for {} segments sent ({} received): {:.0f} segments per "
      "CPU-second",
      one_process(c) ? "one process, client and server" : "client + server processes",
      static_cast<double>(t.cpu_user_ns) / 1e9, static_cast<double>(t.cpu_sys_ns) / 1e9, t.segments_sent,
      t.segments_received, segments_per_cpu_second(t));
}

std::string wire_line(const RowCounters& c, uint64_t payload_bytes, uint64_t messages) {
  const SideCounters& t = c.total;
  const double gb = std::max(static_cast<double>(payload_bytes) / 1e9, 1e-12);
  auto per = [](uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  // Only when it happened: most runs have no stalled I/O thread.
  const std::string takeover =
      t.rx_stolen + t.tx_rerouted + t.tx_stolen == 0
          ? ""
          : fmt::format(
                "; stalled I/O threads' work taken over: {} messages received, {} packets rerouted, "
                "{} datagrams sent from their queues",
                t.rx_stolen, t.tx_rerouted, t.tx_stolen);
  // With I/O threads: the share of their awake (polling) time that moved something.
  const std::string busy = t.io_awake_ns == 0
                               ? ""
                               : fmt::format("; I/O threads busy {:.0f}% of their {:.2f} s awake",
                                             100 * per(t.io_busy_ns, t.io_awake_ns), t.io_awake_ns / 1e9);
  return fmt::format(
      " # wire (both sides): per message {:.1f} datagrams, {:.2f} send + {:.2f} recv syscalls, {:.1f} "
      "progress "
      "calls; per GB {:.0f} send + {:.0f} recv syscalls; {:.1f} datagrams per send message ({} GSO), {:.1f} "
      "per "
      "recv message ({} GRO); {:.2f} UDP bytes per payload byte; socket buffer full {}{}{}",
      per(t.datagrams_sent, messages), per(t.send_syscalls, messages), per(t.recv_syscalls, messages),
      per(t.progress_calls, messages), static_cast<double>(t.send_syscalls) / gb,
      static_cast<double>(t.recv_syscalls) / gb, per(t.datagrams_sent, t.send_messages), t.gso_messages,
      per(t.datagrams_received, t.recv_messages), t.gro_messages, per(t.udp_bytes_sent, payload_bytes),
      t.send_dropped_full, busy, takeover);
}

namespace {

json counters_json(const RowCounters& c) {
  const SideCounters& t = c.total;
  return json{{"retransmits", t.retransmits_fast + t.retransmits_rto},
              {"retransmits_fast", t.retransmits_fast},
              {"retransmits_rto", t.retransmits_rto},
              {"timeouts", t.timeouts},
              {"ecn_marks", t.ecn_marks},
              {"cnps", t.cnps_received},
              {"repaths", t.repaths},
              {"floor_stalls", t.floor_stalls},
              {"sends_posted", t.sends_posted},
              {"sends_waited_for_credit", t.sends_waited_for_credit},
              {"rtt_samples", rtt_total(t.rtt)},
              {"rtt_p50_us", static_cast<double>(rtt_percentile_ns(t.rtt, 0.5, t.rtt_max_ns)) / 1e3},
              {"rtt_p99_us", static_cast<double>(rtt_percentile_ns(t.rtt, 0.99, t.rtt_max_ns)) / 1e3},
              {"kernel_counters_read", t.kernel.ok},
              {"kernel_rcvbuf_errors", t.kernel.rcvbuf_errors},
              {"kernel_in_errors", t.kernel.in_errors},
              {"socket_drops", t.kernel.socket_drops},
              {"rx_stolen", t.rx_stolen},
              {"tx_rerouted", t.tx_rerouted},
              {"tx_stolen", t.tx_stolen},
              {"io_awake_ns", t.io_awake_ns},
              {"io_busy_ns", t.io_busy_ns},
              {"faults_injected", faults_injected(t)},
              {"fault_datagrams", t.fault_offered},
              {"fault_dropped", t.fault_dropped},
              {"fault_duplicated", t.fault_duplicated},
              {"fault_reordered", t.fault_reordered},
              {"fault_delayed", t.fault_delayed},
              {"fault_corrupted", t.fault_corrupted},
              {"fault_ce_marked", t.fault_ce_marked},
              {"junk_dropped", junk_dropped(t)},
              {"corrupt_dropped", t.corrupt_dropped},
              {"malformed_dropped", t.malformed_dropped},
              {"endpoint_malformed", t.endpoint_malformed},
              {"unknown_connection", t.unknown_connection},
              {"segments_sent", t.segments_sent},
              {"segments_received", t.segments_received},
              {"cpu_counted", t.cpu_ok},
              {"cpu_user_s", static_cast<double>(t.cpu_user_ns) / 1e9},
              {"cpu_sys_s", static_cast<double>(t.cpu_sys_ns) / 1e9},
              {"cpu_s", cpu_seconds(t)},
              {"segments_per_cpu_s", segments_per_cpu_second(t)},
              {"one_process", one_process(c)},
              {"same_host", c.same_host},
              {"client", to_json(c.client)},
              {"server", to_json(c.server)}};
}

}  // namespace

json bw_row_json(const BwRow& r) {
  json j = to_json(r.figures);  // bw_peak_gbps, bw_average_gbps, msg_rate_mpps, duration_s
  j.update(json{{"size_bytes", r.size_bytes},
                {"iterations", r.iterations},
                {"window", r.window},
                {"bidirectional", r.bidirectional},
                {"verified_messages", r.verified_messages},
                {"counters", counters_json(r.counters)}});
  if (r.bidirectional) {
    j["client_to_server"] = to_json(r.forward);
    j["server_to_client"] = to_json(r.reverse);
  }
  return j;
}

json lat_row_json(const LatRow& r) {
  const LatFigures& f = r.figures;
  return json{{"size_bytes", r.size_bytes},
              {"iterations", r.iterations},
              {"t_min_us", f.t_min_us},
              {"t_max_us", f.t_max_us},
              {"t_typical_us", f.t_typical_us},
              {"t_avg_us", f.t_avg_us},
              {"t_stdev_us", f.t_stdev_us},
              {"t_p50_us", f.p50_us},
              {"t_p99_us", f.p99_us},
              {"t_p999_us", f.p999_us},
              {"verified_messages", r.verified_messages},
              {"counters", counters_json(r.counters)}};
}

namespace {

RowCounters counters_from_json(const json& j) {
  RowCounters c;
  c.same_host = j.at("same_host").get<bool>();
  c.client = side_counters_from_json(j.at("client"));
  c.server = side_counters_from_json(j.at("server"));
  c.total = sum_sides(c.client, c.server, c.same_host);
  return c;
}

}  // namespace

Result<BwRow> bw_row_from_json(const json& j) {
  try {
    BwRow r;
    r.figures = bw_figures_from_json(j);
    r.size_bytes = j.at("size_bytes").get<uint64_t>();
    r.iterations = j.at("iterations").get<uint64_t>();
    r.window = j.at("window").get<uint32_t>();
    r.bidirectional = j.at("bidirectional").get<bool>();
    r.verified_messages = j.at("verified_messages").get<uint64_t>();
    r.counters = counters_from_json(j.at("counters"));
    if (r.bidirectional) {
      r.forward = bw_figures_from_json(j.at("client_to_server"));
      r.reverse = bw_figures_from_json(j.at("server_to_client"));
    }
    return r;
  } catch (const json::exception& e) {
    return make_error(std::string("malformed bw row: ") + e.what());
  }
}

Result<LatRow> lat_row_from_json(const json& j) {
  try {
    LatRow r;
    r.size_bytes = j.at("size_bytes").get<uint64_t>();
    r.iterations = j.at("iterations").get<uint64_t>();
    LatFigures& f = r.figures;
    f.t_min_us = j.at("t_min_us").get<double>();
    f.t_max_us = j.at("t_max_us").get<double>();
    f.t_typical_us = j.at("t_typical_us").get<double>();
    f.t_avg_us = j.at("t_avg_us").get<double>();
    f.t_stdev_us = j.at("t_stdev_us").get<double>();
    f.p50_us = j.at("t_p50_us").get<double>();
    f.p99_us = j.at("t_p99_us").get<double>();
    f.p999_us = j.at("t_p999_us").get<double>();
    r.verified_messages = j.at("verified_messages").get<uint64_t>();
    r.counters = counters_from_json(j.at("counters"));
    return r;
  } catch (const json::exception& e) {
    return make_error(std::string("malformed latency row: ") + e.what());
  }
}

json report_json(const PerfReport& r) {
  json bw = json::array();
  for (const BwRow& row : r.bw) bw.push_back(bw_row_json(row));
  json lat = json::array();
  for (const LatRow& row : r.lat) lat.push_back(lat_row_json(row));
  json out{{"config", r.config}, {"bw", bw}, {"lat", lat}};
  if (!r.baseline.is_null()) out["baseline"] = r.baseline;
  return out;
}

}  // namespace megascale::perf
