// Device, port and GID discovery over sysfs-like fixtures (fixtures/README.md), and GID selection by
// the MEGASCALE_IB_* variables.
#include "megascale/wire/verbs/gid.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "../../../support/source_path.h"

namespace megascale::wire::verbs {
namespace {

const std::string kFixtures = megascale::test::source_path("tests/unit/wire/verbs/fixtures");

std::vector<DeviceInfo> discover(const std::string& which) {
  Result<std::vector<DeviceInfo>> devs = discover_devices(kFixtures + "/" + which);
  EXPECT_TRUE(devs.ok()) << devs.error().message;
  return devs.ok() ? *devs : std::vector<DeviceInfo>{};
}

GidSelector env(std::map<std::string, std::string> vars) {
  Result<GidSelector> sel = gid_selector_from_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  EXPECT_TRUE(sel.ok()) << sel.error().message;
  return sel.ok() ? *sel : GidSelector{};
}

std::string env_error(std::map<std::string, std::string> vars) {
  Result<GidSelector> sel = gid_selector_from_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  return sel.ok() ? "" : sel.error().message;
}

// ---- discovery ----

TEST(VerbsDiscovery, RxeTreeHasOnePortAndTwoRoceV2Gids) {
  std::vector<DeviceInfo> devs = discover("rxe");
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].name, "rxe0");
  ASSERT_EQ(devs[0].ports.size(), 1u);
  const PortInfo& p = devs[0].ports[0];
  EXPECT_EQ(p.port, 1u);
  EXPECT_TRUE(p.active);
  EXPECT_EQ(p.link_layer, "Ethernet");
  EXPECT_EQ(p.active_mtu_bytes, 1024u);
  EXPECT_DOUBLE_EQ(p.rate_gbps, 10.0);
  // Indexes 2-7 are empty and left out.
  ASSERT_EQ(p.gids.size(), 2u);
  EXPECT_EQ(p.gids[0].index, 0u);
  EXPECT_EQ(gid_to_string(p.gids[0].gid), "fe80::5054:ff:fe12:3456");
  EXPECT_EQ(p.gids[0].type, GidType::kRoceV2);
  EXPECT_EQ(p.gids[0].ndev, "eth0");
  EXPECT_TRUE(gid_is_link_local(p.gids[0].gid));
  EXPECT_FALSE(gid_is_ipv4(p.gids[0].gid));
  EXPECT_EQ(gid_to_string(p.gids[1].gid), "::ffff:10.0.2.15");
  EXPECT_TRUE(gid_is_ipv4(p.gids[1].gid));
}

TEST(VerbsDiscovery, ConnectXTreeReadsEveryDeviceSortedWithTypes) {
  std::vector<DeviceInfo> devs = discover("connectx");
  ASSERT_EQ(devs.size(), 3u);
  EXPECT_EQ(devs[0].name, "mlx5_0");
  EXPECT_EQ(devs[1].name, "mlx5_1");
  EXPECT_EQ(devs[2].name, "mlx5_2");
  const PortInfo& p = devs[0].ports[0];
  EXPECT_EQ(p.active_mtu_bytes, 0u);  // not in the tree: the device is asked
  EXPECT_DOUBLE_EQ(p.rate_gbps, 100.0);
  ASSERT_EQ(p.gids.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(p.gids[i].type, i % 2 == 0 ? GidType::kRoceV1 : GidType::kRoceV2) << i;
  }
  EXPECT_FALSE(devs[1].ports[0].active);
  EXPECT_EQ(devs[1].ports[0].state, "1: DOWN");
}

TEST(VerbsDiscovery, AbsentRootIsAHostWithoutDevices) {
  Result<std::vector<DeviceInfo>> devs = discover_devices(kFixtures + "/no-such-folder");
  ASSERT_TRUE(devs.ok());
  EXPECT_TRUE(devs->empty());
}

class VerbsDiscoveryBroken : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("verbs_gid_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "dev0" / "ports" / "1" / "gids");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text << "\n";
  }
  std::string error() {
    Result<std::vector<DeviceInfo>> devs = discover_devices(root_.string());
    return devs.ok() ? "" : devs.error().message;
  }
  std::filesystem::path root_;
};

TEST_F(VerbsDiscoveryBroken, PortWithoutStateNamesThePath) {
  EXPECT_NE(error().find("dev0/ports/1/state: cannot read"), std::string::npos) << error();
}

