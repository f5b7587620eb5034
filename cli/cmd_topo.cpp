// `megascale topo`: this host's GPUs, NICs, PCIe paths and rails; the NCCL topology file for it.
//
//   megascale topo                                  # the live machine (hwloc): table, rail map, warnings
//   megascale topo --xml /tmp/nccl-topo.xml         # also write an NCCL_TOPO_FILE
//   megascale topo --json topo.json                 # also the model, paths and rails as JSON ('-': stdout)
//   megascale topo --hwloc-xml host.xml             # an exported hwloc XML (lstopo --of xml) instead
//   megascale topo --nccl-xml topo.xml              # an NCCL topology file (NCCL_TOPO_DUMP_FILE) instead
//   megascale topo --rdma-only --rdma-root DIR      # only the RDMA devices, ports and GIDs (no hwloc)
//
// Every form ends with the RDMA section (cmd_topo_rdma.cpp): devices under --rdma-root (default
// SYSFS_ROOT/class/infiniband), their ports, GIDs and the GID the verbs wire would pick.
//
// `topo fabric` and `topo ports` (cmd_topo_fabric.cpp) are children of this command; when one of them
// runs, `topo` itself prints nothing. Bad input files exit with status 2 and name the problem; a host
// that cannot be discovered exits with 1.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "topo_rdma.h"
#include "vocab.h"

#ifdef MEGASCALE_HAVE_TOPO_HOST
#include <fmt/ranges.h>

#include "megascale/topology/host.h"
#include "megascale/topology/nccl_xml.h"
#include "megascale/topology/rails.h"
#endif

