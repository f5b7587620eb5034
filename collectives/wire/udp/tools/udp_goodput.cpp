// megascale_udp_goodput: goodput and delay of the UDP wire on one host (two wires in one process, each
// with its own progress thread), for tuning the transport's software-path settings and reproducing the
// numbers in collectives/wire/README.md.
//
//   megascale_udp_goodput                         # default preset (hybrid), 4 lanes, 8 KiB segments, 3 s
//   megascale_udp_goodput --cc fixed --burst-kib 64 --min-rto-us 1000 --duration 5s -s 16M
//   megascale_udp_goodput --rx-timestamps 0       # arrival time = processing time (no kernel stamps)
//
// One line of results: goodput, the sender's RTT (p50/p99 as the controllers saw it), fabric delay
// (RTT less the receiver's echoed delay), this host's receive delay (kernel stamp -> engine), windows,
// timeouts and retransmissions, and the load average before and after (the host is shared).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "megascale/congestion/config.h"
#include "megascale/wire/udp.h"
#include "vocab.h"

namespace {

using megascale::kNsPerUs;
using megascale::TimeNs;
namespace engine = megascale::engine;
namespace wire = megascale::wire;

struct Options {
  std::string host = "127.0.0.1";
  std::string cc = "hybrid";
  double seconds = 3;
  uint64_t msg_bytes = 64ULL << 20;
  uint32_t segment_bytes = 8192;
  uint32_t lanes = 4;
  int64_t burst_kib = -1;   // -1: the preset's
  int64_t min_rto_us = -1;  // -1: the preset's (or the wire's default)
  double rto_jitter = -1;   // -1: the preset's first-timeout jitter
  int rx_timestamps = -1;   // -1: the wire's default
  double window = 32;       // fixed window, packets
  bool busy_poll = false;
};

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Datagrams the kernel dropped for full receive buffers, host-wide (/proc/net/snmp Udp + Udp6).
uint64_t udp_rcvbuf_errors() {
  uint64_t total = 0;
  for (const char* path : {"/proc/net/snmp", "/proc/net/snmp6"}) {
    std::ifstream f(path);
    std::string line, header;
    while (std::getline(f, line)) {
      if (line.rfind("Udp6RcvbufErrors", 0) == 0)
        total += std::stoull(line.substr(line.find_last_of(' ') + 1));
      if (line.rfind("Udp: ", 0) != 0) continue;
      if (header.empty()) {
        header = line;
        continue;
      }
      // The header names the columns; RcvbufErrors is one of them.
      size_t col = 0, pos = 0;
      const size_t at = header.find(" RcvbufErrors");
      for (size_t i = 0; i < at; ++i) col += header[i] == ' ' ? 1 : 0;
      for (size_t i = 0; i <= col; ++i) pos = line.find(' ', pos) + 1;
      total += std::stoull(line.substr(pos, line.find(' ', pos) - pos));
      header.clear();
    }
  }
  return total;
}

// Flags spell the CLI's vocabulary (cli/vocab.h): -D,--duration and -s,--size take units, --cc a preset.
// Returns the exit status when the program should stop here (help: 0, a bad flag: 2, printed on stderr).
std::optional<int> parse(int argc, char** argv, Options& o) {
  namespace vocab = megascale::cli::vocab;
  CLI::App app{"Goodput and delay of the UDP wire on one host (two wires in one process)",
               "megascale_udp_goodput"};
  app.add_option("--host", o.host, "Address both wires bind and connect on (127.0.0.1 or ::1)")
      ->capture_default_str();
  vocab::cc(&app, o.cc, "Congestion-control preset (hybrid, swift, dcqcn, ...), or fixed: a fixed window")
      ->capture_default_str();
  vocab::duration(&app, vocab::kDurationFlag, o.seconds, "How long to send (2, 2s, 500ms)")
      ->capture_default_str();
  vocab::size(&app, vocab::kSizeFlag, o.msg_bytes, "Message size (64M, 1G; powers of 1024)")
      ->capture_default_str();
  app.add_option("--segment", o.segment_bytes, "Segment payload, bytes")->capture_default_str();
  app.add_option("--lanes", o.lanes, "Lanes of the connection")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--burst-kib", o.burst_kib, "Pacer burst, KiB (default: the preset's)");
  app.add_option("--min-rto-us", o.min_rto_us, "Minimum RTO, us (default: the preset's)");
  app.add_option("--rto-jitter", o.rto_jitter, "First timeout's jitter (default: the preset's)");
  app.add_option("--rx-timestamps", o.rx_timestamps, "Kernel receive timestamps, 0|1 (default: the wire's)")
      ->check(CLI::Range(0, 1));
  app.add_option("--window", o.window, "Window of --cc fixed, packets")->capture_default_str();
  app.add_option("--busy-poll", o.busy_poll, "Busy-poll the sockets, 0|1")->capture_default_str();
  vocab::renamed(&app, "--seconds", "--duration");
  vocab::renamed(&app, "--msg-mib", "--size (64M)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

double us(TimeNs ns) {
  return static_cast<double>(ns) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const std::optional<int> stop = parse(argc, argv, o)) return *stop;
  wire::UdpConfig cfg;
  cfg.bind_host = o.host;
  cfg.busy_poll = o.busy_poll;
  if (o.cc == "fixed") {
    cfg.engine.cc.kind = megascale::cc::ControllerKind::kFixedWindow;
    cfg.engine.cc.fixed.window_packets = o.window;
  } else {
    auto preset = megascale::cc::builtin_cc_config(o.cc);
    if (!preset) {
      std::fprintf(stderr, "%s\n", preset.error().message.c_str());
      return 2;
    }
    cfg.engine.cc = *preset;
  }
  cfg.engine.lanes = o.lanes;
  cfg.engine.segment_bytes = o.segment_bytes;
  // Explicit values are used as given: the wire's software-path floors are turned off for them.
  if (o.burst_kib >= 0) {
    cfg.engine.cc.pacer.burst_bytes = static_cast<uint64_t>(o.burst_kib) * 1024;
    cfg.pacer_burst_floor_bytes = 0;
  }
  if (o.min_rto_us >= 0) {
    cfg.engine.cc.rto.min_rto_ns = o.min_rto_us * kNsPerUs;
    cfg.min_rto_floor_ns = 0;
  }
  if (o.rto_jitter >= 0) cfg.engine.cc.rto.first_jitter = o.rto_jitter;
  if (o.rx_timestamps >= 0) cfg.rx_timestamps = o.rx_timestamps != 0;
  const std::string load_before = loadavg();
  const uint64_t rcvbuf_errors_before = udp_rcvbuf_errors();

  wire::UdpConfig rcfg = cfg;  // each wire draws its own seed
  auto rx = wire::UdpWire::create(rcfg);
  auto tx = wire::UdpWire::create(cfg);
  if (!rx || !tx) {
    std::fprintf(stderr, "%s\n", (!rx ? rx.error() : tx.error()).message.c_str());
    return 1;
  }
  wire::UdpWire& r = **rx;
  wire::UdpWire& s = **tx;
  if (!r.start() || !s.start()) return 1;
  auto conn = s.connect(o.host, r.local_port());
  auto acc = r.wait_accept(megascale::sec(5));
  if (!conn || !acc || !s.wait_established(*conn, megascale::sec(5))) {
    std::fprintf(stderr, "connect failed\n");
    return 1;
  }
  std::vector<uint8_t> src(o.msg_bytes, 0x5A);
  std::vector<std::vector<uint8_t>> dst(2, std::vector<uint8_t>(o.msg_bytes));
  struct Flight {
    engine::RequestId send = 0, recv = 0;
  };
  Flight f[2];
  auto post = [&](int k) {
    f[k].recv = *r.post_recv(*acc, dst[static_cast<size_t>(k)].data(), o.msg_bytes, 0);
    f[k].send = *s.post_send(*conn, src.data(), o.msg_bytes, 0);
  };
  const TimeNs t0 = wire::UdpWire::now();
  const TimeNs end = t0 + static_cast<TimeNs>(o.seconds * 1e9);
  post(0);
  post(1);
  uint64_t bytes = 0;
  int k = 0;
  for (;;) {
    engine::Completion rc = r.wait(*acc, f[k].recv, megascale::sec(60));
    engine::Completion sc = s.wait(*conn, f[k].send, megascale::sec(60));
    if (!rc.ok || !sc.ok) {
      std::fprintf(stderr, "transfer failed: %s %s\n", rc.error.c_str(), sc.error.c_str());
      return 1;
    }
    bytes += o.msg_bytes;
    if (wire::UdpWire::now() >= end) break;
    post(k);
    k ^= 1;
  }
  const double secs = static_cast<double>(wire::UdpWire::now() - t0) / 1e9;
  // Drain the other message so both wires are idle when read.
  r.wait(*acc, f[k ^ 1].recv, megascale::sec(60));
  s.wait(*conn, f[k ^ 1].send, megascale::sec(60));

  s.with_endpoint([&](engine::Endpoint& ep) {
    const engine::Connection* c = ep.connection(*conn);
    const engine::ConnectionStats& st = c->stats();
    double cwnd = 0;
    for (uint32_t i = 0; i < c->lanes(); ++i) cwnd += c->lane_stats(i).cwnd_bytes;
    std::printf("cc %s burst %llu B min_rto %lld us lanes %u seg %u: %.2f Gbit/s (%.0f MiB in %.2f s)\n",
                o.cc.c_str(), static_cast<unsigned long long>(s.config().engine.cc.pacer.burst_bytes),
                static_cast<long long>(s.config().engine.cc.rto.min_rto_ns / kNsPerUs), o.lanes,
                o.segment_bytes, static_cast<double>(bytes) * 8 / secs / 1e9,
                static_cast<double>(bytes) / (1 << 20), secs);
    std::printf("  rtt p50 %.1f us p99 %.1f us (%llu samples)", us(st.rtt.percentile_ns(0.5)),
                us(st.rtt.percentile_ns(0.99)), static_cast<unsigned long long>(st.rtt.count()));
    std::printf("; fabric p50 %.1f us p99 %.1f us; rx delay p50 %.1f us p99 %.1f us",
                us(st.fabric_delay.percentile_ns(0.5)), us(st.fabric_delay.percentile_ns(0.99)),
                us(st.rx_delay.percentile_ns(0.5)), us(st.rx_delay.percentile_ns(0.99)));
    std::printf("\n  cwnd sum %.0f B; timeouts %llu, retx fast %llu rto %llu; segments %llu\n", cwnd,
                static_cast<unsigned long long>(st.timeouts),
                static_cast<unsigned long long>(st.retransmits_fast),
                static_cast<unsigned long long>(st.retransmits_rto),
                static_cast<unsigned long long>(st.segments_sent));
  });
  const uint64_t duplicates =
      r.with_endpoint([&](engine::Endpoint& ep) { return ep.connection(*acc)->stats().duplicates_dropped; });
  std::printf(
      "  receiver: %llu duplicate segments (spurious retransmissions); kernel UDP receive-buffer drops "
      "%llu\n",
      static_cast<unsigned long long>(duplicates),
      static_cast<unsigned long long>(udp_rcvbuf_errors() - rcvbuf_errors_before));
  const wire::UdpWireStats ws = s.stats();
  std::printf("  sender: %llu datagrams in %llu messages (%llu gso), %llu sleeps; load %s -> %s\n",
              static_cast<unsigned long long>(ws.datagrams_sent),
              static_cast<unsigned long long>(ws.send_messages),
              static_cast<unsigned long long>(ws.gso_messages), static_cast<unsigned long long>(ws.sleeps),
              load_before.c_str(), loadavg().c_str());
  std::fflush(stdout);
  return 0;
}