TEST_F(VerbsDiscoveryBroken, MalformedGidNamesFileAndText) {
  write("dev0/ports/1/state", "4: ACTIVE");
  write("dev0/ports/1/gids/0", "fe80::1");
  EXPECT_NE(error().find("dev0/ports/1/gids/0: \"fe80::1\" is not a GID"), std::string::npos) << error();
}

TEST_F(VerbsDiscoveryBroken, MtuThatIsNoIbMtuIsRefused) {
  write("dev0/ports/1/state", "4: ACTIVE");
  write("dev0/ports/1/active_mtu", "1500");
  EXPECT_NE(error().find("\"1500\" is not an IB MTU"), std::string::npos) << error();
}

TEST_F(VerbsDiscoveryBroken, DeviceWithoutPortsFolder) {
  std::filesystem::create_directories(root_ / "dev1");
  write("dev0/ports/1/state", "4: ACTIVE");
  EXPECT_NE(error().find("dev1/ports: no ports folder"), std::string::npos) << error();
}

// ---- port selection ----

TEST(VerbsPort, FirstActiveEthernetPortByDefault) {
  std::vector<DeviceInfo> devs = discover("rxe");
  Result<const PortInfo*> p = select_port(devs[0], 0);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ((*p)->port, 1u);
}

TEST(VerbsPort, DownPortAndInfiniBandPortAreRefusedWithReasons) {
  std::vector<DeviceInfo> devs = discover("connectx");
  Result<const PortInfo*> down = select_port(devs[1], 0);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.error().message, "mlx5_1: no ACTIVE Ethernet (RoCE) port; port 1: state \"1: DOWN\"");
  Result<const PortInfo*> down1 = select_port(devs[1], 1);
  ASSERT_FALSE(down1.ok());
  EXPECT_EQ(down1.error().message, "mlx5_1 port 1: state \"1: DOWN\", not ACTIVE (is the link up?)");
  Result<const PortInfo*> ib = select_port(devs[2], 1);
  ASSERT_FALSE(ib.ok());
  EXPECT_EQ(ib.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(ib.error().message.find("mlx5_2 port 1: link layer \"InfiniBand\""), std::string::npos);
  Result<const PortInfo*> none = select_port(devs[0], 2);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "mlx5_0 has no port 2");
}

// ---- GID selection ----

TEST(VerbsGid, RxeDefaultIsTheIpv4RoceV2Entry) {
  std::vector<DeviceInfo> devs = discover("rxe");
  Result<GidEntry> g = select_gid(devs[0], devs[0].ports[0], env({}));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->index, 1u);
}

TEST(VerbsGid, RxeAfInet6TakesTheLinkLocalEntryWhenItIsTheOnlyOne) {
  std::vector<DeviceInfo> devs = discover("rxe");
  Result<GidEntry> g = select_gid(devs[0], devs[0].ports[0], env({{"MEGASCALE_IB_ADDR_FAMILY", "AF_INET6"}}));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->index, 0u);
}

TEST(VerbsGid, ConnectXPrefersRoceV2AndTheLowestIndex) {
  std::vector<DeviceInfo> devs = discover("connectx");
  const PortInfo& port = devs[0].ports[0];
  // AF_INET: 192.168.1.10 (v1 at 2, v2 at 3) and 10.1.0.5 (v1 at 6, v2 at 7): v2 first, then index.
  EXPECT_EQ(select_gid(devs[0], port, env({}))->index, 3u);
  // AF_INET6: the global fd00::10 (v2 at 5) before the link-local fe80:: (v2 at 1).
  EXPECT_EQ(select_gid(devs[0], port, env({{"MEGASCALE_IB_ADDR_FAMILY", "AF_INET6"}}))->index, 5u);
  // RoCE v1 asked for: the v1 twins.
  EXPECT_EQ(select_gid(devs[0], port, env({{"MEGASCALE_IB_ROCE_VERSION_NUM", "1"}}))->index, 2u);
}

