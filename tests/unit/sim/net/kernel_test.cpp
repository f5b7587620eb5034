// The kernel: events run in time order, ties in scheduling order, run() stops where told, and the
// PRNG is reproducible.
#include <gtest/gtest.h>

#include <vector>

#include "megascale/sim/simulation.h"

namespace megascale::sim {
namespace {

struct Recorder : EventSource {
  Recorder(Simulation& s, std::vector<std::pair<TimePs, int>>& log, int id) : sim(s), out(log), me(id) {}
  void on_event() override { out.emplace_back(sim.now(), me); }
  Simulation& sim;
  std::vector<std::pair<TimePs, int>>& out;
  int me;
};

TEST(Kernel, EventsRunInTimeOrderAndTiesInSchedulingOrder) {
  Simulation sim(1);
  std::vector<std::pair<TimePs, int>> log;
  std::vector<Recorder> r;
  r.reserve(6);
  for (int i = 0; i < 6; ++i) r.emplace_back(sim, log, i);
  sim.schedule_at(500, &r[0]);
  sim.schedule_at(100, &r[1]);
  sim.schedule_at(500, &r[2]);
  sim.schedule_at(100, &r[3]);
  sim.schedule_at(7, &r[4]);
  sim.schedule_at(500, &r[5]);
  EXPECT_EQ(sim.run(), 6u);
  const std::vector<std::pair<TimePs, int>> want = {{7, 4}, {100, 1}, {100, 3}, {500, 0}, {500, 2}, {500, 5}};
  EXPECT_EQ(log, want);
  EXPECT_EQ(sim.now(), 500u);
  EXPECT_EQ(sim.events_processed(), 6u);
}

TEST(Kernel, RunStopsAtItsLimitAndResumes) {
  Simulation sim(1);
  std::vector<std::pair<TimePs, int>> log;
  Recorder a(sim, log, 0), b(sim, log, 1);
  sim.schedule_at(ps_from_ns(10), &a);
  sim.schedule_at(ps_from_ns(30), &b);
  EXPECT_EQ(sim.run(ps_from_ns(20)), 1u);
  EXPECT_EQ(sim.now(), ps_from_ns(20));
  EXPECT_EQ(sim.pending_events(), 1u);
  EXPECT_EQ(sim.run(), 1u);
  EXPECT_EQ(sim.now(), ps_from_ns(30));
}

TEST(Kernel, ManyRandomEventsComeOutSorted) {
  Simulation sim(3);
  std::vector<std::pair<TimePs, int>> log;
  std::vector<Recorder> r;
  r.reserve(5000);
  Rng rng(11);
  for (int i = 0; i < 5000; ++i) {
    r.emplace_back(sim, log, i);
    sim.schedule_at(rng.below(1000), &r.back());
  }
  sim.run();
  ASSERT_EQ(log.size(), 5000u);
  for (size_t i = 1; i < log.size(); ++i) {
    ASSERT_LE(log[i - 1].first, log[i].first);
    if (log[i - 1].first == log[i].first) {
      ASSERT_LT(log[i - 1].second, log[i].second);  // FIFO on ties
    }
  }
}

TEST(Kernel, TimeConversionsAndSerialisation) {
  EXPECT_EQ(ps_from_ns(3), 3000u);
  EXPECT_EQ(ns_from_ps(3999), 3);
  EXPECT_EQ(serialization_ps(1000, 100'000'000'000), 80'000u);  // 80 ps per byte at 100G
  EXPECT_EQ(serialization_ps(4096, 400'000'000'000), 81'920u);
  EXPECT_EQ(serialization_ps(1, 3'000'000'000), 2667u);  // 2666.67 rounds to nearest
}

TEST(Kernel, RngIsReproducibleAndUniform) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= x != c.next_u64();
  }
  EXPECT_TRUE(differs);
  Rng u(5);
  double sum = 0;
  int buckets[10] = {};
  for (int i = 0; i < 100'000; ++i) {
    const double v = u.uniform();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
    ++buckets[u.below(10)];
  }
  EXPECT_NEAR(sum / 100'000, 0.5, 0.01);
  for (int k : buckets) EXPECT_NEAR(k, 10'000, 500);
}

}  // namespace
}  // namespace megascale::sim
