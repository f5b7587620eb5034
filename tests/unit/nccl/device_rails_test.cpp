// Plugin devices get the rail ids of their NICs: verbs ports by RDMA device (or their netdev), UDP
// interfaces by netdev, over the DGX H100 hwloc fixture (8 GPUs, 8 rail NICs mlx5_0..7, eno1 off-rail).
#include "device_rails.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../support/source_path.h"

namespace megascale::nccl {
namespace {

#if MEGASCALE_NCCL_RAILS
topo::host::HostTopology dgx() {
  auto host = topo::host::load_hwloc_xml(
      megascale::test::source_path("tests/unit/topology/host/fixtures/dgx-h100.xml"));
  EXPECT_TRUE(host.ok()) << host.error().message;
  return host.ok() ? *host : topo::host::HostTopology{};
}

Device verbs(std::string rdma_device, std::string netdev) {
  Device d;
  d.wire = WireKind::kVerbsRc;
  d.iface.name = std::move(rdma_device);
  d.netdev = std::move(netdev);
  return d;
}

Device udp(std::string netdev, std::string pci_path = "") {
  Device d;
  d.wire = WireKind::kUdp;
  d.iface.name = std::move(netdev);
  d.iface.pci_path = std::move(pci_path);
  return d;
}

TEST(DeviceRails, EachDeviceGetsItsNicsRail) {
  std::vector<Device> devices = {verbs("mlx5_2", "enp57s0np0"),  // by RDMA device
                                 verbs("rxe0", "enp155s0np0"),   // Soft-RoCE: by its netdev
                                 udp("enp187s0np0"),             // UDP: by netdev
                                 udp("eno1"),                    // a NIC no GPU uses
                                 udp("veth0"),                   // not a NIC of this host
                                 udp("ens9", "/sys/devices/pci0000:00/0000:00:01.0/0000:19:00.0")};
  const std::string line = assign_rail_ids(devices, dgx(), "fixture");
  EXPECT_EQ(devices[0].rail_id, 2);
  EXPECT_EQ(devices[1].rail_id, 5);
  EXPECT_EQ(devices[2].rail_id, 7);
  EXPECT_EQ(devices[3].rail_id, abi::kNetIdUndef);
  EXPECT_EQ(devices[4].rail_id, abi::kNetIdUndef);
  EXPECT_EQ(devices[5].rail_id, 0);  // by the PCI bus id in its sysfs path (mlx5_0's)
  for (const Device& d : devices) EXPECT_EQ(d.plane_id, abi::kNetIdUndef);
  EXPECT_NE(line.find("rail ids from the host's rail map (fixture): [0]mlx5_2 rail 2 [1]rxe0 rail 5"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("[3]eno1 rail -1 (eno1 is NIC eno1, which no GPU's rail uses)"), std::string::npos)
      << line;
  EXPECT_NE(line.find("[4]veth0 rail -1 (veth0 is none of the host's 9 NIC(s))"), std::string::npos) << line;
}

// A verbs device's own name is not a netdev: "eno1" as an RDMA device without a netdev matches nothing.
TEST(DeviceRails, VerbsNameIsNotMatchedAsNetdev) {
  std::vector<Device> devices = {verbs("eno1", "")};
  (void)assign_rail_ids(devices, dgx(), "fixture");
  EXPECT_EQ(devices[0].rail_id, abi::kNetIdUndef);
}
#endif

// Live discovery never fails init: the loopback interface is no NIC of any host, so its rail is -1, and
// the line says where the ids came from (or why there are none).
TEST(DeviceRails, LiveHostLoopbackIsOnNoRail) {
  Device lo;
  lo.iface.name = "lo";
  lo.rail_id = 3;
  std::vector<Device> devices = {lo};
  const std::string line = assign_rail_ids(devices);
  EXPECT_EQ(devices[0].rail_id, abi::kNetIdUndef);
  EXPECT_TRUE(line.rfind("rail ids from the host's rail map (hwloc, ", 0) == 0 ||
              line.rfind("rail ids unknown (-1): ", 0) == 0)
      << line;
  EXPECT_NE(line.find("[0]lo rail -1"), std::string::npos) << line;
}

}  // namespace
}  // namespace megascale::nccl
