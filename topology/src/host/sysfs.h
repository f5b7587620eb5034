// What hwloc leaves out of a NIC or PCI device, read from sysfs (Linux). Every reader is optional: a
// missing file leaves the field as it was. Internal to megascale_topology_host.
#pragma once

#include <string>

#include "megascale/topology/host.h"

namespace megascale::topo::host::sysfs {

// Link speed (ports/<port>/rate, else class/net/<netdev>/speed), link layer, GIDs with their types, and
// the netdev when hwloc gave none; `root` is the sysfs mount ("/sys", or a test tree).
void fill_nic(const std::string& root, Nic& nic);

// PCIe link rate and width (max_link_speed/_width, else current_*) and the NUMA node when hwloc gave none.
void fill_pci(const std::string& root, PciDevice& pci);

// "400 Gb/sec (4X NDR)" -> 400000 (Mbps); 0 when it does not parse.
int64_t parse_ib_rate_mbps(const std::string& rate);
// "32.0 GT/s PCIe" or "32 GT/s" -> 32; 0 when it does not parse.
double parse_link_speed_gts(const std::string& text);

}  // namespace megascale::topo::host::sysfs
