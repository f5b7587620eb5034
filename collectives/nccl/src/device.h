// One device the plugin lists to NCCL (devices(), getProperties): a network interface on UDP, an RDMA
// port on verbs (wire_choice.h verbs_devices builds those).
#pragma once

#include <cstdint>
#include <string>

#include "config.h"
#include "interfaces.h"
#include "megascale/nccl/abi/net_v12.h"

namespace megascale::nccl {

struct Device {
  // On UDP the interface; on verbs the RDMA port as one: name the RDMA device ("rxe0"), address its GID's
  // text, family AF_INET6, speed from the port's rate, pci_path from sysfs.
  InterfaceInfo iface;
  WireKind wire = WireKind::kUdp;  // kUdp, kVerbsUd or kVerbsRc
  uint32_t rdma_port = 0;          // verbs: the 1-based port number
  uint32_t gid_index = 0;          // verbs: the GID the selector chose
  std::string netdev;              // verbs: the port's network interface ("eth0"); empty = unknown
  // NCCL's ptrSupport bits for the device and why (one INFO line at init).
  int ptr_support = abi::kPtrHost;
  std::string ptr_reason;
  uint32_t segment_bytes = 0;  // MEGASCALE_SEGMENT_BYTES or the MTU's default
  // NCCL v12's railId / planeId: the NIC's rail and network plane, abi::kNetIdUndef (-1) while unknown
  // (older tables drop them). rail_id is the NIC's place in the host's rail order (device_rails.h);
  // plane_id stays unknown.
  int16_t rail_id = abi::kNetIdUndef;
  int16_t plane_id = abi::kNetIdUndef;
};

}  // namespace megascale::nccl
