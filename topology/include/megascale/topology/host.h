// Host topology: the NUMA nodes, GPUs, NICs and PCIe switches of one server, and the PCIe path type
// between every GPU and every NIC, as plain data (no hwloc types).
//
//   auto host = megascale::topo::host::discover_host();                    // the live machine (hwloc)
//   auto fixture = megascale::topo::host::load_hwloc_xml("dgx.xml");       // an exported hwloc XML
//   if (!host) { fmt::print(stderr, "{}\n", host.error().message); return 1; }
//   for (const auto& gpu : host->gpus)
//     for (const auto& nic : host->nics) fmt::print("{} {} {}\n", gpu.pci.bus_id, nic.name(),
//                                                   to_string(path_between(*host, gpu.pci, nic.pci)));
//
// Path types follow NCCL and `nvidia-smi topo -m` (NCCL src/include/graph.h):
// PIX = at most one PCIe switch between the two, PXB = several switches but no host bridge, PHB = through
// the CPU's host bridge, NODE = across host bridges within one NUMA node, SYS = across the inter-socket
// link. A PCIe switch is counted once however many ports (bridges) it shows, as NCCL does when it folds
// a switch's upstream and downstream ports into one <pci> node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::topo::host {

// NCCL's PCIe path types, best first; nvidia-smi's NODE sits between PHB and SYS.
enum class PathType { kPix, kPxb, kPhb, kNode, kSys };

// "PIX", "PXB", "PHB", "NODE", "SYS".
std::string_view to_string(PathType path);
// The inverse of to_string; nullopt for any other text.
std::optional<PathType> parse_path_type(std::string_view text);

// Where a PCI device sits and what it is. Ids are as the PCI config space gives them.
struct PciDevice {
  std::string bus_id;       // "0000:18:00.0", lower-case hex (NCCL's and sysfs's spelling)
  uint32_t class_code = 0;  // 24 bits, class/subclass/prog-if: 0x030200 a 3D controller, 0x020000 Ethernet
  uint16_t vendor_id = 0;   // 0x10de NVIDIA, 0x15b3 Mellanox/NVIDIA networking
  uint16_t device_id = 0;
  uint16_t subsystem_vendor_id = 0;
  uint16_t subsystem_device_id = 0;
  double link_gts = 0;   // PCIe link rate per lane in GT/s (32 = Gen5); 0 = unknown
  int link_width = 0;    // PCIe lanes (16); 0 = unknown
  int numa_node = -1;    // os index of the NUMA node the device is local to; -1 = unknown
  int host_bridge = -1;  // index into HostTopology::host_bridges; -1 = none known
  // Upstream-port bus ids of the PCIe switches above the device, nearest first.
  std::vector<std::string> switches;
};

struct NumaNode {
  int os_index = 0;
  int package = -1;       // socket (hwloc Package os index); -1 = unknown
  std::vector<int> cpus;  // PU os indices, ascending
};

struct Gpu {
  PciDevice pci;
  std::string name;     // "NVIDIA H100 80GB HBM3" where known, else the PCI ids
  int cuda_index = -1;  // CUDA device ordinal
  // Where cuda_index came from: hwloc's "cudaN" OS device, its "nvmlN" device, or PCI bus order.
  enum class IndexSource { kCuda, kNvml, kBusOrder } index_source = IndexSource::kBusOrder;
};

// One GID table entry of an RDMA port (/sys/class/infiniband/<dev>/ports/<port>/gids/<index>).
struct RoceGid {
  int port = 1;
  int index = 0;
  std::string gid;   // "fe80:0000:0000:0000:0a00:27ff:fe00:0001"
  std::string type;  // "RoCE v2", "IB/RoCE v1"; empty = unknown
};

