// The bandwidth and latency loops of one row, client and server.
#include "rows.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>

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
  static constexpr uint64_t kPage = 4096;
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
};

Result<ServerResult> parse_result(const json& j) {
  ServerResult r;
  r.verified = j.value("verified", uint64_t{0});
  if (j.contains("counters")) r.counters = side_counters_from_json(j["counters"]);
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

}  // namespace

Result<BwRow> client_bw_row(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                            bool same_host) {
  const uint32_t window = buffers_for(o, size);
  Buffers bufs(window, size);
  if (!bufs.ok()) return out_of_memory(window, size);
  AbortGuard guard(s);
  if (!o.check) {
    for (uint32_t b = 0; b < window; ++b) fill_pattern(bufs[b], size, message_key(row, b, false));
  }
  if (Status st = start_row(s, PerfTest::kBw, row, size, count); !st) return st.error();

  const SideSnapshot before = take_snapshot(s.wire(), s.id());
  std::vector<TimeNs> posted(count), completed(count);
  std::vector<engine::RequestId> ring(window);
  uint64_t next = 0, done = 0;
  const TimeNs start = UdpWire::now();
  while (done < count) {
    engine::Connection* c = s.conn();
    if (c == nullptr) return make_error("connection gone");
    while (next < count && next - done < window) {
      uint8_t* buf = bufs[next];
      prepare(buf, size, message_key(row, next, false), o.check);
      auto r = c->post_send(buf, size, kTagData);
      if (!r) return make_error(fmt::format("posting send {}: {}", next, r.error().message));
      posted[next] = UdpWire::now();
      ring[next % window] = *r;
      ++next;
    }
    if (Status st = s.progress(); !st) return st.error();
    const uint64_t reaped_from = done;
    while (done < next) {
      const engine::Completion comp = s.test_send(ring[done % window]);
      if (!comp.done) break;
      if (Status st = completion_error(comp, fmt::format("send of message {} ({} B)", done, size), c); !st) {
        return st.error();
      }
      completed[done] = UdpWire::now();
      ++done;
    }
    if (done > reaped_from) s.touch();
    // Also while nothing completes: a stalled row says so every second.
    s.progress_note(start, [&] { return fmt::format("bw {} B: {} of {} messages", size, done, count); });
    if (done > reaped_from) continue;
    if (Status st = s.check_peer_abort(); !st) return st.error();
    if (Status st = s.check_lazily(
            [&] { return fmt::format("send completions (bw {} B, {} of {} done)", size, done, count); });
        !st) {
      return st.error();
    }
    s.idle();
  }
  guard.disarm();  // every send completed: nothing refers to the buffers any more
  const SideSnapshot after = take_snapshot(s.wire(), s.id());
  auto server = finish_row(s);
  if (!server) return server.error();

  BwRow r;
  r.size_bytes = size;
  r.iterations = count;
  r.window = window;
  r.figures = bw_figures(size, posted, completed, window);
  r.verified_messages = server->verified;
  r.counters = combine(side_delta(before, after), server->counters, same_host);
  return r;
}

