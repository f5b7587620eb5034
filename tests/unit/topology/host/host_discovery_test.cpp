// Host discovery from the hwloc XML fixtures and the live machine; the model's helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "fixtures.h"
#include "megascale/topology/host.h"

namespace megascale::topo::host {
namespace {

using testing::fixture;

const Nic* nic_named(const HostTopology& host, const std::string& name) {
  for (const Nic& n : host.nics) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

TEST(HostDiscovery, DgxH100Inventory) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  EXPECT_EQ(host->hostname, "dgx-h100-fixture");
  EXPECT_EQ(host->cpu_vendor, "GenuineIntel");
  EXPECT_EQ(host->cpu_family, 6);
  EXPECT_EQ(host->cpu_model_number, 143);
  ASSERT_EQ(host->numa_nodes.size(), 2U);
  EXPECT_EQ(host->numa_nodes[0].package, 0);
  EXPECT_EQ(host->numa_nodes[1].package, 1);
  EXPECT_EQ(host->numa_nodes[0].cpus.size(), 112U);
  EXPECT_EQ(format_cpu_list(host->numa_nodes[0].cpus), "0-55,112-167");
  EXPECT_EQ(format_cpu_list(host->numa_nodes[1].cpus), "56-111,168-223");

  ASSERT_EQ(host->gpus.size(), 8U);
  const char* gpu_buses[] = {"0000:18:00.0", "0000:1a:00.0", "0000:38:00.0", "0000:3a:00.0",
                             "0000:98:00.0", "0000:9a:00.0", "0000:b8:00.0", "0000:ba:00.0"};
  for (int i = 0; i < 8; ++i) {
    const Gpu& g = host->gpus[static_cast<size_t>(i)];
    EXPECT_EQ(g.cuda_index, i);
    EXPECT_EQ(g.index_source, Gpu::IndexSource::kCuda);
    EXPECT_EQ(g.pci.bus_id, gpu_buses[i]);
    EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.pci.class_code, 0x030200U);
    EXPECT_EQ(g.pci.device_id, 0x2330);
    EXPECT_EQ(g.pci.numa_node, i < 4 ? 0 : 1);
    EXPECT_DOUBLE_EQ(g.pci.link_gts, 32.0);  // from hwloc's 63.015 GB/s
    EXPECT_EQ(g.pci.link_width, 16);
    ASSERT_EQ(g.pci.switches.size(), 1U);
  }
  ASSERT_EQ(host->nics.size(), 9U);  // 8 ConnectX-7 + the management NIC
  ASSERT_EQ(host->switches.size(), 4U);
  EXPECT_EQ(host->switches[0].pci.bus_id, "0000:16:00.0");
  EXPECT_EQ(host->gpus[0].pci.switches[0], "0000:16:00.0");

  const Nic* mgmt = nic_named(*host, "eno1");
  ASSERT_NE(mgmt, nullptr);
  EXPECT_TRUE(mgmt->rdma_device.empty());
  EXPECT_TRUE(mgmt->pci.switches.empty());
  const Nic* mlx0 = nic_named(*host, "mlx5_0");
  ASSERT_NE(mlx0, nullptr);
  EXPECT_EQ(mlx0->netdev, "enp25s0np0");
  EXPECT_EQ(mlx0->pci.bus_id, "0000:19:00.0");
  EXPECT_EQ(mlx0->node_guid, 0x946dae0300001900ULL);
  EXPECT_EQ(mlx0->speed_mbps, 0);    // hwloc has no link rate; sysfs is not read for a fixture
  ASSERT_EQ(mlx0->gids.size(), 4U);  // Port1GID0..3 infos
  EXPECT_EQ(mlx0->gids[2].gid, "0000:0000:0000:0000:0000:ffff:0a00:0001");
  EXPECT_TRUE(mlx0->gids[2].type.empty());
}

TEST(HostDiscovery, DgxH100PathTypes) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  const PciDevice& gpu0 = host->gpus[0].pci;
  EXPECT_EQ(path_between(*host, gpu0, nic_named(*host, "mlx5_0")->pci), PathType::kPix);
  EXPECT_EQ(path_between(*host, gpu0, nic_named(*host, "mlx5_1")->pci), PathType::kPix);
  EXPECT_EQ(path_between(*host, gpu0, nic_named(*host, "mlx5_2")->pci),
            PathType::kNode);  // other root complex
  EXPECT_EQ(path_between(*host, gpu0, nic_named(*host, "mlx5_4")->pci), PathType::kSys);  // other socket
  EXPECT_EQ(path_between(*host, gpu0, nic_named(*host, "eno1")->pci), PathType::kNode);
  const PciDevice& gpu7 = host->gpus[7].pci;
  EXPECT_EQ(path_between(*host, gpu7, nic_named(*host, "mlx5_7")->pci), PathType::kPix);
  EXPECT_EQ(path_between(*host, gpu7, nic_named(*host, "mlx5_4")->pci), PathType::kNode);
  EXPECT_EQ(path_between(*host, gpu7, nic_named(*host, "mlx5_0")->pci), PathType::kSys);
}

