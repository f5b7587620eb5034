// The bandwidth and latency loops of one row, client and server.
#include "rows.h"

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "megascale/perf/pattern.h"
#include "megascale/perf/protocol.h"

namespace megascale::perf::detail {
namespace {

using nlohmann::json;
using wire::UdpWire;

// Page-aligned message buffers, touched once so that page faults stay out of the timed loop.
class Buffers {
 public:
  Buffers(uint32_t count, uint64_t size_bytes)
      : count_(count), stride_(round_up(std::max<uint64_t>(size_bytes, 1))) {
    mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPage, stride_ * count_)));
    if (mem_) std::memset(mem_.get(), 0, stride_ * count_);
  }
  bool ok() const { return mem_ != nullptr; }
  uint8_t* operator[](uint64_t i) { return mem_.get() + (i % count_) * stride_; }

 private:
  static constexpr uint64_t kPage = kBufferPageBytes;
  static uint64_t round_up(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  uint32_t count_;
  uint64_t stride_;
  std::unique_ptr<uint8_t, Free> mem_;
};

Error out_of_memory(uint32_t count, uint64_t size) {
  return make_error(
      fmt::format("cannot allocate {} buffers of {} B (lower --buffer-mib or the size)", count, size));
}

void prepare(uint8_t* buf, uint64_t size, uint64_t key, bool full) {
  if (full) {
    fill_pattern(buf, size, key);
  } else {
    stamp_ends(buf, size, key);
  }
}

// Checks a received message; the error describes the first wrong byte.
Status verify(const uint8_t* buf, uint64_t got_bytes, uint64_t size, uint64_t key, bool full,
              uint64_t index) {
  if (got_bytes != size) {
    return make_error(
        fmt::format("data check: message {} arrived with {} B, {} B were sent", index, got_bytes, size));
  }
  const int64_t bad = full ? find_mismatch(buf, size, key) : check_ends(buf, size, key);
  if (bad >= 0) return make_error("data check: " + describe_mismatch(buf, size, key, bad, index));
  return {};
}

struct ServerResult {
  SideCounters counters;
  uint64_t verified = 0;
  std::optional<BwFigures> sends;  // -b: the server's own send figures
};

Result<ServerResult> parse_result(const json& j) {
  ServerResult r;
  r.verified = j.value("verified", uint64_t{0});
  if (j.contains("counters")) r.counters = side_counters_from_json(j["counters"]);
  if (j.contains("sends")) {
    try {
      r.sends = bw_figures_from_json(j["sends"]);
    } catch (const json::exception& e) {
      return make_error(std::string("malformed send figures in the server's result: ") + e.what());
    }
  }
  return r;
}

RowCounters combine(const SideCounters& client, const SideCounters& server, bool same_host) {
  RowCounters c;
  c.client = client;
  c.server = server;
  c.same_host = same_host;
  c.total = sum_sides(client, server, same_host);
  return c;
}

// Starts a row on the client side: the server allocates and posts, then says ready.
Status start_row(Session& s, PerfTest test, uint64_t row, uint64_t size, uint64_t count) {
  if (Status st = s.send_control(json{{"type", "row"},
                                      {"test", std::string(to_string(test))},
                                      {"row", row},
                                      {"size", size},
                                      {"count", count}});
      !st) {
    return st;
  }
  auto ready = s.recv_control("ready");
  if (!ready) return ready.error();
  return {};
}

Result<ServerResult> finish_row(Session& s) {
  auto msg = s.recv_control("result");
  if (!msg) return msg.error();
  return parse_result(*msg);
}

// One side's part of a bw row. Without -b the client sends `count` messages and the server receives
// them; with -b (perftest's bidirectional test) each side also does the other's part, sending its own
// numbered messages (keyed apart by `server`) while it receives the other's, at most the window of
// each in flight. Each side times its own sends.
class BwSide {
 public:
  BwSide(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count, bool server)
      : s_(s),
        o_(o),
        row_(row),
        size_(size),
        window_(buffers_for(o, size)),
        server_(server),
        n_send_(!server || o.bidirectional ? count : 0),
        n_recv_(server || o.bidirectional ? count : 0),
        tx_(n_send_ ? window_ : 0, size),
        rx_(n_recv_ ? window_ : 0, size),
        tx_ring_(window_),
        rx_ring_(window_) {}

