// The wire over a packet port (packet_port.h): two wires joined by an in-memory port pair move data
// whole in both driving modes, lanes leave from distinct slots, a lossy port is recovered from by the
// engine, the threaded wire sleeps on the port's fd and wakes for an arrival, and bad set-ups are
// refused naming the problem. Also the address text of UDP wires ("host:port", "[v6]:port").
#include "megascale/wire/packet_port.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

// Two queues and two eventfds shared by a pair of MemoryPorts; side i receives from queue i. A side's
// eventfd works as a verbs completion channel does: a packet raises an event only on a side that armed
// (one event per arm), and the port reads the eventfd only after it armed.
struct MemoryLink {
  struct Packet {
    uint32_t from_slot = 0;
    std::vector<uint8_t> bytes;
    bool ce = false;
  };
  std::mutex mu;
  std::deque<Packet> queue[2];
  bool armed[2] = {false, false};
  int fd[2] = {eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
  ~MemoryLink() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

// Peer addresses are "mem:S" (side S, home slot) and, as sources, "mem:S/slot". Every `drop_every`-th
// packet sent (0: none) is lost; every `mark_every`-th arrives CE-marked.
class MemoryPort final : public PacketPort {
 public:
  MemoryPort(std::shared_ptr<MemoryLink> link, int side, uint32_t slots, uint32_t drop_every = 0,
             uint32_t mark_every = 0)
      : link_(std::move(link)),
        side_(side),
        slots_(slots),
        drop_every_(drop_every),
        mark_every_(mark_every) {}

  uint32_t slots() const override { return slots_; }
  size_t max_packet_bytes() const override { return 9000; }
  std::string describe() const override { return "memory port " + std::to_string(side_); }
  std::string local_address() const override { return "mem:" + std::to_string(side_); }
  Result<uint32_t> add_peer(std::string_view address) override {
    if (address.substr(0, 4) != "mem:")
      return make_error(ErrorCode::kInvalidUsage, "memory port: bad address");
    return intern(std::string(address));
  }
  bool has_peer(uint32_t peer) const override { return peer < peers_.size(); }
  std::string peer_address(uint32_t peer) const override { return peers_.at(peer); }

  Status send(std::span<const PortPacket> packets) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    for (const PortPacket& p : packets) {
      slots_used.insert(p.slot);
      EXPECT_LT(p.slot, slots_);
      ++stats_.packets_sent;
      if (drop_every_ != 0 && stats_.packets_sent % drop_every_ == 0) {
        ++stats_.send_dropped;
        continue;
      }
      MemoryLink::Packet out;
      out.from_slot = p.slot;
      out.bytes.assign(p.header, p.header + p.header_len);
      if (p.payload_len > 0) out.bytes.insert(out.bytes.end(), p.payload, p.payload + p.payload_len);
      out.ce = mark_every_ != 0 && stats_.packets_sent % mark_every_ == 0;
      stats_.bytes_sent += out.bytes.size();
      link_->queue[1 - side_].push_back(std::move(out));
    }
    if (link_->armed[1 - side_]) {
      link_->armed[1 - side_] = false;
      eventfd_write(link_->fd[1 - side_], 1);
      ++fd_writes;
    }
    return {};
  }

  Result<size_t> receive(size_t max, const Deliver& deliver) override {
    ++receives;
    if (drain_due_) {
      drain_due_ = false;
      eventfd_t drained = 0;
      eventfd_read(link_->fd[side_], &drained);
      ++fd_reads;
    }
    std::deque<MemoryLink::Packet> got;
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      auto& q = link_->queue[side_];
      while (!q.empty() && got.size() < max) {
        got.push_back(std::move(q.front()));
        q.pop_front();
      }
    }
    for (auto& p : got) {
      const uint32_t peer = intern("mem:" + std::to_string(1 - side_) + "/" + std::to_string(p.from_slot));
      ++stats_.packets_received;
      stats_.bytes_received += p.bytes.size();
      stats_.ce_received += p.ce ? 1 : 0;
      deliver(peer, p.bytes.data(), p.bytes.size(), p.ce);
    }
    return got.size();
  }

  int wait_fd() const override { return link_->fd[side_]; }
  bool arm() override {
    ++arms;
    drain_due_ = true;
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->armed[side_] = true;
    return link_->queue[side_].empty();
  }
  PortStats stats() const override {
    PortStats s = stats_;
    s.extra = {{"arms", arms}};
    return s;
  }

