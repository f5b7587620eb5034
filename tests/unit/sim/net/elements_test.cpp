// Links, queues and switches on their own: exact crossing times, back-to-back serialisation at line
// rate, RED marking with its configured probability, tail drop at capacity, ECMP that keeps a flow on
// one port and spreads many.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "megascale/sim/link.h"
#include "megascale/sim/queue.h"
#include "megascale/sim/simulation.h"
#include "megascale/sim/switch.h"

namespace megascale::sim {
namespace {

constexpr uint64_t k100G = 100'000'000'000;

// Records when each frame arrives, then frees it.
struct Sink : PacketSink {
  Sink(Simulation& s, PacketPool& p) : sim(s), pool(p) {}
  void receive(Packet* pkt) override {
    arrivals.push_back(sim.now());
    ce.push_back(pkt->ce);
    pool.release(pkt);
  }
  Simulation& sim;
  PacketPool& pool;
  std::vector<TimePs> arrivals;
  std::vector<bool> ce;
};

Packet* frame(PacketPool& pool, uint32_t bytes, bool ect = true) {
  Packet* p = pool.alloc();
  p->wire_bytes = bytes;
  p->ect = ect;
  return p;
}

TEST(Elements, AFrameCrossesAPortInSerialisationPlusPropagation) {
  Simulation sim(1);
  PacketPool pool;
  Sink sink(sim, pool);
  Link link(sim, 1'000'000, &sink);  // 1 us
  OutputQueue q(sim, pool, QueueConfig{.rate_bps = k100G, .capacity_bytes = 1 << 20, .red = {}}, &link);
  sim.run(ps_from_ns(5));  // start at a time that is not 0
  q.receive(frame(pool, 4162));
  sim.run();
  ASSERT_EQ(sink.arrivals.size(), 1u);
  EXPECT_EQ(sink.arrivals[0], ps_from_ns(5) + 4162u * 80u + 1'000'000u);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(link.delivered(), 1u);
}

TEST(Elements, AQueueSerialisesBackToBackAtLineRate) {
  Simulation sim(1);
  PacketPool pool;
  Sink sink(sim, pool);
  Link link(sim, 500'000, &sink);
  OutputQueue q(sim, pool, QueueConfig{.rate_bps = 400'000'000'000, .capacity_bytes = 1 << 22, .red = {}},
                &link);
  const std::vector<uint32_t> sizes = {1500, 4162, 64, 9000, 4162, 4162, 100, 2000};
  for (uint32_t s : sizes) q.receive(frame(pool, s));  // a burst, all at t = 0
  sim.run();
  ASSERT_EQ(sink.arrivals.size(), sizes.size());
  TimePs t = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    t += serialization_ps(sizes[i], 400'000'000'000);  // each starts when the previous ends
    EXPECT_EQ(sink.arrivals[i], t + 500'000) << i;
  }
  EXPECT_EQ(q.stats().busy_ps, t);
  EXPECT_EQ(q.stats().sent, sizes.size());
  EXPECT_TRUE(q.idle());
  // The link carried many frames with at most one pending event at a time: the whole run took one
  // event per frame for the queue and at most one per frame for the link.
  EXPECT_LE(sim.events_processed(), 2 * sizes.size());
}

TEST(Elements, TailDropAtCapacity) {
  Simulation sim(1);
  PacketPool pool;
  Sink sink(sim, pool);
  OutputQueue q(sim, pool, QueueConfig{.rate_bps = k100G, .capacity_bytes = 10'000, .red = {}}, &sink);
  for (int i = 0; i < 5; ++i) q.receive(frame(pool, 3000));  // 3 fit (9000 B), 2 would exceed
  EXPECT_EQ(q.stats().dropped, 2u);
  EXPECT_EQ(q.backlog_bytes(), 9000u);
  q.receive(frame(pool, 1000));  // exactly at capacity: accepted
  EXPECT_EQ(q.stats().dropped, 2u);
  q.receive(frame(pool, 1));
  EXPECT_EQ(q.stats().dropped, 3u);
  sim.run();
  EXPECT_EQ(sink.arrivals.size(), 4u);
  EXPECT_EQ(pool.in_use(), 0u);
  // Drained, it takes frames again.
  q.receive(frame(pool, 3000));
  EXPECT_EQ(q.stats().dropped, 3u);
}

// Holds the queue at a fixed backlog (a long frame in service) and offers probe frames, counting the
// marks each finds.
double marked_fraction(uint64_t backlog_bytes, const RedConfig& red, int probes, bool ect = true) {
  Simulation sim(99);
  PacketPool pool;
  Sink sink(sim, pool);
  OutputQueue q(sim, pool, QueueConfig{.rate_bps = k100G, .capacity_bytes = 1ULL << 40, .red = red}, &sink);
  if (backlog_bytes > 0) q.receive(frame(pool, static_cast<uint32_t>(backlog_bytes), false));
  uint64_t marked = 0;
  for (int i = 0; i < probes; ++i) {
    Packet* p = frame(pool, 0, ect);  // a zero-byte probe leaves the backlog where it was
    q.receive(p);
    marked += p->ce ? 1 : 0;
  }
  EXPECT_EQ(q.stats().marked, marked);
  sim.run();
  return static_cast<double>(marked) / probes;
}

TEST(Elements, RedMarksWithTheConfiguredProbability) {
  const RedConfig red{.enabled = true, .kmin_bytes = 100'000, .kmax_bytes = 400'000, .pmax = 0.2};
  const int n = 40'000;
  // Between Kmin and Kmax: Pmax·(q−Kmin)/(Kmax−Kmin); binomial sd at p = 0.1 over 40k is 0.0015.
  EXPECT_NEAR(marked_fraction(250'000, red, n), 0.1, 0.006);
  EXPECT_NEAR(marked_fraction(175'000, red, n), 0.05, 0.005);
  EXPECT_NEAR(marked_fraction(399'000, red, n), 0.2 * 299.0 / 300.0, 0.008);
  // Never below Kmin, always at or above Kmax.
  EXPECT_EQ(marked_fraction(0, red, n), 0.0);
  EXPECT_EQ(marked_fraction(99'999, red, n), 0.0);
  EXPECT_EQ(marked_fraction(400'000, red, 1000), 1.0);
  // Non-ECT frames are never marked (and not dropped by RED).
  EXPECT_EQ(marked_fraction(1'000'000, red, 1000, /*ect=*/false), 0.0);
  // RED off: no marks anywhere.
  EXPECT_EQ(marked_fraction(1'000'000, RedConfig{}, 1000), 0.0);
}

TEST(Elements, MarkedFramesKeepTheirMarkDownstream) {
  Simulation sim(1);
  PacketPool pool;
  Sink sink(sim, pool);
  const RedConfig red{.enabled = true, .kmin_bytes = 1000, .kmax_bytes = 2000, .pmax = 1.0};
  OutputQueue q(sim, pool, QueueConfig{.rate_bps = k100G, .capacity_bytes = 1 << 20, .red = red}, &sink);
  for (int i = 0; i < 4; ++i) q.receive(frame(pool, 1500));  // finds 0, 1500, 3000, 4500 bytes
  sim.run();
  // The first finds an empty queue, the second 1500 B (p = 0.5, drawn), the others >= Kmax (p = 1).
  EXPECT_FALSE(sink.ce[0]);
  EXPECT_TRUE(sink.ce[2]);
  EXPECT_TRUE(sink.ce[3]);
  EXPECT_EQ(q.stats().marked, static_cast<uint64_t>(sink.ce[1] + sink.ce[2] + sink.ce[3]));
}

TEST(Elements, EcmpKeepsAFlowOnOnePortAndSpreadsFlows) {
  Simulation sim(1);
  PacketPool pool;
  std::vector<Sink> sinks(4, Sink(sim, pool));
  std::vector<std::unique_ptr<OutputQueue>> ports;
  Switch sw(0, 1234, pool);
  for (auto& s : sinks) {
    ports.push_back(std::make_unique<OutputQueue>(sim, pool, QueueConfig{}, &s));
    sw.add_port(ports.back().get());
  }
  sw.set_route(9, {0, 1, 2, 3});
  std::vector<int> per_port(4);
  for (uint16_t sport = 49152; sport < 49152 + 4000; ++sport) {
    const FiveTuple f{.src_addr = 1, .dst_addr = 9, .src_port = sport, .dst_port = kSimUdpPort};
    const uint32_t p = sw.select_port(f);
    ASSERT_LT(p, 4u);
    EXPECT_EQ(sw.select_port(f), p);  // stable per flow
    ++per_port[p];
  }
  for (int c : per_port) EXPECT_NEAR(c, 1000, 120);
  // Another seed spreads the same flows differently (no polarisation between switches).
  Switch other(1, 5678, pool);
  for (auto& q : ports) other.add_port(q.get());
  other.set_route(9, {0, 1, 2, 3});
  int same = 0;
  for (uint16_t sport = 49152; sport < 49152 + 1000; ++sport) {
    const FiveTuple f{.src_addr = 1, .dst_addr = 9, .src_port = sport, .dst_port = kSimUdpPort};
    same += sw.select_port(f) == other.select_port(f);
  }
  EXPECT_NEAR(same, 250, 60);
  // No route: dropped and counted.
  sw.receive(frame(pool, 100));
  EXPECT_EQ(sw.unroutable(), 1u);
  EXPECT_EQ(pool.in_use(), 0u);
}

}  // namespace
}  // namespace megascale::sim
