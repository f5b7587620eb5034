// The client side of a perf run: connect, agree on the parameters, run and print every row.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "flows.h"
#include "megascale/perf/protocol.h"
#include "rows.h"
#include "session.h"

namespace megascale::perf::detail {
namespace {

using nlohmann::json;
using wire::UdpWire;

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

std::string iterations_text(const PerfOptions& o) {
  if (o.duration_s > 0) return fmt::format("-D {:g} s per row (count from a calibration run)", o.duration_s);
  if (o.iterations > 0) return fmt::format("-n {} per row", o.iterations);
  return fmt::format("{} per bw row, {} per latency row (at most {} GiB per row, at least {})",
                     kDefaultBwIterations, kDefaultLatIterations, kDefaultRowBytes >> 30,
                     kMinDefaultIterations);
}

struct ServerInfo {
  std::string transport;
  std::string cc;
  uint32_t lanes = 0;
  bool same_host = false;
};

std::vector<std::string> banner(const PerfOptions& o, const UdpWire& w, const ClientSetup& setup,
                                const ServerInfo& srv, uint32_t segment, const std::string& where) {
  const char* bw =
      o.bidirectional ? "bidirectional bandwidth (-b: the sum of both sides' sends)" : "send bandwidth";
  const std::string title = o.test == PerfTest::kBw    ? std::string(bw)
                            : o.test == PerfTest::kLat ? std::string("latency (ping-pong, RTT/2)")
                                                       : fmt::format("{} and latency (ping-pong, RTT/2)", bw);
  std::vector<std::string> b;
  b.push_back(rule_line());
  b.push_back(fmt::format("                    megascale perf: {}", title));
  b.push_back(fmt::format(" Mode            : {}", where));
  b.push_back(fmt::format(" Wire            : {}", to_string(o.wire)));
  b.push_back(fmt::format(" Transport       : {}", w.describe()));
  b.push_back(fmt::format(" Server transport: {}", srv.transport));
  b.push_back(fmt::format(" Lanes           : {} (server {})", o.lanes, srv.lanes));
  if (!setup.source_ports.empty()) b.push_back(fmt::format(" Source ports    : {}", setup.source_ports));
  b.push_back(fmt::format(" Congestion ctl  : {} (server {})", setup.cc_name, srv.cc));
  b.push_back(
      fmt::format(" Segment         : {} B payload per datagram (--segment {})", segment, o.segment_bytes));
  const char* each_way = o.bidirectional ? " each way" : "";
  b.push_back(
      fmt::format(" Window          : {} messages in flight{} (bw, perftest's tx-depth; buffers <= {} MiB{})",
                  o.window, each_way, o.buffer_budget_bytes >> 20, each_way));
  b.push_back(fmt::format(" Iterations      : {}", iterations_text(o)));
  b.push_back(fmt::format(" Check           : {}", o.check
                                                       ? "every byte of every message"
                                                       : "both ends of every message (--check: every byte)"));
  b.push_back(fmt::format(" Poll            : {}",
                          o.poll == PerfPoll::kBusy ? "busy (spin on the sockets)"
                          : o.poll == PerfPoll::kSleep
                              ? "sleep in epoll when idle"
                              : "adaptive (spin while traffic flows, sleep in epoll after 1 ms without)"));
  if (o.io_threads > 0) {
    b.push_back(fmt::format(
        " I/O threads     : {} per side; {}", o.io_threads,
        o.stall_us == 0 ? std::string("a stalled one is not taken over (--stall-us 0)")
                        : fmt::format("one silent for {} us is taken over by the others", o.stall_us)));
  }
  if (!o.payload_crc) b.push_back(" Payload CRC     : off on this side (--no-payload-crc)");
  b.push_back(fmt::format(" Faults          : {}", describe_faults(setup.fault)));
  b.push_back(rule_line());
  return b;
}

json config_json(const PerfOptions& o, const UdpWire& w, const ClientSetup& setup, const ServerInfo& srv,
                 uint32_t segment, const std::string& where) {
  return json{{"mode", where},
              {"test", std::string(to_string(o.test))},
              {"sizes", o.all_sizes ? "-a" : (o.size_bytes ? std::to_string(o.size_bytes) : "default")},
              {"iterations", o.iterations},
              {"duration_s", o.duration_s},
              {"window", o.window},
              {"check", o.check},
              {"bidirectional", o.bidirectional},
              {"payload_crc", o.payload_crc},
              {"lanes", o.lanes},
              {"server_lanes", srv.lanes},
              {"cc", setup.cc_name},
              {"server_cc", srv.cc},
              {"segment_bytes", o.segment_bytes},
              {"negotiated_segment_bytes", segment},
              {"tclass", o.dscp << 2},
              {"dscp", o.dscp},
              {"device", o.device},
              {"bind", o.bind_host},
              {"poll", std::string(to_string(o.poll))},
              {"wire", std::string(to_string(o.wire))},
              {"transport", w.describe()},
              {"server_transport", srv.transport},
              {"same_host", srv.same_host},
              {"faults", describe_faults(setup.fault)},
              {"source_ports", setup.source_ports.empty() ? json(nullptr) : json(setup.source_ports)},
              {"host", host_name()}};
}

// One row of either test.
struct AnyRow {
  std::optional<BwRow> bw;
  std::optional<LatRow> lat;
  double seconds() const {
    if (bw) return bw->figures.seconds;
    return lat ? lat->figures.t_avg_us * 2e-6 * static_cast<double>(lat->iterations) : 0;
  }
};

Result<AnyRow> run_row(Session& s, const PerfOptions& o, PerfTest test, uint64_t& row, uint64_t size,
                       uint64_t count, bool same_host) {
  AnyRow r;
  if (test == PerfTest::kBw) {
    auto b = client_bw_row(s, o, row++, size, count, same_host);
    if (!b) return b.error();
    r.bw = std::move(*b);
  } else {
    auto l = client_lat_row(s, o, row++, size, count, same_host);
    if (!l) return l.error();
    r.lat = std::move(*l);
  }
  return r;
}

// A -D row: unprinted rows that grow until one lasts long enough to estimate the rate, then rows sized
// to the duration until one lasts at least half of it (a calibration slowed by a stall of the host
// would otherwise size a row far too short; each sized row is a longer, better calibration). A row
// that already lasted half the duration (a slow path, a large message) is the result itself.
Result<AnyRow> timed_row(Session& s, const PerfOptions& o, PerfTest test, uint64_t size, uint64_t& row,
                         bool same_host) {
  constexpr int kMaxSizedRows = 4;
  const double target_s = std::min(0.1 * o.duration_s, 0.5);
  uint64_t n = test == PerfTest::kBw ? std::clamp<uint64_t>((16ULL << 20) / std::max<uint64_t>(size, 1), 1,
                                                            buffers_for(o, size))
                                     : 64;
  for (int sized = 0;;) {
    auto r = run_row(s, o, test, row, size, n, same_host);
    if (!r) return r.error();
    const double seconds = r->seconds();
    if (seconds >= 0.5 * o.duration_s || sized == kMaxSizedRows) return r;
    if (sized > 0 || seconds >= target_s || n >= (uint64_t{1} << 32)) {
      const double count = static_cast<double>(n) * o.duration_s / std::max(seconds, 1e-9);
      n = static_cast<uint64_t>(std::clamp(count, 1.0, 1e12));
      ++sized;
      continue;
    }
    const double grow = seconds > 0 ? target_s / seconds * 1.2 : 16.0;
    n = static_cast<uint64_t>(static_cast<double>(n) * std::clamp(grow, 2.0, 16.0));
  }
}

// Prints a line here and keeps it for the server, which prints what the client reports.
void emit(const PerfSink& sink, std::vector<std::string>& for_server, const std::string& line) {
  if (sink.out) sink.out(line);
  for_server.push_back(line);
}

PerfRun failed(PerfRun run, PerfStatus status, std::string error) {
  run.status = status;
  run.error = std::move(error);
  return run;
}

}  // namespace

PerfRun run_client_on(UdpWire& w, UdpWire* data_wire, const std::string& host, uint16_t port,
                      const PerfOptions& o, const ClientSetup& setup, const PerfSink& sink) {
  PerfRun run;
  const std::string where =
      o.loopback ? fmt::format("loopback: server and client in this process ({} port {})", host, port)
                 : fmt::format("client of {} port {}", host, port);
  // The control connection first, then the data connection: the server accepts them in that order.
  auto open = [&](std::string_view which) -> Result<engine::ConnId> {
    auto id = w.connect(host, port);
    if (!id)
      return make_error(fmt::format("connect to {}:{} ({}): {}", host, port, which, id.error().message));
    return *id;
  };
  auto ctl = open("control");
  if (!ctl) return failed(std::move(run), PerfStatus::kFailed, ctl.error().message);
  Session s(w, *ctl, o, sink, "server");
  if (data_wire != nullptr) s.add_wire(*data_wire);
  // A server busy with another client refuses our connections (Endpoint::refuse): say so plainly
  // rather than as whatever the refusal interrupted.
  auto busy_or = [&](std::string text) -> std::string {
    const engine::Connection* c = s.control();
    if (c != nullptr && c->state() == engine::ConnectionState::kFailed &&
        c->error().find("connection refused by peer") != std::string::npos &&
        c->error().find("server busy") != std::string::npos) {
      return fmt::format("server {} port {} is busy with another client's run; try again when it ends", host,
                         port);
    }
    return text;
  };
  auto established = [&](engine::Connection* c) -> Status {
    if (Status st =
            s.drive([&] { return c->state() != engine::ConnectionState::kConnecting; }, "the connection");
        !st) {
      return make_error(fmt::format("connect to {}:{}: {}", host, port, st.error().message));
    }
    if (c->state() != engine::ConnectionState::kEstablished) {
      return make_error(fmt::format("connect to {}:{}: {}", host, port, c->error()));
    }
    return {};
  };
  // The banner needs the server's answer; a server that does not answer leaves the client silent for up
  // to --timeout without this line.
  if (!o.loopback && sink.progress) {
    sink.progress(
        fmt::format("megascale perf: connecting to {} port {} (--timeout {:g} s)", host, port, o.timeout_s));
  }
  if (Status st = established(s.control()); !st)
    return failed(std::move(run), PerfStatus::kFailed, busy_or(st.error().message));
  auto data = open("data");
  if (!data) return failed(std::move(run), PerfStatus::kFailed, data.error().message);
  s.set_data(*data);
  if (Status st = established(s.conn()); !st)
    return failed(std::move(run), PerfStatus::kFailed, busy_or(st.error().message));
  if (Status st = s.post_control_recv(); !st)
    return failed(std::move(run), PerfStatus::kFailed, busy_or(st.error().message));
  if (Status st = s.send_control(to_json(params_from(o, setup.cc_name))); !st) {
    return failed(std::move(run), PerfStatus::kFailed, busy_or(st.error().message));
  }
  auto reply = s.recv_control("accept");
  if (!reply) {
    const bool refused = s.last_control().find("\"refuse\"") != std::string::npos;
    const std::string why = busy_or(reply.error().message);
    s.close();
    return failed(std::move(run), refused ? PerfStatus::kUsage : PerfStatus::kFailed, why);
  }
  if (data_wire != nullptr) {
    // --wire verbs-*: the data connection goes to the server's verbs address.
    const std::string address = reply->value("data_address", std::string());
    if (address.empty()) {
      s.close();
      return failed(std::move(run), PerfStatus::kFailed,
                    fmt::format("server {} port {} sent no verbs address (its --wire is {})", host, port,
                                reply->value("wire", std::string("?"))));
    }
    auto vid = data_wire->connect(address);
    if (!vid) {
      s.close();
      return failed(std::move(run), PerfStatus::kFailed,
                    fmt::format("connect to {} ({}): {}", address, to_string(o.wire), vid.error().message));
    }
    s.move_data(*vid);
    engine::Connection* c = s.conn();
    Status st = s.drive([&] { return c->state() != engine::ConnectionState::kConnecting; },
                        "the verbs data connection");
    if (st && c->state() != engine::ConnectionState::kEstablished) st = make_error(c->error());
    if (!st) {
      s.close();
      return failed(
          std::move(run), PerfStatus::kFailed,
          fmt::format("{} data connection to {}: {}", to_string(o.wire), address, st.error().message));
    }
  }
  ServerInfo srv;
  srv.transport = reply->value("transport", std::string("?"));
  srv.cc = reply->value("cc", std::string("?"));
  srv.lanes = reply->value("lanes", 0U);
  srv.same_host = o.loopback || reply->value("host", std::string()) == host_name();
  const uint32_t segment = s.conn()->segment_bytes();

  std::vector<std::string> pending;  // lines not yet sent to the server
  const UdpWire& dw = data_wire ? *data_wire : w;
  run.report.banner = banner(o, dw, setup, srv, segment, where);
  run.report.config = config_json(o, dw, setup, srv, segment, where);
  for (const std::string& line : run.report.banner) emit(sink, pending, line);

  uint64_t row = 0;
  uint64_t row_reports = 0;
  for (PerfTest test : {PerfTest::kBw, PerfTest::kLat}) {
    if (o.test != PerfTest::kBoth && o.test != test) continue;
    emit(sink, pending, test == PerfTest::kBw ? bw_header() : lat_header());
    for (uint64_t size : sizes_for(o, test)) {
      auto r = o.duration_s > 0
                   ? timed_row(s, o, test, size, row, srv.same_host)
                   : run_row(s, o, test, row, size, iterations_for(o, test, size), srv.same_host);
      if (!r) {
        s.close();
        return failed(std::move(run), PerfStatus::kFailed, r.error().message);
      }
      std::vector<std::string> lines;
      uint64_t payload = 0, messages = 0;
      const RowCounters* counters = nullptr;
      // The server keeps the row too (its --json): the row as this side writes it, the config once.
      json report{{"type", "report"}};
      if (row_reports++ == 0) report["config"] = run.report.config;
      if (r->bw) {
        report["bw_row"] = bw_row_json(*r->bw);
        run.report.bw.push_back(*r->bw);
        lines.push_back(bw_row_line(*r->bw));
        const uint64_t ways = r->bw->bidirectional ? 2 : 1;
        payload = ways * size * r->bw->iterations;
        messages = ways * r->bw->iterations;
        counters = &run.report.bw.back().counters;
      } else {
        report["lat_row"] = lat_row_json(*r->lat);
        run.report.lat.push_back(*r->lat);
        lines.push_back(lat_row_line(*r->lat));
        payload = 2 * size * r->lat->iterations;
        messages = 2 * r->lat->iterations;
        counters = &run.report.lat.back().counters;
      }
      lines.push_back(counters_line(*counters));
      lines.push_back(cpu_line(*counters));
      if (o.verbose) lines.push_back(wire_line(*counters, payload, messages));
      for (const std::string& line : lines) emit(sink, pending, line);
      report["lines"] = pending;
      if (Status st = s.send_control(report); !st) {
        return failed(std::move(run), PerfStatus::kFailed, st.error().message);
      }
      pending.clear();
    }
    emit(sink, pending, rule_line());
  }
  s.expect_peer_close();  // the server closes both connections once it has the 'done'
  if (Status st = s.send_control(json{{"type", "done"}, {"lines", pending}}); !st) {
    return failed(std::move(run), PerfStatus::kFailed, st.error().message);
  }
  s.close();
  return run;
}

}  // namespace megascale::perf::detail
