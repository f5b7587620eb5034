// The fabric model: the presets' counts derived from the published facts, the built graph's wiring, YAML
// errors that name file, line, key and value, and endpoint names.
#include "megascale/topology/fabric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "fabric_test_util.h"

namespace megascale::topo {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(FabricPreset, MegaScaleCountsFollowFromThePaperFacts) {
  Result<Fabric> f = load_fabric("megascale");
  ASSERT_TRUE(f) << f.error().message;
  // Facts (NSDI '24 §3.6): 64 x 400G switches, ToR downlinks split 2 x 200G, 8 x 200G NICs per server,
  // 1:1 at every tier, 12,288 GPUs.
  const uint32_t radix = 64;
  const double port_bps = 400e9;
  const uint32_t gpus = 12'288;
  const uint32_t nics_per_server = 8;
  const uint32_t tor_down_physical = radix / 2;            // 1:1 at the ToR
  const uint32_t servers_per_tor = tor_down_physical * 2;  // split into 2 x 200G
  const uint32_t servers = gpus / nics_per_server;
  const uint32_t tors = servers / servers_per_tor * nics_per_server;  // one ToR per rail per ToR set
  const uint32_t tors_per_pod = radix / 2;  // aggregation: 32 down ports, one per ToR of its pod
  const uint32_t aggs = tors;               // 1:1: as many aggregation uplinks as ToR uplinks
  const uint32_t pods = tors / tors_per_pod;

