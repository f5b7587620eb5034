// Source-port mapping on the MegaScale preset: N lanes get N distinct paths for every N up to the path
// count (given a hash that can reach them), lanes spread evenly over every hop, each lane's port really
// takes the path reported, polarised hashing is detected, and without a model ports are stepped evenly.
#include "megascale/topology/ports.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace megascale::topo {
namespace {

class MegaScalePorts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<Fabric> f = load_fabric("megascale");
    ASSERT_TRUE(f) << f.error().message;
    fabric_ = new Fabric(std::move(*f));
  }
  static void TearDownTestSuite() { delete fabric_; }

  // One hash function at every tier, each tier reading its own bits (offsets 0, 5, 10), per-switch seeds.
  static EcmpModel decorrelated() {
    EcmpModel m;
    for (uint32_t t = 0; t < 3; ++t) m.tier[t] = HashModel{HashFunction::crc16_bisync, 0x5EED, 5 * t, true};
    return m;
  }

  PortMapping map(NodeId a, NodeId b, uint32_t lanes, std::optional<EcmpModel> ecmp) {
    PortMappingRequest req;
    req.src_nic = a;
    req.dst_nic = b;
    req.lanes = lanes;
    req.ecmp = ecmp;
    Result<PortMapping> m = map_source_ports(*fabric_, req);
    EXPECT_TRUE(m) << m.error().message;
    return m ? *m : PortMapping{};
  }

  // Checks the mapping's own claims: ports in range and unique, each lane's port takes its path, the
  // reported distinct count is right.
  void check_consistent(NodeId a, NodeId b, const PortMapping& m, const EcmpModel& ecmp) {
    Result<PathSet> ps = shortest_paths(*fabric_, a, b);
    ASSERT_TRUE(ps);
    std::set<uint16_t> ports;
    std::set<uint64_t> paths;
    for (const LanePort& lane : m.lanes) {
      EXPECT_GE(lane.sport, 0xC000);
      ports.insert(lane.sport);
      ASSERT_TRUE(lane.path_index.has_value());
      FiveTuple t{nic_ipv4(*fabric_, a), nic_ipv4(*fabric_, b), lane.sport};
      EXPECT_EQ(ecmp_path(*ps, ecmp, t), *lane.path_index) << "sport " << lane.sport;
      paths.insert(*lane.path_index);
    }
    EXPECT_EQ(ports.size(), m.lanes.size());
    EXPECT_EQ(paths.size(), m.distinct_paths);
  }

  static Fabric* fabric_;
};

Fabric* MegaScalePorts::fabric_ = nullptr;

TEST_F(MegaScalePorts, SamePodGivesNDistinctPathsForEveryNUpToThePathCount) {
  NodeId a = fabric_->nic_node(0, 0);
  NodeId b = fabric_->nic_node(64, 0);
  for (uint32_t n = 1; n <= 32; ++n) {
    PortMapping m = map(a, b, n, decorrelated());
    EXPECT_EQ(m.path_count, 32u);
    EXPECT_EQ(m.distinct_paths, n) << "n=" << n;
    EXPECT_EQ(m.max_lanes_per_link, 1u);
    if (n == 32) check_consistent(a, b, m, decorrelated());
  }
}

TEST_F(MegaScalePorts, CrossPodGivesNDistinctPathsUpToAllOf8192) {
  NodeId a = fabric_->nic_node(0, 0);
  NodeId b = fabric_->nic_node(300, 0);
  for (uint32_t n : {1u, 2u, 31u, 64u, 128u, 1000u, 8192u}) {
    PortMapping m = map(a, b, n, decorrelated());
    EXPECT_EQ(m.path_count, 8192u);
    EXPECT_EQ(m.distinct_paths, n) << "n=" << n;
    // Level at the busiest hop: ToR uplinks carry ceil(n / 32) lanes each.
    EXPECT_EQ(m.max_lanes_per_link, (n + 31) / 32) << "n=" << n;
    if (n == 64 || n == 8192) check_consistent(a, b, m, decorrelated());
  }
}

TEST_F(MegaScalePorts, SixtyFourLanesSpreadTwoPerToRUplink) {
  NodeId a = fabric_->nic_node(5, 2);
  NodeId b = fabric_->nic_node(1000, 2);
  PortMapping m = map(a, b, 64, decorrelated());
  Result<PathSet> ps = shortest_paths(*fabric_, a, b);
  ASSERT_TRUE(ps);
  std::map<LinkId, int> per_uplink;
  std::map<LinkId, int> per_agg_uplink;
  for (const LanePort& lane : m.lanes) {
    Path p = ps->at(*lane.path_index);
    ++per_uplink[p.links[1]];
    ++per_agg_uplink[p.links[2]];
  }
  EXPECT_EQ(per_uplink.size(), 32u);
  for (const auto& [link, lanes] : per_uplink) EXPECT_EQ(lanes, 2) << "link " << link;
  EXPECT_EQ(per_agg_uplink.size(), 64u);
  // A good hash is found early: far fewer ports hashed than the 16,384 in the range.
  EXPECT_LT(m.ports_hashed, 16384u);
}

