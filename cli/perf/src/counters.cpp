// Row counters: engine and wire statistics, kernel UDP drops, RTT histogram differences.
#include "megascale/perf/counters.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "megascale/common/percentile.h"

namespace megascale::perf {
namespace {

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool to_u64(std::string_view s, uint64_t& v, int base = 10) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string read_file(const char* path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

Result<KernelUdp> parse_snmp_udp(std::string_view text) {
  const std::vector<std::string_view> lines = lines_of(text);
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (!lines[i].starts_with("Udp: ") || !lines[i + 1].starts_with("Udp: ")) continue;
    const auto names = split_ws(lines[i]);
    const auto values = split_ws(lines[i + 1]);
    if (names.size() != values.size()) return make_error("/proc/net/snmp: Udp lines differ in length");
    KernelUdp k;
    bool have_rcvbuf = false, have_in = false;
    for (size_t c = 1; c < names.size(); ++c) {
      uint64_t v = 0;
      if (!to_u64(values[c], v)) continue;
      if (names[c] == "RcvbufErrors") k.rcvbuf_errors = v, have_rcvbuf = true;
      if (names[c] == "InErrors") k.in_errors = v, have_in = true;
    }
    if (!have_rcvbuf || !have_in) return make_error("/proc/net/snmp: no Udp RcvbufErrors/InErrors");
    k.ok = true;
    return k;
  }
  return make_error("/proc/net/snmp: no Udp: lines");
}

void add_snmp6_udp(std::string_view text, KernelUdp& into) {
  for (std::string_view line : lines_of(text)) {
    const auto f = split_ws(line);
    if (f.size() != 2) continue;
    uint64_t v = 0;
    if (!to_u64(f[1], v)) continue;
    if (f[0] == "Udp6RcvbufErrors") into.rcvbuf_errors += v;
    if (f[0] == "Udp6InErrors") into.in_errors += v;
  }
}

uint64_t socket_drops_for_ports(std::string_view text, const std::vector<uint16_t>& ports) {
  uint64_t drops = 0;
  for (std::string_view line : lines_of(text)) {
    // "  sl  local_address rem_address st ... ref pointer drops"; local_address is HEXADDR:HEXPORT.
    const auto f = split_ws(line);
    if (f.size() < 13 || f[0] == "sl") continue;
    const size_t colon = f[1].rfind(':');
    if (colon == std::string_view::npos) continue;
    uint64_t port = 0, d = 0;
    if (!to_u64(f[1].substr(colon + 1), port, 16) || !to_u64(f.back(), d)) continue;
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) drops += d;
  }
  return drops;
}

KernelUdp read_kernel_udp(const std::vector<uint16_t>& ports) {
  Result<KernelUdp> k = parse_snmp_udp(read_file("/proc/net/snmp"));
  if (!k) return KernelUdp{};
  add_snmp6_udp(read_file("/proc/net/snmp6"), *k);
  k->socket_drops = socket_drops_for_ports(read_file("/proc/net/udp"), ports) +
                    socket_drops_for_ports(read_file("/proc/net/udp6"), ports);
  return *k;
}

RttCounts rtt_counts(const engine::RttHistogram& h) {
  RttCounts counts{};
  for (int b = 0; b < engine::RttHistogram::kBuckets; ++b) counts[static_cast<size_t>(b)] = h.bucket_count(b);
  return counts;
}

uint64_t rtt_total(const RttCounts& c) {
  uint64_t n = 0;
  for (uint64_t v : c) n += v;
  return n;
}

TimeNs rtt_percentile_ns(const RttCounts& c, double q, TimeNs max_ns) {
  const uint64_t n = rtt_total(c);
  if (n == 0) return 0;
  const size_t b = quantile_bucket(c, n, q);
  if (b == c.size()) return max_ns;
  // No sample of the row exceeds the histogram's all-time max: it bounds the top bucket.
  const TimeNs upper = engine::RttHistogram::bucket_upper_ns(static_cast<int>(b));
  return max_ns > 0 ? std::min(upper, max_ns) : upper;
}

ProcessCpu read_process_cpu() {
  ProcessCpu cpu;
  cpu.process_id = static_cast<uint64_t>(getpid());
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return cpu;
  const auto ns = [](const timeval& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(t.tv_usec) * 1000ULL;
  };
  cpu.ok = true;
  cpu.user_ns = ns(ru.ru_utime);
  cpu.sys_ns = ns(ru.ru_stime);
  return cpu;
}

SideSnapshot take_snapshot(wire::UdpWire& w, engine::ConnId conn) {
  SideSnapshot s;
  w.with_endpoint([&](engine::Endpoint& ep) {
    if (const engine::Connection* c = ep.connection(conn)) s.conn = c->stats();
    s.endpoint = ep.stats();
  });
  s.rtt = rtt_counts(s.conn.rtt);
  s.wire = w.stats();
  s.kernel = read_kernel_udp(w.capabilities().ports);
  s.cpu = read_process_cpu();
  return s;
}

SideCounters side_delta(const SideSnapshot& a, const SideSnapshot& b) {
  SideCounters d;
  const engine::ConnectionStats& x = a.conn;
  const engine::ConnectionStats& y = b.conn;
  d.retransmits_fast = y.retransmits_fast - x.retransmits_fast;
  d.retransmits_rto = y.retransmits_rto - x.retransmits_rto;
  d.timeouts = y.timeouts - x.timeouts;
  d.ecn_marks = y.ecn_marks - x.ecn_marks;
  d.cnps_received = y.cnps_received - x.cnps_received;
  d.repaths = y.repaths - x.repaths;
  d.floor_stalls = y.floor_stalls - x.floor_stalls;
  d.bytes_sent = y.bytes_sent - x.bytes_sent;
  d.sends_posted = y.sends_posted - x.sends_posted;
  d.sends_waited_for_credit = y.sends_waited_for_credit - x.sends_waited_for_credit;
  d.bytes_received = y.bytes_received - x.bytes_received;
  d.ce_received = y.ce_received - x.ce_received;
  d.cnps_sent = y.cnps_sent - x.cnps_sent;
  d.duplicates_dropped = y.duplicates_dropped - x.duplicates_dropped;
  d.corrupt_dropped = y.corrupt_dropped - x.corrupt_dropped;
  d.malformed_dropped = y.malformed_dropped - x.malformed_dropped;
  d.endpoint_malformed = b.endpoint.malformed_dropped - a.endpoint.malformed_dropped;
  d.unknown_connection = b.endpoint.unknown_connection - a.endpoint.unknown_connection;
  for (size_t i = 0; i < d.rtt.size(); ++i) d.rtt[i] = b.rtt[i] >= a.rtt[i] ? b.rtt[i] - a.rtt[i] : 0;
  d.rtt_max_ns = y.rtt.max_ns();
  const wire::UdpWireStats& u = a.wire;
  const wire::UdpWireStats& v = b.wire;
  d.datagrams_sent = v.datagrams_sent - u.datagrams_sent;
  d.datagrams_received = v.datagrams_received - u.datagrams_received;
  d.udp_bytes_sent = v.bytes_sent - u.bytes_sent;
  d.send_syscalls = v.send_syscalls - u.send_syscalls;
  d.send_messages = v.send_messages - u.send_messages;
  d.gso_messages = v.gso_messages - u.gso_messages;
  d.recv_syscalls = v.recv_syscalls - u.recv_syscalls;
  d.recv_messages = v.recv_messages - u.recv_messages;
  d.gro_messages = v.gro_messages - u.gro_messages;
  d.send_dropped_full = v.send_dropped_full - u.send_dropped_full;
  d.progress_calls = v.progress_calls - u.progress_calls;
  d.clock_reads = v.clock_reads - u.clock_reads;
  d.wake_reads = v.wake_reads - u.wake_reads;
  d.fault_offered = v.fault.datagrams - u.fault.datagrams;
  d.fault_dropped = v.fault.dropped - u.fault.dropped;
  d.fault_duplicated = v.fault.duplicated - u.fault.duplicated;
  d.fault_reordered = v.fault.reordered - u.fault.reordered;
  d.fault_delayed = v.fault.delayed - u.fault.delayed;
  d.fault_corrupted = v.fault.corrupted - u.fault.corrupted;
  d.fault_ce_marked = v.fault.ce_marked - u.fault.ce_marked;
  d.rx_stolen = v.rx_stolen - u.rx_stolen;
  d.tx_rerouted = v.tx_rerouted - u.tx_rerouted;
  d.tx_stolen = v.tx_stolen - u.tx_stolen;
  d.io_awake_ns = v.io_awake_ns - u.io_awake_ns;
  d.io_busy_ns = v.io_busy_ns - u.io_busy_ns;
  d.kernel.ok = a.kernel.ok && b.kernel.ok;
  if (d.kernel.ok) {
    d.kernel.rcvbuf_errors = b.kernel.rcvbuf_errors - a.kernel.rcvbuf_errors;
    d.kernel.in_errors = b.kernel.in_errors - a.kernel.in_errors;
    d.kernel.socket_drops = b.kernel.socket_drops - a.kernel.socket_drops;
  }
  d.segments_sent = y.segments_sent - x.segments_sent;
  d.segments_received = y.segments_received - x.segments_received;
  d.process_id = b.cpu.process_id;
  d.cpu_ok = a.cpu.ok && b.cpu.ok && a.cpu.process_id == b.cpu.process_id;
  if (d.cpu_ok) {
    d.cpu_user_ns = b.cpu.user_ns - a.cpu.user_ns;
    d.cpu_sys_ns = b.cpu.sys_ns - a.cpu.sys_ns;
  }
  return d;
}

SideCounters sum_sides(const SideCounters& a, const SideCounters& b, bool same_host) {
  SideCounters s = a;
  s.retransmits_fast += b.retransmits_fast;
  s.retransmits_rto += b.retransmits_rto;
  s.timeouts += b.timeouts;
  s.ecn_marks += b.ecn_marks;
  s.cnps_received += b.cnps_received;
  s.repaths += b.repaths;
  s.floor_stalls += b.floor_stalls;
  s.bytes_sent += b.bytes_sent;
  s.sends_posted += b.sends_posted;
  s.sends_waited_for_credit += b.sends_waited_for_credit;
  s.bytes_received += b.bytes_received;
  s.ce_received += b.ce_received;
  s.cnps_sent += b.cnps_sent;
  s.duplicates_dropped += b.duplicates_dropped;
  s.corrupt_dropped += b.corrupt_dropped;
  s.malformed_dropped += b.malformed_dropped;
  s.endpoint_malformed += b.endpoint_malformed;
  s.unknown_connection += b.unknown_connection;
  for (size_t i = 0; i < s.rtt.size(); ++i) s.rtt[i] += b.rtt[i];
  s.rtt_max_ns = std::max(a.rtt_max_ns, b.rtt_max_ns);
  s.datagrams_sent += b.datagrams_sent;
  s.datagrams_received += b.datagrams_received;
  s.udp_bytes_sent += b.udp_bytes_sent;
  s.send_syscalls += b.send_syscalls;
  s.send_messages += b.send_messages;
  s.gso_messages += b.gso_messages;
  s.recv_syscalls += b.recv_syscalls;
  s.recv_messages += b.recv_messages;
  s.gro_messages += b.gro_messages;
  s.send_dropped_full += b.send_dropped_full;
  s.progress_calls += b.progress_calls;
  s.clock_reads += b.clock_reads;
  s.wake_reads += b.wake_reads;
  s.fault_offered += b.fault_offered;
  s.fault_dropped += b.fault_dropped;
  s.fault_duplicated += b.fault_duplicated;
  s.fault_reordered += b.fault_reordered;
  s.fault_delayed += b.fault_delayed;
  s.fault_corrupted += b.fault_corrupted;
  s.fault_ce_marked += b.fault_ce_marked;
  s.rx_stolen += b.rx_stolen;
  s.tx_rerouted += b.tx_rerouted;
  s.tx_stolen += b.tx_stolen;
  s.io_awake_ns += b.io_awake_ns;
  s.io_busy_ns += b.io_busy_ns;
  s.kernel.ok = a.kernel.ok && b.kernel.ok;
  s.kernel.socket_drops += b.kernel.socket_drops;  // different sockets: both count
  if (!same_host) {
    s.kernel.rcvbuf_errors += b.kernel.rcvbuf_errors;
    s.kernel.in_errors += b.kernel.in_errors;
  }
  s.segments_sent += b.segments_sent;
  s.segments_received += b.segments_received;
  s.cpu_ok = a.cpu_ok && b.cpu_ok;
  if (same_host && a.process_id != 0 && a.process_id == b.process_id) {
    s.cpu_user_ns = std::max(a.cpu_user_ns, b.cpu_user_ns);
    s.cpu_sys_ns = std::max(a.cpu_sys_ns, b.cpu_sys_ns);
  } else {
    s.cpu_user_ns += b.cpu_user_ns;
    s.cpu_sys_ns += b.cpu_sys_ns;
  }
  return s;
}

uint64_t faults_injected(const SideCounters& c) {
  return c.fault_dropped + c.fault_duplicated + c.fault_reordered + c.fault_delayed + c.fault_corrupted +
         c.fault_ce_marked;
}

uint64_t junk_dropped(const SideCounters& c) {
  return c.corrupt_dropped + c.malformed_dropped + c.endpoint_malformed + c.unknown_connection;
}

std::string port_counters_text(const wire::UdpWireStats& w) {
  std::string out;
  for (const auto& [name, value] : w.port) {
    out += (out.empty() ? "; port: " : ", ") + name + " " + std::to_string(value);
  }
  return out;
}

}  // namespace megascale::perf