  std::set<uint32_t> slots_used;
  uint64_t arms = 0;
  // The system calls a device port would make: eventfd reads and writes (the completion channel's).
  uint64_t fd_reads = 0;
  uint64_t fd_writes = 0;
  uint64_t receives = 0;  // receive() calls

 private:
  uint32_t intern(const std::string& address) {
    for (uint32_t i = 0; i < peers_.size(); ++i) {
      if (peers_[i] == address) return i;
    }
    peers_.push_back(address);
    return static_cast<uint32_t>(peers_.size() - 1);
  }

  std::shared_ptr<MemoryLink> link_;
  int side_;
  uint32_t slots_;
  uint32_t drop_every_;
  uint32_t mark_every_;
  std::vector<std::string> peers_;
  PortStats stats_;
  bool drain_due_ = false;  // armed since the eventfd was last read
};

UdpConfig port_config() {
  UdpConfig c;
  c.engine.lanes = 4;
  c.engine.segment_bytes = 4096;
  c.engine.cc.kind = cc::ControllerKind::kFixedWindow;
  c.engine.cc.fixed.window_packets = 32;
  c.engine.repath_delay_rtts = 0;
  c.engine.repath_rto_threshold = 1000;
  c.engine.connect_timeout_ns = sec(10);
  return c;
}

struct Pair {
  std::unique_ptr<UdpWire> a, b;
  MemoryPort* port_a = nullptr;
  MemoryPort* port_b = nullptr;
};

Pair make_pair_of_wires(uint32_t drop_every = 0, uint32_t mark_every = 0) {
  auto link = std::make_shared<MemoryLink>();
  auto pa = std::make_unique<MemoryPort>(link, 0, 4, drop_every, mark_every);
  auto pb = std::make_unique<MemoryPort>(link, 1, 4);
  Pair p;
  p.port_a = pa.get();
  p.port_b = pb.get();
  auto a = UdpWire::create(port_config(), std::move(pa));
  auto b = UdpWire::create(port_config(), std::move(pb));
  EXPECT_TRUE(a) << (a ? "" : a.error().message);
  EXPECT_TRUE(b) << (b ? "" : b.error().message);
  if (a) p.a = std::move(*a);
  if (b) p.b = std::move(*b);
  return p;
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
  return v;
}

// Sends `n` bytes a -> b in threaded mode and checks them; `retransmits`, when given, gets the sender's.
void transfer(Pair& p, size_t n, uint64_t* retransmits = nullptr) {
  ASSERT_TRUE(p.a && p.b);
  ASSERT_TRUE(p.a->start());
  ASSERT_TRUE(p.b->start());
  auto conn = p.a->connect(p.b->local_address());
  ASSERT_TRUE(conn) << conn.error().message;
  auto accepted = p.b->wait_accept(sec(20));
  ASSERT_TRUE(accepted) << accepted.error().message;
  const std::vector<uint8_t> data = pattern(n);
  std::vector<uint8_t> got(n, 0);
  auto r = p.b->post_recv(*accepted, got.data(), got.size(), 5);
  ASSERT_TRUE(r) << r.error().message;
  auto s = p.a->post_send(*conn, data.data(), data.size(), 5);
  ASSERT_TRUE(s) << s.error().message;
  const engine::Completion rc = p.b->wait(*accepted, *r, sec(60));
  ASSERT_TRUE(rc.done && rc.ok) << rc.error;
  EXPECT_EQ(rc.bytes, n);
  EXPECT_TRUE(got == data);
  const engine::Completion sc = p.a->wait(*conn, *s, sec(60));
  EXPECT_TRUE(sc.done && sc.ok) << sc.error;
  if (retransmits != nullptr) {
    *retransmits = p.a->with_endpoint([&](engine::Endpoint& ep) {
      const engine::Connection* c = ep.connection(*conn);
      return c == nullptr ? 0 : c->stats().retransmits_fast + c->stats().retransmits_rto;
    });
  }
}

