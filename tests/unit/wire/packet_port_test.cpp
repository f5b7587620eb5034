// The wire over a packet port (packet_port.h): two wires joined by an in-memory port pair move data
// whole in both driving modes, lanes leave from distinct slots, a lossy port is recovered from by the
// engine, the threaded wire sleeps on the port's fd and wakes for an arrival, and bad set-ups are
// refused naming the problem. Also the address text of UDP wires ("host:port", "[v6]:port").
#include "megascale/wire/packet_port.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

// Two queues and two eventfds shared by a pair of MemoryPorts; side i receives from queue i.
struct MemoryLink {
  struct Packet {
    uint32_t from_slot = 0;
    std::vector<uint8_t> bytes;
    bool ce = false;
  };
  std::mutex mu;
  std::deque<Packet> queue[2];
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
    eventfd_write(link_->fd[1 - side_], 1);
    return {};
  }

  Result<size_t> receive(size_t max, const Deliver& deliver) override {
    eventfd_t drained = 0;
    eventfd_read(link_->fd[side_], &drained);
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
    std::lock_guard<std::mutex> lock(link_->mu);
    return link_->queue[side_].empty();
  }
  PortStats stats() const override {
    PortStats s = stats_;
    s.extra = {{"arms", arms}};
    return s;
  }

  std::set<uint32_t> slots_used;
  uint64_t arms = 0;

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
