// A scripted in-memory "network" for engine tests: two endpoints wired back to back in virtual time.
// Every transmitted packet passes a rule that may drop, duplicate, delay (reorder), corrupt or CE-mark
// it; every transmitted packet is recorded in a trace (for determinism checks).
//
//   TestNet net(cfg_a, cfg_b);
//   net.rule = [](const Sent& s) { Fate f; f.drop = s.is_data() && s.pkt.seg.seq == 3 && s.copy == 0; return
//   f; }; auto [ca, cb] = net.connect_pair();
//   ... post on ca/cb ...
//   ASSERT_TRUE(net.run_until([&] { return done; }, sec(1)));
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/packet.h"

namespace megascale::engine::testing {

// Peer handles: A reaches B as peer kPeerB; B reaches A as kPeerA.
inline constexpr uint32_t kPeerA = 1;
inline constexpr uint32_t kPeerB = 2;

// What the network knows about one transmitted packet.
struct Sent {
  int from = 0;        // 0 = A, 1 = B
  uint64_t index = 0;  // transmission number in the whole run
  Packet pkt;          // decoded header (payload points into `bytes`)
  std::vector<uint8_t> bytes;
  uint32_t copy = 0;  // how many earlier transmissions had this (from, type, seq) — 0 for the first
  TxPacket tx_meta;   // lane, path id, ect, request (header bytes unused)
  bool is_seg() const { return pkt.hdr.type == PacketType::kSeg; }
  bool is_data() const { return is_seg() && !(pkt.hdr.flags & kFlagCredit); }
  bool is_ack() const { return pkt.hdr.type == PacketType::kAck; }
};

// What happens to it.
struct Fate {
  bool drop = false;
  int duplicates = 0;              // extra copies delivered (each 1 ns after the previous)
  TimeNs extra_delay_ns = 0;       // reorder: deliver later than the link delay
  bool corrupt_header = false;     // flip a bit in the header (header CRC catches it)
  bool corrupt_payload = false;    // flip a bit in the payload (payload CRC catches it)
  bool ce = false;                 // mark CE
  uint32_t from_peer = 0;          // hand it over as coming from this peer id (0: the sender's usual id),
                                   // as a wire does for a lane that sends from a source port of its own
  TimeNs processing_delay_ns = 0;  // the receiving host gets round to it this long after it arrived
                                   // (on_packet then gets the arrival as rx_time_ns, as from a kernel
                                   // receive timestamp)
};

class TestNet {
 public:
  TestNet(const EngineConfig& a, const EngineConfig& b) {
    auto ea = Endpoint::create(a);
    auto eb = Endpoint::create(b);
    EXPECT_TRUE(ea.ok()) << (ea.ok() ? "" : ea.error().message);
    EXPECT_TRUE(eb.ok()) << (eb.ok() ? "" : eb.error().message);
    ep[0] = std::move(*ea);
    ep[1] = std::move(*eb);
  }
  explicit TestNet(const EngineConfig& both) : TestNet(both, both) {}

  std::unique_ptr<Endpoint> ep[2];
  TimeNs now = 1'000'000;        // virtual time (not 0: timestamps of 0 are legal but unusual)
  TimeNs link_delay_ns = 5'000;  // one way
  std::function<Fate(const Sent&)> rule;
  std::vector<Sent> trace;  // every transmitted packet, in order
  bool keep_trace = true;
  uint64_t transmitted = 0;
  uint64_t delivered = 0;
  // Optional tap on every delivered copy (after corruption), e.g. to check payload content.
  std::function<void(int to, const uint8_t* bytes, size_t len)> tap;
  // Virtual payload (EngineConfig::virtual_payload): packets travel as headers alone and arrive through
  // on_packet_header_only with their payload length; a SEG leaving with payload bytes fails the test.
  bool header_only = false;
  // EngineConfig::wire_seals_payload_crc: seal each packet's payload CRC before it leaves, as a wire must.
  bool seal_payload_crc = false;
  // A wire that holds packets before sending them (an I/O thread's queue): each packet leaves this
  // long after poll_tx produced it. With tell_engine_tx_wait, the wait is passed on (add_tx_wait), as
  // the UDP wire's I/O threads do.
  std::function<TimeNs(int from, const TxPacket&)> tx_wait;
  bool tell_engine_tx_wait = false;
  // Deliver everything due at one instant before either side sends (a wire's receive batch): one
  // coalesced ACK answers them. Default: each delivery is answered before the next.
  bool coalesce = false;
  uint64_t pending_crc_packets = 0;  // packets that left with payload_crc_pending