  FabricSummary s = summarize(*f);
  EXPECT_EQ(s.gpus, gpus);
  EXPECT_EQ(f->spec().servers, servers);
  ASSERT_EQ(s.tiers.size(), 3u);
  EXPECT_EQ(s.tiers[0].switches, tors);
  EXPECT_EQ(s.tiers[0].switches, 192u);
  EXPECT_EQ(s.tiers[1].switches, aggs);
  EXPECT_EQ(f->spec().pods, pods);
  EXPECT_EQ(pods, 6u);
  // Every aggregation uplink ends on a core port: cores = uplinks / core ports used.
  EXPECT_EQ(uint64_t{s.tiers[2].switches} * s.tiers[2].ports_used, uint64_t{aggs} * (radix / 2));
  EXPECT_LE(s.tiers[2].ports_used, radix);
  EXPECT_EQ(s.tiers[0].ports_used, radix);
  EXPECT_EQ(s.tiers[1].ports_used, radix);
  EXPECT_EQ(s.tiers[0].down_speed_bps, 200'000'000'000);
  EXPECT_DOUBLE_EQ(s.tiers[0].oversubscription, 1.0);
  EXPECT_DOUBLE_EQ(s.tiers[1].oversubscription, 1.0);
  // Full bisection: half of all host bandwidth.
  EXPECT_DOUBLE_EQ(s.bisection_bandwidth_bps, gpus * 200e9 / 2);
  EXPECT_DOUBLE_EQ(s.bisection_bandwidth_bps, 1228.8e12);
  EXPECT_EQ(s.links, uint64_t{gpus} + uint64_t{tors} * 32 + uint64_t{aggs} * 32);
  (void)port_bps;
}

TEST(FabricPreset, SmallTwoTierIsOversubscribedTwoToOne) {
  Result<Fabric> f = load_fabric("small-2tier");
  ASSERT_TRUE(f) << f.error().message;
  FabricSummary s = summarize(*f);
  EXPECT_EQ(s.gpus, 32u);
  ASSERT_EQ(s.tiers.size(), 2u);
  EXPECT_EQ(s.tiers[0].switches, 4u);
  EXPECT_EQ(s.tiers[1].switches, 4u);
  EXPECT_DOUBLE_EQ(s.tiers[0].oversubscription, 2.0);
  // The ToR uplinks are the narrow cut: 4 ToRs x 4 x 100G, halved.
  EXPECT_DOUBLE_EQ(s.bisection_bandwidth_bps, 4 * 4 * 100e9 / 2);
}

// Every node has the links the wiring promises, links join adjacent tiers, and port numbers on a switch
// are distinct and within its radix.
void check_wiring(const Fabric& f) {
  const FabricSpec& s = f.spec();
  std::vector<std::vector<uint32_t>> ports(f.nodes().size());
  for (LinkId id = 0; id < f.links().size(); ++id) {
    const Link& l = f.links()[id];
    EXPECT_EQ(static_cast<int>(f.nodes()[l.upper].tier), static_cast<int>(f.nodes()[l.lower].tier) + 1);
    if (!f.is_nic(l.lower)) ports[l.lower].push_back(l.lower_port);
    ports[l.upper].push_back(l.upper_port);
  }
  for (NodeId n = 0; n < f.nodes().size(); ++n) {
    const Node& node = f.nodes()[n];
    auto& p = ports[n];
    std::sort(p.begin(), p.end());
    EXPECT_EQ(std::adjacent_find(p.begin(), p.end()), p.end()) << f.node_name(n) << " reuses a port";
    uint32_t logical_radix = node.tier == Tier::tor
                                 ? s.switch_radix + s.tor_downlink_ports * (s.tor_downlink_split - 1)
                                 : s.switch_radix;
    if (!p.empty()) {
      EXPECT_LT(p.back(), logical_radix) << f.node_name(n);
    }
    switch (node.tier) {
      case Tier::nic:
        EXPECT_EQ(f.up_links(n).size(), 1u);
        break;
      case Tier::tor:
        EXPECT_EQ(f.up_links(n).size(), s.tor_uplink_ports);
        break;
      case Tier::aggregation:
        EXPECT_EQ(f.down_links(n).size(), f.shape().tier2_down_used);
        EXPECT_EQ(f.up_links(n).size(), s.tiers == 3 ? s.aggregation_uplink_ports : 0u);
        break;
      case Tier::core:
        EXPECT_EQ(f.down_links(n).size(), f.shape().core_down_used);
        break;
    }
  }
}

TEST(FabricBuild, WiringIsConsistentOnEveryPreset) {
  for (const std::string& name : fabric_preset_names()) {
    SCOPED_TRACE(name);
    Result<Fabric> f = load_fabric(name);
    ASSERT_TRUE(f) << f.error().message;
    check_wiring(*f);
  }
  Result<Fabric> small = Fabric::build(testing::small_three_tier(1));
  ASSERT_TRUE(small) << small.error().message;
  check_wiring(*small);
}

TEST(FabricBuild, RailOptimisedPutsNicKOnRailK) {
  Result<Fabric> f = load_fabric("megascale");
  ASSERT_TRUE(f);
  // Hosts 0..63 share ToR set 0: NIC k of each is on ToR k; host 64 starts ToR set 1.
  EXPECT_EQ(f->tor_of_nic(f->nic_node(0, 3)), 3u);
  EXPECT_EQ(f->tor_of_nic(f->nic_node(63, 3)), 3u);
  EXPECT_EQ(f->tor_of_nic(f->nic_node(64, 3)), 11u);
  EXPECT_EQ(f->links()[f->server_link(f->nic_node(63, 3))].upper_port, 63u);
}

struct BadYaml {
  const char* what;
  std::string text;
  std::string expect_line;  // ":N:"
  std::string expect_key;
  std::string expect_value;
};

const char* kGood2Tier = R"(name: t
tiers: 2
switch:
  radix: 16
  port_gbps: 100
servers:
  count: 16
  nics_per_server: 2
  nic_gbps: 100
tor:
  downlink_ports: 8
  downlink_split: 1
  uplink_ports: 4
spine:
  count: 4
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(FabricYaml, GoodTextParsesAndBuilds) {
  Result<FabricSpec> s = parse_fabric_yaml(kGood2Tier, "t.yaml");
  ASSERT_TRUE(s) << s.error().message;
  Result<Fabric> f = Fabric::build(*s);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->shape().tors, 4u);
}

TEST(FabricYaml, ErrorsNameFileLineKeyAndValue) {
  const std::vector<BadYaml> cases = {
      {"unknown key", replace(kGood2Tier, "  uplink_ports: 4", "  uplinks: 4"), ":13:", "tor.uplinks", ""},
      {"not a number", replace(kGood2Tier, "radix: 16", "radix: sixteen"), ":4:", "switch.radix",
       "'sixteen'"},
      {"zero", replace(kGood2Tier, "count: 4", "count: 0"), ":15:", "spine.count", "'0'"},
      {"bad speed", replace(kGood2Tier, "nic_gbps: 100", "nic_gbps: -5"), ":9:", "servers.nic_gbps", "'-5'"},
      {"bad bool", replace(kGood2Tier, "  nic_gbps: 100", "  nic_gbps: 100\n  rail_optimized: maybe"),
       ":10:", "servers.rail_optimized", "'maybe'"},
      {"tiers", replace(kGood2Tier, "tiers: 2", "tiers: 4"), ":2:", "tiers", "'4'"},
      {"section of the other tier count", replace(kGood2Tier, "spine:", "core:\n  planes: 1\nspine:"),
       ":14:", "core", ""},
      {"radix exceeded", replace(kGood2Tier, "uplink_ports: 4", "uplink_ports: 12"),
       ":13:", "tor.uplink_ports", "12"},
      {"spines do not divide uplinks", replace(kGood2Tier, "count: 4", "count: 3"), ":15:", "spine.count",
       "3"},
      {"servers do not fill ToR sets", replace(kGood2Tier, "count: 16", "count: 12"), ":7:", "servers.count",
       "12"},
      {"duplicate key", replace(kGood2Tier, "tiers: 2", "tiers: 2\ntiers: 3"), ":3:", "tiers", ""},
      {"syntax", replace(kGood2Tier, "  radix: 16", "  radix: [16"), ":", "YAML", ""},
  };
  for (const BadYaml& c : cases) {
    SCOPED_TRACE(c.what);
    Result<FabricSpec> s = parse_fabric_yaml(c.text, "bad.yaml");
    std::string message;
    if (!s) {
      message = s.error().message;
    } else {
      Result<Fabric> f = Fabric::build(*s);
      ASSERT_FALSE(f) << "accepted";
      message = f.error().message;
    }
    EXPECT_TRUE(contains(message, "bad.yaml" + c.expect_line)) << message;
    EXPECT_TRUE(contains(message, c.expect_key)) << message;
    EXPECT_TRUE(contains(message, c.expect_value)) << message;
  }
}

TEST(FabricYaml, ThreeTierRadixAndDivisibilityErrors) {
  FabricSpec s = testing::small_three_tier(2);
  s.aggregation_uplink_ports = 12;  // 8 down + 12 up > 16
  Result<Fabric> f = Fabric::build(s);
  ASSERT_FALSE(f);
  EXPECT_TRUE(contains(f.error().message, "aggregation.uplink_ports: 12")) << f.error().message;
  s = testing::small_three_tier(3);  // 2 aggregation switches per pod into 3 planes
  f = Fabric::build(s);
  ASSERT_FALSE(f);
  EXPECT_TRUE(contains(f.error().message, "core.planes: 3")) << f.error().message;
  s = testing::small_three_tier(2);
  s.core_per_plane = 3;  // 4 uplinks over 3 cores
  f = Fabric::build(s);
  ASSERT_FALSE(f);
  EXPECT_TRUE(contains(f.error().message, "core.per_plane: 3")) << f.error().message;
}

TEST(FabricLoad, UnknownNameListsPresets) {
  Result<Fabric> f = load_fabric("no-such-fabric");
  ASSERT_FALSE(f);
  EXPECT_TRUE(contains(f.error().message, "megascale")) << f.error().message;
  EXPECT_TRUE(contains(f.error().message, "small-2tier")) << f.error().message;
}

TEST(FabricLoad, LoadsAFileByPath) {
  Result<Fabric> f = load_fabric(MEGASCALE_SOURCE_DIR "/configs/fabrics/small-2tier.yaml");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->spec().name, "small-2tier");
}

TEST(Endpoint, ParsesAndNamesNics) {
  Result<Fabric> f = load_fabric("megascale");
  ASSERT_TRUE(f);
  Result<NodeId> n = parse_endpoint(*f, "h12:n3");
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(*n, 12u * 8 + 3);
  EXPECT_EQ(f->node_name(*n), "h12:n3");
  for (const char* bad : {"h12", "12:3", "h1536:n0", "h0:n8", "h-1:n0", "h0:nx", "hh:n1"}) {
    Result<NodeId> r = parse_endpoint(*f, bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_TRUE(contains(r.error().message, bad)) << r.error().message;
    }
  }
  EXPECT_EQ(nic_ipv4(*f, *n), (10u << 24) | (3u << 16) | 12u);
}

}  // namespace
}  // namespace megascale::topo