namespace megascale::cli {
namespace {

struct TopoOptions {
  std::string xml_out;
  std::string json_path;
  std::string hwloc_xml;
  std::string nccl_xml;
  std::string sysfs_root;
  std::string rdma_root;
  bool rdma_only = false;
};

// Where the RDMA devices are read: --rdma-root, else under --sysfs-root, else the host's.
std::string rdma_root(const TopoOptions& o) {
  if (!o.rdma_root.empty()) return o.rdma_root;
  return (o.sysfs_root.empty() ? std::string("/sys") : o.sysfs_root) + "/class/infiniband";
}

// Prints the RDMA section and puts it into `doc` (when non-null). An unreadable root is an error: bad
// input (2) when the root was given, a failure (1) for the host's own.
int add_rdma(std::FILE* out, const TopoOptions& o, nlohmann::json* doc) {
  Result<nlohmann::json> rdma = print_rdma(out, rdma_root(o), std::getenv);
  if (!rdma) {
    fmt::print(stderr, "megascale topo: {}\n", rdma.error().message);
    return o.rdma_root.empty() && o.sysfs_root.empty() ? kExitFailure : kExitUsage;
  }
  if (doc != nullptr) (*doc)["rdma"] = std::move(*rdma);
  return kExitOk;
}

// --rdma-only: the RDMA section alone, and a document of command, schema_version and rdma.
int run_topo_rdma_only(const TopoOptions& o) {
  if (!o.xml_out.empty() || !o.hwloc_xml.empty() || !o.nccl_xml.empty()) {
    fmt::print(stderr,
               "megascale topo: --rdma-only lists RDMA devices only; it takes no --xml, "
               "--hwloc-xml or --nccl-xml\n");
    return kExitUsage;
  }
  std::FILE* out = vocab::human_stream(o.json_path);
  nlohmann::json doc = vocab::json_document("topo");
  if (int rc = add_rdma(out, o, &doc); rc != kExitOk) return rc;
  if (!o.json_path.empty()) {
    if (Status s = vocab::write_json(o.json_path, doc); !s) {
      fmt::print(stderr, "megascale topo: {}\n", s.error().message);
      return kExitFailure;
    }
    if (o.json_path != "-") fmt::print(out, "wrote {}\n", o.json_path);
  }
  return kExitOk;
}

#ifdef MEGASCALE_HAVE_TOPO_HOST
using namespace megascale::topo::host;
using nlohmann::json;

std::string speed_text(int64_t mbps) {
  if (mbps <= 0) return "-";
  return mbps % 1000 == 0 ? fmt::format("{} Gb/s", mbps / 1000) : fmt::format("{} Mb/s", mbps);
}

std::string pcie_text(const PciDevice& pci) {
  if (pci.link_gts <= 0 || pci.link_width <= 0) return "-";
  // Gen n doubles the rate from Gen3 (8 GT/s) on; Gen1 2.5, Gen2 5.
  const int gen = pci.link_gts < 4    ? 1
                  : pci.link_gts < 6  ? 2
                  : pci.link_gts < 12 ? 3
                  : pci.link_gts < 24 ? 4
                  : pci.link_gts < 48 ? 5
                                      : 6;
  return fmt::format("Gen{} x{}", gen, pci.link_width);
}

std::string numa_text(int numa) {
  return numa < 0 ? "?" : fmt::format("{}", numa);
}

const char* index_source_text(Gpu::IndexSource s) {
  switch (s) {
    case Gpu::IndexSource::kCuda:
      return "cuda";
    case Gpu::IndexSource::kNvml:
      return "nvml";
    case Gpu::IndexSource::kBusOrder:
      return "bus-order";
  }
  return "bus-order";
}

void print_host(std::FILE* out, const HostTopology& host, const RailMap& rails, const std::string& source) {
  fmt::print(out, "host {} ({}): {}{}{}\n", host.hostname.empty() ? "?" : host.hostname, source,
             host.arch.empty() ? "" : host.arch + ", ",
             host.cpu_model.empty() ? host.cpu_vendor : host.cpu_model,
             host.cpu_model.empty() && host.cpu_vendor.empty() ? "CPU unknown" : "");
  fmt::print(out, "  {} NUMA node(s), {} GPU(s), {} NIC(s), {} PCIe switch(es)\n\n", host.numa_nodes.size(),
             host.gpus.size(), host.nics.size(), host.switches.size());

  fmt::print(out, "{:<6}{:<9}{}\n", "NUMA", "socket", "cpus");
  for (const NumaNode& n : host.numa_nodes) {
    fmt::print(out, "{:<6}{:<9}{}\n", n.os_index, n.package < 0 ? "?" : fmt::format("{}", n.package),
               format_cpu_list(n.cpus));
  }

  fmt::print(out, "\n{:<10}{:<14}{:<14}{:<6}{:<10}{:<10}{}\n", "NIC", "netdev", "bus id", "NUMA", "speed",
             "PCIe", "RDMA GIDs");
  for (const Nic& nic : host.nics) {
    std::string gids = nic.rdma_device.empty() ? "(no RDMA device)" : fmt::format("{}", nic.gids.size());
    for (const RoceGid& g : nic.gids) {
      if (g.type == "RoCE v2") {
        gids += fmt::format(", RoCE v2 at index {}", g.index);
        break;
      }
    }
    fmt::print(out, "{:<10}{:<14}{:<14}{:<6}{:<10}{:<10}{}\n", nic.name(),
               nic.netdev.empty() ? "-" : nic.netdev, nic.pci.bus_id.empty() ? "-" : nic.pci.bus_id,
               numa_text(nic.pci.numa_node), speed_text(nic.speed_mbps), pcie_text(nic.pci), gids);
  }
  if (host.nics.empty()) fmt::print(out, "(no NIC found)\n");

  if (host.gpus.empty()) {
    fmt::print(
        out, "\nno GPU found: {} CPU core(s) and {} NIC(s) above; nothing to pair\n",
        [&] {
          size_t n = 0;
          for (const NumaNode& node : host.numa_nodes) n += node.cpus.size();
          return n;
        }(),
        host.nics.size());
  } else {
    fmt::print(out, "\n{:<5}{:<14}{:<26}{:<10}{:<6}{:<6}{}\n", "GPU", "bus id", "name", "best NIC", "path",
               "NUMA", "cores for the NIC's threads");
    for (const Rail& r : rails.rails) {
      const Gpu& gpu = host.gpus[static_cast<size_t>(r.gpu)];
      const std::string nic = r.nic < 0 ? "-" : host.nics[static_cast<size_t>(r.nic)].name();
      fmt::print(out, "{:<5}{:<14}{:<26}{:<10}{:<6}{:<6}{}\n", gpu.cuda_index, gpu.pci.bus_id,
                 gpu.name.substr(0, 25), nic, r.nic < 0 ? "-" : to_string(r.path),
                 numa_text(gpu.pci.numa_node), r.cpu_list.empty() ? "-" : r.cpu_list);
    }
    if (!host.nics.empty()) {
      fmt::print(out, "\nGPU x NIC paths (nvidia-smi topo -m legend: PIX < PXB < PHB < NODE < SYS)\n{:<6}",
                 "");
      for (const Nic& nic : host.nics) fmt::print(out, "{:<9}", nic.name().substr(0, 8));
      fmt::print(out, "\n");
      for (const Gpu& gpu : host.gpus) {
        fmt::print(out, "{:<6}", fmt::format("GPU{}", gpu.cuda_index));
        for (const Nic& nic : host.nics)
          fmt::print(out, "{:<9}", to_string(path_between(host, gpu.pci, nic.pci)));
        fmt::print(out, "\n");
      }
    }
    fmt::print(out, "\nrail map: {}\n",
               rails.rail_optimized ? "rail-optimised (every GPU has a NIC of its own at PIX/PXB)"
                                    : "NOT rail-optimised");
    for (size_t i = 0; i < rails.rails.size(); ++i) {
      const Rail& r = rails.rails[i];
      if (r.nic < 0) continue;
      fmt::print(out, "  rail {}: GPU{} -> {} ({}, NUMA {})\n", i,
                 host.gpus[static_cast<size_t>(r.gpu)].cuda_index,
                 host.nics[static_cast<size_t>(r.nic)].name(), to_string(r.path), numa_text(r.numa_node));
    }
    const std::string hca = nccl_ib_hca(host, rails);
    if (!hca.empty()) fmt::print(out, "  NCCL_IB_HCA='{}'\n", hca);
  }
  if (!rails.warnings.empty()) {
    fmt::print(out, "\nwarnings:\n");
    for (const RailWarning& w : rails.warnings) fmt::print(out, "  ! {}\n", w.message);
  }
}

json pci_json(const PciDevice& pci) {
  return {{"bus_id", pci.bus_id},
          {"class", fmt::format("0x{:06x}", pci.class_code)},
          {"vendor", fmt::format("0x{:04x}", pci.vendor_id)},
          {"device", fmt::format("0x{:04x}", pci.device_id)},
          {"link_gtps", pci.link_gts},
          {"link_width", pci.link_width},
          {"numa_node", pci.numa_node},
          {"switches", pci.switches}};
}

json host_json(const HostTopology& host, const RailMap& rails, const std::string& source) {
  json doc = vocab::json_document("topo");
  doc.update({{"source", source},
              {"hostname", host.hostname},
              {"arch", host.arch},
              {"cpu_vendor", host.cpu_vendor},
              {"cpu_model", host.cpu_model},
              {"cpu_family", host.cpu_family},
              {"cpu_model_number", host.cpu_model_number}});
  doc["numa_nodes"] = json::array();
  for (const NumaNode& n : host.numa_nodes) {
    doc["numa_nodes"].push_back({{"os_index", n.os_index},
                                 {"package", n.package},
                                 {"cpus", format_cpu_list(n.cpus)},
                                 {"cpu_count", n.cpus.size()}});
  }
  doc["gpus"] = json::array();
  for (const Gpu& g : host.gpus) {
    doc["gpus"].push_back({{"cuda_index", g.cuda_index},
                           {"index_source", index_source_text(g.index_source)},
                           {"name", g.name},
                           {"pci", pci_json(g.pci)}});
  }
  doc["nics"] = json::array();
  for (const Nic& n : host.nics) {
    json gids = json::array();
    for (const RoceGid& g : n.gids)
      gids.push_back({{"port", g.port}, {"index", g.index}, {"gid", g.gid}, {"type", g.type}});
    doc["nics"].push_back({{"name", n.name()},
                           {"rdma_device", n.rdma_device},
                           {"netdev", n.netdev},
                           {"port", n.port},
                           {"speed_gbps", n.speed_mbps > 0 ? static_cast<double>(n.speed_mbps) / 1000 : 0.0},
                           {"link_layer", n.link_layer},
                           {"node_guid", n.node_guid == 0 ? "" : fmt::format("0x{:016x}", n.node_guid)},
                           {"gids", gids},
                           {"pci", pci_json(n.pci)}});
  }
  doc["switches"] = json::array();
  for (const PcieSwitch& s : host.switches) doc["switches"].push_back(pci_json(s.pci));
  // paths[g][n]: GPU g (gpus order) to NIC n (nics order).
  doc["paths"] = json::array();
  for (const Gpu& g : host.gpus) {
    json row = json::array();
    for (const Nic& n : host.nics) row.push_back(to_string(path_between(host, g.pci, n.pci)));
    doc["paths"].push_back(row);
  }
  doc["rails"] = json::array();
  for (const Rail& r : rails.rails) {
    doc["rails"].push_back({{"gpu", r.gpu},
                            {"nic", r.nic},
                            {"nic_name", r.nic < 0 ? "" : host.nics[static_cast<size_t>(r.nic)].name()},
                            {"path", r.nic < 0 ? "" : std::string(to_string(r.path))},
                            {"numa_node", r.numa_node},
                            {"cpus", r.cpu_list}});
  }
  doc["rail_optimized"] = rails.rail_optimized;
  doc["nccl_ib_hca"] = nccl_ib_hca(host, rails);
  doc["warnings"] = json::array();
  for (const RailWarning& w : rails.warnings) doc["warnings"].push_back(w.message);
  return doc;
}

int run_topo(const TopoOptions& o) {
  if (!o.hwloc_xml.empty() && !o.nccl_xml.empty()) {
    fmt::print(stderr, "megascale topo: --hwloc-xml and --nccl-xml are alternatives; give one\n");
    return kExitUsage;
  }
  Result<HostTopology> host = make_error("unreachable");
  std::string source;
  if (!o.hwloc_xml.empty()) {
    host = load_hwloc_xml(o.hwloc_xml, {.sysfs_root = o.sysfs_root});
    source = "hwloc XML " + o.hwloc_xml;
  } else if (!o.nccl_xml.empty()) {
    host = read_nccl_topo_xml(o.nccl_xml);
    source = "NCCL XML " + o.nccl_xml;
  } else {
    host = discover_host({.sysfs_root = o.sysfs_root.empty() ? "/sys" : o.sysfs_root});
    source = "live, hwloc";
  }
  if (!host) {
    fmt::print(stderr, "megascale topo: {}\n", host.error().message);
    return o.hwloc_xml.empty() && o.nccl_xml.empty() ? kExitFailure : kExitUsage;
  }
  const RailMap rails = map_rails(*host);
  std::FILE* out = vocab::human_stream(o.json_path);
  print_host(out, *host, rails, source);
  json doc = host_json(*host, rails, source);
  if (int rc = add_rdma(out, o, &doc); rc != kExitOk) return rc;
  if (!o.xml_out.empty()) {
    if (Status s = write_nccl_topo_xml(*host, o.xml_out); !s) {
      fmt::print(stderr, "megascale topo: {}\n", s.error().message);
      return kExitUsage;
    }
    fmt::print(out, "\nwrote NCCL topology file {} (use NCCL_TOPO_FILE={})\n", o.xml_out, o.xml_out);
  }
  if (!o.json_path.empty()) {
    if (Status s = vocab::write_json(o.json_path, doc); !s) {
      fmt::print(stderr, "megascale topo: {}\n", s.error().message);
      return kExitFailure;
    }
    if (o.json_path != "-") fmt::print(out, "wrote {}\n", o.json_path);
  }
  return kExitOk;
}
#else
int run_topo(const TopoOptions&) {
  fmt::print(
      stderr,
      "megascale topo: host discovery needs hwloc, which was not found when megascale was built "
      "(apt-get install libhwloc-dev, then reconfigure); `topo --rdma-only`, `topo fabric` and `topo ports` "
      "work without it\n");
  return kExitFailure;
}
#endif

}  // namespace

void add_topo_command(CLI::App& app) {
  CLI::App* topo = app.add_subcommand("topo", "host topology, rails, NCCL topology XML, fabric model");
  auto o = std::make_shared<TopoOptions>();
  topo->add_option("--xml", o->xml_out, "Write the host's NCCL topology file (NCCL_TOPO_FILE) here")
      ->type_name("FILE");
  vocab::json(topo, o->json_path,
              "Also write the host model, GPU x NIC paths and rails as JSON to FILE ('-': standard output, "
              "the table then goes to standard error); docs/CLI.md has the schema");
  topo->add_option("--hwloc-xml", o->hwloc_xml,
                   "Read an hwloc XML export (lstopo --of xml) instead of this host")
      ->check(CLI::ExistingFile);
  topo->add_option("--nccl-xml", o->nccl_xml, "Read an NCCL topology XML (e.g. NCCL_TOPO_DUMP_FILE) instead")
      ->check(CLI::ExistingFile);
  topo->add_option(
      "--sysfs-root", o->sysfs_root,
      "Read NIC speed, GIDs and PCIe links from this sysfs tree (default /sys live, none for XML)");
  topo->add_option("--rdma-root", o->rdma_root,
                   "Read RDMA devices, ports and GIDs from this folder (default SYSFS_ROOT/class/infiniband, "
                   "/sys/class/infiniband live)")
      ->type_name("DIR");
  topo->add_flag("--rdma-only", o->rdma_only,
                 "List only the RDMA devices, ports, GIDs and the verbs wire's GID choice (needs no hwloc)");
  add_topo_fabric_commands(*topo);
  topo->callback([o, topo] {
    // A child (`topo fabric`, `topo ports`) ran: it has set the exit code, the host table is not wanted.
    if (!topo->get_subcommands().empty()) return;
    exit_code() = o->rdma_only ? run_topo_rdma_only(*o) : run_topo(*o);
  });
}

}  // namespace megascale::cli
