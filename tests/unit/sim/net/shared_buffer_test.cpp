// Shared switch buffers, priorities and the dynamic PFC threshold: a queue is admitted only while it stays
// within alpha x the free shared buffer (checked at every arrival) and settles at alpha/(1+n alpha) x B
// with n congested queues (Choudhury-Hahne); control frames go before data and are not paused; a PFC
// ingress in dynamic mode pauses at the first frame over alpha x free, holds the rest in headroom, and a
// fixed-window incast on a shared-buffer star with dynamic PFC never drops (it does without PFC); the
// scenario keys load and a dynamic PFC without a shared buffer is refused with FILE:LINE.
#include "megascale/sim/shared_buffer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../../support/source_path.h"
#include "megascale/congestion/config.h"
#include "megascale/sim/link.h"
#include "megascale/sim/pfc.h"
#include "megascale/sim/scenario.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {
namespace {

constexpr uint64_t k100G = 100'000'000'000;
constexpr uint32_t kFrame = 1000;

class Hold : public PacketSink {
 public:
  void receive(Packet* pkt) override { held.push_back(pkt); }
  std::vector<Packet*> held;
};

QueueConfig port(uint8_t priorities = 1, uint64_t capacity_bytes = 1'000'000'000) {
  QueueConfig q;
  q.rate_bps = k100G;
  q.capacity_bytes = capacity_bytes;
  q.priorities = priorities;
  return q;
}

Packet* frame(PacketPool& pool, uint8_t priority = kPriorityData) {
  Packet* p = pool.alloc();
  p->wire_bytes = kFrame;
  p->priority = priority;
  return p;
}

TEST(SharedBuffer, AdmitsWhileWithinAlphaTimesFree) {
  SharedBuffer buf(SharedBufferConfig{.bytes = 10'000, .alpha = 0.5});
  EXPECT_DOUBLE_EQ(buf.threshold_bytes(), 5'000);
  EXPECT_TRUE(buf.admits(4'000, 1'000));   // 5,000 <= 0.5 x 10,000
  EXPECT_FALSE(buf.admits(4'001, 1'000));  // just over
  buf.add(6'000);
  EXPECT_DOUBLE_EQ(buf.threshold_bytes(), 2'000);
  EXPECT_TRUE(buf.admits(0, 2'000));
  EXPECT_FALSE(buf.admits(0, 2'001));
  EXPECT_TRUE(buf.admits(0, 4'000, 1.0));    // another holder's alpha
  EXPECT_FALSE(buf.admits(0, 4'001, 10.0));  // never past the pool itself
  buf.remove(6'000);
  EXPECT_EQ(buf.used_bytes(), 0u);
  EXPECT_EQ(buf.max_used_bytes(), 6'000u);
}

// Paused queues (nothing leaves) fed round-robin: every admitted frame keeps its queue within alpha x
// the free buffer it found, drops start, and each of n queues settles at alpha/(1 + n alpha) x B.
TEST(SharedBuffer, QueuesNeverExceedAlphaTimesFreeAndSettleAtTheDynamicShare) {
  for (double alpha : {0.5, 1.0, 4.0}) {
    for (uint32_t n : {1u, 3u}) {
      Simulation sim(1);
      PacketPool pool;
      Hold sink;
      const uint64_t B = 1'000'000;
      SharedBuffer buf(SharedBufferConfig{.bytes = B, .alpha = alpha});
      std::vector<std::unique_ptr<OutputQueue>> qs;
      for (uint32_t i = 0; i < n; ++i) {
        qs.push_back(std::make_unique<OutputQueue>(sim, pool, port(1, 1), &sink));
        qs.back()->set_shared_buffer(&buf);
        qs.back()->set_paused(true);
      }
      uint64_t dropped = 0;
      for (int k = 0; k < 5000; ++k) {
        OutputQueue& q = *qs[k % n];
        const double limit = alpha * static_cast<double>(buf.free_bytes());
        const uint64_t before = q.backlog_bytes();
        q.receive(frame(pool));
        if (q.backlog_bytes() > before) {
          EXPECT_LE(static_cast<double>(q.backlog_bytes()), limit) << "alpha " << alpha << " n " << n;
        } else {
          ++dropped;
        }
      }
      EXPECT_GT(dropped, 0u);
      const double share = alpha / (1 + n * alpha) * static_cast<double>(B);
      for (auto& q : qs) {
        EXPECT_LE(static_cast<double>(q->backlog_bytes()), share + kFrame) << "alpha " << alpha << " n " << n;
        EXPECT_GE(static_cast<double>(q->backlog_bytes()), share - 2.0 * kFrame) << "alpha " << alpha;
      }
      EXPECT_EQ(buf.used_bytes(), n * qs[0]->backlog_bytes());
    }
  }
}

TEST(SharedBuffer, DepartingFramesGiveTheirBytesBack) {
  Simulation sim(1);
  PacketPool pool;
  Hold sink;
  SharedBuffer buf(SharedBufferConfig{.bytes = 100'000, .alpha = 1.0});
  OutputQueue q(sim, pool, port(), &sink);
  q.set_shared_buffer(&buf);
  for (int i = 0; i < 10; ++i) q.receive(frame(pool));
  EXPECT_EQ(buf.used_bytes(), 10u * kFrame);
  sim.run(kPsPerUs);  // 10 frames of 80 ns
  EXPECT_EQ(sink.held.size(), 10u);
  EXPECT_EQ(buf.used_bytes(), 0u);
}

TEST(Priorities, ControlGoesFirstAndIsNotPaused) {
  Simulation sim(1);
  PacketPool pool;
  Hold sink;
  OutputQueue q(sim, pool, port(2), &sink);
  q.set_paused(true);
  q.receive(frame(pool, kPriorityData));
  q.receive(frame(pool, kPriorityControl));
  sim.run(kPsPerUs);
  ASSERT_EQ(sink.held.size(), 1u);  // the control frame went; data waits for the RESUME
  EXPECT_EQ(sink.held[0]->priority, kPriorityControl);
  EXPECT_EQ(q.class_backlog_bytes(kPriorityData), kFrame);
  q.set_paused(false);
  q.receive(frame(pool, kPriorityData));
  q.receive(frame(pool, kPriorityControl));  // arrives behind two data frames, served right after the first
  sim.run(2 * kPsPerUs);
  ASSERT_EQ(sink.held.size(), 4u);
  EXPECT_EQ(sink.held[1]->priority, kPriorityData);
  EXPECT_EQ(sink.held[2]->priority, kPriorityControl);
  EXPECT_EQ(sink.held[3]->priority, kPriorityData);
  // With one priority a PAUSE stops everything, control included (the default, as before).
  OutputQueue one(sim, pool, port(), &sink);
  one.set_paused(true);
  one.receive(frame(pool, kPriorityControl));
  sim.run(3 * kPsPerUs);
  EXPECT_EQ(sink.held.size(), 4u);
}

TEST(Priorities, LosslessDataNeverDropsAndDoesNotCrowdOutControl) {
  Simulation sim(1);
  PacketPool pool;
  Hold sink;
  QueueConfig qc = port(2, 5 * kFrame);
  qc.lossless = true;
  OutputQueue q(sim, pool, qc, &sink);
  q.set_paused(true);
  for (int i = 0; i < 20; ++i) q.receive(frame(pool, kPriorityData));  // 4x the capacity, paused
  EXPECT_EQ(q.stats().dropped, 0u);
  EXPECT_EQ(q.class_backlog_bytes(kPriorityData), 20u * kFrame);
  // Control frames are held to the capacity on their own, not behind the data piled up here.
  for (int i = 0; i < 7; ++i) q.receive(frame(pool, kPriorityControl));
  EXPECT_EQ(q.stats().dropped, 2u);  // 5 fit (the one in service counts), the 6th and 7th do not
  sim.run(kPsPerUs);
  EXPECT_EQ(sink.held.size(), 5u);  // all control; the data waits for the RESUME
  EXPECT_EQ(q.class_backlog_bytes(kPriorityData), 20u * kFrame);
}

TEST(Pfc, DynamicThresholdPausesAtAlphaTimesFreeAndResumesBelowIt) {
  Simulation sim(1);
  PacketPool pool;
  Hold sw;
  SharedBuffer buf(SharedBufferConfig{.bytes = 200'000, .alpha = 1.0});
  buf.add(100'000);  // another ingress holds half: free 100,000, threshold 0.25 x 100,000 = 25,000
  PfcConfig pfc;
  pfc.enabled = true;
  pfc.max_frame_bytes = kFrame;
  pfc.dynamic = true;
  pfc.alpha = 0.25;
  OutputQueue upstream(sim, pool, port());
  Link link(sim, kPsPerUs);
  SwitchIngress in(sim, pool, &sw, &upstream, kPsPerUs, k100G, pfc);
  in.set_shared_buffer(&buf);
  upstream.set_next(&link);
  link.set_far_end(&in);
  for (int i = 0; i < 100; ++i) upstream.receive(frame(pool));
  // Frame k lands at k x 80 ns + 1 us. The threshold falls as the ingress fills: 0.25 x (100,000 - h),
  // so h + 1000 <= 0.25 x (100,000 - h) holds up to h = 19,000: 20 frames fit, the 21st pauses.
  sim.run(20 * 80 * kPsPerNs + kPsPerUs);
  EXPECT_EQ(in.held_bytes(), 20'000u);
  EXPECT_EQ(in.stats().pauses_sent, 0u);
  sim.run(21 * 80 * kPsPerNs + kPsPerUs);
  EXPECT_EQ(in.stats().pauses_sent, 1u);
  EXPECT_EQ(in.headroom_held_bytes(), kFrame);
  EXPECT_EQ(buf.used_bytes(), 100'000u + 20'000u);  // headroom is not in the shared pool
  EXPECT_EQ(in.xoff_threshold_bytes(), 20'000u);
  sim.run(30 * kPsPerUs);
  EXPECT_TRUE(upstream.paused());
  EXPECT_EQ(in.stats().headroom_drops, 0u);
  EXPECT_LE(in.headroom_held_bytes(), in.headroom_bytes());
  const uint64_t sent = upstream.stats().sent;
  // Drain the switch one frame at a time: departures free headroom first, and no RESUME goes while any
  // is held; then the shared bytes fall until held + the XON offset (2 frames) fits under the
  // threshold, 0.25 x (100,000 - held): held <= 18,400, so at 18,000.
  const TimePs drain = sim.now();
  size_t next = 0;
  while (in.stats().resumes_sent == 0 && next < sw.held.size()) {
    EXPECT_TRUE(in.pausing());
    in.on_departure(sw.held[next++]);
    if (in.headroom_held_bytes() > 0) {
      EXPECT_EQ(in.stats().resumes_sent, 0u);
    }
  }
  EXPECT_EQ(in.stats().resumes_sent, 1u);
  EXPECT_EQ(in.headroom_held_bytes(), 0u);
  EXPECT_EQ(in.held_bytes(), 18'000u);
  EXPECT_EQ(buf.used_bytes(), 100'000u + 18'000u);
  sim.run(drain + kPsPerUs);  // the RESUME crosses the link
  EXPECT_FALSE(upstream.paused());
  EXPECT_GT(upstream.stats().paused_ps, 0u);
  sim.run(drain + 2 * kPsPerUs);
  EXPECT_GT(upstream.stats().sent, sent);
  for (Packet* p : sw.held) pool.release(p);
}

FabricConfig shared_incast_config(bool pfc_on) {
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config("fixed");
  fc.engine.lanes = 1;
  fc.shared_buffer = SharedBufferConfig{.bytes = 400'000, .alpha = 1.0};
  fc.priorities = 2;
  fc.pfc.enabled = pfc_on;
  fc.pfc.dynamic = true;
  fc.pfc.alpha = 0.125;
  fc.seed = 3;
  return fc;
}

TEST(Pfc, DynamicLosslessIncastNeverDropsAndDropsWithoutPfc) {
  for (bool pfc_on : {false, true}) {
    auto fabric = build_star(shared_incast_config(pfc_on), 17);
    ASSERT_TRUE(fabric.ok());
    auto r = run_flows(**fabric, incast_flows(16, 16, 1'000'000), 500 * 1000 * kPsPerUs);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->completed, 16u);
    const SharedBuffer* buf = (*fabric)->shared_buffer(0);
    ASSERT_NE(buf, nullptr);
    EXPECT_LE(buf->max_used_bytes(), 400'000u);
    if (!pfc_on) {
      EXPECT_GT(r->drops, 100u);  // the receiver's port is held to alpha/(1+alpha) of 400 KB
      continue;
    }
    EXPECT_EQ(r->drops, 0u);
    EXPECT_EQ(r->retransmits, 0u);
    EXPECT_GT((*fabric)->total_pauses(), 16u);
    EXPECT_GT((*fabric)->total_paused_ps(), 16 * kPsPerUs);
    for (size_t i = 0; i < (*fabric)->ingress_count(); ++i) {
      const SwitchIngress& in = (*fabric)->ingress(i);
      EXPECT_EQ(in.stats().headroom_drops, 0u);
      EXPECT_LE(in.stats().max_headroom_bytes, in.headroom_bytes());
    }
  }
}

constexpr const char* kShared = R"(name: t
fabric: star:9
switch:
  shared_buffer_bytes: 2000000
  alpha: 2
  priorities: 2
  pfc: {enabled: true, dynamic: true, alpha: 0.25, xon_offset_bytes: 9000}
controller: fixed
lanes: 1
workload: {kind: incast, senders: 8, receiver: 8, bytes: 200000}
)";

TEST(Scenario, SharedBufferAndDynamicPfcKeys) {
  auto s = parse_sim_scenario(kShared, "shared.yaml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->shared_buffer.bytes, 2'000'000u);
  EXPECT_DOUBLE_EQ(s->shared_buffer.alpha, 2.0);
  EXPECT_EQ(s->priorities, 2);
  EXPECT_TRUE(s->pfc.dynamic);
  EXPECT_DOUBLE_EQ(s->pfc.alpha, 0.25);
  EXPECT_EQ(s->pfc.xon_offset_bytes, 9'000u);
  auto r = run_sim_scenario(*s, "", nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(summarize_run(*r).drops, 0u);

  std::string no_pool = kShared;
  no_pool.erase(no_pool.find("  shared_buffer_bytes: 2000000\n"), 31);
  auto a = parse_sim_scenario(no_pool, "shared.yaml");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("shared.yaml:6: pfc: dynamic: true needs switch.shared_buffer_bytes"),
            std::string::npos)
      << a.error().message;
  // The shipped files that use the keys (and the 12,288-NIC scale scenario) load.
  const std::string dir = megascale::test::source_path("configs/sim/");
  for (const char* f : {"cc-compare-incast-dynamic-pfc.yaml", "megascale-permutation.yaml"}) {
    auto shipped = load_sim_scenario(dir + f);
    EXPECT_TRUE(shipped.ok()) << f << ": " << (shipped.ok() ? "" : shipped.error().message);
  }
  EXPECT_TRUE(load_sim_scenario(dir + "cc-compare-incast-dynamic-pfc.yaml")->pfc.dynamic);

  std::string bad = kShared;
  bad.replace(bad.find("priorities: 2"), 13, "priorities: 3");
  auto b = parse_sim_scenario(bad, "shared.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("shared.yaml:6: priorities: 3: must be in [1, 2]"), std::string::npos)
      << b.error().message;
}

}  // namespace
}  // namespace megascale::sim