  uint32_t window() const { return window_; }
  uint64_t verified() const { return verified_; }
  BwFigures send_figures() const { return bw_figures(size_, posted_, completed_, window_); }

  Status allocate() {
    if ((n_send_ && !tx_.ok()) || (n_recv_ && !rx_.ok())) return out_of_memory(window_, size_);
    posted_.resize(n_send_);
    completed_.resize(n_send_);
    // Without --check only the ends of each message are stamped per message: the rest is filled once.
    if (!o_.check) {
      for (uint32_t b = 0; b < window_ && n_send_ > 0; ++b) fill_pattern(tx_[b], size_, key(b, server_));
    }
    return {};
  }

  // The first window of receives.
  Status post_receives() {
    engine::Connection* c = s_.conn();
    if (c == nullptr && n_recv_ > 0) return make_error("connection gone");
    for (; rx_posted_ < n_recv_ && rx_posted_ < window_; ++rx_posted_) {
      auto r = c->post_recv(rx_[rx_posted_], size_, kTagData);
      if (!r) return make_error("posting a receive: " + r.error().message);
      rx_ring_[rx_posted_ % window_] = *r;
    }
    return {};
  }

  // Until every send and receive of the row has completed.
  Status run() {
    const TimeNs start = UdpWire::now();
    while (tx_done_ < n_send_ || rx_done_ < n_recv_) {
      engine::Connection* c = s_.conn();
      if (c == nullptr) return make_error("connection gone");
      if (Status st = post_sends(c); !st) return st;
      if (Status st = s_.progress_data(); !st) return st;
      c = s_.conn();
      if (c == nullptr) return make_error("connection gone");
      const uint64_t before = tx_done_ + rx_done_;
      if (Status st = reap_sends(c); !st) return st;
      if (Status st = reap_receives(c); !st) return st;
      const bool moved = tx_done_ + rx_done_ > before;
      if (moved) s_.touch();
      // Also while nothing completes: a stalled row says so every second (the client's sink prints).
      if (!server_) s_.progress_note(start, [&] { return fmt::format("bw {} B: {}", size_, done_text()); });
      if (moved) continue;
      if (Status st = s_.check_peer_abort(); !st) return st;
      if (Status st = s_.check_lazily([&] { return fmt::format("bw {} B ({})", size_, done_text()); }); !st)
        return st;
      s_.idle();
    }
    return {};
  }

 private:
  uint64_t key(uint64_t index, bool from_server) const { return message_key(row_, index, from_server); }

  std::string done_text() const {
    std::string t;
    if (n_send_) t = fmt::format("{} of {} sends", tx_done_, n_send_);
    if (n_send_ && n_recv_) t += ", ";
    if (n_recv_) t += fmt::format("{} of {} receives", rx_done_, n_recv_);
    return t;
  }

  Status post_sends(engine::Connection* c) {
    while (tx_next_ < n_send_ && tx_next_ - tx_done_ < window_) {
      uint8_t* buf = tx_[tx_next_];
      prepare(buf, size_, key(tx_next_, server_), o_.check);
      auto r = c->post_send(buf, size_, kTagData);
      if (!r) return make_error(fmt::format("posting send {}: {}", tx_next_, r.error().message));
      posted_[tx_next_] = UdpWire::now();
      tx_ring_[tx_next_ % window_] = *r;
      ++tx_next_;
    }
    return {};
  }

  Status reap_sends(engine::Connection* c) {
    while (tx_done_ < tx_next_) {
      const engine::Completion comp = s_.test_send(tx_ring_[tx_done_ % window_]);
      if (!comp.done) break;
      if (Status st = completion_error(comp, fmt::format("send of message {} ({} B)", tx_done_, size_), c);
          !st) {
        return st;
      }
      completed_[tx_done_] = UdpWire::now();
      ++tx_done_;
    }
    return {};
  }

  Status reap_receives(engine::Connection* c) {
    while (rx_done_ < rx_posted_) {
      const engine::Completion comp = c->test(rx_ring_[rx_done_ % window_]);
      if (!comp.done) break;
      if (Status st = completion_error(comp, fmt::format("receive of message {} ({} B)", rx_done_, size_), c);
          !st) {
        return st;
      }
      if (Status st = verify(rx_[rx_done_], comp.bytes, size_, key(rx_done_, !server_), o_.check, rx_done_);
          !st) {
        s_.send_error(st.error().message);
        return st;
      }
      ++verified_;
      ++rx_done_;
      if (rx_posted_ < n_recv_) {
        auto r = c->post_recv(rx_[rx_posted_], size_, kTagData);
        if (!r) return make_error("posting a receive: " + r.error().message);
        rx_ring_[rx_posted_ % window_] = *r;
        ++rx_posted_;
      }
    }
    return {};
  }