TEST(VerbsGid, AddrRangePicksTheSubnet) {
  std::vector<DeviceInfo> devs = discover("connectx");
  const PortInfo& port = devs[0].ports[0];
  EXPECT_EQ(select_gid(devs[0], port, env({{"MEGASCALE_IB_ADDR_RANGE", "10.0.0.0/8"}}))->index, 7u);
  EXPECT_EQ(select_gid(devs[0], port, env({{"MEGASCALE_IB_ADDR_RANGE", "192.168.1.10/32"}}))->index, 3u);
  EXPECT_EQ(select_gid(devs[0], port, env({{"MEGASCALE_IB_ADDR_RANGE", "0.0.0.0/0"}}))->index, 3u);
  EXPECT_EQ(
      select_gid(devs[0], port,
                 env({{"MEGASCALE_IB_ADDR_FAMILY", "AF_INET6"}, {"MEGASCALE_IB_ADDR_RANGE", "fe80::/10"}}))
          ->index,
      1u);
}

TEST(VerbsGid, NoMatchNamesDevicePortAndEveryEntryPassedOver) {
  std::vector<DeviceInfo> devs = discover("rxe");
  Result<GidEntry> g =
      select_gid(devs[0], devs[0].ports[0], env({{"MEGASCALE_IB_ADDR_RANGE", "192.168.0.0/16"}}));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().message,
            "rxe0 port 1: no usable GID for AF_INET; 0 fe80::5054:ff:fe12:3456: IPv6, not AF_INET; "
            "1 ::ffff:10.0.2.15: outside MEGASCALE_IB_ADDR_RANGE");
}

TEST(VerbsGid, EmptyTableSaysSo) {
  PortInfo port;
  port.port = 1;
  port.active = true;
  port.link_layer = "Ethernet";
  DeviceInfo dev{.name = "rxe1", .ports = {port}};
  Result<GidEntry> g = select_gid(dev, dev.ports[0], GidSelector{});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("rxe1 port 1: no usable GID for AF_INET; the GID table is empty"),
            std::string::npos)
      << g.error().message;
}

TEST(VerbsGid, ExplicitIndexWinsOverFamilyAndMustNotBeEmpty) {
  std::vector<DeviceInfo> devs = discover("rxe");
  Result<GidEntry> g = select_gid(devs[0], devs[0].ports[0], env({{"MEGASCALE_IB_GID_INDEX", "0"}}));
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->index, 0u);
  EXPECT_EQ(select_gid(devs[0], devs[0].ports[0], env({{"MEGASCALE_IB_GID_INDEX", "-1"}}))->index, 1u);
  Result<GidEntry> empty = select_gid(devs[0], devs[0].ports[0], env({{"MEGASCALE_IB_GID_INDEX", "3"}}));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message,
            "rxe0 port 1: MEGASCALE_IB_GID_INDEX=3 names an empty GID entry (non-empty: 0, 1)");
}

TEST(VerbsGid, BadVariablesNameVariableAndValue) {
  EXPECT_EQ(env_error({{"MEGASCALE_IB_GID_INDEX", "x3"}}),
            "MEGASCALE_IB_GID_INDEX=x3: expected a GID index 0..65535, or -1 for auto");
  EXPECT_EQ(env_error({{"MEGASCALE_IB_ADDR_FAMILY", "inet"}}),
            "MEGASCALE_IB_ADDR_FAMILY=inet: expected AF_INET or AF_INET6");
  EXPECT_EQ(env_error({{"MEGASCALE_IB_ROCE_VERSION_NUM", "3"}}),
            "MEGASCALE_IB_ROCE_VERSION_NUM=3: expected 1 or 2");
  EXPECT_EQ(env_error({{"MEGASCALE_IB_ADDR_RANGE", "10.0.0.0"}}),
            "MEGASCALE_IB_ADDR_RANGE=10.0.0.0: expected address/prefix, e.g. 10.0.0.0/8");
  EXPECT_EQ(env_error({{"MEGASCALE_IB_ADDR_RANGE", "10.0.0.0/33"}}),
            "MEGASCALE_IB_ADDR_RANGE=10.0.0.0/33: an IPv4 prefix length is 0..32");
  EXPECT_EQ(env_error({{"MEGASCALE_IB_ADDR_RANGE", "fd00::/8"}}),
            "MEGASCALE_IB_ADDR_RANGE=fd00::/8: an IPv6 range needs MEGASCALE_IB_ADDR_FAMILY=AF_INET6");
  EXPECT_EQ(env_error({{"MEGASCALE_IB_ADDR_RANGE", "host/8"}}),
            "MEGASCALE_IB_ADDR_RANGE=host/8: \"host\" is not an IP address");
}

}  // namespace
}  // namespace megascale::wire::verbs
