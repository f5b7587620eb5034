// verbs-rc's port (port.h, open_rc_port): two wires over RC ports of one device in one process move
// 4 MiB each way byte for byte, and so do ends opened with different segments; bad configurations are
// refused naming the problem. With MEGASCALE_RC_FLAP_TEST set (the Soft-RoCE guest's flap runs, which
// take eth0 down for 3 s while they run), a transfer across a link flap within the retry budget arrives
// whole, and one across a flap longer than the budget fails clearly and in bounded time.
// The device tests skip without an RDMA device (every host but the guest of scripts/test-rxe.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "megascale/engine/packet.h"
#include "megascale/wire/udp.h"
#include "megascale/wire/verbs/ib_device.h"
#include "megascale/wire/verbs/port.h"

namespace megascale::wire::verbs {
namespace {

UdpConfig wire_config() {
  UdpConfig c;
  c.engine.lanes = 4;
  c.engine.segment_bytes = 4096;
  c.engine.connect_timeout_ns = sec(30);
  // A fixed window: a delay-based controller would read the guest's millisecond round trips (TCG) as
  // queueing and shrink to a crawl.
  c.engine.cc.kind = cc::ControllerKind::kFixedWindow;
  c.engine.cc.fixed.window_packets = 32;
  // The progress threads sleep on the CQ's channel at once: spinning threads would take the guest's
  // two vCPUs from Soft-RoCE's own kernel work.
  c.idle_poll_ns = 0;
  c.pending_poll_ns = 0;
  return c;
}

VerbsPortConfig rc_config(const UdpConfig& w) {
  VerbsPortConfig pc;
  pc.mode = PortMode::kRc;
  pc.slots = w.engine.lanes;
  pc.segment_bytes = w.engine.segment_bytes;
  pc.initial_rto_ns = w.engine.cc.rto.initial_rto_ns;
  pc.retry_budget_ns = w.engine.cc.rto.retry_budget_ns;
  // The NIC keeps no RTT estimate: its ACK timeout must exceed the round trip, which in the Soft-RoCE
  // guest under TCG is milliseconds.
  pc.initial_rto_ns = 16 * kNsPerMs;
  return pc;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

void print_port(const char* who, UdpWire& w) {
  const UdpWireStats st = w.stats();
  std::string line;
  for (const auto& [name, value] : st.port) line += " " + name + "=" + std::to_string(value);
  const engine::EndpointStats es = w.endpoint_stats();
  std::printf("%s: engine tx %llu rx %llu dup %llu;%s\n", who,
              static_cast<unsigned long long>(es.packets_sent),
              static_cast<unsigned long long>(es.packets_received),
              static_cast<unsigned long long>(es.duplicates_dropped), line.c_str());
  std::fflush(stdout);
}

TEST(VerbsRcPort, RefusesBadConfigurationsNamingTheProblem) {
  VerbsPortConfig pc;
  pc.mode = PortMode::kRc;
  pc.slots = 65;
  auto r = open_rc_port(pc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("slots 65"), std::string::npos) << r.error().message;
  pc.slots = 4;
  pc.ring_slots = 1;
  r = open_rc_port(pc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("ring_slots 1"), std::string::npos) << r.error().message;
  pc.ring_slots = 64;
  pc.retry_budget_ns = 1000;
  r = open_rc_port(pc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("retry budget"), std::string::npos) << r.error().message;
  pc.retry_budget_ns = sec(10);
  pc.sysfs_root = "/nonexistent/megascale-rc-test";
  r = open_rc_port(pc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no RDMA device under /nonexistent/megascale-rc-test"), std::string::npos)
      << r.error().message;
}

struct Pair {
  std::unique_ptr<UdpWire> a, b;
  engine::ConnId ca{}, cb{};
};

// Two started wires over RC ports (a's configured by `pca`, b's by `pcb`), a connected to b; b's wire
// may differ from a's (`cfg_b`).
void make_pair_of_wires(const UdpConfig& cfg, const VerbsPortConfig& pca, const VerbsPortConfig& pcb, Pair& p,
                        const UdpConfig* cfg_b = nullptr) {
  auto pa = open_rc_port(pca);
  ASSERT_TRUE(pa.ok()) << pa.error().message;
  auto pb = open_rc_port(pcb);
  ASSERT_TRUE(pb.ok()) << pb.error().message;
  std::printf("port: %s\nport: %s\n", (*pa)->describe().c_str(), (*pb)->describe().c_str());
  auto a = UdpWire::create(cfg, std::move(*pa));
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = UdpWire::create(cfg_b != nullptr ? *cfg_b : cfg, std::move(*pb));
  ASSERT_TRUE(b.ok()) << b.error().message;
  p.a = std::move(*a);
  p.b = std::move(*b);
  ASSERT_TRUE(p.a->start());
  ASSERT_TRUE(p.b->start());
  auto conn = p.a->connect(p.b->local_address());
  ASSERT_TRUE(conn.ok()) << conn.error().message;
  p.ca = *conn;
  auto accepted = p.b->wait_accept(sec(60));
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  p.cb = *accepted;
}

// `n` bytes each way at once; returns the first failure's text ("" when both arrived intact).
std::string exchange(Pair& p, size_t n, uint8_t seed, TimeNs timeout) {
  std::vector<uint8_t> ab = pattern(n, seed), ba = pattern(n, static_cast<uint8_t>(seed + 1));
  std::vector<uint8_t> got_b(n, 0), got_a(n, 0);
  auto rb = p.b->post_recv(p.cb, got_b.data(), n, seed);
  auto ra = p.a->post_recv(p.ca, got_a.data(), n, seed);
  auto sa = p.a->post_send(p.ca, ab.data(), n, seed);
  auto sb = p.b->post_send(p.cb, ba.data(), n, seed);
  if (!rb || !ra || !sa || !sb) return "a post failed";
  const TimeNs deadline = UdpWire::now() + timeout;
  auto left = [&] { return std::max<TimeNs>(deadline - UdpWire::now(), 1); };
  const engine::Completion cb = p.b->wait(p.cb, *rb, left());
  const engine::Completion ca = p.a->wait(p.ca, *ra, left());
  const engine::Completion csa = p.a->wait(p.ca, *sa, left());
  const engine::Completion csb = p.b->wait(p.cb, *sb, left());
  for (const engine::Completion* c : {&cb, &ca, &csa, &csb}) {
    if (c->done && c->ok) continue;
    // The engine may still write into these buffers: keep them for the process's life.
    static std::vector<std::vector<uint8_t>> kept;
    kept.push_back(std::move(got_a));
    kept.push_back(std::move(got_b));
    kept.push_back(std::move(ab));
    kept.push_back(std::move(ba));
    return c->done ? c->error : "not done in time";
  }
  if (got_b != ab) return "a -> b bytes differ";
  if (got_a != ba) return "b -> a bytes differ";
  return "";
}

class VerbsRcDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (list_devices().empty())
      GTEST_SKIP() << "no RDMA device (libibverbs lists none): runs in the Soft-RoCE guest";
  }
};

TEST_F(VerbsRcDevice, TwoWiresMove4MiBEachWayIntact) {
  const UdpConfig cfg = wire_config();
  Pair p;
  make_pair_of_wires(cfg, rc_config(cfg), rc_config(cfg), p);
  ASSERT_TRUE(p.a && p.b);
  auto t0 = std::chrono::steady_clock::now();
  std::string err = exchange(p, 256u << 10, 3, sec(40));
  EXPECT_EQ(err, "");
  std::printf("256 KiB each way in %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  print_port("a after 256 KiB", *p.a);
  print_port("b after 256 KiB", *p.b);
  if (!err.empty()) return;
  t0 = std::chrono::steady_clock::now();
  std::atomic<bool> done{false};
  std::thread watch([&] {
    for (int i = 0; !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (i % 50 != 49) continue;
      print_port("a, 4 MiB under way", *p.a);
      print_port("b, 4 MiB under way", *p.b);
    }
  });
  err = exchange(p, 4u << 20, 7, sec(60));
  done = true;
  watch.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(err, "");
  std::printf("4 MiB each way over verbs-rc in %.2f s\n", s);
  print_port("a", *p.a);
  print_port("b", *p.b);
  for (const auto& [name, value] : p.a->stats().port) {
    if (name == "rc_lanes_connected") {
      EXPECT_GE(value, 1u);
    }
    if (name == "rc_lane_failures") {
      EXPECT_EQ(value, 0u);
    }
  }
}

uint64_t port_counter(UdpWire& w, const std::string& name) {
  for (const auto& [n, value] : w.stats().port) {
    if (n == name) return value;
  }
  return 0;
}

// Runs 1 MiB transfers each way back to back for 10 s while the guest takes eth0 down for 3 s (from
// 1 s after the wires connected: the file `ready`). The budgets (12 s port, 15 s engine) outlast the
// flap: the RC QPs that errored are re-created, the lanes re-connect once the port is ACTIVE again,
// the engine resends what was lost, and every round must arrive byte for byte. `pa`, `pb`: how the
// ports treat their home QPs (rc_setup_waits_for_port, rc_home_reset); budgets and shapes are set here.
void flap_within_budget(const char* ready, VerbsPortConfig pa, VerbsPortConfig pb, Pair& p) {
  UdpConfig cfg = wire_config();
  cfg.engine.cc.rto.retry_budget_ns = sec(15);
  VerbsPortConfig pc = rc_config(cfg);
  pc.retry_budget_ns = sec(12);
  for (VerbsPortConfig* c : {&pa, &pb}) {
    const bool waits = c->rc_setup_waits_for_port, reset = c->rc_home_reset;
    *c = pc;
    c->rc_setup_waits_for_port = waits;
    c->rc_home_reset = reset;
  }
  make_pair_of_wires(cfg, pa, pb, p);
  ASSERT_TRUE(p.a && p.b);
  if (FILE* f = std::fopen(ready, "w")) std::fclose(f);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::atomic<bool> done{false};
  std::thread watch([&] {
    for (int i = 0; !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (i % 10 != 9) continue;
      std::printf("t=%.1f s\n", elapsed());
      print_port("  a", *p.a);
      print_port("  b", *p.b);
    }
  });
  std::string err;
  int rounds = 0;
  double slowest = 0;
  while (elapsed() < 10.0 && err.empty()) {
    const double start = elapsed();
    err = exchange(p, 1u << 20, static_cast<uint8_t>(rounds), sec(40));
    slowest = std::max(slowest, elapsed() - start);
    ++rounds;
  }
  done = true;
  watch.join();
  uint64_t errors = 0, recreated = 0, resets = 0, home = 0, failures = 0;
  for (UdpWire* w : {p.a.get(), p.b.get()}) {
    errors += port_counter(*w, "rc_qp_errors");
    recreated += port_counter(*w, "rc_qp_recreated");
    resets += port_counter(*w, "rc_home_resets");
    home += port_counter(*w, "rc_home_recreated");
    failures += port_counter(*w, "rc_lane_failures");
  }
  std::printf(
      "flap within the budget: %d rounds of 1 MiB each way in %.2f s (slowest round %.2f s); %s; QP errors "
      "%llu, QPs re-created %llu, home QPs reset %llu, re-created %llu, lane failures %llu\n",
      rounds, elapsed(), slowest, err.empty() ? "all intact" : ("failed: " + err).c_str(),
      static_cast<unsigned long long>(errors), static_cast<unsigned long long>(recreated),
      static_cast<unsigned long long>(resets), static_cast<unsigned long long>(home),
      static_cast<unsigned long long>(failures));
  print_port("a", *p.a);
  print_port("b", *p.b);
  EXPECT_EQ(err, "");
  // The flap must have hit the QPs, or this test proved nothing about recovery.
  EXPECT_GE(recreated, 1u);
  EXPECT_EQ(failures, 0u);
}

// The flap within the budget; set-up messages wait for the port, so the home QPs never error.
TEST_F(VerbsRcDevice, LinkFlapWithinTheBudgetSurvivesIntact) {
  if (std::getenv("MEGASCALE_RC_FLAP_TEST") == nullptr) {
    GTEST_SKIP() << "MEGASCALE_RC_FLAP_TEST unset: the guest's flap run sets it";
  }
  Pair p;
  flap_within_budget("/tmp/rc-flap-within-ready", {}, {}, p);
}

// The same flap with a's set-up messages sent while the link is down and its home QP re-created
// (never reset): a's home QP errors and comes back with a new QPN (again while the link stays down),
// and b, which knows a by its port id, answers a there once a's request reaches it.
TEST_F(VerbsRcDevice, LinkFlapWithinTheBudgetSurvivesAHomeQpRecreated) {
  if (std::getenv("MEGASCALE_RC_FLAP_TEST") == nullptr) {
    GTEST_SKIP() << "MEGASCALE_RC_FLAP_TEST unset: the guest's flap run sets it";
  }
  VerbsPortConfig pa;
  pa.rc_setup_waits_for_port = false;
  pa.rc_home_reset = false;
  Pair p;
  flap_within_budget("/tmp/rc-flap-home-ready", pa, {}, p);
  EXPECT_GE(port_counter(*p.a, "rc_home_recreated"), 1u);
  EXPECT_GE(port_counter(*p.b, "rc_peer_home_moved"), 1u);
}

// The same flap with both ports' set-up messages sent while the link is down: both home QPs error
// and are reset keeping their QPNs, so each still reaches the other.
TEST_F(VerbsRcDevice, LinkFlapWithinTheBudgetSurvivesBothHomeQpsReset) {
  if (std::getenv("MEGASCALE_RC_FLAP_TEST") == nullptr) {
    GTEST_SKIP() << "MEGASCALE_RC_FLAP_TEST unset: the guest's flap run sets it";
  }
  VerbsPortConfig pc;
  pc.rc_setup_waits_for_port = false;
  Pair p;
  flap_within_budget("/tmp/rc-flap-reset-ready", pc, pc, p);
  EXPECT_GE(port_counter(*p.a, "rc_home_resets"), 1u);
  EXPECT_GE(port_counter(*p.b, "rc_home_resets"), 1u);
}

// The ends may be opened with different segments (perf's server takes the largest and lets each
// client choose): the port with the larger ring slots takes the other's set-up, the engine's handshake
// gives the connection the smaller segment, and every packet fits the smaller ring.
TEST_F(VerbsRcDevice, EndsOfDifferentSegmentsConnectAndMoveIntact) {
  const UdpConfig small = wire_config();
  UdpConfig large = small;
  large.engine.segment_bytes = engine::kMaxSegmentPayload;
  const VerbsPortConfig pc_small = rc_config(small);
  const VerbsPortConfig pc_large = rc_config(large);
  Pair p;
  make_pair_of_wires(small, pc_small, pc_large, p, &large);
  ASSERT_TRUE(p.a && p.b);
  const std::string err = exchange(p, 256u << 10, 11, sec(40));
  print_port("a (4 KiB segments)", *p.a);
  print_port("b (65000-byte segments)", *p.b);
  EXPECT_EQ(err, "");
  for (const UdpWire* w : {p.a.get(), p.b.get()}) {
    for (const auto& [name, value] : w->stats().port) {
      if (name == "rc_setups_refused" || name == "rc_peer_slot_dropped" || name == "rc_lane_failures") {
        EXPECT_EQ(value, 0u) << name;
      }
    }
  }
}

// Runs transfers back to back while the guest takes eth0 down for 3 s (from 1 s after the wires
// connected: /tmp/rc-flap-ready). A 3 s outage against a 1 s port budget and a 2 s engine budget: the
// lanes fail (counted, and said on stderr) and the engine's connection fails with its timeout error
// well within 30 s instead of hanging.
TEST_F(VerbsRcDevice, LinkFlapPastTheBudgetFailsClearlyInBoundedTime) {
  if (std::getenv("MEGASCALE_RC_FLAP_TEST") == nullptr) {
    GTEST_SKIP() << "MEGASCALE_RC_FLAP_TEST unset: the guest's flap run sets it";
  }
  UdpConfig cfg = wire_config();
  cfg.engine.cc.rto.retry_budget_ns = sec(2);
  VerbsPortConfig pc = rc_config(cfg);
  pc.retry_budget_ns = sec(1);
  Pair p;
  make_pair_of_wires(cfg, pc, pc, p);
  ASSERT_TRUE(p.a && p.b);
  if (FILE* f = std::fopen("/tmp/rc-flap-ready", "w")) std::fclose(f);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::string err;
  int rounds = 0;
  while (elapsed() < 9.0 && err.empty()) {
    err = exchange(p, 1u << 20, static_cast<uint8_t>(rounds), sec(40));
    ++rounds;
  }
  std::printf("flap past the budget: %d rounds of 1 MiB each way in %.2f s; %s\n", rounds, elapsed(),
              err.empty() ? "all intact" : ("failed: " + err).c_str());
  print_port("a", *p.a);
  print_port("b", *p.b);
  EXPECT_NE(err.find("unreachable"), std::string::npos) << err;
  EXPECT_LT(elapsed(), 30.0);
  uint64_t failures = 0;
  for (UdpWire* w : {p.a.get(), p.b.get()}) {
    for (const auto& [name, value] : w->stats().port) {
      if (name == "rc_lane_failures") failures += value;
    }
  }
  EXPECT_GE(failures, 1u);
}

}  // namespace
}  // namespace megascale::wire::verbs
