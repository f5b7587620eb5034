// Fabrics built from topology/'s model: a permutation on small-2tier completes and spreads over the
// spines, cross-pod flows on a 3-tier fabric cross core switches, a flow's route is the one
// topo::ecmp_path gives for the same tuple and hash model (hop by hop, parallel links included), and
// spraying spreads one flow over several spines.
#include "megascale/sim/clos.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "megascale/congestion/config.h"
#include "megascale/sim/workload.h"
#include "megascale/topology/paths.h"

namespace megascale::sim {
namespace {

constexpr TimePs kLimit = 200 * 1000 * kPsPerUs;

// 16 single-NIC servers, 4 ToRs in 2 pods of 2 aggregation switches, 2 parallel links from each ToR
// to each of its aggregation switches; `planes` core planes of 2 cores, 2 parallel links from each
// aggregation switch to each core of its plane. planes = 1: both aggregation switches of a pod are in
// the plane, so a core going down chooses among them too.
topo::Fabric three_tier(uint32_t planes) {
  const std::string yaml =
      "name: tiny-3tier\ntiers: 3\nswitch: {radix: 8, port_gbps: 100}\n"
      "servers: {count: 16, nics_per_server: 1, nic_gbps: 100, rail_optimized: false}\n"
      "tor: {downlink_ports: 4, downlink_split: 1, uplink_ports: 4}\n"
      "aggregation: {pods: 2, per_pod: 2, uplink_ports: 4}\n"
      "core: {planes: " +
      std::to_string(planes) + ", per_plane: 2}\n";
  auto spec = topo::parse_fabric_yaml(yaml, "tiny-3tier.yaml");
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message);
  auto f = topo::Fabric::build(*spec);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  return std::move(*f);
}

FabricConfig config(const std::string& preset, uint32_t lanes) {
  FabricConfig fc;
  fc.engine.cc = *cc::builtin_cc_config(preset);
  fc.engine.lanes = lanes;
  fc.switch_buffer_bytes = 1'000'000;
  fc.red = RedConfig{.enabled = true, .kmin_bytes = 100'000, .kmax_bytes = 400'000, .pmax = 0.2};
  fc.seed = 11;
  return fc;
}

// Frames a switch sent down toward `node` (its ports whose link's lower end is `node`).
uint64_t frames_toward(Fabric& f, uint32_t sw, topo::NodeId node) {
  uint64_t n = 0;
  const ClosInfo& info = *f.clos();
  for (uint32_t p = 0; p < f.switch_at(sw).port_count(); ++p) {
    if (info.model.links()[info.link_of_port[sw][p]].lower == node) n += f.switch_at(sw).port(p).stats().sent;
  }
  return n;
}

// Data frames a switch sent (all ports).
uint64_t frames_sent(Switch& sw) {
  uint64_t n = 0;
  for (uint32_t p = 0; p < sw.port_count(); ++p) n += sw.port(p).stats().sent;
  return n;
}

TEST(Clos, PermutationOnSmall2TierCompletesOverEverySpine) {
  auto model = topo::load_fabric("small-2tier");
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto fabric = build_clos(config("swift", 4), *model, ClosOptions{});
  ASSERT_TRUE(fabric.ok()) << fabric.error().message;
  Fabric& f = **fabric;
  ASSERT_EQ(f.host_count(), 32u);
  ASSERT_EQ(f.switch_count(), 8u);  // 4 ToRs + 4 spines
  Rng rng(5);
  auto r = run_flows(f, permutation_flows(32, 1'000'000, rng), kLimit);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->completed, 32u);
  EXPECT_EQ(r->drops, 0u);
  const topo::Fabric& m = f.clos()->model;
  int spines_used = 0;
  for (uint32_t s = 0; s < 4; ++s) {
    const uint32_t sw = f.clos()->switch_of_node[m.tier2_node(0, s)];
    spines_used += frames_sent(f.switch_at(sw)) > 1000;
  }
  EXPECT_EQ(spines_used, 4);
}