  // A connects to B; returns (A's connection, B's accepted connection) once established.
  std::pair<Connection*, Connection*> connect_pair() {
    auto id = ep[0]->connect(now, kPeerB);
    EXPECT_TRUE(id.ok());
    Connection* ca = ep[0]->connection(*id);
    Connection* cb = nullptr;
    run_until(
        [&] {
          if (cb == nullptr) {
            if (auto acc = ep[1]->accept()) cb = ep[1]->connection(*acc);
          }
          return cb != nullptr && ca->state() == ConnectionState::kEstablished;
        },
        now + 1'000'000'000);
    return {ca, cb};
  }

  // Moves packets and fires timers until pred() holds (checked after every event) or virtual time
  // passes `deadline`. Returns pred().
  bool run_until(const std::function<bool()>& pred, TimeNs deadline) {
    for (;;) {
      pump();
      if (pred()) return true;
      const TimeNs t = next_event();
      if (t == kNever || t > deadline) {
        if (t != kNever && deadline > now) now = deadline;
        return pred();
      }
      now = std::max(now, t);
      deliver_due();
      for (auto& e : ep) {
        if (e->next_deadline() <= now) e->on_timer(now);
      }
    }
  }

  // Runs until nothing is left to happen before `deadline`.
  void run_for(TimeNs duration) {
    const TimeNs end = now + duration;
    run_until([] { return false; }, end);
  }

  // Hash of the whole trace (bytes and times) for determinism checks.
  uint64_t trace_hash() const { return trace_hash_; }

 private:
  struct InFlight {
    TimeNs at;
    uint64_t order;
    int to;
    bool ce;
    uint32_t from_peer;
    TimeNs rx;                      // arrival; `at` is when the receiver processes it (kRxTimeNow: the same)
    uint32_t absent_payload_bytes;  // header_only: the payload that is not in `bytes`
    std::vector<uint8_t> bytes;
    bool operator>(const InFlight& o) const { return at != o.at ? at > o.at : order > o.order; }
  };

  void pump() {
    TxPacket tx;
    for (int side = 0; side < 2; ++side) {
      while (ep[side]->poll_tx(now, tx)) {
        pending_crc_packets += tx.payload_crc_pending ? 1 : 0;
        if (seal_payload_crc) seal_seg_payload_crc(tx);
        const TimeNs wait = tx_wait ? tx_wait(side, tx) : 0;
        if (tell_engine_tx_wait) add_tx_wait(tx, wait);
        transmit(side, tx, wait);
      }
    }
  }

  // `wait_ns`: how long the wire held the packet after poll_tx (tx_wait) before it left.
  void transmit(int from, const TxPacket& tx, TimeNs wait_ns) {
    Sent s;
    s.from = from;
    s.index = transmitted++;
    const uint32_t absent = header_only ? tx.payload_len : 0;
    if (header_only) {
      EXPECT_EQ(tx.payload, nullptr) << "virtual payload: a segment left with payload bytes";
    }
    s.bytes.resize(tx.header_len + tx.payload_len - absent);
    std::memcpy(s.bytes.data(), tx.header, tx.header_len);
    if (tx.payload_len > absent) std::memcpy(s.bytes.data() + tx.header_len, tx.payload, tx.payload_len);
    const DecodeResult r = header_only
                               ? decode_packet_header_only(s.bytes.data(), s.bytes.size(), absent, s.pkt)
                               : decode_packet(s.bytes.data(), s.bytes.size(), s.pkt, false);
    EXPECT_EQ(r, DecodeResult::kOk) << "the engine sent a packet that does not decode: " << to_string(r);
    EXPECT_EQ(tx.peer, from == 0 ? kPeerB : kPeerA);
    s.tx_meta.lane = tx.lane;
    s.tx_meta.path_id = tx.path_id;
    s.tx_meta.ect = tx.ect;
    s.tx_meta.request = tx.request;
    // Copies: SEGs by seq; handshake, FIN and RST by type and flags; ACKs and CNPs are all distinct.
    const PacketType t = s.pkt.hdr.type;
    const bool by_type =
        t == PacketType::kSyn || t == PacketType::kSynAck || t == PacketType::kFin || t == PacketType::kRst;
    const uint64_t flags = by_type ? s.pkt.hdr.flags : 0;  // a retransmitted SEG is a copy
    const uint64_t key = (uint64_t(from) << 60) ^ (uint64_t(t) << 52) ^ (flags << 44) ^
                         (s.is_seg() ? s.pkt.seg.seq
                          : by_type  ? 0
                                     : (uint64_t{1} << 43) + s.index);
    s.copy = copies_[key]++;
    trace_hash_ = crc32c_extend(static_cast<uint32_t>(trace_hash_), s.bytes.data(), s.bytes.size()) ^
                  (trace_hash_ << 1) ^ static_cast<uint64_t>(now);
    Fate f = rule ? rule(s) : Fate{};
    if (!f.drop) {
      std::vector<uint8_t> b = s.bytes;
      if (f.corrupt_header) b[30] ^= 0x10;
      if (f.corrupt_payload && b.size() > s.pkt.header_len)
        b[s.pkt.header_len + (b.size() - s.pkt.header_len) / 2] ^= 0x01;
      const TimeNs at = now + wait_ns + link_delay_ns + f.extra_delay_ns;
      for (int d = 0; d <= f.duplicates; ++d) {
        const TimeNs rx = f.processing_delay_ns > 0 ? at + d : kRxTimeNow;
        queue_.push(
            InFlight{at + d + f.processing_delay_ns, order_++, 1 - from, f.ce, f.from_peer, rx, absent, b});
      }
    }
    if (keep_trace) trace.push_back(std::move(s));
  }

  TimeNs next_event() const {
    TimeNs t = queue_.empty() ? kNever : queue_.top().at;
    for (const auto& e : ep) t = std::min(t, e->next_deadline());
    return t;
  }

  void deliver_due() {
    while (!queue_.empty() && queue_.top().at <= now) {
      InFlight p = queue_.top();
      queue_.pop();
      ++delivered;
      if (tap) tap(p.to, p.bytes.data(), p.bytes.size());
      const uint32_t peer = p.from_peer != 0 ? p.from_peer : p.to == 1 ? kPeerA : kPeerB;
      if (header_only) {
        ep[p.to]->on_packet_header_only(now, peer, p.bytes.data(), p.bytes.size(), p.absent_payload_bytes,
                                        p.ce, p.rx);
      } else {
        ep[p.to]->on_packet(now, peer, p.bytes.data(), p.bytes.size(), p.ce, p.rx);
      }
      if (!coalesce) pump();
    }
    pump();
  }

  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> queue_;
  uint64_t order_ = 0;
  std::map<uint64_t, uint32_t> copies_;
  uint64_t trace_hash_ = 0;
};

// A seeded network script for TestNet::rule: each packet draws x in [0, 100); x < drop_pct drops it,
// drop_pct <= x < ce_below marks it CE, x >= delay_from delays it by a second draw in [0, max_delay_ns).
// The same seed gives the same script in every run (the determinism and growth comparisons need that).
inline std::function<Fate(const Sent&)> scripted_network(uint64_t seed, uint64_t drop_pct, uint64_t ce_below,
                                                         uint64_t delay_from, uint64_t max_delay_ns) {
  return [rng = std::mt19937_64(seed), drop_pct, ce_below, delay_from, max_delay_ns](const Sent&) mutable {
    Fate f;
    const uint64_t x = rng() % 100;
    f.drop = x < drop_pct;
    f.extra_delay_ns = x >= delay_from ? static_cast<TimeNs>(rng() % max_delay_ns) : 0;
    f.ce = x >= drop_pct && x < ce_below;
    return f;
  };
}

// A deterministic byte pattern distinct per (seed, offset).
inline uint8_t pattern_byte(uint64_t seed, uint64_t offset) {
  uint64_t z = (offset >> 3) * 0x9E3779B97F4A7C15ULL + seed;
  z ^= z >> 29;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 32;
  return static_cast<uint8_t>(z >> ((offset & 7) * 8));
}

inline std::vector<uint8_t> pattern(uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern_byte(seed, i);
  return v;
}

// A small engine config for tests: small segments so messages span many segments.
inline EngineConfig test_config(uint64_t seed = 1) {
  EngineConfig c;
  c.seed = seed;
  c.segment_bytes = 1000;
  c.lanes = 2;
  c.window_segments = 256;
  c.cc.kind = cc::ControllerKind::kFixedWindow;
  c.cc.fixed.window_packets = 32;
  c.cc.rto.min_rto_ns = 100'000;
  c.cc.rto.initial_rto_ns = 1'000'000;
  c.cc.rto.retry_budget_ns = 2'000'000'000;
  return c;
}

// Waits for a request; fills *out when it is done.
inline bool wait_done(TestNet& net, Connection* c, RequestId id, Completion* out,
                      TimeNs budget = 5'000'000'000) {
  return net.run_until(
      [&] {
        Completion x = c->test(id);
        if (!x.done) return false;
        *out = std::move(x);
        return true;
      },
      net.now + budget);
}

// A batch of messages from `tx` to `rx`, each with its own pattern and tag, checked on completion:
// every receive reports its message's size and tag, and holds exactly the bytes sent.
struct Batch {
  struct Msg {
    std::vector<uint8_t> data;
    std::vector<uint8_t> dst;
    int32_t tag = 0;
    RequestId send_id = 0;
    RequestId recv_id = 0;
    Completion sc, rc;
  };
  std::vector<Msg> msgs;
  uint64_t total_bytes = 0;
  uint64_t rx_bytes_before = 0;  // the receiver's byte counter when the receives were posted