  Session& s_;
  const PerfOptions& o_;
  uint64_t row_, size_;
  uint32_t window_;
  bool server_;
  uint64_t n_send_, n_recv_;
  Buffers tx_, rx_;
  std::vector<engine::RequestId> tx_ring_, rx_ring_;
  std::vector<TimeNs> posted_, completed_;
  uint64_t tx_next_ = 0, tx_done_ = 0;
  uint64_t rx_posted_ = 0, rx_done_ = 0;
  uint64_t verified_ = 0;
};

}  // namespace

Result<BwRow> client_bw_row(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                            bool same_host) {
  BwSide side(s, o, row, size, count, /*server=*/false);
  if (Status st = side.allocate(); !st) return st.error();
  AbortGuard guard(s);
  if (Status st = start_row(s, PerfTest::kBw, row, size, count); !st) return st.error();
  const SideSnapshot before = take_snapshot(s.wire(), s.id());
  // With -b the server's messages may arrive before these are posted: its sends wait for credit.
  if (Status st = side.post_receives(); !st) return st.error();
  if (Status st = side.run(); !st) return st.error();
  guard.disarm();  // every send and receive completed: nothing refers to the buffers any more
  const SideSnapshot after = take_snapshot(s.wire(), s.id());
  auto server = finish_row(s);
  if (!server) return server.error();

  BwRow r;
  r.size_bytes = size;
  r.iterations = count;
  r.window = side.window();
  r.figures = side.send_figures();
  if (o.bidirectional) {
    if (!server->sends) return make_error("the server's result has no send figures for a -b row");
    r.bidirectional = true;
    r.forward = r.figures;
    r.reverse = *server->sends;
    r.figures = sum_directions(r.forward, r.reverse);
  }
  r.verified_messages = server->verified + side.verified();
  r.counters = combine(side_delta(before, after), server->counters, same_host);
  return r;
}

// A latency row's send of two round trips ago must be done before its buffer is rewritten. It is
// tested before any progress round is driven for it: when it is already done, such a round would only
// send the ACKs the wire deferred, alone, ahead of this side's next message. `ack` and `send` name it
// in errors ("a ping's acknowledgement", "ping send").
Status finish_lat_send(Session& s, engine::RequestId& id, const char* ack, const char* send) {
  if (id == 0) return {};
  engine::Completion comp = s.test_send(id);
  if (!comp.done) {
    if (Status st = s.drive([&] { return (comp = s.test_send(id)).done; }, ack); !st) return st;
  }
  if (Status st = completion_error(comp, send, s.conn()); !st) return st;
  id = 0;
  return {};
}

// The receives of a latency row's side. Each side keeps kLatRecvsAhead receives posted, as perftest
// keeps its receives posted: the engine sends data only into a receive the peer has posted (its
// credit), so a message posted before the credit for it arrived would wait a one-way trip, and the
// ping-pong would measure the order of the loop, not the transport. The receive for round trip
// i + kLatRecvsAhead is posted once this side's message of round trip i has left, so that its
// credit travels behind that message, not ahead of it: a credit ahead of the message in one round
// would make the peer acknowledge the credit before it read the message, microseconds a trip.
class LatRecvs {
 public:
  LatRecvs(Session& s, Buffers& bufs, uint64_t size, uint64_t total, const char* what)
      : s_(s), bufs_(bufs), size_(size), total_(total), what_(what) {}
  Status prepost() {
    for (uint64_t j = 0; j < kLatRecvsAhead && j < total_; ++j) {
      if (Status st = post(j); !st) return st;
    }
    return {};
  }
  // After this side's message of round trip i has left.
  Status post_after(uint64_t i) { return i + kLatRecvsAhead < total_ ? post(i + kLatRecvsAhead) : Status{}; }
  engine::RequestId of(uint64_t i) const { return ids_[i % ids_.size()]; }

