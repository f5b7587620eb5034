// The UDP wire end to end on loopback, two wires in one process. A peer that does not answer or goes away:
// connects and pending requests fail with an error naming it, within the retry budget, never hang.
#include <gtest/gtest.h>

#include "udp_loopback.h"

namespace megascale::wire {
namespace {

// A peer that never answers: connect fails with an error within the handshake budget.
TEST(UdpLoopbackFailure, ConnectToSilentPortFailsWithError) {
  // A bound socket that never reads: datagrams vanish into it without an ICMP error.
  const int silent = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len);

  UdpConfig c = wire_config("127.0.0.1", FaultConfig{});
  c.engine.connect_timeout_ns = ms(300);
  auto w = UdpWire::create(c);
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_TRUE((*w)->start());
  auto conn = (*w)->connect("127.0.0.1", ntohs(a.sin_port));
  ASSERT_TRUE(conn);
  const TimeNs t0 = UdpWire::now();
  Status st = (*w)->wait_established(*conn, sec(10));
  const TimeNs took = UdpWire::now() - t0;
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("no answer"), std::string::npos) << st.error().message;
  EXPECT_LT(took, sec(5)) << "the handshake budget is 0.3 s";
  close(silent);
}

// The peer vanishes mid-transfer: its wire, and so its sockets, are gone. Its host answers the datagrams
// sent to it with ICMP port unreachable, so the pending send fails with an error that says so within
// about port_closed_fail_ns (0.2 s); with that turned off, once the retry budget is spent. `expect`: a
// part of the error; `within`: how long it may take.
void vanish_mid_transfer(const UdpConfig& config, const std::string& expect, TimeNs within) {
  Pair p = connect_pair(config, config);
  ASSERT_TRUE(p.recv_conn);
  std::vector<uint8_t> data(256 * kMiB, 1), sink(256 * kMiB);
  auto rr = p.receiver->post_recv(p.recv_conn, sink.data(), sink.size(), 0);
  ASSERT_TRUE(rr);
  auto sr = p.sender->post_send(p.send_conn, data.data(), data.size(), 0);
  ASSERT_TRUE(sr);
  // Let data flow (the send has its credit and segments in flight), then the receiver vanishes
  // mid-message: no more ACKs, no RST.
  const TimeNs flow_deadline = UdpWire::now() + sec(10);
  uint64_t received = 0;
  while (received == 0 && UdpWire::now() < flow_deadline) {
    received = p.receiver->with_endpoint([&](engine::Endpoint& ep) {
      const engine::Connection* c = ep.connection(p.recv_conn);
      return c ? c->stats().bytes_received : 0;
    });
  }
  ASSERT_GT(received, 0u);
  p.receiver.reset();
  const TimeNs t0 = UdpWire::now();
  engine::Completion c = p.sender->wait(p.send_conn, *sr, sec(30));
  ASSERT_TRUE(c.done) << "hung: " << c.error;
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find(expect), std::string::npos) << c.error;
  EXPECT_LT(UdpWire::now() - t0, within) << c.error;
  std::printf("[ failure ] after %.2f s: %s\n", static_cast<double>(UdpWire::now() - t0) / 1e9,
              c.error.c_str());
  if (config.engine.port_closed_fail_ns > 0) {
    EXPECT_GE(p.sender->stats().port_unreachable, 2u);
  }
}

TEST(UdpLoopbackFailure, PeerVanishingFailsPendingSendOnItsClosedPort) {
  vanish_mid_transfer(wire_config("127.0.0.1", FaultConfig{}), "gone: its port is closed", sec(2));
}

TEST(UdpLoopbackFailure, PeerVanishingOnIpv6FailsPendingSendOnItsClosedPort) {
  if (!ipv6_loopback_available()) GTEST_SKIP() << "no IPv6 loopback (::1) on this host";
  vanish_mid_transfer(wire_config("::1", FaultConfig{}), "gone: its port is closed", sec(2));
}

// Closed ports ignored (port_closed_fail_ns = 0): the retry budget (5 s here) fails the send.
TEST(UdpLoopbackFailure, PeerVanishingFailsPendingSendWithinBudget) {
  UdpConfig c = wire_config("127.0.0.1", FaultConfig{});
  c.engine.port_closed_fail_ns = 0;
  vanish_mid_transfer(c, "unreachable: no progress", sec(20));
}

// The same with I/O threads on both sides (a receive group each): the sender's threads keep sending
// into a port nobody reads, and the failure still comes from the engine's budget, not a hang.
TEST(UdpLoopbackFailure, PeerVanishingWithIoThreadsFailsPendingSendWithinBudget) {
  UdpConfig c = wire_config("127.0.0.1", FaultConfig{});
  c.io_threads = 2;
  vanish_mid_transfer(c, "gone: its port is closed", sec(2));
}

// The peer vanishes before it posted the receive a send waits for: nothing is in flight, so only the
// engine's keepalive probes can notice; they meet its closed port, and the send fails soon after the
// keepalive interval (within interval + retry budget, were the ICMP errors lost).
TEST(UdpLoopbackFailure, PeerVanishingBeforeItsReceiveFailsWaitingSend) {
  UdpConfig c = wire_config("127.0.0.1", FaultConfig{});
  c.engine.keepalive_interval_ns = ms(200);
  Pair p = connect_pair(c, c);
  ASSERT_TRUE(p.recv_conn);
  p.receiver.reset();
  std::vector<uint8_t> data(kMiB, 3);
  auto sr = p.sender->post_send(p.send_conn, data.data(), data.size(), 0);
  ASSERT_TRUE(sr);
  const TimeNs t0 = UdpWire::now();
  engine::Completion done = p.sender->wait(p.send_conn, *sr, sec(30));
  ASSERT_TRUE(done.done) << "hung: " << done.error;
  EXPECT_FALSE(done.ok);
  EXPECT_NE(done.error.find("gone: its port is closed"), std::string::npos) << done.error;
  EXPECT_LT(UdpWire::now() - t0, sec(3));
  std::printf("[ failure ] after %.1f s: %s\n", static_cast<double>(UdpWire::now() - t0) / 1e9,
              done.error.c_str());
}

}  // namespace
}  // namespace megascale::wire
