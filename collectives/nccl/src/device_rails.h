// Each plugin device's NCCL v12 railId from topology's rail map (megascale/topology/rails.h): the place
// of the device's NIC among the rails' NICs, in the order `megascale topo` gives NCCL_IB_HCA, so rail r
// is the r-th NIC NCCL_IB_HCA lists. -1 (abi::kNetIdUndef) for a NIC on no rail (no GPU uses it, the
// host has no GPU) and when the host cannot be read.
//
//   std::string line = assign_rail_ids(devices);  // after find_devices; one INFO line
//   props->railId = devices[dev].rail_id;
//
// Discovery is hwloc's (PCI devices and their OS devices, read from sysfs) with its GPU library
// components off, so no CUDA, NVML or OpenCL library is loaded or initialised at plugin init; GPUs then
// take PCI bus order.
#pragma once

#include <string>
#include <vector>

#include "registry.h"

#if MEGASCALE_NCCL_RAILS
#include "megascale/topology/host.h"
#endif

namespace megascale::nccl {

// Discovers the host and sets every device's rail_id; returns the INFO line that says where the ids came
// from (or why they are unknown) and each device's. Never fails: an unknown rail is -1.
std::string assign_rail_ids(std::vector<Device>& devices);

#if MEGASCALE_NCCL_RAILS
// The same over a given host (a fixture in tests); `source` names it in the returned line.
std::string assign_rail_ids(std::vector<Device>& devices, const topo::host::HostTopology& host,
                            const std::string& source);
#endif

}  // namespace megascale::nccl
