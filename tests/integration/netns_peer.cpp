// netns_peer: one end of a network-namespace test. The netns tests run it inside a namespace
// (`ip netns exec NS netns_peer ...`); it moves data over a threaded UdpWire and prints what the
// transport measured as one JSON line on stdout (the last line; the receiver first prints a "ready" line).
//
//   netns_peer recv --bind 10.77.2.2 --port 17000 --conns 4 --bytes 134217728 --msg 1048576
//   netns_peer send --bind 10.77.1.2 --host 10.77.2.2 --port 17000 --id 0 --bytes 134217728
//                   --msg 1048576 --cc tests/integration/netns/hybrid-1g.yaml --start-at-ns 123456789
//
// Sender: connects, waits until --start-at-ns (CLOCK_MONOTONIC, shared by every namespace of a host) so
// that all senders start together, sends --bytes in messages of --msg bytes with --window messages in
// flight, and reports goodput, the RTT percentiles of its ConnectionStats, retransmissions and any error.
// Receiver: accepts --conns connections, keeps --window receives posted on each, checks every byte of
// every message against the pattern the sender wrote (it depends on the sender id, carried as the tag,
// and the byte's position in that sender's stream) and reports totals. Every wait has a deadline
// (--deadline-s): the program always ends and says why.
//
// Exit status: 0 all data moved and verified, 1 transfer failed (the JSON says why), 2 bad arguments or
// setup failure.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "megascale/congestion/config.h"
#include "megascale/engine/stats.h"
#include "megascale/wire/udp.h"