  Batch(const std::vector<uint64_t>& sizes, uint64_t seed, uint64_t extra_capacity = 0) {
    msgs.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      msgs[i].data = pattern(seed * 1000 + i, sizes[i]);
      msgs[i].dst.assign(sizes[i] + extra_capacity, 0xEE);
      msgs[i].tag = static_cast<int32_t>(i % 7);
      total_bytes += sizes[i];
    }
  }
  void post_recvs(Connection* rx) {
    rx_bytes_before = rx->stats().bytes_received;
    for (Msg& m : msgs) {
      auto r = rx->post_recv(m.dst.data(), m.dst.size(), m.tag);
      ASSERT_TRUE(r.ok()) << r.error().message;
      m.recv_id = *r;
    }
  }
  void post_sends(Connection* tx) {
    for (Msg& m : msgs) {
      auto s = tx->post_send(m.data.data(), m.data.size(), m.tag);
      ASSERT_TRUE(s.ok()) << s.error().message;
      m.send_id = *s;
    }
  }
  // Runs until every request is done (or the budget ends); returns whether all finished.
  bool run(TestNet& net, Connection* tx, Connection* rx, TimeNs budget = 20'000'000'000) {
    return net.run_until(
        [&] {
          bool all = true;
          for (Msg& m : msgs) {
            if (!m.sc.done) m.sc = tx->test(m.send_id);
            if (!m.rc.done) m.rc = rx->test(m.recv_id);
            all = all && m.sc.done && m.rc.done;
          }
          return all;
        },
        net.now + budget);
  }
  // Every byte arrived exactly once and intact.
  void expect_intact(const Connection* rx) const {
    for (size_t i = 0; i < msgs.size(); ++i) {
      const Msg& m = msgs[i];
      EXPECT_TRUE(m.sc.ok) << "send " << i << ": " << m.sc.error;
      EXPECT_TRUE(m.rc.ok) << "recv " << i << ": " << m.rc.error;
      EXPECT_EQ(m.rc.bytes, m.data.size()) << "recv " << i;
      EXPECT_EQ(m.rc.tag, m.tag) << "recv " << i;
      EXPECT_TRUE(std::equal(m.data.begin(), m.data.end(), m.dst.begin())) << "payload of message " << i;
      EXPECT_TRUE(std::all_of(m.dst.begin() + static_cast<std::ptrdiff_t>(m.data.size()), m.dst.end(),
                              [](uint8_t b) { return b == 0xEE; }))
          << "bytes written past message " << i;
    }
    // Placement counts each new segment once: equal totals mean nothing was placed twice.
    EXPECT_EQ(rx->stats().bytes_received - rx_bytes_before, total_bytes);
  }
};

// Drops the first transmission of the DATA segments with these message offsets.
std::function<Fate(const Sent&)> drop_first_copy_of(std::set<uint64_t> offsets) {
  return [offsets](const Sent& s) {
    Fate f;
    f.drop = s.is_data() && s.copy == 0 && offsets.count(s.pkt.seg.offset) > 0;
    return f;
  };
}

// The same message sizes both ways at once: a -> b with Batch seed `seed_ab`, b -> a with `seed_ba`,
// receives posted before sends. Runs both until done (false if either misses `budget`) and checks
// every byte at both ends.
inline bool exchange_both_ways(TestNet& net, Connection* a, Connection* b, const std::vector<uint64_t>& sizes,
                               uint64_t seed_ab, uint64_t seed_ba, TimeNs budget = 20'000'000'000) {
  Batch ab(sizes, seed_ab), ba(sizes, seed_ba);
  ab.post_recvs(b);
  ba.post_recvs(a);
  ab.post_sends(a);
  ba.post_sends(b);
  const bool done_ab = ab.run(net, a, b, budget);
  const bool done_ba = ba.run(net, b, a, budget);
  ab.expect_intact(b);
  ba.expect_intact(a);
  return done_ab && done_ba;
}

}  // namespace megascale::engine::testing
