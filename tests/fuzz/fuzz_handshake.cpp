// libFuzzer target: sequences of datagrams, timer ticks and application calls against two engine
// Endpoints in virtual time: L listens, C has a connect to L pending. The input is a little script
// (format below) so the fuzzer can both inject arbitrary datagrams and let the two endpoints talk for
// real, mutating their packets in flight; that reaches the handshake, data transfer, loss recovery,
// close and reset paths, not only the decoder. It must never crash, leak (ASan), hang, or break these
// invariants (abort with a message):
// - every datagram the decoder refuses is counted in stats().malformed_dropped, exactly once;
// - every datagram is counted in packets_received;
// - poll_tx runs dry at a fixed `now` (no endless stream of packets), and after on_timer(now) plus
//   draining poll_tx the next deadline lies in the future (a wire would otherwise spin);
// - a completed receive never reports more bytes than its buffer holds.
//
// Script: records until the input ends; each starts with an op byte (op % 4):
//   0 INJECT   u8 flags, u16 len, len bytes: a datagram to C (flags bit0) or L, from its real peer or
//              from a stranger (bit1); bit2 "fix up": set magic, version kVersion (the one the two
//              endpoints agree on; SYN and SYN_ACK keep theirs), header CRC and payload CRC, and (bit3)
//              dst_conn_id := the target's connection number flags>>4 (so mutated content gets past
//              the checksums, the demultiplexer and the connection's version check)
//   1 EXCHANGE u8 rounds, u8 offset, u8 xor, u8 mflags: `rounds` times, both endpoints' packets are
//              delivered to each other; the first packet of a round gets byte `offset % len` xored
//              (mflags bit0; bit1 re-seals the CRCs after), is dropped (bit2) or duplicated (bit3)
//   2 TIME     u16 ticks: now += ticks * 10 us, then on_timer on both
//   3 APP      u8 what, u16 size, u8 tag: (what & 7) % 5 picks post_send / post_recv / close / release /
//              test(size as a request id), on C if what bit3 else on L (L accepts first)
//
//   fuzz_handshake -max_total_time=60 corpus/ tests/fuzz/corpus/fuzz_handshake/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "megascale/engine/crc32c.h"
#include "megascale/engine/endpoint.h"
#include "megascale/engine/packet.h"

