// UdpConfig::source_ports: the pool binds exactly the given ports, lane i of a connection leaves from
// source_ports[i], and bad lists are refused with a message naming the field and the value.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

// `n` distinct UDP ports free on 127.0.0.1 now: bound together (so distinct), then released.
std::vector<uint16_t> free_ports(size_t n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) break;
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

UdpConfig base_config() {
  UdpConfig c;
  c.bind_host = "127.0.0.1";
  c.engine.lanes = 4;
  c.engine.segment_bytes = 8192;
  c.engine.cc.kind = cc::ControllerKind::kFixedWindow;  // no delay-based repathing on a busy CI host
  c.engine.cc.fixed.window_packets = 32;
  c.engine.repath_delay_rtts = 0;
  c.engine.repath_rto_threshold = 1000;
  c.engine.connect_timeout_ns = sec(5);
  return c;
}

TEST(SourcePorts, PoolBindsExactlyTheGivenPortsAndLaneILeavesFromPortI) {
  const std::vector<uint16_t> ports = free_ports(4);
  ASSERT_EQ(ports.size(), 4u);
  UdpConfig sc = base_config();
  sc.source_ports = ports;
  auto sender = UdpWire::create(sc);
  ASSERT_TRUE(sender) << sender.error().message;
  EXPECT_EQ((*sender)->capabilities().ports, ports);
  EXPECT_EQ((*sender)->local_port(), ports[0]);

  auto receiver = UdpWire::create(base_config());
  ASSERT_TRUE(receiver) << receiver.error().message;
  ASSERT_TRUE((*receiver)->start());
  ASSERT_TRUE((*sender)->start());
  auto conn = (*sender)->connect("127.0.0.1", (*receiver)->local_port());
  ASSERT_TRUE(conn) << conn.error().message;
  auto accepted = (*receiver)->wait_accept(sec(10));
  ASSERT_TRUE(accepted) << accepted.error().message;
  ASSERT_TRUE((*sender)->wait_established(*conn, sec(10)));

  std::vector<uint8_t> out(4 << 20, 0x5A), in(out.size(), 0);
  auto rreq = (*receiver)->post_recv(*accepted, in.data(), in.size(), 1);
  auto sreq = (*sender)->post_send(*conn, out.data(), out.size(), 1);
  ASSERT_TRUE(rreq && sreq);
  ASSERT_TRUE((*sender)->wait(*conn, *sreq, sec(20)).done);
  ASSERT_TRUE((*receiver)->wait(*accepted, *rreq, sec(20)).done);
  EXPECT_EQ(in, out);
  (*sender)->stop();
  (*receiver)->stop();

  // Lane i's segments left from socket i: socket i > 0 carried exactly lane i's segments (socket 0 also
  // the handshake), and every lane sent.
  const UdpWireStats tx = (*sender)->stats();
  ASSERT_EQ(tx.datagrams_per_port.size(), 4u);
  (*sender)->with_endpoint([&](engine::Endpoint& ep) {
    const engine::Connection* c = ep.connection(*conn);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->lanes(), 4u);
    for (uint32_t lane = 0; lane < 4; ++lane) {
      const engine::LaneStats& ls = c->lane_stats(lane);
      EXPECT_EQ(ls.repaths, 0u);
      EXPECT_GT(ls.segments_sent, 0u) << "lane " << lane;
      if (lane == 0) {
        EXPECT_GE(tx.datagrams_per_port[0], ls.segments_sent);
      } else {
        EXPECT_EQ(tx.datagrams_per_port[lane], ls.segments_sent) << "lane " << lane;
      }
    }
  });
  // The receiver saw the sender under each of the four source addresses.
  std::set<std::string> seen;
  for (uint32_t peer = 0; peer < 16; ++peer) seen.insert((*receiver)->peer_address(peer));
  for (uint16_t p : ports) EXPECT_TRUE(seen.count("127.0.0.1:" + std::to_string(p))) << p;
}

TEST(SourcePorts, MorePortsThanLanesStillBindsThemAll) {
  const std::vector<uint16_t> ports = free_ports(6);
  ASSERT_EQ(ports.size(), 6u);
  UdpConfig c = base_config();
  c.source_ports = ports;
  auto w = UdpWire::create(c);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)->capabilities().ports, ports);
}

TEST(SourcePorts, BadListsAreRefusedNamingFieldAndValue) {
  auto refused = [](const UdpConfig& c, const std::string& needle) {
    Status s = validate_udp_config(c);
    if (s) return testing::AssertionFailure() << "accepted";
    if (s.error().message.find(needle) == std::string::npos) {
      return testing::AssertionFailure() << "message '" << s.error().message << "' lacks '" << needle << "'";
    }
    return UdpWire::create(c) ? testing::AssertionFailure() << "create accepted"
                              : testing::AssertionSuccess();
  };
  UdpConfig c = base_config();
  c.source_ports = {50000, 50001};
  EXPECT_TRUE(validate_udp_config(c));
  c.bind_port = 40000;
  EXPECT_TRUE(refused(c, "bind_port=40000"));
  c.bind_port = 0;
  c.sockets = 2;
  EXPECT_TRUE(refused(c, "sockets=2"));
  c.sockets = 0;
  c.source_ports = {50000, 0};
  EXPECT_TRUE(refused(c, "source_ports[1]=0"));
  c.source_ports = {50000, 50001, 50000};
  EXPECT_TRUE(refused(c, "source_ports[2]=50000 repeats source_ports[0]"));
  c.source_ports.assign(1025, 0);
  for (size_t i = 0; i < c.source_ports.size(); ++i) c.source_ports[i] = static_cast<uint16_t>(40000 + i);
  EXPECT_TRUE(refused(c, "source_ports has 1025 ports"));
}

TEST(SourcePorts, APortInUseIsAnErrorNotAnotherPort) {
  const std::vector<uint16_t> ports = free_ports(2);
  ASSERT_EQ(ports.size(), 2u);
  UdpConfig c = base_config();
  c.source_ports = ports;
  auto first = UdpWire::create(c);
  ASSERT_TRUE(first) << first.error().message;
  auto second = UdpWire::create(c);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("socket 0"), std::string::npos) << second.error().message;
}

}  // namespace
}  // namespace megascale::wire

namespace megascale::wire {
namespace {

TEST(SourcePorts, ParseListAsTopoPortsPrintsIt) {
  auto ports = parse_source_ports("49152,49170, 50001 ,65535");
  ASSERT_TRUE(ports) << ports.error().message;
  EXPECT_EQ(*ports, (std::vector<uint16_t>{49152, 49170, 50001, 65535}));
  for (const char* bad : {"", "1,,2", "0", "65536", "12a", "-5", "1,2,1", "123456"}) {
    auto r = parse_source_ports(bad);
    EXPECT_FALSE(r) << "'" << bad << "' accepted";
  }
  auto dup = parse_source_ports("7,8,7");
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("port 7 is listed twice"), std::string::npos) << dup.error().message;
  auto word = parse_source_ports("7,x");
  ASSERT_FALSE(word);
  EXPECT_NE(word.error().message.find("'x' is not a port"), std::string::npos) << word.error().message;
}

}  // namespace
}  // namespace megascale::wire
