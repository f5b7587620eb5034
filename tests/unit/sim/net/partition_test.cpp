// Partitioned runs (partition.h): the partition map keeps NICs with their ToR, the mailboxes hand
// frames and PFC messages over in (arrival time, sending partition, send order) order, a partitioned
// run is the same run every time for a given partition count (a small 3-tier permutation, and an incast
// whose PFC PAUSEs cross partitions), and workloads a partitioned run cannot model are refused by name.
#include "megascale/sim/partition.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "megascale/congestion/config.h"
#include "megascale/sim/clos.h"
#include "megascale/sim/fabric.h"
#include "megascale/sim/scenario.h"
#include "megascale/sim/workload.h"

namespace megascale::sim {
namespace {

constexpr TimePs kLimit = 200 * 1000 * kPsPerUs;

// 16 single-NIC servers, 4 ToRs in 2 pods of 2 aggregation switches, 2 core planes of 2 cores.
topo::Fabric three_tier() {
  const std::string yaml =
      "name: tiny-3tier\ntiers: 3\nswitch: {radix: 8, port_gbps: 100}\n"
      "servers: {count: 16, nics_per_server: 1, nic_gbps: 100, rail_optimized: false}\n"
      "tor: {downlink_ports: 4, downlink_split: 1, uplink_ports: 4}\n"
      "aggregation: {pods: 2, per_pod: 2, uplink_ports: 4}\n"
      "core: {planes: 2, per_plane: 2}\n";
  auto spec = topo::parse_fabric_yaml(yaml, "tiny-3tier.yaml");
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message);
  auto f = topo::Fabric::build(*spec);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  return std::move(*f);
}

// partitions 1 with canonical: the order every partition count gives, on one thread.
FabricConfig config(uint32_t partitions, bool canonical = false) {
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config("swift");
  fc.engine.lanes = 2;
  fc.switch_buffer_bytes = 1'000'000;
  // Marks low enough that RED draws from the partitions' PRNGs during the run.
  fc.red = RedConfig{.enabled = true, .kmin_bytes = 10'000, .kmax_bytes = 60'000, .pmax = 0.5};
  fc.seed = 11;
  fc.partitions = partitions;
  fc.canonical_order = canonical;
  return fc;
}

TEST(Partition, ClosMapKeepsNicsWithTheirTorAndPodsTogether) {
  const topo::Fabric model = three_tier();
  const PartitionMap two = clos_partition_map(model, 2);
  const PartitionMap four = clos_partition_map(model, 4);
  ASSERT_EQ(two.host_partition.size(), model.shape().nics);
  ASSERT_EQ(two.switch_partition.size(), model.nodes().size() - model.shape().nics);
  for (topo::NodeId nic = 0; nic < model.shape().nics; ++nic) {
    const uint32_t tor = model.tor_of_nic(nic);
    EXPECT_EQ(two.host_partition[nic], two.switch_partition[tor]) << nic;
    EXPECT_EQ(four.host_partition[nic], four.switch_partition[tor]) << nic;
    EXPECT_EQ(two.host_partition[nic], model.pod_of_tor(tor)) << nic;  // 2 partitions: one pod each
  }
  for (size_t s = 0; s < two.switch_partition.size(); ++s) {
    const topo::Node& node = model.nodes()[model.shape().nics + s];
    if (node.tier == topo::Tier::aggregation) {
      EXPECT_EQ(two.switch_partition[s], node.pod);
    }
    EXPECT_LT(four.switch_partition[s], 4u);
  }
  // Four partitions: one ToR each, so every partition holds NICs.
  std::vector<uint32_t> nics(4, 0);
  for (uint32_t p : four.host_partition) ++nics[p];
  for (uint32_t n : nics) EXPECT_EQ(n, 4u);
}

// Records what a link delivers, with the time it arrived.
struct Recorder : PacketSink {
  explicit Recorder(Simulation& s, PacketPool& p) : sim(s), pool(p) {}
  void receive(Packet* pkt) override {
    got.emplace_back(sim.now(), pkt->payload_len);
    pool.release(pkt);
  }
  Simulation& sim;
  PacketPool& pool;
  std::vector<std::pair<TimePs, uint32_t>> got;
};

// Partitions 0 and 1 each feed a link into partition 2 and send at the same virtual times; the
// threads' wall-clock order of sending (partition 1 first or partition 0 first) must not matter.
std::vector<std::pair<TimePs, uint32_t>> handover(bool partition1_first) {
  Simulation s0(1), s1(2), s2(3);
  PacketPool p0, p1, p2;
  PartitionLinks cross(3);
  Recorder rec(s2, p2);
  Link from1(s2, kPsPerUs, &rec, &p2);
  Link from0(s2, kPsPerUs, &rec, &p2);
  PacketSink& in1 = cross.add_link(s1, p1, 1, 2, from1);  // registered first: index order must not matter
  PacketSink& in0 = cross.add_link(s0, p0, 0, 2, from0);
  EXPECT_EQ(cross.lookahead_ps(), kPsPerUs);
  auto send = [](Simulation& s, PacketPool& p, PacketSink& to, TimePs at, uint32_t tag) {
    s.run_before(at);
    EXPECT_EQ(s.now(), at);
    Packet* pkt = p.alloc();
    pkt->payload_len = tag;
    to.receive(pkt);
  };
  auto send1 = [&] {
    send(s1, p1, in1, 100, 11);
    send(s1, p1, in1, 300, 12);
  };
  auto send0 = [&] {
    send(s0, p0, in0, 100, 1);
    send(s0, p0, in0, 200, 2);
    send(s0, p0, in0, 300, 3);
  };
  if (partition1_first) {
    send1();
    send0();
  } else {
    send0();
    send1();
  }
  EXPECT_EQ(p0.in_use(), 0u);  // the senders' packets went back to their own pools
  EXPECT_EQ(p1.in_use(), 0u);
  EXPECT_EQ(cross.mail().frames(0, 2).size(), 3u);
  EXPECT_EQ(cross.mail().frames(1, 2).size(), 2u);
  s2.run_before(kPsPerUs);  // the window [0, 1 us): nothing can have arrived yet
  EXPECT_TRUE(rec.got.empty());
  cross.drain(2, p2);
  EXPECT_TRUE(cross.mail().frames(0, 2).empty());
  EXPECT_EQ(cross.frames_handed_over(), 5u);
  s2.run();
  EXPECT_EQ(p2.in_use(), 0u);
  return rec.got;
}

TEST(Partition, InboxesDeliverAtArrivalTimeInAnOrderIndependentOfTheThreads) {
  const auto a = handover(true);
  const auto b = handover(false);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 5u);
  // Each frame arrives one link delay after it was sent, each link's frames in the order sent.
  std::vector<uint32_t> from0, from1;
  for (const auto& [t, tag] : a) {
    const TimePs sent = tag == 1 || tag == 11 ? 100 : (tag == 2 ? 200 : 300);
    EXPECT_EQ(t, kPsPerUs + sent) << tag;
    (tag < 10 ? from0 : from1).push_back(tag);
  }
  EXPECT_EQ(from0, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(from1, (std::vector<uint32_t>{11, 12}));
  // A same-time tie between first arrivals goes to the lower sending partition (the drain order).
  EXPECT_EQ(a[0].second, 1u);
  EXPECT_EQ(a[1].second, 11u);
}

TEST(Partition, PauseCrossesToTheUpstreamPortAtItsArrivalTime) {
  Simulation s0(1), s1(2);
  PacketPool p0;
  PartitionLinks cross(2);
  OutputQueue port(s0, p0, QueueConfig{});
  PauseSink& to_port = cross.add_pause(s1, 1, 0, s0, port);
  to_port.send_pause(5 * kPsPerUs, true);
  to_port.send_pause(7 * kPsPerUs, false);
  cross.drain(0, p0);
  s0.run_before(5 * kPsPerUs);
  EXPECT_FALSE(port.paused());
  s0.run_before(5 * kPsPerUs + 1);
  EXPECT_TRUE(port.paused());
  s0.run();
  EXPECT_FALSE(port.paused());
  EXPECT_EQ(port.stats().pauses, 1u);
  EXPECT_EQ(port.paused_ps(), 2 * kPsPerUs);
}

struct Outcome {
  std::vector<TimePs> fct_ps;
  uint64_t completed = 0, events = 0, marks = 0, handed = 0;
  bool operator==(const Outcome&) const = default;
};

Outcome permutation(uint32_t partitions, bool canonical = false) {
  const topo::Fabric model = three_tier();
  auto fabric = build_clos(config(partitions, canonical), model, ClosOptions{});
  EXPECT_TRUE(fabric.ok());
  Rng rng(5);
  auto r = run_flows(**fabric, permutation_flows(16, 300'000, rng), kLimit);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  Outcome o;
  for (const FlowResult& f : r->flows) o.fct_ps.push_back(f.fct_ps);
  o.completed = r->completed;
  o.events = r->events;
  o.marks = r->ecn_marks;
  if ((*fabric)->partition_links() != nullptr) o.handed = (*fabric)->partition_links()->frames_handed_over();
  return o;
}

TEST(Partition, ThreeTierPermutationIsTheSameRunForEveryPartitionCount) {
  const Outcome one = permutation(1, /*canonical=*/true);
  EXPECT_EQ(one.completed, 16u);
  EXPECT_GT(one.marks, 0u);  // RED drew from the ports' PRNG streams
  EXPECT_EQ(one.handed, 0u);
  for (uint32_t parts : {2u, 3u, 4u}) {
    Outcome a = permutation(parts);
    EXPECT_GT(a.handed, 0u) << parts;  // frames crossed partitions
    a.handed = 0;
    EXPECT_EQ(a, one) << parts << " partitions";
  }
  // And again: the threads' timing does not enter.
  Outcome again = permutation(3);
  again.handed = 0;
  EXPECT_EQ(again, one);
  // The one-simulation order of before is another (valid) run of the same flows.
  EXPECT_EQ(permutation(1).completed, 16u);
}

TEST(Partition, IncastWithPfcAcrossPartitionsPausesNeverDropsAndMatchesOnePartition) {
  // A star with its switch in partition 0 and hosts in blocks: every NIC's PAUSE crosses partitions.
  std::vector<uint64_t> pauses;
  std::vector<std::vector<TimePs>> fcts;
  for (uint32_t parts : {1u, 3u, 3u}) {
    FabricConfig fc;
    fc.engine.cc = *cc::builtin_cc_config("fixed");
    fc.engine.lanes = 1;
    fc.switch_buffer_bytes = 200'000;
    fc.pfc = PfcConfig{.enabled = true, .xoff_bytes = 40'000, .xon_bytes = 20'000};
    fc.seed = 3;
    fc.partitions = parts;
    fc.canonical_order = true;
    auto fabric = build_star(fc, 9);
    ASSERT_TRUE(fabric.ok());
    auto r = run_flows(**fabric, incast_flows(8, 8, 500'000), kLimit);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->completed, 8u);
    EXPECT_EQ(r->drops, 0u);
    EXPECT_GT(r->pfc_pauses, 8u);
    pauses.push_back(r->pfc_pauses);
    fcts.emplace_back();
    for (const FlowResult& f : r->flows) fcts.back().push_back(f.fct_ps);
  }
  EXPECT_EQ(pauses[1], pauses[0]);
  EXPECT_EQ(pauses[2], pauses[0]);
  EXPECT_EQ(fcts[1], fcts[0]);
  EXPECT_EQ(fcts[2], fcts[0]);
}

// Poisson-style flows: timed starts, several flows per pair over two connections per pair (round robin).
std::vector<TimePs> timed_flows(uint32_t partitions, RunResult* out) {
  const topo::Fabric model = three_tier();
  auto fabric = build_clos(config(partitions, /*canonical=*/true), model, ClosOptions{});
  EXPECT_TRUE(fabric.ok());
  const std::vector<FlowSpec> flows = {FlowSpec{0, 9, 200'000, 0},
                                       FlowSpec{0, 9, 100'000, 5 * kPsPerUs},
                                       FlowSpec{9, 0, 150'000, 3 * kPsPerUs},
                                       FlowSpec{0, 9, 50'000, 10 * kPsPerUs},
                                       FlowSpec{3, 12, 80'000, 7 * kPsPerUs},
                                       FlowSpec{9, 0, 60'000, 8 * kPsPerUs}};
  auto r = run_flows(**fabric, flows, kLimit,
                     RunOptions{.connections_per_pair = 2, .series_interval_ps = 5 * kPsPerUs});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  std::vector<TimePs> fct;
  for (const FlowResult& f : r->flows) {
    fct.push_back(f.fct_ps);
    EXPECT_TRUE(f.completed);
    EXPECT_EQ(f.started_ps, f.spec.start_ps);
  }
  *out = std::move(*r);
  return fct;
}

TEST(Partition, TimedFlowsOnSeveralConnectionsPerPair) {
  RunResult a, b;
  const std::vector<TimePs> first = timed_flows(3, &a);
  EXPECT_EQ(timed_flows(1, &b), first);  // the canonical order on one partition: the same run
  EXPECT_EQ(a.completed, 6u);
  EXPECT_EQ(a.connections, 5u);  // (0,9): 2, (9,0): 2, (3,12): 1
  EXPECT_EQ(a.events, b.events);
  // The series, sampled at the barriers: every 5 us, and every payload byte placed counted once.
  ASSERT_GT(a.series.points.size(), 2u);
  ASSERT_EQ(a.series.points.size(), b.series.points.size());
  uint64_t delivered = 0;
  for (size_t k = 0; k < a.series.points.size(); ++k) {
    EXPECT_EQ(a.series.points[k].delivered_bytes, b.series.points[k].delivered_bytes) << k;
    if (k + 1 < a.series.points.size()) {
      EXPECT_EQ(a.series.points[k].t_ps, (k + 1) * 5 * kPsPerUs) << k;
    }
    delivered += a.series.points[k].delivered_bytes;
  }
  EXPECT_EQ(delivered, 200'000u + 100'000 + 150'000 + 50'000 + 80'000 + 60'000);
}

TEST(Partition, RefusesWhatItCannotModelByName) {
  const topo::Fabric model = three_tier();
  auto fabric = build_clos(config(2), model, ClosOptions{});
  ASSERT_TRUE(fabric.ok());
  std::vector<FlowSpec> chained = {FlowSpec{0, 9, 1000}, FlowSpec{9, 3, 1000, 0, {0}}};
  auto r = run_flows(**fabric, chained, kLimit);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("flow 1 waits for flow 0"), std::string::npos) << r.error().message;

  FabricConfig zero = config(2);
  zero.link_delay_ps = 0;
  auto instant = build_star(zero, 4);
  ASSERT_TRUE(instant.ok());
  auto r3 = run_flows(**instant, incast_flows(2, 3, 1000), kLimit);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("no lookahead"), std::string::npos) << r3.error().message;

  auto s = parse_sim_scenario(
      "fabric: star:4\nworkload: {kind: incast, senders: 2, receiver: 3, bytes: 1000}\nthreads: 2\n"
      "link_events:\n  - {at_us: 1, link: \"h0:n0\", state: down}\n",
      "flap.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("star"), std::string::npos) << s.error().message;
  auto zero_threads = parse_sim_scenario(
      "fabric: star:4\nworkload: {kind: incast, senders: 2, receiver: 3, bytes: 1000}\nthreads: 0\n",
      "t.yaml");
  ASSERT_FALSE(zero_threads.ok());
  EXPECT_NE(zero_threads.error().message.find("t.yaml:3: threads: 0: must be in [1, 1024]"),
            std::string::npos)
      << zero_threads.error().message;
  auto four = parse_sim_scenario(
      "fabric: star:4\nworkload: {kind: incast, senders: 2, receiver: 3, bytes: 1000}\nthreads: 4\n",
      "t.yaml");
  ASSERT_TRUE(four.ok()) << four.error().message;
  EXPECT_EQ(four->threads, 4u);

  auto s2 = parse_sim_scenario(
      "fabric: small-2tier\nworkload: {kind: permutation, bytes: 1000}\nthreads: 2\n"
      "link_events:\n  - {at_us: 1, link: \"h0:n0\", state: down}\n",
      "flap.yaml");
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.error().message.find("flap.yaml:3: threads: 2: link_events need threads: 1"),
            std::string::npos)
      << s2.error().message;
}

}  // namespace
}  // namespace megascale::sim
