// Rail mapping on the fixtures and on hand-built hosts that exercise the tie-breaking.
#include "megascale/topology/rails.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "fixtures.h"

namespace megascale::topo::host {
namespace {

using testing::fixture;

size_t count_kind(const RailMap& map, RailWarning::Kind kind) {
  return static_cast<size_t>(std::count_if(map.warnings.begin(), map.warnings.end(),
                                           [&](const RailWarning& w) { return w.kind == kind; }));
}

TEST(Rails, DgxH100IsRailOptimised) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailMap map = map_rails(*host);
  EXPECT_TRUE(map.rail_optimized);
  EXPECT_TRUE(map.warnings.empty()) << map.warnings.front().message;
  EXPECT_EQ(map.candidate_nics.size(), 8U);  // eno1 has no RDMA device
  ASSERT_EQ(map.rails.size(), 8U);
  for (size_t i = 0; i < 8; ++i) {
    const Rail& r = map.rails[i];
    EXPECT_EQ(r.gpu, static_cast<int>(i));
    ASSERT_GE(r.nic, 0);
    // Two GPUs and two NICs per switch, all PIX: the tie is spread, lower bus id first.
    EXPECT_EQ(host->nics[static_cast<size_t>(r.nic)].name(), "mlx5_" + std::to_string(i));
    EXPECT_EQ(r.path, PathType::kPix);
    EXPECT_EQ(r.numa_node, i < 4 ? 0 : 1);
    EXPECT_EQ(r.cpu_list, i < 4 ? "0-55,112-167" : "56-111,168-223");
    EXPECT_EQ(r.cpus.size(), 112U);
  }
  EXPECT_EQ(nccl_ib_hca(*host, map),
            "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1");
}

TEST(Rails, NicsOnSocket0AreFlagged) {
  auto host = load_hwloc_xml(fixture("nics-on-socket0.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailMap map = map_rails(*host);
  EXPECT_FALSE(map.rail_optimized);
  ASSERT_EQ(map.rails.size(), 4U);
  EXPECT_EQ(map.rails[0].nic, 0);
  EXPECT_EQ(map.rails[0].path, PathType::kPhb);
  EXPECT_EQ(map.rails[1].nic, 1);  // both NODE; mlx5_0 already serves GPU0
  EXPECT_EQ(map.rails[1].path, PathType::kNode);
  EXPECT_EQ(map.rails[2].path, PathType::kSys);
  EXPECT_EQ(map.rails[3].path, PathType::kSys);
  EXPECT_NE(map.rails[2].nic, map.rails[3].nic);  // spread over both NICs
  // The transport's threads for GPU2 run where its NIC is (socket 0), not where the GPU is.
  EXPECT_EQ(map.rails[2].cpu_list, "0-31");
  EXPECT_EQ(count_kind(map, RailWarning::Kind::kCrossSocket), 2U);
  EXPECT_EQ(count_kind(map, RailWarning::Kind::kSharedNic), 2U);
  EXPECT_EQ(count_kind(map, RailWarning::Kind::kNoNic), 0U);
  bool named = false;
  for (const RailWarning& w : map.warnings) {
    if (w.kind == RailWarning::Kind::kCrossSocket &&
        w.message.find("GPU2 (0000:81:00.0)") != std::string::npos &&
        w.message.find("mlx5_0") != std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named);
}

TEST(Rails, NoGpuHost) {
  auto host = load_hwloc_xml(fixture("no-gpu.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailMap map = map_rails(*host);
  EXPECT_TRUE(map.rails.empty());
  EXPECT_FALSE(map.rail_optimized);
  EXPECT_EQ(count_kind(map, RailWarning::Kind::kNoGpu), 1U);
  EXPECT_EQ(map.candidate_nics, (std::vector<int>{0}));
  EXPECT_EQ(nccl_ib_hca(*host, map), "");
}

TEST(Rails, GpusWithoutNics) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  host->nics.clear();
  const RailMap map = map_rails(*host);
  EXPECT_FALSE(map.rail_optimized);
  EXPECT_EQ(count_kind(map, RailWarning::Kind::kNoNic), 8U);
  for (const Rail& r : map.rails) EXPECT_EQ(r.nic, -1);
}

// GPU1 has a single best NIC (NIC0, PIX); GPU0 ties NIC0 and NIC1 (PXB). Pairing in GPU order would
// give both GPUs NIC0; the fewest-choices-first order keeps them apart.
TEST(Rails, ConstrainedGpuPicksFirst) {
  HostTopology host;
  host.numa_nodes = {{0, 0, {0, 1, 2, 3}}};
  auto device = [](std::string bus, std::vector<std::string> switches) {
    PciDevice pci;
    pci.bus_id = std::move(bus);
    pci.numa_node = 0;
    pci.host_bridge = 0;
    pci.switches = std::move(switches);
    return pci;
  };
  host.gpus = {{device("0000:10:00.0", {"0000:0e:00.0", "0000:02:00.0"}), "A", 0, Gpu::IndexSource::kCuda},
               {device("0000:20:00.0", {"0000:1e:00.0", "0000:02:00.0"}), "B", 1, Gpu::IndexSource::kCuda}};
  Nic nic0;
  nic0.pci = device("0000:21:00.0", {"0000:1e:00.0", "0000:02:00.0"});
  nic0.rdma_device = "mlx5_0";
  Nic nic1;
  nic1.pci = device("0000:31:00.0", {"0000:2e:00.0", "0000:02:00.0"});
  nic1.rdma_device = "mlx5_1";
  host.nics = {nic0, nic1};
  const RailMap map = map_rails(host);
  EXPECT_EQ(map.rails[1].nic, 0);
  EXPECT_EQ(map.rails[1].path, PathType::kPix);
  EXPECT_EQ(map.rails[0].nic, 1);
  EXPECT_EQ(map.rails[0].path, PathType::kPxb);
  EXPECT_TRUE(map.rail_optimized);
  EXPECT_TRUE(map.warnings.empty());

  // A closer NIC without an RDMA device is not a rail when RDMA NICs exist.
  Nic mgmt;
  mgmt.pci = device("0000:11:00.0", {"0000:0e:00.0", "0000:02:00.0"});
  mgmt.netdev = "eno1";
  host.nics.insert(host.nics.begin(), mgmt);
  const RailMap with_mgmt = map_rails(host);
  EXPECT_EQ(with_mgmt.candidate_nics, (std::vector<int>{1, 2}));
  EXPECT_EQ(host.nics[static_cast<size_t>(with_mgmt.rails[0].nic)].name(), "mlx5_1");
}

// ---- rail_of: a transport's device -> its NIC's rail id (the NIC's place in NCCL_IB_HCA's order) ----

NicKey key(std::string rdma_device, std::string netdev, std::string pci_path) {
  NicKey k;
  k.rdma_device = std::move(rdma_device);
  k.netdev = std::move(netdev);
  k.pci_path = std::move(pci_path);
  return k;
}

TEST(RailOf, RailOptimisedHostGivesEachNicItsGpusRail) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailMap map = map_rails(*host);
  ASSERT_EQ(rail_nics(map).size(), 8U);
  for (int i = 0; i < 8; ++i) {
    // By RDMA device name (a verbs port).
    const RailAssignment by_rdma = rail_of(*host, map, key("mlx5_" + std::to_string(i), "", ""));
    EXPECT_EQ(by_rdma.rail_id, i) << by_rdma.reason;
    EXPECT_TRUE(by_rdma.reason.empty());
    EXPECT_EQ(host->nics[static_cast<size_t>(by_rdma.nic)].rdma_device, "mlx5_" + std::to_string(i));
  }
  // By netdev (a UDP interface): enp59s0np0 is mlx5_3's.
  EXPECT_EQ(rail_of(*host, map, key("", "enp59s0np0", "")).rail_id, 3);
  // By the PCI device's sysfs path alone: 0000:b9:00.0 is mlx5_6's; upper case is read too.
  EXPECT_EQ(rail_of(*host, map, key("", "", "/sys/devices/pci0000:b0/0000:b0:01.0/0000:B9:00.0")).rail_id, 6);
  // The RDMA name wins over a netdev that names another NIC.
  EXPECT_EQ(rail_of(*host, map, key("mlx5_5", "enp25s0np0", "")).rail_id, 5);
  // Soft-RoCE over a rail's netdev: rxe0 is not in hwloc's view, its netdev is.
  EXPECT_EQ(rail_of(*host, map, key("rxe0", "enp187s0np0", "")).rail_id, 7);
}

TEST(RailOf, NicWithoutGpuIsOnNoRail) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailAssignment a = rail_of(*host, map_rails(*host), key("", "eno1", ""));
  EXPECT_EQ(a.rail_id, -1);
  ASSERT_GE(a.nic, 0);
  EXPECT_EQ(host->nics[static_cast<size_t>(a.nic)].name(), "eno1");
  EXPECT_NE(a.reason.find("no GPU's rail"), std::string::npos) << a.reason;
}

TEST(RailOf, DeviceNotInTheTopology) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailMap map = map_rails(*host);
  const RailAssignment a = rail_of(*host, map, key("rxe0", "veth3", ""));
  EXPECT_EQ(a.rail_id, -1);
  EXPECT_EQ(a.nic, -1);
  EXPECT_NE(a.reason.find("rxe0/veth3 is none of the host's 9 NIC(s)"), std::string::npos) << a.reason;
  // A virtual device's sysfs path holds no bus id: nothing to match.
  EXPECT_EQ(rail_of(*host, map, key("", "", "/sys/devices/virtual/net/lo")).nic, -1);
  EXPECT_EQ(rail_of(*host, map, key("", "", "")).rail_id, -1);
}

TEST(RailOf, SharedNicsKeepNcclIbHcaOrder) {
  auto host = load_hwloc_xml(fixture("nics-on-socket0.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const RailMap map = map_rails(*host);
  // Four GPUs over two NICs: the NICs' rail ids are their places in NCCL_IB_HCA, not GPU indices.
  ASSERT_EQ(nccl_ib_hca(*host, map), "=mlx5_0:1,mlx5_1:1");
  EXPECT_EQ(rail_nics(map), (std::vector<int>{0, 1}));
  EXPECT_EQ(rail_of(*host, map, key("mlx5_0", "", "")).rail_id, 0);
  EXPECT_EQ(rail_of(*host, map, key("", "ens61np0", "")).rail_id, 1);
}

TEST(RailOf, HostWithoutGpusHasNoRails) {
  auto host = load_hwloc_xml(fixture("no-gpu.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_FALSE(host->nics.empty());
  const RailAssignment a =
      rail_of(*host, map_rails(*host), key(host->nics[0].rdma_device, host->nics[0].netdev, ""));
  EXPECT_EQ(a.rail_id, -1);
  EXPECT_EQ(a.nic, 0);
  EXPECT_NE(a.reason.find("no GPU, so no rails"), std::string::npos) << a.reason;
}

}  // namespace
}  // namespace megascale::topo::host
