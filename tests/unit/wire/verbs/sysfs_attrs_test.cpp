// The attributes `megascale topo` lists (node GUID, PCI function, driver, parent, phys_state, rate,
// netdev) over the fixtures (fixtures/README.md), and list_devices reading on past broken entries.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../../../support/source_path.h"
#include "megascale/wire/verbs/gid.h"

namespace megascale::wire::verbs {
namespace {

const std::string kFixtures = megascale::test::source_path("tests/unit/wire/verbs/fixtures");

std::vector<DeviceListing> list(const std::string& which) {
  Result<std::vector<DeviceListing>> devs = list_devices(kFixtures + "/" + which);
  EXPECT_TRUE(devs.ok()) << devs.error().message;
  return devs.ok() ? *devs : std::vector<DeviceListing>{};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(VerbsAttributes, StateNameDropsTheNumber) {
  EXPECT_EQ(state_name("4: ACTIVE"), "ACTIVE");
  EXPECT_EQ(state_name("3: Disabled"), "Disabled");
  EXPECT_EQ(state_name("ACTIVE"), "ACTIVE");
  EXPECT_EQ(state_name(""), "");
}

TEST(VerbsAttributes, RxeIsASoftwareDeviceOnItsParentNetdev) {
  std::vector<DeviceListing> devs = list("rxe");
  ASSERT_EQ(devs.size(), 1u);
  const DeviceListing& d = devs[0];
  EXPECT_EQ(d.info.name, "rxe0");
  ASSERT_EQ(d.info.ports.size(), 1u);
  EXPECT_EQ(d.info.ports[0].gids.size(), 2u);
  EXPECT_EQ(d.node_guid, "5054:00ff:fe12:3456");
  EXPECT_EQ(d.parent, "eth0");
  EXPECT_EQ(d.pci_path, "");
  EXPECT_EQ(d.driver, "");
  EXPECT_TRUE(d.problems.empty());
  ASSERT_EQ(d.ports.size(), 1u);
  EXPECT_EQ(d.ports[0].phys_state, "5: LinkUp");
  EXPECT_EQ(d.ports[0].rate, "10 Gb/sec (1X QDR)");
  EXPECT_EQ(d.ports[0].netdev, "eth0");
}

TEST(VerbsAttributes, ConnectXFunctionsDriversAndNetdevs) {
  std::vector<DeviceListing> devs = list("connectx");
  ASSERT_EQ(devs.size(), 3u);
  EXPECT_EQ(devs[0].node_guid, "0ac0:eb03:0011:2233");
  EXPECT_TRUE(ends_with(devs[0].pci_path, "/connectx-pci/pci0000:3a/0000:3a:00.0/0000:3b:00.0"))
      << devs[0].pci_path;
  EXPECT_TRUE(ends_with(devs[1].pci_path, "/0000:3b:00.1")) << devs[1].pci_path;
  EXPECT_TRUE(ends_with(devs[2].pci_path, "/pci0000:5d/0000:5d:00.0/0000:5e:00.0")) << devs[2].pci_path;
  for (const DeviceListing& d : devs) {
    EXPECT_EQ(d.driver, "mlx5_core") << d.info.name;
    EXPECT_EQ(d.parent, "") << d.info.name;
    EXPECT_TRUE(d.problems.empty()) << d.info.name;
    ASSERT_EQ(d.ports.size(), 1u) << d.info.name;
    ASSERT_EQ(d.info.ports.size(), 1u) << d.info.name;
    EXPECT_TRUE(d.ports[0].problems.empty()) << d.info.name;
  }
  // From the GIDs' netdev; the DOWN port's phys_state; the IB port's from the function's only netdev.
  EXPECT_EQ(devs[0].ports[0].netdev, "ens1f0");
  EXPECT_EQ(devs[0].ports[0].phys_state, "5: LinkUp");
  EXPECT_EQ(devs[1].ports[0].netdev, "ens1f1");
  EXPECT_EQ(devs[1].ports[0].phys_state, "3: Disabled");
  EXPECT_EQ(devs[2].ports[0].netdev, "ib0");
  EXPECT_EQ(devs[2].ports[0].rate, "200 Gb/sec (4X HDR)");
}

class VerbsListing : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("verbs_sysfs_attrs_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text << "\n";
  }
  std::vector<DeviceListing> listed() {
    Result<std::vector<DeviceListing>> devs = list_devices(root_.string());
    EXPECT_TRUE(devs.ok()) << devs.error().message;
    return devs.ok() ? *devs : std::vector<DeviceListing>{};
  }
  std::string strict_error() {
    Result<std::vector<DeviceInfo>> devs = discover_devices(root_.string());
    return devs.ok() ? "" : devs.error().message;
  }
  std::filesystem::path root_;
};

TEST_F(VerbsListing, MalformedGidIsLeftOutWithTheReasonAndTheRestListed) {
  write("dev0/ports/1/state", "4: ACTIVE");
  write("dev0/ports/1/gids/0", "fe80::1");
  write("dev0/ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:0a00:0001");
  write("dev0/ports/1/gid_attrs/types/1", "RoCE v2");
  std::vector<DeviceListing> devs = listed();
  ASSERT_EQ(devs.size(), 1u);
  ASSERT_EQ(devs[0].info.ports.size(), 1u);
  const PortInfo& p = devs[0].info.ports[0];
  ASSERT_EQ(p.gids.size(), 1u);
  EXPECT_EQ(p.gids[0].index, 1u);
  const std::vector<std::string>& problems = devs[0].ports[0].problems;
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(ends_with(problems[0], "dev0/ports/1/gids/0: \"fe80::1\" is not a GID (entry left out)"))
      << problems[0];
  // Without keep_going the same tree is an error, as before.
  EXPECT_NE(strict_error().find("is not a GID"), std::string::npos);
}

TEST_F(VerbsListing, PortWithoutStateAndBadMtuAreKeptWithProblems) {
  write("dev0/ports/1/link_layer", "Ethernet");
  write("dev0/ports/2/state", "4: ACTIVE");
  write("dev0/ports/2/active_mtu", "1500");
  write("dev0/ports/2/link_layer", "Ethernet");
  std::vector<DeviceListing> devs = listed();
  ASSERT_EQ(devs.size(), 1u);
  ASSERT_EQ(devs[0].info.ports.size(), 2u);
  ASSERT_EQ(devs[0].ports.size(), 2u);
  const PortInfo& p1 = devs[0].info.ports[0];
  EXPECT_FALSE(p1.active);
  EXPECT_EQ(p1.state, "");
  ASSERT_EQ(devs[0].ports[0].problems.size(), 1u);
  EXPECT_NE(devs[0].ports[0].problems[0].find(
                "dev0/ports/1/state: cannot read the port's state (listed as not active)"),
            std::string::npos);
  const PortInfo& p2 = devs[0].info.ports[1];
  EXPECT_TRUE(p2.active);
  EXPECT_EQ(p2.active_mtu_bytes, 0u);
  ASSERT_EQ(devs[0].ports[1].problems.size(), 1u);
  EXPECT_NE(
      devs[0].ports[1].problems[0].find("\"1500\" is not an IB MTU (256..4096) (MTU listed as unknown)"),
      std::string::npos);
  // The port choice passes over the port without a state.
  Result<const PortInfo*> port = select_port(devs[0].info, 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  EXPECT_EQ((*port)->port, 2u);
}

TEST_F(VerbsListing, DeviceWithoutPortsIsListedWithTheReason) {
  write("aaa/node_guid", "0000:0000:0000:0001");
  write("dev0/ports/1/state", "4: ACTIVE");
  std::vector<DeviceListing> devs = listed();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].info.name, "aaa");
  EXPECT_TRUE(devs[0].info.ports.empty());
  EXPECT_EQ(devs[0].node_guid, "0000:0000:0000:0001");
  ASSERT_EQ(devs[0].problems.size(), 1u);
  EXPECT_NE(
      devs[0].problems[0].find("aaa/ports: no ports folder (not an RDMA device?) (listed without ports)"),
      std::string::npos);
  EXPECT_EQ(devs[1].info.name, "dev0");
  EXPECT_TRUE(devs[1].problems.empty());
}

TEST_F(VerbsListing, RootThatIsAFileIsAnError) {
  std::filesystem::create_directories(root_);
  write("file", "x");
  Result<std::vector<DeviceListing>> devs = list_devices((root_ / "file").string());
  ASSERT_FALSE(devs.ok());
  EXPECT_NE(devs.error().message.find("/file: "), std::string::npos) << devs.error().message;
}

}  // namespace
}  // namespace megascale::wire::verbs
