// Plugin devices -> rail ids (see device_rails.h).
#include "device_rails.h"

#include <chrono>
#include <cstdio>

#if MEGASCALE_NCCL_RAILS
#include "megascale/topology/rails.h"
#endif

namespace megascale::nccl {

#if MEGASCALE_NCCL_RAILS
std::string assign_rail_ids(std::vector<Device>& devices, const topo::host::HostTopology& host,
                            const std::string& source) {
  const topo::host::RailMap rails = topo::host::map_rails(host);
  std::string line = "rail ids from the host's rail map (" + source + "):";
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& d = devices[i];
    topo::host::NicKey key;
    if (is_verbs(d.wire)) {
      key.rdma_device = d.iface.name;
      key.netdev = d.netdev;
    } else {
      key.netdev = d.iface.name;
    }
    key.pci_path = d.iface.pci_path;
    const topo::host::RailAssignment a = topo::host::rail_of(host, rails, key);
    d.rail_id = static_cast<int16_t>(a.rail_id >= 0 ? a.rail_id : abi::kNetIdUndef);
    line += " [" + std::to_string(i) + "]" + d.iface.name + " rail " + std::to_string(d.rail_id);
    if (!a.reason.empty()) line += " (" + a.reason + ")";
  }
  return line;
}

std::string assign_rail_ids(std::vector<Device>& devices) {
  for (Device& d : devices) d.rail_id = abi::kNetIdUndef;
  const auto start = std::chrono::steady_clock::now();
  auto host = topo::host::discover_host({.sysfs_root = "/sys", .gpu_libraries = false});
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  char took[64];
  std::snprintf(took, sizeof took, "hwloc, %.1f ms", ms);
  if (!host) return "rail ids unknown (-1): host discovery failed: " + host.error().message;
  return assign_rail_ids(devices, *host, took);
}
#else
std::string assign_rail_ids(std::vector<Device>& devices) {
  for (Device& d : devices) d.rail_id = abi::kNetIdUndef;
  return "rail ids unknown (-1): this plugin was built without hwloc (no host discovery)";
}
#endif

}  // namespace megascale::nccl