 private:
  Status post(uint64_t j) {
    engine::Connection* c = s_.conn();
    if (c == nullptr) return make_error("connection gone");
    auto r = c->post_recv(bufs_[j], size_, kTagData);
    if (!r) return make_error(fmt::format("posting the {} receive: {}", what_, r.error().message));
    ids_[j % ids_.size()] = *r;
    return {};
  }
  Session& s_;
  Buffers& bufs_;
  uint64_t size_;
  uint64_t total_;
  const char* what_;
  std::array<engine::RequestId, kLatRecvsAhead + 1> ids_{};
};

static_assert(2 + kLatRecvsAhead + 1 == kLatBuffersPerSide, "options.h counts a latency row's buffers");

Result<LatRow> client_lat_row(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                              bool same_host) {
  const uint64_t total = count + kLatWarmup;
  Buffers ping(2, size), pong(kLatRecvsAhead + 1, size);
  if (!ping.ok() || !pong.ok()) return out_of_memory(2 + kLatRecvsAhead + 1, size);
  AbortGuard guard(s);
  if (Status st = start_row(s, PerfTest::kLat, row, size, total); !st) return st.error();

  SideSnapshot before;
  std::vector<TimeNs> half_rtt;
  half_rtt.reserve(count);
  engine::RequestId sends[2] = {0, 0};
  uint64_t verified = 0;
  const TimeNs start = UdpWire::now();
  LatRecvs recvs(s, pong, size, total, "pong");
  if (Status st = recvs.prepost(); !st) return st.error();
  for (uint64_t i = 0; i < total; ++i) {
    if (i == kLatWarmup) before = take_snapshot(s.wire(), s.id());
    engine::Connection* c = s.conn();
    if (c == nullptr) return make_error("connection gone");
    if (Status st = finish_lat_send(s, sends[i % 2], "a ping's acknowledgement", "ping send"); !st)
      return st.error();
    prepare(ping[i], size, message_key(row, i, false), o.check);
    const TimeNs t0 = UdpWire::now();
    auto sr = c->post_send(ping[i], size, kTagData);
    if (!sr) return make_error("posting the ping: " + sr.error().message);
    sends[i % 2] = *sr;
    if (Status st = s.progress_data(); !st) return st.error();  // the ping leaves now
    if (Status st = recvs.post_after(i); !st) return st.error();
    const engine::RequestId recv = recvs.of(i);
    engine::Completion comp;
    for (;;) {
      if (Status st = s.progress_data(); !st) return st.error();
      comp = s.conn()->test(recv);
      if (comp.done) break;
      if (Status st = s.check_peer_abort(); !st) return st.error();
      if (Status st = s.check_lazily([&] { return fmt::format("pong {} of {} ({} B)", i, total, size); });
          !st)
        return st.error();
      s.idle();
    }
    const TimeNs t1 = UdpWire::now();
    s.touch();
    if (Status st = completion_error(comp, "pong receive", s.conn()); !st) return st.error();
    if (Status st = verify(pong[i], comp.bytes, size, message_key(row, i, true), o.check, i); !st) {
      s.send_error(st.error().message);
      return st.error();
    }
    ++verified;
    if (i >= kLatWarmup) half_rtt.push_back((t1 - t0) / 2);
    s.progress_note(start, [&] { return fmt::format("lat {} B: {} of {} round trips", size, i + 1, total); });
  }
  for (engine::RequestId& prev : sends) {
    if (prev == 0) continue;
    engine::Completion comp;
    if (Status st = s.drive([&] { return (comp = s.test_send(prev)).done; }, "a ping's acknowledgement");
        !st) {
      return st.error();
    }
    if (Status st = completion_error(comp, "ping send", s.conn()); !st) return st.error();
  }
  guard.disarm();
  if (total <= kLatWarmup) before = take_snapshot(s.wire(), s.id());
  const SideSnapshot after = take_snapshot(s.wire(), s.id());
  auto server = finish_row(s);
  if (!server) return server.error();

  LatRow r;
  r.size_bytes = size;
  r.iterations = count;
  r.figures = lat_figures(std::move(half_rtt));
  r.verified_messages = verified + server->verified;
  r.counters = combine(side_delta(before, after), server->counters, same_host);
  return r;
}

