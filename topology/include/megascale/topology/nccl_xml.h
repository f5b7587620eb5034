// NCCL topology XML: write the host as an NCCL_TOPO_FILE and read one (NCCL's own dump included) back
// into the host model.
//
//   auto host = megascale::topo::host::discover_host();
//   megascale::topo::host::write_nccl_topo_xml(*host, "/tmp/topo.xml");   // NCCL_TOPO_FILE=/tmp/topo.xml
//   auto back = megascale::topo::host::read_nccl_topo_xml("/tmp/topo.xml");
//
// The format (NCCL src/graph/xml.cc, topo.cc):
//   <system version="1">
//     <cpu numaid="0" affinity="ffffffff,..." arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
//       <pci busid="0000:16:00.0" class="0x060400" vendor=... link_speed="32.0 GT/s PCIe" link_width="16">
//         <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" .../>                    a GPU
//         <pci busid="0000:19:00.0" class="0x020000" ...><nic><net name="mlx5_0" dev="0"
//              speed="400000" port="1" guid="0x..."/></nic></pci>                              a NIC
// A PCIe switch is one <pci> (its upstream port), as NCCL writes it. What is written and what is not:
// - GPUs get no <gpu> child: NCCL fills dev/sm/gdr/rank itself for the GPUs it opens, and a <gpu>
//   without "rank" would be skipped anyway (topo.cc ncclTopoAddPci).
// - <net> gets name, dev, port, and speed (Mbps) / guid where known; NCCL keeps file values over what
//   it detects for speed, port and guid, and rewrites dev. gdr, latency and maxconn are left to NCCL.
// - link_speed/link_width are written where known; NCCL fills missing ones from sysfs.
// - Host bridges have no element in NCCL's format: reading a file back, each top-level <pci> of a <cpu>
//   is taken as its own host bridge, so a PHB pair (two root ports of one root complex) reads back as
//   NODE. NCCL calls both PHB.
#pragma once

#include <string>
#include <string_view>

#include "megascale/common/result.h"
#include "megascale/topology/host.h"

namespace megascale::topo::host {

// The NCCL topology XML of `host`: GPUs and NICs with the switches above them, under one <cpu> per
// NUMA node that holds any (devices of unknown NUMA node go under the only NUMA node, else under
// numaid -1, and then every NUMA node is written, so that the file reads back the same).
std::string nccl_topo_xml(const HostTopology& host);
// Writes nccl_topo_xml(host) to `path`; an error names the path.
Status write_nccl_topo_xml(const HostTopology& host, const std::string& path);

// Reads an NCCL topology XML (parsed by tinyxml2). `source` names the file in errors. Errors name the
// line and the element or attribute: malformed XML (tinyxml2's finding, at the line of the element at
// fault), a root that is not <system> (an hwloc XML is recognised and named), a missing or unsupported
// version, a <pci> without a valid busid or class or with a busid given twice, a <cpu> without numaid.
// A display-class <pci> is a GPU when it is NVIDIA's or gives no vendor. GPUs get cuda_index from
// <gpu dev="N"> when present (NCCL's dev is NVML's index), else bus order.
Result<HostTopology> parse_nccl_topo_xml(std::string_view text,
                                         std::string_view source = "NCCL topology XML");
Result<HostTopology> read_nccl_topo_xml(const std::string& path);

}  // namespace megascale::topo::host