TEST(PacketPort, ThreadedWiresMoveDataWholeAndLanesUseDistinctSlots) {
  Pair p = make_pair_of_wires();
  transfer(p, 4 << 20);
  // Lane i of the connection leaves from slot i: all four slots carried data.
  EXPECT_EQ(p.port_a->slots_used.size(), 4u);
  const UdpWireStats s = p.a->stats();
  EXPECT_GT(s.datagrams_sent, 1000u);
  ASSERT_EQ(s.port.size(), 1u);
  EXPECT_EQ(s.port[0].first, "arms");
  EXPECT_EQ(p.a->local_address(), "mem:0");
  EXPECT_EQ(p.a->describe(), "memory port 0");
  EXPECT_TRUE(p.a->over_port());
  EXPECT_EQ(p.a->local_port(), 0);
}

TEST(PacketPort, TheEngineRecoversWhatALossyPortDropsAndSeesItsCeMarks) {
  Pair p = make_pair_of_wires(/*drop_every=*/37, /*mark_every=*/5);
  uint64_t retransmits = 0;
  transfer(p, 1 << 20, &retransmits);
  EXPECT_GT(p.a->stats().send_dropped_full, 0u);
  EXPECT_GT(retransmits, 0u);
  EXPECT_GT(p.b->stats().ce_received, 0u);
}

