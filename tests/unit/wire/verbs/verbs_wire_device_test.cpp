// The verbs wire in UD mode on a real device: two wires over verbs-ud ports of the same device in one
// process connect by local_address() and move 4 MiB each way at once, byte-checked, in threaded mode;
// with the wire's fault injection (drops and reordering on both receive paths) a transfer still
// arrives whole; a bad address and a GID selector that matches nothing give errors naming the problem.
// Needs an RDMA device: without one (every host but the Soft-RoCE guest of scripts/test-rxe.sh) each
// test skips, saying so. Prints each port's describe() and counters, for the guest's log.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "megascale/wire/verbs/ib_device.h"
#include "megascale/wire/verbs/port.h"

namespace megascale::wire::verbs {
namespace {

UdpConfig wire_config() {
  UdpConfig c;
  c.engine.lanes = 4;
  c.engine.segment_bytes = 4096;  // lowered to the MTU's (create_verbs_wire)
  c.engine.cc.kind = cc::ControllerKind::kFixedWindow;
  c.engine.cc.fixed.window_packets = 32;
  c.engine.repath_delay_rtts = 0;
  c.engine.repath_rto_threshold = 1000;
  c.engine.connect_timeout_ns = sec(20);
  return c;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

void print_stats(const char* who, const UdpWire& w) {
  const UdpWireStats s = w.stats();
  std::string line = std::string(who) + ": " + w.describe() + " at " + w.local_address() + ": sent " +
                     std::to_string(s.datagrams_sent) + ", received " + std::to_string(s.datagrams_received) +
                     ", dropped by fault " + std::to_string(s.fault.dropped) + ", reordered " +
                     std::to_string(s.fault.reordered);
  for (const auto& [name, value] : s.port) line += ", " + name + " " + std::to_string(value);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

class VerbsWireDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (list_devices().empty()) {
      GTEST_SKIP() << "no RDMA device (libibverbs lists none): runs in the Soft-RoCE guest";
    }
  }

  void make(const UdpConfig& config) {
    VerbsPortConfig pc;
    auto a = create_verbs_wire(config, pc);
    ASSERT_TRUE(a.ok()) << a.error().message;
    auto b = create_verbs_wire(config, pc);
    ASSERT_TRUE(b.ok()) << b.error().message;
    a_ = std::move(*a);
    b_ = std::move(*b);
  }

  // `n` bytes each way at once (a -> b and b -> a on one connection), both byte-checked.
  void both_ways(size_t n) {
    ASSERT_TRUE(a_->start());
    ASSERT_TRUE(b_->start());
    auto conn = a_->connect(b_->local_address());
    ASSERT_TRUE(conn.ok()) << conn.error().message;
    auto acc = b_->wait_accept(sec(30));
    ASSERT_TRUE(acc.ok()) << acc.error().message;
    const std::vector<uint8_t> ab = pattern(n, 7), ba = pattern(n, 91);
    std::vector<uint8_t> got_b(n, 0), got_a(n, 0);
    auto rb = b_->post_recv(*acc, got_b.data(), n, 1);
    ASSERT_TRUE(rb.ok()) << rb.error().message;
    auto ra = a_->post_recv(*conn, got_a.data(), n, 2);
    ASSERT_TRUE(ra.ok()) << ra.error().message;
    auto sa = a_->post_send(*conn, ab.data(), n, 1);
    ASSERT_TRUE(sa.ok()) << sa.error().message;
    auto sb = b_->post_send(*acc, ba.data(), n, 2);
    ASSERT_TRUE(sb.ok()) << sb.error().message;
    const engine::Completion cb = b_->wait(*acc, *rb, sec(120));
    ASSERT_TRUE(cb.done && cb.ok) << cb.error << " " << b_->thread_error();
    const engine::Completion ca = a_->wait(*conn, *ra, sec(120));
    ASSERT_TRUE(ca.done && ca.ok) << ca.error << " " << a_->thread_error();
    EXPECT_EQ(cb.bytes, n);
    EXPECT_EQ(ca.bytes, n);
    EXPECT_TRUE(got_b == ab) << "a -> b bytes differ";
    EXPECT_TRUE(got_a == ba) << "b -> a bytes differ";
    EXPECT_TRUE(a_->wait(*conn, *sa, sec(60)).ok);
    EXPECT_TRUE(b_->wait(*acc, *sb, sec(60)).ok);
  }

  // Wires go before anything else: their ports hold the device.
  std::unique_ptr<UdpWire> a_, b_;
};

uint64_t port_counter(const UdpWire& w, const std::string& name) {
  for (const auto& [n, v] : w.stats().port) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "no port counter " << name;
  return 0;
}

TEST_F(VerbsWireDevice, FourMiBEachWayWhole) {
  make(wire_config());
  ASSERT_TRUE(a_ && b_);
  EXPECT_EQ(a_->describe().rfind("verbs-ud ", 0), 0u) << a_->describe();
  EXPECT_NE(a_->describe().find(", 4 QPs"), std::string::npos) << a_->describe();
  Result<PortAddress> addr = parse_port_address(a_->local_address());
  ASSERT_TRUE(addr.ok()) << addr.error().message;
  EXPECT_NE(a_->local_address(), b_->local_address());
  both_ways(4 << 20);
  print_stats("a", *a_);
  print_stats("b", *b_);
  EXPECT_GT(a_->stats().datagrams_sent, (4u << 20) / 1024);
  EXPECT_GT(port_counter(*a_, "recv_reposted"), (4u << 20) / 1024);
  EXPECT_GT(port_counter(*a_, "ah_created"), 0u);
}

TEST_F(VerbsWireDevice, DropsAndReorderingAreRecovered) {
  UdpConfig c = wire_config();
  c.fault.drop = 0.01;
  c.fault.reorder = 0.02;
  c.fault.seed = 5;
  make(c);
  ASSERT_TRUE(a_ && b_);
  both_ways(1 << 20);
  print_stats("a", *a_);
  print_stats("b", *b_);
  EXPECT_GT(a_->stats().fault.dropped + b_->stats().fault.dropped, 0u);
  EXPECT_GT(a_->stats().fault.reordered + b_->stats().fault.reordered, 0u);
}

TEST_F(VerbsWireDevice, BadAddressIsRefusedNamingIt) {
  make(wire_config());
  ASSERT_TRUE(a_ && b_);
  auto conn = a_->connect("10.0.0.2:4791");
  ASSERT_FALSE(conn.ok());
  EXPECT_NE(conn.error().message.find("\"10.0.0.2:4791\""), std::string::npos) << conn.error().message;
  std::printf("bad address: %s\n", conn.error().message.c_str());
}

TEST_F(VerbsWireDevice, GidSelectorMatchingNothingIsRefused) {
  VerbsPortConfig pc;
  Result<GidSelector> sel = with_addr_range(GidSelector{}, "192.0.2.0/24");
  ASSERT_TRUE(sel.ok()) << sel.error().message;
  pc.gid = *sel;
  auto w = create_verbs_wire(wire_config(), pc);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("verbs-ud: "), std::string::npos) << w.error().message;
  std::printf("no matching GID: %s\n", w.error().message.c_str());
}

TEST_F(VerbsWireDevice, SegmentTooLargeForTheMtuIsRefusedWhenNotFitted) {
  VerbsPortConfig pc;
  UdpConfig c = wire_config();
  c.engine.segment_bytes = 8192;
  auto w = create_verbs_wire(c, pc, /*fit_segment=*/false);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("segment_bytes 8192"), std::string::npos) << w.error().message;
  EXPECT_NE(w.error().message.find("at most"), std::string::npos) << w.error().message;
  std::printf("segment too large: %s\n", w.error().message.c_str());
}

}  // namespace
}  // namespace megascale::wire::verbs