TEST(Clos, CrossPodFlowsCrossTheCore) {
  const topo::Fabric model = three_tier(2);
  auto fabric = build_clos(config("swift", 2), model, ClosOptions{});
  ASSERT_TRUE(fabric.ok()) << fabric.error().message;
  Fabric& f = **fabric;
  ASSERT_EQ(f.host_count(), 16u);
  // Hosts 0..7 are in pod 0, 8..15 in pod 1: every flow i -> i + 8 (and back) is cross-pod.
  std::vector<FlowSpec> flows;
  for (uint32_t i = 0; i < 8; ++i) {
    flows.push_back(FlowSpec{i, i + 8, 500'000});
    flows.push_back(FlowSpec{i + 8, i, 500'000});
  }
  auto r = run_flows(f, flows, kLimit);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->completed, 16u);
  uint64_t core_frames = 0;
  int cores_used = 0;
  for (size_t s = 0; s < f.switch_count(); ++s) {
    if (model.nodes()[f.clos()->node_of_switch[s]].tier != topo::Tier::core) continue;
    const uint64_t n = frames_sent(f.switch_at(s));
    core_frames += n;
    cores_used += n > 100;
  }
  // 16 x 500 KB in ~4.2 KB frames all cross a core: at least 16 x 119 data frames.
  EXPECT_GE(core_frames, 16u * 119);
  EXPECT_GE(cores_used, 3);
  // A same-ToR flow never leaves its ToR.
  EXPECT_EQ(
      traced_route(f, FiveTuple{.src_addr = 0, .dst_addr = 1, .src_port = 50'000, .dst_port = kSimUdpPort})
          .size(),
      2u);
}

// The simulator's forwarding decisions, walked switch by switch, give topo::ecmp_path's path.
void expect_routes_match_ecmp_path(const topo::Fabric& model, const topo::EcmpModel& ecmp) {
  FabricConfig fc = config("swift", 1);
  auto fabric = build_clos(fc, model, ClosOptions{.ecmp = ecmp});
  ASSERT_TRUE(fabric.ok()) << fabric.error().message;
  Fabric& f = **fabric;
  Rng rng(17);
  const auto n = static_cast<uint32_t>(f.host_count());
  std::set<uint64_t> distinct;
  int cross = 0;
  for (int i = 0; i < 400; ++i) {
    const auto src = static_cast<uint32_t>(rng.below(n));
    auto dst = static_cast<uint32_t>(rng.below(n - 1));
    if (dst >= src) ++dst;
    const FiveTuple flow{.src_addr = src,
                         .dst_addr = dst,
                         .src_port = static_cast<uint16_t>(0xC000 + rng.below(0x4000)),
                         .dst_port = kSimUdpPort};
    auto paths = topo::shortest_paths(model, src, dst);
    ASSERT_TRUE(paths.ok());
    const uint64_t index = topo::ecmp_path(*paths, ecmp, f.clos()->tuple_of(flow));
    const topo::Path expected = paths->at(index);
    EXPECT_EQ(traced_route(f, flow), expected.links) << src << " -> " << dst << " sport " << flow.src_port;
    distinct.insert(index * 100'000 + src * 1000 + dst);
    cross += paths->scope() == topo::PairScope::cross_pod;
  }
  EXPECT_GT(distinct.size(), 300u);
  if (model.spec().tiers == 3) {
    EXPECT_GT(cross, 100);
  }
}

TEST(Clos, RoutesEqualTopologyEcmpPath) {
  expect_routes_match_ecmp_path(*topo::load_fabric("small-2tier"), default_clos_ecmp());
  expect_routes_match_ecmp_path(three_tier(2), default_clos_ecmp());
  expect_routes_match_ecmp_path(three_tier(1), default_clos_ecmp());
  // Another model (XOR16 at the ToRs, CRC32 high bits above) still matches.
  topo::EcmpModel other = default_clos_ecmp();
  other.tier[0] = *topo::parse_hash_model("xor16:seed=0x55");
  other.tier[1] = *topo::parse_hash_model("crc32-hi:per-switch");
  expect_routes_match_ecmp_path(three_tier(1), other);
}

TEST(Clos, SprayingSpreadsOneFlowOverTheSpines) {
  auto model = topo::load_fabric("small-2tier");
  ASSERT_TRUE(model.ok());
  for (bool spray : {false, true}) {
    auto fabric = build_clos(config("swift", 1), *model, ClosOptions{.ecmp = std::nullopt, .spray = spray});
    ASSERT_TRUE(fabric.ok());
    Fabric& f = **fabric;
    // h0:n0 (NIC 0, ToR 0) -> h8:n0 (NIC 16, ToR 2): one lane, one flow across the spines.
    auto r = run_flows(f, {FlowSpec{0, 16, 2'000'000}}, kLimit);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->completed, 1u);
    // Count the spines that carried data down to the destination's ToR (ACKs go the other way).
    const topo::NodeId dst_tor = model->tor_node(model->tor_of_nic(16));
    int spines_used = 0;
    for (uint32_t s = 0; s < 4; ++s) {
      spines_used += frames_toward(f, f.clos()->switch_of_node[model->tier2_node(0, s)], dst_tor) > 50;
    }
    EXPECT_EQ(spines_used, spray ? 4 : 1) << "spray " << spray;
  }
}

}  // namespace
}  // namespace megascale::sim