TEST(PacketPort, AnIdleThreadedWireSleepsOnThePortFdAndWakesForAnArrival) {
  Pair p = make_pair_of_wires();
  ASSERT_TRUE(p.a && p.b);
  ASSERT_TRUE(p.a->start());
  ASSERT_TRUE(p.b->start());
  auto conn = p.a->connect(p.b->local_address());
  ASSERT_TRUE(conn) << conn.error().message;
  auto accepted = p.b->wait_accept(sec(20));
  ASSERT_TRUE(accepted) << accepted.error().message;
  // Idle now: b's thread arms its port and sleeps in epoll (at once on an idle host, later on a loaded
  // one: the bound is generous).
  auto eventually = [](auto pred) {
    for (int i = 0; i < 2000 && !pred(); ++i) usleep(10'000);
    return pred();
  };
  ASSERT_TRUE(eventually([&] { return p.b->stats().sleeps > 0; })) << "b's thread never slept";
  EXPECT_GT(p.port_b->arms, 0u);
  const uint64_t sleeps_idle = p.b->stats().sleeps;
  // A message sent to the sleeping wire arrives whole: the port's fd woke it. Once done, it sleeps again.
  const std::vector<uint8_t> data = pattern(64 << 10);
  std::vector<uint8_t> got(data.size(), 0);
  auto r = p.b->post_recv(*accepted, got.data(), got.size(), 5);
  ASSERT_TRUE(r) << r.error().message;
  auto s = p.a->post_send(*conn, data.data(), data.size(), 5);
  ASSERT_TRUE(s) << s.error().message;
  const engine::Completion rc = p.b->wait(*accepted, *r, sec(60));
  ASSERT_TRUE(rc.done && rc.ok) << rc.error;
  EXPECT_TRUE(got == data);
  // a's thread may read `data` until its send is done (acknowledged): wait for it before `data` goes.
  const engine::Completion sc = p.a->wait(*conn, *s, sec(60));
  ASSERT_TRUE(sc.done && sc.ok) << sc.error;
  EXPECT_TRUE(eventually([&] { return p.b->stats().sleeps > sleeps_idle; }))
      << "b's thread did not sleep again after the arrival (" << p.b->stats().sleeps << " sleeps)";
}

TEST(PacketPort, CallerDrivenWiresMoveData) {
  Pair p = make_pair_of_wires();
  ASSERT_TRUE(p.a && p.b);
  auto conn = p.a->connect(p.b->local_address());
  ASSERT_TRUE(conn) << conn.error().message;
  std::optional<engine::ConnId> accepted;
  const std::vector<uint8_t> data = pattern(256 << 10);
  std::vector<uint8_t> got(data.size(), 0);
  std::optional<engine::RequestId> r, s;
  bool done = false;
  for (int i = 0; i < 200000 && !done; ++i) {
    ASSERT_TRUE(p.a->progress());
    ASSERT_TRUE(p.b->progress());
    if (!accepted) {
      accepted = p.b->accept();
      if (accepted) {
        auto rr = p.b->post_recv(*accepted, got.data(), got.size(), 1);
        ASSERT_TRUE(rr);
        r = *rr;
        auto ss = p.a->post_send(*conn, data.data(), data.size(), 1);
        ASSERT_TRUE(ss);
        s = *ss;
      }
      continue;
    }
    const engine::Completion c = p.b->test(*accepted, *r);
    done = c.done;
    if (done) {
      EXPECT_TRUE(c.ok) << c.error;
    }
  }
  ASSERT_TRUE(done);
  EXPECT_TRUE(got == data);
}

// Caller-driven: connects a to b by running rounds; the accepted connection id on b.
std::optional<engine::ConnId> connect_driven(Pair& p, engine::ConnId& conn) {
  auto c = p.a->connect(p.b->local_address());
  EXPECT_TRUE(c) << c.error().message;
  if (!c) return std::nullopt;
  conn = *c;
  for (int i = 0; i < 100000; ++i) {
    EXPECT_TRUE(p.a->progress());
    EXPECT_TRUE(p.b->progress());
    if (std::optional<engine::ConnId> accepted = p.b->accept()) return accepted;
  }
  return std::nullopt;
}

// What one progress round costs besides moving packets, counted per round over a window.
struct RoundCosts {
  uint64_t rounds = 0, clock_reads = 0, wake_reads = 0, port_fd_reads = 0, port_arms = 0;
  static RoundCosts of(UdpWire& w, const MemoryPort& port) {
    const UdpWireStats s = w.stats();
    return {s.progress_calls, s.clock_reads, s.wake_reads, port.fd_reads, port.arms};
  }
  RoundCosts operator-(const RoundCosts& o) const {
    return {rounds - o.rounds, clock_reads - o.clock_reads, wake_reads - o.wake_reads,
            port_fd_reads - o.port_fd_reads, port_arms - o.port_arms};
  }
};

TEST(PacketPortRoundCost, AnIdleRoundReadsTheClockOnceAndMakesNoSystemCall) {
  Pair p = make_pair_of_wires();
  ASSERT_TRUE(p.a && p.b);
  engine::ConnId conn = 0;
  ASSERT_TRUE(connect_driven(p, conn));
  // Polling with nothing to receive (a waiting caller's loop): the clock once a round, for the engine's
  // timers; no wake-up eventfd read (nothing slept); the port is not armed, so its fd is not read.
  const RoundCosts before = RoundCosts::of(*p.a, *p.port_a);
  constexpr uint64_t kRounds = 2000;
  for (uint64_t i = 0; i < kRounds; ++i) ASSERT_TRUE(p.a->progress());
  const RoundCosts d = RoundCosts::of(*p.a, *p.port_a) - before;
  EXPECT_EQ(d.rounds, kRounds);
  // A timer of the engine's (a keepalive) may fire in the window and send: a few reads more.
  EXPECT_LE(d.clock_reads, kRounds + 20) << d.clock_reads << " clock reads in " << kRounds << " rounds";
  EXPECT_GE(d.clock_reads, kRounds);
  EXPECT_EQ(d.wake_reads, 0u);
  EXPECT_EQ(d.port_fd_reads, 0u);
  EXPECT_EQ(d.port_arms, 0u);
}

TEST(PacketPortRoundCost, APingPongReadsTheClockAgainOnlyInRoundsThatMovedPackets) {
  Pair p = make_pair_of_wires();
  ASSERT_TRUE(p.a && p.b);
  engine::ConnId conn = 0;
  const std::optional<engine::ConnId> accepted = connect_driven(p, conn);
  ASSERT_TRUE(accepted);
  std::vector<uint8_t> ping(8, 1), pong(8, 2), got_a(8), got_b(8);
  const RoundCosts before_a = RoundCosts::of(*p.a, *p.port_a);
  const RoundCosts before_b = RoundCosts::of(*p.b, *p.port_b);
  const uint64_t moved_before = p.a->stats().datagrams_sent + p.a->stats().datagrams_received;
  constexpr int kTrips = 200;
  constexpr int kWaitRounds = 4;
  for (int i = 0; i < kTrips; ++i) {
    auto rb = p.b->post_recv(*accepted, got_b.data(), got_b.size(), 1);
    auto ra = p.a->post_recv(conn, got_a.data(), got_a.size(), 1);
    auto sa = p.a->post_send(conn, ping.data(), ping.size(), 1);
    ASSERT_TRUE(rb && ra && sa);
    bool b_done = false, a_done = false;
    for (int k = 0; k < 100000 && !a_done; ++k) {
      // a polls while its ping is in flight, as a waiter does: rounds that move nothing.
      for (int w = 0; w < kWaitRounds; ++w) ASSERT_TRUE(p.a->progress());
      ASSERT_TRUE(p.b->progress());
      if (!b_done && p.b->test(*accepted, *rb).done) {
        b_done = true;
        ASSERT_TRUE(p.b->post_send(*accepted, pong.data(), pong.size(), 1));
      }
      a_done = p.a->test(conn, *ra).done;
    }
    ASSERT_TRUE(a_done) << "round trip " << i;
  }
  const RoundCosts da = RoundCosts::of(*p.a, *p.port_a) - before_a;
  const RoundCosts db = RoundCosts::of(*p.b, *p.port_b) - before_b;
  const uint64_t moved = p.a->stats().datagrams_sent + p.a->stats().datagrams_received - moved_before;
  std::printf(
      "per round, a: %.2f clock reads, %.2f wake reads, %.2f port fd reads (%lu rounds, %lu packets)\n",
      static_cast<double>(da.clock_reads) / static_cast<double>(da.rounds),
      static_cast<double>(da.wake_reads) / static_cast<double>(da.rounds),
      static_cast<double>(da.port_fd_reads) / static_cast<double>(da.rounds),
      static_cast<unsigned long>(da.rounds), static_cast<unsigned long>(moved));
  // Each round reads the clock once to start; again after receiving (the packets' arrival time) and
  // before the engine's timers only when it moved packets. So at most one read a round plus two per
  // packet moved, and never a wake-up or port fd read without a sleep.
  for (const RoundCosts* d : {&da, &db}) {
    EXPECT_LE(d->clock_reads, d->rounds + 2 * moved);
    EXPECT_EQ(d->wake_reads, 0u);
    EXPECT_EQ(d->port_fd_reads, 0u);
  }
  // Most of a's rounds wait and move nothing: fewer than two reads a round on average (each of a's
  // rounds read it twice or more when every round re-read it for the timers).
  EXPECT_LT(da.clock_reads, 2 * da.rounds) << da.clock_reads << " clock reads in " << da.rounds << " rounds";
}

TEST(PacketPort, RefusesIoThreadsASegmentThatDoesNotFitAndForeignAddresses) {
  auto link = std::make_shared<MemoryLink>();
  UdpConfig threads = port_config();
  threads.io_threads = 2;
  auto w1 = UdpWire::create(threads, std::make_unique<MemoryPort>(link, 0, 4));
  ASSERT_FALSE(w1);
  EXPECT_NE(w1.error().message.find("io_threads must be 0"), std::string::npos) << w1.error().message;

  UdpConfig big = port_config();
  big.engine.segment_bytes = 9000;  // 9000 + the 72-byte header > the port's 9000
  auto w2 = UdpWire::create(big, std::make_unique<MemoryPort>(link, 0, 4));
  ASSERT_FALSE(w2);
  EXPECT_NE(w2.error().message.find("does not fit memory port 0"), std::string::npos) << w2.error().message;

  auto w3 = UdpWire::create(port_config(), std::unique_ptr<PacketPort>());
  ASSERT_FALSE(w3);

  auto w4 = UdpWire::create(port_config(), std::make_unique<MemoryPort>(link, 0, 4));
  ASSERT_TRUE(w4);
  auto bad = (*w4)->connect("10.0.0.1:5000");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad address"), std::string::npos);
  auto hostport = (*w4)->add_peer("10.0.0.1", 5000);
  ASSERT_FALSE(hostport);
  EXPECT_NE(hostport.error().message.find("address text"), std::string::npos);
}

TEST(UdpAddressText, ConnectsByLocalAddressAndRefusesMalformedText) {
  UdpConfig c;
  c.bind_host = "127.0.0.1";
  auto a = UdpWire::create(c);
  auto b = UdpWire::create(c);
  ASSERT_TRUE(a && b);
  const std::string addr = (*b)->local_address();
  EXPECT_EQ(addr, "127.0.0.1:" + std::to_string((*b)->local_port()));
  auto peer = (*a)->add_peer(addr);
  ASSERT_TRUE(peer) << peer.error().message;
  EXPECT_EQ((*a)->peer_address(*peer), addr);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "fd00::1:5000",
                          "[fd00::1]5000", ":5000", "127.0.0.1:5x"}) {
    auto r = (*a)->add_peer(std::string_view(bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find(std::string("\"") + bad + "\""), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace megascale::wire
