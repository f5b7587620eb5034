// perf's lane source ports: --source-ports and --fabric/--from/--to/--hash checked as usage errors naming
// the flag, and resolved into one port per lane from the topology's port mapping for the real 5-tuple.
#include "megascale/perf/source_ports.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "megascale/topology/fabric.h"
#include "megascale/topology/ports.h"

namespace megascale::perf {
namespace {

PerfOptions client() {
  PerfOptions o;
  o.server = "10.0.3.2";
  o.lanes = 8;
  return o;
}

std::string error_of(const PerfOptions& o) {
  Status s = validate_perf_options(o);
  return s ? std::string("(accepted)") : s.error().message;
}

TEST(PerfSourcePorts, FlagCombinationsAreCheckedNamingTheFlag) {
  PerfOptions o = client();
  o.from = "h0:n0";
  EXPECT_NE(error_of(o).find("--from h0:n0: needs --fabric"), std::string::npos);
  o = client();
  o.hashes = {"crc16-bisync"};
  EXPECT_NE(error_of(o).find("--hash crc16-bisync: needs --fabric"), std::string::npos);
  o = client();
  o.fabric = "megascale";
  o.from = "h0:n0";
  EXPECT_NE(error_of(o).find("needs --from and --to"), std::string::npos);
  o.to = "h300:n0";
  EXPECT_EQ(error_of(o), "(accepted)");
  o.source_ports = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_NE(error_of(o).find("--fabric and --source-ports"), std::string::npos);
  o = client();
  o.source_ports = {50000, 50001};
  EXPECT_NE(error_of(o).find("--source-ports gives 2 ports for --lanes 8"), std::string::npos);
  o = client();
  o.server.clear();  // the server
  o.source_ports = {50000};
  o.lanes = 1;
  EXPECT_NE(error_of(o).find("--source-ports: the client's lanes"), std::string::npos);
}

TEST(PerfSourcePorts, FabricMappingUsesTheRealFiveTupleAndGivesOnePortPerLane) {
  PerfOptions o = client();
  o.fabric = "megascale";
  o.from = "h0:n0";
  o.to = "h300:n0";
  o.hashes = {"crc16-bisync:per-switch"};
  auto lp = resolve_lane_ports(o, "10.0.3.2", 18515, "10.0.0.7");
  ASSERT_TRUE(lp) << lp.error().message;
  ASSERT_EQ(lp->ports.size(), 8u);
  EXPECT_EQ(std::set<uint16_t>(lp->ports.begin(), lp->ports.end()).size(), 8u);
  EXPECT_EQ(lp->distinct_paths, 8u);
  EXPECT_NE(lp->describe.find("8 lanes on 8 distinct paths"), std::string::npos) << lp->describe;
  EXPECT_NE(lp->describe.find("10.0.0.7 -> 10.0.3.2:18515"), std::string::npos) << lp->describe;

  // The same ports as the topology library gives for that 5-tuple (what `megascale topo ports` uses).
  auto f = topo::load_fabric("megascale");
  ASSERT_TRUE(f);
  topo::PortMappingRequest req;
  req.src_nic = *topo::parse_endpoint(*f, "h0:n0");
  req.dst_nic = *topo::parse_endpoint(*f, "h300:n0");
  req.lanes = 8;
  req.ecmp = *topo::parse_ecmp_model(o.hashes);
  req.src_ip = 0x0A000007;
  req.dst_ip = 0x0A000302;
  req.dport = 18515;
  auto m = topo::map_source_ports(*f, req);
  ASSERT_TRUE(m);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(lp->ports[i], m->lanes[i].sport) << i;

  // Binding any address: the model's address stands in, and the banner text says so.
  auto any = resolve_lane_ports(o, "10.0.3.2", 18515, "0.0.0.0");
  ASSERT_TRUE(any);
  EXPECT_NE(any->describe.find("the model's address for h0:n0"), std::string::npos) << any->describe;
  // A different destination port is a different 5-tuple: the ports may change, the paths stay distinct.
  auto other = resolve_lane_ports(o, "10.0.3.2", 18600, "10.0.0.7");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->distinct_paths, 8u);
}

TEST(PerfSourcePorts, BadFabricInputIsAnErrorNamingTheFlag) {
  PerfOptions o = client();
  o.fabric = "no-such-fabric";
  o.from = "h0:n0";
  o.to = "h1:n0";
  auto r = resolve_lane_ports(o, "10.0.3.2", 18515, "0.0.0.0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind("--fabric no-such-fabric", 0), 0u) << r.error().message;
  o.fabric = "megascale";
  o.to = "h99999:n0";
  r = resolve_lane_ports(o, "10.0.3.2", 18515, "0.0.0.0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind("--to h99999:n0", 0), 0u) << r.error().message;
  o.to = "h1:n0";
  o.hashes = {"a", "b"};
  r = resolve_lane_ports(o, "10.0.3.2", 18515, "0.0.0.0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind("--hash", 0), 0u) << r.error().message;
}

TEST(PerfSourcePorts, ExplicitListIsTakenAsGiven) {
  PerfOptions o = client();
  o.lanes = 2;
  o.source_ports = {50010, 50020};
  auto r = resolve_lane_ports(o, "10.0.3.2", 18515, "0.0.0.0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ports, o.source_ports);
  EXPECT_NE(r->describe.find("50010,50020 (--source-ports)"), std::string::npos);
}

}  // namespace
}  // namespace megascale::perf