namespace {

using namespace megascale;
using namespace megascale::engine;

constexpr uint32_t kPeerOfL = 1;  // how C names L
constexpr uint32_t kPeerOfC = 2;  // how L names C
constexpr uint32_t kStranger = 99;
constexpr size_t kMaxPacketsPerDrain = 1 << 16;
constexpr size_t kMaxPosts = 256;

// FUZZ_HANDSHAKE_TRACE=1: print what each op did (to check what a seed script exercises).
bool trace() {
  static const bool on = std::getenv("FUZZ_HANDSHAKE_TRACE") != nullptr;
  return on;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_handshake: invariant broken: %s\n", what);
  std::abort();
}

// Little reader over the input; reads past the end give zeros and mark it done.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t at = 0;
  bool more() const { return at < n; }
  uint8_t u8() { return at < n ? p[at++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
};

EngineConfig fuzz_config(uint64_t seed) {
  EngineConfig cfg;
  cfg.lanes = 2;
  cfg.segment_bytes = 1024;
  cfg.window_segments = 64;
  cfg.max_posted_recvs = 16;
  cfg.max_posted_sends = 16;
  cfg.max_connections = 8;
  cfg.connect_timeout_ns = ms(50);
  cfg.cc.rto.initial_rto_ns = us(200);
  cfg.cc.rto.min_rto_ns = us(100);
  cfg.cc.rto.max_rto_ns = ms(20);
  cfg.cc.rto.retry_budget_ns = ms(200);
  cfg.cc.flow.line_rate_bps = 1e9;
  cfg.seed = seed;
  return cfg;
}

// Recomputes the header CRC and a SEG's payload CRC so that damaged content reaches the protocol.
void reseal(std::vector<uint8_t>& d) {
  const size_t hlen = packet_header_len(d.data(), d.size());
  if (hlen == 0 || d.size() < hlen) return;
  if (d[5] == static_cast<uint8_t>(PacketType::kSeg) && d.size() >= kSegHeaderBytes) {
    const size_t payload = d.size() - hlen;
    const uint32_t crc = payload ? crc32c(d.data() + hlen, payload) : 0;
    std::memcpy(d.data() + 44, &crc, 4);
  }
  std::memset(d.data() + 20, 0, 4);
  const uint32_t crc = crc32c(d.data(), hlen);
  std::memcpy(d.data() + 20, &crc, 4);
}

struct Harness {
  std::unique_ptr<Endpoint> ep[2];  // 0 = L (listens), 1 = C (connects)
  ConnId conn[2] = {0, 0};          // L's accepted connection, C's connection
  TimeNs now = 1'000'000'000;
  std::deque<std::vector<uint8_t>> recv_bufs;  // receive buffers: outlive the endpoints (~Harness)
  std::vector<uint8_t> send_data = std::vector<uint8_t>(65536, 0x5A);
  size_t posts = 0;

  Harness() {
    auto l = Endpoint::create(fuzz_config(11));
    auto c = Endpoint::create(fuzz_config(22));
    if (!l || !c) fail("fuzz config rejected");
    ep[0] = std::move(*l);
    ep[1] = std::move(*c);
    auto id = ep[1]->connect(now, kPeerOfL);
    if (!id) fail("connect refused");
    conn[1] = *id;
  }
  ~Harness() {
    ep[0].reset();  // endpoints first: they may still point into the receive buffers
    ep[1].reset();
  }

  uint32_t real_peer(int to) const { return to == 0 ? kPeerOfC : kPeerOfL; }

  void deliver(int to, uint32_t peer, const std::vector<uint8_t>& d) {
    Endpoint& e = *ep[to];
    Packet scratch;
    const DecodeResult r = decode_packet(d.data(), d.size(), scratch, true);
    const uint64_t malformed = e.stats().malformed_dropped;
    const uint64_t received = e.stats().packets_received;
    e.on_packet(now, peer, d.data(), d.size(), false);
    const bool refused = r != DecodeResult::kOk && r != DecodeResult::kBadPayloadCrc;
    if (e.stats().malformed_dropped != malformed + (refused ? 1 : 0)) fail("malformed_dropped miscounted");
    if (e.stats().packets_received != received + 1) fail("packets_received miscounted");
  }

  // Everything endpoint `from` wants to send now.
  std::vector<std::vector<uint8_t>> drain(int from) {
    std::vector<std::vector<uint8_t>> out;
    TxPacket tx;
    while (ep[from]->poll_tx(now, tx)) {
      if (out.size() >= kMaxPacketsPerDrain) fail("poll_tx never runs dry at a fixed time");
      std::vector<uint8_t> d(tx.header, tx.header + tx.header_len);
      if (tx.payload_len) d.insert(d.end(), tx.payload, tx.payload + tx.payload_len);
      out.push_back(std::move(d));
    }
    return out;
  }

  void inject(Reader& in) {
    const uint8_t flags = in.u8();
    const size_t len = in.u16();
    std::vector<uint8_t> d;
    for (size_t i = 0; i < len && in.more(); ++i) d.push_back(in.u8());
    const int to = flags & 1;
    if ((flags & 4) && d.size() >= kCommonHeaderBytes) {
      const uint32_t magic = kMagic;
      std::memcpy(d.data(), &magic, 4);
      if (d[5] != static_cast<uint8_t>(PacketType::kSyn) &&
          d[5] != static_cast<uint8_t>(PacketType::kSynAck)) {
        d[4] = kVersion;
      }
      if (flags & 8) {
        const std::vector<ConnId> ids = ep[to]->connection_ids();
        if (!ids.empty()) {
          const ConnId id = ids[(flags >> 4) % ids.size()];
          std::memcpy(d.data() + 8, &id, 8);
        }
      }
      reseal(d);
    }
    deliver(to, (flags & 2) ? kStranger : real_peer(to), d);
  }

  void exchange(Reader& in) {
    const int rounds = 1 + in.u8() % 8;
    const uint8_t offset = in.u8(), x = in.u8(), mflags = in.u8();
    for (int round = 0; round < rounds; ++round) {
      for (int from = 0; from < 2; ++from) {
        std::vector<std::vector<uint8_t>> pkts = drain(from);
        for (size_t i = 0; i < pkts.size(); ++i) {
          std::vector<uint8_t>& d = pkts[i];
          int copies = 1;
          if (i == 0 && round == 0) {
            if ((mflags & 1) && !d.empty()) {
              d[offset % d.size()] ^= x;
              if (mflags & 2) reseal(d);
            }
            if (mflags & 4) copies = 0;
            if (mflags & 8) copies = 2;
          }
          for (int k = 0; k < copies; ++k) deliver(1 - from, real_peer(1 - from), d);
        }
      }
      now += us(5);
    }
  }

  void tick(Reader& in) {
    now += TimeNs{in.u16()} * us(10);
    for (auto& e : ep) {
      // As a wire does: send what is queued, then run the timers due at `now` and send what they
      // release (all of it lost: nobody delivers it), until the next deadline lies ahead.
      for (int pass = 0;; ++pass) {
        TxPacket tx;
        size_t n = 0;
        while (e->poll_tx(now, tx)) {
          if (++n > kMaxPacketsPerDrain) fail("poll_tx never runs dry");
        }
        if (e->next_deadline() > now) break;
        if (pass == 4) fail("next_deadline stays due after on_timer and draining poll_tx");
        e->on_timer(now);
      }
    }
  }

  void app(Reader& in) {
    const uint8_t what = in.u8();
    const uint16_t size = in.u16();
    const int8_t tag = static_cast<int8_t>(in.u8());
    const int side = (what >> 3) & 1;  // 0 = L, 1 = C
    if (conn[0] == 0) {
      if (std::optional<ConnId> a = ep[0]->accept()) conn[0] = *a;
    }
    Connection* c = conn[side] ? ep[side]->connection(conn[side]) : nullptr;
    if (c == nullptr || posts >= kMaxPosts) return;
    ++posts;
    switch ((what & 7) % 5) {
      case 0:
        (void)c->post_send(send_data.data(), size, tag);
        break;
      case 1: {
        recv_bufs.emplace_back(size);
        auto r = c->post_recv(recv_bufs.back().data(), size, tag);
        if (r) pending_recvs.push_back({side, *r, size});
        break;
      }
      case 2:
        c->close(now);
        break;
      case 3:
        ep[side]->release(conn[side]);
        conn[side] = 0;
        break;
      case 4:
        (void)c->test(static_cast<RequestId>(size));
        break;  // any id, known or not
    }
  }

  void check_receives() {
    for (size_t i = 0; i < pending_recvs.size();) {
      PendingRecv& p = pending_recvs[i];
      Connection* c = conn[p.side] ? ep[p.side]->connection(conn[p.side]) : nullptr;
      if (c == nullptr) {
        pending_recvs.erase(pending_recvs.begin() + static_cast<long>(i));
        continue;
      }
      const Completion done = c->test(p.id);
      if (done.done && done.ok && done.bytes > p.capacity)
        fail("receive completed with more bytes than its buffer");
      if (done.done && trace()) {
        std::fprintf(stderr, "  recv on %c done: ok %d, %llu bytes, tag %d %s\n", p.side ? 'C' : 'L', done.ok,
                     static_cast<unsigned long long>(done.bytes), done.tag, done.error.c_str());
      }
      if (done.done) {
        pending_recvs.erase(pending_recvs.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }

  void print_state() const {
    for (int side = 0; side < 2; ++side) {
      const Connection* c = conn[side] ? ep[side]->connection(conn[side]) : nullptr;
      const EndpointStats& st = ep[side]->stats();
      std::fprintf(stderr,
                   "  t=%.6f %c: %s%s, rx %llu malformed %llu unknown %llu, sent %llu B, received %llu B\n",
                   static_cast<double>(now) / 1e9, side ? 'C' : 'L',
                   c ? std::string(to_string(c->state())).c_str() : "no connection",
                   c && !c->error().empty() ? (" (" + c->error() + ")").c_str() : "",
                   static_cast<unsigned long long>(st.packets_received),
                   static_cast<unsigned long long>(st.malformed_dropped),
                   static_cast<unsigned long long>(st.unknown_connection),
                   static_cast<unsigned long long>(c ? c->stats().bytes_acked : 0),
                   static_cast<unsigned long long>(c ? c->stats().bytes_received : 0));
    }
  }

  struct PendingRecv {
    int side;
    RequestId id;
    uint64_t capacity;
  };
  std::vector<PendingRecv> pending_recvs;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h;
  Reader in{data, size};
  while (in.more()) {
    const uint8_t op = in.u8();
    static constexpr const char* kOps[] = {"INJECT", "EXCHANGE", "TIME", "APP"};
    if (trace()) std::fprintf(stderr, "op %s\n", kOps[op % 4]);
    switch (op % 4) {
      case 0:
        h.inject(in);
        break;
      case 1:
        h.exchange(in);
        break;
      case 2:
        h.tick(in);
        break;
      case 3:
        h.app(in);
        break;
    }
    h.check_receives();
    if (trace()) h.print_state();
  }
  return 0;
}