namespace {

using megascale::TimeNs;
using megascale::engine::Completion;
using megascale::engine::ConnId;
using megascale::engine::RequestId;
using megascale::wire::UdpConfig;
using megascale::wire::UdpWire;
using json = nlohmann::json;

struct Args {
  std::string bind = "0.0.0.0";
  std::string host;           // send: the receiver's address
  uint16_t port = 17000;      // recv: port to bind; send: port to connect to
  uint32_t id = 0;            // send: sender id (the message tag; seeds the pattern)
  uint32_t conns = 1;         // recv: connections to accept
  uint64_t bytes = 64 << 20;  // bytes per sender
  uint64_t msg = 1 << 20;     // message size
  uint32_t window = 4;        // messages in flight (send) / receives posted (recv) per connection
  std::string cc = "hybrid";  // preset name or YAML file
  uint32_t lanes = 1;
  uint32_t segment = 8192;  // segment payload bytes (keep segment + 100 within the path MTU)
  TimeNs start_at_ns = 0;   // send: CLOCK_MONOTONIC time to start sending at
  double deadline_s = 60;   // the whole run ends by then, whatever happens
  double timeline_ms = 0;   // send: > 0 prints the connection's state to stderr this often
  // The wire's polling after traffic (UdpConfig::idle_poll_ns, and pending_poll_ns, which is set to
  // the same). Off by default here: the netns tests run five transport processes on a 2-core host,
  // where one process's polling is CPU another needs.
  double idle_poll_us = 0;
};

// The 8-byte word at word index `word` of sender `id`'s byte stream: distinct for every position and
// sender, so a misplaced, duplicated or corrupted segment shows.
uint64_t pattern_word(uint32_t id, uint64_t word) {
  uint64_t x = (word + 1) * 0x9E3779B97F4A7C15ULL ^ (uint64_t{id} << 40 | id);
  x ^= x >> 31;
  return x;
}

void fill(uint8_t* buf, uint32_t id, uint64_t stream_offset, uint64_t size) {
  // Messages start at multiples of 8 bytes in the stream (--msg is a multiple of 8), so words align.
  const uint64_t first = stream_offset / 8;
  const uint64_t words = size / 8;
  for (uint64_t w = 0; w < words; ++w) {
    const uint64_t v = pattern_word(id, first + w);
    std::memcpy(buf + w * 8, &v, 8);
  }
  if (size % 8 != 0) {
    const uint64_t v = pattern_word(id, first + words);
    std::memcpy(buf + words * 8, &v, size % 8);
  }
}

// Offset of the first byte that differs from the pattern, or -1. (The receiver checks every byte of
// every message at line rate, so this compares whole words.)
int64_t first_mismatch(const uint8_t* buf, uint32_t id, uint64_t stream_offset, uint64_t size) {
  const uint64_t first = stream_offset / 8;
  const uint64_t words = size / 8;
  for (uint64_t w = 0; w < words; ++w) {
    uint64_t got = 0;
    std::memcpy(&got, buf + w * 8, 8);
    if (got != pattern_word(id, first + w)) return static_cast<int64_t>(w * 8);
  }
  if (size % 8 != 0) {
    const uint64_t v = pattern_word(id, first + words);
    if (std::memcmp(buf + words * 8, &v, size % 8) != 0) return static_cast<int64_t>(words * 8);
  }
  return -1;
}

uint64_t message_size(const Args& a, uint64_t k) {
  return std::min(a.msg, a.bytes - k * a.msg);
}

uint64_t message_count(const Args& a) {
  return a.bytes == 0 ? 0 : (a.bytes + a.msg - 1) / a.msg;
}

json rtt_json(const megascale::engine::RttHistogram& h) {
  return json{{"count", h.count()},
              {"min_ns", h.min_ns()},
              {"p50_ns", h.percentile_ns(0.50)},
              {"p90_ns", h.percentile_ns(0.90)},
              {"p99_ns", h.percentile_ns(0.99)},
              {"max_ns", h.max_ns()}};
}

// The connection's counters, read under the wire's lock.
json connection_json(UdpWire& wire, ConnId conn) {
  return wire.with_endpoint([&](megascale::engine::Endpoint& ep) {
    json j;
    const megascale::engine::Connection* c = ep.connection(conn);
    if (c == nullptr) return j;
    const megascale::engine::ConnectionStats& s = c->stats();
    j["state"] = std::string(megascale::engine::to_string(c->state()));
    j["rtt"] = rtt_json(s.rtt);
    // The queueing delay the transport itself saw: median RTT above the smallest one.
    j["queueing_delay_ns"] = s.rtt.count() ? s.rtt.percentile_ns(0.5) - s.rtt.min_ns() : 0;
    j["bytes_sent"] = s.bytes_sent;
    j["retransmits"] = s.retransmits();
    j["retransmits_fast"] = s.retransmits_fast;
    j["retransmits_rto"] = s.retransmits_rto;
    j["timeouts"] = s.timeouts;
    j["ecn_marks"] = s.ecn_marks;
    j["repaths"] = s.repaths;
    j["bytes_received"] = s.bytes_received;
    j["duplicates_dropped"] = s.duplicates_dropped;
    j["corrupt_dropped"] = s.corrupt_dropped;
    json lanes = json::array();
    for (uint32_t i = 0; i < c->lanes(); ++i) {
      const megascale::engine::LaneStats& l = c->lane_stats(i);
      lanes.push_back(json{{"rtt", rtt_json(l.rtt)},
                           {"bytes_sent", l.bytes_sent},
                           {"retransmits", l.retransmits_fast + l.retransmits_rto},
                           {"timeouts", l.timeouts},
                           {"cwnd_bytes", l.cwnd_bytes},
                           {"pacing_rate_bps", l.pacing_rate_bps}});
    }
    j["lanes"] = lanes;
    return j;
  });
}

// The wire's socket-level counters: datagrams lost to full socket buffers show here, not in the engine.
json wire_json(const UdpWire& w) {
  const megascale::wire::UdpWireStats s = w.stats();
  return json{{"datagrams_sent", s.datagrams_sent},
              {"datagrams_received", s.datagrams_received},
              {"gso_messages", s.gso_messages},
              {"gro_messages", s.gro_messages},
              {"send_syscalls", s.send_syscalls},
              {"recv_syscalls", s.recv_syscalls},
              {"send_dropped_full", s.send_dropped_full},
              {"send_dropped_error", s.send_dropped_error},
              {"ce_received", s.ce_received},
              {"sleeps", s.sleeps}};
}

megascale::Result<std::unique_ptr<UdpWire>> make_wire(const Args& a, uint16_t bind_port, uint64_t seed,
                                                      std::string& cc_summary) {
  auto cc = megascale::cc::resolve_cc_config(a.cc);
  if (!cc) return cc.error();
  UdpConfig cfg;
  cfg.bind_host = a.bind;
  cfg.bind_port = bind_port;
  cfg.engine.cc = *cc;
  cfg.engine.lanes = a.lanes;
  cfg.engine.segment_bytes = a.segment;
  cfg.engine.seed = seed;
  cfg.fixed_seed = true;  // the same path ids every run, for the topology tests
  cfg.engine.connect_timeout_ns = megascale::sec(std::min(10.0, a.deadline_s));
  cfg.idle_poll_ns = megascale::us(a.idle_poll_us);
  cfg.pending_poll_ns = cfg.idle_poll_ns;
  cc_summary = cc->name;
  auto wire = UdpWire::create(cfg);
  if (!wire) return wire.error();
  if (megascale::Status s = (*wire)->start(); !s) return s.error();
  return wire;
}

TimeNs deadline_after(double seconds) {
  return UdpWire::now() + megascale::sec(seconds);
}

TimeNs left(TimeNs deadline) {
  return std::max<TimeNs>(deadline - UdpWire::now(), 0);
}

int emit(json j, bool ok) {
  // CPU time of this process: on a shared 2-core host it tells a CPU-bound run from a network-bound one.
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  j["cpu_user_s"] = static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6;
  j["cpu_sys_s"] = static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) / 1e6;
  std::cout << j.dump() << std::endl;
  const int rc = ok ? 0 : 1;
  // The result is out; the wire is destroyed next. Should that ever hang, say so on stderr and exit
  // anyway with the same status, so the test sees the result and the hang instead of a stuck process.
  std::thread([rc] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::fprintf(stderr, "netns_peer: UdpWire teardown still running after 3 s (hung); exiting\n");
    std::_Exit(rc);
  }).detach();
  return rc;
}