namespace {

// Server side of a bw row: receives posted before "ready", then the row (with -b, sends too).
Status serve_bw(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                ServerResult& out, SideSnapshot& before) {
  BwSide side(s, o, row, size, count, /*server=*/true);
  if (Status st = side.allocate(); !st) return st;
  AbortGuard guard(s);
  if (Status st = side.post_receives(); !st) return st;
  before = take_snapshot(s.wire(), s.id());
  if (Status st = s.send_control(json{{"type", "ready"}}); !st) return st;
  if (Status st = side.run(); !st) return st;
  guard.disarm();
  out.verified = side.verified();
  if (o.bidirectional) out.sends = side.send_figures();
  return {};
}

// Server side of a latency row: answer every ping with a pong of the same size.
Status serve_lat(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                 ServerResult& out, SideSnapshot& before) {
  Buffers ping(kLatRecvsAhead + 1, size), pong(2, size);
  if (!ping.ok() || !pong.ok()) return out_of_memory(kLatRecvsAhead + 1 + 2, size);
  AbortGuard guard(s);
  engine::RequestId sends[2] = {0, 0};
  LatRecvs recvs(s, ping, size, count, "ping");
  if (Status st = recvs.prepost(); !st) return st;
  if (Status st = s.send_control(json{{"type", "ready"}}); !st) return st;
  for (uint64_t i = 0; i < count; ++i) {
    if (i == kLatWarmup) before = take_snapshot(s.wire(), s.id());
    const engine::RequestId recv = recvs.of(i);
    engine::Completion comp;
    for (;;) {
      if (Status st = s.progress_data(); !st) return st;
      comp = s.conn()->test(recv);
      if (comp.done) break;
      if (Status st = s.check_peer_abort(); !st) return st;
      if (Status st = s.check_lazily([&] { return fmt::format("ping {} of {} ({} B)", i, count, size); });
          !st)
        return st;
      s.idle();
    }
    s.touch();
    engine::Connection* c = s.conn();
    if (Status st = completion_error(comp, "ping receive", c); !st) return st;
    if (Status st = verify(ping[i], comp.bytes, size, message_key(row, i, false), o.check, i); !st) {
      s.send_error(st.error().message);
      return st;
    }
    ++out.verified;
    if (Status st = finish_lat_send(s, sends[i % 2], "a pong's acknowledgement", "pong send"); !st) return st;
    prepare(pong[i], size, message_key(row, i, true), o.check);
    auto sr = s.conn()->post_send(pong[i], size, kTagData);
    if (!sr) return make_error("posting the pong: " + sr.error().message);
    sends[i % 2] = *sr;
    if (Status st = s.progress_data(); !st) return st;  // the pong leaves now
    if (Status st = recvs.post_after(i); !st) return st;
  }
  for (engine::RequestId& prev : sends) {
    if (prev == 0) continue;
    engine::Completion sc;
    if (Status st = s.drive([&] { return (sc = s.test_send(prev)).done; }, "a pong's acknowledgement"); !st) {
      return st;
    }
    if (Status st = completion_error(sc, "pong send", s.conn()); !st) return st;
  }
  guard.disarm();
  if (count <= kLatWarmup) before = take_snapshot(s.wire(), s.id());
  return {};
}

}  // namespace

Status server_row(Session& s, const PerfOptions& o, const json& msg) {
  uint64_t row = 0, size = 0, count = 0;
  std::string test;
  try {
    row = msg.at("row").get<uint64_t>();
    size = msg.at("size").get<uint64_t>();
    count = msg.at("count").get<uint64_t>();
    test = msg.at("test").get<std::string>();
  } catch (const json::exception& e) {
    return make_error(std::string("malformed row message from the client: ") + e.what());
  }
  if (size < 1 || size > kMaxSizeBytes || count < 1) {
    return make_error(fmt::format("row message from the client: size {} count {} out of range", size, count));
  }
  ServerResult result;
  SideSnapshot before;
  Status st = test == "bw" ? serve_bw(s, o, row, size, count, result, before)
              : test == "lat"
                  ? serve_lat(s, o, row, size, count, result, before)
                  : Status(make_error("row message from the client: unknown test '" + test + "'"));
  if (!st) return st;
  const SideSnapshot after = take_snapshot(s.wire(), s.id());
  result.counters = side_delta(before, after);
  json reply{{"type", "result"}, {"verified", result.verified}, {"counters", to_json(result.counters)}};
  if (result.sends) reply["sends"] = to_json(*result.sends);
  return s.send_control(reply);
}

}  // namespace megascale::perf::detail
