// The verbs wire's common entry points on any host: the mode names, the "[GID]/QPN" address text
// (round trips, and every malformed form refused naming the text), and open_port's refusals that come
// before any device is opened (no device, no device of that name, no ACTIVE RoCE port, no GID matching
// the selector, RC not built), read from sysfs-like fixtures.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../../../support/source_path.h"
#include "megascale/wire/verbs/port.h"

namespace megascale::wire::verbs {
namespace {

const std::string kFixtures = megascale::test::source_path("tests/unit/wire/verbs/fixtures");

TEST(VerbsPort, ModeNames) {
  EXPECT_EQ(to_string(PortMode::kUd), "verbs-ud");
  EXPECT_EQ(to_string(PortMode::kRc), "verbs-rc");
}

TEST(VerbsPort, AddressFormatsAndParsesBack) {
  PortAddress a;
  a.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 2, 15};
  a.qpn = 0x11;
  const std::string text = format_port_address(a);
  EXPECT_EQ(text, "[::ffff:10.0.2.15]/0x000011");
  Result<PortAddress> back = parse_port_address(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->gid, a.gid);
  EXPECT_EQ(back->qpn, 0x11u);

  PortAddress v6;
  v6.gid = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xFF, 0xFE, 0x12, 0x34, 0x56};
  v6.qpn = 0xFFFFFF;
  Result<PortAddress> back6 = parse_port_address(format_port_address(v6));
  ASSERT_TRUE(back6.ok()) << back6.error().message;
  EXPECT_EQ(back6->gid, v6.gid);
  EXPECT_EQ(back6->qpn, 0xFFFFFFu);
  EXPECT_EQ(format_port_address(v6), "[fe80::5054:ff:fe12:3456]/0xffffff");
}

TEST(VerbsPort, AddressWithoutPrefixOrUpperCaseHex) {
  Result<PortAddress> a = parse_port_address("[::ffff:10.0.0.2]/1aB");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->qpn, 0x1ABu);
  Result<PortAddress> b = parse_port_address("[::ffff:10.0.0.2]/0X000012");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->qpn, 0x12u);
}

TEST(VerbsPort, BadAddressesAreRefusedNamingTheText) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"", "does not start with '['"},
      {"10.0.0.2:4791", "does not start with '['"},
      {"[::ffff:10.0.0.2/0x11", "no ']'"},
      {"[]/0x11", "is not a GID"},
      {"[10.0.0.2]/0x11", "is not a GID"},
      {"[::ffff:10.0.0.2]", "no '/' and QPN"},
      {"[::ffff:10.0.0.2]:0x11", "no '/' and QPN"},
      {"[::ffff:10.0.0.2]/", "no QPN"},
      {"[::ffff:10.0.0.2]/0x", "no QPN"},
      {"[::ffff:10.0.0.2]/0x1000000", "more than 24 bits"},
      {"[::ffff:10.0.0.2]/0x12g", "not a hex number"},
      {"[::ffff:10.0.0.2]/-1", "not a hex number"},
  };
  for (const Case& c : cases) {
    Result<PortAddress> r = parse_port_address(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.error().message.find(std::string("\"") + c.text + "\""), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find(c.why), std::string::npos) << c.text << ": " << r.error().message;
  }
}

TEST(VerbsPort, NoDeviceIsRefused) {
  const std::string empty = ::testing::TempDir() + "/verbs_port_no_devices";
  std::filesystem::create_directories(empty);
  VerbsPortConfig c;
  c.sysfs_root = empty;
  Result<std::unique_ptr<PacketPort>> p = open_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(p.error().message.find("verbs-ud: no RDMA device under " + empty), std::string::npos)
      << p.error().message;
  // create_verbs_wire passes the port's error on.
  UdpConfig u;
  Result<std::unique_ptr<UdpWire>> w = create_verbs_wire(u, c);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("no RDMA device under"), std::string::npos) << w.error().message;
}

TEST(VerbsPort, UnknownDeviceNameListsTheDevices) {
  VerbsPortConfig c;
  c.sysfs_root = kFixtures + "/connectx";
  c.device = "mlx5_9";
  Result<std::unique_ptr<PacketPort>> p = open_ud_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("no RDMA device named mlx5_9 (there are: mlx5_0, mlx5_1, mlx5_2)"),
            std::string::npos)
      << p.error().message;
}

TEST(VerbsPort, NoActiveRocePortSaysWhy) {
  VerbsPortConfig c;
  c.sysfs_root = kFixtures + "/connectx";
  c.device = "mlx5_1";  // its only port is DOWN
  Result<std::unique_ptr<PacketPort>> p = open_ud_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("no ACTIVE RoCE port"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("mlx5_1"), std::string::npos) << p.error().message;
  c.device = "mlx5_2";  // InfiniBand
  p = open_ud_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("mlx5_2"), std::string::npos) << p.error().message;
}

TEST(VerbsPort, GidSelectorMatchingNothingIsRefused) {
  VerbsPortConfig c;
  c.sysfs_root = kFixtures + "/rxe";
  Result<GidSelector> sel = with_addr_range(GidSelector{}, "192.168.0.0/16");
  ASSERT_TRUE(sel.ok()) << sel.error().message;
  c.gid = *sel;
  Result<std::unique_ptr<PacketPort>> p = open_ud_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(p.error().message.find("verbs-ud: "), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("rxe0"), std::string::npos) << p.error().message;
}

TEST(VerbsPort, BadSizesAreRefused) {
  VerbsPortConfig c;
  c.sysfs_root = kFixtures + "/rxe";
  c.slots = 0;
  Result<std::unique_ptr<PacketPort>> p = open_ud_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("at least 1"), std::string::npos) << p.error().message;
  c.slots = 256;
  p = open_ud_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("256 slots"), std::string::npos) << p.error().message;
}

TEST(VerbsPort, RcIsNotBuiltYet) {
  VerbsPortConfig c;
  c.mode = PortMode::kRc;
  Result<std::unique_ptr<PacketPort>> p = open_port(c);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(p.error().message.find("verbs-rc"), std::string::npos) << p.error().message;
}

}  // namespace
}  // namespace megascale::wire::verbs
