// Incarnations on loopback: a peer restarted on the same port mid-stream starts a connection of its
// own; the survivor's old connection ends with a clear error and no byte crosses between the two.
// Each wire draws its own engine seed (UdpConfig::fixed_seed false), so the restarted process's
// connection ids differ from its predecessor's.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "megascale/wire/udp.h"

namespace megascale::wire {
namespace {

UdpConfig one_lane(uint16_t port = 0) {
  UdpConfig c;
  c.bind_host = "127.0.0.1";
  c.bind_port = port;
  c.engine.lanes = 1;  // one socket, so a restart can bind the same port again
  c.engine.segment_bytes = 8192;
  c.engine.cc.kind = cc::ControllerKind::kFixedWindow;
  c.engine.cc.fixed.window_packets = 32;
  c.engine.cc.rto.min_rto_ns = ms(1);
  c.engine.cc.rto.retry_budget_ns = sec(5);
  c.engine.keepalive_interval_ns = ms(200);
  c.engine.connect_timeout_ns = sec(5);
  return c;
}

std::vector<uint8_t> filled(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + salt) ^ (i >> 9));
  return v;
}

TEST(UdpReplay, APeerRestartedOnTheSamePortMidStreamGetsAConnectionOfItsOwn) {
  auto server = UdpWire::create(one_lane());
  ASSERT_TRUE(server) << server.error().message;
  ASSERT_TRUE((*server)->start());
  const uint16_t server_port = (*server)->local_port();

  // The first client incarnation sends a message far larger than it will get out before it dies.
  auto first = UdpWire::create(one_lane());
  ASSERT_TRUE(first) << first.error().message;
  const uint16_t client_port = (*first)->local_port();
  ASSERT_TRUE((*first)->start());
  auto c1 = (*first)->connect("127.0.0.1", server_port);
  ASSERT_TRUE(c1) << c1.error().message;
  auto old_conn = (*server)->wait_accept(sec(10));
  ASSERT_TRUE(old_conn) << old_conn.error().message;
  constexpr size_t kBig = 64 << 20;
  std::vector<uint8_t> old_buf(kBig, 0);
  auto old_recv = (*server)->post_recv(*old_conn, old_buf.data(), old_buf.size(), 0);
  ASSERT_TRUE(old_recv) << old_recv.error().message;
  const std::vector<uint8_t> big = filled(kBig, 1);
  ASSERT_TRUE((*first)->post_send(*c1, big.data(), big.size(), 0));
  // Mid-stream: some of it has arrived.
  const TimeNs t0 = UdpWire::now();
  while ((*server)->with_endpoint([&](engine::Endpoint& e) { return e.stats().bytes_received; }) <
         (1 << 20)) {
    ASSERT_LT(UdpWire::now() - t0, sec(20)) << "no data arrived";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  first->reset();  // the process dies: its sockets close

  // The second incarnation binds the same port and connects again.
  auto second = UdpWire::create(one_lane(client_port));
  ASSERT_TRUE(second) << second.error().message;
  ASSERT_TRUE((*second)->start());
  auto c2 = (*second)->connect("127.0.0.1", server_port);
  ASSERT_TRUE(c2) << c2.error().message;
  auto new_conn = (*server)->wait_accept(sec(10));
  ASSERT_TRUE(new_conn) << "the restarted client's connection was never accepted: "
                        << new_conn.error().message;
  EXPECT_NE(*new_conn, *old_conn);
  constexpr size_t kSmall = 1 << 20;
  std::vector<uint8_t> new_buf(kSmall + 64, 0);
  auto new_recv = (*server)->post_recv(*new_conn, new_buf.data(), new_buf.size(), 0);
  ASSERT_TRUE(new_recv) << new_recv.error().message;
  const std::vector<uint8_t> small = filled(kSmall, 2);
  auto s2 = (*second)->post_send(*c2, small.data(), small.size(), 0);
  ASSERT_TRUE(s2) << s2.error().message;
  const engine::Completion got = (*server)->wait(*new_conn, *new_recv, sec(20));
  ASSERT_TRUE(got.done && got.ok) << got.error;
  ASSERT_EQ(got.bytes, kSmall);
  EXPECT_EQ(std::memcmp(new_buf.data(), small.data(), kSmall), 0) << "bytes of another incarnation";

  // The survivor's old connection ends with an error that says why, not with the new client's bytes.
  const engine::Completion old_done = (*server)->wait(*old_conn, *old_recv, sec(20));
  ASSERT_TRUE(old_done.done) << "the old connection's receive still waits";
  EXPECT_FALSE(old_done.ok);
  EXPECT_FALSE(old_done.error.empty());
  EXPECT_TRUE(old_done.error.find("unknown connection") != std::string::npos ||
              old_done.error.find("port is closed") != std::string::npos)
      << old_done.error;
  (*second)->stop();
  (*server)->stop();
}

}  // namespace
}  // namespace megascale::wire
