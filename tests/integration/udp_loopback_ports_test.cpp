// The UDP wire end to end on loopback, two wires in one process. Ports and configuration: the receive group's
// port is not shared, consecutive ports from bind_port, pool sockets read while the home socket streams, the
// software-path floors, bad values refused.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

// A receive group's port (SO_REUSEPORT) is claimed: a second wire asking for it is refused with a
// message naming the reason, and a plain socket cannot bind it either, so no two wires share a port.
TEST_P(UdpLoopback, ReceiveGroupPortIsNotShared) {
  UdpConfig c = wire_config(host_, FaultConfig{});
  c.io_threads = 2;
  auto first = UdpWire::create(c);
  ASSERT_TRUE(first) << first.error().message;
  const uint16_t port = (*first)->local_port();
  ASSERT_NE(port, 0);
  UdpConfig same = c;
  same.bind_port = port;
  auto second = UdpWire::create(same);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("held by another megascale wire"), std::string::npos)
      << second.error().message;
  UdpConfig plain = same;
  plain.io_threads = 0;
  auto third = UdpWire::create(plain);
  ASSERT_FALSE(third);
  EXPECT_NE(third.error().message.find("in use"), std::string::npos) << third.error().message;
  // Two wires that both let the kernel pick get different ports.
  auto fourth = UdpWire::create(c);
  ASSERT_TRUE(fourth) << fourth.error().message;
  EXPECT_NE((*fourth)->local_port(), port);
}

TEST(UdpWireConfig, ConsecutivePortsFromBindPort) {
  UdpConfig c;
  c.sockets = 3;
  // Some base port in the dynamic range whose three ports are free; try a few.
  std::unique_ptr<UdpWire> w;
  for (uint16_t base = 47'000; base < 48'000 && !w; base += 37) {
    c.bind_port = base;
    if (auto r = UdpWire::create(c)) w = std::move(r).value();
  }
  ASSERT_TRUE(w) << "no three consecutive free ports in 47000..48000";
  const std::vector<uint16_t>& ports = w->capabilities().ports;
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0], c.bind_port);
  EXPECT_EQ(ports[1], c.bind_port + 1);
  EXPECT_EQ(ports[2], c.bind_port + 2);
  EXPECT_EQ(w->local_port(), c.bind_port);
  // The same ports again: taken, and the error says which.
  auto again = UdpWire::create(c);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find(std::to_string(c.bind_port)), std::string::npos)
      << again.error().message;
}

// Without I/O threads a streaming home socket is read without asking epoll, and the rest of the pool
// only every few rounds: a datagram that arrives on another pool socket meanwhile is still read (here
// junk, which the engine counts and drops), not left in its buffer while the home socket stays busy.
TEST(UdpWireReceive, OtherPoolSocketsAreReadWhileTheHomeSocketStreams) {
  UdpConfig c;
  c.bind_host = "127.0.0.1";
  c.engine.lanes = 4;  // four sockets
  auto w = UdpWire::create(c);
  ASSERT_TRUE(w) << w.error().message;
  const std::vector<uint16_t>& ports = (*w)->capabilities().ports;
  ASSERT_EQ(ports.size(), 4u);
  const int tx = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(tx, 0);
  // Junk to the home port is 32 bytes, the one datagram to socket 2 is 1,000 (1,000 % 32 = 8): the
  // bytes received say whether it was read.
  auto send_to = [&](uint16_t port, size_t len) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::vector<uint8_t> junk(len, 0xAB);
    ASSERT_EQ(sendto(tx, junk.data(), len, 0, reinterpret_cast<sockaddr*>(&a), sizeof a),
              static_cast<ssize_t>(len));
  };
  // 200 rounds, each with a datagram waiting on the home socket: it never runs dry. The stray comes
  // once the home socket streams.
  for (int round = 0; round < 200; ++round) {
    if (round == 5) send_to(ports[2], 1000);
    send_to(ports[0], 32);
    ASSERT_TRUE((*w)->progress());
  }
  close(tx);
  const UdpWireStats st = (*w)->stats();
  EXPECT_EQ(st.bytes_received % 32, 8u)
      << "the datagram on socket 2 was not read in 200 busy rounds (" << st.datagrams_received
      << " datagrams, " << st.bytes_received << " bytes received)";
  EXPECT_GE(st.datagrams_received, 150u);
}

