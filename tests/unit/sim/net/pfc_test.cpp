// PFC: an ingress pauses its upstream port when it holds more than XOFF and resumes it at XON, each
// control frame crossing the link's delay; the paused port stops after its frame in service and
// accounts the time; a fixed-window incast that drops into a small buffer without PFC never drops
// with it, on a star and through a 2-tier fabric (where pauses spread to the spines).
#include "megascale/sim/pfc.h"

#include <gtest/gtest.h>

#include <vector>

#include "megascale/congestion/config.h"
#include "megascale/sim/clos.h"
#include "megascale/sim/link.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {
namespace {

constexpr uint64_t k100G = 100'000'000'000;
constexpr TimePs kFramePs = 80 * kPsPerNs;  // 1000 bytes at 100 Gbit/s

// The switch behind the ingress: it keeps every frame until the test lets it go.
class Hold : public PacketSink {
 public:
  void receive(Packet* pkt) override { held.push_back(pkt); }
  std::vector<Packet*> held;
};

TEST(Pfc, HeadroomIsTwoDelaysOfLineRatePlusTwoFrames) {
  PfcConfig pfc;
  pfc.enabled = true;
  pfc.max_frame_bytes = 4000;
  // 1 us at 100 Gbit/s = 12,500 bytes on the wire.
  EXPECT_EQ(pfc_headroom_bytes(pfc, kPsPerUs, k100G), 2 * 12'500u + 2 * 4000u);
  EXPECT_EQ(pfc_headroom_bytes(pfc, 2 * kPsPerUs, 4 * k100G), 2 * 100'000u + 2 * 4000u);
  pfc.headroom_bytes = 777;
  EXPECT_EQ(pfc_headroom_bytes(pfc, kPsPerUs, k100G), 777u);
}

TEST(Pfc, PausesAtXoffResumesAtXonAndAccountsPausedTime) {
  Simulation sim(1);
  PacketPool pool;
  Hold sw;
  const PfcConfig pfc{.enabled = true,
                      .xoff_bytes = 20'000,
                      .xon_bytes = 10'000,
                      .headroom_bytes = 0,
                      .max_frame_bytes = 1000};
  OutputQueue upstream(sim, pool, QueueConfig{.rate_bps = k100G, .capacity_bytes = 1'000'000'000, .red = {}});
  Link link(sim, kPsPerUs);
  SwitchIngress in(sim, pool, &sw, &upstream, kPsPerUs, k100G, pfc);
  upstream.set_next(&link);
  link.set_far_end(&in);
  for (int i = 0; i < 200; ++i) {
    Packet* p = pool.alloc();
    p->wire_bytes = 1000;
    upstream.receive(p);
  }
  // Frame k (from 1) lands at k x 80 ns + 1 us. After 20 frames the ingress holds exactly XOFF.
  sim.run(20 * kFramePs + kPsPerUs);
  EXPECT_EQ(in.held_bytes(), 20'000u);
  EXPECT_EQ(in.stats().pauses_sent, 0u);
  // The 21st takes it over XOFF: a PAUSE leaves, and reaches the upstream port one delay later.
  const TimePs pause_sent = 21 * kFramePs + kPsPerUs;
  sim.run(pause_sent);
  EXPECT_EQ(in.stats().pauses_sent, 1u);
  EXPECT_TRUE(in.pausing());
  sim.run(pause_sent + kPsPerUs - 1);
  EXPECT_FALSE(upstream.paused());
  sim.run(pause_sent + kPsPerUs);
  EXPECT_TRUE(upstream.paused());
  // The port finishes its frame in service and stops; what was on the wire lands.
  sim.run(pause_sent + 5 * kPsPerUs);
  const uint64_t sent = upstream.stats().sent;
  EXPECT_EQ(sent, (pause_sent + kPsPerUs + kFramePs - 1) / kFramePs);
  EXPECT_EQ(in.held_bytes(), sent * 1000);
  EXPECT_LE(in.held_bytes(), pfc.xoff_bytes + in.headroom_bytes());
  EXPECT_EQ(in.stats().headroom_drops, 0u);
  sim.run(pause_sent + 10 * kPsPerUs);
  EXPECT_EQ(upstream.stats().sent, sent);
  EXPECT_EQ(upstream.stats().pauses, 1u);

  // Drain the switch one frame at a time: the RESUME leaves when it holds XON or less.
  const TimePs drain = sim.now();
  while (in.held_bytes() > pfc.xon_bytes + 1000) {
    in.on_departure(sw.held.back());
    pool.release(sw.held.back());
    sw.held.pop_back();
  }
  EXPECT_EQ(in.stats().resumes_sent, 0u);
  in.on_departure(sw.held.back());
  EXPECT_EQ(in.stats().resumes_sent, 1u);
  EXPECT_FALSE(in.pausing());
  sim.run(drain + kPsPerUs - 1);
  EXPECT_TRUE(upstream.paused());
  sim.run(drain + kPsPerUs);
  EXPECT_FALSE(upstream.paused());
  EXPECT_EQ(upstream.stats().paused_ps, drain - pause_sent);  // from PAUSE arrival to RESUME arrival
  sim.run(drain + 2 * kPsPerUs);
  EXPECT_GT(upstream.stats().sent, sent + 5);  // serving again
}

FabricConfig incast_config(bool pfc_on) {
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config("fixed");
  fc.engine.lanes = 1;
  fc.switch_buffer_bytes = 200'000;
  fc.pfc.enabled = pfc_on;
  fc.pfc.xoff_bytes = 40'000;
  fc.pfc.xon_bytes = 20'000;
  fc.seed = 3;
  return fc;
}

constexpr TimePs kLimit = 500 * 1000 * kPsPerUs;

TEST(Pfc, FixedWindowIncastDropsWithoutPfcAndNeverWithIt) {
  for (bool pfc_on : {false, true}) {
    auto fabric = build_star(incast_config(pfc_on), 17);
    ASSERT_TRUE(fabric.ok());
    auto r = run_flows(**fabric, incast_flows(16, 16, 1'000'000), kLimit);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->completed, 16u);
    if (!pfc_on) {
      EXPECT_GT(r->drops, 100u);
      EXPECT_EQ((*fabric)->total_pauses(), 0u);
      continue;
    }
    EXPECT_EQ(r->drops, 0u);
    EXPECT_EQ(r->retransmits, 0u);
    EXPECT_GT((*fabric)->total_pauses(), 16u);
    EXPECT_GT((*fabric)->total_paused_ps(), 16 * kPsPerUs);
    for (size_t i = 0; i < (*fabric)->ingress_count(); ++i) {
      const SwitchIngress& in = (*fabric)->ingress(i);
      EXPECT_LE(in.stats().max_bytes, 40'000u + in.headroom_bytes());
    }
  }
}

TEST(Pfc, IncastThroughATwoTierFabricIsLosslessAndPausesSpread) {
  auto model = topo::load_fabric("small-2tier");
  ASSERT_TRUE(model.ok());
  // 24 NICs on the three other ToRs' sides send to NIC 0 (ToR 0): ToR 0's downlink is the bottleneck,
  // its spine-facing ingresses pause the spines, whose ingresses then pause the other ToRs.
  std::vector<FlowSpec> flows;
  for (uint32_t n = 1; n < 32 && flows.size() < 24; ++n) {
    if (model->tor_of_nic(n) != model->tor_of_nic(0)) flows.push_back(FlowSpec{n, 0, 500'000});
  }
  auto fabric = build_clos(incast_config(true), *model, ClosOptions{});
  ASSERT_TRUE(fabric.ok());
  auto r = run_flows(**fabric, flows, kLimit);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->completed, flows.size());
  EXPECT_EQ(r->drops, 0u);
  // Some spine port (a queue feeding a ToR) was paused, not only NICs.
  Fabric& f = **fabric;
  TimePs spine_paused = 0;
  for (uint32_t s = 0; s < 4; ++s) {
    Switch& sw = f.switch_at(f.clos()->switch_of_node[model->tier2_node(0, s)]);
    for (uint32_t p = 0; p < sw.port_count(); ++p) spine_paused += sw.port(p).paused_ps();
  }
  EXPECT_GT(spine_paused, 0u);
}

}  // namespace
}  // namespace megascale::sim