struct Nic {
  PciDevice pci;            // bus_id empty for a NIC with no PCI device (from an NCCL XML <cpu><nic>)
  std::string rdma_device;  // "mlx5_0"; empty = no RDMA device
  std::string netdev;       // "eth0", "ens1f0np0"; empty = none
  int port = 1;             // RDMA port number
  int64_t speed_mbps = 0;   // network link speed; 0 = unknown
  std::string link_layer;   // "Ethernet" (RoCE) or "InfiniBand"; empty = unknown
  std::vector<RoceGid> gids;
  uint64_t node_guid = 0;  // the RDMA device's node GUID; 0 = unknown
  // The name NCCL's IB plugin gives it (the RDMA device), else the netdev, else the bus id.
  const std::string& name() const;
};

// A PCIe switch, named by its upstream port.
struct PcieSwitch {
  PciDevice pci;  // pci.switches = the switches above this one
};

// A PCI host bridge (root complex); hwloc names it by its bus range.
struct HostBridge {
  std::string name;  // "0000:[15-1f]"
  int numa_node = -1;
};

struct HostTopology {
  std::string hostname;
  std::string arch;                  // "x86_64", "aarch64"
  std::string cpu_vendor;            // "GenuineIntel", "AuthenticAMD"
  std::string cpu_model;             // "Intel(R) Xeon(R) Platinum 8480C"
  int cpu_family = -1;               // CPUID family number; -1 = unknown
  int cpu_model_number = -1;         // CPUID model number; -1 = unknown
  std::vector<NumaNode> numa_nodes;  // ascending os_index
  std::vector<Gpu> gpus;             // ascending cuda_index
  std::vector<Nic> nics;             // ascending bus id
  std::vector<PcieSwitch> switches;  // ascending bus id
  std::vector<HostBridge> host_bridges;

  const NumaNode* find_numa(int os_index) const;
};

// Where discovery looks. Live discovery reads sysfs for what hwloc leaves out (NIC speed, GID types,
// PCIe link width); an XML fixture reads nothing outside the file unless sysfs_root is set.
struct DiscoveryOptions {
  std::string sysfs_root = "/sys";
  // Let hwloc's GPU components (cuda, nvml, opencl, rsmi, levelzero, gl) name GPUs by their libraries'
  // indices. Off, no GPU library is loaded or initialised (cheap inside a process that is starting CUDA,
  // such as an NCCL plugin's init) and GPUs take PCI bus order, which is CUDA's under
  // CUDA_DEVICE_ORDER=PCI_BUS_ID and NVML's always.
  bool gpu_libraries = true;
};

// The live machine: hwloc with important I/O devices (bridges, PCI devices, OS devices) kept.
Result<HostTopology> discover_host(const DiscoveryOptions& options = {});
// An hwloc v2 XML export (`lstopo --of xml`, or a hand-written fixture); sysfs_root empty by default.
Result<HostTopology> load_hwloc_xml(const std::string& path,
                                    const DiscoveryOptions& options = {.sysfs_root = ""});

// The path type between two devices of `host` (see the header comment).
PathType path_between(const HostTopology& host, const PciDevice& a, const PciDevice& b);

// "0-23,48-71" for {0..23, 48..71}; the cpus need not be sorted. Empty for none.
std::string format_cpu_list(std::vector<int> cpus);
// Parses "0-23,48-71" (the kernel's cpulist format); an error names the bad token.
Result<std::vector<int>> parse_cpu_list(std::string_view text);

// Bus ids as NCCL writes them: "0000:18:00.0" from any case, with a domain added if missing ("18:00.0").
// An error names the text that is not a bus id.
Result<std::string> normalize_bus_id(std::string_view text);

// The PCIe rate per lane (GT/s) and width that give hwloc's link speed in GB/s (hwloc computes
// lanes x GT/s x encoding / 8, encoding 8b/10b up to Gen2 and 128b/130b from Gen3). The widest match
// wins where two match (Gen4 x8 = Gen3 x16); {0, 0} when nothing matches within 1%.
std::pair<double, int> pcie_link_from_gbytes(double gbytes_per_s);

}  // namespace megascale::topo::host