// The software-path floors (collectives/wire/README.md has the measurements) are raised onto the engine's
// congestion settings and reach the engine; larger values are kept; 0 turns a floor off.
TEST(UdpWireConfig, SoftwarePathFloorsReachTheEngine) {
  UdpConfig c;
  ASSERT_EQ(c.engine.cc.pacer.burst_bytes, 16384u);  // the presets' fabric values, below the floors
  ASSERT_EQ(c.engine.cc.rto.min_rto_ns, us(100));
  auto w = UdpWire::create(c);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)->config().engine.cc.pacer.burst_bytes, 64u * 1024);
  EXPECT_EQ((*w)->config().engine.cc.rto.min_rto_ns, ms(1));
  EXPECT_GE((*w)->config().engine.cc.rto.initial_rto_ns, ms(1));
  EXPECT_EQ((*w)->endpoint().config().cc.pacer.burst_bytes, 64u * 1024);
  EXPECT_EQ((*w)->endpoint().config().cc.rto.min_rto_ns, ms(1));

  c.engine.cc.pacer.burst_bytes = 256 * 1024;
  c.engine.cc.rto.min_rto_ns = ms(5);
  c.engine.cc.rto.initial_rto_ns = ms(10);
  w = UdpWire::create(c);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)->endpoint().config().cc.pacer.burst_bytes, 256u * 1024);
  EXPECT_EQ((*w)->endpoint().config().cc.rto.min_rto_ns, ms(5));
  EXPECT_EQ((*w)->endpoint().config().cc.rto.initial_rto_ns, ms(10));

  c = UdpConfig{};
  c.pacer_burst_floor_bytes = 0;
  c.min_rto_floor_ns = 0;
  w = UdpWire::create(c);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)->endpoint().config().cc.pacer.burst_bytes, 16384u);
  EXPECT_EQ((*w)->endpoint().config().cc.rto.min_rto_ns, us(100));

  c = UdpConfig{};
  c.min_rto_floor_ns = sec(5);  // above the RTO ceiling (1 s)
  w = UdpWire::create(c);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("min_rto_floor_ns"), std::string::npos) << w.error().message;
}

TEST(UdpWireConfig, BadValuesAreErrors) {
  UdpConfig c;
  c.dscp = 64;
  auto w = UdpWire::create(c);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("dscp=64"), std::string::npos) << w.error().message;
  c = UdpConfig{};
  c.batch = 0;
  w = UdpWire::create(c);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("batch=0"), std::string::npos);
  c = UdpConfig{};
  c.pending_poll_ns = -1;
  w = UdpWire::create(c);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("pending_poll_ns=-1"), std::string::npos) << w.error().message;
  c = UdpConfig{};
  c.stall_ns = 2 * kNsPerSec;
  w = UdpWire::create(c);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("stall_ns=2000000000"), std::string::npos) << w.error().message;
  for (const TimeNs help : {TimeNs{-1}, 2 * kNsPerSec}) {
    c = UdpConfig{};
    c.help_after_ns = help;
    w = UdpWire::create(c);
    ASSERT_FALSE(w) << "help_after_ns " << help;
    EXPECT_NE(w.error().message.find("help_after_ns=" + std::to_string(help) + ": must be in 0..1 s"),
              std::string::npos)
        << w.error().message;
  }
  c = UdpConfig{};
  c.bind_port = 65534;
  c.sockets = 4;
  w = UdpWire::create(c);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("past port 65535"), std::string::npos) << w.error().message;
  c = UdpConfig{};
  c.bind_host = "::1";
  auto v6 = UdpWire::create(c);
  if (v6) {
    auto peer = (*v6)->add_peer("127.0.0.1", 1);
    ASSERT_FALSE(peer) << "an IPv6 wire cannot reach an IPv4 peer";
    EXPECT_NE(peer.error().message.find("IPv6"), std::string::npos) << peer.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(Loopback, UdpLoopback, loopback_hosts(), loopback_host_name);

}  // namespace
}  // namespace megascale::wire
