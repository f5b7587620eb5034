// The UDP wire's configuration: validation, the software-path floors, the engine seed and the clock.
#include <sched.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "io.h"
#include "megascale/wire/udp.h"

namespace megascale::wire {

TimeNs UdpWire::now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

Status validate_udp_config(const UdpConfig& c) {
  auto bad = [](const std::string& what) { return make_error("udp config: " + what); };
  if (c.bind_host.empty()) return bad("bind_host is empty");
  if (c.sockets > 1024) return bad("sockets=" + std::to_string(c.sockets) + ": at most 1024");
  if (c.bind_port != 0 && c.sockets > 0 && uint32_t{c.bind_port} + c.sockets - 1 > 65535) {
    return bad("bind_port=" + std::to_string(c.bind_port) + " with " + std::to_string(c.sockets) +
               " sockets runs past port 65535");
  }
  if (!c.source_ports.empty()) {
    if (c.bind_port != 0 || c.sockets != 0) {
      return bad("source_ports given with bind_port=" + std::to_string(c.bind_port) +
                 " sockets=" + std::to_string(c.sockets) + ": explicit ports set both; leave those 0");
    }
    if (c.source_ports.size() > 1024) {
      return bad("source_ports has " + std::to_string(c.source_ports.size()) + " ports: at most 1024");
    }
    for (size_t i = 0; i < c.source_ports.size(); ++i) {
      if (c.source_ports[i] == 0) {
        return bad("source_ports[" + std::to_string(i) + "]=0: ports are 1..65535 (0 would be ephemeral)");
      }
      for (size_t j = 0; j < i; ++j) {
        if (c.source_ports[j] == c.source_ports[i]) {
          return bad("source_ports[" + std::to_string(i) + "]=" + std::to_string(c.source_ports[i]) +
                     " repeats source_ports[" + std::to_string(j) + "]: ports must be distinct");
        }
      }
    }
  }
  if (c.dscp > 63) return bad("dscp=" + std::to_string(c.dscp) + ": a DSCP code point is 0..63");
  if (c.batch < 1 || c.batch > 1024) return bad("batch=" + std::to_string(c.batch) + ": must be 1..1024");
  if (c.socket_buffer_bytes <= 0) {
    return bad("socket_buffer_bytes=" + std::to_string(c.socket_buffer_bytes) + ": must be > 0");
  }
  if (c.max_peers < 1) return bad("max_peers must be >= 1");
  if (c.io_threads > 64) return bad("io_threads=" + std::to_string(c.io_threads) + ": at most 64");
  if (c.spin_ns < 0) return bad("spin_ns=" + std::to_string(c.spin_ns) + ": must be >= 0");
  if (c.idle_poll_ns < 0) return bad("idle_poll_ns=" + std::to_string(c.idle_poll_ns) + ": must be >= 0");
  if (c.stall_ns < 0 || c.stall_ns > kNsPerSec) {
    return bad("stall_ns=" + std::to_string(c.stall_ns) + ": must be in 0..1 s");
  }
  if (c.help_after_ns < 0 || c.help_after_ns > kNsPerSec) {
    return bad("help_after_ns=" + std::to_string(c.help_after_ns) + ": must be in 0..1 s");
  }
  if (c.pending_poll_ns < 0 || c.pending_poll_ns > 10 * kNsPerSec) {
    return bad("pending_poll_ns=" + std::to_string(c.pending_poll_ns) + ": must be in 0..10 s");
  }
  if (Status s = validate_fault_config(c.fault, "udp config"); !s) return s;
  if (c.pacer_burst_floor_bytes > (64ULL << 20)) {
    return bad("pacer_burst_floor_bytes=" + std::to_string(c.pacer_burst_floor_bytes) + ": at most 64 MiB");
  }
  if (c.min_rto_floor_ns < 0 || c.min_rto_floor_ns > c.engine.cc.rto.max_rto_ns) {
    return bad("min_rto_floor_ns=" + std::to_string(c.min_rto_floor_ns) +
               ": must be in 0..engine.cc.rto.max_rto_ns");
  }
  return {};
}

Result<std::vector<uint16_t>> parse_source_ports(std::string_view text) {
  std::vector<uint16_t> ports;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    uint32_t value = 0;
    bool ok = !item.empty() && item.size() <= 5;
    for (char ch : item) {
      if (ch < '0' || ch > '9') ok = false;
      value = value * 10 + static_cast<uint32_t>(ch - '0');
    }
    if (!ok || value < 1 || value > 65535) {
      std::string msg = "'";
      msg.append(item).append("' is not a port (1..65535) in '").append(text).append("'");
      return make_error(std::move(msg));
    }
    for (uint16_t p : ports) {
      if (p == value)
        return make_error("port " + std::to_string(value) + " is listed twice: ports must be distinct");
    }
    ports.push_back(static_cast<uint16_t>(value));
    if (ports.size() > 1024) return make_error("more than 1024 ports");
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ports;
}

UdpConfig detail::with_software_floors(UdpConfig c) {
  if (!c.fixed_seed) c.engine.seed = random_engine_seed();
  cc::PacerParams& pacer = c.engine.cc.pacer;
  pacer.burst_bytes = std::max(pacer.burst_bytes, c.pacer_burst_floor_bytes);
  cc::RtoParams& rto = c.engine.cc.rto;
  rto.min_rto_ns = std::max(rto.min_rto_ns, c.min_rto_floor_ns);
  rto.initial_rto_ns = std::max(rto.initial_rto_ns, rto.min_rto_ns);
  // I/O threads compute the payload CRCs of what they send.
  c.engine.wire_seals_payload_crc = c.io_threads > 0;
  // Polling while requests are pending is never shorter than polling after traffic.
  c.pending_poll_ns = std::max(c.pending_poll_ns, c.idle_poll_ns);
  return c;
}

std::string UdpCapabilities::describe() const {
  std::string ports_text;
  for (size_t i = 0; i < ports.size(); ++i) {
    if (i > 0) ports_text.push_back(',');
    ports_text.append(std::to_string(ports[i]));
  }
  return std::string("udp ") + (ipv6 ? "ipv6" : "ipv4") + ", ports " + ports_text + ", gso " +
         (gso ? "on" : "off") + ", gro " + (gro ? "on" : "off") + ", ecn send " + (ecn_send ? "on" : "off") +
         " recv " + (ecn_recv ? "on" : "off") + ", rx timestamps " + (rx_timestamps ? "on" : "off") +
         ", sndbuf " + std::to_string(sndbuf_bytes) + " B, rcvbuf " + std::to_string(rcvbuf_bytes) + " B" +
         (rx_group > 0 ? ", rx group " + std::to_string(rx_group) + " by " + rx_spread : std::string());
}

uint64_t random_engine_seed() {
  uint64_t r[2] = {};
  size_t got = 0;
  while (got < sizeof r) {
    const ssize_t n = getrandom(reinterpret_cast<uint8_t*>(r) + got, sizeof r - got, 0);
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) got += static_cast<size_t>(n);
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = r[0] ^ (static_cast<uint64_t>(getpid()) << 32) ^ static_cast<uint64_t>(ts.tv_nsec) ^
               (static_cast<uint64_t>(ts.tv_sec) * 0x9E3779B97F4A7C15ULL);
  // SplitMix64's finalizer, so that seeds differing in one bit share nothing.
  x += 0x9E3779B97F4A7C15ULL + r[1];
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace megascale::wire