TEST(HostDiscovery, DgxH100WithSysfs) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"), {.sysfs_root = fixture("dgx-h100-sysfs")});
  ASSERT_TRUE(host.ok()) << host.error().message;
  for (const Nic& nic : host->nics) {
    if (nic.rdma_device.empty()) {
      EXPECT_EQ(nic.speed_mbps, 0) << nic.name();  // no sysfs entry for eno1: left unknown
      continue;
    }
    EXPECT_EQ(nic.speed_mbps, 400000) << nic.name();
    EXPECT_EQ(nic.link_layer, "Ethernet") << nic.name();
    ASSERT_EQ(nic.gids.size(), 4U) << nic.name();  // the all-zero entry 4 is skipped
    EXPECT_EQ(nic.gids[1].type, "RoCE v2");
    EXPECT_EQ(nic.gids[3].type, "RoCE v2");
    EXPECT_EQ(nic.gids[0].type, "IB/RoCE v1");
  }
}

TEST(HostDiscovery, NicsOnSocket0) {
  auto host = load_hwloc_xml(fixture("nics-on-socket0.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_EQ(host->gpus.size(), 4U);
  ASSERT_EQ(host->nics.size(), 2U);
  EXPECT_TRUE(host->switches.empty());
  for (int i = 0; i < 4; ++i) {
    // No CUDA or NVML devices in this export: PCI bus order.
    EXPECT_EQ(host->gpus[static_cast<size_t>(i)].cuda_index, i);
    EXPECT_EQ(host->gpus[static_cast<size_t>(i)].index_source, Gpu::IndexSource::kBusOrder);
    EXPECT_EQ(host->gpus[static_cast<size_t>(i)].name, "GA100 [A100 PCIe 40GB]");
  }
  EXPECT_EQ(host->gpus[2].pci.bus_id, "0000:81:00.0");
  for (const Nic& n : host->nics) EXPECT_EQ(n.pci.numa_node, 0);
  const Nic& nic0 = host->nics[0];
  const Nic& nic1 = host->nics[1];
  EXPECT_EQ(path_between(*host, host->gpus[0].pci, nic0.pci), PathType::kPhb);  // same root complex
  EXPECT_EQ(path_between(*host, host->gpus[0].pci, nic1.pci), PathType::kNode);
  EXPECT_EQ(path_between(*host, host->gpus[1].pci, nic0.pci), PathType::kNode);
  EXPECT_EQ(path_between(*host, host->gpus[2].pci, nic0.pci), PathType::kSys);
  EXPECT_EQ(path_between(*host, host->gpus[3].pci, nic1.pci), PathType::kSys);
}

TEST(HostDiscovery, NoGpu) {
  auto host = load_hwloc_xml(fixture("no-gpu.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  EXPECT_TRUE(host->gpus.empty());
  ASSERT_EQ(host->nics.size(), 1U);  // the NVMe drive is not a NIC
  EXPECT_EQ(host->nics[0].rdma_device, "mlx5_0");
  EXPECT_EQ(host->nics[0].netdev, "enp1s0f0np0");
  ASSERT_EQ(host->numa_nodes.size(), 1U);
  EXPECT_EQ(format_cpu_list(host->numa_nodes[0].cpus), "0-15");
  EXPECT_EQ(host->cpu_vendor, "AuthenticAMD");
}

TEST(HostDiscovery, LiveMachine) {
  auto host = discover_host();
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_FALSE(host->numa_nodes.empty());
  size_t cpus = 0;
  for (const NumaNode& n : host->numa_nodes) cpus += n.cpus.size();
  EXPECT_GT(cpus, 0U);
  for (const Nic& n : host->nics) EXPECT_FALSE(n.name().empty());
  for (const Gpu& g : host->gpus) EXPECT_GE(g.cuda_index, 0);
}

// Without hwloc's GPU components (what the NCCL plugin asks for at init) the same devices are found, and
// GPUs are numbered in PCI bus order since no CUDA or NVML device names them.
TEST(HostDiscovery, LiveMachineWithoutGpuLibraries) {
  auto full = discover_host();
  auto lean = discover_host({.sysfs_root = "/sys", .gpu_libraries = false});
  ASSERT_TRUE(full.ok()) << full.error().message;
  ASSERT_TRUE(lean.ok()) << lean.error().message;
  ASSERT_EQ(lean->nics.size(), full->nics.size());
  for (size_t i = 0; i < lean->nics.size(); ++i) EXPECT_EQ(lean->nics[i].name(), full->nics[i].name());
  ASSERT_EQ(lean->gpus.size(), full->gpus.size());
  for (size_t i = 0; i < lean->gpus.size(); ++i) {
    EXPECT_EQ(lean->gpus[i].index_source, Gpu::IndexSource::kBusOrder);
    EXPECT_EQ(lean->gpus[i].cuda_index, static_cast<int>(i));
    if (i > 0) {
      EXPECT_LT(lean->gpus[i - 1].pci.bus_id, lean->gpus[i].pci.bus_id);
    }
  }
}

TEST(HostDiscovery, BadHwlocXml) {
  auto missing = load_hwloc_xml(fixture("does-not-exist.xml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("does-not-exist.xml"), std::string::npos);

  const std::string path = ::testing::TempDir() + "/not-hwloc.xml";
  std::ofstream(path) << "<system version=\"1\"><cpu numaid=\"0\"/></system>\n";
  auto wrong = load_hwloc_xml(path);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("not-hwloc.xml"), std::string::npos);
}

TEST(HostModel, PathBetweenCountsASwitchOnce) {
  HostTopology host;
  host.numa_nodes = {{0, 0, {0}}, {1, 1, {1}}};
  PciDevice a;
  PciDevice b;
  a.numa_node = b.numa_node = 0;
  a.host_bridge = b.host_bridge = 0;
  a.switches = {"0000:02:00.0", "0000:01:00.0"};
  b.switches = {"0000:02:00.0", "0000:01:00.0"};
  EXPECT_EQ(path_between(host, a, b), PathType::kPix);
  b.switches = {"0000:03:00.0", "0000:01:00.0"};  // two switches below a shared one
  EXPECT_EQ(path_between(host, a, b), PathType::kPxb);
  b.switches = {"0000:01:00.0"};
  EXPECT_EQ(path_between(host, a, b), PathType::kPxb);
  b.switches.clear();
  EXPECT_EQ(path_between(host, a, b), PathType::kPhb);
  b.host_bridge = 1;
  EXPECT_EQ(path_between(host, a, b), PathType::kNode);
  b.numa_node = 1;
  EXPECT_EQ(path_between(host, a, b), PathType::kSys);
}

TEST(HostModel, CpuLists) {
  EXPECT_EQ(format_cpu_list({5, 0, 1, 2, 3, 7, 8, 1}), "0-3,5,7-8");
  EXPECT_EQ(format_cpu_list({}), "");
  auto cpus = parse_cpu_list("0-2,5,7-8\n");
  ASSERT_TRUE(cpus.ok()) << cpus.error().message;
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 2, 5, 7, 8}));
  auto bad = parse_cpu_list("0-2,x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'x'"), std::string::npos);
  EXPECT_FALSE(parse_cpu_list("4-2").ok());
}

TEST(HostModel, BusIdsAndLinks) {
  EXPECT_EQ(*normalize_bus_id("0000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(*normalize_bus_id("1a:00.1"), "0000:1a:00.1");
  EXPECT_FALSE(normalize_bus_id("1a:00").ok());
  EXPECT_FALSE(normalize_bus_id("0000:1a:40.0").ok());  // device numbers stop at 31
  EXPECT_FALSE(normalize_bus_id("zz:00.0").ok());
  EXPECT_EQ(pcie_link_from_gbytes(63.015385), (std::pair<double, int>{32.0, 16}));
  EXPECT_EQ(pcie_link_from_gbytes(31.507692), (std::pair<double, int>{16.0, 16}));
  EXPECT_EQ(pcie_link_from_gbytes(3.938462), (std::pair<double, int>{8.0, 4}));
  EXPECT_EQ(pcie_link_from_gbytes(4.0), (std::pair<double, int>{2.5, 16}));  // Gen1 x16, 8b/10b
  EXPECT_EQ(pcie_link_from_gbytes(0), (std::pair<double, int>{0, 0}));
  EXPECT_EQ(pcie_link_from_gbytes(7.0), (std::pair<double, int>{0, 0}));
  for (PathType p : {PathType::kPix, PathType::kPxb, PathType::kPhb, PathType::kNode, PathType::kSys}) {
    EXPECT_EQ(parse_path_type(to_string(p)), p);
  }
  EXPECT_FALSE(parse_path_type("NVL").has_value());
}

}  // namespace
}  // namespace megascale::topo::host
