// Rail mapping: which NIC each GPU should use, whether the host is rail-optimised, what is lopsided, and
// which CPU cores the transport's threads for that NIC should run on.
//
//   auto host = megascale::topo::host::discover_host();
//   megascale::topo::host::RailMap rails = megascale::topo::host::map_rails(*host);
//   for (const auto& r : rails.rails) fmt::print("GPU{} -> {} ({}), cores {}\n", ...);
//   for (const auto& w : rails.warnings) fmt::print("warning: {}\n", w.message);
//
// A rail-optimised server wires NIC i of every server to leaf switch i, so GPU i must own NIC i and reach
// it without crossing the CPU (MegaScale NSDI'24 §3.3: 8 x 200G NICs per server,
// "multi-rail"). Pairing: each GPU takes a NIC of its best path type (PIX < PXB < PHB < NODE < SYS), then
// fewest PCIe switches between them; among NICs still tied, the one serving fewest GPUs so far, then the
// lowest bus id. GPUs with fewer tied choices pick first, so a GPU with a single best NIC is not starved
// by one that had several.
#pragma once

#include <string>
#include <vector>

#include "megascale/topology/host.h"

namespace megascale::topo::host {

struct Rail {
  int gpu = 0;   // index into HostTopology::gpus
  int nic = -1;  // index into HostTopology::nics; -1 = no NIC at all
  PathType path = PathType::kSys;
  int numa_node = -1;     // the NIC's NUMA node (-1 unknown)
  std::vector<int> cpus;  // the cores of that NUMA node: where the transport's threads should run
  std::string cpu_list;   // the same as "0-55,112-167"
};

struct RailWarning {
  enum class Kind { kSharedNic, kCrossSocket, kNoNic, kNoGpu };
  Kind kind;
  std::string message;  // names the GPUs and NICs
};

struct RailMap {
  std::vector<Rail> rails;  // one per GPU, in HostTopology::gpus order (rail i = GPU i's NIC)
  // Every GPU has a NIC of its own at PIX or PXB (and there is at least one GPU).
  bool rail_optimized = false;
  std::vector<RailWarning> warnings;
  // NICs the pairing chose from: the RDMA-capable ones when there are any (NCCL's IB/RoCE transport uses
  // only those), else every NIC. Indices into HostTopology::nics.
  std::vector<int> candidate_nics;
};

// Pairs each GPU with its closest NIC (see the header comment) and flags asymmetries: a NIC shared by
// several GPUs, a GPU whose best NIC is across the inter-socket link (SYS), a GPU without any NIC, a host
// without GPUs.
RailMap map_rails(const HostTopology& host);

// NCCL_IB_HCA's value for the rails' NICs in rail order, each once: "=mlx5_0:1,mlx5_1:1,..." ("=" makes
// NCCL match names exactly; NCCL docs, env.rst). Empty when no rail has an RDMA device.
std::string nccl_ib_hca(const HostTopology& host, const RailMap& rails);

// The rails' NICs in rail order, each once (indices into HostTopology::nics): rail id r names
// rail_nics(rails)[r], the r-th entry of nccl_ib_hca's list.
std::vector<int> rail_nics(const RailMap& rails);

// How a transport names one of its devices; any field may be empty. A verbs port gives its RDMA device
// and netdev, a UDP interface its netdev; both give the sysfs path of their PCI device where there is one.
struct NicKey {
  std::string rdma_device;  // "mlx5_0", "rxe0"
  std::string netdev;       // "ens1f0np0", "eth0"
  std::string pci_path;     // "/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0": its last bus id counts
};

struct RailAssignment {
  int rail_id = -1;    // index into rail_nics(); -1 = the device is on no rail
  int nic = -1;        // index into HostTopology::nics; -1 = no NIC of the host matched
  std::string reason;  // why rail_id is -1 (empty when it is not)
};

// The rail of the host NIC that `key` names, matched by RDMA device name, else netdev name, else PCI bus
// id (first match in that order). rail_id is -1 when no NIC matches, or the NIC serves no GPU's rail
// (a host without GPUs, a NIC the pairing did not choose).
RailAssignment rail_of(const HostTopology& host, const RailMap& rails, const NicKey& key);

}  // namespace megascale::topo::host