TEST_F(MegaScalePorts, PolarisedHashReachesOnlyTheFirstHopsChoices) {
  // The same hash, seed and bits at every tier: the aggregation switch's choice repeats the ToR's, so a
  // cross-pod flow's whole path is fixed by its first hop: only 32 of 8192 paths are reachable.
  EcmpModel polarised = EcmpModel::uniform(HashModel{HashFunction::crc16_bisync, 0, 0, false});
  PortMapping m = map(fabric_->nic_node(0, 0), fabric_->nic_node(300, 0), 64, polarised);
  EXPECT_EQ(m.reachable_paths, 32u);
  EXPECT_EQ(m.distinct_paths, 32u);
  EXPECT_EQ(m.max_lanes_per_link, 2u);  // still level: 2 lanes on each path
  check_consistent(fabric_->nic_node(0, 0), fabric_->nic_node(300, 0), m, polarised);
}

TEST_F(MegaScalePorts, PerSwitchSeedsDoNotBreakPolarisation) {
  // Per-switch seeds only XOR a per-switch constant into the hash (ecmp_test:
  // ASeedXorsOneConstantIntoEveryKeysHash), so with the same bits at every tier the later hops still follow
  // the first: the whole 16,384-port range reaches 32 of 8192 paths. Reading each tier's own bits
  // (offsets 0, 5, 10) gives every lane a path of its own.
  NodeId a = fabric_->nic_node(0, 0);
  NodeId b = fabric_->nic_node(300, 0);
  EcmpModel per_switch = EcmpModel::uniform(HashModel{HashFunction::crc16_bisync, 0, 0, true});
  PortMapping m = map(a, b, 64, per_switch);
  EXPECT_EQ(m.ports_hashed, 16384u);
  EXPECT_EQ(m.reachable_paths, 32u);
  EXPECT_EQ(m.distinct_paths, 32u);
  check_consistent(a, b, m, per_switch);
  EcmpModel split = per_switch;
  split.tier[1].offset_bits = 5;
  split.tier[2].offset_bits = 10;
  PortMapping better = map(a, b, 64, split);
  EXPECT_EQ(better.distinct_paths, 64u);
  check_consistent(a, b, better, split);
}

TEST_F(MegaScalePorts, WithoutAModelPortsAreSteppedEvenly) {
  PortMapping m = map(fabric_->nic_node(0, 0), fabric_->nic_node(300, 0), 64, std::nullopt);
  ASSERT_EQ(m.lanes.size(), 64u);
  for (size_t k = 0; k < m.lanes.size(); ++k) {
    EXPECT_FALSE(m.lanes[k].path_index.has_value());
    EXPECT_EQ(m.lanes[k].sport, 0xC000 + k * 256);  // 16,384 ports / 64 lanes
  }
  EXPECT_EQ(m.path_count, 8192u);
}

TEST_F(MegaScalePorts, MoreLanesThanPathsShareEvenly) {
  // Same pod: 32 paths; 70 lanes -> every path carries 2 or 3.
  PortMapping m = map(fabric_->nic_node(0, 0), fabric_->nic_node(64, 0), 70, decorrelated());
  EXPECT_EQ(m.distinct_paths, 32u);
  EXPECT_EQ(m.max_lanes_per_link, 3u);
  // Once every path has a lane there is no new path to look for: reuse starts without hashing the range.
  EXPECT_LT(m.ports_hashed, 16384u);
}

TEST_F(MegaScalePorts, RejectsBadRequests) {
  PortMappingRequest req;
  req.src_nic = fabric_->nic_node(0, 0);
  req.dst_nic = fabric_->nic_node(1, 0);
  req.lanes = 0;
  EXPECT_FALSE(map_source_ports(*fabric_, req));
  req.lanes = 10;
  req.sport_min = 100;
  req.sport_max = 104;
  EXPECT_FALSE(map_source_ports(*fabric_, req));
  req.sport_max = 50;
  EXPECT_FALSE(map_source_ports(*fabric_, req));
  req.sport_min = 0xC000;
  req.sport_max = 0xFFFF;
  req.dst_nic = req.src_nic;
  EXPECT_FALSE(map_source_ports(*fabric_, req));
}

}  // namespace
}  // namespace megascale::topo
