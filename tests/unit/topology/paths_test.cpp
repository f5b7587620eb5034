// Path enumeration: counts for pairs in the same ToR, the same pod and different pods, checked against an
// independent breadth-first count over the built links; every decoded path is a real, distinct,
// valley-free walk from NIC to NIC.
#include "megascale/topology/paths.h"

#include <gtest/gtest.h>

#include <set>

#include "fabric_test_util.h"

namespace megascale::topo {
namespace {

// The path is a walk a -> ... -> b over real links: up through the switches, then down.
void check_walk(const Fabric& f, const PathSet& ps, const Path& p) {
  ASSERT_EQ(p.links.size(), ps.length());
  ASSERT_EQ(p.switches.size(), ps.length() - 1);
  NodeId at = ps.src();
  for (size_t i = 0; i < p.links.size(); ++i) {
    const Link& l = f.links()[p.links[i]];
    NodeId next = l.lower == at ? l.upper : l.lower;
    ASSERT_TRUE(l.lower == at || l.upper == at)
        << "link " << p.links[i] << " does not touch " << f.node_name(at);
    bool up = i < p.links.size() / 2;
    EXPECT_EQ(next, up ? l.upper : l.lower) << "hop " << i << " goes the wrong way";
    if (i + 1 < p.links.size()) {
      EXPECT_EQ(next, p.switches[i]);
    }
    at = next;
  }
  EXPECT_EQ(at, ps.dst());
}

void check_pair(const Fabric& f, NodeId a, NodeId b, PairScope scope) {
  SCOPED_TRACE(f.node_name(a) + " -> " + f.node_name(b));
  Result<PathSet> ps = shortest_paths(f, a, b);
  ASSERT_TRUE(ps) << ps.error().message;
  EXPECT_EQ(ps->scope(), scope);
  int bfs_hops = 0;
  EXPECT_EQ(ps->count(), testing::bfs_shortest_path_count(f, a, b, &bfs_hops));
  EXPECT_EQ(static_cast<size_t>(bfs_hops), ps->length());
  std::set<std::vector<LinkId>> distinct;
  std::set<std::vector<NodeId>> switch_paths;
  std::vector<std::set<NodeId>> per_position(ps->length() - 1);
  for (const Path& p : ps->enumerate(ps->count())) {
    check_walk(f, *ps, p);
    distinct.insert(p.links);
    switch_paths.insert(p.switches);
    for (size_t i = 0; i < p.switches.size(); ++i) per_position[i].insert(p.switches[i]);
  }
  EXPECT_EQ(distinct.size(), ps->count());
  EXPECT_EQ(switch_paths.size(), ps->switch_path_count());
  std::vector<uint64_t> expected = ps->switches_per_position();
  ASSERT_EQ(expected.size(), per_position.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(per_position[i].size(), expected[i]) << "position " << i;
}

TEST(Paths, SmallTwoTierMatchesBreadthFirstCount) {
  Result<Fabric> f = load_fabric("small-2tier");
  ASSERT_TRUE(f);
  check_pair(*f, f->nic_node(0, 0), f->nic_node(7, 0), PairScope::same_tor);  // ToR set 0, rail 0
  check_pair(*f, f->nic_node(0, 0), f->nic_node(8, 0), PairScope::same_pod);  // rail 0, other ToR set
  check_pair(*f, f->nic_node(0, 0), f->nic_node(0, 1), PairScope::same_pod);  // cross-rail, same server
  Result<PathSet> ps = shortest_paths(*f, f->nic_node(0, 0), f->nic_node(8, 0));
  ASSERT_TRUE(ps);
  EXPECT_EQ(ps->count(), 4u);  // one per spine
}

TEST(Paths, ThreeTierWithParallelLinksMatchesBreadthFirstCount) {
  for (uint32_t planes : {1u, 2u}) {
    SCOPED_TRACE(planes);
    Result<Fabric> f = Fabric::build(testing::small_three_tier(planes));
    ASSERT_TRUE(f) << f.error().message;
    check_pair(*f, f->nic_node(0, 1), f->nic_node(3, 1), PairScope::same_tor);
    check_pair(*f, f->nic_node(0, 1), f->nic_node(4, 1), PairScope::same_pod);
    check_pair(*f, f->nic_node(0, 0), f->nic_node(15, 1), PairScope::cross_pod);
  }
}

TEST(Paths, MegaScaleCountsPerScope) {
  Result<Fabric> f = load_fabric("megascale");
  ASSERT_TRUE(f);
  // Same ToR: hosts 0 and 63 on rail 0. One path through the ToR.
  Result<PathSet> same_tor = shortest_paths(*f, f->nic_node(0, 0), f->nic_node(63, 0));
  ASSERT_TRUE(same_tor);
  EXPECT_EQ(same_tor->scope(), PairScope::same_tor);
  EXPECT_EQ(same_tor->count(), 1u);
  // Same pod (hosts 0..255), other ToR set: one path per aggregation switch of the pod.
  Result<PathSet> same_pod = shortest_paths(*f, f->nic_node(0, 0), f->nic_node(64, 0));
  ASSERT_TRUE(same_pod);
  EXPECT_EQ(same_pod->scope(), PairScope::same_pod);
  EXPECT_EQ(same_pod->count(), 32u);
  // Different pods: 32 aggregation x 32 uplinks (4 cores x 8 links) x 8 links down to the plane's
  // aggregation switch in the other pod x 1 link to the ToR.
  Result<PathSet> cross = shortest_paths(*f, f->nic_node(0, 0), f->nic_node(300, 0));
  ASSERT_TRUE(cross);
  EXPECT_EQ(cross->scope(), PairScope::cross_pod);
  EXPECT_EQ(cross->count(), 32u * 32 * 8);
  EXPECT_EQ(cross->switch_path_count(), 32u * 4);
  EXPECT_EQ(cross->switches_per_position(), (std::vector<uint64_t>{1, 32, 128, 32, 1}));
  // The analytic count agrees with a breadth-first count over the 24,576 links.
  EXPECT_EQ(cross->count(), testing::bfs_shortest_path_count(*f, f->nic_node(0, 0), f->nic_node(300, 0)));
  EXPECT_EQ(same_pod->count(), testing::bfs_shortest_path_count(*f, f->nic_node(0, 0), f->nic_node(64, 0)));
  // Decoding a path far down the list is as cheap as the first; spot-check a few walks.
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, cross->count() - 1})
    check_walk(*f, *cross, cross->at(i));
  // enumerate() stops at its limit.
  EXPECT_EQ(cross->enumerate(10).size(), 10u);
}

TEST(Paths, FirstPathsSpreadOverSwitchesBeforeParallelLinks) {
  Result<Fabric> f = Fabric::build(testing::small_three_tier(1));
  ASSERT_TRUE(f);
  Result<PathSet> ps = shortest_paths(*f, f->nic_node(0, 0), f->nic_node(15, 1));
  ASSERT_TRUE(ps);
  // 2 aggregation switches with 2 parallel links each: paths 0 and 1 use different switches.
  EXPECT_NE(ps->at(0).switches[1], ps->at(1).switches[1]);
  EXPECT_EQ(ps->at(0).switches[1], ps->at(2).switches[1]);
  EXPECT_NE(ps->at(0).links[1], ps->at(2).links[1]);
}

TEST(Paths, RejectsSameNicAndNonNics) {
  Result<Fabric> f = load_fabric("small-2tier");
  ASSERT_TRUE(f);
  EXPECT_FALSE(shortest_paths(*f, 0, 0));
  EXPECT_FALSE(shortest_paths(*f, 0, f->tor_node(0)));
}

}  // namespace
}  // namespace megascale::topo
