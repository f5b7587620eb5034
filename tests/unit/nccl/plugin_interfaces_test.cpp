// Interface selection for the plugin's devices (collectives/nccl/src/interfaces.h): the
// NCCL_SOCKET_IFNAME-style syntax of MEGASCALE_IFNAME (prefixes, `^` exclude, `=` exact), the default
// (everything but loopback and docker/virbr bridges, loopback when nothing else), and discovery.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "interfaces.h"

namespace megascale::nccl {
namespace {

InterfaceInfo iface(const std::string& name, bool loopback = false) {
  InterfaceInfo i;
  i.name = name;
  i.family = AF_INET;
  i.address = loopback ? "127.0.0.1" : "10.0.0.1";
  i.loopback = loopback;
  return i;
}

std::vector<std::string> names(const Result<std::vector<InterfaceInfo>>& r) {
  std::vector<std::string> out;
  if (r) {
    for (const InterfaceInfo& i : *r) out.push_back(i.name);
  }
  return out;
}

TEST(IfnameSpec, ParsesPrefixesExcludeAndExact) {
  auto plain = parse_ifname_spec("eth,ib");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->exclude);
  EXPECT_FALSE(plain->exact);
  EXPECT_EQ(plain->names, (std::vector<std::string>{"eth", "ib"}));

  auto excl = parse_ifname_spec("^docker,lo");
  ASSERT_TRUE(excl);
  EXPECT_TRUE(excl->exclude);
  EXPECT_EQ(excl->names, (std::vector<std::string>{"docker", "lo"}));

  auto exact = parse_ifname_spec("^=eth0");
  ASSERT_TRUE(exact);
  EXPECT_TRUE(exact->exclude);
  EXPECT_TRUE(exact->exact);
  EXPECT_EQ(exact->names, (std::vector<std::string>{"eth0"}));

  auto none = parse_ifname_spec("");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->names.empty());

  EXPECT_FALSE(parse_ifname_spec("eth0,,eth1"));
  EXPECT_FALSE(parse_ifname_spec("eth0,"));
  EXPECT_FALSE(parse_ifname_spec("^"));
  EXPECT_FALSE(parse_ifname_spec("="));
}

TEST(IfnameSpec, PrefixesMatchLongerNamesExactDoesNot) {
  auto prefix = parse_ifname_spec("eth0");
  auto exact = parse_ifname_spec("=eth0");
  ASSERT_TRUE(prefix && exact);
  EXPECT_TRUE(ifname_listed(*prefix, "eth0"));
  EXPECT_TRUE(ifname_listed(*prefix, "eth01"));
  EXPECT_FALSE(ifname_listed(*prefix, "eth1"));
  EXPECT_TRUE(ifname_listed(*exact, "eth0"));
  EXPECT_FALSE(ifname_listed(*exact, "eth01"));
}

TEST(SelectInterfaces, DefaultSkipsLoopbackAndBridgesUnlessNothingElse) {
  const std::vector<InterfaceInfo> all = {iface("lo", true), iface("eth0"), iface("docker0"), iface("virbr0"),
                                          iface("ib0")};
  EXPECT_EQ(names(select_interfaces(all, "")), (std::vector<std::string>{"eth0", "ib0"}));
  const std::vector<InterfaceInfo> only_lo = {iface("lo", true), iface("docker0")};
  EXPECT_EQ(names(select_interfaces(only_lo, "")), (std::vector<std::string>{"lo"}));
}

TEST(SelectInterfaces, ListsSelectAndKeepOrder) {
  const std::vector<InterfaceInfo> all = {iface("lo", true), iface("eth0"), iface("eth1"), iface("docker0")};
  EXPECT_EQ(names(select_interfaces(all, "lo")), (std::vector<std::string>{"lo"}));
  EXPECT_EQ(names(select_interfaces(all, "eth")), (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(names(select_interfaces(all, "=eth1,lo")), (std::vector<std::string>{"lo", "eth1"}));
  EXPECT_EQ(names(select_interfaces(all, "^eth")), (std::vector<std::string>{"lo", "docker0"}));
  EXPECT_EQ(names(select_interfaces(all, "^=eth0")), (std::vector<std::string>{"lo", "eth1", "docker0"}));
}

TEST(SelectInterfaces, NothingSelectedIsAnErrorListingWhatThereIs) {
  const std::vector<InterfaceInfo> all = {iface("lo", true), iface("eth0")};
  auto r = select_interfaces(all, "ib");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("MEGASCALE_IFNAME=ib"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("lo, eth0"), std::string::npos) << r.error().message;
  auto bad = select_interfaces(all, "eth0,,x");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("MEGASCALE_IFNAME=eth0,,x"), std::string::npos);
  EXPECT_FALSE(select_interfaces({}, ""));
}

TEST(DiscoverInterfaces, FindsLoopbackWithItsAddress) {
  auto all = discover_interfaces();
  ASSERT_TRUE(all) << all.error().message;
  bool found_lo = false;
  for (const InterfaceInfo& i : *all) {
    EXPECT_FALSE(i.name.empty());
    EXPECT_FALSE(i.address.empty()) << i.name;
    EXPECT_GT(i.mtu_bytes, 0) << i.name;
    if (i.name == "lo") {
      found_lo = true;
      EXPECT_TRUE(i.loopback);
      EXPECT_EQ(i.address, "127.0.0.1");
      EXPECT_TRUE(i.pci_path.empty());  // not a PCI device: NCCL gets pciPath = NULL
    }
  }
  if (!found_lo) GTEST_SKIP() << "no loopback interface up here";
}

}  // namespace
}  // namespace megascale::nccl