// A line to stderr every --timeline-ms while sending: how the connection's state moves (for people
// looking at a run; the tests read only the JSON).
void print_timeline(UdpWire& w, ConnId conn, const Args& a, TimeNs start_ns,
                    const std::atomic<bool>& finished) {
  while (!finished.load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(a.timeline_ms * 1000)));
    w.with_endpoint([&](megascale::engine::Endpoint& ep) {
      const megascale::engine::Connection* c = ep.connection(conn);
      if (c == nullptr) return;
      const megascale::engine::ConnectionStats& s = c->stats();
      const megascale::engine::LaneStats& l = c->lane_stats(0);
      std::fprintf(
          stderr,
          "timeline sender %u t=%.3f s acked %llu B cwnd %.0f B rate %.0f Mbit/s in_flight %llu B "
          "timeouts %llu retx %llu rtt_samples %llu\n",
          a.id, static_cast<double>(UdpWire::now() - start_ns) / 1e9,
          static_cast<unsigned long long>(s.bytes_acked), l.cwnd_bytes, l.pacing_rate_bps / 1e6,
          static_cast<unsigned long long>(l.in_flight_bytes), static_cast<unsigned long long>(s.timeouts),
          static_cast<unsigned long long>(s.retransmits()), static_cast<unsigned long long>(s.rtt.count()));
    });
  }
}