Result<LatRow> client_lat_row(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                              bool same_host) {
  const uint64_t total = count + kLatWarmup;
  Buffers ping(2, size), pong(1, size);
  if (!ping.ok() || !pong.ok()) return out_of_memory(3, size);
  AbortGuard guard(s);
  if (Status st = start_row(s, PerfTest::kLat, row, size, total); !st) return st.error();

  SideSnapshot before;
  std::vector<TimeNs> half_rtt;
  half_rtt.reserve(count);
  engine::RequestId sends[2] = {0, 0};
  uint64_t verified = 0;
  const TimeNs start = UdpWire::now();
  for (uint64_t i = 0; i < total; ++i) {
    if (i == kLatWarmup) before = take_snapshot(s.wire(), s.id());
    engine::Connection* c = s.conn();
    if (c == nullptr) return make_error("connection gone");
    // The ping buffer of two round trips ago must be released by its send before it is rewritten.
    if (engine::RequestId& prev = sends[i % 2]; prev != 0) {
      engine::Completion comp;
      if (Status st = s.drive([&] { return (comp = s.test_send(prev)).done; }, "a ping's acknowledgement");
          !st) {
        return st.error();
      }
      if (Status st = completion_error(comp, "ping send", s.conn()); !st) return st.error();
      prev = 0;
    }
    auto rr = c->post_recv(pong[0], size, kTagData);
    if (!rr) return make_error("posting the pong receive: " + rr.error().message);
    prepare(ping[i], size, message_key(row, i, false), o.check);
    const TimeNs t0 = UdpWire::now();
    auto sr = c->post_send(ping[i], size, kTagData);
    if (!sr) return make_error("posting the ping: " + sr.error().message);
    sends[i % 2] = *sr;
    engine::Completion comp;
    for (;;) {
      if (Status st = s.progress(); !st) return st.error();
      comp = s.conn()->test(*rr);
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
    if (Status st = verify(pong[0], comp.bytes, size, message_key(row, i, true), o.check, i); !st) {
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

// Server side of a bw row: keep up to `window` receives posted, check each message, repost.
Status serve_bw(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                ServerResult& out, SideSnapshot& before) {
  const uint32_t window = buffers_for(o, size);
  Buffers bufs(window, size);
  if (!bufs.ok()) return out_of_memory(window, size);
  AbortGuard guard(s);
  std::vector<engine::RequestId> ring(window);
  uint64_t posted = 0, done = 0;
  engine::Connection* c = s.conn();
  for (; posted < count && posted < window; ++posted) {
    auto r = c->post_recv(bufs[posted], size, kTagData);
    if (!r) return make_error("posting a receive: " + r.error().message);
    ring[posted % window] = *r;
  }
  before = take_snapshot(s.wire(), s.id());
  if (Status st = s.send_control(json{{"type", "ready"}}); !st) return st;
  while (done < count) {
    if (Status st = s.progress(); !st) return st;
    c = s.conn();
    if (c == nullptr) return make_error("connection gone");
    const uint64_t from = done;
    while (done < posted) {
      const engine::Completion comp = c->test(ring[done % window]);
      if (!comp.done) break;
      if (Status st = completion_error(comp, fmt::format("receive of message {} ({} B)", done, size), c);
          !st) {
        return st;
      }
      if (Status st = verify(bufs[done], comp.bytes, size, message_key(row, done, false), o.check, done);
          !st) {
        s.send_error(st.error().message);
        return st;
      }
      ++out.verified;
      ++done;
      if (posted < count) {
        auto r = c->post_recv(bufs[posted], size, kTagData);
        if (!r) return make_error("posting a receive: " + r.error().message);
        ring[posted % window] = *r;
        ++posted;
      }
    }
    if (done > from) {
      s.touch();
      continue;
    }
    if (Status st = s.check_peer_abort(); !st) return st;
    if (Status st = s.check_lazily(
            [&] { return fmt::format("bw messages ({} B, {} of {} received)", size, done, count); });
        !st)
      return st;
    s.idle();
  }
  guard.disarm();
  return {};
}

// Server side of a latency row: answer every ping with a pong of the same size.
Status serve_lat(Session& s, const PerfOptions& o, uint64_t row, uint64_t size, uint64_t count,
                 ServerResult& out, SideSnapshot& before) {
  Buffers ping(1, size), pong(2, size);
  if (!ping.ok() || !pong.ok()) return out_of_memory(3, size);
  AbortGuard guard(s);
  engine::RequestId sends[2] = {0, 0};
  auto rr = s.conn()->post_recv(ping[0], size, kTagData);
  if (!rr) return make_error("posting the ping receive: " + rr.error().message);
  engine::RequestId recv = *rr;
  if (Status st = s.send_control(json{{"type", "ready"}}); !st) return st;
  for (uint64_t i = 0; i < count; ++i) {
    if (i == kLatWarmup) before = take_snapshot(s.wire(), s.id());
    engine::Completion comp;
    for (;;) {
      if (Status st = s.progress(); !st) return st;
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
    if (Status st = verify(ping[0], comp.bytes, size, message_key(row, i, false), o.check, i); !st) {
      s.send_error(st.error().message);
      return st;
    }
    ++out.verified;
    if (engine::RequestId& prev = sends[i % 2]; prev != 0) {
      engine::Completion sc;
      if (Status st = s.drive([&] { return (sc = s.test_send(prev)).done; }, "a pong's acknowledgement");
          !st) {
        return st;
      }
      if (Status st = completion_error(sc, "pong send", s.conn()); !st) return st;
      prev = 0;
    }
    prepare(pong[i], size, message_key(row, i, true), o.check);
    auto sr = c->post_send(pong[i], size, kTagData);
    if (!sr) return make_error("posting the pong: " + sr.error().message);
    sends[i % 2] = *sr;
    if (i + 1 < count) {
      auto next = c->post_recv(ping[0], size, kTagData);
      if (!next) return make_error("posting the ping receive: " + next.error().message);
      recv = *next;
    }
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
  return s.send_control(
      json{{"type", "result"}, {"verified", result.verified}, {"counters", to_json(result.counters)}});
}

}  // namespace megascale::perf::detail