int run_sender(const Args& a) {
  const TimeNs deadline = deadline_after(a.deadline_s);
  json out{{"role", "sender"}, {"id", a.id}, {"ok", false}, {"error", ""}, {"fail_ns", 0}};
  std::string cc_name;
  auto wire = make_wire(a, 0, 0x5E4D0000ULL + a.id * 7919 + static_cast<uint64_t>(getpid()), cc_name);
  if (!wire) {
    out["error"] = "setup: " + wire.error().message;
    std::cout << out.dump() << std::endl;
    return 2;
  }
  UdpWire& w = **wire;
  out["cc"] = cc_name;
  auto conn = w.connect(a.host, a.port);
  if (!conn) {
    out["error"] = "connect: " + conn.error().message;
    return emit(out, false);
  }
  if (megascale::Status s = w.wait_established(*conn, left(deadline)); !s) {
    out["error"] = "connect: " + s.error().message;
    out["fail_ns"] = UdpWire::now();
    return emit(out, false);
  }
  while (UdpWire::now() < a.start_at_ns) {
    std::this_thread::sleep_for(
        std::chrono::nanoseconds(std::min<TimeNs>(a.start_at_ns - UdpWire::now(), 1'000'000)));
  }

  const uint64_t total = message_count(a);
  std::vector<std::vector<uint8_t>> bufs(a.window, std::vector<uint8_t>(std::max<uint64_t>(a.msg, 1)));
  std::vector<RequestId> reqs(a.window, 0);
  const TimeNs start_ns = UdpWire::now();
  std::atomic<bool> finished{false};
  std::thread timeline;
  if (a.timeline_ms > 0) timeline = std::thread([&] { print_timeline(w, *conn, a, start_ns, finished); });
  uint64_t posted = 0, done = 0, bytes = 0;
  std::string error;
  auto post = [&](uint64_t k) {
    uint8_t* buf = bufs[k % a.window].data();
    fill(buf, a.id, k * a.msg, message_size(a, k));
    auto r = w.post_send(*conn, buf, message_size(a, k), static_cast<int32_t>(a.id));
    if (!r) {
      error = "post_send: " + r.error().message;
      return false;
    }
    reqs[k % a.window] = *r;
    return true;
  };
  for (; posted < total && posted < a.window; ++posted) {
    if (!post(posted)) break;
  }
  while (error.empty() && done < total) {
    const Completion c = w.wait(*conn, reqs[done % a.window], left(deadline));
    if (!c.done) {
      error = "deadline: " + std::to_string(done) + " of " + std::to_string(total) + " messages sent after " +
              std::to_string(a.deadline_s) + " s (" + c.error + ")";
      break;
    }
    if (!c.ok) {
      error = c.error;
      out["fail_ns"] = UdpWire::now();
      break;
    }
    bytes += c.bytes;
    ++done;
    if (posted < total) {
      if (!post(posted)) break;
      ++posted;
    }
  }
  const TimeNs end_ns = UdpWire::now();
  finished = true;
  if (timeline.joinable()) timeline.join();
  out["start_ns"] = start_ns;
  out["end_ns"] = end_ns;
  out["bytes"] = bytes;
  out["messages"] = done;
  const double seconds = static_cast<double>(end_ns - start_ns) / 1e9;
  out["goodput_bps"] = seconds > 0 ? static_cast<double>(bytes) * 8 / seconds : 0.0;
  out["connection"] = connection_json(w, *conn);
  out["wire"] = wire_json(w);
  out["error"] = error;
  out["ok"] = error.empty();
  if (error.empty()) {
    w.close(*conn);
    if (megascale::Status s = w.wait_closed(*conn, std::min<TimeNs>(left(deadline), megascale::sec(5))); !s) {
      out["close_error"] = s.error().message;
    }
  }
  return emit(out, error.empty());
}

struct RecvTotals {
  std::mutex mu;
  uint64_t bytes = 0;
  uint64_t messages = 0;
  uint64_t mismatches = 0;
  TimeNs first_ns = 0;
  TimeNs last_ns = 0;
  std::vector<std::string> errors;
  std::vector<uint32_t> sender_ids;
};

// Receives every message of one connection, checking each byte.
void serve_connection(UdpWire& w, ConnId conn, const Args& a, TimeNs deadline, RecvTotals& t) {
  const uint64_t total = message_count(a);
  std::vector<std::vector<uint8_t>> bufs(a.window, std::vector<uint8_t>(std::max<uint64_t>(a.msg, 1)));
  std::vector<RequestId> reqs(a.window, 0);
  uint64_t posted = 0, done = 0;
  int64_t sender = -1;
  auto fail = [&](const std::string& e) {
    std::lock_guard<std::mutex> lock(t.mu);
    t.errors.push_back("connection " + std::to_string(conn) + " (sender " + std::to_string(sender) +
                       "): " + e);
  };
  auto post = [&](uint64_t k) {
    auto r = w.post_recv(conn, bufs[k % a.window].data(), a.msg, -1);
    if (!r) {
      fail("post_recv: " + r.error().message);
      return false;
    }
    reqs[k % a.window] = *r;
    return true;
  };
  for (; posted < total && posted < a.window; ++posted) {
    if (!post(posted)) return;
  }
  while (done < total) {
    const Completion c = w.wait(conn, reqs[done % a.window], left(deadline));
    if (!c.done) {
      fail("deadline: " + std::to_string(done) + " of " + std::to_string(total) + " messages received (" +
           c.error + ")");
      return;
    }
    if (!c.ok) {
      fail(c.error);
      return;
    }
    if (sender < 0) sender = c.tag;
    const uint64_t want = message_size(a, done);
    const int64_t bad =
        c.tag == sender && c.bytes == want
            ? first_mismatch(bufs[done % a.window].data(), static_cast<uint32_t>(sender), done * a.msg, want)
            : 0;
    {
      std::lock_guard<std::mutex> lock(t.mu);
      const TimeNs now = UdpWire::now();
      if (t.first_ns == 0) t.first_ns = now;
      t.last_ns = now;
      t.bytes += c.bytes;
      ++t.messages;
      if (bad >= 0) {
        ++t.mismatches;
        t.errors.push_back("sender " + std::to_string(sender) + " message " + std::to_string(done) +
                           " (tag " + std::to_string(c.tag) + ", " + std::to_string(c.bytes) + " of " +
                           std::to_string(want) + " B) differs at byte " + std::to_string(bad));
      }
    }
    ++done;
    if (posted < total) {
      if (!post(posted)) return;
      ++posted;
    }
  }
  std::lock_guard<std::mutex> lock(t.mu);
  t.sender_ids.push_back(static_cast<uint32_t>(sender));
}

int run_receiver(const Args& a) {
  const TimeNs deadline = deadline_after(a.deadline_s);
  json out{{"role", "receiver"}, {"ok", false}};
  std::string cc_name;
  auto wire = make_wire(a, a.port, 0x2EC0000ULL + static_cast<uint64_t>(getpid()), cc_name);
  if (!wire) {
    out["error"] = "setup: " + wire.error().message;
    std::cout << out.dump() << std::endl;
    return 2;
  }
  UdpWire& w = **wire;
  std::cout << json{{"ready", true}, {"port", w.local_port()}}.dump() << std::endl;

  RecvTotals totals;
  std::vector<ConnId> conns;
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < a.conns; ++i) {
    auto c = w.wait_accept(left(deadline));
    if (!c) {
      totals.errors.push_back("accept: " + std::to_string(i) + " of " + std::to_string(a.conns) +
                              " connections: " + c.error().message);
      break;
    }
    conns.push_back(*c);
    threads.emplace_back([&, conn = *c] { serve_connection(w, conn, a, deadline, totals); });
  }
  for (std::thread& t : threads) t.join();
  out["end_ns"] = UdpWire::now();  // every connection done, failed or out of time
  const bool ok = totals.errors.empty() && totals.messages == message_count(a) * a.conns;
  json per = json::array();
  for (ConnId c : conns) per.push_back(connection_json(w, c));
  if (ok) {
    for (ConnId c : conns) w.close(c);
    for (ConnId c : conns) (void)w.wait_closed(c, std::min<TimeNs>(left(deadline), megascale::sec(2)));
  }
  std::sort(totals.sender_ids.begin(), totals.sender_ids.end());
  out["ok"] = ok;
  out["bytes"] = totals.bytes;
  out["messages"] = totals.messages;
  out["mismatches"] = totals.mismatches;
  out["verified_senders"] = totals.sender_ids;
  out["first_ns"] = totals.first_ns;
  out["last_ns"] = totals.last_ns;
  out["errors"] = totals.errors;
  out["connections"] = per;
  out["wire"] = wire_json(w);
  return emit(out, ok);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"netns_peer: one end of a megascale network-namespace test"};
  app.require_subcommand(1);
  Args a;
  auto common = [&a](CLI::App* sub) {
    sub->add_option("--bind", a.bind, "local address to bind");
    sub->add_option("--port", a.port, "recv: port to listen on; send: port to connect to");
    sub->add_option("--bytes", a.bytes, "bytes per sender");
    sub->add_option("--msg", a.msg, "message size, bytes (a multiple of 8)")->check(CLI::PositiveNumber);
    sub->add_option("--window", a.window, "messages in flight / receives posted per connection")
        ->check(CLI::Range(1u, 1024u));
    sub->add_option("--cc", a.cc, "congestion-control preset name or YAML file");
    sub->add_option("--lanes", a.lanes, "lanes per connection");
    sub->add_option("--segment", a.segment, "segment payload bytes");
    sub->add_option("--deadline-s", a.deadline_s, "end the run after this many seconds whatever happens");
    sub->add_option("--idle-poll-us", a.idle_poll_us, "the wire's polling after traffic before it sleeps");
  };
  CLI::App* send = app.add_subcommand("send", "connect and send");
  common(send);
  send->add_option("--host", a.host, "receiver address")->required();
  send->add_option("--id", a.id, "sender id (tag and pattern seed)");
  send->add_option("--start-at-ns", a.start_at_ns, "CLOCK_MONOTONIC time to start sending at");
  send->add_option("--timeline-ms", a.timeline_ms, "print the connection's state to stderr this often");
  CLI::App* recv = app.add_subcommand("recv", "accept and receive");
  common(recv);
  recv->add_option("--conns", a.conns, "connections to accept")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (a.msg % 8 != 0) {
    std::fprintf(stderr, "netns_peer: --msg must be a multiple of 8\n");
    return 2;
  }
  return send->parsed() ? run_sender(a) : run_receiver(a);
}
